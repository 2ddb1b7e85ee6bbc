//! File I/O system calls of the traced processes, counted in the kernel per
//! process, call and device (`FILE_STATS`, cumulative per CPU): a file
//! server makes tens of thousands of them a second, and what the analyses
//! need of them is counts, bytes and time per interval, not a record each.

use tracer_common::{
    kernel::{FileAgg, FileKey, file_class, latency_bucket},
    record::SyscallEnter,
    stats::Stat,
};

use crate::{FILE_STATS, count};

/// Adds one completed call (entry state `enter`, return value `ret`).
#[inline(always)]
pub fn count_call(pid: u32, enter: &SyscallEnter, ret: i64) {
    // SAFETY: helper without preconditions.
    let now = unsafe { aya_ebpf::helpers::generated::bpf_ktime_get_ns() };
    let took = now.saturating_sub(enter.ts_ns);
    let key = FileKey {
        pid,
        dev: enter.dev,
        nr: enter.nr,
        _pad: 0,
    };
    let Some(agg) = counters(&key) else {
        count(Stat::FileMapFull);
        return;
    };
    let class = enter.file_class as u8;
    // SAFETY: this CPU's value of a per-CPU map; nothing else writes it
    // while this program runs on this CPU.
    unsafe {
        (*agg).calls += 1;
        if ret < 0 {
            (*agg).errors += 1;
        } else if class == file_class::READ || class == file_class::WRITE {
            (*agg).bytes += ret as u64;
        }
        (*agg).time_ns += took;
        if let Some(slot) = (*agg).hist.get_mut(latency_bucket(took)) {
            *slot += 1;
        }
    }
}

/// This CPU's counters of `key`, created at zero when new.
#[inline(always)]
fn counters(key: &FileKey) -> Option<*mut FileAgg> {
    if let Some(agg) = FILE_STATS.get_ptr_mut(key) {
        return Some(agg);
    }
    // BPF_NOEXIST: another CPU may have created it meanwhile; either way
    // it exists now unless the map is full.
    let _ = FILE_STATS.insert(key, &FileAgg::default(), 1);
    FILE_STATS.get_ptr_mut(key)
}
