//! Function entry and return: uprobes and uretprobes attached at the traced
//! functions, with the function id in the attach cookie.

use aya_ebpf::{
    EbpfContext as _,
    helpers::{bpf_probe_read_user, generated::bpf_get_attach_cookie},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use tracer_common::{
    COOKIE_ARGS, COOKIE_CALIBRATE, COOKIE_ENROLL, COOKIE_FUNC_MASK, COOKIE_GEN, TRACED_ROOT,
    record::{Enroll, FuncEntry, FuncEntryArgs, FuncEntryStack, FuncReturn, STACK_ARGS, kind},
    stats::Stat,
};

use crate::{
    FUNC_GEN, FUNC_HITS, count, current, emit, emit_discarded, emit_urgent, header, is_traced, trace,
};

/// Whether a hit of a probe with `cookie` is recorded: the calibration
/// probe's always (and discarded), others for traced processes when their
/// link is of the current generation. Counts the recorded calls (at entry).
#[inline(always)]
fn wanted(cookie: u64, pid: u32, entry: bool) -> bool {
    if cookie & COOKIE_CALIBRATE != 0 {
        return true;
    }
    if !is_traced(pid) {
        return false;
    }
    let generation = u32::from(cookie & COOKIE_GEN != 0);
    if FUNC_GEN.get(0).copied().unwrap_or(0) != generation {
        return false;
    }
    if entry && let Some(hits) = FUNC_HITS.get_ptr_mut((cookie & COOKIE_FUNC_MASK) as u32) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while we run.
        unsafe { *hits += 1 };
    }
    true
}

/// Writes `record`, or discards it for the calibration probe.
#[inline(always)]
fn emit_or_discard<T: 'static>(cookie: u64, record: T) {
    if cookie & COOKIE_CALIBRATE != 0 {
        emit_discarded(record);
    } else {
        emit(record);
    }
}

#[uprobe]
pub fn func_entry(ctx: ProbeContext) -> u32 {
    try_func_entry(&ctx);
    0
}

#[inline(always)]
fn try_func_entry(ctx: &ProbeContext) {
    let (pid, tid) = current();
    // SAFETY: helper on the program's own context.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    if cookie & COOKIE_ENROLL != 0 {
        // Entry point of an `--exe` target: every new process of it is traced
        // from its first instruction.
        if !trace(pid, TRACED_ROOT) {
            count(Stat::PidMapFull);
            return;
        }
        // Said at once (user space reads the new process's /proc while it
        // lives), with where the entry point is mapped (the executable's
        // place in the process, should it be gone before that).
        // SAFETY: the context of a uprobe is the task's saved user registers.
        let ip = unsafe { (*ctx.regs).rip };
        emit_urgent(Enroll {
            header: header(kind::ENROLL, size_of::<Enroll>(), pid, tid),
            target: (cookie & COOKIE_FUNC_MASK) as u32,
            _pad: 0,
            entry_ip: ip,
        });
        return;
    }
    if !wanted(cookie, pid, true) {
        return;
    }
    // SAFETY: the context of a uprobe is the task's saved user registers.
    let regs = unsafe { &*ctx.regs };
    let func_id = (cookie & COOKIE_FUNC_MASK) as u32;
    if cookie & COOKIE_ARGS == 0 {
        // At the first instruction the stack pointer points at the return address.
        // SAFETY: reading user memory through the checked helper.
        let call_site = unsafe { bpf_probe_read_user(regs.rsp as *const u64) }.unwrap_or_else(|_| {
            count(Stat::CallSiteUnreadable);
            0
        });
        emit_or_discard(cookie, FuncEntry {
            header: header(kind::FUNC_ENTRY, size_of::<FuncEntry>(), pid, tid),
            func_id,
            _pad: 0,
            ip: regs.rip,
            call_site,
        });
    } else {
        // The return address and, above it, the stack-passed arguments 7 to
        // 10 (System V AMD64): one read.
        // SAFETY: reading user memory through the checked helper.
        let words = unsafe { bpf_probe_read_user(regs.rsp as *const [u64; 1 + STACK_ARGS]) }
            .unwrap_or_else(|_| {
                count(Stat::CallSiteUnreadable);
                [0; 1 + STACK_ARGS]
            });
        emit_or_discard(cookie, FuncEntryStack {
            entry: FuncEntryArgs {
                entry: FuncEntry {
                    header: header(
                        kind::FUNC_ENTRY_STACK,
                        size_of::<FuncEntryStack>(),
                        pid,
                        tid,
                    ),
                    func_id,
                    _pad: 0,
                    ip: regs.rip,
                    call_site: words[0],
                },
                args: [regs.rdi, regs.rsi, regs.rdx, regs.rcx, regs.r8, regs.r9],
            },
            stack: [words[1], words[2], words[3], words[4]],
        });
    }
}

#[uretprobe]
pub fn func_return(ctx: RetProbeContext) -> u32 {
    let (pid, tid) = current();
    // SAFETY: helper on the program's own context.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    if !wanted(cookie, pid, false) {
        return 0;
    }
    // SAFETY: the context of a uretprobe is the task's saved user registers.
    let ret = unsafe { (*ctx.regs).rax };
    emit_or_discard(cookie, FuncReturn {
        header: header(kind::FUNC_RETURN, size_of::<FuncReturn>(), pid, tid),
        func_id: (cookie & COOKIE_FUNC_MASK) as u32,
        _pad: 0,
        ret,
    });
    0
}

/// Empty entry program: attached by `tracer record --bench-empty-probe` so
/// benchmarks can compare the tracing cost with the bare uprobe cost.
#[uprobe]
pub fn empty_entry(_ctx: ProbeContext) -> u32 {
    0
}

/// Empty return program, the pair of [`empty_entry`].
#[uretprobe]
pub fn empty_return(_ctx: RetProbeContext) -> u32 {
    0
}
