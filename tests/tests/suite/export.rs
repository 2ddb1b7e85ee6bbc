//! `analyzer export` on captures of real processes, each format read by a
//! real consumer: Go's pprof, DuckDB, or (trace events, which no
//! installable viewer reads headless) the format's rules.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use analyzer::export::chrome;
use tests::{
    analyzer, capture, duckdb, duckdb_python, entries_by_function, fixture, installed, privileged,
    tracer,
};

/// The line of `calls.c` holding `text` (1-based).
pub(crate) fn calls_line(text: &str) -> u32 {
    let src =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/calls.c"))
            .expect("calls.c");
    src.lines()
        .position(|l| l.contains(text))
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("no `{text}` in calls.c"))
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

/// Records `calls ARGS` with `flags`, into `dir/NAME.capture`.
fn record(dir: &Path, name: &str, flags: &[&str], args: &[&str]) -> PathBuf {
    let calls = fixture("calls", None);
    let out = dir.join(format!("{name}.capture"));
    let mut all: Vec<&str> = vec!["record", "-o", path(&out)];
    all.extend(flags);
    all.push("--");
    all.push(path(&calls));
    all.extend(args);
    let run = tracer(&all);
    assert!(run.status.success(), "{}", run.stderr);
    out
}

fn export(args: &[&str]) -> String {
    let run = analyzer(&[&["export"], args].concat());
    assert!(run.status.success(), "export {args:?}: {}", run.stderr);
    run.stderr
}

/// `go tool pprof ARGS`, its standard output.
fn pprof(args: &[&str]) -> String {
    let out = Command::new("timeout")
        .args(["-s", "KILL", "120", "go", "tool", "pprof"])
        .args(args)
        .output()
        .expect("go runs");
    assert!(
        out.status.success(),
        "go tool pprof {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `-top` rows as (flat, name), e.g. (53, "leaf").
fn top_rows(text: &str) -> Vec<(f64, String)> {
    text.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let flat = cols.first()?.trim_end_matches("ms").parse().ok()?;
            Some((flat, cols.get(5..)?.join(" ")))
        })
        .collect()
}

/// Traced functions' calls as Go's pprof counts them: exactly the calls
/// made, per function, and callers at the line they called from.
#[test]
fn pprof_time_profile_counts_every_call_in_go_pprof() {
    if !privileged() || !installed(&["go"], "apt-get install golang-go") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cap = record(
        dir.path(),
        "run",
        &["-f", "site_*", "-f", "leaf", "--sample-hz", "0"],
        &["run", "50"],
    );
    let counts = entries_by_function(&capture(&cap));
    let pb = dir.path().join("time.pb.gz");
    export(&[
        "--format",
        "pprof",
        "--profile",
        "time",
        path(&cap),
        "-o",
        path(&pb),
    ]);
    let top = pprof(&["-top", "-sample_index=calls", path(&pb)]);
    let rows: BTreeMap<String, f64> = top_rows(&top).into_iter().map(|(f, n)| (n, f)).collect();
    let expect = |f: &str| {
        counts
            .iter()
            .filter(|((_, n), _)| n == f)
            .map(|(_, c)| *c as f64)
            .sum::<f64>()
    };
    assert_eq!(expect("leaf"), 53.0, "{counts:?}");
    for f in ["leaf", "site_a", "site_b"] {
        assert_eq!(rows.get(f).copied(), Some(expect(f)), "{f} in\n{top}");
    }
    assert!(top.contains("Total samples = 57"), "{top}");
    // site_a's frame is at its call of leaf.
    let lines = pprof(&["-top", "-lines", "-sample_index=calls", path(&pb)]);
    let call = format!("calls.c:{}", calls_line("s += leaf(i);"));
    assert!(
        lines
            .lines()
            .any(|l| l.contains(" site_a ") && l.trim_end().ends_with(&call)),
        "site_a at {call} in\n{lines}"
    );
}

/// CPU samples as Go's pprof reads them: every sample, under the traced
/// function, in libc's internal memcpy named by libc's debug file.
#[test]
fn pprof_samples_profile_in_go_pprof_names_libc() {
    if !privileged() || !installed(&["go"], "apt-get install golang-go") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cap = record(
        dir.path(),
        "copy",
        &["-f", "copy_blocks", "--sample-hz", "499"],
        &["copy", "400"],
    );
    if !super::symbols::libc_has_debug_file(&capture(&cap)) {
        return;
    }
    let samples = capture(&cap)
        .events()
        .filter(|e| matches!(e, Ok(analyzer::Event::Sample(s)) if s.header.pid != 0))
        .count();
    let pb = dir.path().join("cpu.pb.gz");
    let said = export(&["--format", "pprof", path(&cap), "-o", path(&pb)]);
    assert!(said.contains(&format!("{samples} samples")), "{said}");
    let top = pprof(&["-top", "-sample_index=samples", path(&pb)]);
    assert!(top.contains(&format!("Total samples = {samples}")), "{top}");
    assert!(top.starts_with("File: calls"), "{top}");
    assert!(!top.contains("libc.so.6+0x"), "unnamed libc frames:\n{top}");
    let rows = top_rows(&top);
    let (flat, name) = rows.first().expect("a row");
    assert!(
        name.starts_with("__mem") && *flat * 2.0 > samples as f64,
        "most samples in libc's memcpy:\n{top}"
    );
}

/// Folded stacks and the flame graph of the same capture: one stack per
/// call path, every traced function drawn.
#[test]
fn folded_stacks_and_flame_graph() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cap = record(
        dir.path(),
        "run",
        &["-f", "site_*", "-f", "leaf", "--sample-hz", "0"],
        &["run", "20"],
    );
    let pid = entries_by_function(&capture(&cap))
        .keys()
        .next()
        .map(|(p, _)| *p)
        .expect("a call");
    let folded = dir.path().join("s.folded");
    export(&[
        "--format",
        "folded",
        "--profile",
        "time",
        path(&cap),
        "-o",
        path(&folded),
    ]);
    let text = std::fs::read_to_string(&folded).expect("folded");
    let stacks: Vec<&str> = text
        .lines()
        .map(|l| l.rsplit_once(' ').expect("STACK VALUE").0)
        .collect();
    let root = format!("calls[{pid}]");
    assert_eq!(
        stacks,
        [
            format!("{root};site_a"),
            format!("{root};site_a;leaf"),
            format!("{root};site_b"),
            format!("{root};site_b;leaf"),
        ]
    );
    let svg = dir.path().join("f.svg");
    export(&[
        "--format",
        "flamegraph",
        "--profile",
        "time",
        path(&cap),
        "-o",
        path(&svg),
    ]);
    let svg = std::fs::read_to_string(&svg).expect("svg");
    for f in ["site_a", "site_b", "leaf"] {
        assert!(svg.contains(&format!("<title>{f} (")), "{f}");
    }
    // No samples recorded: said, not an empty file.
    let run = analyzer(&[
        "export",
        "--format",
        "flamegraph",
        path(&cap),
        "-o",
        path(&dir.path().join("none.svg")),
    ]);
    assert_eq!(run.status.code(), Some(2));
    assert!(run.stderr.contains("no CPU samples"), "{}", run.stderr);
}

/// A socket program's trace: valid trace events, its system calls as
/// slices inside the traced function that made them, one per recorded call.
#[test]
fn chrome_trace_of_a_socket_program() {
    if !privileged() {
        return;
    }
    let net = fixture("net", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("net.capture");
    let port_file = dir.path().join("port");
    let run = tracer(&[
        "record",
        "-f",
        "main",
        "--sample-hz",
        "0",
        "-o",
        path(&out),
        "--",
        path(&net),
        path(&port_file),
        "4",
        "65536",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let syscalls = capture(&out)
        .events()
        .filter(|e| matches!(e, Ok(analyzer::Event::Syscall(_))))
        .count() as u64;
    let json = dir.path().join("t.json");
    export(&["--format", "chrome-trace", path(&out), "-o", path(&json)]);
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("read")).expect("JSON");
    let checked = chrome::check(&doc).unwrap_or_else(|e| panic!("invalid trace: {e}"));
    let events = doc["traceEvents"].as_array().expect("events");
    let slices = |cat: &'static str| {
        events
            .iter()
            .filter(move |e| e["ph"] == "X" && e["cat"] == cat)
    };
    assert_eq!(slices("syscall").count() as u64, syscalls);
    assert!(syscalls >= 8, "{syscalls} system calls");
    assert_eq!(checked.slices, syscalls + slices("call").count() as u64);
    let named = |n: &str| slices("syscall").filter(|e| e["name"] == n).count();
    assert!(
        named("accept") + named("accept4") == 1 && named("connect") == 1,
        "{doc}"
    );
    // The server's accept is inside its main.
    let accept = slices("syscall")
        .find(|e| e["name"] == "accept" || e["name"] == "accept4")
        .expect("accept");
    let main = slices("call")
        .find(|e| e["name"] == "main" && e["pid"] == accept["pid"])
        .expect("main of the server");
    let (a, m) = (
        accept["ts"].as_f64().unwrap_or(-1.0),
        main["ts"].as_f64().unwrap_or(-1.0),
    );
    let m_end = m + main["dur"].as_f64().unwrap_or(0.0);
    assert!(
        m <= a && a <= m_end,
        "accept at {a} outside main {m}..{m_end}"
    );
    assert!(
        accept["args"]["addr"]
            .as_str()
            .is_some_and(|a| a.starts_with("127.0.0.1:"))
    );
    let fork = events.iter().find(|e| {
        e["cat"] == "lifecycle" && e["name"].as_str().is_some_and(|n| n.starts_with("fork"))
    });
    assert!(fork.is_some(), "the fork of the client");
}

/// The events table in DuckDB: every record, by kind as the capture holds
/// them; call sites at their source lines.
#[test]
fn parquet_events_in_duckdb() {
    if !privileged() {
        return;
    }
    let Some(python) = duckdb_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let cap = record(
        dir.path(),
        "run",
        &["-f", "site_*", "-f", "leaf", "--sample-hz", "0"],
        &["run", "30"],
    );
    let file = dir.path().join("e.parquet");
    export(&["--format", "parquet", path(&cap), "-o", path(&file)]);
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for e in capture(&cap).events() {
        *kinds
            .entry(e.expect("decodes").kind_name().to_string())
            .or_default() += 1;
    }
    let rows = duckdb(
        &python,
        &format!(
            "SELECT kind, count(*) FROM '{}' GROUP BY kind ORDER BY kind",
            path(&file)
        ),
    );
    let from_duckdb: BTreeMap<String, u64> = rows
        .into_iter()
        .map(|r| {
            (
                r[0].clone().expect("kind"),
                r[1].as_deref().and_then(|n| n.parse().ok()).expect("count"),
            )
        })
        .collect();
    assert_eq!(from_duckdb, kinds);
    let sources = duckdb(
        &python,
        &format!(
            "SELECT source, count(*) FROM '{}' WHERE kind = 'entry' AND name = 'leaf' GROUP BY source ORDER BY 2",
            path(&file)
        ),
    );
    let line = |t: &str| Some(format!("calls.c:{}", calls_line(t)));
    assert_eq!(
        sources,
        [
            vec![line("return leaf(n) + 1;"), Some("3".into())],
            vec![line("s += leaf(i);"), Some("30".into())],
        ]
    );
}

/// Units scored against a model, in DuckDB: the same units and scores as
/// `analyzer model score --json`.
#[test]
fn parquet_units_in_duckdb() {
    if !privileged() {
        return;
    }
    let Some(python) = duckdb_python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let flags = ["-f", "site_*", "-f", "leaf", "--sample-hz", "0"];
    let learned: Vec<PathBuf> = (0..2)
        .map(|i| record(dir.path(), &format!("n{i}"), &flags, &["run", "5"]))
        .collect();
    let trial = record(dir.path(), "trial", &flags, &["run", "9"]);
    let model = dir.path().join("model.json");
    let mut learn: Vec<&str> = vec!["model", "learn", "-o", path(&model)];
    learn.extend(learned.iter().map(|p| path(p)));
    let run = analyzer(&learn);
    assert!(run.status.success(), "{}", run.stderr);
    let score = analyzer(&[
        "model",
        "score",
        "--json",
        "--model",
        path(&model),
        path(&trial),
    ]);
    assert!(score.status.success(), "{}", score.stderr);
    let report: serde_json::Value = serde_json::from_str(&score.stdout).expect("JSON");
    let units = report["units"].as_array().expect("units");
    assert!(!units.is_empty());
    let file = dir.path().join("u.parquet");
    export(&[
        "--format",
        "parquet",
        "--table",
        "units",
        "--model",
        path(&model),
        path(&trial),
        "-o",
        path(&file),
    ]);
    let rows = duckdb(
        &python,
        &format!(
            "SELECT rank, score, kind, pid FROM '{}' ORDER BY rank",
            path(&file)
        ),
    );
    assert_eq!(rows.len(), units.len());
    for (row, unit) in rows.iter().zip(units) {
        let score: f64 = row[1]
            .as_deref()
            .and_then(|s| s.parse().ok())
            .expect("score");
        assert!(
            (score - unit["score"].as_f64().unwrap_or(-1.0)).abs() < 1e-12,
            "{row:?} {unit}"
        );
        assert_eq!(row[2].as_deref(), unit["kind"].as_str());
        assert_eq!(row[3].as_deref(), Some(unit["pid"].to_string().as_str()));
    }
}

/// Peer windows in DuckDB: three processes calling at the same steady rate,
/// compared as servers; each window counts the calls its server's events
/// (the events table) hold in it, at that rate where the host let it run.
#[test]
fn parquet_peer_windows_in_duckdb() {
    if !privileged() {
        return;
    }
    let Some(python) = duckdb_python() else {
        return;
    };
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("pair.capture");
    // Servers already running, as an operator attaches to daemons, and
    // still running when the recording stops: it starts once the probes
    // are attached and weighed, which took over 6 s beside busy loops, and
    // a server that exits inside a window leaves that window part-counted.
    let start = || {
        Command::new(&calls)
            .args(["pace", "1000", "120"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("pace starts")
    };
    // Peer comparison needs three servers.
    let mut servers: Vec<std::process::Child> = (0..3).map(|_| start()).collect();
    let pids: Vec<String> = servers.iter().map(|c| c.id().to_string()).collect();
    let mut args = vec![
        "record",
        "-f",
        "leaf",
        "--sample-hz",
        "0",
        "--duration",
        "5s",
        "-o",
        path(&out),
    ];
    for p in &pids {
        args.extend(["-p", p.as_str()]);
    }
    let run = tracer(&args);
    for s in &mut servers {
        let _ = s.kill();
        let _ = s.wait();
    }
    assert!(run.status.success(), "{}", run.stderr);
    let file = dir.path().join("w.parquet");
    export(&[
        "--format",
        "parquet",
        "--table",
        "windows",
        "--split-processes",
        "--window",
        "1s",
        "--shift",
        "1s",
        // Alone: no metric normalised (raw calls per window).
        "--normalize",
        "--metrics",
        "count",
        path(&out),
        "-o",
        path(&file),
    ]);
    // Each window's count is the calls its server's events hold in it: the
    // events table (wall-clock times) is the reference, since a server
    // starved by a busy neighbour calls less often than it was asked to.
    let events = dir.path().join("e.parquet");
    export(&["--format", "parquet", path(&out), "-o", path(&events)]);
    let rows = duckdb(
        &python,
        &format!(
            "SELECT w.server, w.window_index, w.value, \
               (SELECT count(*) FROM '{e}' e WHERE e.kind = 'entry' AND e.name = 'leaf' \
                  AND 'calls[' || e.pid || ']' = w.server \
                  AND e.wall_ns >= w.start_ns AND e.wall_ns < w.start_ns + w.window_ns) \
             FROM '{w}' w WHERE w.metric = 'count' AND w.component = 'leaf' \
             ORDER BY w.server, w.window_index",
            e = path(&events),
            w = path(&file)
        ),
    );
    let servers: std::collections::BTreeSet<&str> =
        rows.iter().filter_map(|r| r[0].as_deref()).collect();
    assert_eq!(servers.len(), 3, "{rows:?}");
    assert!(
        rows.len() >= 9,
        "at least 3 whole windows per server: {rows:?}"
    );
    let mut paced = 0;
    for r in &rows {
        let v: f64 = r[2].as_deref().and_then(|v| v.parse().ok()).expect("value");
        let n: f64 = r[3].as_deref().and_then(|v| v.parse().ok()).expect("count");
        assert_eq!(
            v, n,
            "a window's count against its events: {r:?} of {rows:?}"
        );
        paced += usize::from((800.0..=1200.0).contains(&v));
    }
    // And the servers ran at their pace in some of the windows.
    assert!(
        paced >= 3,
        "1000 calls per 1 s window in few windows: {rows:?}\nthe recorder: {}",
        run.stderr
    );
}
