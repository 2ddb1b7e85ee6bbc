//! Block requests of the whole node, from raw tracepoints: created
//! (`block_io_start`, in the context of whoever submitted the bio),
//! issued to the driver (`block_rq_issue`), completed
//! (`block_rq_complete`). Counted in the kernel per device, submitter and
//! operation (`BLOCK_STATS`): latency from creation and from issue, bytes,
//! a latency histogram. A request submitted by a kernel thread (page-cache
//! writeback, a loop device's worker, a throttled bio released later)
//! counts with submitter 0: it still counts for its device.

use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};
use tracer_common::{
    kernel::{BlockAgg, BlockKey, BlockStart, block_op, latency_bucket},
    stats::Stat,
};

use crate::{
    BLOCK_INFLIGHT, BLOCK_STATS, count, current,
    kernel::{self, off, read},
};

#[inline(always)]
fn now() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { aya_ebpf::helpers::generated::bpf_ktime_get_ns() }
}

/// The device a request is for: its first bio's partition, else its disk.
#[inline(always)]
fn device(rq: u64, bio: u64) -> u32 {
    if let Some(bdev) = read::<u64>(bio, off!(bio_bdev))
        && let Some(dev) = read::<u32>(bdev, off!(bdev_dev))
    {
        return dev;
    }
    let q: u64 = read(rq, off!(rq_q)).unwrap_or(0);
    let disk: u64 = read(q, off!(q_disk)).unwrap_or(0);
    match (
        read::<i32>(disk, off!(disk_major)),
        read::<i32>(disk, off!(disk_first_minor)),
    ) {
        (Some(major), Some(minor)) => ((major as u32) << 20) | (minor as u32 & 0xf_ffff),
        _ => {
            count(Stat::KernelUnreadable);
            0
        }
    }
}

/// Who is submitting now: the process, or 0 for a kernel thread.
#[inline(always)]
fn submitter() -> u32 {
    match kernel::current_is_kthread() {
        Some(false) => current().0,
        _ => 0,
    }
}

/// Starts tracking request `rq` now (a new request, or one whose start was
/// not seen).
#[inline(always)]
fn start(rq: u64, issued: bool) {
    let bio: u64 = read(rq, off!(rq_bio)).unwrap_or(0);
    let flags: u32 = read(rq, off!(rq_cmd_flags)).unwrap_or(0);
    let t = now();
    let entry = BlockStart {
        start_ns: t,
        issue_ns: if issued { t } else { 0 },
        bio,
        bytes: if issued {
            u64::from(read::<u32>(rq, off!(rq_data_len)).unwrap_or(0))
        } else {
            0
        },
        pid: submitter(),
        dev: device(rq, bio),
        op: block_op::of_cmd_flags(flags),
        _pad: 0,
    };
    match BLOCK_INFLIGHT.get_ptr_mut(&rq) {
        // SAFETY: a map value; the request at this address is this one now
        // (its previous one completed before it was reused).
        Some(slot) => unsafe { *slot = entry },
        None => {
            if BLOCK_INFLIGHT.insert(&rq, &entry, 0).is_err() {
                count(Stat::BlockInflightFull);
            }
        }
    }
}

#[raw_tracepoint(tracepoint = "block_io_start")]
pub fn block_io_start(ctx: RawTracePointContext) -> i32 {
    start(ctx.arg(0), false);
    0
}

#[raw_tracepoint(tracepoint = "block_rq_issue")]
pub fn block_rq_issue(ctx: RawTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    let bio: u64 = read(rq, off!(rq_bio)).unwrap_or(0);
    match BLOCK_INFLIGHT.get_ptr_mut(&rq) {
        // Created before, not yet issued (a requeued one is issued again:
        // its first issue stands); not a completed one's entry.
        // SAFETY: a map value, read in place.
        Some(e) if unsafe { (*e).start_ns != 0 && (*e).bio == bio } => {
            let bytes = u64::from(read::<u32>(rq, off!(rq_data_len)).unwrap_or(0));
            // SAFETY: a map value; a concurrent update of the same request
            // cannot happen (it is issued on one CPU at a time).
            unsafe {
                if (*e).issue_ns == 0 {
                    (*e).issue_ns = now();
                    (*e).bytes = bytes;
                }
            }
        }
        // Not seen being created (a flush, a driver's own request), or the
        // request object reused for another request.
        _ => start(rq, true),
    }
    0
}

#[raw_tracepoint(tracepoint = "block_rq_complete")]
pub fn block_rq_complete(ctx: RawTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    let error: u64 = ctx.arg(1);
    let Some(slot) = BLOCK_INFLIGHT.get_ptr_mut(&rq) else {
        return 0;
    };
    // SAFETY: a map value, copied out, then marked done in place: a partial
    // completion counts the request once, at its first part.
    let e = unsafe {
        let e = *slot;
        (*slot).start_ns = 0;
        e
    };
    if e.start_ns == 0 {
        // Done before (a later part of a partial completion).
        return 0;
    }
    if e.issue_ns == 0 {
        // Completed without being issued (merged away): nothing to count.
        return 0;
    }
    let t = now();
    let queued = t.saturating_sub(e.start_ns);
    let key = BlockKey {
        dev: e.dev,
        pid: e.pid,
        op: e.op,
        _pad: 0,
    };
    let agg = match BLOCK_STATS.get_ptr_mut(&key) {
        Some(agg) => agg,
        None => {
            let _ = BLOCK_STATS.insert(&key, &BlockAgg::default(), 1);
            match BLOCK_STATS.get_ptr_mut(&key) {
                Some(agg) => agg,
                None => {
                    count(Stat::BlockMapFull);
                    return 0;
                }
            }
        }
    };
    // SAFETY: this CPU's value of a per-CPU map.
    unsafe {
        (*agg).requests += 1;
        if error as u8 != 0 {
            (*agg).errors += 1;
        }
        (*agg).bytes += e.bytes;
        (*agg).queue_ns += queued;
        (*agg).service_ns += t.saturating_sub(e.issue_ns);
        if let Some(slot) = (*agg).hist.get_mut(latency_bucket(queued)) {
            *slot += 1;
        }
    }
    0
}
