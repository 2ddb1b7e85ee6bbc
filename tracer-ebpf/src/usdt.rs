//! USDT probes: a uprobe at each `.note.stapsdt` probe site, attached
//! through uprobe_multi links with the site's index as attach cookie. The
//! argument specs of every site are in [`USDT_SPECS`]; each argument is
//! fetched from the saved registers, from user memory at register + offset,
//! or is a constant, as libbpf's `usdt.bpf.h` does.
//! <https://github.com/libbpf/libbpf/blob/v1.4.0/src/usdt.bpf.h#L120-L180>

use aya_ebpf::{
    EbpfContext as _,
    helpers::{bpf_probe_read_kernel, bpf_probe_read_user, generated::bpf_get_attach_cookie},
    macros::{map, uprobe},
    maps::Array,
    programs::ProbeContext,
};
use tracer_common::{
    USDT_MAX_SITES,
    record::{USDT_MAX_ARGS, UsdtArgSpec, UsdtHit, kind, usdt_arg},
    stats::Stat,
};

use crate::{count, current, emit, header, is_traced};

/// Argument specs by probe site (the attach cookie).
#[map]
static USDT_SPECS: Array<tracer_common::record::UsdtSpec> =
    Array::with_max_entries(USDT_MAX_SITES, 0);

/// Size of x86-64 `struct pt_regs`: register offsets must stay below it.
const PT_REGS_SIZE: u8 = 168;

#[uprobe]
pub fn usdt(ctx: ProbeContext) -> u32 {
    try_usdt(&ctx);
    0
}

#[inline(always)]
fn try_usdt(ctx: &ProbeContext) {
    let (pid, tid) = current();
    if !is_traced(pid) {
        return;
    }
    // SAFETY: helper on the program's own context.
    let probe_id = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let Some(spec) = USDT_SPECS.get(probe_id) else {
        count(Stat::UsdtArgUnreadable);
        return;
    };
    let nargs = spec.nargs.min(USDT_MAX_ARGS as u32);
    let mut args = [0u64; USDT_MAX_ARGS];
    for (i, slot) in args.iter_mut().enumerate() {
        if i as u32 >= nargs {
            break;
        }
        match fetch(ctx, &spec.args[i]) {
            Some(v) => *slot = v,
            None => count(Stat::UsdtArgUnreadable),
        }
    }
    emit(UsdtHit {
        header: header(kind::USDT, size_of::<UsdtHit>(), pid, tid),
        probe_id,
        nargs,
        args,
    });
}

/// The value of one argument, extended from its size to 64 bits.
#[inline(always)]
fn fetch(ctx: &ProbeContext, arg: &UsdtArgSpec) -> Option<u64> {
    let reg = || -> Option<u64> {
        if arg.reg_off > PT_REGS_SIZE - 8 {
            return None;
        }
        // SAFETY: reading the saved user registers (kernel memory) through
        // the checked helper, at an offset inside `struct pt_regs`.
        unsafe {
            bpf_probe_read_kernel(
                (ctx.regs as *const u8).add(usize::from(arg.reg_off)) as *const u64,
            )
        }
        .ok()
    };
    let raw = match arg.kind {
        usdt_arg::CONST => arg.value as u64,
        usdt_arg::REG => reg()?,
        usdt_arg::MEM => {
            let base = reg()?;
            // Eight bytes, the value in the low ones (little-endian), like libbpf.
            // SAFETY: reading user memory through the checked helper.
            unsafe { bpf_probe_read_user(base.wrapping_add(arg.value as u64) as *const u64) }
                .ok()?
        }
        _ => return None,
    };
    let shift = match arg.size {
        1 => 56,
        2 => 48,
        4 => 32,
        _ => 0,
    };
    Some(if arg.signed != 0 {
        (((raw << shift) as i64) >> shift) as u64
    } else {
        (raw << shift) >> shift
    })
}
