//! The kernel's own view, which needs no symbols of the traced programs:
//! file I/O and block-layer aggregates, network-namespace counters, TCP
//! retransmissions with the socket they belong to, device names; and the
//! kernel struct offsets the eBPF programs read them with.
//!
//! File I/O system calls and block requests are counted in the kernel, in
//! per-CPU maps of cumulative counters ([`FileAgg`], [`BlockAgg`]); user
//! space reads them every stats interval and writes one record per key with
//! the increase since the previous interval ([`FileIo`], [`BlockIo`]), so a
//! record per call is never needed. Network counters are read by user space
//! from `/proc/PID/net/*` of each traced process's network namespace and
//! written as the kernel shows them, cumulative ([`NetDev`], [`NetSnmp`]).
//!
//! Layouts follow the rules of [`crate::record`]: `#[repr(C)]`, fixed-width
//! integers, explicit padding, sizes pinned below, little-endian.

use core::mem::size_of;

use crate::record::{Header, Pod, TcpRetransmit};

/// Buckets of the latency histograms ([`FileIo::hist`], [`BlockIo::hist`]).
pub const LATENCY_BUCKETS: usize = 8;

/// Upper bounds (exclusive) of the first seven latency buckets, ns: powers
/// of four from 4 µs to 16 ms (in units of 1.024 µs, cheap to compare); the
/// last bucket holds everything from 16.8 ms on.
pub const LATENCY_BOUNDS_NS: [u64; LATENCY_BUCKETS - 1] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
];

/// The histogram bucket of a latency of `ns` nanoseconds.
#[inline(always)]
pub const fn latency_bucket(ns: u64) -> usize {
    // Compares, not a loop: the eBPF verifier sees straight-line code.
    if ns < LATENCY_BOUNDS_NS[3] {
        if ns < LATENCY_BOUNDS_NS[0] {
            0
        } else if ns < LATENCY_BOUNDS_NS[1] {
            1
        } else if ns < LATENCY_BOUNDS_NS[2] {
            2
        } else {
            3
        }
    } else if ns < LATENCY_BOUNDS_NS[4] {
        4
    } else if ns < LATENCY_BOUNDS_NS[5] {
        5
    } else if ns < LATENCY_BOUNDS_NS[6] {
        6
    } else {
        7
    }
}

/// Classes of file I/O system calls ([`crate::syscall::Spec::file`]).
pub mod file_class {
    /// Not a file I/O call.
    pub const NONE: u8 = 0;
    /// Reads data: read, pread64, readv, preadv, preadv2, copy_file_range,
    /// sendfile (from its input file).
    pub const READ: u8 = 1;
    /// Writes data: write, pwrite64, writev, pwritev, pwritev2.
    pub const WRITE: u8 = 2;
    /// Makes data durable: fsync, fdatasync, sync_file_range, syncfs.
    pub const SYNC: u8 = 3;
    /// Metadata: open, close, stat, directory and link operations, extended
    /// attributes, truncate, fallocate.
    pub const META: u8 = 4;
    /// Asynchronous I/O submission and completion: io_submit,
    /// io_getevents, io_pgetevents, io_uring_enter.
    pub const ASYNC: u8 = 5;

    /// Short name of a class.
    pub const fn name(class: u8) -> &'static str {
        match class {
            READ => "read",
            WRITE => "write",
            SYNC => "sync",
            META => "metadata",
            ASYNC => "async",
            _ => "none",
        }
    }
}

/// Operations of block requests ([`BlockKey::op`], [`BlockIo::op`]).
pub mod block_op {
    /// A read.
    pub const READ: u32 = 0;
    /// A write.
    pub const WRITE: u32 = 1;
    /// A cache flush.
    pub const FLUSH: u32 = 2;
    /// A discard, secure erase or write of zeroes.
    pub const DISCARD: u32 = 3;
    /// Anything else (zone management, driver commands).
    pub const OTHER: u32 = 4;

    /// The operation of a request's `cmd_flags` (`REQ_OP_*` in its low 8 bits).
    #[inline(always)]
    pub const fn of_cmd_flags(flags: u32) -> u32 {
        match flags & 0xff {
            0 => READ,
            1 => WRITE,
            2 => FLUSH,
            3 | 5 | 9 => DISCARD,
            _ => OTHER,
        }
    }

    /// Short name of an operation.
    pub const fn name(op: u32) -> &'static str {
        match op {
            READ => "read",
            WRITE => "write",
            FLUSH => "flush",
            DISCARD => "discard",
            _ => "other",
        }
    }
}

/// A kernel `dev_t` (major in the bits above 20, minor in the low 20 bits)
/// as `(major, minor)`.
pub const fn dev_parts(dev: u32) -> (u32, u32) {
    (dev >> 20, dev & 0xf_ffff)
}

/// Key of the file I/O map: one process, system call and device, 16 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FileKey {
    /// Process id (tgid).
    pub pid: u32,
    /// Kernel `dev_t` of the file's file system (its block device for a
    /// block device file); 0 for calls that name a path, not a descriptor.
    pub dev: u32,
    /// System call number (x86-64).
    pub nr: u32,
    /// Padding, zero.
    pub _pad: u32,
}

/// Cumulative counters of one [`FileKey`] on one CPU (map value), 96 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileAgg {
    /// Calls completed.
    pub calls: u64,
    /// Of those, calls that returned an error.
    pub errors: u64,
    /// Bytes read or written (successful data calls).
    pub bytes: u64,
    /// Time in the calls, ns.
    pub time_ns: u64,
    /// Calls per latency bucket ([`latency_bucket`]).
    pub hist: [u64; LATENCY_BUCKETS],
}

/// File I/O system calls of one process on one device during one stats
/// interval, 104 bytes. Written by user space from the in-kernel counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileIo {
    /// Common header: `ts_ns` is the end of the interval, `pid` the process,
    /// `tid` 0, `cpu` 0.
    pub header: Header,
    /// Start of the interval, `CLOCK_MONOTONIC` ns.
    pub since_ns: u64,
    /// System call number (x86-64).
    pub nr: u32,
    /// Kernel `dev_t` of the file's file system, 0 for path-based calls.
    pub dev: u32,
    /// Calls completed in the interval.
    pub calls: u64,
    /// Of those, calls that returned an error.
    pub errors: u64,
    /// Bytes read or written.
    pub bytes: u64,
    /// Time in the calls, ns.
    pub time_ns: u64,
    /// Calls per latency bucket ([`LATENCY_BOUNDS_NS`]).
    pub hist: [u32; LATENCY_BUCKETS],
}

/// Key of the block I/O map: one device, submitter and operation, 16 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BlockKey {
    /// Kernel `dev_t` of the partition (or whole disk) the request is for.
    pub dev: u32,
    /// Process (tgid) that submitted the request, 0 for a kernel thread
    /// (page-cache writeback, a loop device's worker, journalling).
    pub pid: u32,
    /// One of the [`block_op`] constants.
    pub op: u32,
    /// Padding, zero.
    pub _pad: u32,
}

/// Cumulative counters of one [`BlockKey`] on one CPU (map value), 104 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockAgg {
    /// Requests completed.
    pub requests: u64,
    /// Of those, requests that completed with an error.
    pub errors: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Time from the request's creation (or issue, when its creation was not
    /// seen) to its completion, ns: queueing plus service.
    pub queue_ns: u64,
    /// Time from issue to the driver to completion, ns: service.
    pub service_ns: u64,
    /// Requests per latency bucket of `queue_ns`.
    pub hist: [u64; LATENCY_BUCKETS],
}

impl FileAgg {
    /// Adds `other`'s counters (another CPU's share) to these, saturating:
    /// the values come from the kernel.
    pub fn add(&mut self, other: &Self) {
        self.calls = self.calls.saturating_add(other.calls);
        self.errors = self.errors.saturating_add(other.errors);
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.time_ns = self.time_ns.saturating_add(other.time_ns);
        add_hist(&mut self.hist, &other.hist);
    }
}

impl BlockAgg {
    /// Adds `other`'s counters (another CPU's share) to these, saturating:
    /// the values come from the kernel.
    pub fn add(&mut self, other: &Self) {
        self.requests = self.requests.saturating_add(other.requests);
        self.errors = self.errors.saturating_add(other.errors);
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.queue_ns = self.queue_ns.saturating_add(other.queue_ns);
        self.service_ns = self.service_ns.saturating_add(other.service_ns);
        add_hist(&mut self.hist, &other.hist);
    }
}

fn add_hist(sum: &mut [u64; LATENCY_BUCKETS], other: &[u64; LATENCY_BUCKETS]) {
    for (s, x) in sum.iter_mut().zip(other) {
        *s = s.saturating_add(*x);
    }
}

/// A block request in flight (map value keyed by the `struct request`
/// address), 48 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockStart {
    /// When the request was created (or first seen), ns.
    pub start_ns: u64,
    /// When it was issued to the driver, ns; 0 before.
    pub issue_ns: u64,
    /// Its first bio when first seen: a request object is reused for later
    /// requests, and a different bio tells a new one from this one.
    pub bio: u64,
    /// Bytes at issue (after merges).
    pub bytes: u64,
    /// Submitter, as [`BlockKey::pid`].
    pub pid: u32,
    /// Device, as [`BlockKey::dev`].
    pub dev: u32,
    /// Operation, as [`BlockKey::op`].
    pub op: u32,
    /// Padding, zero.
    pub _pad: u32,
}

/// Block requests of one device, submitter and operation during one stats
/// interval, 112 bytes. Written by user space from the in-kernel counters.
/// Every recorder on a host counts every request of the host (the
/// submitter says whose it was).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockIo {
    /// Common header: `ts_ns` is the end of the interval, `pid` the
    /// submitter (0: a kernel thread), `tid` 0, `cpu` 0.
    pub header: Header,
    /// Start of the interval, `CLOCK_MONOTONIC` ns.
    pub since_ns: u64,
    /// Kernel `dev_t` of the partition or disk.
    pub dev: u32,
    /// One of the [`block_op`] constants.
    pub op: u32,
    /// Requests completed in the interval.
    pub requests: u64,
    /// Of those, requests that failed.
    pub errors: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Creation-to-completion time summed over the requests, ns.
    pub queue_ns: u64,
    /// Issue-to-completion time summed over the requests, ns.
    pub service_ns: u64,
    /// Requests per latency bucket of the creation-to-completion time.
    pub hist: [u32; LATENCY_BUCKETS],
}

/// Counters of one network interface, in `/proc/net/dev` order.
pub const NET_DEV_COUNTERS: [&str; 8] = [
    "rx_bytes",
    "rx_packets",
    "rx_errs",
    "rx_drop",
    "tx_bytes",
    "tx_packets",
    "tx_errs",
    "tx_drop",
];

/// One network interface of a traced process's network namespace, as
/// `/proc/PID/net/dev` showed it (cumulative since the interface came up),
/// 112 bytes. Written by user space every stats interval.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetDev {
    /// Common header: `ts_ns` when it was read, `pid` a traced process in the
    /// namespace, `tid` 0, `cpu` 0.
    pub header: Header,
    /// Inode number of the network namespace (`/proc/PID/ns/net`).
    pub netns: u64,
    /// Interface name, NUL-padded.
    pub name: [u8; 16],
    /// Counters named by [`NET_DEV_COUNTERS`].
    pub counters: [u64; 8],
}

/// Counters of a network namespace's IP, TCP and UDP stacks kept in
/// [`NetSnmp::values`]: (section of `/proc/net/snmp` or `/proc/net/netstat`,
/// field).
pub const NET_SNMP_COUNTERS: [(&str, &str); 20] = [
    ("Ip", "InReceives"),
    ("Ip", "InDiscards"),
    ("Ip", "OutRequests"),
    ("Ip", "OutDiscards"),
    ("Tcp", "ActiveOpens"),
    ("Tcp", "PassiveOpens"),
    ("Tcp", "AttemptFails"),
    ("Tcp", "EstabResets"),
    ("Tcp", "InSegs"),
    ("Tcp", "OutSegs"),
    ("Tcp", "RetransSegs"),
    ("Tcp", "InErrs"),
    ("Tcp", "OutRsts"),
    ("Udp", "InDatagrams"),
    ("Udp", "OutDatagrams"),
    ("Udp", "RcvbufErrors"),
    ("TcpExt", "TCPTimeouts"),
    ("TcpExt", "TCPLostRetransmit"),
    ("TcpExt", "ListenDrops"),
    ("TcpExt", "TCPFastRetrans"),
];

/// The IP, TCP and UDP counters of a traced process's network namespace, as
/// `/proc/PID/net/snmp` and `/proc/PID/net/netstat` showed them
/// (cumulative), 200 bytes. Written by user space every stats interval.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetSnmp {
    /// Common header, as in [`NetDev`].
    pub header: Header,
    /// Inode number of the network namespace.
    pub netns: u64,
    /// Bit `i` set when counter `i` of [`NET_SNMP_COUNTERS`] was found.
    pub present: u32,
    /// Padding, zero.
    pub _pad: u32,
    /// Counters named by [`NET_SNMP_COUNTERS`].
    pub values: [u64; 20],
}

/// A TCP retransmission with the socket it belongs to, 104 bytes: the
/// addresses of [`TcpRetransmit`] (whose `header.kind` is
/// [`crate::record::kind::TCP_RETRANSMIT_SOCK`]) and what identifies the
/// event and its owner. The header's pid and tid are whatever task the
/// retransmission interrupted (it fires in softirq or timer context).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpRetransmitSock {
    /// Addresses and ports.
    pub base: TcpRetransmit,
    /// Kernel address of the `struct sock`.
    pub sk: u64,
    /// Kernel address of the `struct sk_buff` retransmitted.
    pub skb: u64,
    /// The traced process (of this recorder) that last made a system call
    /// on the socket; 0 when none did while recording.
    pub owner: u32,
    /// Sequence number of the segment.
    pub seq: u32,
    /// The socket's count of retransmissions when this one happened (the
    /// kernel's own, so every recorder of a host reads the same value).
    pub total_retrans: u32,
    /// 0, or the `-errno` of a retransmission that failed to go out.
    pub err: i32,
    /// Inode number of the socket's network namespace.
    pub netns: u32,
    /// Padding, zero.
    pub _pad: u32,
}

impl core::ops::Deref for TcpRetransmitSock {
    type Target = TcpRetransmit;

    /// The addresses: `t.saddr`, `t.dport`... read as on a plain
    /// [`TcpRetransmit`].
    fn deref(&self) -> &TcpRetransmit {
        &self.base
    }
}

impl TcpRetransmitSock {
    /// What every recorder of a host reads alike for one retransmission (and
    /// differs between two): the socket, the buffer, its sequence number and
    /// the socket's retransmission count; `None` for a record of the older
    /// kind, which has none of them.
    pub fn identity(&self) -> Option<(u64, u64, u32, u32)> {
        (self.sk != 0).then_some((self.sk, self.skb, self.seq, self.total_retrans))
    }
}

/// The name of a device seen in [`FileIo`] or [`BlockIo`] records, 128
/// bytes, written by user space once per device and capture file.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceName {
    /// Common header (`pid`, `tid` and `cpu` 0).
    pub header: Header,
    /// Kernel `dev_t`.
    pub dev: u32,
    /// Padding, zero.
    pub _pad: u32,
    /// Block device name (`loop3`, `vda1`), or the file system type for a
    /// device-less file system (`tmpfs`, `proc`), NUL-padded.
    pub name: [u8; 32],
    /// Where it is mounted (the first mount point found), NUL-padded, cut.
    pub mount: [u8; 64],
}

impl Default for DeviceName {
    fn default() -> Self {
        Self {
            header: Header::default(),
            dev: 0,
            _pad: 0,
            name: [0; 32],
            mount: [0; 64],
        }
    }
}

/// A local address of a traced process's network namespace, 56 bytes,
/// written by user space with the namespace's first counters in each
/// capture file and again when its addresses change: which namespace (so
/// which server) an address of a retransmission belongs to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetAddr {
    /// Common header, as in [`NetDev`].
    pub header: Header,
    /// Inode number of the network namespace.
    pub netns: u64,
    /// `AF_INET` (2) or `AF_INET6` (10).
    pub family: u16,
    /// Padding, zero.
    pub _pad: [u8; 6],
    /// The address (IPv4 in the first 4 bytes), network order.
    pub addr: [u8; 16],
}

/// "Absent" in [`KernelOffsets`].
pub const NO_OFFSET: u32 = u32::MAX;

/// Byte offsets of the kernel struct fields the programs read, found by user
/// space in the kernel's BTF (`/sys/kernel/btf/vmlinux`) and passed as a
/// global, so no kernel layout is compiled in. [`NO_OFFSET`] means absent:
/// the programs that need the field are then not attached.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelOffsets {
    /// `task_struct.flags`.
    pub task_flags: u32,
    /// `task_struct.pid`.
    pub task_pid: u32,
    /// `task_struct.tgid`.
    pub task_tgid: u32,
    /// `task_struct.files`.
    pub task_files: u32,
    /// `files_struct.fdt`.
    pub files_fdt: u32,
    /// `fdtable.max_fds`.
    pub fdt_max_fds: u32,
    /// `fdtable.fd`.
    pub fdt_fd: u32,
    /// `file.f_inode`.
    pub file_inode: u32,
    /// `file.private_data` (the `struct socket` of a socket file).
    pub file_private_data: u32,
    /// `inode.i_mode`.
    pub inode_mode: u32,
    /// `inode.i_sb`.
    pub inode_sb: u32,
    /// `inode.i_rdev`.
    pub inode_rdev: u32,
    /// `super_block.s_dev`.
    pub sb_dev: u32,
    /// `socket.sk`.
    pub socket_sk: u32,
    /// `request.bio`.
    pub rq_bio: u32,
    /// `request.__data_len`.
    pub rq_data_len: u32,
    /// `request.cmd_flags`.
    pub rq_cmd_flags: u32,
    /// `request.q`.
    pub rq_q: u32,
    /// `request_queue.disk`.
    pub q_disk: u32,
    /// `gendisk.major`.
    pub disk_major: u32,
    /// `gendisk.first_minor`.
    pub disk_first_minor: u32,
    /// `bio.bi_bdev`.
    pub bio_bdev: u32,
    /// `block_device.bd_dev`.
    pub bdev_dev: u32,
    /// `sock.__sk_common.skc_daddr`.
    pub sk_daddr: u32,
    /// `sock.__sk_common.skc_rcv_saddr`.
    pub sk_rcv_saddr: u32,
    /// `sock.__sk_common.skc_dport` (network order).
    pub sk_dport: u32,
    /// `sock.__sk_common.skc_num` (host order).
    pub sk_num: u32,
    /// `sock.__sk_common.skc_family`.
    pub sk_family: u32,
    /// `sock.__sk_common.skc_state`.
    pub sk_state: u32,
    /// `sock.__sk_common.skc_v6_daddr`.
    pub sk_v6_daddr: u32,
    /// `sock.__sk_common.skc_v6_rcv_saddr`.
    pub sk_v6_rcv_saddr: u32,
    /// `sock.__sk_common.skc_net`.
    pub sk_net: u32,
    /// `net.ns.inum`.
    pub net_inum: u32,
    /// `sk_buff.cb` (where `tcp_skb_cb`, sequence number first, lives).
    pub skb_cb: u32,
    /// `tcp_skb_cb.seq`.
    pub tcp_cb_seq: u32,
    /// `tcp_sock.total_retrans`.
    pub tcp_total_retrans: u32,
    /// `task_struct.exit_code` (how an exiting task ends).
    pub task_exit_code: u32,
    /// `task_struct.mm` (the process's address space).
    pub task_mm: u32,
    /// `mm_struct.start_code` (the main executable's text starts here).
    pub mm_start_code: u32,
    /// `mm_struct.end_code` (and ends here).
    pub mm_end_code: u32,
}

impl KernelOffsets {
    /// Every offset absent.
    pub const ABSENT: Self = Self {
        task_flags: NO_OFFSET,
        task_pid: NO_OFFSET,
        task_tgid: NO_OFFSET,
        task_files: NO_OFFSET,
        files_fdt: NO_OFFSET,
        fdt_max_fds: NO_OFFSET,
        fdt_fd: NO_OFFSET,
        file_inode: NO_OFFSET,
        file_private_data: NO_OFFSET,
        inode_mode: NO_OFFSET,
        inode_sb: NO_OFFSET,
        inode_rdev: NO_OFFSET,
        sb_dev: NO_OFFSET,
        socket_sk: NO_OFFSET,
        rq_bio: NO_OFFSET,
        rq_data_len: NO_OFFSET,
        rq_cmd_flags: NO_OFFSET,
        rq_q: NO_OFFSET,
        q_disk: NO_OFFSET,
        disk_major: NO_OFFSET,
        disk_first_minor: NO_OFFSET,
        bio_bdev: NO_OFFSET,
        bdev_dev: NO_OFFSET,
        sk_daddr: NO_OFFSET,
        sk_rcv_saddr: NO_OFFSET,
        sk_dport: NO_OFFSET,
        sk_num: NO_OFFSET,
        sk_family: NO_OFFSET,
        sk_state: NO_OFFSET,
        sk_v6_daddr: NO_OFFSET,
        sk_v6_rcv_saddr: NO_OFFSET,
        sk_net: NO_OFFSET,
        net_inum: NO_OFFSET,
        skb_cb: NO_OFFSET,
        tcp_cb_seq: NO_OFFSET,
        tcp_total_retrans: NO_OFFSET,
        task_exit_code: NO_OFFSET,
        task_mm: NO_OFFSET,
        mm_start_code: NO_OFFSET,
        mm_end_code: NO_OFFSET,
    };

    /// Lifecycle from raw tracepoints: a task's pid (the fork's child).
    pub const fn has_task(&self) -> bool {
        self.task_pid != NO_OFFSET && self.task_tgid != NO_OFFSET
    }

    /// A descriptor's file, its type and device (file I/O, socket identity).
    pub const fn has_files(&self) -> bool {
        self.task_files != NO_OFFSET
            && self.files_fdt != NO_OFFSET
            && self.fdt_max_fds != NO_OFFSET
            && self.fdt_fd != NO_OFFSET
            && self.file_inode != NO_OFFSET
            && self.inode_mode != NO_OFFSET
            && self.inode_sb != NO_OFFSET
            && self.inode_rdev != NO_OFFSET
            && self.sb_dev != NO_OFFSET
    }

    /// A socket descriptor's `struct sock` (retransmission owners).
    pub const fn has_socket(&self) -> bool {
        self.has_files() && self.file_private_data != NO_OFFSET && self.socket_sk != NO_OFFSET
    }

    /// Block requests: device, size, operation, submitter.
    pub const fn has_block(&self) -> bool {
        self.task_flags != NO_OFFSET
            && self.rq_bio != NO_OFFSET
            && self.rq_data_len != NO_OFFSET
            && self.rq_cmd_flags != NO_OFFSET
            && self.rq_q != NO_OFFSET
            && self.q_disk != NO_OFFSET
            && self.disk_major != NO_OFFSET
            && self.disk_first_minor != NO_OFFSET
            && self.bio_bdev != NO_OFFSET
            && self.bdev_dev != NO_OFFSET
    }

    /// The main executable's text range (`task->mm->start_code/end_code`):
    /// whether a call came from the program or from a library.
    pub const fn has_code_range(&self) -> bool {
        self.task_mm != NO_OFFSET
            && self.mm_start_code != NO_OFFSET
            && self.mm_end_code != NO_OFFSET
    }

    /// A retransmission's addresses and identity from its `struct sock`.
    pub const fn has_tcp(&self) -> bool {
        self.sk_daddr != NO_OFFSET
            && self.sk_rcv_saddr != NO_OFFSET
            && self.sk_dport != NO_OFFSET
            && self.sk_num != NO_OFFSET
            && self.sk_family != NO_OFFSET
            && self.sk_state != NO_OFFSET
            && self.sk_v6_daddr != NO_OFFSET
            && self.sk_v6_rcv_saddr != NO_OFFSET
            && self.sk_net != NO_OFFSET
            && self.net_inum != NO_OFFSET
            && self.skb_cb != NO_OFFSET
            && self.tcp_cb_seq != NO_OFFSET
            && self.tcp_total_retrans != NO_OFFSET
    }
}

/// `S_IFMT` bits of an inode's mode.
pub mod mode {
    /// Mask of the type bits.
    pub const S_IFMT: u16 = 0o170000;
    /// A socket.
    pub const S_IFSOCK: u16 = 0o140000;
    /// A regular file.
    pub const S_IFREG: u16 = 0o100000;
    /// A block device.
    pub const S_IFBLK: u16 = 0o060000;
    /// A directory.
    pub const S_IFDIR: u16 = 0o040000;
}

/// `task_struct.flags` bit of a kernel thread.
pub const PF_KTHREAD: u32 = 0x0020_0000;

const _: () = assert!(size_of::<FileKey>() == 16);
const _: () = assert!(size_of::<FileAgg>() == 96);
const _: () = assert!(size_of::<FileIo>() == 104);
const _: () = assert!(size_of::<BlockKey>() == 16);
const _: () = assert!(size_of::<BlockAgg>() == 104);
const _: () = assert!(size_of::<BlockStart>() == 48);
const _: () = assert!(size_of::<BlockIo>() == 112);
const _: () = assert!(size_of::<NetDev>() == 112);
const _: () = assert!(size_of::<NetSnmp>() == 200);
const _: () = assert!(size_of::<TcpRetransmitSock>() == 104);
const _: () = assert!(size_of::<DeviceName>() == 128);
const _: () = assert!(size_of::<NetAddr>() == 56);
const _: () = assert!(size_of::<KernelOffsets>() == 160);

// SAFETY: each is repr(C), integers only, and the size assertions above show
// no implicit padding (explicit `_pad` fields fill the gaps).
unsafe impl Pod for FileKey {}
// SAFETY: as above.
unsafe impl Pod for FileAgg {}
// SAFETY: as above.
unsafe impl Pod for FileIo {}
// SAFETY: as above.
unsafe impl Pod for BlockKey {}
// SAFETY: as above.
unsafe impl Pod for BlockAgg {}
// SAFETY: as above.
unsafe impl Pod for BlockStart {}
// SAFETY: as above.
unsafe impl Pod for BlockIo {}
// SAFETY: as above.
unsafe impl Pod for NetDev {}
// SAFETY: as above.
unsafe impl Pod for NetSnmp {}
// SAFETY: as above.
unsafe impl Pod for TcpRetransmitSock {}
// SAFETY: as above.
unsafe impl Pod for DeviceName {}
// SAFETY: as above.
unsafe impl Pod for NetAddr {}

// SAFETY: repr(C), integers only, no implicit padding (size assertions above).
#[cfg(feature = "aya")]
unsafe impl aya::Pod for KernelOffsets {}
// SAFETY: as above.
#[cfg(feature = "aya")]
unsafe impl aya::Pod for FileKey {}
// SAFETY: as above.
#[cfg(feature = "aya")]
unsafe impl aya::Pod for FileAgg {}
// SAFETY: as above.
#[cfg(feature = "aya")]
unsafe impl aya::Pod for BlockKey {}
// SAFETY: as above.
#[cfg(feature = "aya")]
unsafe impl aya::Pod for BlockAgg {}

#[cfg(test)]
mod tests {
    use core::mem::offset_of;

    use super::*;

    #[test]
    fn per_cpu_shares_add_up_field_by_field() {
        let mut file = FileAgg {
            calls: 2,
            errors: 1,
            bytes: 10,
            time_ns: 100,
            hist: [1; LATENCY_BUCKETS],
        };
        let mut other = file;
        other.hist[3] = 5;
        other.bytes = u64::MAX;
        file.add(&other);
        assert_eq!((file.calls, file.errors, file.time_ns), (4, 2, 200));
        assert_eq!(file.bytes, u64::MAX, "saturates");
        assert_eq!((file.hist[0], file.hist[3]), (2, 6));
        let mut block = BlockAgg {
            requests: 1,
            errors: 0,
            bytes: 4096,
            queue_ns: 30,
            service_ns: 20,
            hist: [0; LATENCY_BUCKETS],
        };
        let other = BlockAgg {
            hist: [2; LATENCY_BUCKETS],
            ..block
        };
        block.add(&other);
        assert_eq!(
            (
                block.requests,
                block.bytes,
                block.queue_ns,
                block.service_ns
            ),
            (2, 8192, 60, 40)
        );
        assert_eq!(block.hist, [2; LATENCY_BUCKETS]);
    }

    #[test]
    fn offsets_are_pinned() {
        assert_eq!(offset_of!(FileIo, since_ns), 24);
        assert_eq!(offset_of!(FileIo, nr), 32);
        assert_eq!(offset_of!(FileIo, dev), 36);
        assert_eq!(offset_of!(FileIo, calls), 40);
        assert_eq!(offset_of!(FileIo, time_ns), 64);
        assert_eq!(offset_of!(FileIo, hist), 72);
        assert_eq!(offset_of!(BlockIo, dev), 32);
        assert_eq!(offset_of!(BlockIo, op), 36);
        assert_eq!(offset_of!(BlockIo, requests), 40);
        assert_eq!(offset_of!(BlockIo, service_ns), 72);
        assert_eq!(offset_of!(BlockIo, hist), 80);
        assert_eq!(offset_of!(NetDev, netns), 24);
        assert_eq!(offset_of!(NetDev, name), 32);
        assert_eq!(offset_of!(NetDev, counters), 48);
        assert_eq!(offset_of!(NetSnmp, present), 32);
        assert_eq!(offset_of!(NetSnmp, values), 40);
        assert_eq!(offset_of!(TcpRetransmitSock, sk), 64);
        assert_eq!(offset_of!(TcpRetransmitSock, skb), 72);
        assert_eq!(offset_of!(TcpRetransmitSock, owner), 80);
        assert_eq!(offset_of!(TcpRetransmitSock, total_retrans), 88);
        assert_eq!(offset_of!(TcpRetransmitSock, netns), 96);
        assert_eq!(offset_of!(DeviceName, name), 32);
        assert_eq!(offset_of!(DeviceName, mount), 64);
        assert_eq!(offset_of!(BlockStart, pid), 32);
        assert_eq!(offset_of!(NetAddr, family), 32);
        assert_eq!(offset_of!(NetAddr, addr), 40);
    }

    #[test]
    fn latency_buckets_split_at_their_bounds() {
        assert_eq!(latency_bucket(0), 0);
        assert_eq!(latency_bucket(4095), 0);
        for (i, bound) in LATENCY_BOUNDS_NS.iter().enumerate() {
            assert_eq!(latency_bucket(*bound - 1), i, "below bound {i}");
            assert_eq!(latency_bucket(*bound), i + 1, "at bound {i}");
        }
        assert_eq!(latency_bucket(u64::MAX), LATENCY_BUCKETS - 1);
    }

    #[test]
    fn block_operations_and_devices_decode() {
        assert_eq!(block_op::of_cmd_flags(0), block_op::READ);
        // A write with REQ_SYNC | REQ_FUA set above the operation bits.
        assert_eq!(
            block_op::of_cmd_flags(1 | (1 << 11) | (1 << 17)),
            block_op::WRITE
        );
        assert_eq!(block_op::of_cmd_flags(2), block_op::FLUSH);
        assert_eq!(block_op::of_cmd_flags(9), block_op::DISCARD);
        assert_eq!(block_op::of_cmd_flags(35), block_op::OTHER);
        assert_eq!(dev_parts((7 << 20) | 3), (7, 3));
        assert_eq!(dev_parts((259 << 20) | 65_536), (259, 65_536));
    }

    #[test]
    fn a_retransmission_is_identified_only_with_its_socket() {
        let mut t = TcpRetransmitSock::default();
        assert_eq!(t.identity(), None);
        t.sk = 0xffff_8880_0000_1000;
        t.skb = 0xffff_8880_0000_2000;
        t.seq = 7;
        t.total_retrans = 3;
        assert_eq!(t.identity(), Some((t.sk, t.skb, 7, 3)));
        t.base.sport = 80;
        assert_eq!(t.sport, 80, "addresses read through Deref");
    }
}
