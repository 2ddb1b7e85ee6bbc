//! System calls of the traced processes, from the two raw tracepoints every
//! system call of the node passes (`sys_enter`, `sys_exit`): two links in
//! all, however many calls are traced, each costing one map lookup for the
//! processes that are not traced. The entry saves the arguments by tid; the
//! exit emits one record with both times for a socket call, or adds a call
//! on a file to the file I/O counters (`files.rs`).

use aya_ebpf::{
    bindings::BPF_RB_FORCE_WAKEUP,
    helpers::{bpf_probe_read_kernel, bpf_probe_read_user_buf},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use tracer_common::{
    kernel::{file_class, mode},
    record::{
        BLOCKED_MIN_NS, BLOCKED_RAW_BYTES, BlockedEntry, BlockedRaw, SockAddr, Syscall,
        SyscallEnter, ThreadCall, kind,
    },
    stats::Stat,
    syscall::{self, NONE, flag},
};

use crate::{
    BLOCKED_THREADS, CLOSED, EVENTS, FD_CLASS, FdClass, INFLIGHT, PARENT, SOCK_OWNER, SOCKET_FDS, TRACE_FILES,
    TRACE_SYSCALLS, bump_fd_generation, count, current, emit, fd_generation, files, global, header, kernel,
    may_be_traced,
};

/// `SyscallEnter::file_class` of an `INFLIGHT` entry kept only so that the
/// exit of a call that frees descriptor numbers bumps `FD_GEN` (a call
/// neither recorded nor counted: close of a pipe, dup2, close_range). Not
/// 0: the recorder skips such entries at the stop, as it does file calls.
const FREES_FDS_ONLY: u32 = u32::MAX;

/// What descriptor `fd` of the current process `pid` is: the inode's
/// `S_IFMT` bits and the file's device. Kept in `FD_CLASS` after the first
/// walk of the fd table, while the process's `FD_GEN` generation stays the
/// one read before that walk; `None` when the descriptor is not open.
#[inline(always)]
fn fd_class(pid: u32, fd: i64) -> Option<(u16, u32)> {
    if fd < 0 {
        return None;
    }
    let generation = fd_generation(pid);
    let key = fd_key(pid, fd);
    // SAFETY: the value is copied out.
    if let Some(c) = unsafe { FD_CLASS.get(&key) }.copied()
        && c.generation == generation
    {
        return Some((c.kind, c.dev));
    }
    let f = kernel::fd_file(fd)?;
    let class = FdClass {
        generation,
        dev: f.dev,
        kind: f.kind,
        _pad: [0; 3],
    };
    let _ = FD_CLASS.insert(&key, &class, 0);
    Some((f.kind, f.dev))
}

/// Whether `fd` of `pid` is a known socket, or one inherited across fork
/// from a (grand)parent that had it (then it becomes known): its
/// `SOCKET_FDS` value (the socket's `struct sock` address once looked up,
/// else 1), 0 when it is not a socket. A parent's socket may have been
/// made after the fork under a number the child uses for something else
/// (a forked worker's epoll descriptor): the child's descriptor itself
/// decides, where the kernel's view can be read.
#[inline(always)]
fn socket_value(pid: u32, fd: i64) -> u64 {
    let key = fd_key(pid, fd);
    // SAFETY: the value is copied out.
    if let Some(known) = unsafe { SOCKET_FDS.get(&key) }.copied() {
        return known;
    }
    // An fd number never seen: nothing to inherit it from.
    if fd < 0 {
        return 0;
    }
    let mut p = pid;
    let mut found = false;
    for _ in 0..4 {
        // SAFETY: the value is copied out.
        let Some(forked) = (unsafe { PARENT.get(&p) }).copied() else {
            return 0;
        };
        let parent_key = fd_key(forked.parent, fd);
        // A socket of the parent now, or one it closed after the fork.
        // SAFETY: presence check; the value is copied out.
        let inherited = unsafe { SOCKET_FDS.get(&parent_key) }.is_some()
            || unsafe { CLOSED.get(&parent_key) }.is_some_and(|at| *at > forked.at_ns);
        if inherited {
            found = true;
            break;
        }
        p = forked.parent;
    }
    if !found {
        return 0;
    }
    // Through the class cache: a number that is no socket is then not
    // walked again by the caller's own look at it.
    let socket = fd_class(pid, fd).is_none_or(|(kind, _)| kind == mode::S_IFSOCK);
    if socket {
        let _ = SOCKET_FDS.insert(&key, &1, 0);
    }
    u64::from(socket)
}

/// Offset of `bp` in x86-64 `struct pt_regs` (a stable ABI: ptrace's
/// `user_regs_struct`); bx, r11, r10, r9, r8, ax, cx, dx, si, di,
/// orig_ax, ip, cs, flags, sp follow in order: one read of 16 words
/// gives the arguments and the registers an unwinder starts from.
const PT_REGS_BP: u64 = 32;
/// The six argument registers' indexes in that block, in argument order
/// (di, si, dx, r10, r8, r9).
const ARG_REGS: [usize; 6] = [10, 9, 8, 3, 5, 4];
/// Indexes of bp, orig_ax (the call's number), ip and sp in that block.
const REG_BP: usize = 0;
const REG_ORIG_AX: usize = 11;
const REG_IP: usize = 12;
const REG_SP: usize = 15;

const AF_UNIX: u16 = 1;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

#[inline(always)]
fn fd_key(pid: u32, fd: i64) -> u64 {
    ((pid as u64) << 32) | (fd as u64 & 0xffff_ffff)
}

/// The user registers saved at entry from bp to sp (`struct pt_regs *` is
/// the raw tracepoint's first argument): the six arguments and bp, ip, sp.
#[inline(always)]
fn regs(ctx: &RawTracePointContext) -> Option<[u64; 16]> {
    let regs: u64 = ctx.arg(0);
    // SAFETY: the helper checks the address; a fault returns an error.
    unsafe { bpf_probe_read_kernel((regs + PT_REGS_BP) as *const [u64; 16]) }.ok()
}

#[inline(always)]
fn arg(regs: &[u64; 16], index: u8) -> u64 {
    match ARG_REGS.get(index as usize) {
        Some(i) => regs.get(*i).copied().unwrap_or(0),
        None => 0,
    }
}

#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn sys_enter(ctx: RawTracePointContext) -> i32 {
    try_sys_enter(&ctx);
    0
}

#[inline(always)]
fn try_sys_enter(ctx: &RawTracePointContext) {
    let (pid, tid) = current();
    // The bit alone (see `may_be_traced`): no map lookup on every call.
    if !may_be_traced(pid) {
        return;
    }
    let nr: u64 = ctx.arg(1);
    let frees = syscall::frees_fds(nr as u32);
    if frees {
        bump_fd_generation(pid);
    }
    // What the entry keeps, each part set when its `ts_ns` is not 0.
    let mut call = SyscallEnter::default();
    let mut sock = 0u64;
    let mut blocked = BlockedEntry::default();
    enter_call(ctx, pid, nr, &mut call, &mut sock, &mut blocked);
    if frees && call.ts_ns == 0 {
        // The exit bumps the generation again, once the numbers are free.
        call = SyscallEnter {
            // Not 0 (a returned call's); never read as a time.
            ts_ns: 1,
            nr: nr as u32,
            fd: -1,
            addr_ptr: 0,
            arg: 0,
            file_class: FREES_FDS_ONLY,
            dev: 0,
        };
    }
    keep(tid, &call, sock, &blocked);
}

/// The entry of call `nr` of a traced thread of `pid`: where the thread
/// entered it (`blocked`, with blocked threads on), and the call kept for
/// its exit when it is recorded or counted (`call`, with the descriptor's
/// `SOCKET_FDS` value in `sock` when the entry read it).
#[inline(always)]
fn enter_call(
    ctx: &RawTracePointContext,
    pid: u32,
    nr: u64,
    call: &mut SyscallEnter,
    sock: &mut u64,
    blocked: &mut BlockedEntry,
) {
    let noting = global(&BLOCKED_THREADS) != 0;
    // Most calls of a busy server (futex, nanosleep...) have no spec: they
    // pay only the blocked-thread entry, ~140 ns on this VM: the clock
    // read ~55 (the coarse clock is refused to raw tracepoints), the
    // registers ~30 (two reads of bp and ip..sp cost the same as one of
    // all 16 words), the map ~40.
    let Some(spec) = syscall::spec(nr as u32) else {
        if noting && let Some(regs) = regs(ctx) {
            // SAFETY: helper without preconditions.
            let ts_ns = unsafe { aya_ebpf::helpers::generated::bpf_ktime_get_ns() };
            *blocked = blocked_entry(pid, nr as u32, ts_ns, &regs);
        }
        return;
    };
    let Some(regs) = regs(ctx) else {
        return;
    };
    // One precise clock read for both entries of a call with a spec.
    // SAFETY: helper without preconditions.
    let ts_ns = unsafe { aya_ebpf::helpers::generated::bpf_ktime_get_ns() };
    if noting {
        *blocked = blocked_entry(pid, nr as u32, ts_ns, &regs);
    }
    let sockets = global(&TRACE_SYSCALLS) != 0;
    let files = global(&TRACE_FILES) != 0 && spec.file != file_class::NONE;
    if !sockets && !files {
        return;
    }
    let fd = if spec.fd_arg == NONE {
        -1
    } else {
        arg(&regs, spec.fd_arg) as i32
    };
    // The descriptor's `SOCKET_FDS` value where it was looked up.
    let mut known = 0;
    // What the call is on: a socket (recorded), a file (counted), neither.
    let (class, dev) = if spec.flags & flag::PATH != 0 {
        (spec.file, 0)
    } else if spec.file == file_class::NONE
        || (spec.flags & flag::SOCKET_FD_ONLY != 0 && {
            known = socket_value(pid, fd as i64);
            known != 0
        })
    {
        (file_class::NONE, 0)
    } else if !files && spec.flags & flag::SOCKET_FD_ONLY == 0 {
        // A file-only call while file I/O is not counted.
        return;
    } else {
        // The descriptor itself says: a file, a socket we did not know
        // (opened before its process was traced, inherited), or neither.
        let Some((kind, dev)) = fd_class(pid, fd as i64) else {
            return;
        };
        if kind == mode::S_IFSOCK && spec.flags & flag::SOCKET_FD_ONLY != 0 {
            if SOCKET_FDS.insert(&fd_key(pid, fd as i64), &1, 0).is_err() {
                count(Stat::SocketMapFull);
            }
            (file_class::NONE, 0)
        } else if kernel::is_storage(kind) {
            (spec.file, dev)
        } else {
            return;
        }
    };
    if (class == file_class::NONE && !sockets) || (class != file_class::NONE && !files) {
        return;
    }
    *call = SyscallEnter {
        ts_ns,
        nr: nr as u32,
        fd,
        addr_ptr: arg(&regs, spec.addr_arg),
        arg: arg(&regs, spec.len_arg),
        file_class: u32::from(class),
        dev,
    };
    *sock = known;
}

/// Keeps what a call's entry found in thread `tid`'s `INFLIGHT` entry, one
/// lookup for both parts: `call` as its call in progress (when its `ts_ns`
/// is set; a call neither recorded nor counted leaves the entry's call as
/// it was: done), `blocked` as where it entered its last call. Written in
/// place where the thread has an entry (every call after its first): a
/// hash insert and delete per call cost more than the rest of the call's
/// work. The entry goes when the thread exits.
#[inline(always)]
fn keep(tid: u32, call: &SyscallEnter, sock: u64, blocked: &BlockedEntry) {
    if call.ts_ns == 0 && blocked.ts_ns == 0 {
        return;
    }
    match INFLIGHT.get_ptr_mut(&tid) {
        // SAFETY: this thread's own entry; only its own system calls and
        // its exit touch it, one at a time.
        Some(slot) => unsafe {
            if call.ts_ns != 0 {
                (*slot).call = *call;
                (*slot).sock = sock;
            }
            if blocked.ts_ns != 0 {
                (*slot).blocked = *blocked;
            }
        },
        None => {
            let entry = ThreadCall {
                call: *call,
                blocked: *blocked,
                sock,
            };
            if INFLIGHT.insert(&tid, &entry, 0).is_err() {
                if call.ts_ns != 0 {
                    count(Stat::InflightFull);
                }
                if blocked.ts_ns != 0 {
                    count(Stat::BlockedFull);
                }
            }
        }
    }
}

/// Where a thread of `pid` entered system call `nr`, every call: the
/// recorder unwinds the threads still inside one at the stop. Never
/// cleared when the call returns (that was a second lookup per call): the
/// entry is the thread's last call, finished or not, and the recorder
/// tells which by `/proc/PID/task/TID/syscall` (the same number, stack
/// pointer and return address: still in it).
#[inline(always)]
fn blocked_entry(pid: u32, nr: u32, ts_ns: u64, regs: &[u64; 16]) -> BlockedEntry {
    BlockedEntry {
        ts_ns,
        pid,
        nr,
        ip: regs[REG_IP],
        sp: regs[REG_SP],
        bp: regs[REG_BP],
    }
}

/// A call that a signal ended (`ret`: -EINTR, or a restart code the
/// kernel turns into a restart or -EINTR) after the thread had been in it
/// for [`BLOCKED_MIN_NS`]: most likely its process is being stopped or
/// killed (a hung daemon's watchdog, its launcher), and by the time the
/// recorder stops it is gone. Its registers and the top of its stack are
/// copied now, while they exist; the recorder unwinds them. Called only
/// for those return codes: the thread's entry is looked up then, not on
/// every return, and is this call's when its number and stack pointer are
/// the ones the kernel still holds for it.
#[inline(always)]
fn interrupted(ctx: &RawTracePointContext, pid: u32, tid: u32, entry: &BlockedEntry) {
    if entry.ts_ns == 0 {
        return;
    }
    let regs: u64 = ctx.arg(0);
    // orig_ax, ip, cs, flags, sp.
    // SAFETY: the helper checks the address; a fault returns an error.
    let Ok(now_regs) = (unsafe {
        bpf_probe_read_kernel((regs + PT_REGS_BP + 8 * REG_ORIG_AX as u64) as *const [u64; 5])
    }) else {
        return;
    };
    if now_regs[0] as u32 != entry.nr || now_regs[REG_SP - REG_ORIG_AX] != entry.sp {
        return;
    }
    // SAFETY: helper without preconditions.
    let now = unsafe { aya_ebpf::helpers::generated::bpf_ktime_get_ns() };
    if now.saturating_sub(entry.ts_ns) < BLOCKED_MIN_NS {
        return;
    }
    let Some(mut slot) = EVENTS.reserve::<BlockedRaw>(0) else {
        count(Stat::RingFull);
        return;
    };
    let rec = slot.as_mut_ptr();
    // SAFETY: `rec` is the reserved record, written field by field before
    // it is submitted; the user stack is read through the checked helper
    // (the largest size that reads, as the stack's top may be nearer).
    unsafe {
        (*rec).header = header(kind::BLOCKED_RAW, size_of::<BlockedRaw>(), pid, tid);
        (*rec).since_ns = entry.ts_ns;
        (*rec).nr = entry.nr;
        (*rec).ip = entry.ip;
        (*rec).sp = entry.sp;
        (*rec).bp = entry.bp;
        let sp = entry.sp as *const u8;
        let stack = &mut (*rec).stack;
        // The stack's top may be nearer than 8 KiB (a main thread's, below
        // its environment): then to the end of the page after sp's, or of
        // sp's own page (1 to 4096 bytes).
        let first = 4096 - (entry.sp & 4095) as usize;
        let read = |len: usize, stack: &mut [u8; BLOCKED_RAW_BYTES]| {
            stack
                .get_mut(..len)
                .is_some_and(|buf| bpf_probe_read_user_buf(sp, buf).is_ok())
        };
        (*rec).len = if read(BLOCKED_RAW_BYTES, stack) {
            BLOCKED_RAW_BYTES as u32
        } else if read(first + 4096, stack) {
            (first + 4096) as u32
        } else if read(first, stack) {
            first as u32
        } else {
            count(Stat::UserIpUnreadable);
            0
        };
    }
    slot.submit(BPF_RB_FORCE_WAKEUP as u64);
}

#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn sys_exit(ctx: RawTracePointContext) -> i32 {
    try_sys_exit(&ctx);
    0
}

#[inline(always)]
fn try_sys_exit(ctx: &RawTracePointContext) {
    let (pid, tid) = current();
    // Calls in progress are only kept for traced processes.
    if !may_be_traced(pid) {
        return;
    }
    let ret: i64 = ctx.arg(1);
    // The thread's entry: its call in progress and where it entered it.
    let Some(slot) = INFLIGHT.get_ptr_mut(&tid) else {
        return;
    };
    // -EINTR, -ERESTARTSYS, -ERESTARTNOINTR, -ERESTARTNOHAND,
    // -ERESTART_RESTARTBLOCK: a signal ended the call.
    if matches!(ret, -4 | -512 | -513 | -514 | -516) && global(&BLOCKED_THREADS) != 0 {
        // SAFETY: this thread's own entry, copied out.
        let entry = unsafe { (*slot).blocked };
        interrupted(ctx, pid, tid, &entry);
    }
    // SAFETY: this thread's own entry (see `keep`), copied out and marked
    // done: a call whose entry was not kept finds it done.
    let (enter, sock) = unsafe {
        let enter = (*slot).call;
        (*slot).call.ts_ns = 0;
        (enter, (*slot).sock)
    };
    if enter.ts_ns == 0 {
        return;
    }
    if syscall::frees_fds(enter.nr) {
        // The numbers it freed may name other files from now on.
        bump_fd_generation(pid);
        if enter.file_class == FREES_FDS_ONLY {
            return;
        }
    }
    if enter.file_class != 0 {
        files::count_call(pid, &enter, ret);
        return;
    }
    let Some(spec) = syscall::spec(enter.nr) else {
        return;
    };
    if spec.flags & flag::RETURNS_SOCKET != 0 && ret >= 0 {
        if SOCKET_FDS.insert(&fd_key(pid, ret), &1, 0).is_err() {
            count(Stat::SocketMapFull);
        }
        note_owner(pid, ret, 0);
    } else if spec.fd_arg != NONE && spec.flags & (flag::WAIT | flag::CLOSES_FD) == 0 {
        note_owner(pid, i64::from(enter.fd), sock);
    }
    if spec.flags & flag::CLOSES_FD != 0 {
        let key = fd_key(pid, enter.fd as i64);
        if SOCKET_FDS.remove(&key).is_ok() {
            // SAFETY: helper without preconditions.
            let now = unsafe { aya_ebpf::helpers::generated::bpf_ktime_get_ns() };
            let _ = CLOSED.insert(&key, &now, 0);
        }
    }
    let mut arg = enter.arg;
    if spec.flags & flag::RETURNS_PAIR != 0 {
        // socketpair: both ends are sockets of this process from now on.
        let mut sv = [0u8; 8];
        // SAFETY: reading user memory through the checked helper.
        if ret == 0
            && unsafe { bpf_probe_read_user_buf(enter.addr_ptr as *const u8, &mut sv) }.is_ok()
        {
            let a = i32::from_ne_bytes([sv[0], sv[1], sv[2], sv[3]]);
            let b = i32::from_ne_bytes([sv[4], sv[5], sv[6], sv[7]]);
            for fd in [a, b] {
                if SOCKET_FDS
                    .insert(&fd_key(pid, i64::from(fd)), &1, 0)
                    .is_err()
                {
                    count(Stat::SocketMapFull);
                }
            }
            arg = u64::from(a as u32) | (u64::from(b as u32) << 32);
        }
    }
    // EINPROGRESS (-115) from a non-blocking connect still names the peer.
    let addr =
        if enter.addr_ptr != 0 && spec.flags & flag::RETURNS_PAIR == 0 && (ret >= 0 || ret == -115)
        {
            read_sockaddr(enter.addr_ptr)
        } else {
            SockAddr::default()
        };
    // The connecting socket's port, which both ends name alike: an
    // analysis can tell which process holds the other end.
    let conn_port = match enter.nr {
        syscall::nr::CONNECT
            if (ret == 0 || ret == -115) && matches!(addr.family, AF_INET | AF_INET6) =>
        {
            sock_port(pid, i64::from(enter.fd), false)
        }
        syscall::nr::ACCEPT | syscall::nr::ACCEPT4 if ret >= 0 => sock_port(pid, ret, true),
        _ => 0,
    };
    emit(Syscall {
        header: header(kind::SYSCALL, size_of::<Syscall>(), pid, tid),
        enter_ns: enter.ts_ns,
        nr: enter.nr,
        fd: enter.fd,
        ret,
        arg,
        flags: 0,
        conn_port,
        _pad: 0,
        addr,
    });
}

/// A port of the TCP socket behind `fd` of the current process: its local
/// port (`inet_num`), or with `peer` its peer's (`inet_dport`); host byte
/// order, 0 when it cannot be read or the socket is not TCP over IP. The
/// socket's `struct sock` comes from `SOCKET_FDS` when `note_owner`
/// already looked it up.
#[inline(always)]
fn sock_port(pid: u32, fd: i64, peer: bool) -> u16 {
    // SAFETY: the value is copied out.
    let known = unsafe { SOCKET_FDS.get(&fd_key(pid, fd)) }.copied().unwrap_or(0);
    let sk = if known > 1 {
        known
    } else {
        match kernel::fd_file(fd).and_then(|f| kernel::socket_sock(f.file)) {
            Some(sk) => sk,
            None => return 0,
        }
    };
    let family: u16 = kernel::read(sk, kernel::off!(sk_family)).unwrap_or(0);
    if !matches!(family, AF_INET | AF_INET6) {
        return 0;
    }
    if peer {
        u16::from_be(kernel::read::<u16>(sk, kernel::off!(sk_dport)).unwrap_or(0))
    } else {
        kernel::read::<u16>(sk, kernel::off!(sk_num)).unwrap_or(0)
    }
}

/// Remembers that traced process `pid` uses the socket behind `fd`, so a
/// retransmission on it is known to be its own (`tcp.rs`). The socket's
/// `struct sock` is looked up once per descriptor and kept in `SOCKET_FDS`;
/// `entered`: that entry's value as the call's entry read it (0: not read
/// then), which spares the lookup once it holds the address.
#[inline(always)]
fn note_owner(pid: u32, fd: i64, entered: u64) {
    let key = fd_key(pid, fd);
    let known = if entered > 1 {
        entered
    } else {
        // SAFETY: the value is copied out.
        let Some(known) = (unsafe { SOCKET_FDS.get(&key) }).copied() else {
            return;
        };
        known
    };
    let sk = if known > 1 {
        known
    } else {
        let Some(sk) = kernel::fd_file(fd).and_then(|f| kernel::socket_sock(f.file)) else {
            return;
        };
        let _ = SOCKET_FDS.insert(&key, &sk, 0);
        sk
    };
    // SAFETY: the value is copied out.
    if unsafe { SOCK_OWNER.get(&sk) }.copied() != Some(pid) {
        let _ = SOCK_OWNER.insert(&sk, &pid, 0);
    }
}

/// Reads a `sockaddr_in`, `sockaddr_in6` or the start of a `sockaddr_un`.
#[inline(always)]
fn read_sockaddr(ptr: u64) -> SockAddr {
    let mut raw = [0u8; 28];
    // sockaddr_in is 16 bytes: read that much first so a small buffer at the
    // end of a page does not fail the whole read.
    // SAFETY: reading user memory through the checked helper.
    if unsafe { bpf_probe_read_user_buf(ptr as *const u8, &mut raw[..16]) }.is_err() {
        count(Stat::AddrUnreadable);
        return SockAddr::default();
    }
    let family = u16::from_ne_bytes([raw[0], raw[1]]);
    let mut out = SockAddr {
        family,
        port_be: u16::from_ne_bytes([raw[2], raw[3]]),
        _pad: 0,
        addr: [0; 16],
    };
    match family {
        AF_INET => out.addr[..4].copy_from_slice(&raw[4..8]),
        AF_INET6 => {
            // SAFETY: as above; the caller passed an AF_INET6 address.
            if unsafe { bpf_probe_read_user_buf((ptr + 16) as *const u8, &mut raw[16..28]) }
                .is_err()
            {
                count(Stat::AddrUnreadable);
            }
            out.addr.copy_from_slice(&raw[8..24]);
        }
        AF_UNIX => {
            out.port_be = 0;
            out.addr[..14].copy_from_slice(&raw[2..16]);
        }
        _ => {}
    }
    out
}

/// Empty `sys_enter` program (benchmarks: the cost of the raw tracepoint
/// itself, paid by every system call of the node).
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn empty_sys_enter(_ctx: RawTracePointContext) -> i32 {
    0
}

/// Empty `sys_exit` program (benchmarks).
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn empty_sys_exit(_ctx: RawTracePointContext) -> i32 {
    0
}
