//! Events as text lines or JSON lines, and a capture summary.

use std::{
    cell::RefCell,
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
};

use crate::{
    kernel::{NET_DEV_COUNTERS, NET_SNMP_COUNTERS, TcpRetransmitSock, block_op, file_class},
    record::{ExitStatus, SYSCALL_UNFINISHED, blocked_flags, lifecycle},
    syscall,
};
use serde::Serialize;
use serde_json::{Value, json};

use super::{
    Capture, Event, Symbolizer, addr_string, is_uretprobe_trampoline, syscall_name,
    types::{comm_string, dev_string, nul_padded},
};

/// Renders the events of one capture.
pub struct Formatter<'a> {
    capture: &'a Capture,
    symbolizer: Symbolizer<'a>,
    start_ns: u64,
    /// Text of USDT string arguments by (pid, pointer), as last sent before
    /// the event being formatted (the tracer re-sends a pointer whose text
    /// changed).
    strings: RefCell<HashMap<(u32, u64), String>>,
    /// Device names, as the capture named them before the event.
    devices: RefCell<HashMap<u32, String>>,
}

impl<'a> Formatter<'a> {
    /// A formatter for `capture`; times are shown relative to its start.
    /// Format the events in capture order: USDT string arguments resolve to
    /// the text sent before them.
    pub fn new(capture: &'a Capture) -> Self {
        Self {
            capture,
            symbolizer: Symbolizer::new(capture),
            start_ns: capture.header.clock.monotonic_ns,
            strings: RefCell::default(),
            devices: RefCell::default(),
        }
    }

    /// Keeps the text of a USDT string record for the hits after it, and
    /// device names for the records that mention them.
    fn learn(&self, event: &Event) {
        if let Some((pid, ptr, text)) = event.usdt_text() {
            self.strings.borrow_mut().insert((pid, ptr), text);
        }
        if let Event::DeviceName(d) = event {
            self.devices.borrow_mut().insert(d.dev, nul_padded(&d.name));
        }
    }

    /// `loop3 (7:3)`, or `7:3` for a device not named yet, or `-` for none.
    fn device(&self, dev: u32) -> String {
        if dev == 0 {
            return "-".into();
        }
        match self.devices.borrow().get(&dev) {
            Some(name) => format!("{name} ({})", dev_string(dev)),
            None => dev_string(dev),
        }
    }

    /// A USDT argument: its text when it is a string argument, else the number.
    fn usdt_arg(&self, pid: u32, probe_id: u32, index: usize, value: u64) -> Value {
        let is_string = self
            .capture
            .usdt_probe(probe_id)
            .is_some_and(|p| p.string_args.contains(&(index as u32)));
        match self.strings.borrow().get(&(pid, value)) {
            Some(text) if is_string => json!(text),
            _ => json!(value as i64),
        }
    }

    fn rel(&self, ts: u64) -> f64 {
        (ts as i128 - self.start_ns as i128) as f64 / 1e9
    }

    fn user(&self, pid: u32, addr: u64) -> String {
        match self.symbolizer.user(pid, addr) {
            Some(loc) => loc.to_string(),
            None => format!("{addr:#x}"),
        }
    }

    fn kernel(&self, addr: u64) -> String {
        match self.symbolizer.kernel(addr) {
            Some(loc) => loc.to_string(),
            None => format!("{addr:#x}"),
        }
    }

    /// One line of text for `event`.
    pub fn text(&self, event: &Event) -> String {
        self.learn(event);
        let h = event.header();
        let mut line = format!(
            "{:>14.6} {:>7}/{:<7} {:<8} ",
            self.rel(h.ts_ns),
            h.pid,
            h.tid,
            event.kind_name()
        );
        match event {
            Event::Entry {
                rec, args, stack, ..
            } => {
                let _ = write!(
                    line,
                    "{} from {}",
                    self.capture.function_name(rec.func_id),
                    self.user(h.pid, rec.call_site)
                );
                if let Some(a) = args {
                    let _ = write!(
                        line,
                        " args=({:#x}, {:#x}, {:#x}, {:#x}, {:#x}, {:#x}",
                        a[0], a[1], a[2], a[3], a[4], a[5]
                    );
                    for w in stack.iter().flatten() {
                        let _ = write!(line, ", {w:#x}");
                    }
                    line.push(')');
                }
            }
            Event::Return(r) => {
                let _ = write!(
                    line,
                    "{} = {} ({:#x})",
                    self.capture.function_name(r.func_id),
                    r.ret as i64,
                    r.ret
                );
            }
            Event::Syscall(s) => {
                let _ = write!(line, "{}(", syscall_name(s.nr));
                if s.fd >= 0 {
                    let _ = write!(line, "fd={}", s.fd);
                }
                if let Some(addr) = addr_string(&s.addr) {
                    let _ = write!(line, "{}{addr}", if s.fd >= 0 { ", " } else { "" });
                }
                if s.conn_port != 0 {
                    let _ = write!(
                        line,
                        ", {} port {}",
                        if s.nr == syscall::nr::CONNECT {
                            "local"
                        } else {
                            "peer"
                        },
                        s.conn_port
                    );
                }
                if s.flags & SYSCALL_UNFINISHED != 0 {
                    let _ = write!(
                        line,
                        ") unfinished, blocked for {:.6} s",
                        (h.ts_ns.saturating_sub(s.enter_ns)) as f64 / 1e9
                    );
                } else {
                    let _ = write!(
                        line,
                        ") = {} [{:.1} us]",
                        s.ret,
                        (h.ts_ns.saturating_sub(s.enter_ns)) as f64 / 1e3
                    );
                }
            }
            Event::Sample(s) => {
                let _ = write!(
                    line,
                    "{} user={}",
                    comm_string(&s.comm),
                    if s.user_ip != 0 {
                        self.user(h.pid, s.user_ip)
                    } else {
                        "-".into()
                    }
                );
                if s.kernel_ip != 0 {
                    let _ = write!(line, " kernel={}", self.kernel(s.kernel_ip));
                }
            }
            Event::Lifecycle(l) => {
                let _ = match l.event {
                    lifecycle::FORK => write!(line, "child {}", l.child_tid),
                    lifecycle::EXEC => write!(line, "{}", comm_string(&l.comm)),
                    _ => write!(
                        line,
                        "{}{}",
                        comm_string(&l.comm),
                        match (l.group_dead != 0, l.exit_status()) {
                            (true, Some(status)) =>
                                format!(" (process ended: {})", status.describe()),
                            (true, None) => " (process ended)".to_string(),
                            (false, _) => String::new(),
                        }
                    ),
                };
            }
            Event::TcpRetransmit(t) => {
                let _ = write!(
                    line,
                    "{} -> {} state {}",
                    tcp_addr(t.family, &t.saddr, t.sport),
                    tcp_addr(t.family, &t.daddr, t.dport),
                    t.state
                );
                if t.identity().is_some() {
                    let _ = write!(
                        line,
                        " seq {} (retransmission {} of the socket, netns {}{}{})",
                        t.seq,
                        t.total_retrans,
                        t.netns,
                        if t.owner != 0 {
                            format!(", owner {}", t.owner)
                        } else {
                            String::new()
                        },
                        if t.err != 0 {
                            format!(", failed: {}", t.err)
                        } else {
                            String::new()
                        }
                    );
                }
            }
            Event::FileIo(f) => {
                let _ = write!(
                    line,
                    "{} on {}: {} calls{}, {} bytes, {:.1} us/call over {:.3} s",
                    syscall_name(f.nr),
                    self.device(f.dev),
                    f.calls,
                    if f.errors > 0 {
                        format!(" ({} failed)", f.errors)
                    } else {
                        String::new()
                    },
                    f.bytes,
                    per(f.time_ns, f.calls) / 1e3,
                    h.ts_ns.saturating_sub(f.since_ns) as f64 / 1e9
                );
            }
            Event::BlockIo(b) => {
                let _ = write!(
                    line,
                    "{} {} by {}: {} requests{}, {} bytes, {:.3} ms/request ({:.3} ms in the device) over {:.3} s",
                    self.device(b.dev),
                    block_op::name(b.op),
                    if h.pid == 0 {
                        "a kernel thread".to_string()
                    } else {
                        format!("pid {}", h.pid)
                    },
                    b.requests,
                    if b.errors > 0 {
                        format!(" ({} failed)", b.errors)
                    } else {
                        String::new()
                    },
                    b.bytes,
                    per(b.queue_ns, b.requests) / 1e6,
                    per(b.service_ns, b.requests) / 1e6,
                    h.ts_ns.saturating_sub(b.since_ns) as f64 / 1e9
                );
            }
            Event::NetDev(n) => {
                let c = &n.counters;
                let _ = write!(
                    line,
                    "netns {} {}: rx {} bytes {} packets ({} errors, {} dropped), tx {} bytes {} packets ({} errors, {} dropped)",
                    n.netns,
                    nul_padded(&n.name),
                    c[0],
                    c[1],
                    c[2],
                    c[3],
                    c[4],
                    c[5],
                    c[6],
                    c[7]
                );
            }
            Event::NetSnmp(n) => {
                let shown: Vec<String> = NET_SNMP_COUNTERS
                    .iter()
                    .zip(n.values)
                    .enumerate()
                    .filter(|(i, _)| n.present & (1 << i) != 0)
                    .map(|(_, ((proto, name), v))| format!("{proto}.{name}={v}"))
                    .collect();
                let _ = write!(line, "netns {}: {}", n.netns, shown.join(" "));
            }
            Event::NetAddr(a) => {
                let _ = write!(
                    line,
                    "netns {} has address {}",
                    a.netns,
                    super::ip_addr(a.family, &a.addr).map_or("?".into(), |ip| ip.to_string())
                );
            }
            Event::DeviceName(d) => {
                let mount = nul_padded(&d.mount);
                let _ = write!(
                    line,
                    "{} is {}{}",
                    dev_string(d.dev),
                    nul_padded(&d.name),
                    if mount.is_empty() {
                        String::new()
                    } else {
                        format!(", mounted at {mount}")
                    }
                );
            }
            Event::Usdt(u) => {
                let n = (u.nargs as usize).min(u.args.len());
                let args: Vec<String> = u.args[..n]
                    .iter()
                    .enumerate()
                    .map(|(i, a)| self.usdt_arg(h.pid, u.probe_id, i, *a).to_string())
                    .collect();
                let _ = write!(
                    line,
                    "{}({})",
                    self.capture.usdt_name(u.probe_id),
                    args.join(", ")
                );
            }
            Event::UsdtString(_) => {
                if let Some((_, ptr, text)) = event.usdt_text() {
                    let _ = write!(line, "{ptr:#x} = {text:?}");
                }
            }
            Event::CpuTimes(c) => {
                let _ = write!(
                    line,
                    "run {:.3} s, waiting {:.3} s, {} slices, {} threads",
                    c.run_ns as f64 / 1e9,
                    c.wait_ns as f64 / 1e9,
                    c.slices,
                    c.threads
                );
            }
            Event::Enroll(e) => {
                let _ = write!(
                    line,
                    "--exe target {} entered at {:#x}",
                    e.target, e.entry_ip
                );
            }
            Event::Blocked(b) => {
                let _ = write!(
                    line,
                    "blocked for {}{:.3} s in {}",
                    if b.flags & blocked_flags::BEFORE_START != 0 {
                        "at least "
                    } else {
                        ""
                    },
                    h.ts_ns.saturating_sub(b.since_ns) as f64 / 1e9,
                    syscall_name(b.nr)
                );
                if b.flags & blocked_flags::ENDED_BY_SIGNAL != 0 {
                    line.push_str(", until a signal ended the call");
                }
                // Frame 0 is inside the system call's wrapper; the rest are
                // return addresses: place them at their call instruction.
                for (i, addr) in b.frames().iter().enumerate() {
                    let at = if i == 0 || is_uretprobe_trampoline(*addr) {
                        *addr
                    } else {
                        addr.saturating_sub(1)
                    };
                    let _ = write!(line, " <- {}", self.user(h.pid, at));
                }
            }
            Event::Unknown(h) => {
                let _ = write!(line, "kind {} ({} bytes)", h.kind, h.size);
            }
        }
        line
    }

    /// `event` as a JSON object.
    pub fn json(&self, event: &Event) -> Value {
        self.learn(event);
        let h = event.header();
        let mut v = json!({
            "t": self.rel(h.ts_ns),
            "ts_ns": h.ts_ns,
            "pid": h.pid,
            "tid": h.tid,
            "cpu": h.cpu,
            "kind": event.kind_name(),
        });
        let obj = v.as_object_mut().expect("constructed as an object");
        match event {
            Event::Entry {
                rec, args, stack, ..
            } => {
                obj.insert(
                    "function".into(),
                    json!(self.capture.function_name(rec.func_id)),
                );
                obj.insert("func_id".into(), json!(rec.func_id));
                obj.insert("ip".into(), json!(rec.ip));
                obj.insert("call_site".into(), json!(rec.call_site));
                obj.insert(
                    "call_site_symbol".into(),
                    json!(self.user(h.pid, rec.call_site)),
                );
                if let Some(a) = args {
                    let all: Vec<u64> = a.iter().chain(stack.iter().flatten()).copied().collect();
                    obj.insert("args".into(), json!(all));
                }
            }
            Event::Return(r) => {
                obj.insert(
                    "function".into(),
                    json!(self.capture.function_name(r.func_id)),
                );
                obj.insert("func_id".into(), json!(r.func_id));
                obj.insert("ret".into(), json!(r.ret as i64));
            }
            Event::Syscall(s) => {
                obj.insert("syscall".into(), json!(syscall_name(s.nr)));
                obj.insert("fd".into(), json!(s.fd));
                obj.insert("ret".into(), json!(s.ret));
                obj.insert("arg".into(), json!(s.arg));
                obj.insert("enter_ns".into(), json!(s.enter_ns));
                obj.insert(
                    "unfinished".into(),
                    json!(s.flags & SYSCALL_UNFINISHED != 0),
                );
                if let Some(a) = addr_string(&s.addr) {
                    obj.insert("addr".into(), json!(a));
                }
                if s.conn_port != 0 {
                    obj.insert("conn_port".into(), json!(s.conn_port));
                }
            }
            Event::Sample(s) => {
                obj.insert("comm".into(), json!(comm_string(&s.comm)));
                obj.insert("user_ip".into(), json!(s.user_ip));
                if s.user_ip != 0 {
                    obj.insert("user_symbol".into(), json!(self.user(h.pid, s.user_ip)));
                }
                obj.insert("kernel_ip".into(), json!(s.kernel_ip));
                if s.kernel_ip != 0 {
                    obj.insert("kernel_symbol".into(), json!(self.kernel(s.kernel_ip)));
                }
            }
            Event::Lifecycle(l) => {
                obj.insert("comm".into(), json!(comm_string(&l.comm)));
                if l.event == lifecycle::FORK {
                    obj.insert("child_tid".into(), json!(l.child_tid));
                }
                if l.event == lifecycle::EXIT {
                    obj.insert("process_ended".into(), json!(l.group_dead != 0));
                    if let Some(status) = l.exit_status() {
                        let (code, signal, core) = match status {
                            ExitStatus::Exited(code) => (Some(code), None, false),
                            ExitStatus::Killed { signal, core } => (None, Some(signal), core),
                        };
                        obj.insert("exit_status".into(), json!(code));
                        obj.insert("signal".into(), json!(signal));
                        obj.insert("core_dumped".into(), json!(core));
                    }
                }
            }
            Event::TcpRetransmit(t) => {
                obj.insert("local".into(), json!(tcp_addr(t.family, &t.saddr, t.sport)));
                obj.insert(
                    "remote".into(),
                    json!(tcp_addr(t.family, &t.daddr, t.dport)),
                );
                obj.insert("state".into(), json!(t.state));
                if t.identity().is_some() {
                    let TcpRetransmitSock {
                        base: _,
                        sk,
                        skb,
                        owner,
                        seq,
                        total_retrans,
                        err,
                        netns,
                        _pad: _,
                    } = *t;
                    obj.insert("sk".into(), json!(sk));
                    obj.insert("skb".into(), json!(skb));
                    obj.insert("owner".into(), json!(owner));
                    obj.insert("seq".into(), json!(seq));
                    obj.insert("total_retrans".into(), json!(total_retrans));
                    obj.insert("err".into(), json!(err));
                    obj.insert("netns".into(), json!(netns));
                }
            }
            Event::FileIo(f) => {
                obj.insert("syscall".into(), json!(syscall_name(f.nr)));
                obj.insert("class".into(), json!(file_class_of(f.nr)));
                obj.insert("dev".into(), json!(dev_string(f.dev)));
                obj.insert("since_ns".into(), json!(f.since_ns));
                obj.insert("calls".into(), json!(f.calls));
                obj.insert("errors".into(), json!(f.errors));
                obj.insert("bytes".into(), json!(f.bytes));
                obj.insert("time_ns".into(), json!(f.time_ns));
                obj.insert("latency_hist".into(), json!(f.hist));
            }
            Event::BlockIo(b) => {
                obj.insert("dev".into(), json!(dev_string(b.dev)));
                obj.insert("op".into(), json!(block_op::name(b.op)));
                obj.insert("since_ns".into(), json!(b.since_ns));
                obj.insert("requests".into(), json!(b.requests));
                obj.insert("errors".into(), json!(b.errors));
                obj.insert("bytes".into(), json!(b.bytes));
                obj.insert("queue_ns".into(), json!(b.queue_ns));
                obj.insert("service_ns".into(), json!(b.service_ns));
                obj.insert("latency_hist".into(), json!(b.hist));
            }
            Event::NetDev(n) => {
                obj.insert("netns".into(), json!(n.netns));
                obj.insert("interface".into(), json!(nul_padded(&n.name)));
                for (name, v) in NET_DEV_COUNTERS.iter().zip(n.counters) {
                    obj.insert((*name).into(), json!(v));
                }
            }
            Event::NetSnmp(n) => {
                obj.insert("netns".into(), json!(n.netns));
                let counters: serde_json::Map<String, Value> = NET_SNMP_COUNTERS
                    .iter()
                    .zip(n.values)
                    .enumerate()
                    .filter(|(i, _)| n.present & (1 << i) != 0)
                    .map(|(_, ((proto, name), v))| (format!("{proto}.{name}"), json!(v)))
                    .collect();
                obj.insert("counters".into(), Value::Object(counters));
            }
            Event::NetAddr(a) => {
                obj.insert("netns".into(), json!(a.netns));
                obj.insert(
                    "addr".into(),
                    json!(super::ip_addr(a.family, &a.addr).map(|ip| ip.to_string())),
                );
            }
            Event::DeviceName(d) => {
                obj.insert("dev".into(), json!(dev_string(d.dev)));
                obj.insert("name".into(), json!(nul_padded(&d.name)));
                obj.insert("mount".into(), json!(nul_padded(&d.mount)));
            }
            Event::Usdt(u) => {
                let n = (u.nargs as usize).min(u.args.len());
                obj.insert("probe".into(), json!(self.capture.usdt_name(u.probe_id)));
                obj.insert("probe_id".into(), json!(u.probe_id));
                let args: Vec<Value> = u.args[..n]
                    .iter()
                    .enumerate()
                    .map(|(i, a)| self.usdt_arg(h.pid, u.probe_id, i, *a))
                    .collect();
                obj.insert("args".into(), json!(args));
                obj.insert("raw_args".into(), json!(&u.args[..n]));
            }
            Event::UsdtString(_) => {
                if let Some((_, ptr, text)) = event.usdt_text() {
                    obj.insert("ptr".into(), json!(ptr));
                    obj.insert("text".into(), json!(text));
                }
            }
            Event::CpuTimes(c) => {
                obj.insert("run_ns".into(), json!(c.run_ns));
                obj.insert("wait_ns".into(), json!(c.wait_ns));
                obj.insert("slices".into(), json!(c.slices));
                obj.insert("threads".into(), json!(c.threads));
                obj.insert("flags".into(), json!(c.flags));
            }
            Event::Enroll(e) => {
                obj.insert("target".into(), json!(e.target));
                obj.insert("entry_ip".into(), json!(e.entry_ip));
            }
            Event::Blocked(b) => {
                obj.insert("since_ns".into(), json!(b.since_ns));
                obj.insert("syscall".into(), json!(syscall_name(b.nr)));
                obj.insert("flags".into(), json!(b.flags));
                obj.insert(
                    "frames".into(),
                    json!(
                        b.frames()
                            .iter()
                            .enumerate()
                            .map(|(i, a)| {
                                let at = if i == 0 || is_uretprobe_trampoline(*a) {
                                    *a
                                } else {
                                    a.saturating_sub(1)
                                };
                                json!({"addr": a, "at": self.user(h.pid, at)})
                            })
                            .collect::<Vec<_>>()
                    ),
                );
            }
            Event::Unknown(h) => {
                obj.insert("record_kind".into(), json!(h.kind));
            }
        }
        v
    }
}

/// `total / n`, 0 when `n` is 0.
fn per(total: u64, n: u64) -> f64 {
    if n == 0 { 0.0 } else { total as f64 / n as f64 }
}

/// The file I/O class name of system call `nr`.
fn file_class_of(nr: u32) -> &'static str {
    file_class::name(syscall::spec(nr).map_or(0, |s| s.file))
}

fn tcp_addr(family: u16, addr: &[u8; 16], port: u16) -> String {
    let sa = crate::record::SockAddr {
        family,
        port_be: port.to_be(),
        _pad: 0,
        addr: *addr,
    };
    addr_string(&sa).unwrap_or_else(|| "?".into())
}

/// Totals of one kind of file or block I/O over a capture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct IoTotals {
    /// Calls (file I/O) or requests (block I/O).
    pub calls: u64,
    /// Of those, failed ones.
    pub errors: u64,
    /// Bytes read or written.
    pub bytes: u64,
    /// Time in them, ns (block: creation to completion).
    pub time_ns: u64,
}

impl IoTotals {
    fn add(&mut self, calls: u64, errors: u64, bytes: u64, time_ns: u64) {
        self.calls += calls;
        self.errors += errors;
        self.bytes += bytes;
        self.time_ns += time_ns;
    }
}

impl std::fmt::Display for IoTotals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ", self.calls)?;
        if self.errors > 0 {
            write!(f, "({} failed) ", self.errors)?;
        }
        write!(
            f,
            "{} B {:.1} us each",
            self.bytes,
            per(self.time_ns, self.calls) / 1e3
        )
    }
}

/// What a capture holds, in numbers.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Host the capture was recorded on.
    pub host: String,
    /// Seconds between the first and the last event.
    pub span_s: f64,
    /// Events by kind.
    pub events: BTreeMap<String, u64>,
    /// Function entries by function name.
    pub calls: BTreeMap<String, u64>,
    /// System calls by name.
    pub syscalls: BTreeMap<String, u64>,
    /// Events by process, keyed "comm[pid]". TCP retransmissions are not
    /// among them (they fire in whatever process the CPU was running; see
    /// `events`).
    pub processes: BTreeMap<String, u64>,
    /// File I/O system calls by class (`read`, `write`, `sync`,
    /// `metadata`, `async`), every traced process together.
    pub file_io: BTreeMap<String, IoTotals>,
    /// Block requests by device and operation (`loop3 (7:3) write`), every
    /// submitter together.
    pub block_io: BTreeMap<String, IoTotals>,
    /// Network interfaces' counters over the capture (last reading minus
    /// first), keyed `netns N IFACE`, in the order of
    /// [`crate::kernel::NET_DEV_COUNTERS`].
    pub interfaces: BTreeMap<String, [u64; 8]>,
    /// eBPF-side counters of events lost (non-zero ones).
    pub losses: BTreeMap<String, u64>,
    /// eBPF-side counters of records kept with a field unknown (non-zero
    /// ones; see [`crate::stats::STAT_INFO`]).
    pub kept: BTreeMap<String, u64>,
    /// The function probes' cost and what the overhead budget dropped
    /// (functions missing on purpose), when the recorder weighed them.
    pub overhead: Option<crate::capture::Overhead>,
    /// Followed processes whose function probes were attached after they
    /// were forked ([`crate::capture::ProcessInfo::probes_from_ns`]), keyed
    /// "comm[pid]": ms from the fork (or, fork unseen, from the process's
    /// first record) to the probes; its calls before were not recorded.
    pub late_probes: BTreeMap<String, f64>,
    /// Whether the recorder closed the file.
    pub complete: bool,
    /// The truncation, when the file ends inside a chunk.
    pub truncated: Option<String>,
    /// Records chunks with a malformed record (each decoded up to it, the
    /// rest skipped; see [`Capture::malformed_chunks`]).
    pub malformed: u64,
}

impl Summary {
    /// Summarizes `capture`.
    pub fn of(capture: &Capture) -> Self {
        let mut s = Summary {
            host: capture.header.host.clone(),
            complete: capture.end.is_some(),
            overhead: capture.overhead.clone(),
            truncated: capture.truncated.as_ref().map(ToString::to_string),
            ..Default::default()
        };
        let (mut first, mut last) = (u64::MAX, 0);
        let mut per_pid: BTreeMap<u32, u64> = BTreeMap::new();
        let mut per_func: BTreeMap<u32, u64> = BTreeMap::new();
        let mut devices: HashMap<u32, String> = HashMap::new();
        let mut block: BTreeMap<(u32, u32), IoTotals> = BTreeMap::new();
        let mut ifaces: BTreeMap<(u64, String), ([u64; 8], [u64; 8])> = BTreeMap::new();
        // Names of sampled processes the capture has no snapshot of
        // (`--sample-all`): the sample carries the thread's name.
        let mut sampled: BTreeMap<u32, String> = BTreeMap::new();
        // Followed processes whose probes came late, and when each was
        // forked (else its first record): looked for only where there are
        // such processes.
        let late: BTreeMap<u32, u64> = capture
            .processes
            .iter()
            .filter_map(|(pid, snaps)| {
                Some((*pid, snaps.iter().filter_map(|p| p.probes_from_ns).min()?))
            })
            .collect();
        let mut born: BTreeMap<u32, u64> = BTreeMap::new();
        for event in capture.events() {
            let Ok(event) = event else {
                s.malformed += 1;
                continue;
            };
            let h = event.header();
            first = first.min(h.ts_ns);
            last = last.max(h.ts_ns);
            if !late.is_empty() {
                let pid = match &event {
                    Event::Lifecycle(l) if l.event == lifecycle::FORK => l.child_tid,
                    _ => h.pid,
                };
                if late.contains_key(&pid) {
                    let t = born.entry(pid).or_insert(h.ts_ns);
                    *t = (*t).min(h.ts_ns);
                }
            }
            *s.events.entry(event.kind_name().to_string()).or_default() += 1;
            match &event {
                // A retransmission fires in softirq or timer context: its pid
                // is whichever process the CPU was running, not an owner.
                Event::TcpRetransmit(_) => {}
                // Records of a device or a network namespace, not of a process.
                Event::BlockIo(_)
                | Event::NetDev(_)
                | Event::NetSnmp(_)
                | Event::NetAddr(_)
                | Event::DeviceName(_) => {}
                Event::Sample(smp) if capture.comm(h.pid).is_none() => {
                    *per_pid.entry(h.pid).or_default() += 1;
                    sampled
                        .entry(h.pid)
                        .or_insert_with(|| comm_string(&smp.comm));
                }
                _ => *per_pid.entry(h.pid).or_default() += 1,
            }
            match &event {
                Event::Entry { rec, .. } => *per_func.entry(rec.func_id).or_default() += 1,
                Event::Syscall(sc) => *s.syscalls.entry(syscall_name(sc.nr)).or_default() += 1,
                Event::FileIo(f) => s
                    .file_io
                    .entry(file_class_of(f.nr).to_string())
                    .or_default()
                    .add(f.calls, f.errors, f.bytes, f.time_ns),
                Event::BlockIo(b) => block
                    .entry((b.dev, b.op))
                    .or_default()
                    .add(b.requests, b.errors, b.bytes, b.queue_ns),
                Event::DeviceName(d) => {
                    devices.insert(d.dev, nul_padded(&d.name));
                }
                Event::NetDev(n) => {
                    let e = ifaces
                        .entry((n.netns, nul_padded(&n.name)))
                        .or_insert((n.counters, n.counters));
                    e.1 = n.counters;
                }
                _ => {}
            }
        }
        s.span_s = if last >= first {
            (last - first) as f64 / 1e9
        } else {
            0.0
        };
        s.calls = per_func
            .into_iter()
            .map(|(id, n)| (capture.function_name(id), n))
            .collect();
        s.block_io = block
            .into_iter()
            .map(|((dev, op), t)| {
                let name = match devices.get(&dev) {
                    Some(n) => format!("{n} ({})", dev_string(dev)),
                    None => dev_string(dev),
                };
                (format!("{name} {}", block_op::name(op)), t)
            })
            .collect();
        s.interfaces = ifaces
            .into_iter()
            .map(|((netns, name), (first, last))| {
                let mut d = [0u64; 8];
                for (o, (a, b)) in d.iter_mut().zip(last.iter().zip(first)) {
                    *o = a.saturating_sub(b);
                }
                (format!("netns {netns} {name}"), d)
            })
            .collect();
        s.processes = per_pid
            .into_iter()
            .map(|(pid, n)| {
                let comm = capture
                    .comm(pid)
                    .or_else(|| sampled.get(&pid).map(String::as_str))
                    .unwrap_or("?");
                (format!("{comm}[{pid}]"), n)
            })
            .collect();
        for (pid, from) in late {
            let comm = capture.comm(pid).unwrap_or("?");
            let since = born.get(&pid).copied().unwrap_or(from);
            s.late_probes.insert(
                format!("{comm}[{pid}]"),
                from.saturating_sub(since) as f64 / 1e6,
            );
        }
        if let Some(stats) = &capture.stats {
            for (k, v) in stats.counters.iter().filter(|(_, v)| **v > 0) {
                let kept =
                    crate::stats::info(k).is_some_and(|i| i.effect == crate::stats::Effect::Kept);
                let into = if kept { &mut s.kept } else { &mut s.losses };
                into.insert(k.clone(), *v);
            }
        }
        s
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let total: u64 = self.events.values().sum();
        writeln!(
            f,
            "capture from {}: {total} events over {:.3} s",
            self.host, self.span_s
        )?;
        let list = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        writeln!(f, "  events:    {}", list(&self.events))?;
        if !self.calls.is_empty() {
            writeln!(f, "  calls:     {}", list(&self.calls))?;
        }
        if !self.syscalls.is_empty() {
            writeln!(f, "  syscalls:  {}", list(&self.syscalls))?;
        }
        writeln!(f, "  processes: {}", list(&self.processes))?;
        let io_list = |m: &BTreeMap<String, IoTotals>| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.file_io.is_empty() {
            writeln!(f, "  file I/O:  {}", io_list(&self.file_io))?;
        }
        if !self.block_io.is_empty() {
            writeln!(f, "  block I/O: {}", io_list(&self.block_io))?;
        }
        if !self.interfaces.is_empty() {
            let shown: Vec<String> = self
                .interfaces
                .iter()
                .map(|(k, c)| {
                    format!(
                        "{k} rx {} B{} tx {} B{}",
                        c[0],
                        if c[2] + c[3] > 0 {
                            format!(" ({} errors, {} dropped)", c[2], c[3])
                        } else {
                            String::new()
                        },
                        c[4],
                        if c[6] + c[7] > 0 {
                            format!(" ({} errors, {} dropped)", c[6], c[7])
                        } else {
                            String::new()
                        }
                    )
                })
                .collect();
            writeln!(f, "  network:   {}", shown.join(", "))?;
        }
        if let Some(o) = &self.overhead {
            for line in o.describe() {
                writeln!(f, "  overhead:  {line}")?;
            }
        }
        if !self.late_probes.is_empty() {
            let shown: Vec<String> = self
                .late_probes
                .iter()
                .map(|(k, ms)| format!("{k} +{ms:.0} ms"))
                .collect();
            writeln!(
                f,
                "  followed:  function probes attached after the fork (calls before not recorded): {}",
                shown.join(", ")
            )?;
        }
        if self.losses.is_empty() {
            writeln!(f, "  losses:    none")?;
        }
        let counters = self.losses.iter().chain(&self.kept);
        for l in crate::stats::summary_lines(counters.map(|(k, v)| (k.as_str(), *v))) {
            writeln!(f, "  {l}")?;
        }
        if let Some(t) = &self.truncated {
            writeln!(
                f,
                "  WARNING:   {t}: the recorder did not finish; everything before it was read"
            )?;
        } else if !self.complete {
            writeln!(
                f,
                "  WARNING:   no end marker: the recorder did not close this capture"
            )?;
        }
        if self.malformed > 0 {
            writeln!(
                f,
                "  WARNING:   {} records chunks hold a malformed record: each was read up to it and the rest skipped",
                self.malformed
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        capture::{CaptureHeader, CaptureWriter, Meta, UsdtProbe},
        record::{Header, Pod as _, USDT_STRING_MAX, UsdtHit, UsdtString, kind},
    };

    use super::*;

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

    fn string(ts: u64, ptr: u64, text: &str) -> Vec<u8> {
        let mut rec = UsdtString {
            header: header(ts, kind::USDT_STRING, size_of::<UsdtString>()),
            ptr,
            len: text.len() as u32,
            ..Default::default()
        };
        rec.text[..text.len().min(USDT_STRING_MAX)].copy_from_slice(text.as_bytes());
        rec.as_bytes().to_vec()
    }

    /// The summary names processes by their snapshot, or by their samples'
    /// thread name; retransmissions (kernel context, any pid) belong to no
    /// process; samples without a user frame are kept, not lost.
    #[test]
    fn summary_lists_processes_not_retransmission_contexts() {
        use crate::{
            capture::{ProcessInfo, Stats},
            record::{Sample, Syscall, TcpRetransmit},
        };
        let mut w = CaptureWriter::new(Vec::new(), &CaptureHeader::default()).expect("writer");
        w.write_meta(&Meta::Process(ProcessInfo {
            pid: 7,
            traced: true,
            comm: "server".into(),
            ..Default::default()
        }))
        .expect("meta");
        let at = |h: Header, pid: u32| Header { pid, tid: pid, ..h };
        let call = Syscall {
            header: header(1, kind::SYSCALL, size_of::<Syscall>()),
            ..Default::default()
        };
        let retransmit = TcpRetransmit {
            header: at(
                header(2, kind::TCP_RETRANSMIT, size_of::<TcpRetransmit>()),
                4242,
            ),
            ..Default::default()
        };
        let mut comm = [0u8; 16];
        comm[..3].copy_from_slice(b"hog");
        let sample = Sample {
            header: at(header(3, kind::SAMPLE, size_of::<Sample>()), 99),
            user_ip: 0x1000,
            kernel_ip: 0,
            comm,
        };
        let bytes = [
            call.as_bytes().to_vec(),
            retransmit.as_bytes().to_vec(),
            sample.as_bytes().to_vec(),
        ]
        .concat();
        w.write_records(&bytes).expect("records");
        w.write_meta(&Meta::Stats(Stats {
            counters: [
                ("user_ip_unreadable".to_string(), 5),
                ("ring_full".to_string(), 0),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        }))
        .expect("stats");
        let cap = Capture::read(w.into_inner().as_slice()).expect("capture");
        let s = Summary::of(&cap);
        let procs: Vec<&str> = s.processes.keys().map(String::as_str).collect();
        assert_eq!(procs, ["hog[99]", "server[7]"]);
        assert_eq!(s.events.get("tcp_retransmit"), Some(&1));
        assert!(s.losses.is_empty(), "{:?}", s.losses);
        assert_eq!(s.kept.get("user_ip_unreadable"), Some(&5));
        let text = s.to_string();
        assert!(text.contains("losses:    none"), "{text}");
        assert!(
            text.contains("kept: user_ip_unreadable 5: CPU samples"),
            "{text}"
        );
        assert!(!text.contains("ring-size"), "{text}");
        assert!(!text.contains("?["), "{text}");
    }

    /// USDT hits decode as `Event::Usdt`, their string arguments resolve to
    /// the text sent before them, and the probe table names them.
    #[test]
    fn usdt_hits_render_with_their_strings() {
        let mut w = CaptureWriter::new(Vec::new(), &CaptureHeader::default()).expect("writer");
        w.write_meta(&Meta::UsdtProbes {
            probes: vec![UsdtProbe {
                probe_id: 0,
                object: "/usr/bin/python3.11".into(),
                provider: "python".into(),
                name: "function__entry".into(),
                args: "8@%rbp 8@%r12 -4@%eax".into(),
                string_args: vec![0, 1],
                ..Default::default()
            }],
        })
        .expect("meta");
        let hit = UsdtHit {
            header: header(3, kind::USDT, size_of::<UsdtHit>()),
            probe_id: 0,
            nargs: 3,
            args: [0x1000, 0x2000, (-1i64) as u64, 0, 0, 0],
        };
        // The function-name pointer is then reused for another text (the
        // tracer re-sends it): the second hit shows the new text.
        let mut hit2 = hit;
        hit2.header.ts_ns = 5;
        let bytes = [
            string(1, 0x1000, "/srv/mpd.py"),
            string(2, 0x2000, "handle_msg"),
            hit.as_bytes().to_vec(),
            string(4, 0x2000, "handle_close"),
            hit2.as_bytes().to_vec(),
        ]
        .concat();
        w.write_records(&bytes).expect("records");
        let cap = Capture::read(w.into_inner().as_slice()).expect("capture");
        let events: Vec<Event> = cap.events().collect::<Result<_, _>>().expect("decode");
        assert_eq!(events.len(), 5);
        assert_eq!(
            events[0].usdt_text(),
            Some((7, 0x1000, "/srv/mpd.py".to_string()))
        );
        assert_eq!(events[2], Event::Usdt(hit));
        assert_eq!(cap.usdt_name(0), "python:function__entry");
        assert_eq!(cap.usdt_name(5), "usdt#5");
        let fmt = Formatter::new(&cap);
        // In capture order, as `analyzer events` formats them.
        fmt.text(&events[0]);
        fmt.text(&events[1]);
        assert!(
            fmt.text(&events[2])
                .ends_with(r#"python:function__entry("/srv/mpd.py", "handle_msg", -1)"#),
            "{}",
            fmt.text(&events[2])
        );
        let json = fmt.json(&events[2]);
        assert_eq!(json["args"], json!(["/srv/mpd.py", "handle_msg", -1]));
        assert_eq!(json["probe"], "python:function__entry");
        fmt.json(&events[3]);
        assert_eq!(
            fmt.json(&events[4])["args"],
            json!(["/srv/mpd.py", "handle_close", -1])
        );
    }
}
