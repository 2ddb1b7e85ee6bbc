//! Symbols people can read: a stripped program's functions named from its
//! separate debug file (by build id, by `.gnu_debuglink`), libc's internal
//! functions named from libc's debug file, and source lines at analysis
//! time only where the recorded build's debug information is present.

use std::{path::Path, process::Command};

use analyzer::{Capture, Event, Symbolizer};
use tests::{analyzer, capture, entries_by_function, fixture, privileged, tracer};
use tracer_common::testprog::{self, Program};

use super::export::calls_line;

fn path(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

fn run_tool(program: &str, args: &[&str]) {
    let status = Command::new(program)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{program} runs (apt-get install binutils): {e}"));
    assert!(status.success(), "{program} {args:?}");
}

/// Whether the capture's libc symbols came from libc's separate debug file;
/// prints why not (or fails under CI, where scripts/setup installs it).
pub(crate) fn libc_has_debug_file(cap: &Capture) -> bool {
    let found = cap
        .objects
        .values()
        .any(|o| o.path.contains("libc.so") && o.debug_file.is_some());
    if !found {
        assert!(
            std::env::var_os("EFTRACE_REQUIRE_ROOT").is_none(),
            "EFTRACE_REQUIRE_ROOT is set but libc's debug file is not installed (apt-get install libc6-dbg)"
        );
        eprintln!("skipped: libc's debug file is not installed (apt-get install libc6-dbg)");
    }
    found
}

/// `calls` stripped of its symbol table, and its debug file, in `dir`.
fn stripped_calls(dir: &Path) -> Program {
    Program::split(&fixture("calls", None), dir, "calls").expect("binutils are installed")
}

fn record_run(exe: &Path, out: &Path, extra: &[&str]) -> tests::Run {
    let mut args = vec![
        "record",
        "-f",
        "site_*",
        "--sample-hz",
        "0",
        "-o",
        path(out),
    ];
    args.extend(extra);
    args.extend(["--", path(exe), "run", "5"]);
    tracer(&args)
}

/// `tracer record -f` names a stripped program's static functions when its
/// debug file is installed under a debug directory by build id, and says
/// what to do when it is not; the analyzer gives their source lines from
/// the same debug file, and only with it.
#[test]
fn stripped_program_named_from_its_debug_file_by_build_id() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let Program {
        stripped, debug, ..
    } = stripped_calls(dir.path());
    let out = dir.path().join("s.capture");

    let bare = record_run(&stripped, &out, &[]);
    assert_eq!(bare.status.code(), Some(2), "{}", bare.stderr);
    assert!(
        bare.stderr.contains("no separate debug file was found")
            && bare.stderr.contains("--debug-dir"),
        "{}",
        bare.stderr
    );

    let root = dir.path().join("debug-root");
    let id = testprog::build_id(&stripped).expect("gcc links with --build-id");
    let installed = root
        .join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    std::fs::create_dir_all(installed.parent().expect("parent")).expect("mkdir");
    std::fs::copy(&debug, &installed).expect("install");
    let run = record_run(&stripped, &out, &["--debug-dir", path(&root)]);
    assert!(run.status.success(), "{}", run.stderr);
    let cap = capture(&out);
    let counts: Vec<(String, usize)> = entries_by_function(&cap)
        .into_iter()
        .map(|((_, f), n)| (f, n))
        .collect();
    assert_eq!(
        counts,
        [("site_a".to_string(), 1), ("site_b".to_string(), 3)]
    );
    let object = &cap.objects[path(&stripped)];
    assert_eq!(object.debug_file.as_deref(), Some(path(&installed)));
    assert_eq!(object.build_id.as_deref(), Some(id.as_str()));

    // Lines at analysis time: from the debug file, when the analyzer is
    // pointed at it.
    let events = dir.path().join("e.parquet");
    let with = analyzer(&[
        "export",
        "--format",
        "parquet",
        path(&out),
        "-o",
        path(&events),
        "--debug-dir",
        path(&root),
    ]);
    assert!(with.status.success(), "{}", with.stderr);
    assert!(!with.stderr.contains("no source lines"), "{}", with.stderr);
    let without = analyzer(&[
        "export",
        "--format",
        "parquet",
        path(&out),
        "-o",
        path(&events),
    ]);
    assert!(
        without
            .stderr
            .contains(&format!("no source lines for {}", path(&stripped))),
        "{}",
        without.stderr
    );
    let json = dir.path().join("t.json");
    let trace = analyzer(&[
        "export",
        "--format",
        "chrome-trace",
        path(&out),
        "-o",
        path(&json),
        "--debug-dir",
        path(&root),
    ]);
    assert!(trace.status.success(), "{}", trace.stderr);
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("read")).expect("JSON");
    let site_a = doc["traceEvents"]
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["name"] == "site_a" && e["ph"] == "X")
        .expect("site_a slice");
    assert_eq!(
        site_a["args"]["source"].as_str(),
        Some(format!("calls.c:{}", calls_line("int a = site_a(n);")).as_str())
    );
}

/// A stripped program with a `.gnu_debuglink` to a debug file beside it is
/// named with no debug directory given.
#[test]
fn stripped_program_follows_its_debug_link() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let Program {
        stripped, debug, ..
    } = stripped_calls(dir.path());
    run_tool(
        "objcopy",
        &[
            &format!("--add-gnu-debuglink={}", path(&debug)),
            path(&stripped),
        ],
    );
    let out = dir.path().join("l.capture");
    let run = record_run(&stripped, &out, &[]);
    assert!(run.status.success(), "{}", run.stderr);
    let cap = capture(&out);
    let object = &cap.objects[path(&stripped)];
    assert_eq!(
        object.debug_link.as_ref().map(|l| l.name.as_str()),
        Some("calls.debug")
    );
    assert_eq!(object.debug_file.as_deref(), Some(path(&debug)));
    assert_eq!(entries_by_function(&cap).len(), 2);
}

/// Samples in libc name the function, internal ones included (libc's
/// memcpy variants are not exported): no `libc.so.6+0x…`.
#[test]
fn libc_frames_are_named() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("c.capture");
    let run = tracer(&[
        "record",
        "--sample-hz",
        "499",
        "-o",
        path(&out),
        "--",
        path(&calls),
        "copy",
        "300",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let cap = capture(&out);
    if !libc_has_debug_file(&cap) {
        return;
    }
    let sym = Symbolizer::new(&cap);
    let (mut in_libc, mut named, mut internal) = (0, 0, 0);
    let libc = cap
        .objects
        .values()
        .find(|o| o.path.contains("libc.so"))
        .expect("libc's symbols");
    for e in cap.events() {
        let Ok(Event::Sample(s)) = e else { continue };
        if s.user_ip == 0 {
            continue;
        }
        let Some(loc) = sym.user(s.header.pid, s.user_ip) else {
            continue;
        };
        if loc.object != libc.path {
            continue;
        }
        in_libc += 1;
        if let Some(name) = loc.symbol {
            named += 1;
            internal += usize::from(name.starts_with("__mem"));
        }
    }
    assert!(in_libc >= 50, "{in_libc} samples in libc");
    assert_eq!(named, in_libc, "every libc sample named");
    assert!(
        internal * 2 > in_libc,
        "{internal} of {in_libc} in libc's memcpy variants"
    );
    let text = analyzer(&["events", path(&out)]);
    assert!(!text.stdout.contains("libc.so.6+0x"), "unnamed libc frames");
}

/// Samples in the vDSO (`clock_gettime` without a system call) name the
/// function: the tracer reads the vDSO's symbols from its own copy.
#[test]
fn vdso_frames_are_named() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("v.capture");
    // hot() reads the thread's CPU clock between loops of work.
    let run = tracer(&[
        "record",
        "--sample-hz",
        "999",
        "-o",
        path(&out),
        "--",
        path(&calls),
        "spin",
        "600",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let cap = capture(&out);
    let sym = Symbolizer::new(&cap);
    let in_vdso: Vec<Option<String>> = cap
        .events()
        .filter_map(|e| match e {
            Ok(Event::Sample(s)) if s.user_ip != 0 => sym.user(s.header.pid, s.user_ip),
            _ => None,
        })
        .filter(|l| l.object == "[vdso]")
        .map(|l| l.symbol.map(str::to_string))
        .collect();
    assert!(!in_vdso.is_empty(), "no sample in the vDSO");
    assert!(
        in_vdso
            .iter()
            .all(|s| s.as_deref().is_some_and(|n| n.contains("clock_gettime"))),
        "{in_vdso:?}"
    );
}
