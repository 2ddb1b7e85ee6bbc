//! USDT probes: a uprobe at each `.note.stapsdt` probe site, attached
//! through uprobe_multi links with the site's index as attach cookie. The
//! argument specs of every site are in [`USDT_SPECS`]; each argument is
//! fetched from the saved registers, from user memory at register + offset,
//! or is a constant, as libbpf's `usdt.bpf.h` does.
//! <https://github.com/libbpf/libbpf/blob/v1.4.0/src/usdt.bpf.h#L120-L180>

use aya_ebpf::{
    EbpfContext as _,
    helpers::{
        bpf_probe_read_kernel, bpf_probe_read_user, bpf_probe_read_user_str_bytes,
        generated::bpf_get_attach_cookie,
    },
    macros::{map, uprobe},
    maps::{Array, LruHashMap},
    programs::ProbeContext,
};
use tracer_common::{
    COOKIE_USDT_SILENT, USDT_MAX_SITES,
    record::{
        USDT_ARG_STRING, USDT_MAX_ARGS, UsdtArgSpec, UsdtHit, UsdtString, kind, usdt_arg,
    },
    stats::Stat,
};

use crate::{count, current, emit, header, is_traced};

/// Argument specs by probe site (the attach cookie).
#[map]
static USDT_SPECS: Array<tracer_common::record::UsdtSpec> =
    Array::with_max_entries(USDT_MAX_SITES, 0);

/// String arguments already sent: (process, pointer, first 8 bytes). The
/// first bytes catch a pointer reused for other text (freed and
/// reallocated); LRU so a long run forgets old entries (they are sent again).
#[map]
static USDT_STRINGS_SENT: LruHashMap<StringKey, u8> = LruHashMap::with_max_entries(65536, 0);

/// Key of [`USDT_STRINGS_SENT`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StringKey {
    ptr: u64,
    prefix: u64,
    tgid: u32,
    _pad: u32,
}

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
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    if cookie & COOKIE_USDT_SILENT != 0 {
        // Attached only to hold a semaphore raised.
        return;
    }
    let probe_id = cookie as u32;
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
        let arg = &spec.args[i];
        match fetch(ctx, arg) {
            Some(v) => {
                *slot = v;
                if arg.flags & USDT_ARG_STRING != 0 && v != 0 {
                    send_string(pid, tid, v);
                }
            }
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

/// Sends the text at `ptr` unless this process already sent it.
#[inline(always)]
fn send_string(pid: u32, tid: u32, ptr: u64) {
    // SAFETY: reading user memory through the checked helper.
    let Ok(prefix) = (unsafe { bpf_probe_read_user(ptr as *const u64) }) else {
        count(Stat::UsdtArgUnreadable);
        return;
    };
    let key = StringKey {
        ptr,
        prefix,
        tgid: pid,
        _pad: 0,
    };
    // SAFETY: the value is only checked for presence.
    if unsafe { USDT_STRINGS_SENT.get(&key) }.is_some() {
        return;
    }
    let mut rec = UsdtString {
        header: header(kind::USDT_STRING, size_of::<UsdtString>(), pid, tid),
        ..UsdtString::default()
    };
    // SAFETY: reading user memory through the checked helper into our buffer.
    match unsafe { bpf_probe_read_user_str_bytes(ptr as *const u8, &mut rec.text) } {
        Ok(text) => rec.len = text.len() as u32,
        Err(_) => {
            count(Stat::UsdtArgUnreadable);
            return;
        }
    }
    rec.ptr = ptr;
    emit(rec);
    let _ = USDT_STRINGS_SENT.insert(&key, &1, 0);
}
