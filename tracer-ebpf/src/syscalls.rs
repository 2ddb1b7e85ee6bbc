//! Socket system calls: one program for every `syscalls:sys_enter_*` and one
//! for every `syscalls:sys_exit_*` tracepoint of the traced calls. The entry
//! saves the arguments by tid; the exit emits one record with both times.

use aya_ebpf::{helpers::bpf_probe_read_user_buf, macros::tracepoint, programs::TracePointContext};
use tracer_common::{
    record::{SockAddr, Syscall, SyscallEnter, kind},
    stats::Stat,
    syscall::{self, NONE, flag},
};

use crate::{
    CLOSED, INFLIGHT, PARENT, SOCKET_FDS, TRACE_SYSCALLS, count, current, emit, global, header,
    is_traced,
};

/// Whether `fd` of `pid` is a known socket, or one inherited across fork
/// from a (grand)parent that had it (then it becomes known).
#[inline(always)]
fn is_socket(pid: u32, fd: i64) -> bool {
    let key = fd_key(pid, fd);
    // SAFETY: presence checks only.
    if unsafe { SOCKET_FDS.get(&key) }.is_some() {
        return true;
    }
    let mut p = pid;
    for _ in 0..4 {
        // SAFETY: the value is copied out.
        let Some(forked) = (unsafe { PARENT.get(&p) }).copied() else {
            return false;
        };
        let parent_key = fd_key(forked.parent, fd);
        // A socket of the parent now, or one it closed after the fork.
        // SAFETY: presence check; the value is copied out.
        let inherited = unsafe { SOCKET_FDS.get(&parent_key) }.is_some()
            || unsafe { CLOSED.get(&parent_key) }.is_some_and(|at| *at > forked.at_ns);
        if inherited {
            let _ = SOCKET_FDS.insert(&key, &1, 0);
            return true;
        }
        p = forked.parent;
    }
    false
}

/// Offset of `__syscall_nr` in both enter and exit records.
const NR_OFFSET: usize = 8;
/// Offset of the first argument (enter) or of `ret` (exit).
const ARGS_OFFSET: usize = 16;

const AF_UNIX: u16 = 1;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

#[inline(always)]
fn fd_key(pid: u32, fd: i64) -> u64 {
    ((pid as u64) << 32) | (fd as u64 & 0xffff_ffff)
}

#[inline(always)]
fn arg(ctx: &TracePointContext, index: u8) -> u64 {
    if index == NONE || index > 5 {
        return 0;
    }
    // SAFETY: a field inside the tracepoint record.
    unsafe { ctx.read_at::<u64>(ARGS_OFFSET + 8 * index as usize) }.unwrap_or(0)
}

#[tracepoint]
pub fn sys_enter(ctx: TracePointContext) -> u32 {
    try_sys_enter(&ctx);
    0
}

#[inline(always)]
fn try_sys_enter(ctx: &TracePointContext) {
    if global(&TRACE_SYSCALLS) == 0 {
        return;
    }
    let (pid, tid) = current();
    if !is_traced(pid) {
        return;
    }
    // SAFETY: a field inside the tracepoint record.
    let Ok(nr) = (unsafe { ctx.read_at::<i32>(NR_OFFSET) }) else {
        return;
    };
    let Some(spec) = syscall::spec(nr as u32) else {
        return;
    };
    let fd = if spec.fd_arg == NONE {
        -1
    } else {
        arg(ctx, spec.fd_arg) as i32
    };
    if spec.flags & flag::SOCKET_FD_ONLY != 0 && !is_socket(pid, fd as i64) {
        return;
    }
    let enter = SyscallEnter {
        // SAFETY: helper without preconditions.
        ts_ns: unsafe { aya_ebpf::helpers::generated::bpf_ktime_get_ns() },
        nr: nr as u32,
        fd,
        addr_ptr: arg(ctx, spec.addr_arg),
        arg: arg(ctx, spec.len_arg),
    };
    if INFLIGHT.insert(&tid, &enter, 0).is_err() {
        count(Stat::InflightFull);
    }
}

#[tracepoint]
pub fn sys_exit(ctx: TracePointContext) -> u32 {
    try_sys_exit(&ctx);
    0
}

#[inline(always)]
fn try_sys_exit(ctx: &TracePointContext) {
    let (pid, tid) = current();
    // SAFETY: the value is copied out before the entry is removed.
    let Some(enter) = (unsafe { INFLIGHT.get(&tid) }).copied() else {
        return;
    };
    let _ = INFLIGHT.remove(&tid);
    // SAFETY: a field inside the tracepoint record.
    let ret = unsafe { ctx.read_at::<i64>(ARGS_OFFSET) }.unwrap_or(0);
    let Some(spec) = syscall::spec(enter.nr) else {
        return;
    };
    if spec.flags & flag::RETURNS_SOCKET != 0 && ret >= 0 {
        if SOCKET_FDS.insert(&fd_key(pid, ret), &1, 0).is_err() {
            count(Stat::SocketMapFull);
        }
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
    emit(Syscall {
        header: header(kind::SYSCALL, size_of::<Syscall>(), pid, tid),
        enter_ns: enter.ts_ns,
        nr: enter.nr,
        fd: enter.fd,
        ret,
        arg,
        flags: 0,
        _pad: 0,
        addr,
    });
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
