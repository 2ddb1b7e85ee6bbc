//! Model-based scores (papers 000/001) of the complete units of a sliding
//! flight-recorder window, each unit once.

use rustc_hash::FxHashMap;

use super::anchor::{self, Facts};
use crate::{
    decode::Capture,
    model::GlobalModel,
    score::{Scoring, UnitScore, score_processes},
    units::{ConnectionKey, ProcessUnits, Unit, UnitKind, decompose_capture},
};

/// Scores the units of successive windows of a live recording against a
/// model, with the replay code (`decompose_capture`, `score_processes`).
///
/// A unit is reported once, when it is complete: not cut by the gap between
/// preamble and window, not still open at the end of the window, and (a
/// finalizer) only once its process exited. What is remembered is bounded
/// by the processes present in the last capture.
#[derive(Debug)]
pub struct LiveModel {
    model: GlobalModel,
    scoring: Scoring,
    /// Start of the last unit reported, per (pid, tid).
    pub(super) reported: FxHashMap<(u32, u32), u64>,
    /// Per pid: the connection each descriptor was last seen on. A
    /// connection established in an earlier window is `unknown` in a later
    /// one (its accept or connect is gone with the gap); the key it had
    /// then still names it.
    pub(super) connections: FxHashMap<u32, FxHashMap<i32, ConnectionKey>>,
}

impl LiveModel {
    /// A live scorer of `model`.
    pub fn new(model: GlobalModel, scoring: Scoring) -> Self {
        Self {
            model,
            scoring,
            reported: FxHashMap::default(),
            connections: FxHashMap::default(),
        }
    }

    /// The model.
    pub fn model(&self) -> &GlobalModel {
        &self.model
    }

    /// Threads whose reported units are remembered.
    pub fn remembered_threads(&self) -> usize {
        self.reported.len()
    }

    /// Scores of the units of `capture` that are complete and were not
    /// reported before, most suspect first. `capture` is a preamble (records
    /// before `window_start_ns`), a gap, and the window up to `now_ns`;
    /// `source` names it in the scores.
    pub fn evaluate(
        &mut self,
        capture: &Capture,
        window_start_ns: u64,
        now_ns: u64,
        source: &str,
    ) -> Vec<UnitScore> {
        let facts = anchor::scan(capture, window_start_ns);
        let anchored = anchor::anchored(capture, &facts, window_start_ns);
        let mut processes = decompose_capture(anchored.get(), self.model.variant);
        for p in &mut processes {
            self.name_connections(p);
            let units = std::mem::take(&mut p.units);
            p.units = self.complete(p.pid, units, &facts, (window_start_ns, now_ns));
        }
        // Forget processes that left the capture: they cannot come back.
        self.reported.retain(|(pid, _), _| facts.contains_key(pid));
        self.connections.retain(|pid, _| facts.contains_key(pid));
        processes.retain(|p| !p.units.is_empty());
        score_processes(&self.model, capture, source, &processes, self.scoring)
    }

    /// Gives units on descriptors whose establishment fell into a gap the
    /// connection they had when it was seen; remembers the known ones.
    fn name_connections(&mut self, p: &mut ProcessUnits) {
        let known = self.connections.entry(p.pid).or_default();
        let mut order: Vec<usize> = (0..p.units.len())
            .filter(|i| p.units[*i].kind == UnitKind::Handler && p.units[*i].fd.is_some())
            .collect();
        order.sort_by_key(|i| p.units[*i].start_ns);
        let unknown = ConnectionKey::unknown();
        for i in order {
            let u = &mut p.units[i];
            let Some(fd) = u.fd else { continue };
            match &u.connection {
                Some(c) if *c != unknown => {
                    known.insert(fd, c.clone());
                }
                _ => {
                    if let Some(c) = known.get(&fd) {
                        u.connection = Some(c.clone());
                    }
                }
            }
        }
    }

    /// The units of process `pid` that are complete and new; marks them
    /// reported.
    fn complete(
        &mut self,
        pid: u32,
        units: Vec<Unit>,
        facts: &Facts,
        (w, now): (u64, u64),
    ) -> Vec<Unit> {
        let Some(pf) = facts.get(&pid) else {
            return Vec::new();
        };
        // Per thread: index of its last unit, of its last unit before the
        // window, of its first unit in it.
        let mut last: FxHashMap<u32, usize> = FxHashMap::default();
        let mut last_pre: FxHashMap<u32, usize> = FxHashMap::default();
        let mut first: FxHashMap<u32, usize> = FxHashMap::default();
        let mut first_post: FxHashMap<u32, usize> = FxHashMap::default();
        // Threads with a unit across the gap: the unit after it starts
        // where the replay would start it.
        let mut spanned: Vec<u32> = Vec::new();
        for (i, u) in units.iter().enumerate() {
            if u.start_ns < w && u.end_ns >= w && !spanned.contains(&u.tid) {
                spanned.push(u.tid);
            }
            let later = |j: &usize| units[*j].entries.1 < u.entries.1;
            if last.get(&u.tid).is_none_or(later) {
                last.insert(u.tid, i);
            }
            if first
                .get(&u.tid)
                .is_none_or(|j| units[*j].entries.0 > u.entries.0)
            {
                first.insert(u.tid, i);
            }
            if u.start_ns < w {
                if last_pre.get(&u.tid).is_none_or(later) {
                    last_pre.insert(u.tid, i);
                }
            } else if first_post
                .get(&u.tid)
                .is_none_or(|j| units[*j].entries.0 > u.entries.0)
            {
                first_post.insert(u.tid, i);
            }
        }
        let mut out = Vec::new();
        for (i, u) in units.into_iter().enumerate() {
            let t = pf.threads.get(&u.tid);
            let thread_pre = t.is_some_and(|t| t.pre);
            let thread_exit = t.and_then(|t| t.exited).or(pf.exited);
            let exited_before_gap = thread_exit.is_some_and(|x| x < w);
            // Cut by the gap: spans it, holds the last records before it
            // (what followed is lost), or, when no unit spans it, starts
            // the window maybe without its beginning (a receive whose
            // handler call fell into the gap).
            let cut = (u.start_ns < w && u.end_ns >= w)
                || (thread_pre && last_pre.get(&u.tid) == Some(&i) && !exited_before_gap)
                || (thread_pre && first_post.get(&u.tid) == Some(&i) && !spanned.contains(&u.tid));
            // A thread first seen in the window of a process seen before
            // it began before the window: its beginning is lost.
            let headless = !thread_pre
                && pf.pre
                && first.get(&u.tid) == Some(&i)
                && !t.is_some_and(|t| t.born_in_window);
            // Still open: the thread's last unit grows until it exits; a
            // record past the last drain is one the next drain completes.
            let open = (last.get(&u.tid) == Some(&i) && thread_exit.is_none()) || u.end_ns > now;
            let early_finalizer = u.kind == UnitKind::Finalizer && pf.exited.is_none();
            let seen = self
                .reported
                .get(&(pid, u.tid))
                .is_some_and(|s| u.start_ns <= *s);
            if cut || headless || open || early_finalizer || seen {
                continue;
            }
            out.push(u);
        }
        for u in &out {
            let s = self.reported.entry((pid, u.tid)).or_insert(u.start_ns);
            *s = (*s).max(u.start_ns);
        }
        out
    }
}
