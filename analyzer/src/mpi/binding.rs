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

use gimli::{CfaRule, UnwindContext, X86_64};
use object::{Object as _, ObjectSegment as _, ObjectSymbol as _};
use tracer_common::{cfi::CfiSections, record::FRAME_WORDS};

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

/// Resolves [`BindingFrame`]s, caching objects and lookups.
#[derive(Default)]
pub struct BindingFrames {
    /// Object path → its segments, unwind sections and `MPI_*` functions
    /// (`None`: unreadable).
    objects: HashMap<String, Option<BindingObject>>,
    /// Object path → file offset of a return address → its step.
    steps: HashMap<String, HashMap<u64, Option<Step>>>,
    ctx: UnwindContext<usize>,
}

/// What a binding object gives: where its segments are, its call frame
/// information, and its functions that stand for an `MPI_*` call (start,
/// size, name).
struct BindingObject {
    segments: Vec<(u64, u64, u64)>,
    cfi: CfiSections,
    functions: Vec<(u64, u64, Rc<str>)>,
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
        let object = self
            .objects
            .entry(path.to_string())
            .or_insert_with(|| read_object(path));
        let step = object
            .as_ref()
            .and_then(|o| o.step(&mut self.ctx, file_offset));
        self.steps
            .entry(path.to_string())
            .or_default()
            .insert(file_offset, step.clone());
        step
    }
}

/// The binding object at `path` (from a capture: untrusted): headers and
/// the sections needed are read, the unwind sections bounded by
/// [`tracer_common::cfi::MAX_CFI_BYTES`].
fn read_object(path: &str) -> Option<BindingObject> {
    let file = std::fs::File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let cache = object::ReadCache::new(file);
    let file = object::File::parse(&cache).ok()?;
    let segments = file
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (off, size, s.address())
        })
        .collect();
    // Dynamic symbols too: binding libraries are usually stripped.
    let functions = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .filter_map(|s| {
            let name = wrapper_name(s.name().ok()?, &[])?;
            Some((s.address(), s.size(), Rc::from(name)))
        })
        .collect();
    Some(BindingObject {
        segments,
        cfi: CfiSections::of(&file),
        functions,
    })
}

impl BindingObject {
    /// The step at the return address at `file_offset`.
    fn step(&self, ctx: &mut UnwindContext<usize>, file_offset: u64) -> Option<Step> {
        let vaddr = self.segments.iter().find_map(|&(off, size, addr)| {
            (file_offset >= off && file_offset - off < size)
                .then(|| addr.checked_add(file_offset - off))
                .flatten()
        })?;
        // The call instruction's row: a return address may be the first
        // instruction of the next function's CFI.
        let row = self.cfi.row(ctx, vaddr.checked_sub(1)?)?;
        let cfa_offset = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } if *register == X86_64::RSP => {
                u64::try_from(*offset).ok()?
            }
            _ => return None,
        };
        let name = self
            .functions
            .iter()
            .find(|(start, size, _)| *start <= vaddr && vaddr - start < *size)
            .map(|(_, _, name)| name.clone());
        Some(Step { cfa_offset, name })
    }
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
