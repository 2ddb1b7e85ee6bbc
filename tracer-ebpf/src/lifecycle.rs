//! Process lifecycle: fork (following children of traced processes), exec
//! and exit, from the `sched` tracepoints. Field offsets come from user space.

use aya_ebpf::{EbpfContext as _, macros::tracepoint, programs::TracePointContext};
use aya_log_ebpf::debug;
use tracer_common::{
    TRACED_CHILD,
    record::{Lifecycle, kind, lifecycle},
    stats::Stat,
};

use crate::{
    FOLLOW_CHILDREN, INFLIGHT, PARENT, TP_OFFSETS, TRACED_PIDS, count, current, emit, emit_urgent,
    global, header, is_traced,
};

#[inline(always)]
fn record(
    ctx: &TracePointContext,
    event: u32,
    pid: u32,
    tid: u32,
    child_tid: u32,
    group_dead: u32,
) {
    let record = Lifecycle {
        header: header(kind::LIFECYCLE, size_of::<Lifecycle>(), pid, tid),
        event,
        child_tid,
        group_dead,
        _pad: 0,
        comm: ctx.command().unwrap_or([0; 16]),
    };
    if event == lifecycle::EXIT {
        emit(record);
    } else {
        emit_urgent(record);
    }
}

#[tracepoint]
pub fn proc_fork(ctx: TracePointContext) -> u32 {
    let (pid, tid) = current();
    if !is_traced(pid) {
        return 0;
    }
    let offset = global(&TP_OFFSETS).fork_child_pid;
    // SAFETY: a field inside the tracepoint record, offset from its format file.
    let Ok(child) = (unsafe { ctx.read_at::<i32>(offset as usize) }) else {
        return 0;
    };
    // A new thread also passes here; its tid in the map is harmless (keys are
    // tgids) and is removed when the thread exits.
    if global(&FOLLOW_CHILDREN) != 0 {
        if TRACED_PIDS
            .insert(&(child as u32), &TRACED_CHILD, 0)
            .is_err()
        {
            count(Stat::PidMapFull);
        } else {
            debug!(&ctx, "following task {} forked by {}", child, pid);
        }
    }
    let forked = crate::Forked {
        parent: pid,
        _pad: 0,
        // SAFETY: helper without preconditions.
        at_ns: unsafe { aya_ebpf::helpers::generated::bpf_ktime_get_ns() },
    };
    let _ = PARENT.insert(&(child as u32), &forked, 0);
    record(&ctx, lifecycle::FORK, pid, tid, child as u32, 0);
    0
}

#[tracepoint]
pub fn proc_exec(ctx: TracePointContext) -> u32 {
    let (pid, tid) = current();
    if is_traced(pid) {
        record(&ctx, lifecycle::EXEC, pid, tid, 0, 0);
    }
    0
}

#[tracepoint]
pub fn proc_exit(ctx: TracePointContext) -> u32 {
    let (pid, tid) = current();
    let _ = INFLIGHT.remove(&tid);
    if !is_traced(pid) && !is_traced(tid) {
        return 0;
    }
    let offset = global(&TP_OFFSETS).exit_group_dead;
    // SAFETY: a field inside the tracepoint record, offset from its format file.
    let group_dead = if offset == u16::MAX {
        (pid == tid) as u32
    } else {
        unsafe { ctx.read_at::<u8>(offset as usize) }.unwrap_or(0) as u32
    };
    if tid != pid {
        let _ = TRACED_PIDS.remove(&tid);
    }
    if is_traced(pid) {
        record(&ctx, lifecycle::EXIT, pid, tid, 0, group_dead);
    }
    if group_dead != 0 {
        let _ = TRACED_PIDS.remove(&pid);
    }
    0
}
