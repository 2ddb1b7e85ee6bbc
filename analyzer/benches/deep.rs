//! `model learn` on deep call stacks (issue 15, item 4): a thread that
//! enters N nested calls and never returns (deep recursion, or return
//! records lost). Learning, and calibration's scoring of held-out units,
//! must stay near-linear in N: this prints the time per nesting level for
//! N from 10 k to 1 M (and more with `DEEP_MAX`), so a quadratic step
//! shows as a per-level cost that grows with N. Thread CPU time.
//!
//! Run with `cargo bench -p analyzer --bench deep`. `DEEP_WRITE=DIR` also
//! writes the captures there, to time the CLI:
//! `analyzer model learn DIR/deep-1000000-a.capture DIR/deep-1000000-b.capture`.

use analyzer::{
    Capture,
    model::GlobalModel,
    score::{Scoring, calibrate},
    units::{Variant, decompose_capture},
};
use tracer_common::{
    capture::{CaptureHeader, CaptureWriter, FORMAT_VERSION, Meta, Probe},
    record::{FuncEntry, Header, Pod as _, Syscall, kind},
    syscall::nr,
};

fn cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// One thread: `depth` nested entries of three functions calling each
/// other from a few call sites, no returns, with a socket created at the
/// bottom (an establishing call deep in the stack) and a receive, so the
/// thread has an initializer and a handler.
fn deep_capture(depth: usize, seed: u64) -> Vec<u8> {
    let mut w = CaptureWriter::new(
        Vec::new(),
        &CaptureHeader {
            format_version: FORMAT_VERSION,
            ..Default::default()
        },
    )
    .expect("writer");
    let probes = ["walk", "visit", "descend"]
        .iter()
        .enumerate()
        .map(|(i, s)| Probe {
            func_id: i as u32,
            object: "/bench/deep".into(),
            symbol: (*s).into(),
            ..Default::default()
        })
        .collect();
    w.write_meta(&Meta::Probes { probes }).expect("probes");
    let mut buf = Vec::with_capacity(depth * 48 + 4096);
    let mut ts = 1_000u64;
    let mut header = |k: u16, size: usize| {
        ts += 50;
        Header {
            ts_ns: ts,
            pid: 9,
            tid: 9,
            kind: k,
            size: size as u16,
            cpu: 0,
        }
    };
    // A cheap deterministic mix, so the two captures differ a little.
    let mut x = seed;
    for _ in 0..depth {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let e = FuncEntry {
            header: header(kind::FUNC_ENTRY, size_of::<FuncEntry>()),
            func_id: ((x >> 33) % 3) as u32,
            _pad: 0,
            ip: 0,
            call_site: 0x1000 + ((x >> 40) % 4) * 0x10,
        };
        buf.extend_from_slice(e.as_bytes());
    }
    for (call, fd, ret) in [(nr::SOCKET, -1, 5), (nr::RECVFROM, 5, 64)] {
        let h = header(kind::SYSCALL, size_of::<Syscall>());
        let s = Syscall {
            header: h,
            enter_ns: h.ts_ns,
            nr: call,
            fd,
            ret,
            ..Default::default()
        };
        buf.extend_from_slice(s.as_bytes());
    }
    for part in buf.chunks(48 << 14) {
        w.write_records(part).expect("records");
    }
    w.into_inner()
}

fn main() {
    let max: usize = std::env::var("DEEP_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let write_dir = std::env::var_os("DEEP_WRITE").map(std::path::PathBuf::from);
    println!("model learn on one thread nested N calls deep, never returning (thread CPU time)");
    println!(
        "{:>10} {:>10} {:>10} {:>10} {:>12}",
        "N", "decode s", "learn s", "calib. s", "µs / level"
    );
    let mut n = 10_000;
    while n <= max {
        let files: Vec<Vec<u8>> = [1, 2].iter().map(|s| deep_capture(n, *s)).collect();
        if let Some(dir) = &write_dir {
            for (f, name) in files.iter().zip(["a", "b"]) {
                let path = dir.join(format!("deep-{n}-{name}.capture"));
                std::fs::write(&path, f).expect("write capture");
            }
        }
        let t0 = cpu_s();
        let caps: Vec<Capture> = files
            .iter()
            .map(|f| Capture::read(f.as_slice()).expect("capture"))
            .collect();
        let t1 = cpu_s();
        let mut model = GlobalModel::new(Variant::Paper000);
        let mut runs = Vec::new();
        for cap in &caps {
            let run = decompose_capture(cap, Variant::Paper000);
            for p in &run {
                model.learn(p);
            }
            runs.push(run);
        }
        let t2 = cpu_s();
        let c = calibrate(&mut model, None, &runs);
        let t3 = cpu_s();
        assert!(c.units > 0, "calibration scored no unit");
        let _ = Scoring::Nodes;
        println!(
            "{n:>10} {:>10.3} {:>10.3} {:>10.3} {:>12.3}",
            t1 - t0,
            t2 - t1,
            t3 - t2,
            (t3 - t0) / (2 * n) as f64 * 1e6
        );
        n *= 10;
    }
}
