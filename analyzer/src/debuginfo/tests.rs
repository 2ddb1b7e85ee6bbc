//! Lines and inlined frames of a real program built here, stripped or not,
//! with its debug file found by build id.

use std::fs;

use object::{Object as _, ObjectSymbol as _};
use tracer_common::testprog::Program;

use super::*;

/// `scale` is inlined into `outer` (line numbers matter to the tests).
const SOURCE: &str = "static inline __attribute__((always_inline)) int scale(int x) {
    return x * 7 + 3;
}
__attribute__((noinline)) int outer(int x) {
    int y = scale(x);
    return y ^ 0x55;
}
int main(int c, char **v) { (void)v; return outer(c); }
";
const SCALE_LINE: u32 = 2;
const CALL_LINE: u32 = 5;

/// A program built from [`SOURCE`] (also used by the MPI call sites'
/// tests).
pub(crate) struct Built {
    /// Holds the files while the test runs.
    dir: tempfile::TempDir,
    pub(crate) program: Program,
    /// `outer`'s address range.
    pub(crate) outer: (u64, u64),
}

/// Builds [`SOURCE`] with gcc; `None` when the tools are not installed.
pub(crate) fn build() -> Option<Built> {
    let dir = tempfile::tempdir().expect("tempdir");
    let program = Program::build(dir.path(), SOURCE, "-O2")?;
    let data = fs::read(&program.full).expect("read");
    let elf = object::File::parse(&*data).expect("ELF");
    let outer = elf
        .symbols()
        .find(|s| s.name() == Ok("outer"))
        .map(|s| (s.address(), s.address() + s.size()))
        .expect("outer");
    assert_eq!(build_id_of(&program.full), Some(program.build_id.clone()));
    Some(Built {
        dir,
        program,
        outer,
    })
}

fn table(path: &Path, build_id: Option<&str>) -> ObjectSymbols {
    ObjectSymbols {
        path: path.display().to_string(),
        build_id: build_id.map(str::to_string),
        ..Default::default()
    }
}

/// Every address of `outer` gets a line of app.c; somewhere in it the
/// inlined `scale` shows as its own frame at its body's line, called from
/// `outer` at the call's line.
fn assert_outer_has_inlined_scale(lines: &mut SourceLines, object: &ObjectSymbols, built: &Built) {
    let mut inlined = 0;
    for addr in built.outer.0..built.outer.1 {
        let frames = lines.frames(object, addr, AddressKind::Instruction);
        let last = frames.last().expect("never empty");
        assert_eq!(last.function, "outer", "{frames:?}");
        assert!(!last.inlined);
        assert!(
            frames
                .iter()
                .all(|f| f.file.as_deref().is_some_and(|f| f.ends_with("app.c"))),
            "{addr:#x}: {frames:?}"
        );
        if let [inner, outer] = &frames[..]
            && inner.function == "scale"
        {
            assert!(inner.inlined);
            assert_eq!(inner.line, Some(SCALE_LINE), "{frames:?}");
            assert_eq!(outer.line, Some(CALL_LINE), "{frames:?}");
            assert_eq!(inner.file_line().as_deref(), Some("app.c:2"));
            inlined += 1;
        }
    }
    assert!(
        inlined > 0,
        "no address of outer is inside the inlined scale"
    );
}

#[test]
fn lines_and_inlined_frames_from_the_objects_own_dwarf() {
    let Some(built) = build() else { return };
    let mut lines = SourceLines::new(&[]);
    let object = table(&built.program.full, Some(&built.program.build_id));
    assert_outer_has_inlined_scale(&mut lines, &object, &built);
    assert!(lines.missing().is_empty(), "{:?}", lines.missing());
}

/// A stripped object's lines come from its debug file under a debug
/// directory, found by the build id the capture recorded.
#[test]
fn lines_of_a_stripped_object_from_its_debug_file_by_build_id() {
    let Some(built) = build() else { return };
    let root = built.dir.path().join("debug-root");
    built.program.install_debug(&root);
    let object = table(&built.program.stripped, Some(&built.program.build_id));

    let mut without = SourceLines::new(&[]);
    let frames = without.frames(&object, built.outer.0, AddressKind::Instruction);
    assert_eq!(frames[0].file, None, "no debug file: no lines");
    let why = without.missing();
    assert!(
        why[&object.path].contains("no debug file was found"),
        "{why:?}"
    );

    let mut lines = SourceLines::new(&[root]);
    assert_outer_has_inlined_scale(&mut lines, &object, &built);
}

/// A file of another build (another build id), or a capture without a
/// build id, lends no lines: the capture's symbol table names the function.
#[test]
fn another_build_lends_no_lines() {
    let Some(built) = build() else { return };
    let mut object = table(
        &built.program.full,
        Some("00112233445566778899aabbccddeeff00112233"),
    );
    object.symbols = vec![tracer_common::capture::Symbol {
        addr: built.outer.0,
        size: built.outer.1 - built.outer.0,
        name: "outer_from_the_capture".into(),
    }];
    let mut lines = SourceLines::new(&[]);
    let frames = lines.frames(&object, built.outer.0 + 1, AddressKind::Instruction);
    assert_eq!(
        &frames[..],
        &[Frame {
            function: "outer_from_the_capture".into(),
            file: None,
            line: None,
            column: None,
            inlined: false,
        }]
    );
    assert!(lines.missing()[&object.path].contains("another build"));
    assert_eq!(
        lines.missing_notes(),
        vec![format!(
            "no source lines for {}: {}",
            object.path,
            lines.missing()[&object.path]
        )]
    );

    object.build_id = None;
    let mut lines = SourceLines::new(&[]);
    let frames = lines.frames(&object, built.outer.0 + 1, AddressKind::Instruction);
    assert_eq!(frames[0].file, None);
    assert!(lines.missing()[&object.path].contains("no build id"));
}

/// A file offset is placed with the object's segments: the same frames as
/// its object address; outside every segment, none.
#[test]
fn file_offsets_resolve_like_their_addresses() {
    let Some(built) = build() else { return };
    let data = fs::read(&built.program.full).expect("read");
    let elf = object::File::parse(&*data).expect("ELF");
    let mut object = table(&built.program.full, Some(&built.program.build_id));
    object.segments = elf
        .segments()
        .map(|s| {
            use object::ObjectSegment as _;
            let (offset, filesz) = s.file_range();
            tracer_common::capture::Segment {
                vaddr: s.address(),
                offset,
                filesz,
            }
        })
        .collect();
    let segment = object
        .segments
        .iter()
        .find(|s| built.outer.0 >= s.vaddr && built.outer.0 < s.vaddr + s.filesz)
        .copied()
        .expect("outer in a segment");
    let offset = built.outer.0 - segment.vaddr + segment.offset;
    let mut lines = SourceLines::new(&[]);
    let by_offset = lines
        .frames_at_offset(&object, offset, AddressKind::Instruction)
        .expect("placed");
    let by_address = lines.frames(&object, built.outer.0, AddressKind::Instruction);
    assert_eq!(by_offset, by_address);
    assert_eq!(by_offset.last().map(|f| f.function.as_str()), Some("outer"));
    assert_eq!(
        lines.frames_at_offset(&object, u64::MAX - 1, AddressKind::Instruction),
        None
    );
}

/// A return address is looked up one byte back: the call's own line.
#[test]
fn return_addresses_resolve_to_the_call() {
    let Some(built) = build() else { return };
    let object = table(&built.program.full, Some(&built.program.build_id));
    let mut lines = SourceLines::new(&[]);
    // The byte after `outer`'s last instruction is in the next function;
    // as a return address it is the end of `outer`.
    let end = built.outer.1;
    let as_return = lines.frames(&object, end, AddressKind::Return);
    assert_eq!(as_return.last().map(|f| f.function.as_str()), Some("outer"));
}
