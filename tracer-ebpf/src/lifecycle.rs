//! Process lifecycle: fork (following children of traced processes), exec
//! and exit. Raw `sched` tracepoints where the kernel's BTF gave the task
//! offsets (two-argument raw tracepoints detach at once; each perf
//! tracepoint link waits for an RCU grace period when it is closed), else
//! the perf tracepoints, with field offsets from tracefs.

use aya_ebpf::{
    helpers::bpf_get_current_comm,
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
};
use aya_log_ebpf::debug;
use tracer_common::{
    TRACED_CHILD,
    record::{Lifecycle, kind, lifecycle},
    stats::Stat,
};

use crate::{
    FOLLOW_CHILDREN, INFLIGHT, PARENT, TP_OFFSETS, count, current, emit, emit_urgent, global,
    header, is_traced,
    kernel::{off, read},
};

#[inline(always)]
fn record(event: u32, pid: u32, tid: u32, child_tid: u32, group_dead: u32, exit_code: u32) {
    let record = Lifecycle {
        header: header(kind::LIFECYCLE, size_of::<Lifecycle>(), pid, tid),
        event,
        child_tid,
        group_dead,
        exit_code,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
    };
    if event == lifecycle::EXIT {
        emit(record);
    } else {
        emit_urgent(record);
    }
}

/// The current task forked `child` (a process or a thread).
#[inline(always)]
fn on_fork<C: aya_ebpf::EbpfContext>(ctx: &C, child: u32) {
    let (pid, tid) = current();
    if !is_traced(pid) {
        return;
    }
    // A new thread also passes here; its tid in the map is harmless (keys are
    // tgids) and is removed when the thread exits.
    if global(&FOLLOW_CHILDREN) != 0 {
        if !crate::trace(child, TRACED_CHILD) {
            count(Stat::PidMapFull);
        } else {
            debug!(ctx, "following task {} forked by {}", child, pid);
        }
    }
    let forked = crate::Forked {
        parent: pid,
        _pad: 0,
        // SAFETY: helper without preconditions.
        at_ns: unsafe { aya_ebpf::helpers::generated::bpf_ktime_get_ns() },
    };
    let _ = PARENT.insert(&child, &forked, 0);
    record(lifecycle::FORK, pid, tid, child, 0, 0);
}

#[inline(always)]
fn on_exec() {
    let (pid, tid) = current();
    if is_traced(pid) {
        // Its close-on-exec descriptors were closed.
        crate::bump_fd_generation(pid);
        record(lifecycle::EXEC, pid, tid, 0, 0, 0);
    }
}

/// The current task exits; `group_dead`: its whole process with it.
#[inline(always)]
fn on_exit(group_dead: impl FnOnce() -> u32) {
    let (pid, tid) = current();
    // Every task of the node passes here: the bitmap first.
    if !crate::may_be_traced(pid) && !crate::may_be_traced(tid) {
        return;
    }
    let _ = INFLIGHT.remove(&tid);
    if !is_traced(pid) && !is_traced(tid) {
        return;
    }
    let group_dead = group_dead();
    if tid != pid {
        crate::untrace(tid);
    }
    if is_traced(pid) {
        // do_exit() stored the code before this tracepoint: how the
        // process ended (a crash is told from a normal end by it).
        let exit_code = read::<i32>(crate::kernel::current_task(), off!(task_exit_code))
            .map_or(0, |code| code as u32 & 0xffff | lifecycle::EXIT_CODE_KNOWN);
        record(lifecycle::EXIT, pid, tid, 0, group_dead, exit_code);
    }
    if group_dead != 0 {
        // Its tgid may name another process later.
        crate::bump_fd_generation(pid);
        crate::untrace(pid);
    }
}

#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn raw_proc_fork(ctx: RawTracePointContext) -> i32 {
    let child_task: u64 = ctx.arg(1);
    if let Some(child) = read::<i32>(child_task, off!(task_pid)) {
        on_fork(&ctx, child as u32);
    }
    0
}

#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn raw_proc_exec(_ctx: RawTracePointContext) -> i32 {
    on_exec();
    0
}

#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn raw_proc_exit(ctx: RawTracePointContext) -> i32 {
    on_exit(|| {
        let dead: u64 = ctx.arg(1);
        u32::from(dead as u8 != 0)
    });
    0
}

#[tracepoint]
pub fn proc_fork(ctx: TracePointContext) -> u32 {
    let offset = global(&TP_OFFSETS).fork_child_pid;
    // SAFETY: a field inside the tracepoint record, offset from its format file.
    if let Ok(child) = unsafe { ctx.read_at::<i32>(offset as usize) } {
        on_fork(&ctx, child as u32);
    }
    0
}

#[tracepoint]
pub fn proc_exec(_ctx: TracePointContext) -> u32 {
    on_exec();
    0
}

#[tracepoint]
pub fn proc_exit(ctx: TracePointContext) -> u32 {
    let (pid, tid) = current();
    on_exit(|| {
        let offset = global(&TP_OFFSETS).exit_group_dead;
        if offset == u16::MAX {
            (pid == tid) as u32
        } else {
            // SAFETY: a field inside the tracepoint record, offset from its format file.
            unsafe { ctx.read_at::<u8>(offset as usize) }.unwrap_or(0) as u32
        }
    });
    0
}
