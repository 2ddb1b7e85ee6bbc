//! Cost of live evaluation as `tracer agent` runs it: a window of 30 s
//! evaluated every 5 s, at 10 k events/s, after a preamble of 2000 records.
//! `LiveModel` on one poll-loop daemon; `LivePeers` on four servers sharing
//! the same event rate. Prints thread CPU time per evaluation and the share
//! of one core that makes at one evaluation per interval. Run with
//! `cargo bench -p analyzer --bench live`.

use analyzer::{
    Capture,
    live::{LiveModel, LivePeers},
    model::GlobalModel,
    peers::{self, CaptureSource, Metric, PeersConfig, ServerSplit},
    score::Scoring,
    units::{Variant, decompose_capture},
};
use tracer_common::{
    capture::{CaptureHeader, CaptureWriter, ClockRef, FORMAT_VERSION, Meta, Probe, ProcessInfo},
    record::{FuncEntry, FuncReturn, Header, Pod as _, Syscall, kind},
    syscall::nr,
};

/// CPU time of this thread (other engineers share the machine).
fn cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

const SEC: u64 = 1_000_000_000;
const RATE: u64 = 10_000;
const WINDOW: u64 = 30 * SEC;
const INTERVAL: u64 = 5 * SEC;
const PREAMBLE: usize = 2000;

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

fn call(ts: u64, pid: u32, f: u32, site: u64) -> Rec {
    let r = FuncEntry {
        header: header(ts, pid, kind::FUNC_ENTRY, 48),
        func_id: f,
        _pad: 0,
        ip: 0,
        call_site: site,
    };
    (ts, r.as_bytes().to_vec())
}

fn ret(ts: u64, pid: u32, f: u32) -> Rec {
    let r = FuncReturn {
        header: header(ts, pid, kind::FUNC_RETURN, 40),
        func_id: f,
        _pad: 0,
        ret: 0,
    };
    (ts, r.as_bytes().to_vec())
}

fn sys(ts: u64, pid: u32, n: u32, fd: i32, ret: i64) -> Rec {
    let r = Syscall {
        header: header(ts, pid, kind::SYSCALL, 88),
        enter_ns: ts,
        nr: n,
        fd,
        ret,
        ..Default::default()
    };
    (ts, r.as_bytes().to_vec())
}

/// A poll-loop daemon `pid` for `seconds`, `rate` records/s.
fn daemon(pid: u32, seconds: u64, rate: u64, offset: u64) -> Vec<Rec> {
    let step = SEC / rate;
    let t = std::cell::Cell::new(SEC + offset);
    let next = || {
        t.set(t.get() + step);
        t.get()
    };
    let mut r = vec![call(next(), pid, 0, 0x10)];
    r.push(sys(next(), pid, nr::BIND, 3, 0));
    r.push(sys(next(), pid, nr::LISTEN, 3, 0));
    r.push(call(next(), pid, 1, 0x20));
    r.push(sys(next(), pid, nr::POLL, -1, 1));
    r.push(sys(next(), pid, nr::ACCEPT, 3, 4));
    let mut i = 0u64;
    while t.get() < SEC + seconds * SEC {
        r.push(sys(next(), pid, nr::POLL, -1, 1));
        r.push(call(next(), pid, 2, 0x30));
        r.push(sys(next(), pid, nr::RECVFROM, 4, 8));
        let f = if i.is_multiple_of(97) { 4 } else { 3 };
        r.push(call(next(), pid, f, 0x40));
        r.push(ret(next(), pid, f));
        r.push(sys(next(), pid, nr::SENDTO, 4, 8));
        r.push(ret(next(), pid, 2));
        i += 1;
    }
    r
}

fn capture(records: &[Rec], pids: &[u32]) -> Capture {
    let mut w = CaptureWriter::new(
        Vec::new(),
        &CaptureHeader {
            format_version: FORMAT_VERSION,
            host: "node1".into(),
            clock: ClockRef {
                monotonic_ns: SEC,
                realtime_ns: 1_800_000_000 * SEC,
            },
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
            ..Default::default()
        }))
        .expect("process");
    }
    let probes = ["main", "serve", "handle", "send_reply", "send_rare"]
        .iter()
        .enumerate()
        .map(|(i, s)| Probe {
            func_id: i as u32,
            object: "/bench".into(),
            symbol: (*s).into(),
            ..Default::default()
        })
        .collect();
    w.write_meta(&Meta::Probes { probes }).expect("probes");
    let bytes: Vec<u8> = records
        .iter()
        .flat_map(|(_, b)| b.iter().copied())
        .collect();
    w.write_records(&bytes).expect("records");
    Capture::read(w.into_inner().as_slice()).expect("capture")
}

/// The agent's capture at `now`: the preamble, then the last `WINDOW`.
fn live(records: &[Rec], pids: &[u32], now: u64) -> (Capture, u64, usize) {
    let from = now - WINDOW;
    let mut kept: Vec<Rec> = records[..PREAMBLE].to_vec();
    kept.extend(
        records
            .iter()
            .filter(|(t, _)| *t >= from && *t <= now && *t > records[PREAMBLE - 1].0)
            .cloned(),
    );
    (capture(&kept, pids), from, kept.len())
}

fn report(name: &str, times: &[f64], records: usize) {
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    let max = times.iter().copied().fold(0.0, f64::max);
    println!(
        "{name}: {} evaluations of {records} records: mean {:.1} ms, max {:.1} ms CPU; \
         {:.2}% of one core at one evaluation every {} s",
        times.len(),
        mean * 1e3,
        max * 1e3,
        mean / (INTERVAL as f64 / 1e9) * 100.0,
        INTERVAL / SEC
    );
}

fn main() {
    // LiveModel: one daemon at RATE.
    let records = daemon(7, 70, RATE, 0);
    let full = capture(&records, &[7]);
    let mut model = GlobalModel::new(Variant::Paper000);
    for p in decompose_capture(&full, Variant::Paper000) {
        model.learn(&p);
    }
    drop(full);
    let mut live_model = LiveModel::new(model, Scoring::Nodes);
    let (mut times, mut units, mut size) = (Vec::new(), 0, 0);
    let mut now = SEC + WINDOW;
    while now <= 70 * SEC {
        let (cap, from, n) = live(&records, &[7], now);
        size = n;
        let start = cpu_s();
        units += live_model.evaluate(&cap, from, now, "bench").len();
        times.push(cpu_s() - start);
        now += INTERVAL;
    }
    report("LiveModel", &times, size);
    println!("  {units} units reported");

    // LivePeers: four servers sharing RATE.
    let pids = [11, 12, 13, 14];
    let cfg = PeersConfig {
        window_ns: 10 * SEC,
        shift_ns: 5 * SEC,
        split: ServerSplit::PerProcess { label_arg: None },
        metrics: vec![Metric::Count, Metric::Time],
        ..Default::default()
    };
    let run = |seconds: u64| -> Vec<Rec> {
        let mut r: Vec<Rec> = pids
            .iter()
            .enumerate()
            .flat_map(|(i, p)| daemon(*p, seconds, RATE / 4, i as u64 * 1000))
            .collect();
        r.sort_by_key(|(t, _)| *t);
        r
    };
    let clean = capture(&run(70), &pids);
    let sources = [CaptureSource {
        path: std::path::Path::new("clean"),
        label: "clean",
        capture: &clean,
    }];
    let scored = peers::analyze("clean", &sources, &cfg, 1).expect("clean run");
    let thresholds = peers::train(&[scored], &cfg).expect("train");
    drop(clean);
    let records = run(70);
    let mut live_peers = LivePeers::new(thresholds);
    let (mut times, mut windows) = (Vec::new(), 0);
    let mut now = SEC + WINDOW;
    while now <= 70 * SEC {
        let (cap, from, n) = live(&records, &pids, now);
        size = n;
        let start = cpu_s();
        windows += live_peers.evaluate(&cap, from, now).windows.len();
        times.push(cpu_s() - start);
        now += INTERVAL;
    }
    report("LivePeers", &times, size);
    println!("  {windows} windows reported");
}
