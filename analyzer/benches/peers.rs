//! Peer comparison (Kasick et al.) throughput: feature extraction rate
//! (records/s on one core) and the time to diagnose 16 servers × 1 hour of
//! windows at the paper's 60 s / 30 s, from captures to verdict. The captures
//! are synthetic but shaped like file servers: nested calls of 40 functions,
//! socket reads, IP samples over 200 kernel functions, one server slowed.
//! Run with `cargo bench -p analyzer --bench peers`.

use std::{path::PathBuf, time::Instant};

use analyzer::{
    Capture,
    peers::{self, CaptureSource, PeersConfig},
};
use tracer_common::{
    capture::{
        CaptureHeader, CaptureWriter, ClockRef, End, FORMAT_VERSION, Meta, Probe, ProcessInfo,
        RecordSettings, Symbol,
    },
    record::{FuncEntry, FuncReturn, Header, Pod as _, Sample, Syscall, kind},
    syscall::nr,
};

const SERVERS: usize = 16;
const SECONDS: u64 = 3600;
/// Requests per second per server.
const RATE: u64 = 5;
const FUNCS: u32 = 40;
const KSYMS: u64 = 200;
const T0: u64 = 1_800_000_000_000_000_000;
const MS: u64 = 1_000_000;

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

/// One server's capture; `slow` makes function 1 take 3× as long in the
/// second half hour.
fn capture(server: usize, seed: u64, slow: bool) -> (Capture, u64) {
    let pid = 1000 + server as u32;
    let m0 = 10_000_000_000u64;
    let mut w = CaptureWriter::new(
        Vec::new(),
        &CaptureHeader {
            format_version: FORMAT_VERSION,
            host: format!("node{server}"),
            boot_id: format!("boot{server}"),
            clock: ClockRef {
                monotonic_ns: m0,
                realtime_ns: T0,
            },
            settings: RecordSettings {
                sample_hz: 100,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .expect("writer");
    w.write_meta(&Meta::Process(ProcessInfo {
        pid,
        traced: true,
        comm: "server".into(),
        ..Default::default()
    }))
    .expect("process");
    let probes = (0..FUNCS)
        .map(|i| Probe {
            func_id: i,
            object: "/usr/lib/libserver.so".into(),
            symbol: format!("fn_{i}"),
            ..Default::default()
        })
        .collect();
    w.write_meta(&Meta::Probes { probes }).expect("probes");
    let symbols = (0..KSYMS)
        .map(|i| Symbol {
            addr: 0xffff_0000 + i * 0x100,
            size: 0x100,
            name: format!("k_{i}"),
        })
        .collect();
    w.write_meta(&Meta::KernelSymbols { symbols })
        .expect("ksyms");
    let mut rng = seed ^ (server as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut buf = Vec::with_capacity(1 << 21);
    let mut n = 0u64;
    let step = 1_000_000_000 / RATE;
    let mut t = m0 + 1000 * MS;
    while t + step < m0 + SECONDS * 1_000_000_000 {
        // A request: fn_0 calls three others, one of which calls fn_1.
        let mut now = t;
        let mut push = |bytes: &[u8], buf: &mut Vec<u8>| {
            buf.extend_from_slice(bytes);
            n += 1;
        };
        push(
            FuncEntry {
                header: header(now, pid, kind::FUNC_ENTRY, 48),
                func_id: 0,
                ..Default::default()
            }
            .as_bytes(),
            &mut buf,
        );
        for _ in 0..3 {
            let f = 2 + (next() % u64::from(FUNCS - 2)) as u32;
            now += 100_000;
            push(
                FuncEntry {
                    header: header(now, pid, kind::FUNC_ENTRY, 48),
                    func_id: f,
                    ..Default::default()
                }
                .as_bytes(),
                &mut buf,
            );
            now += 50_000;
            push(
                FuncEntry {
                    header: header(now, pid, kind::FUNC_ENTRY, 48),
                    func_id: 1,
                    ..Default::default()
                }
                .as_bytes(),
                &mut buf,
            );
            let late = slow && now > m0 + SECONDS / 2 * 1_000_000_000;
            now += (if late { 3 } else { 1 }) * (2 * MS + next() % MS);
            push(
                FuncReturn {
                    header: header(now, pid, kind::FUNC_RETURN, 40),
                    func_id: 1,
                    ..Default::default()
                }
                .as_bytes(),
                &mut buf,
            );
            let read = Syscall {
                header: header(now + 20_000, pid, kind::SYSCALL, 88),
                enter_ns: now,
                nr: nr::READ,
                fd: 7,
                ret: 65536,
                ..Default::default()
            };
            push(read.as_bytes(), &mut buf);
            now += 50_000;
            push(
                FuncReturn {
                    header: header(now, pid, kind::FUNC_RETURN, 40),
                    func_id: f,
                    ..Default::default()
                }
                .as_bytes(),
                &mut buf,
            );
            // Most samples in a few hot kernel functions, the rest spread.
            let k = if next() % 5 == 0 {
                next() % KSYMS
            } else {
                next() % 8
            };
            let s = Sample {
                header: header(now, pid, kind::SAMPLE, 56),
                user_ip: 0,
                kernel_ip: 0xffff_0000 + k * 0x100 + 4,
                comm: *b"server\0\0\0\0\0\0\0\0\0\0",
            };
            push(s.as_bytes(), &mut buf);
        }
        push(
            FuncReturn {
                header: header(now + 100_000, pid, kind::FUNC_RETURN, 40),
                func_id: 0,
                ..Default::default()
            }
            .as_bytes(),
            &mut buf,
        );
        if buf.len() > 1 << 20 {
            w.write_records(&buf).expect("records");
            buf.clear();
        }
        t += step;
    }
    w.write_records(&buf).expect("records");
    w.write_meta(&Meta::End(End {
        stop_ns: m0 + SECONDS * 1_000_000_000,
        reason: "duration".into(),
        ..Default::default()
    }))
    .expect("end");
    (
        Capture::read(w.into_inner().as_slice()).expect("capture"),
        n,
    )
}

fn sources<'a>(
    caps: &'a [Capture],
    paths: &'a [PathBuf],
    labels: &'a [String],
) -> Vec<CaptureSource<'a>> {
    caps.iter()
        .zip(paths.iter().zip(labels))
        .map(|(capture, (path, label))| CaptureSource {
            path,
            label,
            capture,
        })
        .collect()
}

fn main() {
    let cfg = PeersConfig::default();
    let started = Instant::now();
    let run = |seed: u64, slow: Option<usize>| -> (Vec<Capture>, u64) {
        let mut events = 0;
        let caps = (0..SERVERS)
            .map(|s| {
                let (c, n) = capture(s, seed, slow == Some(s));
                events += n;
                c
            })
            .collect();
        (caps, events)
    };
    let (clean, _) = run(1, None);
    let (faulty, events) = run(2, Some(5));
    eprintln!(
        "built 2 runs of {SERVERS} servers × {SECONDS} s in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let paths: Vec<PathBuf> = (0..SERVERS)
        .map(|s| PathBuf::from(format!("server{s}.capture")))
        .collect();
    let labels: Vec<String> = (0..SERVERS).map(|s| format!("server{s}")).collect();
    let clean_sources = sources(&clean, &paths, &labels);
    let faulty_sources = sources(&faulty, &paths, &labels);

    // Feature extraction alone, best of 3.
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        let f = peers::extract("faulty", &faulty_sources, &cfg).expect("features");
        best = best.min(start.elapsed().as_secs_f64());
        assert_eq!(f.events, events);
    }
    println!(
        "peers extract: {events} records of {SERVERS} servers × {SECONDS} s: {best:.3} s = {:.2} M records/s",
        events as f64 / best / 1e6
    );

    let thresholds = peers::train(
        &[peers::analyze("clean", &clean_sources, &cfg, 5).expect("clean")],
        &cfg,
    )
    .expect("train");
    let mut best_total = f64::MAX;
    let mut best_after = f64::MAX;
    let mut report = None;
    for _ in 0..3 {
        let start = Instant::now();
        let features = peers::extract("faulty", &faulty_sources, &cfg).expect("features");
        let mid = Instant::now();
        let scored = peers::score(features, &cfg);
        let r = peers::diagnose(&scored, &thresholds, cfg.k, 10);
        best_after = best_after.min(mid.elapsed().as_secs_f64());
        best_total = best_total.min(start.elapsed().as_secs_f64());
        report = Some(r);
    }
    let report = report.expect("report");
    assert_eq!(report.faulty, vec!["server5"], "the slowed server is found");
    println!(
        "peers diagnose: {SERVERS} servers × {} windows ({} s / {} s), dims {:?}: {best_total:.3} s from captures, {:.1} ms after extraction; faulty {:?}",
        report.windows.len(),
        cfg.window_ns / 1_000_000_000,
        cfg.shift_ns / 1_000_000_000,
        report.dimensions.values().collect::<Vec<_>>(),
        best_after * 1e3,
        report.faulty
    );
}
