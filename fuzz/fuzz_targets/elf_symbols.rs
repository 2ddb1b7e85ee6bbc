//! ELF objects of targets (any file a target maps): symbols, segments,
//! build id, and the file offset of every symbol.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tracer::elf::{ElfSymbols, file_offset};

fuzz_target!(|data: &[u8]| {
    let Ok(elf) = ElfSymbols::parse(data, Path::new("fuzz")) else {
        return;
    };
    let _ = file_offset(&elf.table.segments, elf.entry);
    for s in elf.table.symbols.iter().take(256) {
        let _ = file_offset(&elf.table.segments, s.addr);
    }
});
