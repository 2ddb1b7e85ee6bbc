//! What the eBPF programs and user space agree on.
//!
//! - [`record`]: the `#[repr(C)]` records the eBPF programs write into the ring
//!   buffer, byte for byte as they appear in a capture file.
//! - [`syscall`]: the x86-64 system calls that are traced, by number and class.
//! - [`stats`]: the per-CPU counters of everything the eBPF side failed to
//!   deliver (ring full, unreadable user memory, full maps).
//! - [`capture`] (feature `std`): the capture file ("captured rings"): header,
//!   checksummed chunks of raw records, and serde metadata.
//! - [`decode`] (feature `std`): reading a capture back: typed events,
//!   symbols from the capture's own tables, text and JSON rendering. It lives
//!   beside the format so that the root `tracer` needs no analysis code.
//! - [`live`] (feature `std`): the pipe between the agent and its
//!   unprivileged live analysis process.
//! - [`debugfile`] (feature `std`): where an object's separate debug file is
//!   (by build id, by `.gnu_debuglink`), for the tracer and the analyzer alike.
//!
//! Map and program names live here as constants so that the two sides cannot
//! drift apart.
#![cfg_attr(not(feature = "std"), no_std)]

pub mod record;
pub mod stats;
pub mod syscall;

#[cfg(feature = "std")]
pub mod capture;
#[cfg(feature = "std")]
pub mod debugfile;
#[cfg(feature = "std")]
pub mod decode;
#[cfg(feature = "std")]
pub mod live;

/// Names of the maps in the eBPF object.
pub mod maps {
    /// The one ring buffer all programs write records into.
    pub const EVENTS: &str = "EVENTS";
    /// Process ids (tgid) being traced: key tgid, value [`crate::TRACED_ROOT`] or [`crate::TRACED_CHILD`].
    pub const TRACED_PIDS: &str = "TRACED_PIDS";
    /// Socket file descriptors of traced processes: key `(tgid << 32) | fd`.
    pub const SOCKET_FDS: &str = "SOCKET_FDS";
    /// Forked processes whose inherited sockets user space has not copied
    /// yet: key tgid, value (parent tgid, pad, fork time) as 16 bytes.
    pub const PARENT: &str = "PARENT";
    /// System calls in progress: key tid, value [`crate::record::SyscallEnter`].
    pub const INFLIGHT: &str = "INFLIGHT";
    /// Per-CPU counters indexed by [`crate::stats::Stat`].
    pub const STATS: &str = "STATS";
    /// Argument specs of USDT probe sites, indexed by attach cookie:
    /// [`crate::record::UsdtSpec`].
    pub const USDT_SPECS: &str = "USDT_SPECS";
}

/// Names of the programs in the eBPF object.
pub mod programs {
    /// uprobe at a traced function's entry.
    pub const FUNC_ENTRY: &str = "func_entry";
    /// uretprobe at a traced function's return.
    pub const FUNC_RETURN: &str = "func_return";
    /// `syscalls:sys_enter_*` tracepoint, attached once per traced system call.
    pub const SYS_ENTER: &str = "sys_enter";
    /// `syscalls:sys_exit_*` tracepoint, attached once per traced system call.
    pub const SYS_EXIT: &str = "sys_exit";
    /// `sched:sched_process_fork`.
    pub const PROC_FORK: &str = "proc_fork";
    /// `sched:sched_process_exec`.
    pub const PROC_EXEC: &str = "proc_exec";
    /// `sched:sched_process_exit`.
    pub const PROC_EXIT: &str = "proc_exit";
    /// `tcp:tcp_retransmit_skb`.
    pub const TCP_RETRANSMIT: &str = "tcp_retransmit";
    /// perf cpu-clock sampling.
    pub const SAMPLE: &str = "sample";
    /// uprobe at a USDT probe site (attached through uprobe_multi links).
    pub const USDT: &str = "usdt";
    /// Empty uprobe, for overhead benchmarks.
    pub const EMPTY_ENTRY: &str = "empty_entry";
    /// Empty uretprobe, for overhead benchmarks.
    pub const EMPTY_RETURN: &str = "empty_return";
}

/// Names of the globals user space sets with `EbpfLoader::override_global`.
pub mod globals {
    /// u32: 1 to sample every process on the node, 0 for traced processes only.
    pub const SAMPLE_ALL: &str = "SAMPLE_ALL";
    /// u64: bytes pending in the ring above which a producer forces a wakeup.
    pub const WAKEUP_BYTES: &str = "WAKEUP_BYTES";
    /// u32: 1 to follow children of traced processes (fork).
    pub const FOLLOW_CHILDREN: &str = "FOLLOW_CHILDREN";
    /// [`crate::record::TracepointOffsets`]: field offsets read from tracefs formats.
    pub const TP_OFFSETS: &str = "TP_OFFSETS";
    /// u32: 1 to trace socket system calls.
    pub const TRACE_SYSCALLS: &str = "TRACE_SYSCALLS";
}

/// Value in [`maps::TRACED_PIDS`] for a process named by the user.
pub const TRACED_ROOT: u32 = 1;
/// Value in [`maps::TRACED_PIDS`] for a process followed because its parent was traced.
pub const TRACED_CHILD: u32 = 2;

/// Bit set in a uprobe's attach cookie when the entry record carries the first
/// six integer argument registers ([`record::FuncEntryArgs`]).
pub const COOKIE_ARGS: u64 = 1 << 32;
/// Bit set in the attach cookie of an enrolment probe (at an executable's
/// entry point, for `--exe`): the process hitting it becomes traced; no
/// record is written.
pub const COOKIE_ENROLL: u64 = 1 << 33;
/// Entries of [`maps::USDT_SPECS`]: the most USDT probe sites one recording attaches.
pub const USDT_MAX_SITES: u32 = 4096;

/// Bit set in a USDT site's attach cookie when the site is attached only to
/// hold a probe semaphore raised (see `tracer::usdt`): hits write nothing.
pub const COOKIE_USDT_SILENT: u64 = 1 << 32;

/// Mask of a uprobe's attach cookie that holds the function id.
pub const COOKIE_FUNC_MASK: u64 = 0xffff_ffff;
