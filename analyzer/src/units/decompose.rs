//! Cutting thread traces into execution units (000 §2.2; 001 §2.2).
//!
//! The event loop is found from the trace alone: the frame (call-tree node)
//! from which a wait (select/poll/epoll) is made most often with a receive
//! following before the next wait; on a tie the deeper (inner) loop wins, as
//! 001 prescribes. A wait made in a wrapper that returns before the receive
//! (Python's `selectors` `select()`, a C `wait_events()`) counts for the
//! frame the receive is made under, the one that stays open. Everything
//! before its first wait is the initializer, after the loop frame returns the
//! finalizer. A loop must recur (stay open across two waits); a thread
//! whose loop never received is cut the same way, with no handlers.
//!
//! A thread that never waits but receives again and again from one call
//! path (a thread-per-connection server's `while (recv(...))`, a client
//! reading replies) blocks in that receive instead: it is the loop's wait,
//! and each one starts a handler unit.

use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use tracer_common::syscall::{flag, nr, spec};

use super::{
    ConnectionKey, NodeTable, ProcessUnits, TraceEntry, TraceEntryKind, Unit, UnitKind,
    connections::{self, ReceiveInfo, Receives},
    trace::thread_traces,
};
use crate::decode::Capture;

/// Which paper's decomposition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Variant {
    /// 000: initializer, handler units (one per accept/recv), finalizer.
    #[default]
    #[value(name = "000")]
    #[serde(rename = "000")]
    Paper000,
    /// 001: as 000, plus pre- and post-processing units of each loop iteration.
    #[value(name = "001")]
    #[serde(rename = "001")]
    Paper001,
}

fn is_wait(kind: TraceEntryKind) -> bool {
    matches!(kind, TraceEntryKind::Syscall { nr, .. } if spec(u32::from(nr)).is_some_and(|s| s.flags & flag::WAIT != 0))
}

/// Decomposes every traced process of `capture`.
pub fn decompose_capture(capture: &Capture, variant: Variant) -> Vec<ProcessUnits> {
    let mut out = Vec::new();
    for (pid, traces) in thread_traces(capture) {
        let (receives, establishing) =
            connections::track(&traces.nodes, &traces.threads, &traces.peers, &traces.pairs);
        let mut units = Vec::new();
        let mut signature = Vec::new();
        for (tid, entries) in &traces.threads {
            let none = Receives::default();
            let thread_receives = receives.get(tid).unwrap_or(&none);
            let mut thread_units =
                decompose(&traces.nodes, *tid, entries, thread_receives, variant);
            if let Some(last) = thread_units.last_mut().filter(|u| !u.open.is_empty()) {
                last.exited = traces.exited.contains_key(tid);
                // Caught at work by the recording's stop, its process still
                // running: a thread that did something in the last
                // [`CAUGHT_AT_WORK_NS`] before the stop had not hung, and
                // the calls that would have followed just were not
                // recorded. Judged by what it called, as a unit cut in its
                // event loop.
                let stop = capture.end.as_ref().map(|e| e.stop_ns);
                let recent = entries.last().map(|e| e.ts_ns);
                if let (false, None, Some(stop), Some(recent)) =
                    (last.exited, traces.ended, stop, recent)
                    && recent.saturating_add(super::CAUGHT_AT_WORK_NS) >= stop
                {
                    last.open.clear();
                    last.cut = true;
                }
            }
            for u in thread_units
                .iter_mut()
                .filter(|u| u.kind == UnitKind::Handler)
            {
                u.peer_ended_ns = u.fd.and_then(|fd| peer_ended(entries, u.entries, fd));
            }
            for u in thread_units
                .iter()
                .filter(|u| u.kind == UnitKind::Initializer)
            {
                for i in u.entries.0..u.entries.1 {
                    if let Some(stack) = establishing.get(&(*tid, i)) {
                        signature.push(stack.clone());
                    }
                }
            }
            if units.is_empty() {
                // One thread (the common case): move, do not copy.
                units = thread_units;
            } else {
                units.extend(thread_units);
            }
        }
        signature.sort();
        signature.dedup();
        out.push(ProcessUnits {
            pid,
            comm: capture.comm(pid).unwrap_or("?").to_string(),
            host: capture.header.host.clone(),
            signature,
            nodes: traces.nodes,
            units,
            ended: traces.ended,
        });
    }
    out
}

/// When a receive among `entries[range]` on `fd` found the connection
/// ended by its other end: end of stream (0 bytes) or reset. The thread's
/// last entry does not count: a call still in progress when recording
/// stopped is recorded with a return value of 0.
fn peer_ended(entries: &[TraceEntry], (start, end): (usize, usize), fd: i32) -> Option<u64> {
    const ECONNRESET: i64 = 104;
    let end = end.min(entries.len().saturating_sub(1));
    entries.get(start..end)?.iter().find_map(|e| match e.kind {
        TraceEntryKind::Syscall {
            nr: call,
            fd: f,
            ret,
        } if f == fd
            && (ret == 0 || ret == -ECONNRESET)
            && matches!(
                u32::from(call),
                nr::READ | nr::READV | nr::RECVFROM | nr::RECVMSG
            ) =>
        {
            Some(e.ts_ns)
        }
        _ => None,
    })
}

/// The role of a thread: the function its first traced call was made from
/// (`main` for a main thread, the start routine of a pthread, the object
/// where no symbol covers the call site), empty when it made no traced call.
/// Threads of one role in processes of one group share models of their
/// non-handler units. Stable across runs, since the call site is the code
/// that started the thread's work, not an address.
pub fn thread_role(nodes: &NodeTable, entries: &[TraceEntry]) -> Arc<str> {
    entries
        .iter()
        .find(|e| e.kind == TraceEntryKind::Call && nodes.parent(e.node) == NodeTable::ROOT)
        .map(|e| {
            let site = nodes.node_key(e.node).site.as_str();
            site.rsplit_once("+0x")
                .map_or(site, |(function, _)| function)
        })
        .unwrap_or_default()
        .into()
}

/// Cuts one thread's entries into units. `receives` maps (tid, entry index)
/// of accept/receive calls to their connection.
pub(crate) fn decompose(
    nodes: &NodeTable,
    tid: u32,
    entries: &[TraceEntry],
    receives: &Receives,
    variant: Variant,
) -> Vec<Unit> {
    let n = entries.len();
    if n == 0 {
        return Vec::new();
    }
    let mut b = Builder {
        nodes,
        tid,
        role: thread_role(nodes, entries),
        entries,
        units: Vec::new(),
        mark: vec![0; nodes.len()],
        stamp: 0,
        scratch: Vec::new(),
        loop_wait: None,
        blocking: false,
        blocking_receive: None,
    };
    let (loop_node, wrappers, blocking) = match find_loop(nodes, entries, receives) {
        Some((loop_node, wrappers)) => (loop_node, wrappers, None),
        None => match blocking_loop(nodes, entries, receives) {
            Some((loop_node, receive)) => {
                b.blocking = true;
                (loop_node, Vec::new(), Some(receive))
            }
            None => {
                b.push(UnitKind::Initializer, 0, n, None);
                b.mark_open(None, &[]);
                return b.units;
            }
        },
    };
    let waits: Vec<usize> = match blocking {
        // The receive is the wait, and stays in its handler unit; one
        // right after another on its descriptor (the rest of a message)
        // continues it.
        Some(receive) => {
            let fd = |i: usize| match entries[i].kind {
                TraceEntryKind::Syscall { fd, .. } if receives.contains(i) => Some(fd),
                _ => None,
            };
            (0..n)
                .filter(|&i| {
                    entries[i].node == receive && fd(i).is_some() && (i == 0 || fd(i - 1) != fd(i))
                })
                .collect()
        }
        None => {
            b.loop_wait = Some(LoopWait::new(nodes, loop_node, &wrappers));
            (0..n)
                .filter(|&i| {
                    is_wait(entries[i].kind) && {
                        let p = nodes.parent(entries[i].node);
                        p == loop_node || wrappers.contains(&p)
                    }
                })
                .collect()
        }
    };
    let mut wait_at = vec![false; n];
    for &w in &waits {
        wait_at[w] = true;
    }
    // find_loop returns a frame with waits under it; a capture is outside
    // input all the same, so no waits means no loop, not a panic.
    let (Some(&first_wait), Some(&last_wait)) = (waits.first(), waits.last()) else {
        b.push(UnitKind::Initializer, 0, n, None);
        b.mark_open(None, &[]);
        return b.units;
    };
    let loop_end = if loop_node == NodeTable::ROOT {
        n
    } else {
        (last_wait..n)
            .find(|&i| entries[i].kind == TraceEntryKind::Return && entries[i].node == loop_node)
            .unwrap_or(n)
    };
    // Handler starts: receives, consecutive ones on one fd merged.
    let mut starts = Vec::new();
    let mut last_fd = None;
    for (i, entry) in entries.iter().enumerate().take(loop_end).skip(first_wait) {
        if wait_at[i] {
            last_fd = None;
        }
        let (Some(_), TraceEntryKind::Syscall { fd, .. }) = (receives.get(i), entry.kind) else {
            continue;
        };
        if last_fd != Some(fd) {
            starts.push(i);
        }
        last_fd = Some(fd);
    }
    // A handler unit begins with the loop-level call that encloses its
    // receive (handle_input -> recv), not at the receive itself, so the
    // handler's own entry is not left in the previous unit.
    let depth_loop = if loop_node == NodeTable::ROOT {
        0
    } else {
        nodes.depth(loop_node) as u32
    };
    let mut floor = first_wait;
    let receive_at: Vec<usize> = starts.clone();
    for (s, receive) in starts.iter_mut().zip(&receive_at) {
        let mut j = *s;
        while j > floor {
            j -= 1;
            let e = &entries[j];
            if wait_at[j] || (e.kind == TraceEntryKind::Return && e.depth <= depth_loop) {
                break;
            }
            if e.kind == TraceEntryKind::Call && e.depth == depth_loop + 1 {
                *s = j;
                break;
            }
        }
        // The next handler may not reach back past this one's receive.
        floor = receive + 1;
    }
    match variant {
        Variant::Paper000 => {
            let first = starts.first().copied().unwrap_or(loop_end);
            b.push(UnitKind::Initializer, 0, first, None);
            for (j, &s) in starts.iter().enumerate() {
                let end = starts.get(j + 1).copied().unwrap_or(loop_end);
                b.push_handler(s, end, receive_at[j], receives);
            }
        }
        Variant::Paper001 => {
            b.push(UnitKind::Initializer, 0, first_wait, None);
            for (k, &w) in waits.iter().enumerate() {
                let iter_end = waits.get(k + 1).copied().unwrap_or(loop_end);
                // `starts` is sorted: this iteration's handlers are a slice of it.
                let lo = starts.partition_point(|&s| s < w);
                let hi = starts.partition_point(|&s| s < iter_end);
                let hs = &starts[lo..hi];
                let mut at = w;
                for (j, &s) in hs.iter().enumerate() {
                    if at < s {
                        b.push(
                            if j == 0 {
                                UnitKind::PreProcess
                            } else {
                                UnitKind::PostProcess
                            },
                            at,
                            s,
                            None,
                        );
                    }
                    let limit = hs.get(j + 1).copied().unwrap_or(iter_end);
                    // The handler ends when its frames return to the loop's depth.
                    let end = (s + 1..limit)
                        .find(|&i| {
                            entries[i].kind == TraceEntryKind::Return
                                && entries[i].depth <= depth_loop
                        })
                        .map_or(limit, |i| i + 1);
                    b.push_handler(s, end, receive_at[lo + j], receives);
                    at = end;
                }
                if at < iter_end {
                    b.push(
                        if hs.is_empty() {
                            UnitKind::PreProcess
                        } else {
                            UnitKind::PostProcess
                        },
                        at,
                        iter_end,
                        None,
                    );
                }
            }
        }
    }
    b.push(UnitKind::Finalizer, loop_end, n, None);
    b.mark_open(Some(loop_node), &wrappers);
    b.units
}

/// The loop frame (000 §2.2 step 1: a recurring call stack whose body waits
/// and receives): the frame open at a receive that follows a wait (the
/// wait's own frame, or the ancestor a wrapper that made the wait returned
/// to), with at least two waits under it (so it recurs); most waits followed
/// by a receive wins, then the deeper frame. One receive is enough: a
/// thread watching a connection for a reset receives once, when it comes.
/// When nothing qualifies, [`most_recurring`] is the loop all the same, with
/// no handlers: whether an event arrived must not change how a thread is
/// cut. With the loop, the wrapper frames its waits were made in.
fn find_loop(
    nodes: &NodeTable,
    entries: &[TraceEntry],
    receives: &Receives,
) -> Option<(u32, Vec<u32>)> {
    // Per frame: waits followed by a receive while it was open, and waits
    // made in it.
    let mut received: FxHashMap<u32, usize> = Default::default();
    let mut waits: FxHashMap<u32, usize> = Default::default();
    let mut wrapped: Vec<(u32, u32)> = Vec::new();
    // (frame of the wait, its depth, lowest stack depth since the wait)
    let mut pending: Option<(u32, u32, u32)> = None;
    for (i, e) in entries.iter().enumerate() {
        if is_wait(e.kind) {
            // A system call's depth is its frame's (the stack it was made on).
            let frame = nodes.parent(e.node);
            *waits.entry(frame).or_default() += 1;
            pending = Some((frame, e.depth, e.depth));
        } else if e.kind == TraceEntryKind::Return {
            if let Some((_, _, low)) = pending.as_mut() {
                *low = (*low).min(e.depth);
            }
        } else if receives.contains(i)
            && let Some((wait_frame, d, low)) = pending.take()
        {
            let frame = open_frame(nodes, wait_frame, d, low);
            if frame != wait_frame && !wrapped.contains(&(frame, wait_frame)) {
                wrapped.push((frame, wait_frame));
            }
            *received.entry(frame).or_default() += 1;
        }
    }
    // Waits under a receiving frame: its own and its wrappers'.
    let waits_under = |frame: u32| {
        let wrapper: usize = wrapped
            .iter()
            .filter(|(l, _)| *l == frame)
            .map(|(_, w)| waits.get(w).copied().unwrap_or(0))
            .sum();
        waits.get(&frame).copied().unwrap_or(0) + wrapper
    };
    match received
        .iter()
        .filter(|&(&node, _)| waits_under(node) >= 2)
        .max_by_key(|&(&node, &r)| (r, frame_depth(nodes, node)))
    {
        Some((&node, _)) => Some((node, wrappers_of(node, wrapped))),
        None => most_recurring(nodes, entries, |_, e| is_wait(e.kind)),
    }
}

/// The loop of a thread that never waits (select/poll/epoll) but blocks in
/// a receive it makes again and again: the receive entry node (one call
/// path) made most often, at least twice, the first made on a tie (a
/// request's header before its body), and the frame that stays open across
/// most pairs of consecutive ones, deeper on a tie.
fn blocking_loop(
    nodes: &NodeTable,
    entries: &[TraceEntry],
    receives: &Receives,
) -> Option<(u32, u32)> {
    if entries.iter().any(|e| is_wait(e.kind)) {
        return None;
    }
    // Per receive node: how often, and where first.
    let mut made: FxHashMap<u32, (usize, usize)> = Default::default();
    for (i, e) in entries.iter().enumerate() {
        if receives.contains(i) {
            made.entry(e.node).or_insert((0, i)).0 += 1;
        }
    }
    let (receive, _) = made
        .into_iter()
        .filter(|(_, (count, _))| *count >= 2)
        .max_by_key(|&(_, (count, first))| (count, std::cmp::Reverse(first)))?;
    let (loop_node, _) = most_recurring(nodes, entries, |i, e| {
        e.node == receive && receives.contains(i)
    })?;
    Some((loop_node, receive))
}

/// The loop of a thread whose waits were followed by no (or too few)
/// receives, or of one that blocks in a receive (`waits` says which
/// entries wait): the frame that stays open across most pairs of
/// consecutive waits, deeper on a tie, with the wrapper frames its waits
/// were made in.
fn most_recurring(
    nodes: &NodeTable,
    entries: &[TraceEntry],
    waits: impl Fn(usize, &TraceEntry) -> bool,
) -> Option<(u32, Vec<u32>)> {
    let mut recurred: FxHashMap<u32, usize> = Default::default();
    let mut wrapped: Vec<(u32, u32)> = Vec::new();
    // (frame of the last wait, its depth, lowest stack depth since)
    let mut last: Option<(u32, u32, u32)> = None;
    for (i, e) in entries.iter().enumerate() {
        if waits(i, e) {
            let frame = nodes.parent(e.node);
            if let Some((wait_frame, d, low)) = last {
                let open = open_frame(nodes, wait_frame, d, low.min(e.depth));
                for w in [wait_frame, frame] {
                    if open != w && !wrapped.contains(&(open, w)) {
                        wrapped.push((open, w));
                    }
                }
                *recurred.entry(open).or_default() += 1;
            }
            last = Some((frame, e.depth, e.depth));
        } else if e.kind == TraceEntryKind::Return
            && let Some((_, _, low)) = last.as_mut()
        {
            *low = (*low).min(e.depth);
        }
    }
    let (node, _) = recurred
        .into_iter()
        .max_by_key(|&(node, r)| (r, frame_depth(nodes, node)))?;
    Some((node, wrappers_of(node, wrapped)))
}

/// The wait frames of `(open frame, wait frame)` pairs whose open frame is
/// `frame`.
fn wrappers_of(frame: u32, wrapped: Vec<(u32, u32)>) -> Vec<u32> {
    wrapped
        .into_iter()
        .filter(|(l, _)| *l == frame)
        .map(|(_, w)| w)
        .collect()
}

/// The frame open at stack depth `low`, walking up from `frame` at `depth`.
fn open_frame(nodes: &NodeTable, mut frame: u32, mut depth: u32, low: u32) -> u32 {
    while depth > low && frame != NodeTable::ROOT {
        frame = nodes.parent(frame);
        depth -= 1;
    }
    frame
}

/// A frame's depth, 0 for the root.
fn frame_depth(nodes: &NodeTable, node: u32) -> usize {
    if node == NodeTable::ROOT {
        0
    } else {
        nodes.depth(node)
    }
}

struct Builder<'a> {
    nodes: &'a NodeTable,
    tid: u32,
    role: Arc<str>,
    entries: &'a [TraceEntry],
    units: Vec<Unit>,
    /// `mark[node] == stamp`: node already counted in the unit being built.
    mark: Vec<u32>,
    stamp: u32,
    scratch: Vec<(u32, u64)>,
    /// The loop's own waits, left out of handler units.
    loop_wait: Option<LoopWait>,
    /// The loop blocks in its receive, which begins each handler unit.
    blocking: bool,
    /// In a blocking loop, the receive of the handler unit being pushed.
    blocking_receive: Option<usize>,
}

/// What belongs to the event loop's waiting rather than to a handler: the
/// loop's wait calls and its wait wrappers with what they call. A 000
/// handler unit runs to the next receive, across the wait for it; whether
/// the loop waits again after the last event of a run (or twice before
/// the next) is timing, not behaviour, so handler units leave it out.
struct LoopWait {
    loop_node: u32,
    wrappers: Vec<u32>,
    /// Per node: inside a wrapper (the wrapper itself included).
    wrapped: Vec<bool>,
}

impl LoopWait {
    fn new(nodes: &NodeTable, loop_node: u32, wrappers: &[u32]) -> Self {
        let wrapped = if wrappers.is_empty() {
            Vec::new()
        } else {
            (0..nodes.len() as u32)
                .map(|mut n| {
                    loop {
                        if wrappers.contains(&n) {
                            break true;
                        }
                        if n == NodeTable::ROOT {
                            break false;
                        }
                        n = nodes.parent(n);
                    }
                })
                .collect()
        };
        Self {
            loop_node,
            wrappers: wrappers.to_vec(),
            wrapped,
        }
    }

    /// Whether entry `e` is the loop waiting.
    fn contains(&self, nodes: &NodeTable, e: &TraceEntry) -> bool {
        if self.wrapped.get(e.node as usize).copied().unwrap_or(false) {
            return true;
        }
        is_wait(e.kind) && {
            let p = nodes.parent(e.node);
            p == self.loop_node || self.wrappers.contains(&p)
        }
    }
}

impl Builder<'_> {
    /// Marks the last unit open when the thread's trace ended with frames
    /// open that a thread idling in its event loop `loop_node` (with the
    /// wait wrappers `wrappers`) does not have: the loop frame, the frames
    /// around it, and a wrapper waiting (with what it called) are expected;
    /// anything else never returned. Without a loop, every open frame counts.
    /// Marks it cut when the trace ended with only those open, inside the
    /// loop.
    fn mark_open(&mut self, loop_node: Option<u32>, wrappers: &[u32]) {
        // The stack at the end, replayed from the entries' depths.
        let mut stack: Vec<u32> = Vec::new();
        for e in self.entries {
            match e.kind {
                TraceEntryKind::Call => {
                    stack.truncate(e.depth.saturating_sub(1) as usize);
                    stack.push(e.node);
                }
                TraceEntryKind::Return => stack.truncate(e.depth as usize),
                TraceEntryKind::Syscall { .. } => {}
            }
        }
        let around_loop = |node: u32| {
            let Some(mut at) = loop_node else {
                return false;
            };
            loop {
                if at == node {
                    return true;
                }
                if at == NodeTable::ROOT {
                    return false;
                }
                at = self.nodes.parent(at);
            }
        };
        let in_loop = loop_node.is_some_and(|l| l == NodeTable::ROOT || stack.contains(&l));
        let mut open = Vec::new();
        for node in stack {
            if wrappers.contains(&node) {
                break;
            }
            if !around_loop(node) {
                open.push(node);
            }
        }
        if let Some(last) = self.units.last_mut() {
            last.cut = open.is_empty() && in_loop;
            last.open = open;
        }
    }

    /// A handler unit over `start..end` whose receive is entry `receive`.
    fn push_handler(&mut self, start: usize, end: usize, receive: usize, receives: &Receives) {
        let recv = receives.get(receive);
        let fd = match self.entries[receive].kind {
            TraceEntryKind::Syscall { fd, .. } => Some(fd),
            _ => None,
        };
        self.blocking_receive = self.blocking.then_some(receive);
        self.push(UnitKind::Handler, start, end, recv);
        self.blocking_receive = None;
        if let Some(u) = self
            .units
            .last_mut()
            .filter(|u| u.kind == UnitKind::Handler)
        {
            u.fd = fd;
        }
    }

    fn push(&mut self, kind: UnitKind, start: usize, end: usize, recv: Option<&ReceiveInfo>) {
        // A span of returns only is a unit too: a loop left without the
        // calls a normal finalizer makes is evidence (they are missing).
        if start >= end {
            return;
        }
        // Coverage: every node on the path to every entry of the unit.
        self.stamp += 1;
        // Collected in a reused buffer, then copied once at its exact size:
        // one allocation per unit, not one per doubling.
        let scratch = &mut self.scratch;
        scratch.clear();
        let skip = self
            .loop_wait
            .as_ref()
            .filter(|_| kind == UnitKind::Handler);
        // A handler that begins blocked in its receive began when the
        // receive returned (an entry is placed at its start): what it did up
        // to the receive is dated at the next entry, the first the thread
        // made after it.
        let blocked = self
            .blocking_receive
            .filter(|&r| kind == UnitKind::Handler && r + 1 < end)
            .map(|r| (r, self.entries[r + 1].ts_ns));
        let first_ts = blocked.map_or(self.entries[start].ts_ns, |(_, t)| t);
        for (i, e) in self.entries[start..end].iter().enumerate() {
            if skip.is_some_and(|w| w.contains(self.nodes, e)) {
                continue;
            }
            let ts = match blocked {
                Some((r, t)) if start + i <= r => t,
                _ => e.ts_ns,
            };
            let mut node = e.node;
            while node != NodeTable::ROOT && self.mark[node as usize] != self.stamp {
                self.mark[node as usize] = self.stamp;
                scratch.push((node, ts));
                node = self.nodes.parent(node);
            }
        }
        scratch.sort_unstable();
        let nodes = scratch.iter().map(|(n, _)| *n).collect();
        let first_ns = scratch.iter().map(|(_, t)| *t).collect();
        self.units.push(Unit {
            kind,
            tid: self.tid,
            start_ns: first_ts,
            end_ns: self.entries[end - 1].ts_ns,
            nodes,
            first_ns,
            connection: recv
                .map(|r| r.key.clone())
                .or_else(|| (kind == UnitKind::Handler).then(ConnectionKey::unknown)),
            fd: None,
            peer: recv.and_then(|r| r.peer.clone()),
            entries: (start, end),
            role: self.role.clone(),
            open: Vec::new(),
            exited: false,
            cut: false,
            peer_ended_ns: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use tracer_common::syscall::nr;

    use super::*;
    use crate::units::NodeKey;

    use TraceEntryKind::{Call, Return};

    /// The node of `callee` called from `site` in frame `parent`.
    fn node(t: &mut NodeTable, parent: u32, site: &str, callee: &str) -> u32 {
        let key = t.key(NodeKey {
            site: site.into(),
            callee: callee.into(),
        });
        t.child(parent, key)
    }

    /// The node of system call `n` made in frame `parent`.
    fn sys_node(t: &mut NodeTable, parent: u32, n: u32) -> u32 {
        node(t, parent, "", &format!("sys:{n}"))
    }

    /// An entry at stack depth `depth`.
    fn at(kind: TraceEntryKind, node: u32, depth: u32) -> TraceEntry {
        TraceEntry {
            ts_ns: 0,
            kind,
            node,
            depth,
        }
    }

    /// System call `n` on `fd` (returning 8) at stack depth `depth`.
    fn sys(n: u32, fd: i32, node: u32, depth: u32) -> TraceEntry {
        at(
            TraceEntryKind::Syscall {
                nr: n as u16,
                fd,
                ret: 8,
            },
            node,
            depth,
        )
    }

    /// Entries timed by their index.
    fn timed(mut e: Vec<TraceEntry>) -> Vec<TraceEntry> {
        for (i, entry) in e.iter_mut().enumerate() {
            entry.ts_ns = i as u64;
        }
        e
    }

    /// The receives at entries `at`, all on connection `key`.
    fn receive_at(len: usize, at: &[usize], key: &str) -> Receives {
        let mut receives = Receives::new(len);
        for &i in at {
            receives.insert(
                i,
                ReceiveInfo {
                    key: ConnectionKey(key.into()),
                    peer: None,
                },
            );
        }
        receives
    }

    /// main calls serve, whose loop polls, accepts on fd 3, then receives
    /// twice on fd 4 (one unit) and sends, then receives once on fd 5; serve
    /// returns, main closes.
    fn trace() -> (NodeTable, Vec<TraceEntry>, Receives) {
        let mut t = NodeTable::default();
        let main = node(&mut t, NodeTable::ROOT, "", "main");
        let serve = node(&mut t, main, "main+0x10", "serve");
        let handle = node(&mut t, serve, "serve+0x20", "handle");
        let (bind, poll, accept) = (
            sys_node(&mut t, main, nr::BIND),
            sys_node(&mut t, serve, nr::POLL),
            sys_node(&mut t, serve, nr::ACCEPT),
        );
        let (recv, close) = (
            sys_node(&mut t, handle, nr::RECVFROM),
            sys_node(&mut t, main, nr::CLOSE),
        );
        let send = sys_node(&mut t, serve, nr::SENDTO);
        let mut e = vec![
            at(Call, main, 1),
            sys(nr::BIND, 3, bind, 1),
            at(Call, serve, 2),
        ];
        e.extend([sys(nr::POLL, -1, poll, 2), sys(nr::ACCEPT, 3, accept, 2)]);
        e.extend([
            sys(nr::POLL, -1, poll, 2),
            at(Call, handle, 3),
            sys(nr::RECVFROM, 4, recv, 3),
            sys(nr::RECVFROM, 4, recv, 3),
            at(Return, handle, 2),
        ]);
        // Work in the loop after the handler returned: post-processing (001).
        e.push(sys(nr::SENDTO, 4, send, 2));
        e.extend([
            sys(nr::POLL, -1, poll, 2),
            at(Call, handle, 3),
            sys(nr::RECVFROM, 5, recv, 3),
            at(Return, handle, 2),
        ]);
        e.extend([
            at(Return, serve, 1),
            sys(nr::CLOSE, 3, close, 1),
            at(Return, main, 0),
        ]);
        let mut receives = Receives::new(e.len());
        for i in [4, 7, 8, 13] {
            receives.insert(
                i,
                ReceiveInfo {
                    key: ConnectionKey(format!("conn{i}").into()),
                    peer: None,
                },
            );
        }
        (t, timed(e), receives)
    }

    #[test]
    fn paper_000_cuts_at_accepts_and_receives() {
        let (t, e, r) = trace();
        let units = decompose(&t, 1, &e, &r, Variant::Paper000);
        let shape: Vec<(UnitKind, usize, usize)> = units
            .iter()
            .map(|u| (u.kind, u.entries.0, u.entries.1))
            .collect();
        assert_eq!(
            shape,
            vec![
                (UnitKind::Initializer, 0, 4),
                (UnitKind::Handler, 4, 6),
                // Two receives on fd 4 are one unit, from the call of the
                // handler function that made them.
                (UnitKind::Handler, 6, 12),
                (UnitKind::Handler, 12, 15),
                (UnitKind::Finalizer, 15, 18),
            ]
        );
        assert_eq!(units[2].fd, Some(4));
        // Coverage includes the open frames' path: main > serve > handle > recv.
        assert!(units[2].nodes.len() >= 4);
    }

    #[test]
    fn paper_001_adds_pre_and_post_processing() {
        let (t, e, r) = trace();
        let units = decompose(&t, 1, &e, &r, Variant::Paper001);
        let kinds: Vec<UnitKind> = units.iter().map(|u| u.kind).collect();
        use UnitKind::*;
        assert_eq!(
            kinds,
            vec![
                Initializer,
                PreProcess,
                Handler,
                PreProcess,
                Handler,
                PostProcess,
                PreProcess,
                Handler,
                Finalizer
            ]
        );
        // The fd 4 handler ends when handle returns to the loop's depth.
        let h = units
            .iter()
            .filter(|u| u.kind == Handler)
            .nth(1)
            .map(|u| u.entries);
        assert_eq!(h, Some((6, 10)));
    }

    /// A loop that waits through a wrapper (`serve > wait > poll`, as
    /// Python's `selectors`): the loop is `serve`, the frame the wrapper
    /// returns to before the receive, and every wrapped poll is a loop wait.
    #[test]
    fn a_wait_in_a_wrapper_counts_for_the_frame_that_stays_open() {
        let mut t = NodeTable::default();
        let serve = node(&mut t, NodeTable::ROOT, "", "serve");
        let wait = node(&mut t, serve, "serve+0x8", "wait");
        let handle = node(&mut t, serve, "serve+0x20", "handle");
        let poll = sys_node(&mut t, wait, nr::POLL);
        let recv = sys_node(&mut t, handle, nr::RECVFROM);
        let mut e = vec![at(Call, serve, 1)];
        for _ in 0..2 {
            e.extend([
                at(Call, wait, 2),
                sys(nr::POLL, 4, poll, 2),
                at(Return, wait, 1),
                at(Call, handle, 2),
                sys(nr::RECVFROM, 4, recv, 2),
                at(Return, handle, 1),
            ]);
        }
        e.push(at(Return, serve, 0));
        let receives = receive_at(e.len(), &[5, 11], "conn");
        assert_eq!(find_loop(&t, &e, &receives), Some((serve, vec![wait])));
        let units = decompose(&t, 1, &e, &receives, Variant::Paper000);
        let shape: Vec<(UnitKind, usize, usize)> = units
            .iter()
            .map(|u| (u.kind, u.entries.0, u.entries.1))
            .collect();
        assert_eq!(
            shape,
            vec![
                (UnitKind::Initializer, 0, 4),
                // Each handler from the call of `handle`, the next wait's
                // wrapper call included as in the unwrapped loop.
                (UnitKind::Handler, 4, 10),
                (UnitKind::Handler, 10, 13),
                (UnitKind::Finalizer, 13, 14),
            ]
        );
    }

    /// A watcher thread, `watch@start_routine+0x8`: `polls` waits, then (with
    /// `receive`) one receive in `on_reset`, then the frame returns.
    fn watcher(polls: usize, receive: bool) -> (NodeTable, Vec<TraceEntry>, Receives) {
        let mut t = NodeTable::default();
        let watch = node(&mut t, NodeTable::ROOT, "start_routine+0x8", "watch");
        let reset = node(&mut t, watch, "watch+0x30", "on_reset");
        let poll = sys_node(&mut t, watch, nr::POLL);
        let recv = sys_node(&mut t, reset, nr::RECVFROM);
        let mut e = vec![at(Call, watch, 1)];
        e.extend((0..polls).map(|_| sys(nr::POLL, 5, poll, 1)));
        let mut received = Vec::new();
        if receive {
            e.push(at(Call, reset, 2));
            received.push(e.len());
            e.push(sys(nr::RECVFROM, 5, recv, 2));
            e.push(at(Return, reset, 1));
            e.push(sys(nr::POLL, 5, poll, 1));
        }
        e.push(at(Return, watch, 0));
        let receives = receive_at(e.len(), &received, "rhs");
        (t, timed(e), receives)
    }

    /// 000 §2.2 step 1 finds loops by recurring stacks: a thread that waits
    /// again and again and receives once (a reset) has a loop and a handler
    /// unit for that receive; one wait before one receive is no loop.
    #[test]
    fn a_recurring_wait_with_one_receive_is_a_loop() {
        let (t, e, r) = watcher(5, true);
        let kinds: Vec<UnitKind> = decompose(&t, 7, &e, &r, Variant::Paper000)
            .iter()
            .map(|u| u.kind)
            .collect();
        use UnitKind::*;
        assert_eq!(kinds, [Initializer, Handler, Finalizer]);

        // The same thread when no event came: cut the same way, so its
        // initializer is the same in both papers' decompositions.
        for variant in [Variant::Paper000, Variant::Paper001] {
            let (t, e, r) = watcher(5, true);
            let event = decompose(&t, 7, &e, &r, variant);
            let (t, e, r) = watcher(5, false);
            let quiet = decompose(&t, 7, &e, &r, variant);
            assert_eq!(quiet[0].kind, Initializer);
            assert_eq!(quiet[0].nodes, event[0].nodes, "{variant:?}");
            assert!(quiet.iter().all(|u| u.kind != Handler), "{quiet:?}");
        }

        // One wait, one receive, no second wait: nothing recurs.
        let (t, mut e, r) = watcher(1, true);
        let last_poll = e.len() - 2;
        e.remove(last_poll);
        let units = decompose(&t, 7, &e, &r, Variant::Paper000);
        assert_eq!(units.len(), 1, "{units:?}");
        assert_eq!(units[0].kind, Initializer);
    }

    /// Hydra's shape: `main` calls `dmx_wait` each iteration, whose
    /// `poll_wait` waits and calls the callback that receives, and both
    /// return to `main`. The loop is `poll_wait` (open at the receives), not
    /// `main` (open across the waits), so `main`'s clean-up after the loop is
    /// the finalizer, not part of the last handler.
    #[test]
    fn callbacks_under_the_wait_frame_leave_the_clean_up_to_the_finalizer() {
        let mut t = NodeTable::default();
        let main = node(&mut t, NodeTable::ROOT, "libc.so.6+0x2724a", "main");
        let dmx = node(&mut t, main, "main+0x10", "dmx_wait");
        let pw = node(&mut t, dmx, "dmx_wait+0x8", "poll_wait");
        let cb = node(&mut t, pw, "poll_wait+0x40", "pmi_cb");
        let fin = node(&mut t, main, "main+0x90", "finalize");
        let poll = sys_node(&mut t, pw, nr::POLL);
        let read = sys_node(&mut t, cb, nr::READ);
        let mut e = vec![at(Call, main, 1)];
        let mut reads = Vec::new();
        for _ in 0..3 {
            e.extend([
                at(Call, dmx, 2),
                at(Call, pw, 3),
                sys(nr::POLL, 6, poll, 3),
                at(Call, cb, 4),
            ]);
            reads.push(e.len());
            e.extend([
                sys(nr::READ, 6, read, 4),
                at(Return, cb, 3),
                at(Return, pw, 2),
                at(Return, dmx, 1),
            ]);
        }
        e.extend([at(Call, fin, 2), at(Return, fin, 1), at(Return, main, 0)]);
        let receives = receive_at(e.len(), &reads, "pmi");
        assert_eq!(find_loop(&t, &e, &receives).map(|l| l.0), Some(pw));
        let units = decompose(&t, 1, &e, &receives, Variant::Paper000);
        let last = units.last().expect("units");
        assert_eq!(last.kind, UnitKind::Finalizer);
        assert!(last.nodes.contains(&fin), "{units:#?}");
        assert!(
            units
                .iter()
                .filter(|u| u.kind == UnitKind::Handler)
                .all(|u| !u.nodes.contains(&fin))
        );
    }

    /// The Hydra and `selectors` shape with nothing received: the waits are
    /// made in a wrapper that returns each iteration, so the loop is the
    /// frame open across them and the wrapper's waits are its waits.
    #[test]
    fn a_quiet_loop_that_waits_in_a_wrapper_is_cut_at_its_waits() {
        let mut t = NodeTable::default();
        let serve = node(&mut t, NodeTable::ROOT, "", "serve");
        let wait = node(&mut t, serve, "serve+0x8", "wait");
        let fin = node(&mut t, serve, "serve+0x40", "finish");
        let poll = sys_node(&mut t, wait, nr::POLL);
        let mut e = vec![at(Call, serve, 1)];
        for _ in 0..3 {
            e.extend([
                at(Call, wait, 2),
                sys(nr::POLL, 4, poll, 2),
                at(Return, wait, 1),
            ]);
        }
        e.extend([at(Call, fin, 2), at(Return, fin, 1), at(Return, serve, 0)]);
        let none = Receives::new(e.len());
        assert_eq!(find_loop(&t, &e, &none), Some((serve, vec![wait])));
        for variant in [Variant::Paper000, Variant::Paper001] {
            let units = decompose(&t, 1, &e, &none, variant);
            assert!(
                units.iter().all(|u| u.kind != UnitKind::Handler),
                "{units:?}"
            );
            assert_eq!(units[0].kind, UnitKind::Initializer);
        }
    }

    /// A thread's role is the function its first traced call was made from:
    /// the start routine, `main`, or the object where no symbol is known;
    /// every unit of the thread carries it.
    #[test]
    fn the_thread_role_is_where_its_first_call_was_made() {
        let (t, e, r) = watcher(3, true);
        assert_eq!(&*thread_role(&t, &e), "start_routine");
        for u in decompose(&t, 7, &e, &r, Variant::Paper000) {
            assert_eq!(&*u.role, "start_routine");
        }
        let (t, e, _) = trace();
        // main's own call site is unknown here (empty): so is the role.
        assert_eq!(&*thread_role(&t, &e), "");
        assert_eq!(&*thread_role(&t, &[]), "");

        let mut t = NodeTable::default();
        for (site, role) in [
            ("libglusterfs.so.0+0x4a1f0", "libglusterfs.so.0"),
            ("operator+", "operator+"),
            ("operator++0x10", "operator+"),
            ("worker:12", "worker:12"),
        ] {
            let f = node(&mut t, NodeTable::ROOT, site, "f");
            assert_eq!(&*thread_role(&t, &[at(Call, f, 1)]), role, "{site}");
        }
    }

    /// Without waits there is no loop: the whole thread is its initializer.
    /// With waits but no receive, the loop is cut all the same, without
    /// handlers: the finalizer after it is the one a receiving run has.
    #[test]
    fn no_wait_no_loop_and_no_receive_no_handlers() {
        let (t, e, r) = trace();
        let no_waits: Vec<TraceEntry> = e.iter().copied().filter(|e| !is_wait(e.kind)).collect();
        let units = decompose(&t, 1, &no_waits, &Receives::default(), Variant::Paper000);
        assert_eq!(units.len(), 1);
        assert_eq!(units[0].kind, UnitKind::Initializer);

        let quiet = decompose(&t, 1, &e, &Receives::default(), Variant::Paper000);
        let kinds: Vec<UnitKind> = quiet.iter().map(|u| u.kind).collect();
        assert_eq!(kinds, [UnitKind::Initializer, UnitKind::Finalizer]);
        let busy = decompose(&t, 1, &e, &r, Variant::Paper000);
        assert_eq!(quiet.last(), busy.last());
    }

    /// `serve` loops waiting in `wait` (a wrapper, as Python's `selectors`)
    /// and handles each receive in `handle`; `tail` says how the trace
    /// ends after two handled messages: `Return` (serve returns), `Hang`
    /// (a third handler never returns), `Idle` (it dies inside `wait`).
    fn wrapped_loop(tail: &str) -> (NodeTable, Vec<TraceEntry>, Receives, [u32; 4]) {
        let mut t = NodeTable::default();
        let serve = node(&mut t, NodeTable::ROOT, "", "serve");
        let wait = node(&mut t, serve, "serve+0x8", "wait");
        let handle = node(&mut t, serve, "serve+0x20", "handle");
        let poll = sys_node(&mut t, wait, nr::POLL);
        let recv = sys_node(&mut t, handle, nr::RECVFROM);
        let mut e = vec![at(Call, serve, 1)];
        let mut received = Vec::new();
        let mut one = |e: &mut Vec<TraceEntry>, returns: bool| {
            e.extend([
                at(Call, wait, 2),
                sys(nr::POLL, 4, poll, 2),
                at(Return, wait, 1),
                at(Call, handle, 2),
            ]);
            received.push(e.len());
            e.push(sys(nr::RECVFROM, 4, recv, 2));
            if returns {
                e.push(at(Return, handle, 1));
            }
        };
        one(&mut e, true);
        one(&mut e, true);
        match tail {
            "Return" => e.push(at(Return, serve, 0)),
            "Hang" => one(&mut e, false),
            _ => e.push(at(Call, wait, 2)),
        }
        let receives = receive_at(e.len(), &received, "conn");
        (t, timed(e), receives, [serve, wait, handle, poll])
    }

    /// A handler whose frame never returned before the trace ended is
    /// open, with that frame; a thread that ends while waiting in its loop
    /// (inside the wrapper) leaves its last unit cut, not open; one whose
    /// loop returned leaves neither.
    #[test]
    fn units_that_never_completed_are_open_and_idle_ends_are_cut() {
        let (t, e, r, [_, _, handle, _]) = wrapped_loop("Hang");
        let units = decompose(&t, 1, &e, &r, Variant::Paper000);
        let last = units.last().expect("units");
        assert_eq!(last.kind, UnitKind::Handler);
        assert_eq!(last.open, [handle]);
        assert!(!last.cut);
        assert!(
            units[..units.len() - 1]
                .iter()
                .all(|u| u.open.is_empty() && !u.cut)
        );

        let (t, e, r, _) = wrapped_loop("Idle");
        let units = decompose(&t, 1, &e, &r, Variant::Paper000);
        let last = units.last().expect("units");
        assert!(last.open.is_empty(), "{last:?}");
        assert!(last.cut);

        let (t, e, r, _) = wrapped_loop("Return");
        let units = decompose(&t, 1, &e, &r, Variant::Paper000);
        assert!(
            units.iter().all(|u| u.open.is_empty() && !u.cut),
            "{units:?}"
        );
    }

    /// A 000 handler unit runs to the next receive, across the wait for
    /// it; the wait (and what its wrapper calls) is the loop's: handler
    /// units leave it out, so the last handler of a run (after which the
    /// loop may or may not wait again) covers what the others cover. Each
    /// node carries the time it first came.
    #[test]
    fn handler_units_leave_the_loops_waits_out() {
        let (t, e, r, [serve, wait, handle, poll]) = wrapped_loop("Return");
        let units = decompose(&t, 1, &e, &r, Variant::Paper000);
        let handlers: Vec<&Unit> = units
            .iter()
            .filter(|u| u.kind == UnitKind::Handler)
            .collect();
        assert_eq!(handlers.len(), 2);
        for h in &handlers {
            assert!(
                !h.nodes.contains(&wait) && !h.nodes.contains(&poll),
                "{h:?}"
            );
            assert!(h.nodes.contains(&serve) && h.nodes.contains(&handle));
        }
        assert_eq!(handlers[0].nodes, handlers[1].nodes);
        // The initializer keeps the first wait.
        assert!(units[0].nodes.contains(&wait));
        let h = handlers[1];
        assert_eq!(h.first_ns.len(), h.nodes.len());
        assert_eq!(h.first_time(handle), Some(h.start_ns));
        assert_eq!(h.first_time(wait), None);
    }

    /// A thread-per-connection server never waits: it blocks in its
    /// receive, which is then the loop's wait. Each receive that does not
    /// continue the one before (the rest of a message) starts a handler
    /// unit that keeps it; the close after the last one is in its unit, the
    /// return from the thread's function in the finalizer.
    #[test]
    fn a_thread_that_blocks_in_its_receive_is_cut_at_each_request() {
        let mut t = NodeTable::default();
        let thread = node(&mut t, NodeTable::ROOT, "", "conn_thread");
        let serve = node(&mut t, thread, "conn_thread+0x10", "serve_conn");
        let handle = node(&mut t, serve, "serve_conn+0x20", "handle");
        let (recv, send, close) = (
            sys_node(&mut t, serve, nr::RECVFROM),
            sys_node(&mut t, serve, nr::SENDTO),
            sys_node(&mut t, serve, nr::CLOSE),
        );
        let request = [
            at(Call, handle, 3),
            at(Return, handle, 2),
            sys(nr::SENDTO, 5, send, 2),
        ];
        let mut e = vec![at(Call, thread, 1), at(Call, serve, 2)];
        // A request read in two parts, then one in one part.
        e.extend([sys(nr::RECVFROM, 5, recv, 2), sys(nr::RECVFROM, 5, recv, 2)]);
        e.extend(request);
        e.push(sys(nr::RECVFROM, 5, recv, 2));
        e.extend(request);
        // End of stream: the connection is closed.
        e.extend([sys(nr::RECVFROM, 5, recv, 2), sys(nr::CLOSE, 5, close, 2)]);
        e.extend([at(Return, serve, 1), at(Return, thread, 0)]);
        let e = timed(e);
        let receives = receive_at(e.len(), &[2, 3, 7, 11], "conn");
        let units = decompose(&t, 1, &e, &receives, Variant::Paper000);
        let cut: Vec<(UnitKind, (usize, usize))> =
            units.iter().map(|u| (u.kind, u.entries)).collect();
        assert_eq!(
            cut,
            [
                (UnitKind::Initializer, (0, 2)),
                (UnitKind::Handler, (2, 7)),
                (UnitKind::Handler, (7, 11)),
                (UnitKind::Handler, (11, 13)),
                (UnitKind::Finalizer, (13, 15)),
            ]
        );
        assert!(units.iter().all(|u| u.open.is_empty() && !u.cut));
        // The receive stays in its unit (no event-loop wait to leave out);
        // the unit is dated when it returned, at the thread's next entry.
        assert!(units[2].nodes.contains(&recv), "{:?}", units[2].nodes);
        assert_eq!(units[2].start_ns, 8);
        assert_eq!(units[3].start_ns, 12);

        // A thread that receives once is no loop.
        let once = receive_at(e.len(), &[2], "conn");
        let units = decompose(&t, 1, &e[..7], &once, Variant::Paper000);
        assert_eq!(
            units.iter().map(|u| u.kind).collect::<Vec<_>>(),
            [UnitKind::Initializer]
        );
    }

    /// A blocking receive made in a function of its own (`recv_request`):
    /// the unit begins at that call, and all of it up to the receive's
    /// return is dated then, not when the thread began to wait.
    #[test]
    fn a_blocking_unit_is_dated_when_its_receive_returned() {
        let mut t = NodeTable::default();
        let serve = node(&mut t, NodeTable::ROOT, "", "serve_conn");
        let read = node(&mut t, serve, "serve_conn+0x2a", "recv_request");
        let route = node(&mut t, serve, "serve_conn+0x38", "route_request");
        let recv = sys_node(&mut t, read, nr::RECVFROM);
        let request = |ts: u64| {
            [
                at(Call, read, 2),
                sys(nr::RECVFROM, 5, recv, 2),
                at(Return, read, 1),
                at(Call, route, 2),
                at(Return, route, 1),
            ]
            .map(|mut e| {
                e.ts_ns = ts;
                e
            })
        };
        let mut e = vec![at(Call, serve, 1)];
        // Waits from 10 to 500 for the second request.
        for (i, base) in [(0, 0), (1, 10)] {
            let mut r = request(base);
            for (k, entry) in r.iter_mut().enumerate() {
                entry.ts_ns += k as u64;
                if i == 1 && k >= 2 {
                    entry.ts_ns += 490;
                }
            }
            e.extend(r);
        }
        e.push(at(Return, serve, 0));
        let receives = receive_at(e.len(), &[2, 7], "conn");
        let units = decompose(&t, 1, &e, &receives, Variant::Paper000);
        let second = units
            .iter()
            .filter(|u| u.kind == UnitKind::Handler)
            .nth(1)
            .expect("two handler units");
        assert_eq!(second.entries, (6, 11));
        assert_eq!(second.start_ns, 502, "{second:?}");
        let read_at = second
            .nodes
            .iter()
            .position(|n| *n == read)
            .map(|i| second.first_ns[i]);
        assert_eq!(read_at, Some(502));
    }
}
