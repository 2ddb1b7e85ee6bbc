//! Where each traced thread stood at the end of a capture: the threads the
//! recorder found inside a system call when it stopped, with their user
//! call stacks (`BlockedStack` records), symbolized. A hung thread is
//! almost always blocked in a system call, so this names where a daemon
//! hung with no function probe at all (issues 19 and 20). A process that
//! ended during the recording (stopped or killed while it hung) ends where
//! its threads were when a signal ended their long calls, recorded then,
//! if it ended within [`ENDED_WITHIN_NS`] of that. Threads that were
//! running user code at the end are not here (samples cover them).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tracer_common::{
    decode::{is_uretprobe_trampoline, syscall_name},
    record::{BlockedStack, blocked_flags, lifecycle},
    syscall,
};

use crate::{
    Capture, Event, Symbolizer,
    debuginfo::{AddressKind, SourceLines},
};

/// One frame of a blocked thread's stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedFrame {
    /// The address: the instruction after the `syscall` for the first
    /// frame, a return address for the others.
    pub addr: u64,
    /// The function (the capture's symbol), or `object+0xoffset`, or the
    /// bare address.
    pub function: String,
    /// Whether `function` is a symbol (not an object offset or address).
    pub named: bool,
    /// `file:line` of the call, where debug information was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A thread inside a system call when the recording stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockedThread {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The process's command name.
    pub comm: String,
    /// The system call it was in.
    pub syscall: String,
    /// How long it had been in it at the stop, s.
    pub blocked_s: f64,
    /// It entered the call before the recording started: `blocked_s` is a
    /// lower bound.
    pub at_least: bool,
    /// When it entered the call, s since the capture began (negative or 0
    /// with `at_least`).
    pub since_s: f64,
    /// Its frames, innermost first.
    pub frames: Vec<BlockedFrame>,
    /// The unwinding stopped before the outermost frame (an object without
    /// unwind information, an unreadable stack): callers may be missing.
    pub incomplete: bool,
    /// Not at the recording's stop: a signal ended the call (at `since_s +
    /// blocked_s`), and the process ended right after.
    #[serde(default)]
    pub ended_by_signal: bool,
}

/// How soon after a signal ended a thread's long call its process must
/// have ended for that call to be where the thread stood at its end (a
/// launcher's or watchdog's stop, then kill).
pub const ENDED_WITHIN_NS: u64 = 1_000_000_000;

/// Functions (parts of their names) that wait for another thread to end.
const JOINS: &[&str] = &["pthread_join", "clockjoin", "timedjoin", "thrd_join"];

impl BlockedThread {
    /// The function names of its frames, innermost first (`?` for a frame
    /// in no known symbol).
    pub fn path(&self) -> Vec<&str> {
        self.frames
            .iter()
            .map(|f| if f.named { f.function.as_str() } else { "?" })
            .collect()
    }

    /// Whether its call is one in which threads wait for other processes
    /// (an event loop's wait, a receive, an accept:
    /// [`syscall::waits_for_peer`]; a connect; a parent's wait for
    /// children), or it waits for another thread to end (a join: the C
    /// library's `pthread_join`, `thrd_join` and their internals): a
    /// daemon's main thread joins its workers for its whole life. A thread
    /// blocked long in one is most likely waiting for another that hung,
    /// not hung itself.
    pub fn waits_for_others(&self) -> bool {
        syscall::number(&self.syscall).is_some_and(|nr| {
            syscall::waits_for_peer(nr)
                || matches!(
                    nr,
                    syscall::nr::CONNECT | syscall::nr::WAIT4 | syscall::nr::WAITID
                )
        }) || self
            .frames
            .iter()
            .any(|f| f.named && JOINS.iter().any(|j| f.function.contains(j)))
    }

    /// Where it stood, as the same code stands in every run (names, not
    /// addresses): the system call and its call path. What models learn.
    pub fn place(&self) -> String {
        format!("{} <- {}", self.syscall, self.path().join(" <- "))
    }

    /// "thread 12 of 10 (ring) had been blocked for 7.2 s in nanosleep <-
    /// handle_status (ring.c:80) <- dispatch <- main".
    pub fn sentence(&self) -> String {
        let frames: Vec<String> = self
            .frames
            .iter()
            .map(|f| match &f.source {
                Some(s) => format!("{} ({s})", f.function),
                None => f.function.clone(),
            })
            .collect();
        format!(
            "thread {} of {} ({}) had been blocked for {}{:.2} s in {} <- {}{}{}",
            self.tid,
            self.pid,
            self.comm,
            if self.at_least { "at least " } else { "" },
            self.blocked_s,
            self.syscall,
            frames.join(" <- "),
            if self.incomplete {
                " (its callers could not be unwound)"
            } else {
                ""
            },
            if self.ended_by_signal {
                format!(
                    ", when a signal ended the call at {:.3} s and then its process",
                    self.since_s + self.blocked_s
                )
            } else {
                String::new()
            }
        )
    }
}

/// The threads of `capture` that were inside a system call when its
/// recording stopped, longest blocked first. With `lines`, frames get their
/// `file:line` where the objects' debug information is on this machine.
pub fn blocked_threads(
    capture: &Capture,
    mut lines: Option<&mut SourceLines>,
) -> Vec<BlockedThread> {
    let sym = Symbolizer::new(capture);
    let origin = capture.header.clock.monotonic_ns;
    // The last record of each thread, with the call sites of the traced
    // calls it had not returned from then; when each process ended.
    let mut last: BTreeMap<u32, (Box<BlockedStack>, Vec<u64>)> = BTreeMap::new();
    let mut ended: BTreeMap<u32, u64> = BTreeMap::new();
    let mut open: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for e in capture.events().filter_map(Result::ok) {
        match e {
            Event::Entry { rec, .. } => open.entry(rec.header.tid).or_default().push(rec.call_site),
            Event::Return(r) => {
                open.entry(r.header.tid).or_default().pop();
            }
            Event::Blocked(b)
                if last
                    .get(&b.header.tid)
                    .is_none_or(|(l, _)| l.header.ts_ns <= b.header.ts_ns) =>
            {
                let sites = open.get(&b.header.tid).cloned().unwrap_or_default();
                last.insert(b.header.tid, (b, sites));
            }
            Event::Lifecycle(l) if l.event == lifecycle::EXIT && l.group_dead != 0 => {
                ended.insert(l.header.pid, l.header.ts_ns);
            }
            _ => {}
        }
    }
    let mut out: Vec<BlockedThread> = last
        .into_values()
        .filter(|(b, _)| {
            // A call a signal ended stands for the thread's end only if its
            // process ended right after (else the thread went on).
            b.flags & blocked_flags::ENDED_BY_SIGNAL == 0
                || ended.get(&b.header.pid).is_some_and(|&at| {
                    at >= b.header.ts_ns && at - b.header.ts_ns <= ENDED_WITHIN_NS
                })
        })
        .map(|(b, sites)| thread_of(capture, &sym, lines.as_deref_mut(), origin, &b, sites))
        .collect();
    out.sort_by(|a, b| {
        b.blocked_s
            .total_cmp(&a.blocked_s)
            .then(a.pid.cmp(&b.pid))
            .then(a.tid.cmp(&b.tid))
    });
    out
}

fn thread_of(
    capture: &Capture,
    sym: &Symbolizer<'_>,
    mut lines: Option<&mut SourceLines>,
    origin: u64,
    b: &BlockedStack,
    mut open_sites: Vec<u64>,
) -> BlockedThread {
    let pid = b.header.pid;
    // A traced function's return address on the stack is the kernel's
    // uretprobe trampoline: the real ones are the call sites the entries
    // of the calls not yet returned from recorded, innermost last. Used
    // only where they are as many as the trampolines (a probe detached
    // mid-call leaves an entry that never returns, and the pairing would
    // be off); else the trampolines are left, named as such.
    let trampolines = b
        .frames()
        .iter()
        .filter(|a| is_uretprobe_trampoline(**a))
        .count();
    // A call whose own call site is the trampoline was a tail call: it
    // shares its caller's return address, one trampoline for both.
    open_sites.retain(|s| !is_uretprobe_trampoline(*s));
    if open_sites.len() != trampolines || open_sites.contains(&0) {
        open_sites.clear();
    }
    let frames = b
        .frames()
        .iter()
        .enumerate()
        .map(|(i, &addr)| {
            let addr = if is_uretprobe_trampoline(addr) {
                open_sites.pop().unwrap_or(addr)
            } else {
                addr
            };
            let (kind, at) = if i == 0 || is_uretprobe_trampoline(addr) {
                (AddressKind::Instruction, addr)
            } else {
                (AddressKind::Return, addr.saturating_sub(1))
            };
            let loc = sym.user(pid, at);
            let symbol = loc.as_ref().and_then(|l| l.symbol);
            let function = match (symbol, &loc) {
                (Some(s), _) => s.to_string(),
                (None, Some(l)) => l.to_string(),
                (None, None) => format!("{at:#x}"),
            };
            let source = lines.as_deref_mut().and_then(|lines| {
                lines
                    .frames_at(sym, pid, addr, kind)
                    .first()
                    .and_then(|f| f.file_line())
            });
            BlockedFrame {
                addr,
                function,
                named: symbol.is_some(),
                source,
            }
        })
        .collect();
    let at_least = b.flags & blocked_flags::BEFORE_START != 0;
    BlockedThread {
        pid,
        tid: b.header.tid,
        comm: capture.comm(pid).unwrap_or("?").to_string(),
        syscall: syscall_name(b.nr),
        blocked_s: b.header.ts_ns.saturating_sub(b.since_ns) as f64 / 1e9,
        at_least,
        since_s: (b.since_ns as f64 - origin as f64) / 1e9,
        frames,
        incomplete: b.flags & blocked_flags::INCOMPLETE != 0,
        ended_by_signal: b.flags & blocked_flags::ENDED_BY_SIGNAL != 0,
    }
}

/// Whether the recorder of `capture` looked for blocked threads (its loss
/// counters include the blocked-thread map's, `blocked_full`): then a
/// capture with none had none; an older recorder's says nothing.
pub fn recorded(capture: &Capture) -> bool {
    capture
        .stats
        .as_ref()
        .is_some_and(|s| s.counters.contains_key("blocked_full"))
}

#[cfg(test)]
pub(crate) mod tests {
    use tracer_common::{
        capture::{CaptureHeader, CaptureWriter},
        record::{BlockedStack, FuncEntry, FuncReturn, Header, Pod as _, kind},
    };

    use super::*;

    /// A thread of process `pid` (thread 1) blocked in `syscall` with
    /// `functions` on its stack (innermost first), from `since_s` for
    /// `blocked_s`: for tests of what reads blocked threads.
    pub(crate) fn at(
        pid: u32,
        syscall: &str,
        functions: &[&str],
        since_s: f64,
        blocked_s: f64,
    ) -> BlockedThread {
        BlockedThread {
            pid,
            tid: 1,
            comm: "d".into(),
            syscall: syscall.into(),
            blocked_s,
            at_least: false,
            since_s,
            frames: functions
                .iter()
                .map(|f| BlockedFrame {
                    addr: 0x1000,
                    function: f.to_string(),
                    named: true,
                    source: None,
                })
                .collect(),
            incomplete: false,
            ended_by_signal: false,
        }
    }

    const TRAMPOLINE: u64 = 0x7fff_ffff_e000;

    fn header(ts_ns: u64, kind: u16, size: usize) -> Header {
        Header {
            ts_ns,
            pid: 7,
            tid: 7,
            kind,
            size: size as u16,
            cpu: 0,
        }
    }

    fn entry(ts_ns: u64, call_site: u64) -> Vec<u8> {
        FuncEntry {
            header: header(ts_ns, kind::FUNC_ENTRY, size_of::<FuncEntry>()),
            call_site,
            ..Default::default()
        }
        .as_bytes()
        .to_vec()
    }

    fn ret(ts_ns: u64) -> Vec<u8> {
        FuncReturn {
            header: header(ts_ns, kind::FUNC_RETURN, size_of::<FuncReturn>()),
            ..Default::default()
        }
        .as_bytes()
        .to_vec()
    }

    /// A capture of thread 7: `records`, then its blocked stack `frames`.
    fn capture(records: &[Vec<u8>], frames: &[u64]) -> Capture {
        let mut w = CaptureWriter::new(Vec::new(), &CaptureHeader::default()).expect("writer");
        let mut b = BlockedStack {
            header: header(1_000, kind::BLOCKED_STACK, size_of::<BlockedStack>()),
            since_ns: 10,
            nr: 34,
            depth: frames.len() as u32,
            ..Default::default()
        };
        b.frames[..frames.len()].copy_from_slice(frames);
        let mut all = records.concat();
        all.extend_from_slice(b.as_bytes());
        w.write_records(&all).expect("records");
        Capture::read(w.into_inner().as_slice()).expect("capture")
    }

    /// With function probes, a traced function's return address on the
    /// stack is the uretprobe trampoline: the call sites of the calls not
    /// yet returned from stand in for them, innermost first, a tail call
    /// (whose own site is the trampoline) sharing its caller's; where they
    /// are not as many, the trampolines stay.
    #[test]
    fn trampolines_are_replaced_by_the_open_calls_sites() {
        let open = [
            entry(1, 0x1000), // main_loop, from main
            entry(2, 0x2000), // handle_input, from main_loop
            entry(3, 0x3333), // recv, returned
            ret(4),
            entry(5, 0x3000),     // dispatch, from handle_input
            entry(6, TRAMPOLINE), // handle_token, tail-called by dispatch
        ];
        let frames = [
            0x9000, 0x8000, 0x7000, TRAMPOLINE, TRAMPOLINE, TRAMPOLINE, 0x500,
        ];
        let t = &blocked_threads(&capture(&open, &frames), None)[0];
        let addrs: Vec<u64> = t.frames.iter().map(|f| f.addr).collect();
        assert_eq!(
            addrs,
            [0x9000, 0x8000, 0x7000, 0x3000, 0x2000, 0x1000, 0x500]
        );
        // One open call too many (a probe detached mid-call): left alone.
        let mut extra = open.to_vec();
        extra.push(entry(7, 0x4000));
        let t = &blocked_threads(&capture(&extra, &frames), None)[0];
        assert_eq!(t.frames[3].addr, TRAMPOLINE);
    }

    /// Threads waiting for other processes or threads are told from one
    /// that blocked on its own: event-loop waits, receives, accepts,
    /// connects, waits for children and joins wait; sleeps, pauses and
    /// lock waits outside a join do not.
    #[test]
    fn waiting_for_others_is_told_from_blocking_alone() {
        let thread = |syscall: &str, functions: &[&str]| at(1, syscall, functions, 0.0, 5.0);
        for call in [
            "poll",
            "epoll_wait",
            "select",
            "read",
            "recvfrom",
            "accept4",
            "connect",
            "wait4",
            "waitid",
        ] {
            assert!(thread(call, &["main"]).waits_for_others(), "{call}");
        }
        for call in [
            "nanosleep",
            "clock_nanosleep",
            "pause",
            "futex",
            "write",
            "syscall_999",
        ] {
            assert!(!thread(call, &["main"]).waits_for_others(), "{call}");
        }
        assert!(
            thread(
                "futex",
                &["__futex_abstimed_wait_common", "pthread_join", "main"]
            )
            .waits_for_others()
        );
        assert!(
            !thread(
                "futex",
                &["__lll_lock_wait", "pthread_mutex_lock", "dispatch"]
            )
            .waits_for_others()
        );
    }
}
