//! MPI interference detection (paper 002) rates:
//! * profile extraction: a capture of 8 ranks × 125 k MPI calls (entries
//!   with argument registers, returns) read from memory and turned into
//!   4-tuples; prints calls/s;
//! * Sequitur over one rank's (function, peer) sequence; prints calls/s;
//! * detection for 64 simulated ranks × 100 k calls: typical sequences,
//!   learning K(p, l), and applying the model; prints seconds.
//!
//! Run with `cargo bench -p analyzer --bench mpi`.

use std::{collections::BTreeMap, time::Instant};

use analyzer::{
    Capture,
    mpi::{self, Call, LearnConfig, Peer, Profiles, RankProfile, RankSource, TypicalConfig},
    sequitur::Sequitur,
};
use tracer_common::{
    capture::{CaptureHeader, CaptureWriter, FORMAT_VERSION, Meta, Probe, ProcessInfo},
    record::{FuncEntry, FuncEntryArgs, FuncReturn, Header, Pod as _, kind},
};

/// The stencil fixture's loop body: (function, peer register, computation ns).
const BODY: [(&str, i64, u64); 6] = [
    ("MPI_Irecv", -1, 1_600_000),
    ("MPI_Irecv", 1, 0),
    ("MPI_Isend", 1, 2_000),
    ("MPI_Isend", -1, 1_000),
    ("MPI_Waitall", 0, 1_000),
    ("MPI_Allreduce", 0x5800_0003, 500),
];

/// xorshift64*: deterministic noise without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn capture_bytes(ranks: u32, calls: u64) -> Vec<u8> {
    let mut w = CaptureWriter::new(
        Vec::new(),
        &CaptureHeader {
            format_version: FORMAT_VERSION,
            host: "bench".into(),
            ..Default::default()
        },
    )
    .expect("in-memory writer");
    let probes = BODY
        .iter()
        .enumerate()
        .map(|(i, (f, _, _))| Probe {
            func_id: i as u32,
            object: "/lib/x86_64-linux-gnu/libmpich.so.12".into(),
            symbol: format!("P{f}"),
            aliases: vec![f.to_string()],
            args: true,
            ..Default::default()
        })
        .collect();
    w.write_meta(&Meta::Probes { probes }).expect("probes");
    for r in 0..ranks {
        let mut env = BTreeMap::new();
        env.insert("PMI_RANK".to_string(), r.to_string());
        env.insert("PMI_SIZE".to_string(), ranks.to_string());
        w.write_meta(&Meta::Process(ProcessInfo {
            pid: 1000 + r,
            comm: "stencil".into(),
            env,
            ..Default::default()
        }))
        .expect("process");
    }
    let mut rng = Rng(7);
    let mut chunk = Vec::with_capacity(1 << 20);
    let mut ts = vec![0u64; ranks as usize];
    for i in 0..calls {
        for r in 0..ranks {
            let (_, peer, compute) = BODY[(i % 6) as usize];
            let peer = match peer {
                -1 => u64::from((r + ranks - 1) % ranks),
                1 => u64::from((r + 1) % ranks),
                p => p as u64,
            };
            let t = &mut ts[r as usize];
            *t += compute + rng.next() % 10_000;
            let h = |kind, size: usize, ts| Header {
                ts_ns: ts,
                pid: 1000 + r,
                tid: 1000 + r,
                kind,
                size: size as u16,
                cpu: r % 2,
            };
            chunk.extend_from_slice(
                FuncEntryArgs {
                    entry: FuncEntry {
                        header: h(kind::FUNC_ENTRY_ARGS, size_of::<FuncEntryArgs>(), *t),
                        func_id: (i % 6) as u32,
                        _pad: 0,
                        ip: 0x1000,
                        call_site: 0x2000,
                    },
                    args: [0, 1, 0x4c00_080b, peer, 1, 0x4400_0000],
                }
                .as_bytes(),
            );
            *t += 3_000 + rng.next() % 1_000;
            chunk.extend_from_slice(
                FuncReturn {
                    header: h(kind::FUNC_RETURN, size_of::<FuncReturn>(), *t),
                    func_id: (i % 6) as u32,
                    _pad: 0,
                    ret: 0,
                }
                .as_bytes(),
            );
        }
        if chunk.len() >= 1 << 20 {
            w.write_records(&chunk).expect("write");
            chunk.clear();
        }
    }
    w.write_records(&chunk).expect("write");
    w.into_inner()
}

/// 64 ranks × `calls` calls of the stencil body; rank `hog` computes
/// `factor` times longer in every other block of 64 iterations.
fn simulated(ranks: u32, calls: usize, hog: u32, factor: u64, seed: u64) -> Profiles {
    let mut rng = Rng(seed);
    let functions: Vec<String> = ["MPI_Irecv", "MPI_Isend", "MPI_Waitall", "MPI_Allreduce"]
        .map(String::from)
        .to_vec();
    let index = |f: &str| functions.iter().position(|x| x == f).unwrap_or(0) as u16;
    let ranks = (0..ranks)
        .map(|r| {
            let mut t = 0;
            let calls = (0..calls)
                .map(|i| {
                    let (f, peer, compute) = BODY[i % 6];
                    let slow = r == hog && (i / 384) % 2 == 0;
                    let compute =
                        (compute + rng.next() % (compute / 20 + 1)) * if slow { factor } else { 1 };
                    t += compute;
                    let c = Call {
                        function: index(f),
                        peer: match peer {
                            -1 => Peer::Rank(((r + 63) % 64) as i32),
                            1 => Peer::Rank(((r + 1) % 64) as i32),
                            0 => Peer::None,
                            op => Peer::Op(op as u32),
                        },
                        compute_ns: compute,
                        comm_ns: 5_000,
                        start_ns: t,
                        cpu: r,
                        tid: r,
                        call_site: 0,
                        partners: Default::default(),
                    };
                    t += 5_000;
                    c
                })
                .collect();
            RankProfile {
                rank: r,
                rank_source: RankSource::Environment,
                size: Some(64),
                host: format!("node{}", r / 2),
                pid: 1000 + r,
                comm: "sim".into(),
                cpus: vec![r],
                functions: functions.clone(),
                calls,
                unfinished: 0,
                open: None,
                last_ns: 0,
                exited_ns: None,
                state: None,
                end_ns: 0,
                cpu: Vec::new(),
            }
        })
        .collect();
    Profiles { version: 1, ranks }
}

fn best_of<T>(n: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::MAX;
    let mut out = None;
    for _ in 0..n {
        let start = Instant::now();
        let v = f();
        best = best.min(start.elapsed().as_secs_f64());
        out = Some(v);
    }
    (best, out.expect("n > 0"))
}

fn main() {
    // Profile extraction.
    let (ranks, per_rank) = (8, 125_000);
    let bytes = capture_bytes(ranks, per_rank);
    let (secs, profiles) = best_of(3, || {
        let capture = Capture::read(bytes.as_slice()).expect("valid capture");
        mpi::extract(&[&capture]).expect("profiles")
    });
    let calls = profiles.total_calls();
    assert_eq!(calls as u64, u64::from(ranks) * per_rank);
    println!(
        "profile extraction: {calls} calls ({:.1} MB capture) in {secs:.3} s = {:.2} M calls/s (read + decode + 4-tuples, best of 3)",
        bytes.len() as f64 / 1e6,
        calls as f64 / secs / 1e6
    );

    // Sequitur over one rank's (function, peer) sequence.
    let rank = &profiles.ranks[0];
    let (secs, rules) = best_of(3, || {
        let mut s = Sequitur::new();
        for c in &rank.calls {
            s.push((c.function, c.peer));
        }
        s.grammar().rules().len()
    });
    println!(
        "sequitur: {} calls of one rank in {secs:.3} s = {:.2} M calls/s ({rules} rules)",
        rank.calls.len(),
        rank.calls.len() as f64 / secs / 1e6
    );

    // Detection for 64 ranks × 100 k calls: learning from two clean runs
    // and a hogged one (typical sequences per rank group, held-out
    // thresholds, the K search), then one detection.
    let n = 100_000;
    let clean = simulated(64, n, 99, 1, 1);
    let clean2 = simulated(64, n, 99, 1, 4);
    let hogged = simulated(64, n, 5, 2, 2);
    let trial = simulated(64, n, 5, 2, 3);
    let config = LearnConfig {
        typical: TypicalConfig::default(),
        ..LearnConfig::default()
    };
    let (ts_secs, ts) = best_of(3, || mpi::rank_sequences(&[&clean], &config.typical));
    let (learn_secs, model) = best_of(1, || {
        mpi::learn(&[&clean, &clean2], &[&hogged], &config).expect("learns")
    });
    let (detect_secs, d) = best_of(3, || mpi::detect(&model, &trial));
    let m5 = d.metric(5).unwrap_or(f64::NAN);
    assert!(m5 > 0.5, "hogged rank metric {m5}");
    println!(
        "detection, 64 ranks x {n} calls: typical sequences {ts_secs:.3} s ({} ranks), learning {learn_secs:.3} s (K = {}), detection {detect_secs:.3} s (m(5) = {m5:.2}, verdict: {})",
        ts.len(),
        model.k,
        d.verdict.summary
    );
}
