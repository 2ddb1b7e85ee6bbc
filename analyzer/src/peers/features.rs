//! Feature extraction: captures → servers → per-server time series of every
//! component of every metric, in bins aligned on wall-clock time; then the
//! per-window feature vectors with the paper's dimensionality reduction.
//!
//! Attribution rules (why they are what they are):
//! - Function entries/returns and socket system calls come from the capture
//!   that defines the server (the tracer records them for traced processes
//!   only).
//! - IP samples: when a host has a capture recorded with `--sample-all`, the
//!   first such capture is that host's only sample source (several tracers on
//!   one host each sample the whole node; using one keeps the rate
//!   right). A sample of a server's process belongs to that server; a sample
//!   of any other process (a hog, a kernel thread) belongs to the node, so it
//!   is added to every server recorded on that host. When all servers share
//!   one host, node samples are identical on all of them and cancel in every
//!   peer distance: a rogue process is then only visible through what it
//!   does to the servers themselves. Without `--sample-all`, each capture's
//!   samples of its own servers are used. Idle-task samples (pid 0) are not
//!   counted, as the paper's unhalted-cycle samples never saw idle time.
//! - TCP retransmissions are attributed to the server whose socket it is:
//!   the traced process the recorder saw use the socket last (its owner,
//!   recorded in the kernel), else the server bound to its local address
//!   or that accepted its connection; and to the server its remote address
//!   is (a peer's or an untraced client's retransmission towards it). A
//!   wildcard bind shared by servers in several network namespaces is told
//!   apart by the namespace's addresses (or, for loopback, the socket's own
//!   namespace); what stays ambiguous is left unplaced, never guessed from
//!   who else talked to that address. Their pid is not used: they fire in
//!   softirq or timer context. A retransmission between two servers is a
//!   symptom of the path between them, so it is split between its ends by
//!   what each retransmitted with anyone else over the run (see `blame`):
//!   a healthy server replicating to a lossy one is not charged for the
//!   lossy one's loss. Every tracer on
//!   a host records every retransmission of the host, so copies are
//!   merged on what every copy shares (the socket, the buffer, its
//!   sequence number, the socket's retransmission count; time and
//!   addresses in captures that predate them).
//! - File I/O system calls are counted per process and interval by the
//!   kernel; they belong to the server of the process and are spread over
//!   their interval. Block requests: every tracer on a host counts every
//!   request of the host, so the host's first capture that has them is its
//!   only block source (as for samples). A request belongs to the server
//!   whose process submitted it, else (a kernel thread's writeback, a disk
//!   hog) to the servers whose file I/O went to that device.
//! - Network namespace counters (interfaces, TCP/IP) belong to every server
//!   of the capture that read them whose processes live in that namespace.
//! - Time is exclusive wall-clock time: while a function is the innermost
//!   traced frame of a thread, its time runs (system calls and blocking
//!   included), and it is spread over the bins it falls into, so a call that
//!   blocks for minutes shows in every window it blocks in. Calls still open
//!   when recording stopped are charged up to the stop.

use std::{
    collections::{HashMap, HashSet},
    net::IpAddr,
};

use tracer_common::{
    kernel::{BlockIo, NET_SNMP_COUNTERS, NetSnmp, TcpRetransmitSock, dev_parts},
    record::{CpuTimes, SYSCALL_UNFINISHED, cpu_times_flags, lifecycle},
    syscall::{self, nr},
};

use super::types::{Metric, PAPER_SAMPLE_HZ, PeersConfig, PeersError, ServerSplit};
use crate::decode::{Capture, Event, Symbolizer, ip_addr, nul_padded, syscall_name};

/// Components of [`Metric::Retransmits`].
pub const RETRANSMIT_COMPONENTS: [&str; 2] =
    ["retransmits by the server", "retransmits to the server"];
/// Components of [`Metric::SocketBytes`].
pub const SOCKET_BYTE_COMPONENTS: [&str; 2] = ["bytes received", "bytes sent"];
/// Components of [`Metric::FileIo`], [`Metric::FileTime`] and
/// [`Metric::FileLatency`]: the classes of `tracer_common::kernel::file_class`
/// in order (class `c` is component `c - 1`).
pub const FILE_COMPONENTS: [&str; 5] = ["read", "write", "sync", "metadata", "async"];
/// Components of the block metrics: `tracer_common::kernel::block_op` in
/// order.
pub const BLOCK_COMPONENTS: [&str; 5] = ["read", "write", "flush", "discard", "other"];
/// Components of [`Metric::NetBytes`].
pub const NET_BYTE_COMPONENTS: [&str; 2] = ["bytes received", "bytes sent"];
/// Components of [`Metric::CpuWait`].
pub const CPU_WAIT_COMPONENTS: [&str; 1] = ["runnable, waiting for a CPU"];
/// Components of [`Metric::NetErrors`].
pub const NET_ERROR_COMPONENTS: [&str; 8] = [
    "packets dropped on receive",
    "packets dropped on send",
    "interface errors",
    "tcp segments retransmitted",
    "tcp retransmission timeouts",
    "tcp segments received in error",
    "ip packets discarded",
    "connections dropped by a full listen queue",
];

/// Which [`NET_ERROR_COMPONENTS`] each SNMP counter adds to, by
/// (section, name) of `tracer_common::kernel::NET_SNMP_COUNTERS`.
const SNMP_ERRORS: [((&str, &str), u32); 6] = [
    (("Tcp", "RetransSegs"), 3),
    (("TcpExt", "TCPTimeouts"), 4),
    (("Tcp", "InErrs"), 5),
    (("Ip", "InDiscards"), 6),
    (("Ip", "OutDiscards"), 6),
    (("TcpExt", "ListenDrops"), 7),
];

/// One capture given to the analysis.
#[derive(Clone, Copy, Debug)]
pub struct CaptureSource<'a> {
    /// Where it was read from.
    pub path: &'a std::path::Path,
    /// Server label when one capture is one server (the file stem).
    pub label: &'a str,
    /// The capture.
    pub capture: &'a Capture,
}

/// A server found in the captures.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerInfo {
    /// Label (file stem, or per process `comm[pid]` / a command-line value).
    pub label: String,
    /// Where it came from.
    pub source: String,
    /// Host (name and boot id) it ran on.
    pub host: String,
    /// Wall-clock span its capture covers, ns.
    pub span: (u64, u64),
}

/// Per-server, per-metric binned series of a run.
#[derive(Clone, Debug)]
pub struct Features {
    /// Run name.
    pub run: String,
    /// The servers.
    pub servers: Vec<ServerInfo>,
    /// Bin width, ns (gcd of WinSize and WinShift).
    pub bin_ns: u64,
    /// Wall-clock start of bin 0, ns.
    pub base_ns: u64,
    /// Component names per metric (indexed by [`Metric::index`]).
    pub components: [Vec<String>; Metric::MEASURED],
    /// `series[server][metric]`: component → value per bin.
    pub series: Vec<[HashMap<u32, Vec<f64>>; Metric::MEASURED]>,
    /// Retransmissions per server and remote address, over the whole run.
    pub retransmit_peers: Vec<HashMap<String, u64>>,
    /// CPU sampling rate of the captures the samples came from, Hz per CPU
    /// (the highest, when they differ; 0 when none sampled).
    pub sample_hz: u64,
    /// Records read.
    pub events: u64,
    /// Things worth knowing (unattributed records).
    pub notes: Vec<String>,
    /// Servers whose captures hold no CPU times while others' do (then
    /// [`Metric::CpuWait`] has no data rather than zeros for them).
    pub cpu_missing: Vec<String>,
    /// Per server, the servers whose processes share a network namespace
    /// with it (itself included): their sockets' bytes are the namespace's
    /// own traffic in [`Metric::NetForeign`].
    pub netns_peers: Vec<Vec<usize>>,
}

/// Feature vectors of one metric in every window.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricVectors {
    /// The metric.
    pub metric: Metric,
    /// Kept components (after dimensionality reduction).
    pub components: Vec<String>,
    /// `vectors[window][server][component]`.
    pub vectors: Vec<Vec<Vec<f64>>>,
    /// Why the metric has no component, when it has none (nothing of its
    /// kind was recorded, or nothing reached the dimensionality rule).
    pub empty: Option<String>,
}

/// Windows of a run with their feature vectors.
#[derive(Clone, Debug, PartialEq)]
pub struct Windowed {
    /// Window starts, wall-clock ns.
    pub starts: Vec<u64>,
    /// WinSize, ns.
    pub window_ns: u64,
    /// Per metric asked for.
    pub metrics: Vec<MetricVectors>,
    /// Wall-clock span all servers recorded together.
    pub common_span: (u64, u64),
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Interned component names.
#[derive(Default)]
struct Interner {
    names: Vec<String>,
    ids: HashMap<String, u32>,
}

impl Interner {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }
}

/// Where values land: series per server and metric, binned.
struct Bins {
    bin_ns: u64,
    base_ns: u64,
    /// Times from here on are ignored: a damaged timestamp must not grow a
    /// series to the end of time.
    limit_ns: u64,
    series: Vec<[HashMap<u32, Vec<f64>>; Metric::MEASURED]>,
}

impl Bins {
    #[inline]
    fn slot(&mut self, server: usize, metric: Metric, comp: u32, bin: usize) -> &mut f64 {
        let v = self.series[server][metric.index()].entry(comp).or_default();
        if v.len() <= bin {
            v.resize(bin + 1, 0.0);
        }
        &mut v[bin]
    }

    /// Adds `value` at wall-clock time `t_ns`.
    #[inline]
    fn add(&mut self, server: usize, metric: Metric, comp: u32, t_ns: u64, value: f64) {
        if t_ns < self.base_ns || t_ns >= self.limit_ns {
            return;
        }
        let bin = ((t_ns - self.base_ns) / self.bin_ns) as usize;
        *self.slot(server, metric, comp, bin) += value;
    }

    /// Adds `per_ns` for every ns of [t0, t1), split over the bins it spans.
    fn add_interval(
        &mut self,
        server: usize,
        metric: Metric,
        comp: u32,
        t0: u64,
        t1: u64,
        per_ns: f64,
    ) {
        let mut t = t0.max(self.base_ns);
        let t1 = t1.min(self.limit_ns);
        while t < t1 {
            let bin = ((t - self.base_ns) / self.bin_ns) as usize;
            let bin_end = self.base_ns + (bin as u64 + 1) * self.bin_ns;
            let until = bin_end.min(t1);
            *self.slot(server, metric, comp, bin) += (until - t) as f64 * per_ns;
            t = until;
        }
    }
}

/// A TCP endpoint, IPv4-mapped IPv6 addresses folded to IPv4.
type Endpoint = (IpAddr, u16);

fn ip_of(family: u16, addr: &[u8; 16]) -> Option<IpAddr> {
    ip_addr(family, addr)
}

/// Socket endpoints of the servers of one host, learned from their system
/// calls and snapshots, and their network namespaces, to place
/// retransmissions.
#[derive(Default)]
struct Endpoints {
    /// Bound (listening) ports: (address, or `None` for a wildcard) → server.
    bound: HashMap<u16, Vec<(Option<IpAddr>, usize)>>,
    /// Peers of accepted connections.
    accepted: HashMap<Endpoint, usize>,
    /// Servers with a process in each network namespace.
    netns_servers: HashMap<u64, Vec<usize>>,
    /// Servers whose network namespace has each (non-loopback) address.
    ip_servers: HashMap<IpAddr, Vec<usize>>,
}

impl Endpoints {
    /// The one server among `candidates` that `ip` can be, `netns` being the
    /// namespace a loopback address lives in.
    fn narrow(&self, candidates: Vec<usize>, ip: IpAddr, netns: Option<u64>) -> Option<usize> {
        let mut candidates = candidates;
        candidates.sort_unstable();
        candidates.dedup();
        if let [only] = candidates[..] {
            return Some(only);
        }
        let owners = if ip.is_loopback() {
            netns.and_then(|n| self.netns_servers.get(&n))
        } else {
            self.ip_servers.get(&ip)
        }?;
        let mut left = candidates.into_iter().filter(|s| owners.contains(s));
        match (left.next(), left.next()) {
            (Some(s), None) => Some(s),
            _ => None,
        }
    }

    /// The server bound to `(ip, port)`: one bound to that address, else
    /// one bound to any address; several are told apart by which of them
    /// has `ip` (`netns`: where a loopback address lives).
    fn bound_by(&self, (ip, port): Endpoint, netns: Option<u64>) -> Option<usize> {
        let list = self.bound.get(&port)?;
        let exact: Vec<usize> = list
            .iter()
            .filter(|(a, _)| *a == Some(ip))
            .map(|(_, s)| *s)
            .collect();
        let candidates = if exact.is_empty() {
            list.iter()
                .filter(|(a, _)| a.is_none())
                .map(|(_, s)| *s)
                .collect()
        } else {
            exact
        };
        self.narrow(candidates, ip, netns)
    }

    /// (the server whose socket `local` is, the server `remote` is a socket
    /// of), for a socket in namespace `netns`.
    fn classify(
        &self,
        local: Endpoint,
        remote: Endpoint,
        netns: Option<u64>,
    ) -> (Option<usize>, Option<usize>) {
        let by = self
            .bound_by(local, netns)
            .or_else(|| self.accepted.get(&remote).copied());
        // A loopback peer is in the socket's namespace; another address is
        // in the namespace that has it.
        let to = self
            .bound_by(remote, netns)
            .or_else(|| self.accepted.get(&local).copied());
        (by, to)
    }
}

/// What every copy of one retransmission shares, to count it once.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum RetransmitKey {
    /// Socket, buffer, sequence number, the socket's retransmission count.
    Identity(u64, u64, u32, u32),
    /// Older captures: time, CPU, addresses and ports.
    Legacy(u64, u32, [u8; 16], [u8; 16], u16, u16),
}

impl RetransmitKey {
    fn of(t: &TcpRetransmitSock) -> Self {
        match t.identity() {
            Some((sk, skb, seq, n)) => Self::Identity(sk, skb, seq, n),
            None => Self::Legacy(
                t.header.ts_ns,
                t.header.cpu,
                t.saddr,
                t.daddr,
                t.sport,
                t.dport,
            ),
        }
    }
}

/// One TCP retransmission between placed endpoints: the server whose socket
/// retransmitted (`by`) and the server it was sent to (`to`), either `None`
/// for an untraced host (a client); never both `None`, never the same.
#[derive(Clone, Copy, Debug, PartialEq)]
struct RetransmitEnds {
    by: Option<usize>,
    to: Option<usize>,
}

/// How each retransmission is charged, in the order given: (the share of
/// its sender's server, the share of its receiver's server), summing to 1.
/// A retransmission is a symptom of the path between its two ends, not of
/// its sender: when servers send to each other (replication), a healthy
/// server sending to a lossy one retransmits as much as the lossy one does,
/// so charging either end alone makes every server that talks to the lossy
/// one share its blame. The lossy server is the end its lossy paths have
/// in common, so a retransmission between servers `a` and `b` is split in
/// proportion to each end's retransmissions with anyone else over the run
/// (plus a half, so two ends seen with nobody else share it evenly: one
/// path alone cannot say which end is lossy). A retransmission with one
/// placed end (an untraced client's) belongs to that end. Over the whole
/// run rather than per window: a lossy path's retransmissions come in
/// bursts, and a few seconds of a healthy server's background
/// retransmissions must not tip a pair that the run as a whole settles.
fn blame(list: &[RetransmitEnds], servers: usize) -> Vec<(f64, f64)> {
    let pair = |r: &RetransmitEnds| match (r.by, r.to) {
        (Some(a), Some(b)) if a < servers && b < servers => Some((a.min(b), a.max(b))),
        _ => None,
    };
    let mut involved = vec![0.0f64; servers];
    let mut pairs: HashMap<(usize, usize), f64> = HashMap::new();
    for r in list {
        for s in [r.by, r.to].into_iter().flatten() {
            if let Some(n) = involved.get_mut(s) {
                *n += 1.0;
            }
        }
        if let Some(p) = pair(r) {
            *pairs.entry(p).or_default() += 1.0;
        }
    }
    list.iter()
        .map(|r| match (pair(r), r.by, r.to) {
            (Some(p), Some(by), Some(to)) => {
                let together = pairs.get(&p).copied().unwrap_or(0.0);
                let by_else = involved[by] - together + 0.5;
                let to_else = involved[to] - together + 0.5;
                let by_share = by_else / (by_else + to_else);
                (by_share, 1.0 - by_share)
            }
            (_, Some(_), None) => (1.0, 0.0),
            (_, None, Some(_)) => (0.0, 1.0),
            _ => (0.0, 0.0),
        })
        .collect()
}

/// Adds `value`, spread evenly over `[t0, t1)` (at `t1` when empty).
fn spread(bins: &mut Bins, s: usize, metric: Metric, comp: u32, t0: u64, t1: u64, value: f64) {
    if t1 > t0 {
        bins.add_interval(s, metric, comp, t0, t1, value / (t1 - t0) as f64);
    } else {
        bins.add(s, metric, comp, t1, value);
    }
}

/// The increase of cumulative counters since the previous reading, `None`
/// for the first reading or after a reset (a counter went down).
fn increase<const N: usize>(prev: Option<&[u64; N]>, now: &[u64; N]) -> Option<[u64; N]> {
    let prev = prev?;
    let mut out = [0u64; N];
    for (o, (n, p)) in out.iter_mut().zip(now.iter().zip(prev)) {
        *o = n.checked_sub(*p)?;
    }
    Some(out)
}

/// Deepest traced call stack kept per thread: real daemons nest tens of
/// traced calls; beyond this, entries lost their returns.
const MAX_STACK: usize = 4096;

/// Per-thread state for exclusive time.
struct Thread {
    /// (component, func_id, time the frame last became the innermost);
    /// at most [`MAX_STACK`] deep.
    stack: Vec<(u32, u32, u64)>,
    /// Since when the stack has been empty.
    idle_since: u64,
}

/// Extracts the features of one run (one experiment: every server recorded
/// over the same period).
pub fn extract(
    run: &str,
    sources: &[CaptureSource<'_>],
    cfg: &PeersConfig,
) -> Result<Features, PeersError> {
    cfg.validate()?;
    let bin_ns = gcd(cfg.window_ns, cfg.shift_ns);
    let mut notes = Vec::new();

    // Hosts, and each capture's wall-clock offset.
    let mut hosts: Vec<String> = Vec::new();
    let host_of: Vec<usize> = sources
        .iter()
        .map(|s| {
            let h = format!(
                "{} (boot {})",
                s.capture.header.host, s.capture.header.boot_id
            );
            match hosts.iter().position(|x| *x == h) {
                Some(i) => i,
                None => {
                    hosts.push(h);
                    hosts.len() - 1
                }
            }
        })
        .collect();
    let offset = |c: &Capture| {
        i128::from(c.header.clock.realtime_ns) - i128::from(c.header.clock.monotonic_ns)
    };
    let to_rt = |off: i128, t: u64| u64::try_from(i128::from(t) + off).unwrap_or(0);

    // Servers and each capture's pid → server map.
    let mut servers: Vec<ServerInfo> = Vec::new();
    let mut own: Vec<HashMap<u32, usize>> = Vec::with_capacity(sources.len());
    // Per capture: its server when one capture is one server.
    let mut capture_server: Vec<Option<usize>> = vec![None; sources.len()];
    // (server, local address or None for a wildcard, port) bound before
    // recording began: the TCP sockets the recorder found open in a server's
    // processes when it first saw them, and listening ports read from command
    // lines (`cfg.port_arg`, any address).
    let mut bound_ports: Vec<(usize, Option<IpAddr>, u16)> = Vec::new();
    // (host, network namespace, server): where each server's processes live.
    let mut server_netns: Vec<(usize, u64, usize)> = Vec::new();
    for (ci, src) in sources.iter().enumerate() {
        let cap = src.capture;
        let mut map = HashMap::new();
        let traced: HashMap<u32, &tracer_common::capture::ProcessInfo> = cap
            .processes
            .iter()
            .filter_map(|(pid, snaps)| {
                let last = snaps.iter().rev().find(|p| p.traced)?;
                Some((*pid, last))
            })
            .collect();
        let new_server = |servers: &mut Vec<ServerInfo>, label: String, source: String| {
            servers.push(ServerInfo {
                label,
                source,
                host: hosts[host_of[ci]].clone(),
                span: (0, 0),
            });
            servers.len() - 1
        };
        match &cfg.split {
            ServerSplit::PerCapture => {
                let s = new_server(
                    &mut servers,
                    src.label.to_string(),
                    src.path.display().to_string(),
                );
                capture_server[ci] = Some(s);
                for pid in traced.keys() {
                    map.insert(*pid, s);
                }
            }
            ServerSplit::PerProcess { label_arg } => {
                // Roots: traced processes whose parent is not traced here.
                let mut roots: Vec<u32> = traced
                    .iter()
                    .filter(|(_, p)| !traced.contains_key(&p.ppid))
                    .map(|(pid, _)| *pid)
                    .collect();
                roots.sort_unstable();
                for pid in roots {
                    let p = traced[&pid];
                    let label = label_arg
                        .as_deref()
                        .and_then(|arg| arg_value(&p.cmdline, arg))
                        .unwrap_or_else(|| format!("{}[{pid}]", p.comm));
                    let s = new_server(
                        &mut servers,
                        label,
                        format!("{} pid {pid}", src.path.display()),
                    );
                    map.insert(pid, s);
                }
                for pid in traced.keys() {
                    let mut cur = *pid;
                    let mut hops = 0;
                    while !map.contains_key(&cur) && hops < 64 {
                        match traced.get(&cur) {
                            Some(p) => cur = p.ppid,
                            None => break,
                        }
                        hops += 1;
                    }
                    if let Some(s) = map.get(&cur).copied() {
                        map.insert(*pid, s);
                    }
                }
            }
        }
        for (pid, server) in &map {
            for snap in cap.processes.get(pid).into_iter().flatten() {
                for sock in &snap.sockets {
                    let Ok(local) = sock.local.parse::<std::net::SocketAddr>() else {
                        continue;
                    };
                    let ip = match local.ip() {
                        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(local.ip(), IpAddr::V4),
                        v4 => v4,
                    };
                    let entry = (*server, (!ip.is_unspecified()).then_some(ip), local.port());
                    if !bound_ports.contains(&entry) {
                        bound_ports.push(entry);
                    }
                }
            }
        }
        if let Some(arg) = &cfg.port_arg {
            for (pid, server) in &map {
                let port = traced
                    .get(pid)
                    .and_then(|p| arg_value(&p.cmdline, arg))
                    .and_then(|v| v.parse::<u16>().ok());
                if let Some(port) = port
                    && !bound_ports.contains(&(*server, None, port))
                {
                    bound_ports.push((*server, None, port));
                }
            }
        }
        for (pid, server) in &map {
            let netns = traced.get(pid).map_or(0, |p| p.netns);
            let entry = (host_of[ci], netns, *server);
            if netns != 0 && !server_netns.contains(&entry) {
                server_netns.push(entry);
            }
        }
        own.push(map);
    }
    for (i, a) in servers.iter().enumerate() {
        if let Some(b) = servers[..i].iter().find(|b| b.label == a.label) {
            return Err(PeersError::DuplicateLabel {
                run: run.to_string(),
                label: a.label.clone(),
                first: b.source.clone(),
                second: a.source.clone(),
            });
        }
    }
    if servers.len() < 3 {
        return Err(PeersError::TooFewServers {
            run: run.to_string(),
            found: servers.len(),
            min: 3,
        });
    }

    let starts: Vec<u64> = sources
        .iter()
        .map(|s| s.capture.header.clock.realtime_ns)
        .collect();
    let base_ns = starts.iter().copied().min().unwrap_or(0) / bin_ns * bin_ns;
    // Where recording surely ended: the last end marker, or for a capture
    // without one (a killed recorder) a generous month after its start.
    let limit_ns = sources
        .iter()
        .map(|s| {
            let c = s.capture;
            match &c.end {
                Some(e) => to_rt(offset(c), e.stop_ns).saturating_add(bin_ns),
                None => c
                    .header
                    .clock
                    .realtime_ns
                    .saturating_add(31 * 86_400 * 1_000_000_000),
            }
        })
        .max()
        .unwrap_or(u64::MAX);
    let mut bins = Bins {
        bin_ns,
        base_ns,
        limit_ns,
        series: (0..servers.len()).map(|_| Default::default()).collect(),
    };
    let mut interners: [Interner; Metric::MEASURED] = Default::default();
    for name in RETRANSMIT_COMPONENTS {
        interners[Metric::Retransmits.index()].id(name);
    }
    for name in SOCKET_BYTE_COMPONENTS {
        interners[Metric::SocketBytes.index()].id(name);
    }
    for (metric, names) in [
        (Metric::FileIo, &FILE_COMPONENTS[..]),
        (Metric::FileTime, &FILE_COMPONENTS[..]),
        (Metric::BlockRequests, &BLOCK_COMPONENTS[..]),
        (Metric::BlockBytes, &BLOCK_COMPONENTS[..]),
        (Metric::BlockTime, &BLOCK_COMPONENTS[..]),
        (Metric::NetBytes, &NET_BYTE_COMPONENTS[..]),
        (Metric::NetErrors, &NET_ERROR_COMPONENTS[..]),
    ] {
        for name in names {
            interners[metric.index()].id(name);
        }
    }
    let mut endpoints: Vec<Endpoints> = (0..hosts.len()).map(|_| Endpoints::default()).collect();
    for (host, netns, server) in &server_netns {
        let list = endpoints[*host].netns_servers.entry(*netns).or_default();
        if !list.contains(server) {
            list.push(*server);
        }
    }
    for (s, ip, port) in &bound_ports {
        let host = hosts
            .iter()
            .position(|h| *h == servers[*s].host)
            .unwrap_or(0);
        endpoints[host]
            .bound
            .entry(*port)
            .or_default()
            .push((*ip, *s));
    }
    for e in &cfg.endpoints {
        let Some(s) = servers.iter().position(|x| x.label == e.label) else {
            return Err(PeersError::BadConfig {
                what: format!(
                    "endpoint for `{}`, which is no server of {run} (servers: {})",
                    e.label,
                    servers
                        .iter()
                        .map(|s| s.label.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        };
        let host = hosts
            .iter()
            .position(|h| *h == servers[s].host)
            .unwrap_or(0);
        let ip = e.ip.map(|ip| match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        });
        endpoints[host]
            .bound
            .entry(e.port)
            .or_default()
            .push((ip, s));
    }
    // Samples per capture, kept from pass 1 for pass 2 (which needs every
    // capture's pid map first) instead of decoding the captures again.
    let mut samples: Vec<Vec<tracer_common::record::Sample>> = vec![Vec::new(); sources.len()];
    let mut retransmits: Vec<Vec<(usize, TcpRetransmitSock)>> = vec![Vec::new(); hosts.len()];
    // Block records per host (placed once every capture's file I/O says
    // whose devices are whose); calls per (device, server) per host.
    let mut block: Vec<Vec<(usize, BlockIo)>> = vec![Vec::new(); hosts.len()];
    let mut device_calls: Vec<HashMap<u32, HashMap<usize, u64>>> =
        vec![HashMap::new(); hosts.len()];
    let mut device_names: HashMap<u32, String> = HashMap::new();
    // Addresses of each network namespace per host.
    let mut netns_addrs: Vec<HashMap<u64, HashSet<IpAddr>>> = vec![HashMap::new(); hosts.len()];
    let mut unplaced_net = 0u64;
    // System calls: number → component of `Syscalls` and `SyscallTime`
    // (apart from `interners`, which the function closure below borrows).
    let mut syscall_names = Interner::default();
    let mut syscall_comp: HashMap<u32, u32> = HashMap::new();
    let mut events = 0u64;
    let mut unattributed = 0u64;
    let mut malformed = 0u64;
    // Servers with CPU times in their captures.
    let mut cpu_seen = vec![false; servers.len()];

    // Pass 1, per capture: function calls, socket calls, spans.
    for (ci, src) in sources.iter().enumerate() {
        let cap = src.capture;
        let off = offset(cap);
        let host = host_of[ci];
        let start_mono = cap.header.clock.monotonic_ns;
        let map = &mut own[ci];
        let default_server = capture_server[ci];
        // func_id → function component (the probe's symbol; qualified by
        // object when one symbol is probed in several objects).
        let mut symbol_count: HashMap<&str, usize> = HashMap::new();
        for p in &cap.probes {
            if !p.object.is_empty() {
                *symbol_count.entry(p.symbol.as_str()).or_default() += 1;
            }
        }
        let funcs: Vec<u32> = cap
            .probes
            .iter()
            .enumerate()
            .map(|(id, p)| {
                let name = if p.object.is_empty() {
                    format!("func#{id}")
                } else if symbol_count.get(p.symbol.as_str()).copied().unwrap_or(0) > 1 {
                    format!("{} [{}]", p.symbol, basename(&p.object))
                } else {
                    p.symbol.clone()
                };
                interners[Metric::Time.index()].id(&name)
            })
            .collect();
        // An id the capture lists no probe for (a damaged or crafted
        // capture) is one "unknown" component, not one per id: components
        // are feature dimensions, and a file must not choose how many.
        let mut func_comp = |id: u32| -> u32 {
            match funcs.get(id as usize) {
                Some(c) => *c,
                None => interners[Metric::Time.index()].id("func#?"),
            }
        };
        let mut threads: HashMap<(u32, u32), Thread> = HashMap::new();
        // Previous CPU times of this capture's processes.
        let mut last_cpu: HashMap<u32, CpuTimes> = HashMap::new();
        // Previous network counters of this capture: per (namespace,
        // interface), and per namespace.
        let mut last_dev: HashMap<(u64, [u8; 16]), (u64, [u64; 8])> = HashMap::new();
        let mut last_snmp: HashMap<u64, (u64, NetSnmp)> = HashMap::new();
        // The servers of this capture a namespace's counters belong to.
        let capture_servers: HashSet<usize> = map.values().copied().chain(default_server).collect();
        let netns_servers = endpoints[host].netns_servers.clone();
        let netns_of = |netns: u64, pid: u32, map: &mut HashMap<u32, usize>| -> Vec<usize> {
            let mut list: Vec<usize> = netns_servers
                .get(&netns)
                .map(|l| {
                    l.iter()
                        .copied()
                        .filter(|s| capture_servers.contains(s))
                        .collect()
                })
                .unwrap_or_default();
            if list.is_empty() {
                // Snapshots without namespaces (older captures): the reader's.
                list.extend(map.get(&pid).copied().or(default_server));
            }
            list
        };
        let mut last_ts = start_mono;
        for event in cap.events() {
            let Ok(event) = event else {
                malformed += 1;
                continue;
            };
            events += 1;
            let h = *event.header();
            if h.ts_ns > last_ts {
                last_ts = h.ts_ns;
            }
            let server = |map: &mut HashMap<u32, usize>, pid: u32| -> Option<usize> {
                if let Some(s) = map.get(&pid) {
                    return Some(*s);
                }
                let s = default_server?;
                map.insert(pid, s);
                Some(s)
            };
            match event {
                Event::Entry { rec, .. } => {
                    let Some(s) = server(map, h.pid) else {
                        unattributed += 1;
                        continue;
                    };
                    let comp = func_comp(rec.func_id);
                    bins.add(s, Metric::Count, comp, to_rt(off, h.ts_ns), 1.0);
                    let th = threads.entry((h.pid, h.tid)).or_insert(Thread {
                        stack: Vec::new(),
                        idle_since: start_mono,
                    });
                    if let Some(top) = th.stack.last() {
                        bins.add_interval(
                            s,
                            Metric::Time,
                            top.0,
                            to_rt(off, top.2),
                            to_rt(off, h.ts_ns),
                            1e-6,
                        );
                    }
                    if th.stack.len() >= MAX_STACK {
                        // Entries without returns (lost, or a crafted file):
                        // the outermost half goes, so returns stay cheap.
                        th.stack.drain(..MAX_STACK / 2);
                    }
                    th.stack.push((comp, rec.func_id, h.ts_ns));
                }
                Event::Return(r) => {
                    let Some(s) = server(map, h.pid) else {
                        unattributed += 1;
                        continue;
                    };
                    let th = threads.entry((h.pid, h.tid)).or_insert(Thread {
                        stack: Vec::new(),
                        idle_since: start_mono,
                    });
                    match th.stack.iter().rposition(|f| f.1 == r.func_id) {
                        Some(pos) => {
                            if let Some(top) = th.stack.last() {
                                bins.add_interval(
                                    s,
                                    Metric::Time,
                                    top.0,
                                    to_rt(off, top.2),
                                    to_rt(off, h.ts_ns),
                                    1e-6,
                                );
                            }
                            th.stack.truncate(pos);
                            match th.stack.last_mut() {
                                Some(top) => top.2 = h.ts_ns,
                                None => th.idle_since = h.ts_ns,
                            }
                        }
                        // The call began before recording: with nothing
                        // traced open, it was the innermost frame since the
                        // thread's last traced activity.
                        None if th.stack.is_empty() => {
                            let comp = func_comp(r.func_id);
                            bins.add_interval(
                                s,
                                Metric::Time,
                                comp,
                                to_rt(off, th.idle_since),
                                to_rt(off, h.ts_ns),
                                1e-6,
                            );
                            th.idle_since = h.ts_ns;
                        }
                        None => {}
                    }
                }
                Event::Syscall(sc) => {
                    let Some(s) = server(map, h.pid) else {
                        unattributed += 1;
                        continue;
                    };
                    let t = to_rt(off, h.ts_ns);
                    let comp = *syscall_comp
                        .entry(sc.nr)
                        .or_insert_with(|| syscall_names.id(&syscall_name(sc.nr)));
                    // An unfinished call has no count yet, but its time so
                    // far is real (a receive stuck until the stop).
                    if sc.flags & SYSCALL_UNFINISHED == 0 {
                        bins.add(s, Metric::Syscalls, comp, t, 1.0);
                    }
                    bins.add_interval(
                        s,
                        Metric::SyscallTime,
                        comp,
                        to_rt(off, sc.enter_ns),
                        t,
                        1e-6,
                    );
                    match sc.nr {
                        nr::READ | nr::READV | nr::RECVFROM | nr::RECVMSG if sc.ret > 0 => {
                            bins.add(s, Metric::SocketBytes, 0, t, sc.ret as f64);
                        }
                        nr::WRITE | nr::WRITEV | nr::SENDTO | nr::SENDMSG if sc.ret > 0 => {
                            bins.add(s, Metric::SocketBytes, 1, t, sc.ret as f64);
                        }
                        nr::BIND if sc.ret == 0 => {
                            if let Some(ip) = ip_of(sc.addr.family, &sc.addr.addr) {
                                let port = u16::from_be(sc.addr.port_be);
                                let ip = (!ip.is_unspecified()).then_some(ip);
                                // A server binding the same port again (a
                                // restart loop) adds nothing: keep one entry.
                                let list = endpoints[host].bound.entry(port).or_default();
                                if !list.contains(&(ip, s)) {
                                    list.push((ip, s));
                                }
                            }
                        }
                        nr::ACCEPT | nr::ACCEPT4 if sc.ret >= 0 => {
                            if let Some(ip) = ip_of(sc.addr.family, &sc.addr.addr) {
                                endpoints[host]
                                    .accepted
                                    .insert((ip, u16::from_be(sc.addr.port_be)), s);
                            }
                        }
                        _ => {}
                    }
                }
                Event::Lifecycle(l) => match l.event {
                    lifecycle::FORK => {
                        if let Some(s) = map.get(&h.pid).copied() {
                            map.entry(l.child_tid).or_insert(s);
                        }
                    }
                    lifecycle::EXIT => {
                        if let Some(th) = threads.remove(&(h.pid, h.tid))
                            && let (Some(top), Some(s)) =
                                (th.stack.last(), map.get(&h.pid).copied())
                        {
                            bins.add_interval(
                                s,
                                Metric::Time,
                                top.0,
                                to_rt(off, top.2),
                                to_rt(off, h.ts_ns),
                                1e-6,
                            );
                        }
                    }
                    _ => {}
                },
                Event::TcpRetransmit(t) => retransmits[host].push((ci, t)),
                Event::FileIo(f) => {
                    let Some(s) = server(map, h.pid) else {
                        unattributed += 1;
                        continue;
                    };
                    let class = syscall::spec(f.nr).map_or(0, |sp| sp.file);
                    let Some(comp) = (class as u32).checked_sub(1) else {
                        continue;
                    };
                    let (t0, t1) = (to_rt(off, f.since_ns.min(h.ts_ns)), to_rt(off, h.ts_ns));
                    spread(&mut bins, s, Metric::FileIo, comp, t0, t1, f.calls as f64);
                    spread(
                        &mut bins,
                        s,
                        Metric::FileTime,
                        comp,
                        t0,
                        t1,
                        f.time_ns as f64 / 1e6,
                    );
                    // Files on a device (major 0: no block device behind).
                    if dev_parts(f.dev).0 != 0 {
                        *device_calls[host]
                            .entry(f.dev)
                            .or_default()
                            .entry(s)
                            .or_default() += f.calls;
                    }
                }
                Event::BlockIo(b) => block[host].push((ci, b)),
                Event::DeviceName(d) => {
                    device_names.insert(d.dev, nul_padded(&d.name));
                }
                Event::NetAddr(a) => {
                    if let Some(ip) = ip_of(a.family, &a.addr) {
                        netns_addrs[host].entry(a.netns).or_default().insert(ip);
                    }
                }
                Event::NetDev(n) => {
                    let prev = last_dev.insert((n.netns, n.name), (h.ts_ns, n.counters));
                    let Some((t_prev, before)) = prev else {
                        continue;
                    };
                    if nul_padded(&n.name) == "lo" {
                        continue;
                    }
                    let Some(d) = increase(Some(&before), &n.counters) else {
                        continue;
                    };
                    let targets = netns_of(n.netns, h.pid, map);
                    if targets.is_empty() {
                        unplaced_net += 1;
                    }
                    let (t0, t1) = (to_rt(off, t_prev), to_rt(off, h.ts_ns));
                    for s in targets {
                        add_net_dev(&mut bins, s, t0, t1, &d);
                    }
                }
                Event::NetSnmp(n) => {
                    let prev = last_snmp.insert(n.netns, (h.ts_ns, n));
                    let Some((t_prev, before)) = prev else {
                        continue;
                    };
                    let targets = netns_of(n.netns, h.pid, map);
                    let (t0, t1) = (to_rt(off, t_prev), to_rt(off, h.ts_ns));
                    for s in targets {
                        add_net_snmp(&mut bins, s, t0, t1, &before, &n);
                    }
                }
                Event::Sample(smp) => samples[ci].push(smp),
                Event::CpuTimes(c) => {
                    let Some(s) = server(map, h.pid) else {
                        unattributed += 1;
                        continue;
                    };
                    cpu_seen[s] = true;
                    let Some(before) = last_cpu.insert(h.pid, c) else {
                        continue;
                    };
                    // Older recorders summed the current threads only: an
                    // interval in which a thread came or went is not the
                    // process's.
                    if c.flags & cpu_times_flags::KEEPS_EXITED == 0 && c.threads != before.threads {
                        continue;
                    }
                    let Some(wait) = c.wait_ns.checked_sub(before.wait_ns) else {
                        continue;
                    };
                    // Its one component (named below, once a reading is seen).
                    let (t0, t1) = (to_rt(off, before.header.ts_ns), to_rt(off, h.ts_ns));
                    spread(&mut bins, s, Metric::CpuWait, 0, t0, t1, wait as f64 / 1e6);
                }
                Event::Usdt(_)
                | Event::UsdtString(_)
                | Event::Enroll(_)
                | Event::Blocked(_)
                | Event::Unknown(_) => {}
            }
        }
        let end_mono = cap
            .end
            .as_ref()
            .map_or(last_ts, |e| e.stop_ns.max(start_mono));
        // Calls still open when recording stopped run until the stop.
        for ((pid, _), th) in threads {
            if let (Some(top), Some(s)) = (th.stack.last(), map.get(&pid).copied()) {
                bins.add_interval(
                    s,
                    Metric::Time,
                    top.0,
                    to_rt(off, top.2),
                    to_rt(off, end_mono),
                    1e-6,
                );
            }
        }
        // From when every probe was attached (seconds after the header on a
        // busy host): a window before that is undercounted, most in the
        // server whose recorder attached last.
        let began = cap
            .end
            .as_ref()
            .map_or(start_mono, |e| e.started_ns.max(start_mono))
            .min(end_mono);
        let span = (to_rt(off, began), to_rt(off, end_mono));
        for s in map.values().copied().collect::<HashSet<_>>() {
            servers[s].span = span;
        }
        if let Some(s) = capture_server[ci] {
            servers[s].span = span;
        }
    }
    if cpu_seen.iter().any(|x| *x) {
        interners[Metric::CpuWait.index()].id(CPU_WAIT_COMPONENTS[0]);
    }
    interners[Metric::Count.index()] = Interner {
        names: interners[Metric::Time.index()].names.clone(),
        ids: interners[Metric::Time.index()].ids.clone(),
    };
    interners[Metric::Syscalls.index()] = Interner {
        names: syscall_names.names.clone(),
        ids: syscall_names.ids.clone(),
    };
    interners[Metric::SyscallTime.index()] = syscall_names;

    // Pass 2, per host: samples from the host's sample source(s).
    let mut sample_hz = 0;
    for (host, _) in hosts.iter().enumerate() {
        let on_host: Vec<usize> = (0..sources.len()).filter(|c| host_of[*c] == host).collect();
        let host_servers: Vec<usize> = (0..servers.len())
            .filter(|s| servers[*s].host == hosts[host])
            .collect();
        let mut host_pids: HashMap<u32, usize> = HashMap::new();
        for c in &on_host {
            host_pids.extend(own[*c].iter().map(|(p, s)| (*p, *s)));
        }
        let node_wide = on_host
            .iter()
            .copied()
            .find(|c| sources[*c].capture.header.settings.sample_all);
        let sample_sources: Vec<usize> = match node_wide {
            Some(c) => vec![c],
            None => on_host.clone(),
        };
        for c in sample_sources {
            let cap = sources[c].capture;
            sample_hz = sample_hz.max(cap.header.settings.sample_hz);
            let off = offset(cap);
            let sym = Symbolizer::new(cap);
            let mut cache: HashMap<(u32, u64), u32> = HashMap::new();
            for smp in &samples[c] {
                let pid = smp.header.pid;
                if pid == 0 {
                    continue;
                }
                let target = match host_pids.get(&pid) {
                    Some(s) => Some(*s),
                    None if node_wide.is_some() => None,
                    None => continue,
                };
                if node_wide.is_none() && !own[c].contains_key(&pid) {
                    continue;
                }
                let (ip, kernel) = if smp.kernel_ip != 0 {
                    (smp.kernel_ip, true)
                } else if smp.user_ip != 0 {
                    (smp.user_ip, false)
                } else {
                    continue;
                };
                let comp = match cache.get(&(pid, ip)) {
                    Some(c) => *c,
                    None => {
                        let program = cap
                            .comm(pid)
                            .map(str::to_string)
                            .unwrap_or_else(|| crate::decode::comm_string(&smp.comm));
                        let place = if kernel {
                            let f = sym.kernel(ip).and_then(|l| l.symbol).unwrap_or("?");
                            format!("[kernel]:{f}")
                        } else {
                            match sym.user(pid, ip) {
                                Some(l) => {
                                    format!("{}:{}", basename(l.object), l.symbol.unwrap_or("?"))
                                }
                                None => "[unknown]:?".to_string(),
                            }
                        };
                        let id =
                            interners[Metric::Samples.index()].id(&format!("{program} {place}"));
                        cache.insert((pid, ip), id);
                        id
                    }
                };
                let t = to_rt(off, smp.header.ts_ns);
                match target {
                    Some(s) => bins.add(s, Metric::Samples, comp, t, 1.0),
                    None => {
                        for s in &host_servers {
                            bins.add(*s, Metric::Samples, comp, t, 1.0);
                        }
                    }
                }
            }
        }
    }

    // Block requests, from one capture per host (every tracer of a host
    // counts every request of the host).
    let mut unplaced_block = 0u64;
    let mut shared_devices: Vec<String> = Vec::new();
    for (host, list) in block.iter().enumerate() {
        let Some(source) = list.first().map(|(ci, _)| *ci) else {
            continue;
        };
        // Every process of a server on this host, from every capture.
        let pid_server: HashMap<u32, usize> = own
            .iter()
            .enumerate()
            .filter(|(ci, _)| host_of[*ci] == host)
            .flat_map(|(_, m)| m.iter().map(|(p, s)| (*p, *s)))
            .collect();
        let owners: HashMap<u32, Vec<usize>> = device_calls[host]
            .iter()
            .map(|(dev, per)| {
                let mut v: Vec<usize> = per.keys().copied().collect();
                v.sort_unstable();
                (*dev, v)
            })
            .collect();
        for (dev, v) in &owners {
            if v.len() > 1 {
                let name = device_names.get(dev).cloned().unwrap_or_else(|| {
                    let (ma, mi) = dev_parts(*dev);
                    format!("{ma}:{mi}")
                });
                let labels: Vec<&str> = v.iter().map(|s| servers[*s].label.as_str()).collect();
                shared_devices.push(format!("{name} ({})", labels.join(", ")));
            }
        }
        let off = offset(sources[source].capture);
        for (_, b) in list.iter().filter(|(ci, _)| *ci == source) {
            let targets: Vec<usize> = match pid_server.get(&b.header.pid) {
                Some(s) if b.header.pid != 0 => vec![*s],
                _ => owners.get(&b.dev).cloned().unwrap_or_default(),
            };
            if targets.is_empty() {
                unplaced_block += b.requests;
                continue;
            }
            let comp = b.op.min(BLOCK_COMPONENTS.len() as u32 - 1);
            let (t0, t1) = (
                to_rt(off, b.since_ns.min(b.header.ts_ns)),
                to_rt(off, b.header.ts_ns),
            );
            for s in targets {
                spread(
                    &mut bins,
                    s,
                    Metric::BlockRequests,
                    comp,
                    t0,
                    t1,
                    b.requests as f64,
                );
                spread(
                    &mut bins,
                    s,
                    Metric::BlockBytes,
                    comp,
                    t0,
                    t1,
                    b.bytes as f64,
                );
                spread(
                    &mut bins,
                    s,
                    Metric::BlockTime,
                    comp,
                    t0,
                    t1,
                    b.queue_ns as f64 / 1e6,
                );
            }
        }
    }

    // Retransmissions, once per host.
    for (host, addrs) in netns_addrs.iter().enumerate() {
        for (netns, ips) in addrs {
            let Some(owners) = endpoints[host].netns_servers.get(netns).cloned() else {
                continue;
            };
            for ip in ips.iter().filter(|ip| !ip.is_loopback()) {
                let list = endpoints[host].ip_servers.entry(*ip).or_default();
                for s in &owners {
                    if !list.contains(s) {
                        list.push(*s);
                    }
                }
            }
        }
    }
    let mut retransmit_peers: Vec<HashMap<String, u64>> = vec![HashMap::new(); servers.len()];
    let mut unplaced = 0u64;
    // Placed retransmissions and their times, charged by `blame` once all
    // are known.
    let mut placed: Vec<RetransmitEnds> = Vec::new();
    let mut placed_at: Vec<u64> = Vec::new();
    for (host, list) in retransmits.iter().enumerate() {
        // One entry per retransmission, in order: its first copy, and the
        // owner any copy names (only the tracer of the owner knows it).
        let mut index: HashMap<RetransmitKey, usize> = HashMap::new();
        let mut unique: Vec<(usize, TcpRetransmitSock, Option<usize>)> = Vec::new();
        for (c, t) in list {
            let owner = (t.owner != 0)
                .then(|| own[*c].get(&t.owner).copied().or(capture_server[*c]))
                .flatten();
            match index.get(&RetransmitKey::of(t)) {
                Some(i) => {
                    if unique[*i].2.is_none() {
                        unique[*i].2 = owner;
                    }
                }
                None => {
                    index.insert(RetransmitKey::of(t), unique.len());
                    unique.push((*c, *t, owner));
                }
            }
        }
        for (c, t, owner) in unique {
            let (Some(lip), Some(rip)) = (ip_of(t.family, &t.saddr), ip_of(t.family, &t.daddr))
            else {
                continue;
            };
            let netns = (t.netns != 0).then_some(u64::from(t.netns));
            let (by, to) = endpoints[host].classify((lip, t.sport), (rip, t.dport), netns);
            let by = owner.or(by);
            let at = to_rt(offset(sources[c].capture), t.header.ts_ns);
            let to = to.filter(|to| Some(*to) != by);
            if let Some(s) = by {
                *retransmit_peers[s].entry(rip.to_string()).or_default() += 1;
            }
            if let Some(s) = to {
                *retransmit_peers[s].entry(lip.to_string()).or_default() += 1;
            }
            if by.is_none() && to.is_none() {
                unplaced += 1;
            } else {
                placed.push(RetransmitEnds { by, to });
                placed_at.push(at);
            }
        }
    }
    for ((r, at), (by_share, to_share)) in placed
        .iter()
        .zip(&placed_at)
        .zip(blame(&placed, servers.len()))
    {
        if let (Some(s), true) = (r.by, by_share > 0.0) {
            bins.add(s, Metric::Retransmits, 0, *at, by_share);
        }
        if let (Some(s), true) = (r.to, to_share > 0.0) {
            bins.add(s, Metric::Retransmits, 1, *at, to_share);
        }
    }
    if malformed > 0 {
        notes.push(format!(
            "{malformed} malformed records were skipped (a damaged capture chunk)"
        ));
    }
    if unattributed > 0 {
        notes.push(format!(
            "{unattributed} function/socket records of processes that belong to no server were ignored"
        ));
    }
    if unplaced > 0 {
        notes.push(format!(
            "{unplaced} TCP retransmissions matched no server's sockets (other traffic on the host) and were ignored"
        ));
    }
    if unplaced_block > 0 {
        notes.push(format!(
            "{unplaced_block} block requests were on devices no server's file I/O went to, by no server's process, and were ignored"
        ));
    }
    if !shared_devices.is_empty() {
        notes.push(format!(
            "devices the files of several servers live on count for each of them (their block metrics cannot tell them apart): {}",
            shared_devices.join("; ")
        ));
    }
    if unplaced_net > 0 {
        notes.push(format!(
            "{unplaced_net} interface readings of network namespaces with no server were ignored"
        ));
    }

    // CPU times from some servers only: none is compared by them (a
    // missing reading is no data, not zero wait).
    let cpu_missing: Vec<String> = if cpu_seen.iter().any(|x| *x) {
        servers
            .iter()
            .zip(&cpu_seen)
            .filter(|(_, seen)| !**seen)
            .map(|(s, _)| s.label.clone())
            .collect()
    } else {
        Vec::new()
    };
    if !cpu_missing.is_empty() {
        interners[Metric::CpuWait.index()] = Interner::default();
        for series in &mut bins.series {
            series[Metric::CpuWait.index()].clear();
        }
    }

    let netns_peers = netns_peers(servers.len(), &server_netns);

    Ok(Features {
        run: run.to_string(),
        servers,
        bin_ns,
        base_ns,
        components: interners.map(|i| i.names),
        series: bins.series,
        retransmit_peers,
        sample_hz,
        events,
        notes,
        cpu_missing,
        netns_peers,
    })
}

/// Per server, the servers whose processes live in one of its network
/// namespaces (same host), itself included; a server with no known
/// namespace has only itself. `server_netns`: (host, namespace, server).
fn netns_peers(servers: usize, server_netns: &[(usize, u64, usize)]) -> Vec<Vec<usize>> {
    (0..servers)
        .map(|s| {
            let mut peers = vec![s];
            for (host, netns, _) in server_netns.iter().filter(|e| e.2 == s) {
                for (h, n, other) in server_netns {
                    if h == host && n == netns && !peers.contains(other) {
                        peers.push(*other);
                    }
                }
            }
            peers.sort_unstable();
            peers
        })
        .collect()
}

/// The share of a namespace's own socket traffic that its interface
/// counters may differ by in a window without any other process sending:
/// bytes a socket call handed over but still queued (send buffers, the
/// link's shaper) or received but not yet read, plus frame headers. Under
/// a steady GlusterFS dd (about 85 MB received and 60 MB sent per brick in
/// 4 s) the difference swung by up to 3 MB (3.5%) between windows of clean
/// runs, enough to indict a brick whose two training runs happened to stay
/// under 0.4 MB; a network hog adds 20 to 180 MB a window. With 8% left
/// out, no window of 28 clean runs (GlusterFS and MooseFS) kept more than
/// 0.03 MB, and no hogged server's window less than 66 MB.
pub const FOREIGN_SLACK: f64 = 0.08;

/// The least threshold of [`Metric::NetForeign`] under the Manhattan
/// distance, in bytes a second of the window: with the slack left out, most
/// clean windows score 0 and a threshold learned from them would be a byte,
/// which any stray packet exceeds. Traffic under 2 Mbit/s is no hog worth
/// naming (the hogs measured add 20 to 180 MB in 4 s).
pub const FOREIGN_FLOOR_BPS: f64 = 256.0 * 1024.0;

/// [`Metric::NetForeign`] of one component: per server and window, the
/// interface bytes of its namespace less the socket bytes of every server
/// in it (`peers`) and less [`FOREIGN_SLACK`] of the largest such socket
/// traffic in this window or its neighbours (a window's queued bytes
/// drain into the next one), never below 0. `iface` and `socket` are
/// `[server][window]`; no socket bytes count as 0.
fn foreign_bytes(
    iface: &[Vec<f64>],
    socket: Option<&Vec<Vec<f64>>>,
    peers: &[Vec<usize>],
) -> Vec<Vec<f64>> {
    iface
        .iter()
        .enumerate()
        .map(|(s, windows)| {
            let own = |w: usize| -> f64 {
                peers
                    .get(s)
                    .map_or(&[s][..], |p| &p[..])
                    .iter()
                    .filter_map(|p| socket.and_then(|c| c.get(*p)).and_then(|c| c.get(w)))
                    .sum()
            };
            let own: Vec<f64> = (0..windows.len()).map(own).collect();
            windows
                .iter()
                .enumerate()
                .map(|(w, bytes)| {
                    let near = own[w.saturating_sub(1)..(w + 2).min(own.len())]
                        .iter()
                        .copied()
                        .fold(0.0, f64::max);
                    (bytes - own[w] - FOREIGN_SLACK * near).max(0.0)
                })
                .collect()
        })
        .collect()
}

/// Adds an interface's counter increase over `[t0, t1)` to server `s`.
fn add_net_dev(bins: &mut Bins, s: usize, t0: u64, t1: u64, d: &[u64; 8]) {
    spread(bins, s, Metric::NetBytes, 0, t0, t1, d[0] as f64);
    spread(bins, s, Metric::NetBytes, 1, t0, t1, d[4] as f64);
    spread(bins, s, Metric::NetErrors, 0, t0, t1, d[3] as f64);
    spread(bins, s, Metric::NetErrors, 1, t0, t1, d[7] as f64);
    spread(bins, s, Metric::NetErrors, 2, t0, t1, (d[2] + d[6]) as f64);
}

/// Adds a namespace's SNMP counter increase over `[t0, t1)` to server `s`.
fn add_net_snmp(bins: &mut Bins, s: usize, t0: u64, t1: u64, before: &NetSnmp, now: &NetSnmp) {
    for ((proto, name), comp) in SNMP_ERRORS {
        let Some(i) = NET_SNMP_COUNTERS.iter().position(|c| *c == (proto, name)) else {
            continue;
        };
        let bit = 1u32 << i;
        if before.present & now.present & bit == 0 {
            continue;
        }
        if let Some(d) = now.values[i].checked_sub(before.values[i]) {
            spread(bins, s, Metric::NetErrors, comp, t0, t1, d as f64);
        }
    }
}

/// The value after `arg` in `cmdline` (`arg VALUE` or `arg=VALUE`).
fn arg_value(cmdline: &[String], arg: &str) -> Option<String> {
    let prefix = format!("{arg}=");
    cmdline.iter().enumerate().find_map(|(i, a)| {
        if a == arg {
            cmdline.get(i + 1).cloned()
        } else {
            a.strip_prefix(&prefix).map(str::to_string)
        }
    })
}

/// Scales every server's vector to percent of the servers' median total
/// (L1 norm), a total below `floor` counting as `floor`.
pub fn normalize(vectors: &mut [Vec<f64>], floor: f64) {
    let mut totals: Vec<f64> = vectors.iter().map(|v| v.iter().sum()).collect();
    let total = super::distance::median(&mut totals).max(floor);
    // Nothing done on any server: nothing to scale.
    if total <= 0.0 {
        return;
    }
    let scale = 100.0 / total;
    for x in vectors.iter_mut().flatten() {
        *x *= scale;
    }
}

/// Whether the system call named `name` waits for readiness (its duration
/// is idle time, not service time).
fn is_wait(name: &str) -> bool {
    syscall::number(name)
        .and_then(syscall::spec)
        .is_some_and(|s| s.flags & syscall::flag::WAIT != 0)
}

/// Whether the system call named `name` waits for a peer
/// ([`syscall::waits_for_peer`]: a readiness wait, a receive, an accept;
/// the recorded `read`s are on sockets). How long it takes is how long the
/// peer took to send or connect, not work the server did: in lock-step, the
/// server waiting on a slow one (a MooseFS chunkserver whose replication
/// partner is capped by CPU) spends longer in its blocking receives and
/// would stand out instead of the slow server.
fn waits_for_peer(name: &str) -> bool {
    syscall::number(name).is_some_and(syscall::waits_for_peer)
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

impl Features {
    /// Component names of `metric` (a derived metric's are its source's).
    fn names(&self, metric: Metric) -> &[String] {
        match metric {
            Metric::Latency => &self.components[Metric::Time.index()],
            Metric::SyscallLatency => &self.components[Metric::SyscallTime.index()],
            Metric::FileLatency => &self.components[Metric::FileTime.index()],
            Metric::BlockLatency => &self.components[Metric::BlockTime.index()],
            Metric::NetForeign => &self.components[Metric::NetBytes.index()],
            m => &self.components[m.index()],
        }
    }

    /// Why `metric` kept no component: nothing of its kind was recorded, or
    /// nothing reached the dimensionality rule (with the bar and the most any
    /// component reached, so the user sees how far off it was).
    fn why_empty(
        &self,
        metric: Metric,
        cfg: &PeersConfig,
        peak: &dyn Fn(Metric, u32) -> f64,
    ) -> String {
        let n = self.names(metric).len() as u32;
        if n == 0 {
            return match metric {
                Metric::Samples if self.sample_hz == 0 => {
                    "the captures hold no CPU samples (recorded with --sample-hz 0)".into()
                }
                Metric::Samples => "the servers were never sampled on a CPU".into(),
                Metric::Count | Metric::Time | Metric::Latency => {
                    "the captures hold no function calls (recorded without function probes)".into()
                }
                Metric::FileIo | Metric::FileTime | Metric::FileLatency => {
                    "the captures hold no file I/O counts (recorded with --no-file-io, or the servers did no file I/O)".into()
                }
                Metric::BlockRequests | Metric::BlockBytes | Metric::BlockTime | Metric::BlockLatency => {
                    "the captures hold no block requests on the servers' devices (recorded with --no-block-io, or none reached a disk)".into()
                }
                Metric::NetBytes | Metric::NetErrors | Metric::NetForeign => {
                    "the captures hold no network interface counters (recorded with --no-net-stats)".into()
                }
                Metric::CpuWait if !self.cpu_missing.is_empty() => format!(
                    "the captures of {} hold no CPU times (recorded by an older tracer or with --no-cpu-times), so servers cannot be compared by them",
                    self.cpu_missing.join(", ")
                ),
                Metric::CpuWait => {
                    "the captures hold no CPU times (recorded by an older tracer or with --no-cpu-times)".into()
                }
                _ => "the captures hold no system calls of the servers".into(),
            };
        }
        let most = |m: Metric| (0..n).map(|c| peak(m, c)).fold(0.0, f64::max);
        let window_s = cfg.window_ns as f64 / 1e9;
        match metric {
            Metric::Samples => format!(
                "no function reached {:.2} samples in one {window_s} s window on one server (--min-samples {} per minute at the paper's {} Hz, scaled to {} Hz; the most was {})",
                cfg.samples_bar(self.sample_hz),
                cfg.min_samples,
                PAPER_SAMPLE_HZ,
                self.sample_hz,
                most(Metric::Samples)
            ),
            Metric::Time => format!(
                "nothing reached {:.0} ms in one {window_s} s window on one server (--min-time; the most was {:.0} ms)",
                cfg.scaled(cfg.min_time_ms),
                most(metric)
            ),
            Metric::SyscallTime => {
                let most = (0..n)
                    .filter(|c| !waits_for_peer(&self.names(metric)[*c as usize]))
                    .map(|c| peak(metric, c))
                    .fold(0.0, f64::max);
                format!(
                    "no call reached {:.0} ms in one {window_s} s window on one server (--min-time; the most was {most:.0} ms; receives, accepts and waits, which wait for a peer, are never compared by time)",
                    cfg.scaled(cfg.min_time_ms),
                )
            }
            Metric::Count | Metric::Syscalls | Metric::Latency | Metric::SyscallLatency => {
                let (time, calls) = match metric {
                    Metric::Count | Metric::Latency => (Metric::Time, Metric::Count),
                    _ => (Metric::SyscallTime, Metric::Syscalls),
                };
                format!(
                    "nothing reached {:.0} calls or {:.0} ms in one {window_s} s window on one server (--min-calls, --min-time; the most was {:.0} calls, {:.0} ms){}",
                    cfg.scaled(cfg.min_calls),
                    cfg.scaled(cfg.min_time_ms),
                    most(calls),
                    most(time),
                    if metric == Metric::SyscallLatency {
                        "; waits (epoll, poll, select) are never compared by latency"
                    } else {
                        ""
                    }
                )
            }
            Metric::FileLatency | Metric::BlockLatency => {
                let calls = if metric == Metric::FileLatency {
                    Metric::FileIo
                } else {
                    Metric::BlockRequests
                };
                format!(
                    "no class reached {:.0} calls in one {window_s} s window on one server \
                     (--min-calls; the most was {:.0}), too few for a mean",
                    cfg.scaled(cfg.min_calls.max(1.0)),
                    most(calls)
                )
            }
            Metric::Retransmits
            | Metric::SocketBytes
            | Metric::FileIo
            | Metric::FileTime
            | Metric::BlockRequests
            | Metric::BlockBytes
            | Metric::BlockTime
            | Metric::NetBytes
            | Metric::NetErrors
            | Metric::NetForeign
            | Metric::CpuWait => "no components".into(),
        }
    }

    /// The wall-clock span every server recorded.
    pub fn common_span(&self) -> (u64, u64) {
        let start = self.servers.iter().map(|s| s.span.0).max().unwrap_or(0);
        let end = self.servers.iter().map(|s| s.span.1).min().unwrap_or(0);
        (start, end.max(start))
    }

    /// Cuts the series into windows of `cfg.window_ns` every `cfg.shift_ns`
    /// (starts aligned on multiples of the shift in wall-clock time, so runs
    /// recorded on different hosts line up), inside the span every server
    /// recorded, and keeps the components that reach the minimum in at least
    /// one window on one server (Kasick et al. §5.1).
    pub fn windows(&self, cfg: &PeersConfig) -> Windowed {
        let (start, end) = self.common_span();
        let mut starts = Vec::new();
        let mut w = start.div_ceil(cfg.shift_ns) * cfg.shift_ns;
        while w + cfg.window_ns <= end {
            starts.push(w);
            w += cfg.shift_ns;
        }
        let per_window = (cfg.window_ns / self.bin_ns) as usize;
        let first_bins: Vec<usize> = starts
            .iter()
            .map(|s| ((s - self.base_ns) / self.bin_ns) as usize)
            .collect();
        // Sum of a component's bins in every window.
        let sums = |series: &Vec<f64>| -> Vec<f64> {
            first_bins
                .iter()
                .map(|b| {
                    let lo = (*b).min(series.len());
                    let hi = (b + per_window).min(series.len());
                    series[lo..hi].iter().sum()
                })
                .collect()
        };
        // Per metric: component → per server → per window sums.
        let windowed: [HashMap<u32, Vec<Vec<f64>>>; Metric::MEASURED] = std::array::from_fn(|m| {
            let mut out: HashMap<u32, Vec<Vec<f64>>> = HashMap::new();
            for (s, series) in self.series.iter().enumerate() {
                for (comp, values) in &series[m] {
                    out.entry(*comp)
                        .or_insert_with(|| vec![vec![0.0; starts.len()]; self.servers.len()])[s] =
                        sums(values);
                }
            }
            out
        });
        // Latencies: a window's time over its calls, per function or system
        // call (0 where it was not called); time and count of one kind share
        // component ids.
        let per_call =
            |time: Metric, count: Metric, wanted: Metric| -> HashMap<u32, Vec<Vec<f64>>> {
                if !cfg.metrics.contains(&wanted) {
                    return HashMap::new();
                }
                windowed[time.index()]
                    .iter()
                    .map(|(comp, time)| {
                        let calls = windowed[count.index()].get(comp);
                        let per_call = time
                            .iter()
                            .enumerate()
                            .map(|(s, ms)| {
                                ms.iter()
                                    .enumerate()
                                    .map(|(w, ms)| {
                                        let n = calls.map_or(0.0, |c| c[s][w]);
                                        if n > 0.0 { ms * 1e3 / n } else { 0.0 }
                                    })
                                    .collect()
                            })
                            .collect();
                        (*comp, per_call)
                    })
                    .collect()
            };
        let latency = per_call(Metric::Time, Metric::Count, Metric::Latency);
        let syscall_latency = per_call(
            Metric::SyscallTime,
            Metric::Syscalls,
            Metric::SyscallLatency,
        );
        let file_latency = per_call(Metric::FileTime, Metric::FileIo, Metric::FileLatency);
        let block_latency = per_call(
            Metric::BlockTime,
            Metric::BlockRequests,
            Metric::BlockLatency,
        );
        // Traffic of the namespace that none of its servers' sockets carried
        // (components: received, sent, as in both sources).
        let net_foreign: HashMap<u32, Vec<Vec<f64>>> = if cfg.metrics.contains(&Metric::NetForeign)
        {
            let net = &windowed[Metric::NetBytes.index()];
            let socket = &windowed[Metric::SocketBytes.index()];
            net.iter()
                .map(|(comp, iface)| {
                    (
                        *comp,
                        foreign_bytes(iface, socket.get(comp), &self.netns_peers),
                    )
                })
                .collect()
        } else {
            HashMap::new()
        };
        let column = |m: Metric| -> &HashMap<u32, Vec<Vec<f64>>> {
            match m {
                Metric::NetForeign => &net_foreign,
                Metric::Latency => &latency,
                Metric::SyscallLatency => &syscall_latency,
                Metric::FileLatency => &file_latency,
                Metric::BlockLatency => &block_latency,
                _ => &windowed[m.index()],
            }
        };
        let peak = |m: Metric, comp: u32| -> f64 {
            windowed[m.index()].get(&comp).map_or(0.0, |per_server| {
                per_server.iter().flatten().copied().fold(0.0, f64::max)
            })
        };
        let samples_bar = cfg.samples_bar(self.sample_hz);
        let kept = |m: Metric| -> Vec<u32> {
            let n = self.names(m).len() as u32;
            let mut ids: Vec<u32> = match m {
                Metric::Samples => (0..n).filter(|c| peak(m, *c) >= samples_bar).collect(),
                Metric::Time => (0..n)
                    .filter(|c| peak(m, *c) >= cfg.scaled(cfg.min_time_ms))
                    .collect(),
                Metric::Count => (0..n)
                    .filter(|c| {
                        peak(Metric::Time, *c) >= cfg.scaled(cfg.min_time_ms)
                            || (cfg.min_calls > 0.0 && peak(m, *c) >= cfg.scaled(cfg.min_calls))
                    })
                    .collect(),
                // Functions that matter by time and are called often enough
                // for a mean per window to mean something.
                Metric::Latency => (0..n)
                    .filter(|c| {
                        peak(Metric::Time, *c) >= cfg.scaled(cfg.min_time_ms)
                            && peak(Metric::Count, *c) >= cfg.scaled(cfg.min_calls.max(1.0))
                    })
                    .collect(),
                Metric::Syscalls => (0..n)
                    .filter(|c| {
                        peak(Metric::SyscallTime, *c) >= cfg.scaled(cfg.min_time_ms)
                            || (cfg.min_calls > 0.0 && peak(m, *c) >= cfg.scaled(cfg.min_calls))
                    })
                    .collect(),
                // Time the server spent, not time it waited for a peer
                // (see `Metric::SyscallTime`).
                Metric::SyscallTime => (0..n)
                    .filter(|c| {
                        !waits_for_peer(&self.names(m)[*c as usize])
                            && peak(m, *c) >= cfg.scaled(cfg.min_time_ms)
                    })
                    .collect(),
                // Calls frequent enough for a mean per window; waits left
                // out (see `Metric::SyscallLatency`).
                Metric::SyscallLatency => (0..n)
                    .filter(|c| {
                        !is_wait(&self.names(m)[*c as usize])
                            && peak(Metric::Syscalls, *c) >= cfg.scaled(cfg.min_calls.max(1.0))
                    })
                    .collect(),
                // Few fixed components (classes, operations, counters):
                // all kept, so every server's vector has the same shape
                // whatever happened in training.
                Metric::Retransmits
                | Metric::SocketBytes
                | Metric::FileIo
                | Metric::FileTime
                | Metric::BlockRequests
                | Metric::BlockBytes
                | Metric::BlockTime
                | Metric::NetBytes
                | Metric::NetErrors
                | Metric::NetForeign
                | Metric::CpuWait => (0..n).collect(),
                // Means over enough calls (or requests) in a window.
                Metric::FileLatency => (0..n)
                    .filter(|c| peak(Metric::FileIo, *c) >= cfg.scaled(cfg.min_calls.max(1.0)))
                    .collect(),
                Metric::BlockLatency => (0..n)
                    .filter(|c| {
                        peak(Metric::BlockRequests, *c) >= cfg.scaled(cfg.min_calls.max(1.0))
                    })
                    .collect(),
            };
            // A stable order for reports and tests.
            ids.sort_by(|a, b| self.names(m)[*a as usize].cmp(&self.names(m)[*b as usize]));
            ids
        };
        let metrics = cfg
            .metrics
            .iter()
            .map(|m| {
                let ids = kept(*m);
                let zero = vec![vec![0.0; starts.len()]; self.servers.len()];
                let columns: Vec<&Vec<Vec<f64>>> = ids
                    .iter()
                    .map(|c| column(*m).get(c).unwrap_or(&zero))
                    .collect();
                let floor = match m {
                    Metric::Samples => Some(samples_bar.max(1.0)),
                    Metric::Time | Metric::SyscallTime | Metric::FileTime | Metric::BlockTime => {
                        Some(cfg.scaled(cfg.min_time_ms))
                    }
                    Metric::Latency
                    | Metric::SyscallLatency
                    | Metric::FileLatency
                    | Metric::BlockLatency => None,
                    _ => Some(cfg.scaled(cfg.min_calls).max(1.0)),
                }
                .filter(|_| cfg.normalize.contains(m));
                let vectors = (0..starts.len())
                    .map(|w| {
                        let mut v: Vec<Vec<f64>> = (0..self.servers.len())
                            .map(|s| columns.iter().map(|col| col[s][w]).collect())
                            .collect();
                        if let Some(floor) = floor {
                            normalize(&mut v, floor);
                        }
                        v
                    })
                    .collect();
                MetricVectors {
                    metric: *m,
                    components: ids
                        .iter()
                        .map(|c| self.names(*m)[*c as usize].clone())
                        .collect(),
                    vectors,
                    empty: ids.is_empty().then(|| self.why_empty(*m, cfg, &peak)),
                }
            })
            .collect();
        Windowed {
            starts,
            window_ns: cfg.window_ns,
            metrics,
            common_span: (start, end),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_sharing_a_namespace_on_one_host_are_peers_there() {
        // server0 and server2 share namespace 7 on host 0; server1 has the
        // same namespace number on another host; server3 has none known.
        let peers = netns_peers(4, &[(0, 7, 0), (1, 7, 1), (0, 7, 2)]);
        assert_eq!(peers, vec![vec![0, 2], vec![1], vec![0, 2], vec![3]]);
    }

    #[test]
    fn foreign_bytes_leave_out_the_sockets_of_every_server_in_the_namespace() {
        // Two windows; server0 and server1 share a namespace (both read its
        // counters: 1000 and 300 bytes), server2 is alone.
        let iface = vec![vec![1000.0, 300.0], vec![1000.0, 300.0], vec![500.0, 80.0]];
        let socket = vec![vec![30.0, 100.0], vec![20.0, 250.0], vec![100.0, 90.0]];
        let peers = vec![vec![0, 1], vec![0, 1], vec![2]];
        let foreign = foreign_bytes(&iface, Some(&socket), &peers);
        // 1000 − (30 + 20), less the slack on the most the namespace's own
        // sockets moved in this window or the next (100 + 250);
        // 300 − (100 + 250) is below 0: none foreign.
        let slack = FOREIGN_SLACK * 350.0;
        assert_eq!(foreign[0], vec![1000.0 - 50.0 - slack, 0.0]);
        assert_eq!(foreign[1], foreign[0]);
        assert_eq!(foreign[2], vec![500.0 - 100.0 - FOREIGN_SLACK * 100.0, 0.0]);
        // No socket bytes at all: every interface byte is foreign.
        assert_eq!(foreign_bytes(&iface, None, &peers), iface);
    }

    /// Bytes a socket call handed over in one window can cross the
    /// interface in the next (send buffers, the shaper), and bytes that
    /// arrived at the end of a window are read in the next: steady traffic
    /// whose counters lag the socket calls by a few percent is no foreign
    /// traffic, in the window the bytes queued or the one they drained in;
    /// another sender on top of it is.
    #[test]
    fn queued_bytes_of_its_own_sockets_are_not_foreign() {
        let own = 80e6;
        // 3% of a window's bytes cross the interface a window late.
        let lag = 0.03 * own;
        let socket = vec![vec![own, own, own, 0.0]];
        let iface = vec![vec![own - lag, own, own, lag]];
        let foreign = foreign_bytes(&iface, Some(&socket), &[vec![0]]);
        assert_eq!(foreign, vec![vec![0.0; 4]]);
        // A hog adding 20 MB to the third window.
        let hogged = vec![vec![own - lag, own, own + 20e6, lag]];
        let foreign = foreign_bytes(&hogged, Some(&socket), &[vec![0]]);
        assert_eq!(foreign[0][2], 20e6 - FOREIGN_SLACK * own);
        assert!(foreign[0][2] > 10e6);
    }

    #[test]
    fn waits_are_told_from_service_calls() {
        for wait in [
            "epoll_wait",
            "epoll_pwait",
            "poll",
            "ppoll",
            "select",
            "pselect6",
        ] {
            assert!(is_wait(wait), "{wait}");
        }
        for call in [
            "readv",
            "writev",
            "recvmsg",
            "sendto",
            "accept4",
            "syscall_999",
        ] {
            assert!(!is_wait(call), "{call}");
        }
        // Time spent waiting for a peer, left out of syscall-time; sends,
        // connects and closes are the server's own.
        for call in [
            "read",
            "readv",
            "recvfrom",
            "recvmsg",
            "recvmmsg",
            "accept",
            "accept4",
            "poll",
            "epoll_wait",
        ] {
            assert!(waits_for_peer(call), "{call}");
        }
        for call in ["write", "writev", "sendto", "sendmsg", "connect", "close"] {
            assert!(!waits_for_peer(call), "{call}");
        }
    }

    /// Totals 10, 20, 30, 100: the median is 25, so every component is
    /// scaled by 100/25 = 4; with a floor of 50 the scale is 100/50 = 2.
    #[test]
    fn normalize_scales_to_percent_of_the_median_total() {
        let v = || {
            vec![
                vec![5.0, 5.0],
                vec![20.0, 0.0],
                vec![10.0, 20.0],
                vec![100.0, 0.0],
            ]
        };
        let mut a = v();
        normalize(&mut a, 1.0);
        assert_eq!(a[0], vec![20.0, 20.0]);
        assert_eq!(a[3], vec![400.0, 0.0]);
        let mut b = v();
        normalize(&mut b, 50.0);
        assert_eq!(b[2], vec![20.0, 40.0]);
        let mut idle = vec![vec![0.0], vec![0.0], vec![0.0]];
        normalize(&mut idle, 0.0);
        assert_eq!(idle, vec![vec![0.0]; 3], "no division by zero");
    }

    fn ends(by: Option<usize>, to: Option<usize>) -> RetransmitEnds {
        RetransmitEnds { by, to }
    }

    /// Per server, [by, to] after blame.
    fn charged(list: &[RetransmitEnds], servers: usize) -> Vec<[f64; 2]> {
        let mut out = vec![[0.0; 2]; servers];
        for (r, (by, to)) in list.iter().zip(blame(list, servers)) {
            if let Some(s) = r.by {
                out[s][0] += by;
            }
            if let Some(s) = r.to {
                out[s][1] += to;
            }
        }
        out
    }

    /// Server 1 is lossy: servers 0 and 2 replicate to it and retransmit
    /// on their own sockets, it retransmits back to them, and a client's
    /// retransmissions go to it. Nearly all of them are charged to server
    /// 1, the end they share; servers 0, 2 and 3 next to nothing, and each
    /// retransmission is charged once in all.
    #[test]
    fn retransmissions_between_servers_are_charged_to_the_end_they_share() {
        let mut list = Vec::new();
        list.extend(std::iter::repeat_n(ends(Some(0), Some(1)), 40));
        list.extend(std::iter::repeat_n(ends(Some(2), Some(1)), 30));
        list.extend(std::iter::repeat_n(ends(Some(1), Some(0)), 10));
        list.extend(std::iter::repeat_n(ends(Some(1), Some(2)), 5));
        list.extend(std::iter::repeat_n(ends(None, Some(1)), 3));
        let c = charged(&list, 4);
        let total: f64 = c.iter().map(|x| x[0] + x[1]).sum();
        assert!((total - 88.0).abs() < 1e-9, "{c:?}");
        assert!(c[1][0] + c[1][1] > 0.97 * 88.0, "{c:?}");
        for s in [0, 2] {
            assert!(c[s][0] + c[s][1] < 1.0, "server {s}: {c:?}");
        }
        assert_eq!(c[3], [0.0, 0.0]);
    }

    /// Two servers whose only retransmissions are with each other share
    /// them; a healthy server's few background retransmissions with a
    /// client do not make it the culprit of a lossy peer that retransmits
    /// with the client far more (seen on MooseFS: 551 between servers 1
    /// and 2, 25 of server 1 and 151 of server 2 with others); a client's
    /// retransmission stays with its one placed end.
    #[test]
    fn a_path_is_split_by_what_its_ends_retransmit_with_anyone_else() {
        let list = vec![ends(Some(0), Some(1)), ends(Some(1), Some(0))];
        assert_eq!(charged(&list, 3), vec![[0.5, 0.5], [0.5, 0.5], [0.0; 2]]);
        let mut list = Vec::new();
        list.extend(std::iter::repeat_n(ends(Some(0), Some(1)), 551));
        list.extend(std::iter::repeat_n(ends(Some(0), None), 25));
        list.extend(std::iter::repeat_n(ends(None, Some(1)), 144));
        list.extend(std::iter::repeat_n(ends(Some(1), Some(2)), 7));
        let c = charged(&list, 4);
        let sum = |s: usize| c[s][0] + c[s][1];
        assert!(sum(1) > 4.0 * sum(0), "{c:?}");
        assert!(sum(2) < 1.0, "{c:?}");
        let list = vec![ends(Some(2), None), ends(None, Some(0))];
        assert_eq!(charged(&list, 3), vec![[0.0, 1.0], [0.0; 2], [1.0, 0.0]]);
        assert!(charged(&[], 2).iter().all(|c| *c == [0.0; 2]));
    }
}
