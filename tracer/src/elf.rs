//! Function symbols, loadable segments and build id of an ELF object, read
//! from the file on disk (`.symtab` and `.dynsym`).

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use object::{Object as _, ObjectSegment as _, ObjectSymbol as _, SymbolKind};
use tracer_common::capture::{ObjectSymbols, Segment, Symbol};

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
    /// Symbols, segments and build id as stored in captures.
    pub table: ObjectSymbols,
    /// Whether the object has a `.symtab` (not stripped).
    pub has_symtab: bool,
    /// Entry point (`e_entry`), a virtual address; 0 for most shared objects.
    pub entry: u64,
}

impl ElfSymbols {
    /// Reads `path`. Symbols are function symbols defined in the object,
    /// sorted by address, duplicates (same address and name) removed.
    pub fn read(path: &Path) -> Result<Self, ElfError> {
        let data = fs::read(path).map_err(|source| ElfError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&data, path)
    }

    /// [`ElfSymbols::read`] of the file's bytes (`path` names it).
    pub fn parse(data: &[u8], path: &Path) -> Result<Self, ElfError> {
        let file = object::File::parse(data).map_err(|source| ElfError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        let has_symtab = file.symbols().next().is_some();
        let mut symbols: Vec<Symbol> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok()?;
                // Versioned dynsym names ("memcpy@@GLIBC_2.14") keep their base name.
                let name = name.split('@').next().unwrap_or(name);
                (!name.is_empty()).then(|| Symbol {
                    addr: s.address(),
                    size: s.size(),
                    name: name.to_string(),
                })
            })
            .collect();
        symbols.sort_by(|a, b| (a.addr, &a.name).cmp(&(b.addr, &b.name)));
        symbols.dedup_by(|a, b| a.addr == b.addr && a.name == b.name);
        let segments = segments(&file);
        let build_id = file
            .build_id()
            .ok()
            .flatten()
            .map(|id| id.iter().map(|b| format!("{b:02x}")).collect());
        Ok(Self {
            table: ObjectSymbols {
                path: path.display().to_string(),
                build_id,
                segments,
                symbols,
            },
            has_symtab,
            entry: file.entry(),
        })
    }
}

/// The loadable segments of `file` that have bytes in the file.
pub fn segments(file: &object::File<'_>) -> Vec<Segment> {
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
