//! Hang detection (004 §4.2): when a task makes no state transition (no MPI
//! call entered or returned) for longer than a threshold, the analysis runs
//! on what was recorded so far. The threshold is given by the user or
//! learned from normal runs as their longest transition time.
//!
//! [`tails`] finds, per process, the last MPI transition and the call it is
//! still inside (if any), from the MPI profiles; [`super::smm::build_with_tails`]
//! turns that into a final edge whose time is the time spent so far, so a
//! task stuck computing differs from tasks stuck waiting inside a call.
//! Which rank holds a hung run up is [`crate::mpi::waitfor`]'s question.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::{decode::Capture, mpi::Profiles};

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

/// Errors finding tails.
#[derive(Debug, thiserror::Error)]
pub enum HangError {
    /// The captures' MPI profiles could not be built.
    #[error("building MPI profiles")]
    Profile(#[from] crate::mpi::ProfileError),
}

/// The last MPI transition of every process of `captures`, keyed by
/// (host, pid).
pub fn tails(captures: &[&Capture]) -> Result<HashMap<(String, u32), Tail>, HangError> {
    Ok(tails_of(&crate::mpi::extract(captures)?))
}

/// The last MPI transition of every rank of `profiles`, keyed by (host, pid).
pub fn tails_of(profiles: &Profiles) -> HashMap<(String, u32), Tail> {
    profiles
        .ranks
        .iter()
        .map(|r| {
            (
                (r.host.clone(), r.pid),
                Tail {
                    host: r.host.clone(),
                    pid: r.pid,
                    last_ns: r.last_ns,
                    open_call: r
                        .open
                        .as_ref()
                        .map(|o| (o.function.clone(), o.call_site, o.start_ns)),
                    end_ns: r.end_ns,
                },
            )
        })
        .collect()
}

/// The longest single transition (computation or communication time) of a
/// normal run: a threshold learned from previous runs.
pub fn max_transition_ns(profiles: &Profiles) -> u64 {
    crate::mpi::waitfor::max_transition_ns(profiles)
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
