//! Call sites in words: `function (file.c:42)` from the program's debug
//! information when it has it, else `symbol+0x1c` from the capture's symbol
//! tables, else `object+0x11c9`.
//!
//! Lines come from [`crate::debuginfo`], so they follow its rules: only
//! from a file of the build the capture recorded (same build id), the
//! object's own DWARF or its debug file. A call site is a return address;
//! its line is the call instruction's, one byte before.

use std::collections::HashMap;

use crate::{
    debuginfo::{AddressKind, Frame, SourceLines},
    decode::{Capture, Symbolizer},
};

/// The label of a call site the recorder could not read (the stack was
/// not readable at the call).
pub const UNRECORDED: &str = "unplaced (call site not recorded)";
/// The label of a call site of a host no capture is from.
pub const NO_CAPTURE: &str = "unplaced (no capture of its host)";
/// The label of a call site outside every mapping the capture holds for
/// its process (the process was gone before the recorder read its maps,
/// and the site is in no object its probes or entry point place).
pub const UNMAPPED: &str = "unplaced (outside the process's recorded maps)";

/// Labels of call sites of the processes of some captures, computed once
/// per (host, pid, address).
pub struct Sites<'a> {
    symbolizers: Vec<(&'a str, Symbolizer<'a>)>,
    lines: SourceLines,
    /// By (symbolizer index, pid, address).
    cache: HashMap<(usize, u32, u64), String>,
}

impl<'a> Sites<'a> {
    /// For the processes of `captures` (matched by host); debug files are
    /// searched in `$EFTRACE_DEBUG_DIRS` and `/usr/lib/debug`.
    pub fn new(captures: &[&'a Capture]) -> Self {
        Self::with_debug_dirs(captures, &[])
    }

    /// As [`Sites::new`], also searching `extra` for debug files.
    pub fn with_debug_dirs(captures: &[&'a Capture], extra: &[std::path::PathBuf]) -> Self {
        Self {
            lines: SourceLines::new(extra),
            symbolizers: captures
                .iter()
                .map(|c| (c.header.host.as_str(), Symbolizer::new(c)))
                .collect(),
            cache: HashMap::new(),
        }
    }

    /// The label of return address `addr` in process `pid` on `host`. A
    /// site that cannot be placed says so and why ([`UNRECORDED`],
    /// [`NO_CAPTURE`], [`UNMAPPED`]), never an empty label; the words do not
    /// name the process, so one function's unplaced calls are one state in
    /// every rank.
    pub fn label(&mut self, host: &str, pid: u32, addr: u64) -> String {
        if addr == 0 {
            return UNRECORDED.into();
        }
        let Some(i) = self.symbolizers.iter().position(|(h, _)| *h == host) else {
            return NO_CAPTURE.into();
        };
        let key = (i, pid, addr);
        if let Some(l) = self.cache.get(&key) {
            return l.clone();
        }
        let s = &self.symbolizers[i].1;
        // The innermost frame: the function the call is written in,
        // inlined or not.
        let frames = self.lines.frames_at(s, pid, addr, AddressKind::Return);
        let label = match frames.first() {
            Some(f) if f.line.is_some() => label_of(f),
            _ => s
                .user(pid, addr)
                .map(|l| l.to_string())
                .filter(|l| !l.is_empty())
                .unwrap_or_else(|| UNMAPPED.into()),
        };
        self.cache.insert(key, label.clone());
        label
    }

    /// Why call sites of some objects have no source lines (see
    /// [`SourceLines::missing_notes`]): said, not hidden behind `symbol+0x1c`.
    pub fn missing_notes(&self) -> Vec<String> {
        self.lines.missing_notes()
    }
}

/// `function (file:line)`, with the file's directory dropped.
fn label_of(frame: &Frame) -> String {
    match frame.file_line() {
        Some(fl) => format!("{} ({fl})", frame.function),
        None => frame.function.clone(),
    }
}

#[cfg(test)]
mod tests {
    use object::{Object as _, ObjectSegment as _};
    use tracer_common::capture::{
        CaptureHeader, CaptureWriter, MapEntry, Meta, ObjectSymbols, ProcessInfo, Segment, Symbol,
    };

    use super::*;
    use crate::debuginfo::tests::{Built, build};

    const PID: u32 = 7;
    const BASE: u64 = 0x5555_0000_0000;

    /// A capture of one process running `built`'s program, its object
    /// recorded with `build_id`; and the runtime address of `vaddr`.
    fn capture(built: &Built, build_id: Option<&str>) -> (Capture, impl Fn(u64) -> u64) {
        let data = std::fs::read(&built.program.full).expect("read");
        let elf = object::File::parse(&*data).expect("ELF");
        let segments: Vec<Segment> = elf
            .segments()
            .map(|s| {
                let (offset, filesz) = s.file_range();
                Segment {
                    vaddr: s.address(),
                    offset,
                    filesz,
                }
            })
            .collect();
        let text = *segments
            .iter()
            .find(|s| built.outer.0 >= s.vaddr && built.outer.0 - s.vaddr < s.filesz)
            .expect("outer in a segment");
        let path = built.program.full.display().to_string();
        let mut w = CaptureWriter::new(
            Vec::new(),
            &CaptureHeader {
                host: "n1".into(),
                ..Default::default()
            },
        )
        .expect("writer");
        w.write_meta(&Meta::Process(ProcessInfo {
            pid: PID,
            traced: true,
            comm: "app".into(),
            exe: path.clone(),
            maps: vec![MapEntry {
                start: BASE,
                end: BASE + text.filesz,
                offset: text.offset,
                perms: "r-xp".into(),
                path: path.clone(),
            }],
            ..Default::default()
        }))
        .expect("process");
        w.write_meta(&Meta::Object(ObjectSymbols {
            path,
            build_id: build_id.map(str::to_string),
            segments,
            symbols: vec![Symbol {
                addr: built.outer.0,
                size: built.outer.1 - built.outer.0,
                name: "outer".into(),
            }],
            ..Default::default()
        }))
        .expect("object");
        let cap = Capture::read(w.into_inner().as_slice()).expect("capture");
        (cap, move |vaddr| BASE + vaddr - text.vaddr)
    }

    /// A call site gets its line only from a file of the recorded build:
    /// with another build id, or none recorded, the capture's symbol names
    /// it.
    #[test]
    fn call_sites_take_lines_only_from_the_recorded_build() {
        let Some(built) = build() else { return };
        // A return address inside `outer`: the call is the byte before.
        let site = built.outer.0 + 1;
        let (cap, at) = capture(&built, Some(&built.program.build_id));
        let mut sites = Sites::new(&[&cap]);
        let label = sites.label("n1", PID, at(site));
        // At -O2 `outer` may start in the inlined `scale` (line 2), which
        // then names the site, as the innermost function.
        assert!(
            label == "scale (app.c:2)"
                || ["4", "5", "6"]
                    .map(|l| format!("outer (app.c:{l})"))
                    .contains(&label),
            "{label}"
        );
        assert_eq!(sites.label("n1", PID, 0), UNRECORDED);
        assert_eq!(sites.label("other-host", PID, at(site)), NO_CAPTURE);

        assert_eq!(sites.missing_notes(), Vec::<String>::new());

        let (cap, at) = capture(&built, Some("00112233445566778899aabbccddeeff00112233"));
        let mut sites = Sites::new(&[&cap]);
        assert_eq!(sites.label("n1", PID, at(site)), "outer+0x1");
        let notes = sites.missing_notes();
        assert!(
            notes.len() == 1 && notes[0].contains("another build"),
            "{notes:?}"
        );

        let (cap, at) = capture(&built, None);
        let mut sites = Sites::new(&[&cap]);
        assert_eq!(sites.label("n1", PID, at(site)), "outer+0x1");
    }

    /// A call site outside every mapping the capture holds for its process
    /// (gone before the recorder read its maps, in no probed object) says
    /// it is unplaced, and the same words for every process: one state per
    /// function in every rank.
    #[test]
    fn a_site_outside_the_recorded_maps_is_said_unplaced() {
        let Some(built) = build() else { return };
        let (cap, at) = capture(&built, Some(&built.program.build_id));
        let mut sites = Sites::new(&[&cap]);
        let outside = at(built.outer.0) - 0x10_0000;
        assert_eq!(sites.label("n1", PID, outside), UNMAPPED);
        assert_eq!(sites.label("n1", PID + 1, at(built.outer.0 + 1)), UNMAPPED);
    }

    #[test]
    fn labels_drop_directories() {
        let f = Frame {
            function: "sweep".into(),
            file: Some("/src/app/wave.f90".into()),
            line: Some(42),
            column: Some(7),
            inlined: true,
        };
        assert_eq!(label_of(&f), "sweep (wave.f90:42)");
    }
}
