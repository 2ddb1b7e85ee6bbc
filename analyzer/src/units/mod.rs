//! Execution units (Maruyama & Matsuoka, `papers/000_…` §2.2, and the
//! `001_…` variant): each thread's call/return and socket-syscall stream is
//! cut into an initializer unit, handler units (one per `accept`/`recv`,
//! consecutive receives on one fd counting as one) and a finalizer unit; the
//! 001 variant also cuts each event-loop iteration's pre- and post-processing.
//!
//! - [`trace`] turns a capture into per-thread trace entries with call stacks
//!   and interned call-tree nodes;
//! - [`decompose`] finds the event loop and cuts units, and names each
//!   thread's role (the function its first traced call was made from);
//! - [`connections`] gives each socket the identity the papers use: the set of
//!   call stacks to its establishing calls (bind, connect, listen, accept);
//! - [`links`] pairs the two ends of a TCP connection between traced
//!   processes of one capture.

mod connections;
mod decompose;
mod links;
mod trace;
mod types;

pub use connections::ConnectionKey;
pub use decompose::{Variant, decompose_capture, thread_role};
pub use links::{End, Links};
pub use trace::{
    DISPLAY_FRAMES, NodeKey, NodeTable, ThreadTraces, TraceEntry, TraceEntryKind, thread_traces,
};
pub use types::{ProcessUnits, Unit, UnitKind};

/// How recently before the recording's stop a thread of a process that
/// ran on must have done something (a call, a return, a system call's
/// entry) for what it had open to be work the stop interrupted, not a
/// hang: the shortest block the model's hung rule counts (`HUNG_MIN_NS`).
/// A unit caught so is cut (judged by what it called), and a call in
/// flight for less at the stop is left out of the trace.
pub const CAUGHT_AT_WORK_NS: u64 = 1_000_000_000;

/// The longest span of a capture in which no unit of any process began or
/// ended, up to `stop_ns` (when recording stopped; `None`: the last unit's
/// end): `(from, to)`, `CLOCK_MONOTONIC` ns. A run that stalls (every
/// process waiting for another, then stopped) shows it even when each of
/// its units looks normal. `None` with fewer than two instants.
pub fn quiet_span(processes: &[ProcessUnits], stop_ns: Option<u64>) -> Option<(u64, u64)> {
    let mut at: Vec<u64> = processes
        .iter()
        .flat_map(|p| p.units.iter().flat_map(|u| [u.start_ns, u.end_ns]))
        .collect();
    let last_unit = at.iter().copied().max()?;
    // A stop before the last unit's end (a unit cut short) adds nothing.
    if let Some(stop) = stop_ns.filter(|s| *s > last_unit) {
        at.push(stop);
    }
    at.sort_unstable();
    at.windows(2)
        .map(|w| (w[0], w[1]))
        .max_by_key(|(a, b)| b - a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(start_ns: u64, end_ns: u64) -> Unit {
        Unit {
            kind: UnitKind::Handler,
            tid: 1,
            start_ns,
            end_ns,
            nodes: Vec::new(),
            first_ns: Vec::new(),
            connection: None,
            fd: None,
            peer: None,
            entries: (0, 0),
            role: "main".into(),
            open: Vec::new(),
            exited: false,
            cut: false,
            peer_ended_ns: None,
        }
    }

    fn process(pid: u32, units: Vec<Unit>) -> ProcessUnits {
        ProcessUnits {
            pid,
            comm: "d".into(),
            host: "h".into(),
            signature: Vec::new(),
            nodes: NodeTable::default(),
            units,
            ended: None,
        }
    }

    /// The quiet span is the longest time no unit of any process began or
    /// ended, the wait before recording stopped included; units of other
    /// processes fill one process's gaps.
    #[test]
    fn the_quiet_span_spans_every_process_up_to_the_stop() {
        let a = process(1, vec![unit(0, 10), unit(50, 60)]);
        let b = process(2, vec![unit(20, 30)]);
        let both = [a.clone(), b];
        assert_eq!(quiet_span(&both, None), Some((30, 50)));
        assert_eq!(quiet_span(&both, Some(200)), Some((60, 200)));
        // A stop before the last unit's end adds nothing.
        assert_eq!(quiet_span(&both, Some(55)), Some((30, 50)));
        assert_eq!(quiet_span(&[a], None), Some((10, 50)));
        assert_eq!(quiet_span(&[process(3, Vec::new())], Some(9)), None);
    }
}
