//! The kernel's view, written into the capture every stats interval: the
//! increase of the file and block I/O counters the eBPF side keeps
//! ([`FileIo`], [`BlockIo`] records), the network counters of each traced
//! process's network namespace as `/proc/PID/net/{dev,snmp,netstat}` show
//! them ([`NetDev`], [`NetSnmp`]), and the name of every device those
//! records mention ([`DeviceName`]). Everything read from `/proc` and `/sys`
//! is bounded in size; a file that cannot be read is skipped.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    io::Read as _,
    path::Path,
};

use tracer_common::{
    kernel::{
        BlockAgg, BlockIo, BlockKey, DeviceName, FileAgg, FileIo, FileKey, LATENCY_BUCKETS,
        NET_SNMP_COUNTERS, NetAddr, NetDev, NetSnmp, dev_parts,
    },
    record::{Header, Pod as _, kind},
};

use crate::{loader::Loaded, procfs, record::RecordError, sink::Sink};

/// Largest `/proc` or `/sys` file read here (a namespace with thousands of
/// interfaces or mounts is cut, not read without bound).
const MAX_PROC_BYTES: u64 = 1 << 20;

/// Reads at most [`MAX_PROC_BYTES`] of `path` as text.
fn read_bounded(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_PROC_BYTES).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// What is recorded besides the ring's records.
#[derive(Debug, Clone, Copy)]
pub struct KernelStatsConfig {
    /// File I/O counters.
    pub files: bool,
    /// Block request counters.
    pub block: bool,
    /// Network namespace counters.
    pub net: bool,
}

/// Turns the kernel's cumulative counters into per-interval records.
#[derive(Debug)]
pub struct KernelStats {
    config: KernelStatsConfig,
    files: HashMap<FileKey, FileAgg>,
    blocks: HashMap<BlockKey, BlockAgg>,
    since_ns: u64,
    /// Devices named in the current capture file.
    named: HashSet<u32>,
    /// Local addresses of each network namespace, as last written.
    addrs: HashMap<u64, Vec<(u16, [u8; 16])>>,
}

impl KernelStats {
    /// Starts counting intervals at `now_ns`.
    pub fn new(config: KernelStatsConfig, now_ns: u64) -> Self {
        Self {
            config,
            files: HashMap::new(),
            blocks: HashMap::new(),
            since_ns: now_ns,
            named: HashSet::new(),
            addrs: HashMap::new(),
        }
    }

    /// A new capture file: it names its devices and addresses again.
    pub fn new_file(&mut self) {
        self.named.clear();
        self.addrs.clear();
    }

    /// Writes the records of the interval ending at `now_ns`. `traced`: the
    /// live traced processes (their namespaces are read; the counters of
    /// processes that are gone are written a last time and forgotten).
    pub fn collect(
        &mut self,
        loaded: &mut Loaded,
        traced: &BTreeSet<u32>,
        now_ns: u64,
        sink: &mut Sink,
    ) -> Result<(), RecordError> {
        let since = self.since_ns;
        self.since_ns = now_ns;
        let mut files = Vec::new();
        let mut blocks = Vec::new();
        if self.config.files {
            for (key, now) in loaded.file_stats() {
                let before = self.files.get(&key).copied().unwrap_or_default();
                files.extend(file_delta(&key, &before, &now, since, now_ns));
                if traced.contains(&key.pid) || procfs::exists(key.pid) {
                    self.files.insert(key, now);
                } else {
                    self.files.remove(&key);
                    loaded.forget_file_key(&key);
                }
            }
        }
        if self.config.block {
            for (key, now) in loaded.block_stats() {
                let before = self.blocks.get(&key).copied().unwrap_or_default();
                blocks.extend(block_delta(&key, &before, &now, since, now_ns));
                if key.pid == 0 || procfs::exists(key.pid) {
                    self.blocks.insert(key, now);
                } else {
                    self.blocks.remove(&key);
                    loaded.forget_block_key(&key);
                }
            }
        }
        // Names first, so a reader knows a device before its first record.
        let devices = files
            .iter()
            .map(|r| (r.dev, r.header.pid))
            .chain(blocks.iter().map(|r| (r.dev, r.header.pid)));
        for (dev, pid) in devices {
            if dev != 0 && self.named.insert(dev) {
                let rec = device_name(dev, pid, now_ns);
                sink.push(rec.as_bytes(), &rec.header)?;
            }
        }
        for rec in &files {
            sink.push(rec.as_bytes(), &rec.header)?;
        }
        for rec in &blocks {
            sink.push(rec.as_bytes(), &rec.header)?;
        }
        if self.config.net {
            let mut seen = HashSet::new();
            for pid in traced {
                let Some(netns) = procfs::netns(*pid) else {
                    continue;
                };
                if !seen.insert(netns) {
                    continue;
                }
                let addrs = local_addresses(*pid);
                if self.addrs.get(&netns) != Some(&addrs) {
                    for (family, addr) in &addrs {
                        let rec = NetAddr {
                            header: header(kind::NET_ADDR, size_of::<NetAddr>(), *pid, now_ns),
                            netns,
                            family: *family,
                            _pad: [0; 6],
                            addr: *addr,
                        };
                        sink.push(rec.as_bytes(), &rec.header)?;
                    }
                    self.addrs.insert(netns, addrs);
                }
                for rec in net_records(*pid, netns, now_ns) {
                    match rec {
                        NetRecord::Dev(r) => sink.push(r.as_bytes(), &r.header)?,
                        NetRecord::Snmp(r) => sink.push(r.as_bytes(), &r.header)?,
                    }
                }
            }
        }
        Ok(())
    }
}

fn header(kind: u16, size: usize, pid: u32, ts_ns: u64) -> Header {
    Header {
        ts_ns,
        pid,
        tid: 0,
        kind,
        size: size as u16,
        cpu: 0,
    }
}

/// Histogram increase, each bucket's count in an interval (fits `u32`: no
/// CPU completes 4 G calls in one interval).
fn hist_delta(now: &[u64; LATENCY_BUCKETS], before: &[u64; LATENCY_BUCKETS]) -> [u32; 8] {
    let mut out = [0u32; LATENCY_BUCKETS];
    for (o, (n, b)) in out.iter_mut().zip(now.iter().zip(before)) {
        *o = u32::try_from(n.saturating_sub(*b)).unwrap_or(u32::MAX);
    }
    out
}

/// The file I/O record of `key` for an interval, `None` when no call ended.
pub fn file_delta(
    key: &FileKey,
    before: &FileAgg,
    now: &FileAgg,
    since_ns: u64,
    now_ns: u64,
) -> Option<FileIo> {
    let calls = now.calls.checked_sub(before.calls)?;
    if calls == 0 {
        return None;
    }
    Some(FileIo {
        header: header(kind::FILE_IO, size_of::<FileIo>(), key.pid, now_ns),
        since_ns,
        nr: key.nr,
        dev: key.dev,
        calls,
        errors: now.errors.saturating_sub(before.errors),
        bytes: now.bytes.saturating_sub(before.bytes),
        time_ns: now.time_ns.saturating_sub(before.time_ns),
        hist: hist_delta(&now.hist, &before.hist),
    })
}

/// The block record of `key` for an interval, `None` when no request ended.
pub fn block_delta(
    key: &BlockKey,
    before: &BlockAgg,
    now: &BlockAgg,
    since_ns: u64,
    now_ns: u64,
) -> Option<BlockIo> {
    let requests = now.requests.checked_sub(before.requests)?;
    if requests == 0 {
        return None;
    }
    Some(BlockIo {
        header: header(kind::BLOCK_IO, size_of::<BlockIo>(), key.pid, now_ns),
        since_ns,
        dev: key.dev,
        op: key.op,
        requests,
        errors: now.errors.saturating_sub(before.errors),
        bytes: now.bytes.saturating_sub(before.bytes),
        queue_ns: now.queue_ns.saturating_sub(before.queue_ns),
        service_ns: now.service_ns.saturating_sub(before.service_ns),
        hist: hist_delta(&now.hist, &before.hist),
    })
}

fn copy_cut(dst: &mut [u8], text: &str) {
    let n = text.len().min(dst.len());
    dst[..n].copy_from_slice(&text.as_bytes()[..n]);
}

/// The name record of kernel device `dev`: its block device name, or its
/// file system type when it has none, and where it is mounted (as process
/// `pid` sees the mounts, else as the recorder does).
fn device_name(dev: u32, pid: u32, now_ns: u64) -> DeviceName {
    let (major, minor) = dev_parts(dev);
    let uevent = read_bounded(Path::new(&format!("/sys/dev/block/{major}:{minor}/uevent")));
    let mountinfo = read_bounded(Path::new(&format!("/proc/{pid}/mountinfo")))
        .or_else(|| read_bounded(Path::new("/proc/self/mountinfo")));
    let mount = mountinfo.as_deref().and_then(|m| mount_of(m, major, minor));
    let name = uevent
        .as_deref()
        .and_then(devname)
        .map(str::to_string)
        .or_else(|| mount.as_ref().map(|(_, fstype)| fstype.clone()))
        .unwrap_or_else(|| format!("{major}:{minor}"));
    let mut rec = DeviceName {
        header: header(kind::DEVICE_NAME, size_of::<DeviceName>(), 0, now_ns),
        dev,
        ..DeviceName::default()
    };
    copy_cut(&mut rec.name, &name);
    if let Some((point, _)) = &mount {
        copy_cut(&mut rec.mount, point);
    }
    rec
}

/// `DEVNAME=` of a `/sys/dev/block/M:N/uevent` file.
pub fn devname(uevent: &str) -> Option<&str> {
    uevent.lines().find_map(|l| l.strip_prefix("DEVNAME="))
}

/// (mount point, file system type) of the first mount of device
/// `major:minor` in a `/proc/PID/mountinfo` text.
pub fn mount_of(mountinfo: &str, major: u32, minor: u32) -> Option<(String, String)> {
    let wanted = format!("{major}:{minor}");
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split(' ');
        let dev = fields.nth(2)?;
        if dev != wanted {
            return None;
        }
        let point = fields.nth(1)?;
        let (_, rest) = line.split_once(" - ")?;
        let fstype = rest.split(' ').next()?;
        Some((unescape(point), fstype.to_string()))
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match code {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

enum NetRecord {
    Dev(NetDev),
    Snmp(NetSnmp),
}

/// The records of network namespace `netns`, read through process `pid`.
fn net_records(pid: u32, netns: u64, now_ns: u64) -> Vec<NetRecord> {
    let mut out = Vec::new();
    let base = format!("/proc/{pid}/net");
    if let Some(text) = read_bounded(Path::new(&format!("{base}/dev"))) {
        for (name, counters) in parse_net_dev(&text) {
            let mut rec = NetDev {
                header: header(kind::NET_DEV, size_of::<NetDev>(), pid, now_ns),
                netns,
                counters,
                ..NetDev::default()
            };
            copy_cut(&mut rec.name, name);
            out.push(NetRecord::Dev(rec));
        }
    }
    let mut snmp = NetSnmp {
        header: header(kind::NET_SNMP, size_of::<NetSnmp>(), pid, now_ns),
        netns,
        ..NetSnmp::default()
    };
    for file in ["snmp", "netstat"] {
        if let Some(text) = read_bounded(Path::new(&format!("{base}/{file}"))) {
            fill_snmp(&text, &mut snmp);
        }
    }
    if snmp.present != 0 {
        out.push(NetRecord::Snmp(snmp));
    }
    out
}

/// The local addresses of the network namespace of `pid`: IPv4 from
/// `/proc/PID/net/fib_trie`, IPv6 from `/proc/PID/net/if_inet6`, sorted.
fn local_addresses(pid: u32) -> Vec<(u16, [u8; 16])> {
    let mut out = Vec::new();
    if let Some(text) = read_bounded(Path::new(&format!("/proc/{pid}/net/fib_trie"))) {
        for v4 in parse_fib_trie_local(&text) {
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&v4.octets());
            out.push((2, a));
        }
    }
    if let Some(text) = read_bounded(Path::new(&format!("/proc/{pid}/net/if_inet6"))) {
        for v6 in parse_if_inet6(&text) {
            out.push((10, v6.octets()));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The local IPv4 addresses in a `/proc/net/fib_trie` text: each leaf
/// (`|-- ADDR`) followed by a `/32 host LOCAL` route.
pub fn parse_fib_trie_local(text: &str) -> Vec<std::net::Ipv4Addr> {
    let mut out = Vec::new();
    let mut leaf = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(addr) = line.strip_prefix("|-- ") {
            leaf = addr.trim().parse().ok();
        } else if line.starts_with("/32 host LOCAL")
            && let Some(addr) = leaf
            && !out.contains(&addr)
        {
            out.push(addr);
        }
    }
    out
}

/// The addresses of a `/proc/net/if_inet6` text (32 hex digits first).
pub fn parse_if_inet6(text: &str) -> Vec<std::net::Ipv6Addr> {
    text.lines()
        .filter_map(|line| {
            let hex = line.split_whitespace().next()?;
            let v = u128::from_str_radix(hex, 16)
                .ok()
                .filter(|_| hex.len() == 32)?;
            Some(std::net::Ipv6Addr::from(v))
        })
        .collect()
}

/// Interfaces of a `/proc/net/dev` text: name and the counters of
/// [`tracer_common::kernel::NET_DEV_COUNTERS`] (receive bytes, packets,
/// errors, drops; transmit the same).
pub fn parse_net_dev(text: &str) -> Vec<(&str, [u64; 8])> {
    text.lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let values: Vec<u64> = rest
                .split_whitespace()
                .map(|v| v.parse().ok())
                .collect::<Option<_>>()?;
            if values.len() < 12 {
                return None;
            }
            let mut c = [0u64; 8];
            c[..4].copy_from_slice(&values[..4]);
            c[4..].copy_from_slice(&values[8..12]);
            Some((name.trim(), c))
        })
        .collect()
}

/// Sets the counters of [`NET_SNMP_COUNTERS`] found in a `/proc/net/snmp`
/// or `/proc/net/netstat` text (pairs of lines: `Proto: names...`, then
/// `Proto: values...`).
pub fn fill_snmp(text: &str, out: &mut NetSnmp) {
    let mut lines = text.lines();
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let (Some((proto, names)), Some((proto2, values))) =
            (names.split_once(':'), values.split_once(':'))
        else {
            continue;
        };
        if proto != proto2 {
            continue;
        }
        for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
            let Some(i) = NET_SNMP_COUNTERS
                .iter()
                .position(|(p, n)| *p == proto && *n == name)
            else {
                continue;
            };
            // Some counters are signed in the kernel's output (MaxConn -1);
            // the ones kept are not, but a bad value must not stop the rest.
            if let (Ok(v), Some(slot)) = (value.parse::<u64>(), out.values.get_mut(i)) {
                *slot = v;
                out.present |= 1 << i;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_dev_lines_give_receive_and_transmit_counters() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
            face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
            lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n\
            veth-s1@if7: 5000 50 1 2 0 0 0 0 7000 70 3 4 0 0 0 0\n\
            broken: 1 2 3\n";
        let parsed = parse_net_dev(text);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0], ("lo", [1000, 10, 0, 0, 1000, 10, 0, 0]));
        assert_eq!(parsed[1], ("veth-s1@if7", [5000, 50, 1, 2, 7000, 70, 3, 4]));
    }

    #[test]
    fn snmp_counters_are_found_by_section_and_name() {
        let snmp = "Ip: Forwarding DefaultTTL InReceives InHdrErrors InDiscards\n\
            Ip: 1 64 900 0 3\n\
            Tcp: RtoAlgorithm MaxConn ActiveOpens RetransSegs InSegs\n\
            Tcp: 1 -1 12 7 4000\n";
        let netstat = "TcpExt: SyncookiesSent TCPTimeouts\nTcpExt: 0 5\n";
        let mut rec = NetSnmp::default();
        fill_snmp(snmp, &mut rec);
        fill_snmp(netstat, &mut rec);
        let get = |proto: &str, name: &str| {
            let i = NET_SNMP_COUNTERS
                .iter()
                .position(|c| *c == (proto, name))
                .expect("kept counter");
            (rec.present & (1 << i) != 0).then_some(rec.values[i])
        };
        assert_eq!(get("Ip", "InReceives"), Some(900));
        assert_eq!(get("Ip", "InDiscards"), Some(3));
        assert_eq!(get("Tcp", "RetransSegs"), Some(7));
        assert_eq!(get("Tcp", "InSegs"), Some(4000));
        assert_eq!(get("TcpExt", "TCPTimeouts"), Some(5));
        assert_eq!(get("Udp", "InDatagrams"), None, "absent, not zero");
    }

    #[test]
    fn local_addresses_are_read_from_fib_trie_and_if_inet6() {
        let trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n\
            \x20    +-- 10.213.7.4/30 2 0 2\n        |-- 10.213.7.4\n           /32 link BROADCAST\n\
            \x20          /30 link UNICAST\n        |-- 10.213.7.6\n           /32 host LOCAL\n\
            Local:\n  +-- 127.0.0.0/8 2 0 2\n     |-- 127.0.0.1\n        /32 host LOCAL\n\
            \x20    |-- 10.213.7.6\n        /32 host LOCAL\n";
        let v4: Vec<String> = parse_fib_trie_local(trie)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(v4, vec!["10.213.7.6", "127.0.0.1"]);
        let inet6 = "00000000000000000000000000000001 01 80 10 80       lo\n\
            fe80000000000000b4a1fffffe000001 05 40 20 80   veth0\nbad line\n";
        let v6: Vec<String> = parse_if_inet6(inet6)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(v6, vec!["::1", "fe80::b4a1:ffff:fe00:1"]);
    }

    #[test]
    fn devices_are_named_from_uevent_and_mountinfo() {
        assert_eq!(
            devname("MAJOR=7\nMINOR=3\nDEVNAME=loop3\nDEVTYPE=disk\n"),
            Some("loop3")
        );
        let mountinfo = "22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
            97 30 7:3 / /srv/brick\\0403 rw,relatime shared:50 - ext4 /dev/loop3 rw\n";
        assert_eq!(
            mount_of(mountinfo, 7, 3),
            Some(("/srv/brick 3".to_string(), "ext4".to_string()))
        );
        assert_eq!(
            mount_of(mountinfo, 0, 21),
            Some(("/proc".to_string(), "proc".to_string()))
        );
        assert_eq!(mount_of(mountinfo, 8, 1), None);
    }

    #[test]
    fn deltas_are_the_increase_and_empty_intervals_write_nothing() {
        let key = FileKey {
            pid: 42,
            dev: 7 << 20,
            nr: 17,
            _pad: 0,
        };
        let before = FileAgg {
            calls: 10,
            errors: 1,
            bytes: 4096,
            time_ns: 1000,
            hist: [10, 0, 0, 0, 0, 0, 0, 0],
        };
        let mut now = before;
        assert_eq!(file_delta(&key, &before, &now, 5, 9), None);
        now.calls = 13;
        now.bytes += 3 * 4096;
        now.time_ns += 3_000_000;
        now.hist[4] = 3;
        let rec = file_delta(&key, &before, &now, 5, 9).expect("calls ended");
        assert_eq!((rec.calls, rec.errors, rec.bytes), (3, 0, 3 * 4096));
        assert_eq!((rec.time_ns, rec.hist[4], rec.hist[0]), (3_000_000, 3, 0));
        assert_eq!((rec.since_ns, rec.header.ts_ns, rec.header.pid), (5, 9, 42));
        assert_eq!(rec.header.size as usize, size_of::<FileIo>());
        // Counters that went down (a key re-created) write nothing wrong.
        assert_eq!(file_delta(&key, &now, &before, 5, 9), None);
        let bkey = BlockKey {
            dev: 7 << 20,
            pid: 0,
            op: 1,
            _pad: 0,
        };
        let b = BlockAgg {
            requests: 2,
            bytes: 8192,
            queue_ns: 50,
            service_ns: 40,
            ..BlockAgg::default()
        };
        let rec = block_delta(&bkey, &BlockAgg::default(), &b, 0, 1).expect("requests");
        assert_eq!(
            (rec.requests, rec.bytes, rec.queue_ns, rec.service_ns),
            (2, 8192, 50, 40)
        );
        assert_eq!(rec.header.kind, kind::BLOCK_IO);
    }
}
