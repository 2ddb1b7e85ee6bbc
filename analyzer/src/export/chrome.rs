//! Trace-event JSON
//! ([format](https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU)),
//! which Perfetto's UI (ui.perfetto.dev, offline too) and chrome://tracing
//! open:
//!
//! - a complete slice (`"ph":"X"`) per traced call (functions and Python
//!   functions), nested by time on its thread, with the call site and, when
//!   debug information is present, its source line; calls whose return was
//!   never seen end at the next return below them (`"return_lost"`), calls
//!   still open when recording stopped end there (`"open_at_stop"`);
//! - a slice per recorded system call (socket, wait and I/O calls), with its
//!   descriptor, result and peer address;
//! - instant events (`"ph":"i"`) for forks, execs and exits (on their
//!   thread), TCP retransmissions (global: the kernel sends them on behalf
//!   of a socket, not from the thread that happens to run) and other USDT
//!   probes;
//! - names of processes (`comm[pid]@host`) and threads (`"ph":"M"`).
//!
//! Times are microseconds since the earliest capture's start (its wall-clock
//! time is in `otherData.start_wall_ns`), so captures of several hosts line
//! up as far as their clocks agree. Processes keep their pid unless two
//! captures share one; then the later one gets `pid + 10,000,000 × capture
//! index` (the process name keeps the real pid).

use std::{
    collections::{BTreeMap, HashMap},
    io::Write,
    rc::Rc,
};

use serde::Serialize;
use serde_json::{Value, json};
use tracer_common::record::{SYSCALL_UNFINISHED, lifecycle};

use super::ExportError;
use crate::{
    debuginfo::{AddressKind, SourceLines},
    decode::{Capture, Event, Symbolizer, addr_string, comm_string, syscall_name},
    units::{TraceEntryKind, thread_traces},
};

/// A slice's arguments: typed, so writing millions of slices allocates no
/// JSON values.
#[derive(Serialize)]
#[serde(untagged)]
enum Args {
    /// A traced call.
    Call {
        #[serde(skip_serializing_if = "Option::is_none")]
        call_site: Option<Rc<str>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        source: Option<Rc<str>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        return_lost: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        open_at_stop: Option<bool>,
    },
    /// A system call.
    Syscall {
        #[serde(skip_serializing_if = "Option::is_none")]
        fd: Option<i32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        ret: Option<i64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        unfinished: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        addr: Option<String>,
    },
    /// Anything else.
    Json(Value),
}

impl Args {
    fn is_null(&self) -> bool {
        matches!(self, Self::Json(Value::Null))
    }
}

/// One trace event as written.
#[derive(Serialize)]
struct TraceEvent<'a> {
    name: &'a str,
    cat: &'static str,
    ph: &'static str,
    /// Microseconds since the trace's start.
    ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u64,
    tid: u64,
    /// Scope of an instant event: `g`lobal, `p`rocess, `t`hread.
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    #[serde(skip_serializing_if = "Args::is_null")]
    args: Args,
}

/// A slice waiting to be written, per thread.
struct Slice {
    start: u64,
    end: u64,
    name: Rc<str>,
    cat: &'static str,
    args: Args,
}

/// What was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChromeStats {
    /// Slices of traced calls.
    pub calls: u64,
    /// Slices of system calls.
    pub syscalls: u64,
    /// Instant events.
    pub instants: u64,
    /// Processes.
    pub processes: u64,
    /// Threads.
    pub threads: u64,
}

/// Writes the trace of `captures` to `out`.
pub fn write(
    captures: &[&Capture],
    lines: &mut SourceLines,
    mut out: impl Write,
) -> Result<ChromeStats, ExportError> {
    let base = captures
        .iter()
        .map(|c| c.header.clock.realtime_ns)
        .min()
        .unwrap_or(0);
    let mut stats = ChromeStats::default();
    out.write_all(b"{\"traceEvents\":[\n")?;
    let mut first = true;
    let mut emit = |out: &mut dyn Write, e: &TraceEvent<'_>| -> Result<(), ExportError> {
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        serde_json::to_writer(&mut *out, e)?;
        Ok(())
    };
    let mut used_pids: HashMap<u32, usize> = HashMap::new();
    for (index, capture) in captures.iter().enumerate() {
        let clock = capture.header.clock;
        let us = |t: u64| (clock.to_realtime(t).saturating_sub(base)) as f64 / 1e3;
        let pid_out = |pid: u32, used: &mut HashMap<u32, usize>| -> u64 {
            let owner = *used.entry(pid).or_insert(index);
            if owner == index {
                u64::from(pid)
            } else {
                u64::from(pid) + 10_000_000 * index as u64
            }
        };
        let symbols = Symbolizer::new(capture);
        let stop = super::stacks::capture_end(capture);

        // Slices per thread: traced calls from the call trees, system calls
        // from their records.
        let mut slices: BTreeMap<(u32, u32), Vec<Slice>> = BTreeMap::new();
        let traces = thread_traces(capture);
        for (pid, t) in &traces {
            let mut names: HashMap<u32, Rc<str>> = HashMap::new();
            type Sources = HashMap<u32, (Option<Rc<str>>, Option<Rc<str>>)>;
            let mut sources: Sources = HashMap::new();
            for (tid, entries) in &t.threads {
                let list = slices.entry((*pid, *tid)).or_default();
                let mut open: Vec<(u32, u64)> = Vec::new();
                // Ends every open frame above `keep` at `end`, flagged `why`.
                let mut close = |open: &mut Vec<(u32, u64)>,
                                 keep: usize,
                                 end: u64,
                                 why: Option<&str>,
                                 list: &mut Vec<Slice>| {
                    while open.len() > keep {
                        let Some((node, start)) = open.pop() else {
                            break;
                        };
                        let key = t.nodes.node_key(node);
                        let name = Rc::clone(
                            names
                                .entry(node)
                                .or_insert_with(|| Rc::from(key.callee.as_str())),
                        );
                        let key_id = t.nodes.key_id(node);
                        let (call_site, source) = sources
                            .entry(key_id)
                            .or_insert_with(|| {
                                let source = t.call_sites.get(&key_id).and_then(|site| {
                                    let frames =
                                        lines.frames_at(&symbols, *pid, *site, AddressKind::Return);
                                    frames.first()?.file_line()
                                });
                                (
                                    (!key.site.is_empty()).then(|| Rc::from(key.site.as_str())),
                                    source.map(|s| Rc::from(s.as_str())),
                                )
                            })
                            .clone();
                        list.push(Slice {
                            start,
                            end: end.max(start),
                            name,
                            cat: "call",
                            args: Args::Call {
                                call_site,
                                source,
                                return_lost: (why == Some("return_lost")).then_some(true),
                                open_at_stop: (why == Some("open_at_stop")).then_some(true),
                            },
                        });
                    }
                };
                for e in entries {
                    match e.kind {
                        TraceEntryKind::Call => {
                            let depth = (e.depth as usize).saturating_sub(1);
                            close(&mut open, depth, e.ts_ns, Some("return_lost"), list);
                            open.push((e.node, e.ts_ns));
                        }
                        TraceEntryKind::Return => {
                            // The returning frame is at index `depth`; any
                            // above it never returned as far as the capture saw.
                            let depth = e.depth as usize;
                            close(&mut open, depth + 1, e.ts_ns, Some("return_lost"), list);
                            close(&mut open, depth, e.ts_ns, None, list);
                        }
                        TraceEntryKind::Syscall { .. } => {}
                    }
                }
                close(&mut open, 0, stop, Some("open_at_stop"), list);
                stats.calls += list.len() as u64;
            }
        }
        let mut thread_names: BTreeMap<(u32, u32), String> = BTreeMap::new();
        let mut syscall_names: HashMap<u32, Rc<str>> = HashMap::new();
        let mut instants: Vec<(u64, u32, u32, String, &'static str, &'static str, Value)> =
            Vec::new();
        for event in capture.events().filter_map(Result::ok) {
            let h = *event.header();
            match event {
                Event::Syscall(s) => {
                    let unfinished = s.flags & SYSCALL_UNFINISHED != 0;
                    let name = Rc::clone(
                        syscall_names
                            .entry(s.nr)
                            .or_insert_with(|| Rc::from(syscall_name(s.nr))),
                    );
                    slices.entry((h.pid, h.tid)).or_default().push(Slice {
                        start: s.enter_ns.min(h.ts_ns),
                        end: h.ts_ns,
                        name,
                        cat: "syscall",
                        args: Args::Syscall {
                            fd: (s.fd >= 0).then_some(s.fd),
                            ret: (!unfinished).then_some(s.ret),
                            unfinished: unfinished.then_some(true),
                            addr: addr_string(&s.addr),
                        },
                    });
                    stats.syscalls += 1;
                }
                Event::Sample(s) => {
                    thread_names
                        .entry((h.pid, h.tid))
                        .or_insert_with(|| comm_string(&s.comm));
                }
                Event::Lifecycle(l) => {
                    let comm = comm_string(&l.comm);
                    let (name, scope, args) = match l.event {
                        lifecycle::FORK => (
                            format!("fork {}", l.child_tid),
                            "t",
                            json!({ "child": l.child_tid }),
                        ),
                        lifecycle::EXEC => (format!("exec {comm}"), "p", json!({ "comm": comm })),
                        _ if l.group_dead != 0 => {
                            ("process exit".into(), "p", json!({ "comm": comm }))
                        }
                        _ => ("thread exit".into(), "t", json!({ "comm": comm })),
                    };
                    thread_names.entry((h.pid, h.tid)).or_insert(comm);
                    instants.push((h.ts_ns, h.pid, h.tid, name, "lifecycle", scope, args));
                }
                Event::TcpRetransmit(r) => {
                    let addr = |a: &[u8; 16], port: u16| {
                        addr_string(&tracer_common::record::SockAddr {
                            family: r.family,
                            port_be: port.to_be(),
                            _pad: 0,
                            addr: *a,
                        })
                        .unwrap_or_else(|| "?".into())
                    };
                    let (local, remote) = (addr(&r.saddr, r.sport), addr(&r.daddr, r.dport));
                    instants.push((
                        h.ts_ns,
                        h.pid,
                        h.tid,
                        format!("tcp retransmit {local} -> {remote}"),
                        "network",
                        "g",
                        json!({ "local": local, "remote": remote, "state": r.state }),
                    ));
                }
                Event::Usdt(u) => {
                    let probe = capture.usdt_probe(u.probe_id);
                    // Python function probes are slices already.
                    if probe
                        .is_some_and(|p| p.provider == "python" && p.name.starts_with("function__"))
                    {
                        continue;
                    }
                    let n = (u.nargs as usize).min(u.args.len());
                    instants.push((
                        h.ts_ns,
                        h.pid,
                        h.tid,
                        capture.usdt_name(u.probe_id),
                        "usdt",
                        "t",
                        json!({ "args": &u.args[..n] }),
                    ));
                }
                _ => {}
            }
        }

        // Names first, so viewers label tracks as they create them. Global
        // instants (retransmissions) name no process: the task they came
        // from is whichever the softirq interrupted.
        let local = || instants.iter().filter(|i| i.5 != "g");
        let mut pids: Vec<u32> = slices.keys().map(|(p, _)| *p).collect();
        pids.extend(local().map(|i| i.1));
        pids.sort_unstable();
        pids.dedup();
        for pid in &pids {
            // A process gone before its snapshot: its threads' names.
            let comm = capture
                .comm(*pid)
                .or_else(|| thread_names.get(&(*pid, *pid)).map(String::as_str))
                .unwrap_or("?");
            let name = format!("{comm}[{pid}]@{}", capture.header.host);
            emit(
                &mut out,
                &TraceEvent {
                    name: "process_name",
                    cat: "__metadata",
                    ph: "M",
                    ts: 0.0,
                    dur: None,
                    pid: pid_out(*pid, &mut used_pids),
                    tid: 0,
                    s: None,
                    args: Args::Json(json!({ "name": name })),
                },
            )?;
            stats.processes += 1;
        }
        let mut threads: Vec<(u32, u32)> = slices.keys().copied().collect();
        threads.extend(local().map(|i| (i.1, i.2)));
        threads.sort_unstable();
        threads.dedup();
        for (pid, tid) in &threads {
            let name = match thread_names.get(&(*pid, *tid)) {
                Some(c) => format!("{c} [{tid}]"),
                None => format!("[{tid}]"),
            };
            emit(
                &mut out,
                &TraceEvent {
                    name: "thread_name",
                    cat: "__metadata",
                    ph: "M",
                    ts: 0.0,
                    dur: None,
                    pid: pid_out(*pid, &mut used_pids),
                    tid: u64::from(*tid),
                    s: None,
                    args: Args::Json(json!({ "name": name })),
                },
            )?;
            stats.threads += 1;
        }
        for ((pid, tid), mut list) in slices {
            // Parents before children: by start, longer first.
            list.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
            let pid = pid_out(pid, &mut used_pids);
            for s in list {
                emit(
                    &mut out,
                    &TraceEvent {
                        name: &s.name,
                        cat: s.cat,
                        ph: "X",
                        ts: us(s.start),
                        dur: Some((s.end - s.start) as f64 / 1e3),
                        pid,
                        tid: u64::from(tid),
                        s: None,
                        args: s.args,
                    },
                )?;
            }
        }
        instants.sort_by_key(|i| i.0);
        for (t, pid, tid, name, cat, scope, args) in instants {
            emit(
                &mut out,
                &TraceEvent {
                    name: &name,
                    cat,
                    ph: "i",
                    ts: us(t),
                    dur: None,
                    pid: pid_out(pid, &mut used_pids),
                    tid: u64::from(tid),
                    s: Some(scope),
                    args: Args::Json(args),
                },
            )?;
            stats.instants += 1;
        }
    }
    let other = json!({
        "tool": "eftrace analyzer export --format chrome-trace",
        "start_wall_ns": base,
        "captures": captures.iter().map(|c| c.header.host.clone()).collect::<Vec<_>>(),
    });
    write!(
        out,
        "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{other}}}\n"
    )?;
    out.flush()?;
    Ok(stats)
}

/// What [`check`] found in a valid trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checked {
    /// Complete events.
    pub slices: u64,
    /// Instant events.
    pub instants: u64,
    /// Threads with slices.
    pub threads: u64,
}

/// Checks a trace-event document against the format's rules that viewers
/// depend on: a `traceEvents` array; each event with a name, a phase, a
/// pid, a tid and a non-negative time; complete events (`X`) with a
/// non-negative duration, on tracks named first (`M`), properly nested on
/// their thread in file order (a slice lies inside every slice still open
/// when it starts); instant events (`i`) with a scope. The first violation
/// is the error.
pub fn check(doc: &Value) -> Result<Checked, String> {
    let events = doc["traceEvents"]
        .as_array()
        .ok_or("no traceEvents array")?;
    let mut checked = Checked::default();
    let mut named: std::collections::HashSet<(u64, u64)> = Default::default();
    let mut open: HashMap<(u64, u64), Vec<(f64, f64)>> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let bad = |what: &str| format!("event {i}: {what}: {e}");
        let ph = e["ph"].as_str().ok_or_else(|| bad("no phase"))?;
        let pid = e["pid"].as_u64().ok_or_else(|| bad("no pid"))?;
        let tid = e["tid"].as_u64().ok_or_else(|| bad("no tid"))?;
        if !e["name"].is_string() {
            return Err(bad("no name"));
        }
        let ts = e["ts"].as_f64().ok_or_else(|| bad("no ts"))?;
        if ts < 0.0 {
            return Err(bad("negative ts"));
        }
        match ph {
            "M" => {
                if !e["args"]["name"].is_string() {
                    return Err(bad("metadata without a name"));
                }
                named.insert((pid, if e["name"] == "process_name" { 0 } else { tid }));
            }
            "X" => {
                let dur = e["dur"].as_f64().ok_or_else(|| bad("no dur"))?;
                if dur < 0.0 {
                    return Err(bad("negative dur"));
                }
                if !named.contains(&(pid, 0)) || !named.contains(&(pid, tid)) {
                    return Err(bad("slice on an unnamed process or thread"));
                }
                let stack = open.entry((pid, tid)).or_default();
                while stack.last().is_some_and(|o| o.1 <= ts) {
                    stack.pop();
                }
                // A microsecond's thousandth of slack: times print with 3 decimals.
                if let Some(parent) = stack.last()
                    && (ts < parent.0 || ts + dur > parent.1 + 1e-3)
                {
                    return Err(bad(&format!("overlaps the open slice {parent:?}")));
                }
                stack.push((ts, ts + dur));
                checked.slices += 1;
            }
            "i" => {
                if !matches!(e["s"].as_str(), Some("g" | "p" | "t")) {
                    return Err(bad("instant without a scope"));
                }
                checked.instants += 1;
            }
            other => return Err(bad(&format!("unexpected phase {other}"))),
        }
    }
    checked.threads = open.len() as u64;
    Ok(checked)
}
