//! Live evaluation on hand-made streams: a poll-loop server (main > serve >
//! poll, handle > recv, parse, log), cut into preamble, gap and window the
//! way the agent cuts its flight recorder; and four peer servers.

use tracer_common::{
    capture::{
        CaptureHeader, CaptureWriter, ClockRef, End, FORMAT_VERSION, Meta, Probe, ProcessInfo,
        RecordSettings,
    },
    record::{FuncEntry, FuncReturn, Header, Lifecycle, Pod as _, Syscall, kind, lifecycle},
    syscall::nr,
};

use super::*;
use crate::{
    decode::Capture,
    model::GlobalModel,
    peers::{self, CaptureSource, Metric, PeersConfig, ServerSplit, Thresholds},
    score::{Scoring, UnitScore, score_processes},
    units::{UnitKind, Variant, decompose_capture},
};

/// Wall clock at monotonic 0, a multiple of every shift used.
const T0: u64 = 1_800_000_000_000_000_000;
const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
const PID: u32 = 100;

/// One record with its time.
type Rec = (u64, Vec<u8>);

fn header(ts: u64, pid: u32, k: u16, size: usize) -> Header {
    Header {
        ts_ns: ts,
        pid,
        tid: pid,
        kind: k,
        size: size as u16,
        cpu: 0,
    }
}

fn call(ts: u64, pid: u32, func_id: u32, site: u64) -> Rec {
    let r = FuncEntry {
        header: header(ts, pid, kind::FUNC_ENTRY, size_of::<FuncEntry>()),
        func_id,
        _pad: 0,
        ip: 0x1000 + u64::from(func_id),
        call_site: site,
    };
    (ts, r.as_bytes().to_vec())
}

fn ret(ts: u64, pid: u32, func_id: u32) -> Rec {
    let r = FuncReturn {
        header: header(ts, pid, kind::FUNC_RETURN, size_of::<FuncReturn>()),
        func_id,
        _pad: 0,
        ret: 0,
    };
    (ts, r.as_bytes().to_vec())
}

/// A system call entered at `ts`, recorded at its exit.
fn sys(ts: u64, pid: u32, n: u32, fd: i32, ret: i64) -> Rec {
    let r = Syscall {
        header: header(ts + US / 2, pid, kind::SYSCALL, size_of::<Syscall>()),
        enter_ns: ts,
        nr: n,
        fd,
        ret,
        ..Default::default()
    };
    (ts + US / 2, r.as_bytes().to_vec())
}

fn exit(ts: u64, pid: u32) -> Rec {
    let r = Lifecycle {
        header: header(ts, pid, kind::LIFECYCLE, size_of::<Lifecycle>()),
        event: lifecycle::EXIT,
        child_tid: 0,
        group_dead: 1,
        exit_code: 0,
        comm: *b"srv\0\0\0\0\0\0\0\0\0\0\0\0\0",
    };
    (ts, r.as_bytes().to_vec())
}

/// A capture of `records` (in this order) of processes `pids`, functions
/// `functions` by func_id.
fn capture(records: &[Rec], pids: &[u32], functions: &[&str], clock_mono: u64) -> Capture {
    let mut w = CaptureWriter::new(
        Vec::new(),
        &CaptureHeader {
            format_version: FORMAT_VERSION,
            host: "node1".into(),
            boot_id: "boot".into(),
            clock: ClockRef {
                monotonic_ns: clock_mono,
                realtime_ns: T0 + clock_mono,
            },
            settings: RecordSettings::default(),
            ..Default::default()
        },
    )
    .expect("writer");
    for pid in pids {
        w.write_meta(&Meta::Process(ProcessInfo {
            pid: *pid,
            ppid: 1,
            traced: true,
            comm: "srv".into(),
            exe: "/usr/sbin/srv".into(),
            cmdline: vec!["/usr/sbin/srv".into()],
            ..Default::default()
        }))
        .expect("process");
    }
    let probes = functions
        .iter()
        .enumerate()
        .map(|(i, f)| Probe {
            func_id: i as u32,
            object: "/usr/sbin/srv".into(),
            symbol: (*f).into(),
            ..Default::default()
        })
        .collect();
    w.write_meta(&Meta::Probes { probes }).expect("probes");
    let bytes: Vec<u8> = records.iter().flat_map(|(_, r)| r.clone()).collect();
    w.write_records(&bytes).expect("records");
    Capture::read(w.into_inner().as_slice()).expect("capture")
}

const FUNCTIONS: [&str; 5] = ["main", "serve", "handle", "parse", "log"];
const MAIN: u32 = 0;
const SERVE: u32 = 1;
const HANDLE: u32 = 2;
const PARSE: u32 = 3;
const LOG: u32 = 4;

/// The server's records: init, `iterations` loop iterations (each third
/// handler also logs), and, when `finish`, the loop's end and the exit.
/// Also the index of the first record of each iteration (its poll).
fn server(iterations: usize, finish: bool) -> (Vec<Rec>, Vec<usize>) {
    let mut t = 1_000 * US;
    let mut next = || {
        t += US;
        t
    };
    let mut r = vec![call(next(), PID, MAIN, 0x900)];
    r.push(sys(next(), PID, nr::BIND, 3, 0));
    r.push(sys(next(), PID, nr::LISTEN, 3, 0));
    r.push(call(next(), PID, SERVE, 0x1010));
    r.push(sys(next(), PID, nr::POLL, -1, 1));
    r.push(sys(next(), PID, nr::ACCEPT, 3, 4));
    let mut polls = Vec::new();
    for i in 0..iterations {
        polls.push(r.len());
        r.push(sys(next(), PID, nr::POLL, -1, 1));
        r.push(call(next(), PID, HANDLE, 0x1020));
        r.push(sys(next(), PID, nr::RECVFROM, 4, 8));
        r.push(call(next(), PID, PARSE, 0x1030));
        r.push(ret(next(), PID, PARSE));
        if i % 3 == 0 {
            r.push(call(next(), PID, LOG, 0x1040));
            r.push(sys(next(), PID, nr::SENDTO, 4, 8));
            r.push(ret(next(), PID, LOG));
        }
        r.push(sys(next(), PID, nr::SENDTO, 4, 8));
        r.push(ret(next(), PID, HANDLE));
    }
    if finish {
        r.push(ret(next(), PID, SERVE));
        r.push(sys(next(), PID, nr::CLOSE, 3, 0));
        r.push(ret(next(), PID, MAIN));
        r.push(exit(next(), PID));
    }
    (r, polls)
}

/// The agent's capture: records `..pre` (the preamble), then `from..to`.
fn live(records: &[Rec], pre: usize, from: usize, to: usize) -> Capture {
    let mut r = records[..pre].to_vec();
    r.extend_from_slice(&records[from..to]);
    capture(&r, &[PID], &FUNCTIONS, 0)
}

/// A model learned from the whole run, and the whole run's scores.
fn learned(records: &[Rec]) -> (GlobalModel, Vec<UnitScore>) {
    let full = capture(records, &[PID], &FUNCTIONS, 0);
    let processes = decompose_capture(&full, Variant::Paper000);
    let mut model = GlobalModel::new(Variant::Paper000);
    for p in &processes {
        model.learn(p);
    }
    let scores = score_processes(&model, &full, "full", &processes, Scoring::Nodes);
    (model, scores)
}

/// The time of record `i` (a system call's entry, as units see it).
fn at(records: &[Rec], i: usize) -> u64 {
    let (ts, bytes) = &records[i];
    match Syscall::read_from(bytes) {
        Some(s) if s.header.kind == kind::SYSCALL => s.enter_ns,
        _ => *ts,
    }
}

fn starts(scores: &[UnitScore]) -> Vec<u64> {
    let mut s: Vec<u64> = scores.iter().map(|u| u.start_ns).collect();
    s.sort_unstable();
    s
}

/// The preamble ends inside `handle > log`; the window starts at a later
/// poll. Replayed as is, the stale `handle > log` frames stay open under
/// every later call; re-anchored, every window unit has its replay score.
#[test]
fn window_units_score_as_in_the_replay_of_the_whole_run() {
    let (records, polls) = server(40, false);
    let (model, offline) = learned(&records);
    // Iteration 3 logs: its `call log` is the 6th record after its poll.
    let pre = polls[3] + 6;
    assert_eq!(
        FuncEntry::read_from(&records[pre - 1].1).map(|e| e.func_id),
        Some(LOG)
    );
    let (from, to) = (polls[20], polls[30] + 3);
    let cap = live(&records, pre, from, to);
    let w = at(&records, from);
    let mut live_model = LiveModel::new(model.clone(), Scoring::Nodes);
    let got = live_model.evaluate(&cap, w, at(&records, to - 1), "live");
    assert!(got.len() >= 8, "{} units", got.len());
    let mut window_units = 0;
    for u in &got {
        let o = offline
            .iter()
            .find(|o| o.tid == u.tid && o.start_ns == u.start_ns)
            .unwrap_or_else(|| panic!("unit at {} is not a unit of the replay", u.start_ns));
        assert_eq!(o.kind, u.kind);
        assert!(
            (o.score - u.score).abs() < 1e-12,
            "{:?} at {}: live {} vs replay {}",
            u.kind,
            u.start_ns,
            u.score,
            o.score
        );
        window_units += usize::from(u.start_ns >= w);
    }
    assert!(window_units >= 8);
    // Without the unwinding the same window scores higher.
    let naive = decompose_capture(&cap, Variant::Paper000);
    let naive = score_processes(&model, &cap, "naive", &naive, Scoring::Nodes);
    let worst = |s: &[UnitScore]| {
        s.iter()
            .filter(|u| u.start_ns > w && u.kind == UnitKind::Handler)
            .map(|u| u.score)
            .fold(0.0, f64::max)
    };
    assert!(
        worst(&naive) > worst(&got) + 0.1,
        "naive {} vs live {}",
        worst(&naive),
        worst(&got)
    );
}

/// Two evaluations of overlapping windows report every complete unit once:
/// the replay's units inside the windows, less the first after the gap.
#[test]
fn a_complete_unit_is_reported_once_across_overlapping_windows() {
    let (records, polls) = server(60, false);
    let (model, offline) = learned(&records);
    let pre = polls[2] + 3;
    let mut m = LiveModel::new(model, Scoring::Nodes);
    let (w1, end1) = (polls[20], polls[35] + 4);
    let first = m.evaluate(
        &live(&records, pre, w1, end1),
        at(&records, w1),
        at(&records, end1 - 1),
        "a",
    );
    let (w2, end2) = (polls[28], polls[45] + 3);
    let second = m.evaluate(
        &live(&records, pre, w2, end2),
        at(&records, w2),
        at(&records, end2 - 1),
        "b",
    );
    let (a, b) = (starts(&first), starts(&second));
    assert!(a.iter().all(|s| !b.contains(s)), "reported twice");
    // The preamble's complete units: the initializer and the first handler
    // (the accept); the one cut by the gap is not.
    let pre_end = at(&records, pre - 1);
    let early: Vec<u64> = offline
        .iter()
        .filter(|o| o.end_ns <= at(&records, polls[2]))
        .map(|o| o.start_ns)
        .collect();
    let mut expected = early;
    let window: Vec<u64> = {
        let mut s: Vec<u64> = offline
            .iter()
            .filter(|o| o.start_ns >= at(&records, w1) && o.end_ns <= at(&records, end2 - 1))
            .map(|o| o.start_ns)
            .collect();
        s.sort_unstable();
        s
    };
    // The preamble's last unit runs across the gap to the first handler of
    // the window, which is whole.
    expected.extend(window);
    expected.sort_unstable();
    let mut all = [a, b].concat();
    all.sort_unstable();
    assert_eq!(all, expected);
    assert!(all.iter().all(|s| *s <= pre_end || *s > at(&records, w1)));
}

/// The unit the window starts in (its call of `handle` fell into the gap)
/// is not reported; nor is the unit the preamble ends in.
#[test]
fn the_unit_cut_by_the_gap_is_not_reported() {
    let (records, polls) = server(30, false);
    let (model, offline) = learned(&records);
    // Inside handle > parse (the unit runs across the gap), and after a
    // poll (the window's first unit starts at its receive).
    for pre in [polls[4] + 4, polls[5] + 1] {
        cut_by_the_gap(&records, &polls, &model, &offline, pre);
    }
}

fn cut_by_the_gap(
    records: &[Rec],
    polls: &[usize],
    model: &GlobalModel,
    offline: &[UnitScore],
    pre: usize,
) {
    let records = records.to_vec();
    let from = polls[15] + 2; // the receive: `call handle` is lost
    let w = at(&records, from);
    let got = LiveModel::new(model.clone(), Scoring::Nodes).evaluate(
        &live(&records, pre, from, polls[25]),
        w,
        at(&records, polls[25] - 1),
        "x",
    );
    let cut = |t: u64| {
        offline
            .iter()
            .find(|o| o.start_ns <= t && t <= o.end_ns)
            .map(|o| o.start_ns)
    };
    let s = starts(&got);
    assert!(!s.contains(&w), "the receive without its handler call");
    for t in [w, at(&records, pre - 1)] {
        let c = cut(t).expect("a unit there");
        assert!(!s.contains(&c), "the unit at {c} is cut by the gap");
    }
    assert!(s.iter().all(|x| *x < at(&records, pre - 1) || *x > w));
    // In the window: every complete unit of the replay after the cut one.
    let end = at(&records, polls[25] - 1);
    let mut whole: Vec<u64> = offline
        .iter()
        .filter(|o| o.start_ns > w && o.end_ns <= end)
        .map(|o| o.start_ns)
        .collect();
    whole.sort_unstable();
    let after: Vec<u64> = s.iter().copied().filter(|x| *x > w).collect();
    assert_eq!(after, whole);
    assert_eq!(after.len(), 8);
}

/// The window's last unit is still open; the next evaluation, once it is
/// complete, reports it.
#[test]
fn the_open_last_unit_is_reported_once_complete() {
    let (records, polls) = server(30, false);
    let (model, _) = learned(&records);
    let pre = polls[1];
    let mut m = LiveModel::new(model, Scoring::Nodes);
    let from = polls[10];
    let end1 = polls[20] + 3; // inside handle
    let open_start = at(&records, polls[20] + 1); // its call of handle
    let first = m.evaluate(
        &live(&records, pre, from, end1),
        at(&records, from),
        at(&records, end1 - 1),
        "1",
    );
    assert!(!starts(&first).contains(&open_start));
    let end2 = polls[22];
    let second = m.evaluate(
        &live(&records, pre, from, end2),
        at(&records, from),
        at(&records, end2 - 1),
        "2",
    );
    assert!(starts(&second).contains(&open_start));
    // Still there next time: not again.
    let third = m.evaluate(
        &live(&records, pre, from, end2),
        at(&records, from),
        at(&records, end2 - 1),
        "3",
    );
    assert!(third.is_empty(), "{:?}", starts(&third));
}

/// The finalizer is reported after the exit, once; a process that left the
/// capture is forgotten.
#[test]
fn the_finalizer_waits_for_the_exit_and_exited_processes_are_forgotten() {
    let (records, polls) = server(20, true);
    let (model, offline) = learned(&records);
    let finalizer = offline
        .iter()
        .find(|o| o.kind == UnitKind::Finalizer)
        .map(|o| o.start_ns)
        .expect("a finalizer in the replay");
    let pre = polls[1];
    let from = polls[10];
    let n = records.len();
    let mut m = LiveModel::new(model, Scoring::Nodes);
    // Everything but the exit: the loop ended, the process did not.
    let before = m.evaluate(
        &live(&records, pre, from, n - 1),
        at(&records, from),
        at(&records, n - 2),
        "1",
    );
    assert!(before.iter().all(|u| u.kind != UnitKind::Finalizer));
    let after = m.evaluate(
        &live(&records, pre, from, n),
        at(&records, from),
        at(&records, n - 1),
        "2",
    );
    let fin: Vec<&UnitScore> = after
        .iter()
        .filter(|u| u.kind == UnitKind::Finalizer)
        .collect();
    assert_eq!(fin.len(), 1);
    assert_eq!(fin[0].start_ns, finalizer);
    assert!(
        m.evaluate(
            &live(&records, pre, from, n),
            at(&records, from),
            at(&records, n - 1),
            "3"
        )
        .is_empty()
    );
    assert_eq!(m.remembered_threads(), 1);
    // The next capture no longer holds the exited process.
    let other = vec![
        call(5 * SEC, 200, MAIN, 0x900),
        sys(5 * SEC + US, 200, nr::BIND, 3, 0),
    ];
    let _ = m.evaluate(
        &capture(&other, &[200], &FUNCTIONS, 0),
        5 * SEC,
        6 * SEC,
        "4",
    );
    assert!(m.remembered_threads() <= 1);
    assert!(!m.reported.keys().any(|(pid, _)| *pid == PID));
    assert!(!m.connections.contains_key(&PID));
}

// ---- peers ----

const PEER_FUNCTIONS: [&str; 3] = ["serve", "read_disk", "lookup"];

fn peer_pid(s: usize) -> u32 {
    1000 + s as u32
}

/// Ten requests a second on each of `servers` servers from monotonic 5 s,
/// in lock-step; each `(server, from, until)` of `busy` calls `lookup` 3× as
/// often from `from` until `until`.
fn peer_records(servers: usize, seconds: u64, seed: u64, busy: &[(usize, u64, u64)]) -> Vec<Rec> {
    peer_records_slow(servers, seconds, seed, busy, &[])
}

/// [`peer_records`], and each `(server, from, until)` of `slow` takes 4× as
/// long in `read_disk` from `from` until `until`.
fn peer_records_slow(
    servers: usize,
    seconds: u64,
    seed: u64,
    busy: &[(usize, u64, u64)],
    slow: &[(usize, u64, u64)],
) -> Vec<Rec> {
    let mut state = seed | 1;
    let mut jitter = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        1.0 + 0.05 * ((state % 2001) as f64 / 1000.0 - 1.0)
    };
    let mut out = Vec::new();
    for s in 0..servers {
        let p = peer_pid(s);
        let mut t = 5 * SEC + 100 * MS + s as u64 * 3 * MS;
        while t + 100 * MS < 5 * SEC + seconds * SEC {
            out.push(call(t, p, 0, 0x2000));
            let mut now = t + MS;
            out.push(call(now, p, 1, 0x2010));
            let slow_now = slow
                .iter()
                .any(|(b, from, until)| *b == s && t >= *from && t < *until);
            let disk_ms = if slow_now { 40.0 } else { 10.0 };
            now += (disk_ms * jitter() * MS as f64) as u64;
            out.push(ret(now, p, 1));
            let busy_now = busy
                .iter()
                .any(|(b, from, until)| *b == s && t >= *from && t < *until);
            let lookups = if busy_now { 9 } else { 3 };
            for _ in 0..lookups {
                out.push(call(now, p, 2, 0x2020));
                now += (0.2 * jitter() * MS as f64) as u64;
                out.push(ret(now, p, 2));
            }
            out.push(sys(now, p, nr::READ, 5, 4096));
            now += MS;
            out.push(ret(now, p, 0));
            t += 100 * MS;
        }
    }
    out.sort_by_key(|(t, _)| *t);
    out
}

fn peer_capture(records: &[Rec], servers: usize) -> Capture {
    let pids: Vec<u32> = (0..servers).map(peer_pid).collect();
    capture(records, &pids, &PEER_FUNCTIONS, 5 * SEC)
}

fn peer_config() -> PeersConfig {
    PeersConfig {
        window_ns: 4 * SEC,
        shift_ns: 2 * SEC,
        split: ServerSplit::PerProcess { label_arg: None },
        metrics: vec![Metric::Count, Metric::Time],
        ..Default::default()
    }
}

fn peer_thresholds() -> Thresholds {
    peer_thresholds_for(&peer_config())
}

fn peer_thresholds_for(cfg: &PeersConfig) -> Thresholds {
    let path = std::path::Path::new("clean");
    let runs: Vec<peers::Scored> = [11, 22]
        .iter()
        .map(|seed| {
            let mut cap = peer_capture(&peer_records(4, 40, *seed, &[]), 4);
            cap.end = Some(End {
                stop_ns: 45 * SEC,
                reason: "duration".into(),
                ..Default::default()
            });
            let sources = [CaptureSource {
                path,
                label: "clean",
                capture: &cap,
            }];
            peers::analyze("clean", &sources, cfg, 1).expect("clean run")
        })
        .collect();
    peers::train(&runs, cfg).expect("train")
}

/// A live capture of `records`: those before 6 s (the preamble), then those
/// in `[now − 10 s, now]`.
fn peer_live(records: &[Rec], servers: usize, now: u64) -> (Capture, u64) {
    let w = now - 10 * SEC;
    let kept: Vec<Rec> = records
        .iter()
        .filter(|(t, _)| *t < 6 * SEC || (*t >= w && *t <= now))
        .cloned()
        .collect();
    (peer_capture(&kept, servers), w)
}

/// Server 2 calls `lookup` 3× as often from 20 s on: it is faulty from its
/// k-th anomalous window of the last 2k−1, not before, and `lookup` tops the
/// root cause; every window is reported once.
#[test]
fn live_peers_indict_a_busier_server_after_k_of_2k_minus_1_windows() {
    let thresholds = peer_thresholds();
    let k = thresholds.config.k;
    let records = peer_records(4, 44, 99, &[(2, 25 * SEC, u64::MAX)]);
    let mut live = LivePeers::new(thresholds);
    let mut windows = Vec::new();
    let mut now = 16 * SEC;
    while now <= 48 * SEC {
        let (cap, w) = peer_live(&records, 4, now);
        let report = live.evaluate(&cap, w, now);
        assert_eq!(report.version, LIVE_REPORT_VERSION);
        assert!(report.compared, "{:?}", report.notes);
        let json = serde_json::to_string(&report).expect("json");
        // Floats may lose their last bit in JSON: compare the shape.
        let back: LivePeersReport = serde_json::from_str(&json).expect("parse");
        assert_eq!(back.windows.len(), report.windows.len());
        assert_eq!(back.servers, report.servers);
        assert_eq!(back.faulty, report.faulty);
        windows.extend(report.windows);
        now += 3 * SEC;
    }
    let window_starts: Vec<u64> = windows.iter().map(|w| w.start_ns).collect();
    assert!(
        window_starts.windows(2).all(|p| p[0] < p[1]),
        "each window once, in order: {window_starts:?}"
    );
    assert!(windows.len() >= 10, "{} windows", windows.len());
    let label = "srv[1002]";
    let cell = |w: &LiveWindow, server: &str| {
        w.servers
            .iter()
            .find(|s| s.server == server)
            .and_then(|s| s.metrics.get(&Metric::Count))
            .cloned()
            .expect("a count cell")
    };
    let anomalous: Vec<bool> = windows.iter().map(|w| cell(w, label).anomalous).collect();
    let expected = peers::k_of_2k_minus_1(&anomalous, k);
    let faulty: Vec<bool> = windows.iter().map(|w| cell(w, label).faulty).collect();
    assert_eq!(faulty, expected);
    let first = faulty.iter().position(|f| *f).expect("indicted");
    assert_eq!(
        anomalous[..=first].iter().filter(|a| **a).count(),
        k,
        "indicted at its k-th anomalous window"
    );
    assert!(!windows[first - 1].faulty.contains(&label.to_string()));
    // Not before the fault.
    let fault_rt = T0 + 25 * SEC;
    assert!(windows[first].end_ns > fault_rt);
    for w in &windows {
        assert!(w.faulty.iter().all(|s| s == label), "{:?}", w.faulty);
    }
    let cause = windows[first]
        .root_causes
        .iter()
        .find(|r| r.server == label && r.metric == Metric::Count)
        .expect("a root cause");
    assert!(cause.top[0].component.contains("lookup"), "{:?}", cause.top);
    // The feature vectors travel as JSON with a version.
    let json = serde_json::to_value(&windows[first].features).expect("json");
    assert_eq!(json["version"], LIVE_REPORT_VERSION);
    assert_eq!(live.remembered_servers(), 4);
}

/// Windows of a live run of `records` evaluated every 3 s from 16 s to
/// `until`, with the persistence share `persistence`.
fn live_windows(records: &[Rec], persistence: Option<f64>, until: u64) -> Vec<LiveWindow> {
    let mut thresholds = peer_thresholds();
    thresholds.config.persistence = persistence;
    let mut live = LivePeers::new(thresholds);
    let mut windows = Vec::new();
    let mut now = 16 * SEC;
    while now <= until {
        let (cap, w) = peer_live(records, 5, now);
        windows.extend(live.evaluate(&cap, w, now).windows);
        now += 3 * SEC;
    }
    windows
}

/// Server 2 turns busy at 20 s and stays so; server 1 is busy only from 26
/// to 36 s, beside it. As in `peers diagnose`, the persistence rule calls
/// server 2 faulty and says server 1 deviated briefly; without the rule
/// both are called faulty. Once nobody has been faulty for 2k−1 windows the
/// episode is over, and a server that deviates later is judged afresh.
#[test]
fn live_peers_call_the_persistent_server_faulty_not_the_brief_one() {
    // Five servers: with two of four deviating, the median server would
    // sit between them and the rest, and neither would stand out.
    let records = peer_records(
        5,
        80,
        7,
        &[
            (2, 20 * SEC, 50 * SEC),
            (1, 26 * SEC, 36 * SEC),
            (3, 62 * SEC, u64::MAX),
        ],
    );
    let (s1, s2, s3) = ("srv[1001]", "srv[1002]", "srv[1003]");
    let has = |v: &[String], s: &str| v.iter().any(|x| x == s);
    let without = live_windows(&records, None, 84 * SEC);
    assert!(
        without.iter().any(|w| has(&w.faulty, s1)),
        "without the rule the brief server is called faulty: {:?}",
        without.iter().map(|w| &w.faulty).collect::<Vec<_>>()
    );
    let with = live_windows(&records, Some(0.67), 84 * SEC);
    let faulty: Vec<&Vec<String>> = with.iter().map(|w| &w.faulty).collect();
    let brief: Vec<&Vec<String>> = with.iter().map(|w| &w.brief).collect();
    assert!(with.iter().any(|w| has(&w.faulty, s2)), "{faulty:?}");
    assert!(!with.iter().any(|w| has(&w.faulty, s1)), "{faulty:?}");
    assert!(with.iter().any(|w| has(&w.brief, s1)), "{brief:?}");
    for w in &with {
        let called = w.servers.iter().filter(|s| s.faulty).count();
        assert_eq!(called, w.faulty.len(), "the cells agree with the verdict");
        assert!(w.root_causes.iter().all(|r| has(&w.faulty, &r.server)));
    }
    // Server 3, busy from 62 s long after server 2 calmed down, starts a
    // new episode: it is called faulty, not measured against server 2.
    assert!(with.iter().any(|w| has(&w.faulty, s3)), "{faulty:?}");
}

/// From 20 s on, server 2's `read_disk` takes 4× as long (its latency
/// deviates: its own resources) while server 1 calls `lookup` 3× as often
/// at the same latency (only its count deviates: it carries more of the
/// work). As in `peers diagnose`, the load-shift rule calls server 2 alone
/// faulty and lists server 1 as having taken over load; off, both are
/// called faulty.
#[test]
fn live_peers_do_not_call_a_server_that_took_over_load_faulty() {
    let cfg = PeersConfig {
        metrics: vec![Metric::Count, Metric::Latency],
        ..peer_config()
    };
    let records = peer_records_slow(
        4,
        56,
        7,
        &[(1, 20 * SEC, u64::MAX)],
        &[(2, 20 * SEC, u64::MAX)],
    );
    let (s1, s2) = ("srv[1001]", "srv[1002]");
    let has = |v: &[String], s: &str| v.iter().any(|x| x == s);
    let windows = |load_shift: bool| {
        let mut thresholds = peer_thresholds_for(&cfg);
        assert!(thresholds.config.load_shift, "on by default");
        thresholds.config.load_shift = load_shift;
        let mut live = LivePeers::new(thresholds);
        let mut windows = Vec::new();
        let mut now = 16 * SEC;
        while now <= 58 * SEC {
            let (cap, w) = peer_live(&records, 4, now);
            let report = live.evaluate(&cap, w, now);
            assert!(report.compared, "{:?}", report.notes);
            windows.extend(report.windows);
            now += 3 * SEC;
        }
        windows
    };
    let without = windows(false);
    let faulty: Vec<&Vec<String>> = without.iter().map(|w| &w.faulty).collect();
    assert!(
        without
            .iter()
            .any(|w| has(&w.faulty, s1) && has(&w.faulty, s2)),
        "without the rule both are called faulty: {faulty:?}"
    );
    assert!(without.iter().all(|w| w.load_shift.is_empty()));
    let with = windows(true);
    let faulty: Vec<&Vec<String>> = with.iter().map(|w| &w.faulty).collect();
    let shifted: Vec<&Vec<String>> = with.iter().map(|w| &w.load_shift).collect();
    assert!(with.iter().any(|w| has(&w.faulty, s2)), "{faulty:?}");
    assert!(!with.iter().any(|w| has(&w.faulty, s1)), "{faulty:?}");
    assert!(with.iter().any(|w| has(&w.load_shift, s1)), "{shifted:?}");
    for w in &with {
        let called = w.servers.iter().filter(|s| s.faulty).count();
        assert_eq!(called, w.faulty.len(), "the cells agree with the verdict");
        assert!(w.root_causes.iter().all(|r| has(&w.faulty, &r.server)));
    }
}

/// Two servers cannot be compared: no verdict, and a note that says why.
#[test]
fn live_peers_need_three_servers() {
    let records = peer_records(2, 30, 5, &[]);
    let (cap, w) = peer_live(&records, 2, 30 * SEC);
    let report = LivePeers::new(peer_thresholds()).evaluate(&cap, w, 30 * SEC);
    assert!(!report.compared);
    assert!(report.windows.is_empty());
    assert!(
        report.notes.iter().any(|n| n.contains("at least 3")),
        "{:?}",
        report.notes
    );
}

/// A thread first seen in the window of a process seen before it: its first
/// unit lacks its beginning unless the window saw the thread being created.
#[test]
fn a_thread_that_began_in_the_gap_loses_its_first_unit() {
    let (main, polls) = server(40, false);
    let (model, _) = learned(&main);
    let (worker, _) = server(10, false);
    const TID: u32 = 101;
    let w_from = polls[20];
    let w = at(&main, w_from);
    // The worker's records, on thread TID, from inside the window.
    let shift = w + 10 * US - worker[0].0;
    let worker: Vec<Rec> = worker
        .into_iter()
        .map(|(t, mut b)| {
            b[12..16].copy_from_slice(&TID.to_le_bytes());
            b[..8].copy_from_slice(&(t + shift).to_le_bytes());
            if u16::from_le_bytes([b[16], b[17]]) == kind::SYSCALL {
                let enter = u64::from_le_bytes(b[24..32].try_into().expect("8 bytes")) + shift;
                b[24..32].copy_from_slice(&enter.to_le_bytes());
            }
            (t + shift, b)
        })
        .collect();
    let fork = {
        let r = Lifecycle {
            header: header(w + 5 * US, PID, kind::LIFECYCLE, size_of::<Lifecycle>()),
            event: lifecycle::FORK,
            child_tid: TID,
            group_dead: 0,
            exit_code: 0,
            comm: *b"srv\0\0\0\0\0\0\0\0\0\0\0\0\0",
        };
        (w + 5 * US, r.as_bytes().to_vec())
    };
    let initializer_reported = |with_fork: bool| {
        let mut r: Vec<Rec> = main[..polls[2]].to_vec();
        let mut window: Vec<Rec> = main[w_from..].to_vec();
        window.extend(worker.iter().cloned());
        if with_fork {
            window.push(fork.clone());
        }
        window.sort_by_key(|(t, _)| *t);
        let now = window.last().map_or(0, |(t, _)| *t);
        r.extend(window);
        let got = LiveModel::new(model.clone(), Scoring::Nodes).evaluate(
            &capture(&r, &[PID], &FUNCTIONS, 0),
            w,
            now,
            "t",
        );
        assert!(got.iter().filter(|u| u.tid == TID).count() >= 5);
        got.iter()
            .any(|u| u.tid == TID && u.kind == UnitKind::Initializer)
    };
    assert!(!initializer_reported(false));
    assert!(initializer_reported(true));
}
