//! Hang detection (004 §4.2): when a task makes no state transition (no MPI
//! call entered or returned) for longer than a threshold, the analysis runs
//! on what was recorded so far. The threshold is given by the user or
//! learned from normal runs as their longest transition time.
//!
//! [`tails`] finds, per process, the last MPI transition and the call it is
//! still inside (if any); [`super::smm::build_with_tails`] turns that into
//! a final edge whose time is the time spent so far, so a task stuck
//! computing differs from tasks stuck waiting inside a call.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::{
    decode::{Capture, DecodeError, Event},
    mpi::Profiles,
};

/// Where a process was when the capture ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tail {
    /// Host.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Last MPI entry or return (CLOCK_MONOTONIC ns).
    pub last_ns: u64,
    /// The outermost MPI call it is inside: (function, call site, entry ns).
    pub open_call: Option<(String, u64, u64)>,
    /// End of the capture (ns): its stop time, or its last record.
    pub end_ns: u64,
}

impl Tail {
    /// Time since the last transition (ns).
    pub fn idle_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.last_ns)
    }
}

/// A process's MPI progress while reading: last transition, the open
/// outermost call (function id, call site, entry ns), nesting per thread.
#[derive(Default)]
struct Progress(u64, Option<(u32, u64, u64)>, HashMap<u32, u32>);

/// Errors finding tails.
#[derive(Debug, thiserror::Error)]
pub enum HangError {
    /// A record could not be decoded.
    #[error("decoding capture {capture}")]
    Decode {
        /// Which capture (position in the input list).
        capture: usize,
        /// The cause.
        #[source]
        source: DecodeError,
    },
}

/// The last MPI transition of every process of `captures`, keyed by
/// (host, pid).
pub fn tails(captures: &[&Capture]) -> Result<HashMap<(String, u32), Tail>, HangError> {
    let mut out = HashMap::new();
    for (index, cap) in captures.iter().enumerate() {
        let is_mpi: Vec<bool> = cap
            .probes
            .iter()
            .map(|p| {
                std::iter::once(&p.symbol)
                    .chain(&p.aliases)
                    .any(|s| s.starts_with("MPI_") || s.starts_with("PMPI_"))
            })
            .collect();
        let mpi = |f: u32| is_mpi.get(f as usize).copied().unwrap_or(false);
        let mut last_record = 0u64;
        let mut state: HashMap<u32, Progress> = HashMap::new();
        for ev in cap.events() {
            let ev = ev.map_err(|source| HangError::Decode {
                capture: index,
                source,
            })?;
            match ev {
                Event::Entry { rec, .. } if mpi(rec.func_id) => {
                    let h = rec.header;
                    last_record = last_record.max(h.ts_ns);
                    let s = state.entry(h.pid).or_default();
                    let depth = s.2.entry(h.tid).or_default();
                    if *depth == 0 {
                        s.0 = h.ts_ns;
                        s.1 = Some((rec.func_id, rec.call_site, h.ts_ns));
                    }
                    *depth += 1;
                }
                Event::Return(rec) if mpi(rec.func_id) => {
                    let h = rec.header;
                    last_record = last_record.max(h.ts_ns);
                    let s = state.entry(h.pid).or_default();
                    let depth = s.2.entry(h.tid).or_default();
                    *depth = depth.saturating_sub(1);
                    if *depth == 0 {
                        s.0 = h.ts_ns;
                        s.1 = None;
                    }
                }
                _ => {}
            }
        }
        let end_ns = cap
            .end
            .as_ref()
            .map_or(last_record, |e| e.stop_ns.max(last_record));
        for (pid, Progress(last_ns, open, _)) in state {
            out.insert(
                (cap.header.host.clone(), pid),
                Tail {
                    host: cap.header.host.clone(),
                    pid,
                    last_ns,
                    open_call: open.map(|(f, site, t)| {
                        let name = cap.function_name(f);
                        let name = name
                            .strip_prefix('P')
                            .filter(|n| n.starts_with("MPI_"))
                            .map_or(name.clone(), str::to_string);
                        (name, site, t)
                    }),
                    end_ns,
                },
            );
        }
    }
    Ok(out)
}

/// The longest single transition (computation or communication time) of a
/// normal run: a threshold learned from previous runs.
pub fn max_transition_ns(profiles: &Profiles) -> u64 {
    profiles
        .ranks
        .iter()
        .flat_map(|r| &r.calls)
        .map(|c| c.compute_ns.max(c.comm_ns))
        .max()
        .unwrap_or(0)
}

/// Tails idle for longer than `threshold_ns`, longest first.
pub fn hung(tails: &HashMap<(String, u32), Tail>, threshold_ns: u64) -> Vec<&Tail> {
    let mut v: Vec<&Tail> = tails
        .values()
        .filter(|t| t.idle_ns() > threshold_ns)
        .collect();
    v.sort_by(|a, b| b.idle_ns().cmp(&a.idle_ns()).then(a.pid.cmp(&b.pid)));
    v
}
