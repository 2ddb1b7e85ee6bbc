//! Function symbols, loadable segments and build id of an ELF object, read
//! from the file on disk (`.symtab` and `.dynsym`, and the `.symtab` of its
//! separate debug file when the object is stripped).

use std::{
    collections::BTreeMap,
    fs, io,
    path::{Path, PathBuf},
};

use object::{Object as _, ObjectSegment as _, ObjectSymbol as _, ReadCache, SymbolKind};
use tracer_common::{
    capture::{ObjectSymbols, Segment, Symbol},
    debugfile::{self, DebugLink},
};

/// Errors reading an object.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The file is not a parseable ELF object.
    #[error("{path} is not an ELF object")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: object::Error,
    },
}

/// An object's symbols, with where they came from.
#[derive(Debug, Clone)]
pub struct ElfSymbols {
    /// Symbols, segments, build id and debug link as stored in captures:
    /// one name per address (the one symbolization shows; see
    /// [`ElfSymbols::names`] for every alias).
    pub table: ObjectSymbols,
    /// Every function name, aliases included (`MPI_Send` and `PMPI_Send`,
    /// `malloc` and `__libc_malloc`), sorted by address: what `-f`
    /// patterns match.
    pub names: Vec<Symbol>,
    /// Whether the object has a full symbol table: its own `.symtab`, or
    /// that of its separate debug file (see [`ElfSymbols::debug_file`]).
    /// Without one, only exported functions (`.dynsym`) can be named.
    pub has_symtab: bool,
    /// The separate debug file whose `.symtab` was merged in, when the
    /// object itself is stripped.
    pub debug_file: Option<PathBuf>,
    /// Entry point (`e_entry`), a virtual address; 0 for most shared objects.
    pub entry: u64,
}

/// Function symbols defined in `file`'s `.symtab` (and `.dynsym` with
/// `dynamic`), with versioned names (`memcpy@@GLIBC_2.14`) cut to their base.
fn function_symbols<'data, R: object::ReadRef<'data>>(
    file: &object::File<'data, R>,
    dynamic: bool,
) -> Vec<Symbol> {
    let dynamic_symbols = dynamic
        .then(|| file.dynamic_symbols())
        .into_iter()
        .flatten();
    file.symbols()
        .chain(dynamic_symbols)
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
        .filter_map(|s| {
            let name = s.name().ok()?;
            let name = name.split('@').next().unwrap_or(name);
            (!name.is_empty()).then(|| Symbol {
                addr: s.address(),
                size: s.size(),
                name: name.to_string(),
            })
        })
        .collect()
}

/// The GNU build id of `file` as lowercase hex.
fn build_id_hex<'data, R: object::ReadRef<'data>>(file: &object::File<'data, R>) -> Option<String> {
    file.build_id()
        .ok()
        .flatten()
        .filter(|id| !id.is_empty())
        .map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
}

/// Opens `path` for lazy reading (a debug file can be large; only its
/// notes and symbol table are read).
fn open_lazily(path: &Path) -> Option<ReadCache<fs::File>> {
    fs::File::open(path).ok().map(ReadCache::new)
}

impl ElfSymbols {
    /// Reads `path` with the default debug directories
    /// ([`tracer_common::debugfile::debug_dirs`]).
    pub fn read(path: &Path) -> Result<Self, ElfError> {
        Self::read_with(path, &debugfile::debug_dirs(&[]))
    }

    /// Reads `path`. Symbols are function symbols defined in the object,
    /// sorted by address, duplicates (same address and name) removed. A
    /// stripped object (no `.symtab`) gets the `.symtab` of its separate
    /// debug file when one is installed under `debug_dirs` (by build id) or
    /// where its `.gnu_debuglink` points.
    pub fn read_with(path: &Path, debug_dirs: &[PathBuf]) -> Result<Self, ElfError> {
        // Read lazily: only the headers, notes and symbol tables, not the
        // whole file (a 150 MB runtime library was read whole before).
        let file = fs::File::open(path).map_err(|source| ElfError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let cache = ReadCache::new(file);
        let file = object::File::parse(&cache).map_err(|source| ElfError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_file(&file, path, debug_dirs)
    }

    /// [`ElfSymbols::read`] of the file's bytes (`path` names it), looking
    /// for a debug file in the default directories only.
    pub fn parse(data: &[u8], path: &Path) -> Result<Self, ElfError> {
        Self::parse_with(data, path, &debugfile::debug_dirs(&[]))
    }

    /// [`ElfSymbols::read_with`] of the file's bytes (`path` names it).
    pub fn parse_with(data: &[u8], path: &Path, debug_dirs: &[PathBuf]) -> Result<Self, ElfError> {
        let file = object::File::parse(data).map_err(|source| ElfError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_file(&file, path, debug_dirs)
    }

    /// The symbols of a parsed `file` (`path` names it).
    fn from_file<'data, R: object::ReadRef<'data>>(
        file: &object::File<'data, R>,
        path: &Path,
        debug_dirs: &[PathBuf],
    ) -> Result<Self, ElfError> {
        let mut has_symtab = file.symbols().next().is_some();
        let mut symbols = function_symbols(file, true);
        let build_id = build_id_hex(file);
        let debug_link = file
            .gnu_debuglink()
            .ok()
            .flatten()
            .and_then(|(name, crc)| DebugLink::new(std::str::from_utf8(name).ok()?, crc));
        let mut debug_file = None;
        if !has_symtab {
            let mut same_build_id = |candidate: &Path| {
                let Some(cache) = open_lazily(candidate) else {
                    return false;
                };
                object::File::parse(&cache)
                    .ok()
                    .is_some_and(|f| build_id.is_some() && build_id_hex(&f) == build_id)
            };
            let found = debugfile::find(
                path,
                build_id.as_deref(),
                debug_link.as_ref(),
                debug_dirs,
                &mut same_build_id,
            );
            if let Some(found) = found
                && let Some(cache) = open_lazily(&found)
                && let Ok(debug) = object::File::parse(&cache)
            {
                let extra = function_symbols(&debug, false);
                if !extra.is_empty() {
                    log::debug!(
                        "{}: {} symbols from its debug file {}",
                        path.display(),
                        extra.len(),
                        found.display()
                    );
                    symbols.extend(extra);
                    has_symtab = true;
                    debug_file = Some(found);
                }
            }
        }
        symbols.sort_by(|a, b| (a.addr, &a.name).cmp(&(b.addr, &b.name)));
        symbols.dedup_by(|a, b| a.addr == b.addr && a.name == b.name);
        // Captures keep the name a lookup shows, the last of an address's
        // names in this order: the same names as a table with every alias,
        // in less space (libc's debug file has 6,508 names at 3,706
        // addresses).
        let mut unique = symbols.clone();
        unique.reverse();
        unique.dedup_by_key(|s| s.addr);
        unique.reverse();
        let segments = segments(file);
        Ok(Self {
            names: symbols,
            table: ObjectSymbols {
                path: path.display().to_string(),
                build_id,
                segments,
                symbols: unique,
                debug_link,
                debug_file: debug_file.as_ref().map(|p| p.display().to_string()),
            },
            has_symtab,
            debug_file,
            entry: file.entry(),
        })
    }
}

/// The name processes' maps give the vDSO.
pub const VDSO: &str = "[vdso]";

/// Longest vDSO read (it is a few pages; a bound against a corrupt map).
const VDSO_MAX: u64 = 1 << 20;

/// The vDSO's symbols (`__vdso_clock_gettime`, …), read from this process's
/// own copy: the kernel maps one image into every process of an ABI, so
/// samples of any 64-bit process in it are named. `None` when it cannot be
/// read.
pub fn vdso_symbols() -> Option<ElfSymbols> {
    use std::os::unix::fs::FileExt as _;
    let maps = fs::read_to_string("/proc/self/maps").ok()?;
    let (start, end) = maps.lines().find_map(|l| {
        let mut parts = l.split_whitespace();
        let range = parts.next()?;
        (parts.last() == Some(VDSO)).then_some(())?;
        let (a, b) = range.split_once('-')?;
        Some((
            u64::from_str_radix(a, 16).ok()?,
            u64::from_str_radix(b, 16).ok()?,
        ))
    })?;
    let len = end
        .checked_sub(start)
        .filter(|n| *n > 0 && *n <= VDSO_MAX)?;
    let mut image = vec![0u8; len as usize];
    fs::File::open("/proc/self/mem")
        .ok()?
        .read_exact_at(&mut image, start)
        .ok()?;
    let file = object::File::parse(&*image).ok()?;
    let mut symbols = function_symbols(&file, true);
    symbols.sort_by(|a, b| (a.addr, &a.name).cmp(&(b.addr, &b.name)));
    symbols.dedup_by(|a, b| a.addr == b.addr && a.name == b.name);
    let mut unique = symbols.clone();
    unique.reverse();
    unique.dedup_by_key(|s| s.addr);
    unique.reverse();
    Some(ElfSymbols {
        table: ObjectSymbols {
            path: VDSO.to_string(),
            build_id: build_id_hex(&file),
            segments: segments(&file),
            symbols: unique,
            ..Default::default()
        },
        names: symbols,
        has_symtab: false,
        debug_file: None,
        entry: 0,
    })
}

/// Symbol tables read so far, by path, and the debug directories searched
/// for the debug files of stripped objects.
#[derive(Debug, Clone)]
pub struct ElfCache {
    debug_dirs: Vec<PathBuf>,
    tables: BTreeMap<PathBuf, ElfSymbols>,
}

impl Default for ElfCache {
    /// A cache searching the default debug directories.
    fn default() -> Self {
        Self::new(&[])
    }
}

impl ElfCache {
    /// An empty cache searching `extra` debug directories before the
    /// defaults (see [`tracer_common::debugfile::debug_dirs`]).
    pub fn new(extra: &[PathBuf]) -> Self {
        Self {
            debug_dirs: debugfile::debug_dirs(extra),
            tables: BTreeMap::new(),
        }
    }

    /// The debug directories searched.
    pub fn debug_dirs(&self) -> &[PathBuf] {
        &self.debug_dirs
    }

    /// The symbols of `path`, read on first use ([`VDSO`]: the vDSO's).
    pub fn get(&mut self, path: &Path) -> Result<&ElfSymbols, ElfError> {
        if !self.tables.contains_key(path) {
            let elf = if path.as_os_str() == VDSO {
                vdso_symbols().ok_or_else(|| ElfError::Read {
                    path: path.to_path_buf(),
                    source: io::Error::other("the vDSO could not be read"),
                })?
            } else {
                ElfSymbols::read_with(path, &self.debug_dirs)?
            };
            self.tables.insert(path.to_path_buf(), elf);
        }
        self.tables.get(path).ok_or_else(|| ElfError::Read {
            path: path.to_path_buf(),
            source: io::Error::from(io::ErrorKind::NotFound),
        })
    }

    /// The symbols of `path` if they were read already.
    pub fn cached(&self, path: &Path) -> Option<&ElfSymbols> {
        self.tables.get(path)
    }

    /// Keeps `elf` as the symbols of `path` (read elsewhere, e.g. on
    /// another thread).
    pub fn insert(&mut self, path: PathBuf, elf: ElfSymbols) {
        self.tables.insert(path, elf);
    }

    /// Forgets the symbols of `path` (read again on next use): keeps the
    /// memory of a long recording bounded.
    pub fn evict(&mut self, path: &Path) {
        self.tables.remove(path);
    }
}

/// The loadable segments of `file` that have bytes in the file.
pub fn segments<'data, R: object::ReadRef<'data>>(file: &object::File<'data, R>) -> Vec<Segment> {
    file.segments()
        .filter_map(|seg| {
            let (offset, filesz) = seg.file_range();
            (filesz > 0).then(|| Segment {
                vaddr: seg.address(),
                offset,
                filesz,
            })
        })
        .collect()
}

/// File offset of virtual address `vaddr`, from the object's segments.
pub fn file_offset(segments: &[Segment], vaddr: u64) -> Option<u64> {
    // Checked: segment fields come from the file.
    segments
        .iter()
        .find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)
        .and_then(|s| (vaddr - s.vaddr).checked_add(s.offset))
}

#[cfg(test)]
mod tests {
    use tracer_common::testprog::{self, Program};

    use super::*;

    #[test]
    fn reads_own_executable() {
        let exe = std::env::current_exe().expect("current exe");
        let elf = ElfSymbols::read(&exe).expect("readable ELF");
        assert!(elf.has_symtab, "test binaries keep .symtab");
        let main = elf
            .table
            .symbols
            .iter()
            .find(|s| s.name == "main")
            .expect("main symbol");
        let off = file_offset(&elf.table.segments, main.addr).expect("main in a segment");
        assert!(off > 0);
        assert!(elf.table.symbols.windows(2).all(|w| w[0].addr <= w[1].addr));
    }

    /// Captures keep one name per address, the one a lookup in the full
    /// table would show (the last of the address's names); patterns see
    /// every alias.
    #[test]
    fn captures_keep_one_name_per_address() {
        let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        let Ok(elf) = ElfSymbols::read_with(libc, &[]) else {
            eprintln!("skipped: no {}", libc.display());
            return;
        };
        let table = &elf.table.symbols;
        assert!(
            table.windows(2).all(|w| w[0].addr < w[1].addr),
            "one per address"
        );
        assert!(elf.names.len() > table.len(), "libc has aliases");
        for s in table {
            let last = elf
                .names
                .iter()
                .rev()
                .find(|n| n.addr == s.addr)
                .expect("in the full table");
            assert_eq!(last, s);
        }
        for alias in ["malloc", "__libc_malloc"] {
            assert!(elf.names.iter().any(|n| n.name == alias), "{alias}");
        }
    }

    /// A stripped program, its debug file (`objcopy --only-keep-debug`) and
    /// its build id, built from C in `dir`; `None` without a C toolchain.
    fn stripped_program(dir: &Path) -> Option<(PathBuf, PathBuf, String)> {
        let p = Program::build(
            dir,
            "static int helper(int x) { return x * 3; }\n\
             int __attribute__((noinline)) visible(int x) { return helper(x) + 1; }\n\
             int main(int c, char **v) { (void)v; return visible(c); }\n",
            "-O0",
        )?;
        Some((p.stripped, p.debug, p.build_id))
    }

    fn names(elf: &ElfSymbols) -> Vec<&str> {
        elf.names.iter().map(|s| s.name.as_str()).collect()
    }

    /// A stripped program's static functions are named from its debug file
    /// found by build id under a debug directory, and only then.
    #[test]
    fn stripped_objects_get_names_from_their_debug_file_by_build_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some((app, debug, id)) = stripped_program(dir.path()) else {
            return;
        };
        let bare = ElfSymbols::read_with(&app, &[]).expect("reads");
        assert!(!bare.has_symtab);
        assert!(!names(&bare).contains(&"helper"), "{:?}", names(&bare));
        assert_eq!(bare.table.build_id.as_deref(), Some(id.as_str()));

        let root = dir.path().join("debug-root");
        let installed = debugfile::build_id_path(&root, &id).expect("hex id");
        fs::create_dir_all(installed.parent().expect("parent")).expect("mkdir");
        fs::copy(&debug, &installed).expect("install");
        let elf = ElfSymbols::read_with(&app, std::slice::from_ref(&root)).expect("reads");
        assert!(elf.has_symtab);
        assert!(names(&elf).contains(&"helper"), "{:?}", names(&elf));
        assert!(names(&elf).contains(&"visible"));
        assert_eq!(elf.debug_file.as_deref(), Some(installed.as_path()));
        assert_eq!(elf.table.debug_file, Some(installed.display().to_string()));

        // A debug file of another build under this id is not used.
        let other = dir.path().join("other");
        fs::create_dir(&other).expect("dir");
        let Some((_, other_debug, other_id)) = stripped_program(&other) else {
            return;
        };
        assert_ne!(other_id, id);
        // Built in another directory: other DWARF paths, another build id.
        fs::copy(&other_debug, &installed).expect("replace");
        let elf = ElfSymbols::read_with(&app, std::slice::from_ref(&root)).expect("reads");
        assert!(!elf.has_symtab, "a debug file with another build id");
    }

    /// A `.gnu_debuglink` beside the object is followed when its CRC matches.
    #[test]
    fn stripped_objects_follow_their_debug_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some((app, debug, _)) = stripped_program(dir.path()) else {
            return;
        };
        let linked = dir.path().join("linked");
        fs::create_dir(&linked).expect("dir");
        let target = linked.join("app");
        fs::copy(&app, &target).expect("copy");
        let link = linked.join("app.dbg");
        fs::copy(&debug, &link).expect("copy");
        let mut arg = std::ffi::OsString::from("--add-gnu-debuglink=");
        arg.push(&link);
        let Some(()) = testprog::tool("objcopy", &[arg.as_os_str(), target.as_os_str()]) else {
            return;
        };
        let elf = ElfSymbols::read_with(&target, &[]).expect("reads");
        assert_eq!(
            elf.table.debug_link.as_ref().map(|l| l.name.as_str()),
            Some("app.dbg")
        );
        assert_eq!(elf.debug_file.as_deref(), Some(link.as_path()));
        assert!(names(&elf).contains(&"helper"));
    }

    /// The vDSO's time functions are named (every x86-64 kernel has them).
    #[test]
    fn reads_the_vdso() {
        let vdso = vdso_symbols().expect("this process has a vDSO");
        let names: Vec<&str> = vdso.names.iter().map(|s| s.name.as_str()).collect();
        assert!(
            names.iter().any(|n| n.contains("clock_gettime")),
            "{names:?}"
        );
        assert!(!vdso.table.segments.is_empty());
        let mut cache = ElfCache::default();
        assert!(cache.get(Path::new(VDSO)).is_ok());
    }

    #[test]
    fn rejects_non_elf() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x");
        fs::write(&path, b"#!/bin/sh\n").expect("write");
        assert!(matches!(
            ElfSymbols::read(&path),
            Err(ElfError::Parse { .. })
        ));
        assert!(matches!(
            ElfSymbols::read(&dir.path().join("missing")),
            Err(ElfError::Read { .. })
        ));
    }
}
