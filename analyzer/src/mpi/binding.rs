//! Calls made through a language binding (Fortran's `mpi_send_` in
//! `libmpichfort.so`), seen from the C function they call.
//!
//! `tracer record --mpi` probes only the C `MPI_*` functions; an entry
//! whose return address lies outside the main executable's text carries
//! the top of the stack ([`Frame`], 32 words from the stack pointer). When
//! that return address is in a binding library, the binding's own return
//! address, into the program, is found by the binding's call frame
//! information (`.eh_frame`, read from the object file at analysis time):
//! at the C call's return address `R` the binding's frame address is
//! `CFA = rsp + 8 + K` (`rsp` the C function's stack pointer at entry), and
//! the program's call site is the word at `CFA - 8`. A binding that calls
//! through another binding (`use mpi_f08` wrappers) is stepped through the
//! same way, as long as the words last.
//!
//! Nothing here scans the stack for plausible addresses: a word is taken
//! only where the CFI says a return address is. When the object file is
//! missing or its CFI does not give the frame (an expression rule, an
//! offset beyond the words kept), no site is found and the caller keeps
//! the binding's address as the call site. The object file must be the
//! one the ranks ran (the capture stores no build id for objects it does
//! not probe).

use std::{collections::HashMap, rc::Rc};

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, UnwindContext, UnwindSection as _,
    X86_64,
};
use object::{Object as _, ObjectSection as _, ObjectSegment as _, ObjectSymbol as _};
use tracer_common::record::FRAME_WORDS;

use super::args::wrapper_name;
use crate::decode::{Frame, Symbolizer};

/// File names (up to their version) of the MPI language-binding libraries:
/// MPICH's Fortran bindings (`libmpichfort`, older `libfmpich`) and Open
/// MPI's (`mpif.h`, `use mpi`, `use mpi_f08`).
pub const BINDING_OBJECTS: &[&str] = &[
    "libmpichfort.so",
    "libfmpich.so",
    "libmpi_mpifh.so",
    "libmpi_usempi.so",
    "libmpi_usempi_ignore_tkr.so",
    "libmpi_usempif08.so",
];

/// Most binding frames stepped through (a wrapper calling a wrapper).
const MAX_HOPS: usize = 4;

/// Whether `path` is one of the [`BINDING_OBJECTS`].
pub fn is_binding_object(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    BINDING_OBJECTS.iter().any(|b| base.starts_with(b))
}

/// A C call made by a binding, placed in the program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingFrame {
    /// The program's call site: the return address of the outermost
    /// binding frame (the first frame outside the bindings).
    pub site: u64,
    /// The outermost binding frame's address (its CFA): with `site`, which
    /// binding call this C call belongs to.
    pub cfa: u64,
    /// The C call's return address, inside the binding: it moves forward
    /// from one C call of a binding call to the next.
    pub ret: u64,
    /// The `MPI_*` name the outermost binding stands for, when its symbol
    /// is known.
    pub name: Option<Rc<str>>,
}

/// What an object's CFI and symbols say at one return address.
#[derive(Clone)]
struct Step {
    /// `K`: CFA = stack pointer after the return + `K`.
    cfa_offset: u64,
    /// The `MPI_*` name of the function holding the address.
    name: Option<Rc<str>>,
}

/// Resolves [`BindingFrame`]s, caching object files and lookups.
#[derive(Default)]
pub struct BindingFrames {
    /// Object path → its file's bytes (`None`: unreadable).
    files: HashMap<String, Option<Vec<u8>>>,
    /// Object path → file offset of a return address → its step.
    steps: HashMap<String, HashMap<u64, Option<Step>>>,
}

impl BindingFrames {
    /// The binding frame of a C call of process `pid` whose entry kept
    /// `frame`; `None` when the call was not made by a binding or its
    /// frame cannot be found.
    pub fn resolve(
        &mut self,
        symbolizer: &Symbolizer<'_>,
        pid: u32,
        frame: &Frame,
    ) -> Option<BindingFrame> {
        let ret = frame.words[0];
        let mut idx = 0usize;
        let mut found: Option<(u64, u64, Option<Rc<str>>)> = None;
        for _ in 0..MAX_HOPS {
            let addr = frame.words[idx];
            let Some(place) = symbolizer.user_object(pid, addr) else {
                break;
            };
            if !is_binding_object(place.object) {
                break;
            }
            let step = place
                .file_offset
                .and_then(|off| self.step(place.object, off))?;
            // The binding's stack pointer once the call at word `idx`
            // returns is `sp + 8 * (idx + 1)`; its return address is at
            // CFA - 8, word `idx + K / 8`.
            if step.cfa_offset < 8 || step.cfa_offset % 8 != 0 {
                return None;
            }
            let next = idx.checked_add(usize::try_from(step.cfa_offset / 8).ok()?)?;
            if next >= FRAME_WORDS {
                return None;
            }
            let cfa = frame
                .sp
                .checked_add(8 * (idx as u64 + 1))?
                .checked_add(step.cfa_offset)?;
            found = Some((frame.words[next], cfa, step.name));
            idx = next;
        }
        let (site, cfa, name) = found?;
        Some(BindingFrame {
            site,
            cfa,
            ret,
            name,
        })
    }

    fn step(&mut self, path: &str, file_offset: u64) -> Option<Step> {
        if let Some(s) = self.steps.get(path).and_then(|m| m.get(&file_offset)) {
            return s.clone();
        }
        let data = self
            .files
            .entry(path.to_string())
            .or_insert_with(|| read_object(path));
        let step = data.as_deref().and_then(|d| step_in(d, file_offset));
        self.steps
            .entry(path.to_string())
            .or_default()
            .insert(file_offset, step.clone());
        step
    }
}

/// Largest object file read (the path comes from a capture: untrusted).
const MAX_OBJECT_BYTES: u64 = 256 << 20;

/// The bytes of the regular file at `path`, if it is one of at most
/// [`MAX_OBJECT_BYTES`].
fn read_object(path: &str) -> Option<Vec<u8>> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_OBJECT_BYTES {
        return None;
    }
    std::fs::read(path).ok()
}

/// The step at the return address at `file_offset` of the ELF file `data`.
fn step_in(data: &[u8], file_offset: u64) -> Option<Step> {
    let file = object::File::parse(data).ok()?;
    let vaddr = file.segments().find_map(|s| {
        let (off, size) = s.file_range();
        (file_offset >= off && file_offset - off < size)
            .then(|| s.address().checked_add(file_offset - off))
            .flatten()
    })?;
    // The call instruction's row: a return address may be the first
    // instruction of the next function's CFI.
    let at = vaddr.checked_sub(1)?;
    let section = file.section_by_name(".eh_frame")?;
    let mut eh_frame = EhFrame::new(section.data().ok()?, LittleEndian);
    eh_frame.set_address_size(8);
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    let mut ctx = Box::new(UnwindContext::new());
    let hdr = file.section_by_name(".eh_frame_hdr").and_then(|h| {
        let bytes = h.data().ok()?;
        bases = bases.clone().set_eh_frame_hdr(h.address());
        EhFrameHdr::new(bytes, LittleEndian).parse(&bases, 8).ok()
    });
    let row = match hdr.as_ref().and_then(|h| h.table()) {
        Some(table) => table
            .unwind_info_for_address(&eh_frame, &bases, &mut ctx, at, |s, b, o| {
                s.cie_from_offset(b, o)
            })
            .ok()?,
        None => eh_frame
            .unwind_info_for_address(&bases, &mut ctx, at, EhFrame::cie_from_offset)
            .ok()?,
    };
    let cfa_offset = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } if *register == X86_64::RSP => {
            u64::try_from(*offset).ok()?
        }
        _ => return None,
    };
    Some(Step {
        cfa_offset,
        name: function_name(&file, vaddr).map(Rc::from),
    })
}

/// The `MPI_*` name of the function of `file` holding `vaddr`, from its
/// symbols (dynamic ones too: binding libraries are usually stripped).
fn function_name(file: &object::File<'_>, vaddr: u64) -> Option<String> {
    file.symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| {
            s.kind() == object::SymbolKind::Text
                && s.address() <= vaddr
                && vaddr - s.address() < s.size()
        })
        .find_map(|s| wrapper_name(s.name().ok()?, &[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_objects_are_known_by_their_file_names() {
        assert!(is_binding_object(
            "/usr/lib/x86_64-linux-gnu/libmpichfort.so.12.2.0"
        ));
        assert!(is_binding_object("/opt/ompi/lib/libmpi_usempif08.so.40"));
        assert!(!is_binding_object(
            "/usr/lib/x86_64-linux-gnu/libmpich.so.12"
        ));
        assert!(!is_binding_object("/work/mpi_wavefront"));
    }
}
