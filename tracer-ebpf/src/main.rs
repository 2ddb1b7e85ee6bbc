//! eBPF programs of the tracer. Each program is a thin entry point around a
//! `try_` body; every failure path bumps a counter in [`STATS`] so that user
//! space can report what was lost. Records are laid out in `tracer-common`.
#![no_std]
#![no_main]
// Atomic bit operations on map values (BPF_ATOMIC or/and): core's atomic
// types have no read-modify-write for this target.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod block;
mod files;
mod func;
mod kernel;
mod lifecycle;
mod sample;
mod syscalls;
mod tcp;
mod usdt;

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
};
use tracer_common::{
    kernel::{BlockAgg, BlockKey, BlockStart, FileAgg, FileKey, KernelOffsets},
    record::{Header, ThreadCall, TracepointOffsets},
    stats::{STAT_COUNT, Stat},
};

/// The one ring buffer; user space overrides its size (`--ring-size`).
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(4 << 20, 0);

/// Traced processes by tgid.
#[map]
static TRACED_PIDS: HashMap<u32, u32> = HashMap::with_max_entries(32768, 0);

/// The keys of `TRACED_PIDS` as a bitmap (bit `pid % 64` of word `pid /
/// 64`, every pid up to the kernel's limit of 4 M): the first test every
/// system call of the node makes, an array load the verifier inlines where
/// a hash lookup costs tens of ns. Set and cleared atomically, here and by
/// user space (through a shared mapping), with every insert and removal.
#[map]
static TRACED_BITS: Array<u64> = Array::with_max_entries(
    tracer_common::TRACED_BITS_WORDS,
    aya_ebpf::bindings::BPF_F_MMAPABLE,
);

/// Socket fds of traced processes, key `(tgid << 32) | fd`, value the
/// socket's `struct sock` address once looked up (1 before). LRU: a leaked
/// entry (fd closed by a path we do not see, e.g. dup2 over it) ages out.
#[map]
static SOCKET_FDS: LruHashMap<u64, u64> = LruHashMap::with_max_entries(65536, 0);

/// The traced process that last made a system call on each socket, by
/// `struct sock` address: whose a retransmission is.
#[map]
static SOCK_OWNER: LruHashMap<u64, u32> = LruHashMap::with_max_entries(16384, 0);

/// File I/O counters of traced processes (cumulative, per CPU; user space
/// writes the increase every stats interval). Allocated as keys appear.
#[map]
static FILE_STATS: PerCpuHashMap<FileKey, FileAgg> =
    PerCpuHashMap::with_max_entries(8192, aya_ebpf::bindings::BPF_F_NO_PREALLOC);

/// Block request counters of the node (cumulative, per CPU).
#[map]
static BLOCK_STATS: PerCpuHashMap<BlockKey, BlockAgg> =
    PerCpuHashMap::with_max_entries(4096, aya_ebpf::bindings::BPF_F_NO_PREALLOC);

/// Block requests in flight, by `struct request` address. blk-mq's requests
/// are preallocated and their addresses used again and again: an entry is
/// written in place by the next request at its address and marked done
/// (`start_ns` 0) at completion, never inserted and deleted per request
/// (a hash insert and delete cost more than the rest of the programs'
/// work). A request whose completion was never seen (a flush sequence's
/// internal request) is recognised as reused by its bio. LRU: inserts are
/// only for addresses not seen before, and the addresses of devices gone
/// age out.
#[map]
static BLOCK_INFLIGHT: LruHashMap<u64, BlockStart> = LruHashMap::with_max_entries(8192, 0);

/// Parent process of each process forked by a traced one: a child's
/// inherited sockets are its ancestors' (checked on first use).
#[map]
static PARENT: LruHashMap<u32, Forked> = LruHashMap::with_max_entries(32768, 0);

/// When each socket of a traced process was closed: a child forked before
/// the close inherited it even if the parent closed it before the child's
/// first use (a launcher closes its end of a socketpair right after fork).
#[map]
static CLOSED: LruHashMap<u64, u64> = LruHashMap::with_max_entries(16384, 0);

/// What each descriptor of a traced process was when a system call on it
/// last walked the kernel's fd table to tell (`kernel::fd_file`: eight
/// probe reads, ~200 ns of every call on a file or pipe), key
/// `(tgid << 32) | fd`. An entry holds while its process's [`FD_GEN`]
/// generation is the one it was made under. LRU: bounded, entries of gone
/// processes age out.
#[map]
static FD_CLASS: LruHashMap<u64, FdClass> = LruHashMap::with_max_entries(65536, 0);

/// Slots of [`FD_GEN`]: processes share a slot by `tgid % FD_GEN_SLOTS`
/// (a bump then only costs the other process a walk).
const FD_GEN_SLOTS: u32 = 65536;

/// Generation of each traced process's descriptor numbers (slot `tgid %
/// FD_GEN_SLOTS`, an array lookup the verifier inlines): bumped where a
/// number may start to name another file. A system call that frees
/// numbers (close, close_range, dup2 and dup3 onto an open number) bumps
/// it at its entry and at its exit: a walk that read the generation before
/// the entry bump is stale from then on, one that read it later and still
/// saw the old file is stale from the exit bump; between the kernel's
/// close and the exit a number freed is not reused by a file the walk
/// could have seen (the closing thread has not returned it). Exec (which
/// closes close-on-exec descriptors), a traced process's exit (its tgid
/// may come back) and the start of tracing a pid bump it too.
#[map]
static FD_GEN: Array<u32> = Array::with_max_entries(FD_GEN_SLOTS, 0);

/// One [`FD_CLASS`] entry.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FdClass {
    /// The process's [`FD_GEN`] generation, read before the walk.
    pub generation: u32,
    /// The file's device (`kernel::FdFile::dev`).
    pub dev: u32,
    /// The inode's `S_IFMT` bits.
    pub kind: u16,
    /// Padding.
    pub _pad: [u16; 3],
}

/// The [`FD_GEN`] generation of process `tgid` now.
#[inline(always)]
fn fd_generation(tgid: u32) -> u32 {
    match FD_GEN.get_ptr(tgid % FD_GEN_SLOTS) {
        // SAFETY: a map value; volatile: read before the walk it guards.
        Some(slot) => unsafe { core::ptr::read_volatile(slot) },
        None => 0,
    }
}

/// Makes every [`FD_CLASS`] entry of process `tgid` stale.
#[inline(always)]
fn bump_fd_generation(tgid: u32) {
    if let Some(slot) = FD_GEN.get_ptr_mut(tgid % FD_GEN_SLOTS) {
        // SAFETY: a map value; atomic, as other CPUs bump it too.
        unsafe {
            core::intrinsics::atomic_xadd::<u32, u32, { core::intrinsics::AtomicOrdering::Relaxed }>(
                slot, 1,
            )
        };
    }
}

/// Who forked a process, and when.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Forked {
    /// The parent's tgid.
    pub parent: u32,
    /// Padding.
    pub _pad: u32,
    /// Fork time, `bpf_ktime_get_ns`.
    pub at_ns: u64,
}

/// Each thread of a traced process, by tid, removed when the thread exits:
/// its last system call (`call.ts_ns` 0 once it returned), and where it
/// entered its last call, any call (`blocked`). The latter is not cleared
/// when the call returns (a lookup per call saved): at the stop, the
/// recorder keeps the entries the kernel still shows the thread in (same
/// number and stack pointer in `/proc/PID/task/TID/syscall`) and unwinds
/// those threads' stacks (where a hung daemon stands, with no function
/// probes). One map for both: a call's entry and exit look the thread up
/// once each.
#[map]
static INFLIGHT: HashMap<u32, ThreadCall> = HashMap::with_max_entries(16384, 0);

/// Hits of each function probe by traced processes, by function id.
#[map]
static FUNC_HITS: PerCpuArray<u64> =
    PerCpuArray::with_max_entries(tracer_common::FUNC_HITS_ENTRIES, 0);

/// The generation of function-probe links that records (0 or 1).
#[map]
static FUNC_GEN: Array<u32> = Array::with_max_entries(1, 0);

/// Loss counters, indexed by `Stat`.
#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(STAT_COUNT, 0);

#[unsafe(no_mangle)]
static SAMPLE_ALL: u32 = 0;
#[unsafe(no_mangle)]
static WAKEUP_BYTES: u64 = 256 * 1024;
#[unsafe(no_mangle)]
static FOLLOW_CHILDREN: u32 = 1;
#[unsafe(no_mangle)]
static TRACE_SYSCALLS: u32 = 1;
#[unsafe(no_mangle)]
static TRACE_FILES: u32 = 0;
#[unsafe(no_mangle)]
static BLOCKED_THREADS: u32 = 1;
#[unsafe(no_mangle)]
static TP_OFFSETS: TracepointOffsets = TracepointOffsets::ABSENT;
#[unsafe(no_mangle)]
static KERNEL_OFFSETS: KernelOffsets = KernelOffsets::ABSENT;

/// Reads a global set by user space; volatile so the compiler keeps the load
/// (the loader rewrites the value in the object's .rodata).
#[inline(always)]
fn global<T: Copy>(value: &'static T) -> T {
    // SAFETY: a valid static reference.
    unsafe { core::ptr::read_volatile(value) }
}

#[inline(always)]
fn count(stat: Stat) {
    if let Some(counter) = STATS.get_ptr_mut(stat as u32) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while we run.
        unsafe { *counter += 1 };
    }
}

/// Whether `tgid` is traced: its bit, then the map (the bit alone is the
/// answer for the processes that are not, nearly every one of the node).
#[inline(always)]
fn is_traced(tgid: u32) -> bool {
    // SAFETY: the value is only read for presence.
    may_be_traced(tgid) && unsafe { TRACED_PIDS.get(&tgid) }.is_some()
}

/// Whether `pid`'s bit is set (no false negative: it is set before its
/// `TRACED_PIDS` entry is made; no lasting false positive: it is cleared
/// when that entry is removed or could not be made). Alone it answers
/// `sys_enter`, which every system call of a traced process passes: the
/// map lookup after it cost ~35 ns a call. It may say yes for a moment
/// before the entry is made and after it is removed (a process starting
/// to be traced, or exiting).
#[inline(always)]
fn may_be_traced(pid: u32) -> bool {
    match TRACED_BITS.get(pid >> 6) {
        Some(word) => *word & (1 << (pid & 63)) != 0,
        None => false,
    }
}

/// Traces `pid` (`value`: root or child); false when the map is full.
#[inline(always)]
fn trace(pid: u32, value: u32) -> bool {
    // Descriptor classes kept for an earlier process of this tgid go.
    bump_fd_generation(pid);
    if let Some(word) = TRACED_BITS.get_ptr_mut(pid >> 6) {
        // SAFETY: a map value; an atomic or, as other CPUs and user space
        // set and clear other bits of the same word.
        unsafe {
            core::intrinsics::atomic_or::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                word,
                1 << (pid & 63),
            )
        };
    }
    if TRACED_PIDS.insert(&pid, &value, 0).is_ok() {
        return true;
    }
    // Not traced after all (the map is full): its bit goes too, unless an
    // entry made before is still there.
    // SAFETY: presence check.
    if unsafe { TRACED_PIDS.get(&pid) }.is_none() {
        clear_bit(pid);
    }
    false
}

/// Clears `pid`'s bit in `TRACED_BITS`.
#[inline(always)]
fn clear_bit(pid: u32) {
    if let Some(word) = TRACED_BITS.get_ptr_mut(pid >> 6) {
        // SAFETY: as in `trace`.
        unsafe {
            core::intrinsics::atomic_and::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                word,
                !(1 << (pid & 63)),
            )
        };
    }
}

/// Stops tracing `pid`.
#[inline(always)]
fn untrace(pid: u32) {
    let _ = TRACED_PIDS.remove(&pid);
    clear_bit(pid);
}

/// Current (tgid, tid).
#[inline(always)]
fn current() -> (u32, u32) {
    let pid_tgid = aya_ebpf::helpers::bpf_get_current_pid_tgid();
    ((pid_tgid >> 32) as u32, pid_tgid as u32)
}

#[inline(always)]
fn header(kind: u16, size: usize, pid: u32, tid: u32) -> Header {
    // SAFETY: helpers without preconditions.
    let (ts_ns, cpu) = unsafe {
        (
            aya_ebpf::helpers::generated::bpf_ktime_get_ns(),
            aya_ebpf::helpers::generated::bpf_get_smp_processor_id(),
        )
    };
    Header {
        ts_ns,
        pid,
        tid,
        kind,
        size: size as u16,
        cpu,
    }
}

/// Writes `record` into the ring. Wakes the reader only when enough data is
/// pending: a wakeup per record costs microseconds (user space also drains on
/// a timer, so nothing waits longer than that period).
#[inline(always)]
fn emit<T: 'static>(record: T) {
    emit_with(record, false);
}

/// Like [`emit`], and wakes the reader now: for rare events user space must
/// act on while the process still exists (exec, fork).
#[inline(always)]
fn emit_urgent<T: 'static>(record: T) {
    emit_with(record, true);
}

/// Like [`emit`], and then discards the record: the calibration of the
/// overhead budget pays what a recorded hit pays, and nothing reaches the
/// capture.
#[inline(always)]
fn emit_discarded<T: 'static>(record: T) {
    let Some(mut entry) = EVENTS.reserve::<T>(0) else {
        return;
    };
    entry.write(record);
    let _ = EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= global(&WAKEUP_BYTES);
    entry.discard(BPF_RB_NO_WAKEUP as u64);
}

/// Submits a record reserved and written in place, waking the reader as
/// [`emit`] does.
#[inline(always)]
fn submit_entry<T: 'static>(entry: aya_ebpf::maps::ring_buf::RingBufEntry<T>) {
    let flags = if EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= global(&WAKEUP_BYTES) {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(flags as u64);
}

#[inline(always)]
fn emit_with<T: 'static>(record: T, urgent: bool) {
    let Some(mut entry) = EVENTS.reserve::<T>(0) else {
        count(Stat::RingFull);
        return;
    };
    entry.write(record);
    let flags = if urgent || EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= global(&WAKEUP_BYTES) {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(flags as u64);
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects the loop, so no program can actually panic.
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
