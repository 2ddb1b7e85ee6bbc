//! What the eBPF programs and user space agree on.
//!
//! - [`record`]: the `#[repr(C)]` records the eBPF programs write into the ring
//!   buffer, byte for byte as they appear in a capture file.
//! - [`syscall`]: the x86-64 system calls that are traced, by number and class.
//! - [`kernel`]: records of the kernel's own view (file and block I/O
//!   aggregates, network-namespace counters, retransmissions with their
//!   socket) and the kernel struct offsets the programs read them with.
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
//! - `testprog` (feature `test-support`, tests only): a stripped C program
//!   and its debug file, built with gcc and binutils.
//!
//! Map and program names live here as constants so that the two sides cannot
//! drift apart.
#![cfg_attr(not(feature = "std"), no_std)]

pub mod kernel;
pub mod record;
pub mod stats;
pub mod syscall;

#[cfg(feature = "std")]
pub mod capture;
#[cfg(feature = "cfi")]
pub mod cfi;
#[cfg(feature = "std")]
pub mod debugfile;
#[cfg(feature = "std")]
pub mod decode;
#[cfg(feature = "std")]
pub mod live;
#[cfg(feature = "test-support")]
pub mod testprog;

/// Names of the maps in the eBPF object.
pub mod maps {
    /// The one ring buffer all programs write records into.
    pub const EVENTS: &str = "EVENTS";
    /// Process ids (tgid) being traced: key tgid, value [`crate::TRACED_ROOT`] or [`crate::TRACED_CHILD`].
    pub const TRACED_PIDS: &str = "TRACED_PIDS";
    /// The keys of [`TRACED_PIDS`] as a bitmap of [`crate::TRACED_BITS_WORDS`]
    /// `u64` words, shared with user space through `mmap`.
    pub const TRACED_BITS: &str = "TRACED_BITS";
    /// Socket file descriptors of traced processes: key `(tgid << 32) | fd`.
    pub const SOCKET_FDS: &str = "SOCKET_FDS";
    /// Forked processes whose inherited sockets user space has not copied
    /// yet: key tgid, value (parent tgid, pad, fork time) as 16 bytes.
    pub const PARENT: &str = "PARENT";
    /// Sockets of traced processes closed lately: key `(tgid << 32) | fd`,
    /// value the close's time (`CLOCK_MONOTONIC` ns).
    pub const CLOSED: &str = "CLOSED";
    /// Each traced thread's system call in progress and where it entered
    /// its last call (any call, not only traced ones): key tid, value
    /// [`crate::record::ThreadCall`].
    pub const INFLIGHT: &str = "INFLIGHT";
    /// Per-CPU counters indexed by [`crate::stats::Stat`].
    pub const STATS: &str = "STATS";
    /// Argument specs of USDT probe sites, indexed by attach cookie:
    /// [`crate::record::UsdtSpec`].
    pub const USDT_SPECS: &str = "USDT_SPECS";
    /// File I/O counters (per CPU): [`crate::kernel::FileKey`] →
    /// [`crate::kernel::FileAgg`].
    pub const FILE_STATS: &str = "FILE_STATS";
    /// Block I/O counters (per CPU): [`crate::kernel::BlockKey`] →
    /// [`crate::kernel::BlockAgg`].
    pub const BLOCK_STATS: &str = "BLOCK_STATS";
    /// Hits of each function probe by traced processes (per CPU), indexed by
    /// function id up to [`crate::FUNC_HITS_ENTRIES`]: what the overhead
    /// budget weighs.
    pub const FUNC_HITS: &str = "FUNC_HITS";
    /// One `u32`: the generation of function-probe links whose hits are
    /// recorded ([`crate::COOKIE_GEN`]); the budget switches it when it
    /// replaces the probe set.
    pub const FUNC_GEN: &str = "FUNC_GEN";
}

/// Names of the programs in the eBPF object.
pub mod programs {
    /// uprobe at a traced function's entry.
    pub const FUNC_ENTRY: &str = "func_entry";
    /// uretprobe at a traced function's return.
    pub const FUNC_RETURN: &str = "func_return";
    /// Raw tracepoint `sys_enter` (every system call of the node).
    pub const SYS_ENTER: &str = "sys_enter";
    /// Raw tracepoint `sys_exit`.
    pub const SYS_EXIT: &str = "sys_exit";
    /// `sched:sched_process_fork` (perf tracepoint: kernels without BTF).
    pub const PROC_FORK: &str = "proc_fork";
    /// `sched:sched_process_exec` (perf tracepoint: kernels without BTF).
    pub const PROC_EXEC: &str = "proc_exec";
    /// `sched:sched_process_exit` (perf tracepoint: kernels without BTF).
    pub const PROC_EXIT: &str = "proc_exit";
    /// Raw tracepoint `sched_process_fork`.
    pub const RAW_PROC_FORK: &str = "raw_proc_fork";
    /// Raw tracepoint `sched_process_exec`.
    pub const RAW_PROC_EXEC: &str = "raw_proc_exec";
    /// Raw tracepoint `sched_process_exit`.
    pub const RAW_PROC_EXIT: &str = "raw_proc_exit";
    /// `tcp:tcp_retransmit_skb` (perf tracepoint: kernels without BTF).
    pub const TCP_RETRANSMIT: &str = "tcp_retransmit";
    /// Raw tracepoint `tcp_retransmit_skb`, with the socket's identity.
    pub const RAW_TCP_RETRANSMIT: &str = "raw_tcp_retransmit";
    /// Raw tracepoint `block_io_start` (a request is created from a bio).
    pub const BLOCK_IO_START: &str = "block_io_start";
    /// Raw tracepoint `block_rq_issue`.
    pub const BLOCK_RQ_ISSUE: &str = "block_rq_issue";
    /// Raw tracepoint `block_rq_complete`.
    pub const BLOCK_RQ_COMPLETE: &str = "block_rq_complete";
    /// perf cpu-clock sampling.
    pub const SAMPLE: &str = "sample";
    /// uprobe at a USDT probe site (attached through uprobe_multi links).
    pub const USDT: &str = "usdt";
    /// Empty uprobe, for overhead benchmarks.
    pub const EMPTY_ENTRY: &str = "empty_entry";
    /// Empty uretprobe, for overhead benchmarks.
    pub const EMPTY_RETURN: &str = "empty_return";
    /// Empty `sys_enter` raw tracepoint, for overhead benchmarks.
    pub const EMPTY_SYS_ENTER: &str = "empty_sys_enter";
    /// Empty `sys_exit` raw tracepoint, for overhead benchmarks.
    pub const EMPTY_SYS_EXIT: &str = "empty_sys_exit";
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
    /// u32: 1 to count file I/O system calls.
    pub const TRACE_FILES: &str = "TRACE_FILES";
    /// u32: 1 to keep where each thread entered its system call (the
    /// `blocked` part of `INFLIGHT`), 0 to skip it (an ablation: what the
    /// blocked-thread entry costs).
    pub const BLOCKED_THREADS: &str = "BLOCKED_THREADS";
    /// [`crate::kernel::KernelOffsets`]: kernel struct offsets from BTF.
    pub const KERNEL_OFFSETS: &str = "KERNEL_OFFSETS";
}

/// Words of the `TRACED_BITS` bitmap: one bit per pid up to the kernel's
/// largest `pid_max` (4 M, `PID_MAX_LIMIT` on 64-bit), 512 KiB.
pub const TRACED_BITS_WORDS: u32 = (4 << 20) / 64;

/// Value in [`maps::TRACED_PIDS`] for a process named by the user.
pub const TRACED_ROOT: u32 = 1;
/// Value in [`maps::TRACED_PIDS`] for a process followed because its parent was traced.
pub const TRACED_CHILD: u32 = 2;

/// Bit set in a uprobe's attach cookie when the entry record carries the first
/// six integer argument registers ([`record::FuncEntryArgs`]).
pub const COOKIE_ARGS: u64 = 1 << 32;
/// Bit set in the attach cookie of an enrolment probe (at an executable's
/// entry point, for `--exe`): the process hitting it becomes traced, and a
/// [`record::Enroll`] says so, with the target's index in the cookie's
/// [`COOKIE_FUNC_MASK`] bits.
pub const COOKIE_ENROLL: u64 = 1 << 33;
/// Entries of [`maps::USDT_SPECS`]: the most USDT probe sites one recording attaches.
pub const USDT_MAX_SITES: u32 = 4096;

/// Bit set in a USDT site's attach cookie when the site is attached only to
/// hold a probe semaphore raised (see `tracer::usdt`): hits write nothing.
pub const COOKIE_USDT_SILENT: u64 = 1 << 32;

/// Bit set in the attach cookie of a function probe of generation 1 (clear:
/// generation 0). A hit is recorded only when its generation is the one in
/// [`maps::FUNC_GEN`], so a new probe set can be attached before the old
/// one is detached without recording a call twice.
pub const COOKIE_GEN: u64 = 1 << 34;
/// Bit set in the attach cookie of the overhead calibration probe (on a
/// function of the tracer's own): the program does all its work for every
/// process and then discards the record.
pub const COOKIE_CALIBRATE: u64 = 1 << 35;
/// Entries of [`maps::FUNC_HITS`]: probes with larger ids are not counted.
pub const FUNC_HITS_ENTRIES: u32 = 1 << 16;

/// Mask of a uprobe's attach cookie that holds the function id.
pub const COOKIE_FUNC_MASK: u64 = 0xffff_ffff;
