//! Function entry and return: uprobes and uretprobes attached at the traced
//! functions, with the function id in the attach cookie.

use aya_ebpf::{
    EbpfContext as _,
    helpers::{bpf_probe_read_user, bpf_probe_read_user_buf, generated::bpf_get_attach_cookie},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use tracer_common::{
    COOKIE_ARGS, COOKIE_CALIBRATE, COOKIE_ENROLL, COOKIE_FUNC_MASK, COOKIE_GEN, TRACED_ROOT,
    record::{
        Enroll, FRAME_WORDS, FuncEntry, FuncEntryArgs, FuncEntryFrame, FuncEntryStack, FuncReturn,
        STACK_ARGS, kind,
    },
    stats::Stat,
};

use crate::{
    EVENTS, FUNC_GEN, FUNC_HITS, count, current, emit, emit_discarded, emit_urgent, header,
    is_traced,
    kernel::{current_task, off, read},
    trace,
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
        // A call from a library (a language binding: Fortran's `mpi_send_`)
        // keeps the top of the stack, where the binding's own return
        // address into the program is.
        if from_library(words[0]) {
            emit_frame(cookie, pid, tid, func_id, regs);
            return;
        }
        let len = size_of::<FuncEntryStack>();
        let entry = stack_entry(kind::FUNC_ENTRY_STACK, len, pid, tid, func_id, regs, &words);
        emit_or_discard(cookie, entry);
    }
}

/// The entry of a probe with arguments: registers, the return address and
/// the stack-passed arguments 7 to 10 (`words`), with a header of record
/// `kind` and `len` bytes (the plain record, or the frame record's head).
#[inline(always)]
fn stack_entry(
    kind: u16,
    len: usize,
    pid: u32,
    tid: u32,
    func_id: u32,
    regs: &aya_ebpf::bindings::pt_regs,
    words: &[u64; 1 + STACK_ARGS],
) -> FuncEntryStack {
    FuncEntryStack {
        entry: FuncEntryArgs {
            entry: FuncEntry {
                header: header(kind, len, pid, tid),
                func_id,
                _pad: 0,
                ip: regs.rip,
                call_site: words[0],
            },
            args: [regs.rdi, regs.rsi, regs.rdx, regs.rcx, regs.r8, regs.r9],
        },
        stack: [words[1], words[2], words[3], words[4]],
    }
}

/// Whether the return address `ret` lies outside the main executable's
/// text (`task->mm->start_code..end_code`). False when the range cannot be
/// read or `ret` is 0 (unread): the plain record is written then.
#[inline(always)]
fn from_library(ret: u64) -> bool {
    if ret == 0 {
        return false;
    }
    let Some(mm) = read::<u64>(current_task(), off!(task_mm)) else {
        return false;
    };
    let (Some(start), Some(end)) = (
        read::<u64>(mm, off!(mm_start_code)),
        read::<u64>(mm, off!(mm_end_code)),
    ) else {
        return false;
    };
    ret < start || ret >= end
}

/// Writes a [`FuncEntryFrame`]: the entry, its arguments and the
/// [`FRAME_WORDS`] stack words at `rsp`, read straight into the ring.
#[inline(always)]
fn emit_frame(
    cookie: u64,
    pid: u32,
    tid: u32,
    func_id: u32,
    regs: &aya_ebpf::bindings::pt_regs,
) {
    let Some(mut slot) = EVENTS.reserve::<FuncEntryFrame>(0) else {
        count(Stat::RingFull);
        return;
    };
    let rec = slot.as_mut_ptr();
    // SAFETY: `rec` is the reserved record, written field by field before it
    // is submitted; the user stack is read through the checked helper.
    unsafe {
        let frame = &mut (*rec).frame;
        let bytes = &mut *(frame as *mut [u64; FRAME_WORDS] as *mut [u8; 8 * FRAME_WORDS]);
        if bpf_probe_read_user_buf(regs.rsp as *const u8, bytes).is_err() {
            count(Stat::CallSiteUnreadable);
            *frame = [0; FRAME_WORDS];
        }
        let frame = &(*rec).frame;
        (*rec).sp = regs.rsp;
        let words = [frame[0], frame[1], frame[2], frame[3], frame[4]];
        let len = size_of::<FuncEntryFrame>();
        (*rec).entry = stack_entry(kind::FUNC_ENTRY_FRAME, len, pid, tid, func_id, regs, &words);
    }
    if cookie & COOKIE_CALIBRATE != 0 {
        slot.discard(aya_ebpf::bindings::BPF_RB_NO_WAKEUP as u64);
    } else {
        crate::submit_entry(slot);
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
