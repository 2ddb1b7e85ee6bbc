//! Instruction-pointer samples from a perf cpu-clock event on every CPU.

use aya_ebpf::{
    EbpfContext as _, bindings::BPF_F_USER_STACK, helpers::generated::bpf_get_stack,
    macros::perf_event, programs::PerfEventContext,
};
use tracer_common::{
    record::{Sample, kind},
    stats::Stat,
};

use crate::{SAMPLE_ALL, count, current, emit, global, header, is_traced};

#[perf_event]
pub fn sample(ctx: PerfEventContext) -> u32 {
    let (pid, tid) = current();
    if global(&SAMPLE_ALL) == 0 && !is_traced(pid) {
        return 0;
    }
    // SAFETY: the context of a perf event program is its sample data.
    let regs = unsafe { &(*ctx.ctx).regs };
    let in_user = regs.cs & 3 == 3;
    let (user_ip, kernel_ip) = if in_user {
        (regs.rip, 0)
    } else if pid == 0 {
        (0, regs.rip)
    } else {
        // In the kernel: the first frame of the user stack is where the thread
        // returns to user space.
        let mut frame = [0u64; 1];
        // SAFETY: helper writing at most 8 bytes into `frame`.
        let got = unsafe {
            bpf_get_stack(
                ctx.as_ptr(),
                frame.as_mut_ptr().cast(),
                8,
                BPF_F_USER_STACK as u64,
            )
        };
        if got < 8 {
            count(Stat::UserIpUnreadable);
        }
        (if got >= 8 { frame[0] } else { 0 }, regs.rip)
    };
    emit(Sample {
        header: header(kind::SAMPLE, size_of::<Sample>(), pid, tid),
        user_ip,
        kernel_ip,
        comm: ctx.command().unwrap_or([0; 16]),
    });
    0
}
