//! Source locations of code addresses: the function, file and line, and the
//! functions inlined there, from DWARF, with separate debug files found by
//! build id or `.gnu_debuglink` ([`tracer_common::debugfile`]).
//!
//! A capture holds each object's symbol table (names) but no DWARF: lines
//! are resolved at analysis time from the files present on this machine,
//! and only from files of the build the capture recorded (same GNU build
//! id), so a binary rebuilt since never lends its lines to an old capture.
//! Where no such file is found, the capture's own table still names the
//! function and the frame has no file or line; [`SourceLines::missing`]
//! says which objects had no line information and why.
//!
//! DWARF is read by [blazesym](https://github.com/libbpf/blazesym) (libbpf's
//! symbolizer): line tables, inlined subroutines, compressed sections,
//! demangling.
//!
//! ```no_run
//! # use analyzer::{Capture, Symbolizer, debuginfo::{SourceLines, AddressKind}};
//! # fn f(capture: &Capture, pid: u32, call_site: u64) {
//! let symbols = Symbolizer::new(capture);
//! let mut lines = SourceLines::new(&[]);
//! for frame in lines.frames_at(&symbols, pid, call_site, AddressKind::Return).iter() {
//!     println!("{frame}"); // MPI_Send at stencil.c:42 (inlined into exchange)…
//! }
//! # }
//! ```

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    path::{Path, PathBuf},
    rc::Rc,
};

use blazesym::symbolize::{
    CodeInfo, Input, Symbolized, Symbolizer as Blazesym,
    source::{Elf, Source},
};
use object::{Object as _, ObjectSection as _, read::ReadCache};
use serde::{Deserialize, Serialize};
use tracer_common::{
    capture::ObjectSymbols,
    debugfile::{self, DebugLink},
};

use crate::decode::{Symbolizer, locate_in};

/// One frame at an address: a function, and where in its source the
/// address is. At an address inside inlined code there are several, the
/// innermost (the inlined function) first, the function the code was
/// compiled into last.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// Function name (demangled where DWARF gives it).
    pub function: String,
    /// Source file (as DWARF names it, with its directory), when known.
    pub file: Option<String>,
    /// Line in `file`, when known.
    pub line: Option<u32>,
    /// Column, when known.
    pub column: Option<u16>,
    /// This frame was inlined into the next one.
    pub inlined: bool,
}

impl Frame {
    /// `file:line` with the file's base name (`calls.c:42`), when known.
    pub fn file_line(&self) -> Option<String> {
        let file = self.file.as_deref()?;
        let base = file.rsplit('/').next().unwrap_or(file);
        Some(match self.line {
            Some(line) => format!("{base}:{line}"),
            None => base.to_string(),
        })
    }
}

impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.function)?;
        if let Some(fl) = self.file_line() {
            write!(f, " at {fl}")?;
        }
        if self.inlined {
            write!(f, " (inlined)")?;
        }
        Ok(())
    }
}

/// What an address is, for the line lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressKind {
    /// The address of an instruction (a sample's IP, a function's entry).
    Instruction,
    /// A return address (a call site as a uprobe reads it): the call is
    /// the instruction before it, so its line is looked up one byte back.
    Return,
}

/// Which file gives an object's lines.
#[derive(Clone, Debug)]
enum Found {
    /// This ELF file (the object itself, or its debug file).
    Lines(PathBuf),
    /// No line information, and why.
    Missing(String),
}

/// Resolves object addresses to [`Frame`]s, caching files and answers.
pub struct SourceLines {
    blazesym: Blazesym,
    debug_dirs: Vec<PathBuf>,
    /// By object path and build id.
    found: HashMap<(String, Option<String>), Found>,
    /// By (object path, object address).
    cache: HashMap<(String, u64), Rc<[Frame]>>,
}

impl fmt::Debug for SourceLines {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceLines")
            .field("debug_dirs", &self.debug_dirs)
            .field("objects", &self.found.len())
            .field("cached", &self.cache.len())
            .finish()
    }
}

/// The GNU build id of the ELF file at `path`, hex, reading only what it
/// needs; `None` when unreadable or absent.
fn build_id_of(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let cache = ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    let id = elf.build_id().ok().flatten()?;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether the ELF file at `path` has DWARF line information of its own.
fn has_dwarf(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let cache = ReadCache::new(file);
    object::File::parse(&cache).is_ok_and(|elf| {
        elf.section_by_name(".debug_line")
            .is_some_and(|s| s.size() > 0 && s.kind() != object::SectionKind::UninitializedData)
    })
}

impl SourceLines {
    /// A resolver searching `extra` debug directories before
    /// `$EFTRACE_DEBUG_DIRS` and `/usr/lib/debug`.
    pub fn new(extra: &[PathBuf]) -> Self {
        let debug_dirs = debugfile::debug_dirs(extra);
        let blazesym = Blazesym::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .enable_demangling(true)
            .set_debug_dirs(Some(&debug_dirs))
            .build();
        Self {
            blazesym,
            debug_dirs,
            found: HashMap::new(),
            cache: HashMap::new(),
        }
    }

    /// The debug directories searched.
    pub fn debug_dirs(&self) -> &[PathBuf] {
        &self.debug_dirs
    }

    /// Finds the file with `object`'s lines (see the module doc).
    fn find(&self, object: &ObjectSymbols) -> Found {
        let Some(build_id) = object.build_id.as_deref() else {
            return Found::Missing(
                "the capture recorded no build id: the file on disk cannot be told from a rebuild"
                    .into(),
            );
        };
        let path = Path::new(&object.path);
        let same = |p: &Path| build_id_of(p).is_some_and(|id| id.eq_ignore_ascii_case(build_id));
        let on_disk = path.is_file() && same(path);
        // The object itself, when it carries DWARF.
        if on_disk && has_dwarf(path) {
            return Found::Lines(path.to_path_buf());
        }
        // Its separate debug file, by build id or debug link.
        let link: Option<&DebugLink> = object.debug_link.as_ref();
        let mut check = |p: &Path| same(p);
        if let Some(debug) =
            debugfile::find(path, Some(build_id), link, &self.debug_dirs, &mut check)
        {
            return Found::Lines(debug);
        }
        if on_disk {
            return Found::Missing(format!(
                "{} has no DWARF and no debug file was found (by build id {build_id} under {}{})",
                object.path,
                self.dirs_text(),
                link.map(|l| format!(", or as {}", l.name))
                    .unwrap_or_default()
            ));
        }
        if path.is_file() {
            return Found::Missing(format!(
                "{} on this machine is another build than the one recorded (build id {build_id}), \
                 and no debug file of that build was found",
                object.path
            ));
        }
        Found::Missing(format!(
            "{} is not on this machine and no debug file of build {build_id} was found under {}",
            object.path,
            self.dirs_text()
        ))
    }

    fn dirs_text(&self) -> String {
        self.debug_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn found(&mut self, object: &ObjectSymbols) -> &Found {
        let key = (object.path.clone(), object.build_id.clone());
        if !self.found.contains_key(&key) {
            let found = self.find(object);
            self.found.insert(key.clone(), found);
        }
        &self.found[&key]
    }

    /// The frames at object address `vaddr` (as the object's ELF file
    /// numbers it) of `object`, innermost first; never empty. Without line
    /// information the one frame is the capture's symbol (or
    /// `object+0xaddr`), with no file.
    pub fn frames(&mut self, object: &ObjectSymbols, vaddr: u64, kind: AddressKind) -> Rc<[Frame]> {
        let lookup = match kind {
            AddressKind::Instruction => vaddr,
            AddressKind::Return => vaddr.saturating_sub(1),
        };
        let key = (object.path.clone(), lookup);
        if let Some(frames) = self.cache.get(&key) {
            return Rc::clone(frames);
        }
        let frames: Rc<[Frame]> = match self.found(object).clone() {
            Found::Lines(file) => self
                .dwarf_frames(&file, lookup)
                .unwrap_or_else(|| vec![table_frame(object, vaddr)]),
            Found::Missing(_) => vec![table_frame(object, vaddr)],
        }
        .into();
        self.cache.insert(key, Rc::clone(&frames));
        frames
    }

    /// The frames at offset `file_offset` of `object`'s file (a uprobe's
    /// attach offset, a `perf` sample's offset), placed with the object's
    /// segments as the capture recorded them; `None` when no segment holds
    /// the offset.
    pub fn frames_at_offset(
        &mut self,
        object: &ObjectSymbols,
        file_offset: u64,
        kind: AddressKind,
    ) -> Option<Rc<[Frame]>> {
        let vaddr = tracer_common::decode::segment_vaddr(object, file_offset)?;
        Some(self.frames(object, vaddr, kind))
    }

    /// The frames at user address `addr` of process `pid` in a capture,
    /// innermost first. Addresses outside every known object give one
    /// frame named by [`Symbolizer::user`] (or the bare address).
    pub fn frames_at(
        &mut self,
        symbols: &Symbolizer<'_>,
        pid: u32,
        addr: u64,
        kind: AddressKind,
    ) -> Rc<[Frame]> {
        let placed = symbols.user_object(pid, addr);
        if let Some(placed) = placed
            && let (Some(table), Some(vaddr)) = (placed.table, placed.vaddr)
        {
            return self.frames(table, vaddr, kind);
        }
        let function = symbols.user(pid, addr).map_or_else(
            || format!("{addr:#x}"),
            |l| l.symbol.map_or_else(|| l.to_string(), str::to_string),
        );
        vec![Frame {
            function,
            file: None,
            line: None,
            column: None,
            inlined: false,
        }]
        .into()
    }

    /// Objects asked about that had no line information, with the reason.
    pub fn missing(&self) -> BTreeMap<String, String> {
        self.found
            .iter()
            .filter_map(|((path, _), f)| match f {
                Found::Missing(why) => Some((path.clone(), why.clone())),
                Found::Lines(_) => None,
            })
            .collect()
    }

    /// [`SourceLines::missing`] as notes for the user: `no source lines for
    /// OBJECT: why`.
    pub fn missing_notes(&self) -> Vec<String> {
        self.missing()
            .into_iter()
            .map(|(object, why)| format!("no source lines for {object}: {why}"))
            .collect()
    }

    /// Frames from DWARF, or `None` when the file has nothing for `vaddr`.
    fn dwarf_frames(&self, file: &Path, vaddr: u64) -> Option<Vec<Frame>> {
        let src = Source::Elf(Elf::new(file));
        let sym = match self
            .blazesym
            .symbolize_single(&src, Input::VirtOffset(vaddr))
        {
            Ok(Symbolized::Sym(sym)) => sym,
            Ok(Symbolized::Unknown(_)) | Err(_) => return None,
        };
        let place = |c: Option<&CodeInfo<'_>>| -> (Option<String>, Option<u32>, Option<u16>) {
            match c {
                Some(c) => (Some(c.to_path().display().to_string()), c.line, c.column),
                None => (None, None, None),
            }
        };
        let mut frames = Vec::with_capacity(sym.inlined.len() + 1);
        for f in sym.inlined.iter().rev() {
            let (file, line, column) = place(f.code_info.as_ref());
            frames.push(Frame {
                function: f.name.to_string(),
                file,
                line,
                column,
                inlined: true,
            });
        }
        let (file, line, column) = place(sym.code_info.as_deref());
        frames.push(Frame {
            function: sym.name.to_string(),
            file,
            line,
            column,
            inlined: false,
        });
        Some(frames)
    }
}

/// The one frame the capture's own symbol table gives.
fn table_frame(object: &ObjectSymbols, vaddr: u64) -> Frame {
    let loc = locate_in(object, vaddr);
    Frame {
        function: loc.symbol.map_or_else(|| loc.to_string(), str::to_string),
        file: None,
        line: None,
        column: None,
        inlined: false,
    }
}

#[cfg(test)]
pub(crate) mod tests;
