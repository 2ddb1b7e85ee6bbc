//! What a flight-recorder capture says about each thread around its gap, and
//! the capture re-anchored across that gap.
//!
//! The agent's capture is a process's first records (the preamble), a gap of
//! records lost to rotation, then the recent window. Replayed as is, a
//! thread's call stack at the end of the preamble is carried over the gap:
//! frames that returned in the gap stay open forever (their returns were
//! lost), and every call of the window is placed under them, on call paths a
//! model of normal runs has never seen. So before the replay code runs, each
//! such thread gets synthetic returns at the gap that unwind its stack to the
//! frames the window shows are still open:
//! - the window's first outermost call `(function, call site)` was made, in
//!   the preamble, under some stack: when that stack is a prefix of the
//!   preamble's last stack, the window starts under it;
//! - otherwise the function holding the call site, when it is a traced frame
//!   of that stack, is where the call was made from;
//! - otherwise the outermost function the window returns from without having
//!   called it was open at the gap.
//!
//! Python frames (USDT) are left as they are.

use rustc_hash::FxHashMap;
use tracer_common::{
    capture::RawRecords,
    record::{FuncEntry, FuncReturn, Header, Lifecycle, Pod as _, Syscall, kind, lifecycle},
};

use crate::decode::{Capture, Symbolizer};

/// What one thread did around the gap.
#[derive(Debug, Default)]
pub(crate) struct ThreadFacts {
    /// It has records before the window.
    pub(crate) pre: bool,
    /// Time of its last record before the window.
    pub(crate) last_pre_ts: u64,
    /// Native frames open at the end of the preamble: (function, call site).
    stack: Vec<(u32, u64)>,
    /// The stack (functions) each (function, call site) was last called
    /// under in the preamble.
    contexts: FxHashMap<(u32, u64), Vec<u32>>,
    /// Functions of the window's frames, to tell its own returns apart.
    window_stack: Vec<u32>,
    /// The window's first call made with none of the window's own frames
    /// open, and the unmatched returns before it.
    first_call: Option<(u32, u64)>,
    returns_before_call: Vec<u32>,
    /// Unmatched returns of the window (innermost first).
    unmatched: Vec<u32>,
    /// The thread was created (forked) inside the window.
    pub(crate) born_in_window: bool,
    /// Its exit was recorded (time).
    pub(crate) exited: Option<u64>,
}

/// What one process did around the gap.
#[derive(Debug, Default)]
pub(crate) struct ProcessFacts {
    /// It has records before the window.
    pub(crate) pre: bool,
    /// Its exit was recorded (time).
    pub(crate) exited: Option<u64>,
    /// Its threads.
    pub(crate) threads: FxHashMap<u32, ThreadFacts>,
}

/// Facts of every process of a capture.
pub(crate) type Facts = FxHashMap<u32, ProcessFacts>;

/// Every readable record of `capture` as (header, bytes).
fn records(capture: &Capture) -> impl Iterator<Item = (Header, &[u8])> {
    capture
        .chunks
        .iter()
        .flat_map(|(_, bytes)| RawRecords::new(bytes).map_while(Result::ok))
}

/// One pass over the records: who was there before the window, the stacks
/// at the gap, what the window starts with, who exited.
pub(crate) fn scan(capture: &Capture, window_start_ns: u64) -> Facts {
    let mut facts = Facts::default();
    for (h, bytes) in records(capture) {
        let pre = h.ts_ns < window_start_ns;
        if h.kind == kind::LIFECYCLE {
            let Some(l) = Lifecycle::read_from(bytes) else {
                continue;
            };
            match l.event {
                lifecycle::FORK if !pre => {
                    // The child may be a thread of this process or a new one.
                    let child = l.child_tid;
                    facts
                        .entry(h.pid)
                        .or_default()
                        .threads
                        .entry(child)
                        .or_default()
                        .born_in_window = true;
                    facts
                        .entry(child)
                        .or_default()
                        .threads
                        .entry(child)
                        .or_default()
                        .born_in_window = true;
                }
                lifecycle::EXIT => {
                    let p = facts.entry(h.pid).or_default();
                    p.threads.entry(h.tid).or_default().exited = Some(h.ts_ns);
                    if l.group_dead != 0 || h.tid == h.pid {
                        p.exited = Some(h.ts_ns);
                    }
                }
                _ => {}
            }
            continue;
        }
        if !matches!(
            h.kind,
            kind::FUNC_ENTRY
                | kind::FUNC_ENTRY_ARGS
                | kind::FUNC_ENTRY_STACK
                | kind::FUNC_ENTRY_FRAME
                | kind::FUNC_RETURN
                | kind::SYSCALL
        ) {
            continue;
        }
        let p = facts.entry(h.pid).or_default();
        p.pre |= pre;
        let t = p.threads.entry(h.tid).or_default();
        if pre {
            t.pre = true;
            t.last_pre_ts = t.last_pre_ts.max(h.ts_ns);
        }
        match h.kind {
            kind::FUNC_ENTRY
            | kind::FUNC_ENTRY_ARGS
            | kind::FUNC_ENTRY_STACK
            | kind::FUNC_ENTRY_FRAME => {
                let Some(e) = FuncEntry::read_from(bytes) else {
                    continue;
                };
                let key = (e.func_id, e.call_site);
                if pre {
                    let same = t.contexts.get(&key).is_some_and(|c| {
                        c.len() == t.stack.len() && c.iter().zip(&t.stack).all(|(a, b)| *a == b.0)
                    });
                    if !same {
                        t.contexts
                            .insert(key, t.stack.iter().map(|f| f.0).collect());
                    }
                    t.stack.push(key);
                } else {
                    if t.window_stack.is_empty() && t.first_call.is_none() {
                        t.first_call = Some(key);
                        t.returns_before_call = t.unmatched.clone();
                    }
                    t.window_stack.push(e.func_id);
                }
            }
            kind::FUNC_RETURN => {
                let Some(r) = FuncReturn::read_from(bytes) else {
                    continue;
                };
                if pre {
                    if let Some(pos) = t.stack.iter().rposition(|f| f.0 == r.func_id) {
                        t.stack.truncate(pos);
                    }
                } else if let Some(pos) = t.window_stack.iter().rposition(|f| *f == r.func_id) {
                    t.window_stack.truncate(pos);
                } else {
                    t.unmatched.push(r.func_id);
                }
            }
            _ => {
                // A system call only says the thread was there; its enter
                // time is what the traces use, and it is never later.
                if pre && let Some(s) = Syscall::read_from(bytes) {
                    t.last_pre_ts = t.last_pre_ts.max(s.enter_ns);
                }
            }
        }
    }
    facts
}

/// How many frames of the preamble's last stack of `t` are still open at
/// the gap (see the module doc); all of them when the window says nothing.
fn frames_kept<'c>(
    t: &ThreadFacts,
    capture: &'c Capture,
    sym: &mut Option<Symbolizer<'c>>,
    pid: u32,
) -> usize {
    let stack: Vec<u32> = t.stack.iter().map(|f| f.0).collect();
    let innermost = |func: u32| stack.iter().rposition(|f| *f == func);
    if let Some((func, site)) = t.first_call {
        if let Some(c) = t.contexts.get(&(func, site))
            && c.len() <= stack.len()
            && c[..] == stack[..c.len()]
        {
            return c.len();
        }
        let sym = sym.get_or_insert_with(|| Symbolizer::new(capture));
        let caller = sym.user(pid, site).and_then(|l| l.symbol);
        if let Some(caller) = caller
            && let Some(j) = stack.iter().rposition(|f| {
                capture
                    .probe(*f)
                    .is_some_and(|p| p.symbol == caller || p.aliases.iter().any(|a| a == caller))
            })
        {
            return j + 1;
        }
        // The call came after these returned: below the outermost of them.
        if let Some(j) = t.returns_before_call.last().and_then(|f| innermost(*f)) {
            return j;
        }
    }
    if let Some(j) = t.unmatched.last().and_then(|f| innermost(*f)) {
        // Still open at the gap; its own return will close it.
        return j + 1;
    }
    stack.len()
}

/// A capture as the replay code should see it.
pub(crate) enum Anchored<'a> {
    /// No thread needed unwinding.
    Same(&'a Capture),
    /// With synthetic returns at the gap.
    Owned(Box<Capture>),
}

impl Anchored<'_> {
    /// The capture.
    pub(crate) fn get(&self) -> &Capture {
        match self {
            Self::Same(c) => c,
            Self::Owned(c) => c,
        }
    }
}

/// `capture` with synthetic returns at each thread's gap (none needed: the
/// capture itself).
pub(crate) fn anchored<'a>(
    capture: &'a Capture,
    facts: &Facts,
    window_start_ns: u64,
) -> Anchored<'a> {
    let mut sym = None;
    let mut synthetic: Vec<u8> = Vec::new();
    for (pid, p) in facts {
        for (tid, t) in &p.threads {
            // Only threads with both a preamble and a window have a gap.
            if !t.pre
                || (t.first_call.is_none() && t.unmatched.is_empty() && t.window_stack.is_empty())
            {
                continue;
            }
            let keep = frames_kept(t, capture, &mut sym, *pid);
            for (func_id, _) in t.stack[keep.min(t.stack.len())..].iter().rev() {
                let r = FuncReturn {
                    header: Header {
                        ts_ns: t.last_pre_ts,
                        pid: *pid,
                        tid: *tid,
                        kind: kind::FUNC_RETURN,
                        size: size_of::<FuncReturn>() as u16,
                        cpu: 0,
                    },
                    func_id: *func_id,
                    _pad: 0,
                    ret: 0,
                };
                synthetic.extend_from_slice(r.as_bytes());
            }
        }
    }
    if synthetic.is_empty() {
        return Anchored::Same(capture);
    }
    // Preamble, the unwinding, then the window: one records chunk.
    let total: usize = capture.chunks.iter().map(|(_, b)| b.len()).sum();
    let mut pre = Vec::with_capacity(total + synthetic.len());
    let mut window = Vec::with_capacity(total);
    for (h, bytes) in records(capture) {
        if h.ts_ns < window_start_ns {
            pre.extend_from_slice(bytes);
        } else {
            window.extend_from_slice(bytes);
        }
    }
    pre.extend_from_slice(&synthetic);
    pre.extend_from_slice(&window);
    Anchored::Owned(Box::new(Capture {
        header: capture.header.clone(),
        processes: capture.processes.clone(),
        objects: capture.objects.clone(),
        probes: capture.probes.clone(),
        usdt_probes: capture.usdt_probes.clone(),
        kernel_symbols: capture.kernel_symbols.clone(),
        stats: capture.stats.clone(),
        end: capture.end.clone(),
        overhead: capture.overhead.clone(),
        chunks: vec![(0, pre)],
        truncated: None,
        left_out: capture.left_out.clone(),
    }))
}
