//! The exports of a capture built here, whose every stack, time and count
//! is known: exact values, and each format read back by its own reader
//! (prost for pprof, the parquet crate for Parquet) or checked against its
//! specification (trace events).

use std::collections::HashMap;

use prost::Message as _;
use tracer_common::{
    capture::{
        CaptureHeader, CaptureWriter, ClockRef, End, MapEntry, Meta, ObjectSymbols, Probe,
        ProcessInfo, RecordSettings, Segment, Symbol,
    },
    record::{
        FuncEntry, FuncReturn, Header, Lifecycle, Pod as _, Sample, SockAddr, Syscall,
        TcpRetransmit, kind, lifecycle,
    },
    syscall::nr,
};

use super::*;
use crate::{Capture, debuginfo::SourceLines};

const PID: u32 = 40;
const TID: u32 = 41;
/// Where /bin/app is mapped (its segment starts at object address 0x1000).
const BASE: u64 = 0x5555_0000_0000;
const T0: u64 = 1_000_000;
const WALL: u64 = 1_700_000_000_000_000_000;

fn header(ts_ns: u64, kind: u16, size: usize) -> Header {
    Header {
        ts_ns,
        pid: PID,
        tid: TID,
        kind,
        size: size as u16,
        cpu: 1,
    }
}

/// Object address `vaddr` of /bin/app as the process sees it.
fn at(vaddr: u64) -> u64 {
    BASE + vaddr - 0x1000
}

fn entry(ts: u64, func_id: u32, call_site: u64) -> Vec<u8> {
    FuncEntry {
        header: header(ts, kind::FUNC_ENTRY, size_of::<FuncEntry>()),
        func_id,
        _pad: 0,
        ip: 0,
        call_site: at(call_site),
    }
    .as_bytes()
    .to_vec()
}

fn ret(ts: u64, func_id: u32) -> Vec<u8> {
    FuncReturn {
        header: header(ts, kind::FUNC_RETURN, size_of::<FuncReturn>()),
        func_id,
        _pad: 0,
        ret: 0,
    }
    .as_bytes()
    .to_vec()
}

fn sample(ts: u64, user: u64, kernel: u64) -> Vec<u8> {
    Sample {
        header: header(ts, kind::SAMPLE, size_of::<Sample>()),
        user_ip: if user == 0 { 0 } else { at(user) },
        kernel_ip: kernel,
        comm: *b"app\0\0\0\0\0\0\0\0\0\0\0\0\0",
    }
    .as_bytes()
    .to_vec()
}

/// Functions of /bin/app: main 0x1000, a 0x1100, b 0x1200, helper 0x1300
/// (untraced), each 0x100 long.
const MAIN: u32 = 0;
const A: u32 = 1;
const B: u32 = 2;

/// The capture: main calls a (10..30 µs) and b (40..45), returns at 100;
/// then c, an unknown id, never returns... no: b is called again at 110 and
/// never returns (open at the stop, 150). Samples at 20 (in a), 50 (in
/// helper, from the kernel's clock_nanosleep) and 120 (in b). A send at
/// 60..70, a fork at 5, a retransmission at 80.
fn capture() -> Capture {
    let mut w = CaptureWriter::new(
        Vec::new(),
        &CaptureHeader {
            host: "node1".into(),
            clock: ClockRef {
                monotonic_ns: T0,
                realtime_ns: WALL,
            },
            settings: RecordSettings {
                sample_hz: 1000,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .expect("writer");
    w.write_meta(&Meta::Process(ProcessInfo {
        pid: PID,
        traced: true,
        comm: "app".into(),
        exe: "/bin/app".into(),
        maps: vec![MapEntry {
            start: BASE,
            end: BASE + 0x1000,
            offset: 0x1000,
            perms: "r-xp".into(),
            path: "/bin/app".into(),
        }],
        ..Default::default()
    }))
    .expect("process");
    let symbols = ["main", "a", "b", "helper"]
        .iter()
        .enumerate()
        .map(|(i, n)| Symbol {
            addr: 0x1000 + 0x100 * i as u64,
            size: 0x100,
            name: (*n).into(),
        })
        .collect();
    w.write_meta(&Meta::Object(ObjectSymbols {
        path: "/bin/app".into(),
        build_id: Some("ab12".into()),
        segments: vec![Segment {
            vaddr: 0x1000,
            offset: 0x1000,
            filesz: 0x1000,
        }],
        symbols,
        ..Default::default()
    }))
    .expect("object");
    let probes = ["main", "a", "b"]
        .iter()
        .enumerate()
        .map(|(i, n)| Probe {
            func_id: i as u32,
            object: "/bin/app".into(),
            symbol: (*n).into(),
            vaddr: 0x1000 + 0x100 * i as u64,
            file_offset: 0x1000 + 0x100 * i as u64,
            ..Default::default()
        })
        .collect();
    w.write_meta(&Meta::Probes { probes }).expect("probes");
    w.write_meta(&Meta::KernelSymbols {
        symbols: vec![Symbol {
            addr: 0xffff_ffff_8100_0000,
            size: 0,
            name: "do_nanosleep".into(),
        }],
    })
    .expect("kernel");
    let us = |t: u64| T0 + t * 1000;
    let send = Syscall {
        header: header(us(70), kind::SYSCALL, size_of::<Syscall>()),
        enter_ns: us(60),
        nr: nr::SENDTO,
        fd: 5,
        ret: 512,
        arg: 0,
        flags: 0,
        conn_port: 0,
        _pad: 0,
        addr: SockAddr {
            family: 2,
            port_be: 7000u16.to_be(),
            _pad: 0,
            addr: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        },
    };
    let fork = Lifecycle {
        header: header(us(5), kind::LIFECYCLE, size_of::<Lifecycle>()),
        event: lifecycle::FORK,
        child_tid: 99,
        group_dead: 0,
        exit_code: 0,
        comm: *b"app\0\0\0\0\0\0\0\0\0\0\0\0\0",
    };
    let retransmit = TcpRetransmit {
        header: header(us(80), kind::TCP_RETRANSMIT, size_of::<TcpRetransmit>()),
        sport: 7000,
        dport: 40000,
        family: 2,
        state: 1,
        saddr: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        daddr: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    };
    let records = [
        entry(us(0), MAIN, 0x1f00),
        fork.as_bytes().to_vec(),
        entry(us(10), A, 0x1010),
        sample(us(20), 0x1120, 0),
        ret(us(30), A),
        entry(us(40), B, 0x1020),
        ret(us(45), B),
        sample(us(50), 0x1310, 0xffff_ffff_8100_0040),
        send.as_bytes().to_vec(),
        retransmit.as_bytes().to_vec(),
        ret(us(100), MAIN),
        entry(us(110), B, 0x1f10),
        sample(us(120), 0x1210, 0),
    ]
    .concat();
    w.write_records(&records).expect("records");
    w.write_meta(&Meta::End(End {
        stop_ns: us(150),
        reason: "test".into(),
        ..Default::default()
    }))
    .expect("end");
    Capture::read(w.into_inner().as_slice()).expect("capture")
}

fn lines() -> SourceLines {
    SourceLines::new(&[])
}

/// Exclusive time: main 10 + 10 + 55 µs, a 20, b 5 and, open at the stop,
/// 40; one call each (b twice, at two paths: one under main, one alone).
#[test]
fn time_profile_is_exclusive_time_per_call_path() {
    let cap = capture();
    let p = stacks::build(&[&cap], ProfileKind::Time, &mut lines());
    assert_eq!(
        p.folded(),
        [
            "app[40];b 40000",
            "app[40];main 75000",
            "app[40];main;a 20000",
            "app[40];main;b 5000",
        ]
    );
    assert_eq!(p.totals(), [4, 140_000]);
    // Traced frames carry the call site of the call above them.
    let main = p
        .frames
        .iter()
        .find(|f| f.function == "main" && f.address.is_some())
        .expect("main at a call site");
    assert_eq!(
        main.address.as_ref().map(|(o, a)| (&**o, *a)),
        Some(("/bin/app", 0x1010))
    );
}

/// A sample's stack: the traced calls open on its thread, then the sampled
/// function (merged with the innermost traced one when it is the same),
/// then the kernel's; CPU time is the sampling period per sample.
#[test]
fn sample_profile_stacks_traced_calls_over_the_sampled_function() {
    let cap = capture();
    let p = stacks::build(&[&cap], ProfileKind::Samples, &mut lines());
    assert_eq!(
        p.folded(),
        [
            "app[40];b 1",
            "app[40];main;a 1",
            "app[40];main;helper;do_nanosleep_[k] 1",
        ]
    );
    assert_eq!(p.totals(), [3, 3_000_000]);
    assert_eq!(p.period_ns, 1_000_000);
    assert_eq!(p.start_wall_ns, WALL);
    assert!(
        p.notes.iter().any(|n| n.contains("/bin/app")),
        "{:?}",
        p.notes
    );
}

/// The gzipped profile.proto decodes (prost) into the same stacks: sample
/// types, labels, leaf-first locations, a mapping with the build id.
#[test]
fn pprof_reads_back() {
    let cap = capture();
    let p = stacks::build(&[&cap], ProfileKind::Samples, &mut lines());
    let mut gz = Vec::new();
    pprof::write(&p, &build_ids(&[&cap]), main_object(&[&cap]), &mut gz).expect("writes");
    assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw)
        .expect("gunzip");
    let prof = pprof::Profile::decode(&raw[..]).expect("profile.proto");
    let s = |i: i64| prof.string_table[i as usize].as_str();
    assert_eq!(s(0), "");
    let types: Vec<(&str, &str)> = prof
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
    assert_eq!(s(prof.default_sample_type), "cpu");
    assert_eq!(prof.period, 1_000_000);
    assert_eq!(s(prof.mapping[0].filename), "/bin/app");
    assert_eq!(s(prof.mapping[0].build_id), "ab12");
    let functions: HashMap<u64, &str> = prof.function.iter().map(|f| (f.id, s(f.name))).collect();
    let locations: HashMap<u64, &pprof::Location> =
        prof.location.iter().map(|l| (l.id, l)).collect();
    let mut stacks: Vec<(String, i64)> = prof
        .sample
        .iter()
        .map(|sample| {
            let names: Vec<&str> = sample
                .location_id
                .iter()
                .flat_map(|id| locations[id].line.iter().map(|l| functions[&l.function_id]))
                .collect();
            let pid = sample
                .label
                .iter()
                .find(|l| s(l.key) == "pid")
                .map(|l| l.num);
            assert_eq!(pid, Some(i64::from(PID)));
            (names.join("<"), sample.value[0])
        })
        .collect();
    stacks.sort();
    assert_eq!(
        stacks,
        [
            ("a<main".to_string(), 1),
            ("b".to_string(), 1),
            ("do_nanosleep<helper<main".to_string(), 1),
        ]
    );
}

/// Trace events by the format's rules: every event has its fields, slices
/// on one thread nest, names precede use; calls, system calls and instants
/// are where the records put them.
#[test]
fn chrome_trace_follows_the_trace_event_format() {
    let cap = capture();
    let mut out = Vec::new();
    let stats = chrome::write(&[&cap], &mut lines(), &mut out).expect("writes");
    assert_eq!(
        stats,
        chrome::ChromeStats {
            calls: 4,
            syscalls: 1,
            instants: 2,
            processes: 1,
            threads: 1,
        }
    );
    let doc: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
    assert_eq!(doc["otherData"]["start_wall_ns"], WALL);
    let checked = chrome::check(&doc).expect("a valid trace");
    assert_eq!(
        (checked.slices, checked.instants, checked.threads),
        (5, 2, 1)
    );
    let events = doc["traceEvents"].as_array().expect("array");
    let slice = |name: &str, ts: f64| {
        events
            .iter()
            .find(|e| e["ph"] == "X" && e["name"] == name && e["ts"] == ts)
            .unwrap_or_else(|| panic!("no slice {name} at {ts}"))
    };
    assert_eq!(slice("main", 0.0)["dur"], 100.0);
    assert_eq!(slice("a", 10.0)["dur"], 20.0);
    assert_eq!(slice("a", 10.0)["args"]["call_site"], "main+0x10");
    let open = slice("b", 110.0);
    assert_eq!(
        (open["dur"].as_f64(), open["args"]["open_at_stop"].as_bool()),
        (Some(40.0), Some(true))
    );
    let send = slice("sendto", 60.0);
    assert_eq!(send["dur"], 10.0);
    assert_eq!(send["args"]["addr"], "10.0.0.2:7000");
    assert_eq!(send["args"]["ret"], 512);
    let retransmit = events
        .iter()
        .find(|e| e["cat"] == "network")
        .expect("retransmit");
    assert_eq!(
        (retransmit["ph"].as_str(), retransmit["s"].as_str()),
        (Some("i"), Some("g"))
    );
    assert_eq!(retransmit["args"]["remote"], "10.0.0.2:40000");
}

/// The events table reads back row by row with the parquet crate.
#[test]
fn events_parquet_reads_back() {
    use ::parquet::file::reader::{FileReader as _, SerializedFileReader};
    let cap = capture();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("e.parquet");
    let file = std::fs::File::create(&path).expect("create");
    let rows = parquet::write_events(&[("c.capture", &cap)], &mut lines(), file).expect("writes");
    assert_eq!(rows, 13);
    let reader =
        SerializedFileReader::new(std::fs::File::open(&path).expect("open")).expect("reads");
    assert_eq!(reader.metadata().file_metadata().num_rows(), 13);
    let rows: Vec<String> = reader
        .get_row_iter(None)
        .expect("rows")
        .map(|r| r.expect("row").to_string())
        .collect();
    let send = rows
        .iter()
        .find(|r| r.contains("sendto"))
        .expect("send row");
    for field in [
        "kind: \"syscall\"",
        "duration_ns: 10000",
        "fd: 5",
        "ret: 512",
        "address: \"10.0.0.2:7000\"",
        "host: \"node1\"",
    ] {
        assert!(send.contains(field), "{field} in {send}");
    }
    let entry = rows
        .iter()
        .find(|r| r.contains("name: \"a\"") && r.contains("entry"))
        .expect("a");
    assert!(entry.contains("location: \"main+0x10\""), "{entry}");
    assert!(entry.contains("source: null"), "no debug info: {entry}");
    let kernel = rows
        .iter()
        .find(|r| r.contains("do_nanosleep"))
        .expect("kernel sample");
    assert!(kernel.contains("location: \"helper+0x10\""), "{kernel}");
}

/// Reads a Parquet file's rows as text.
fn parquet_rows(path: &std::path::Path) -> Vec<String> {
    use ::parquet::file::reader::{FileReader as _, SerializedFileReader};
    let reader =
        SerializedFileReader::new(std::fs::File::open(path).expect("open")).expect("reads");
    reader
        .get_row_iter(None)
        .expect("rows")
        .map(|r| r.expect("row").to_string())
        .collect()
}

/// Units keep the report's order (rank 1 first), its earliest anomaly and
/// every contribution.
#[test]
fn units_parquet_reads_back() {
    use crate::{
        score::{Difference, DifferenceKind, ScoreReport, Scoring, UnitScore},
        units::{UnitKind, Variant},
    };
    let unit = |score: f64, start_ns: u64, anomalous: bool| UnitScore {
        host: "node1".into(),
        pid: PID,
        comm: "app".into(),
        tid: TID,
        kind: UnitKind::Handler,
        start_ns,
        end_ns: start_ns + 5,
        t_s: start_ns as f64 / 1e9,
        wall: String::new(),
        wall_ns: WALL + start_ns,
        deviated_wall_ns: WALL + start_ns,
        deviated_s: start_ns as f64 / 1e9,
        capture: "c.capture".into(),
        role: "main".into(),
        connection: Some("fd 5".into()),
        peer: None,
        score,
        normal: anomalous.then_some(0.2),
        anomalous,
        reason: String::new(),
        differences: vec![Difference {
            path: "main > handle".into(),
            kind: DifferenceKind::Missing,
            p: 0.9,
            delta: 0.9,
        }],
        evidence: Vec::new(),
        unsure: Vec::new(),
        behaviour: None,
        open: Vec::new(),
        exited: false,
        cut: false,
        shared: false,
        group: None,
        ended_by: None,
        not_judged: Vec::new(),
    };
    let report = ScoreReport::new(
        Variant::Paper000,
        Scoring::Nodes,
        crate::score::Ranking::Score,
        &["c.capture".to_string()],
        vec![
            unit(0.4, 300, true),
            unit(0.9, 500, true),
            unit(0.1, 100, false),
        ],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("u.parquet");
    let rows = parquet::write_units(&report, std::fs::File::create(&path).expect("create"))
        .expect("writes");
    assert_eq!(rows, 3);
    let rows = parquet_rows(&path);
    assert!(rows[0].starts_with("{rank: 1,"), "{}", rows[0]);
    assert!(rows[0].contains("score: 0.9"), "{}", rows[0]);
    assert!(rows[0].contains("earliest: false"), "{}", rows[0]);
    assert!(
        rows[1].contains("score: 0.4") && rows[1].contains("earliest: true"),
        "{}",
        rows[1]
    );
    assert!(
        rows[2].contains("normal: null") && rows[2].contains("anomalous: false"),
        "{}",
        rows[2]
    );
    assert!(
        rows[0].contains("top_difference: \"missing main > handle (p=0.90)\""),
        "{}",
        rows[0]
    );
    assert!(
        rows[0].contains("connection: \"fd 5\", peer: null"),
        "{}",
        rows[0]
    );
}

/// One row per window, server, metric and kept component, with the
/// server's score in that window.
#[test]
fn windows_parquet_reads_back() {
    use crate::peers::{Metric, MetricVectors, Scored, ServerInfo, Windowed};
    let server = |label: &str| ServerInfo {
        label: label.into(),
        source: format!("{label}.capture"),
        host: "node1".into(),
        span: (0, 10),
    };
    let scored = Scored {
        run: "run-1".into(),
        servers: vec![server("s0"), server("s1")],
        windowed: Windowed {
            starts: vec![WALL, WALL + 2_000_000_000],
            window_ns: 4_000_000_000,
            metrics: vec![MetricVectors {
                metric: Metric::SyscallTime,
                components: vec!["read".into(), "write".into()],
                vectors: vec![
                    vec![vec![1.0, 2.0], vec![3.0, 4.0]],
                    vec![vec![5.0, 6.0], vec![7.0, 8.0]],
                ],
                empty: None,
            }],
            common_span: (WALL, WALL + 6_000_000_000),
        },
        scores: vec![vec![vec![0.5, 0.5], vec![1.5, 2.5]]],
        retransmit_peers: vec![HashMap::new(), HashMap::new()],
        notes: Vec::new(),
        events: 0,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.parquet");
    let n = parquet::write_windows(
        &[scored],
        &[Metric::SyscallTime],
        std::fs::File::create(&path).expect("create"),
    )
    .expect("writes");
    assert_eq!(n, 8, "2 windows × 2 servers × 2 components");
    let rows = parquet_rows(&path);
    let row = rows
        .iter()
        .find(|r| {
            r.contains("window_index: 1,")
                && r.contains("server: \"s1\"")
                && r.contains("\"write\"")
        })
        .expect("row");
    assert!(
        row.contains("value: 8.0") && row.contains("score: 2.5"),
        "{row}"
    );
    assert!(
        row.contains("unit: \"% of the median server's total\""),
        "{row}"
    );
    assert!(row.contains("metric: \"syscall-time\""), "{row}");
}

/// The flame graph is an SVG with a frame per function of the folded
/// stacks (inferno titles each `NAME (N samples, P%)`); no stacks, no graph.
#[test]
fn flamegraph_draws_every_function() {
    let cap = capture();
    let p = stacks::build(&[&cap], ProfileKind::Samples, &mut lines());
    let mut svg = Vec::new();
    flamegraph::write(&p, "test", &mut svg).expect("draws");
    let svg = String::from_utf8(svg).expect("utf8");
    assert!(
        svg.starts_with("<?xml") && svg.contains("<svg"),
        "{}",
        &svg[..100]
    );
    // inferno shows kernel frames without their `_[k]` (it colours them).
    for f in ["main", "a", "b", "helper", "do_nanosleep", "app[40]"] {
        assert!(svg.contains(&format!("<title>{f} (")), "{f}");
    }
    let empty = stacks::build(&[&cap], ProfileKind::Samples, &mut lines());
    let empty = StackProfile {
        stacks: Vec::new(),
        ..empty
    };
    assert!(matches!(
        flamegraph::write(&empty, "t", &mut Vec::new()),
        Err(ExportError::Empty { .. })
    ));
}

/// The checker rejects what viewers would draw wrong.
#[test]
fn chrome_check_rejects_overlapping_slices_and_unnamed_tracks() {
    let named = serde_json::json!([
        {"name": "process_name", "ph": "M", "ts": 0, "pid": 1, "tid": 0, "args": {"name": "p"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": 1, "tid": 1, "args": {"name": "t"}},
    ]);
    let with = |more: serde_json::Value| {
        let mut events = named.as_array().cloned().unwrap_or_default();
        events.extend(more.as_array().cloned().unwrap_or_default());
        serde_json::json!({ "traceEvents": events })
    };
    let nested = with(serde_json::json!([
        {"name": "a", "ph": "X", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"name": "b", "ph": "X", "ts": 2, "dur": 3, "pid": 1, "tid": 1},
        {"name": "c", "ph": "X", "ts": 10, "dur": 1, "pid": 1, "tid": 1},
    ]));
    assert!(chrome::check(&nested).is_ok());
    let overlapping = with(serde_json::json!([
        {"name": "a", "ph": "X", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"name": "b", "ph": "X", "ts": 5, "dur": 10, "pid": 1, "tid": 1},
    ]));
    assert!(chrome::check(&overlapping).is_err());
    let unnamed = with(serde_json::json!([
        {"name": "a", "ph": "X", "ts": 0, "dur": 1, "pid": 2, "tid": 2},
    ]));
    assert!(chrome::check(&unnamed).is_err());
    let no_scope = with(serde_json::json!([
        {"name": "i", "ph": "i", "ts": 0, "pid": 1, "tid": 1},
    ]));
    assert!(chrome::check(&no_scope).is_err());
}
