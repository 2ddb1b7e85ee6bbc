//! TCP retransmissions, node-wide (they fire in softirq context, so they
//! cannot be attributed to a process; the peer address is the signal).

use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use tracer_common::record::{TcpRetransmit, kind};

use crate::{TP_OFFSETS, current, emit, global, header};

#[inline(always)]
fn field<T: Default>(ctx: &TracePointContext, offset: u16) -> T {
    if offset == u16::MAX {
        return T::default();
    }
    // SAFETY: a field inside the tracepoint record, offset from its format file.
    unsafe { ctx.read_at::<T>(offset as usize) }.unwrap_or_default()
}

#[tracepoint]
pub fn tcp_retransmit(ctx: TracePointContext) -> u32 {
    let off = global(&TP_OFFSETS);
    let (pid, tid) = current();
    let family: u16 = field(&ctx, off.tcp_family);
    let (saddr, daddr) = if family == 10 {
        (
            field::<[u8; 16]>(&ctx, off.tcp_saddr_v6),
            field::<[u8; 16]>(&ctx, off.tcp_daddr_v6),
        )
    } else {
        let (s, d): ([u8; 4], [u8; 4]) = (field(&ctx, off.tcp_saddr), field(&ctx, off.tcp_daddr));
        let (mut s16, mut d16) = ([0u8; 16], [0u8; 16]);
        s16[..4].copy_from_slice(&s);
        d16[..4].copy_from_slice(&d);
        (s16, d16)
    };
    emit(TcpRetransmit {
        header: header(kind::TCP_RETRANSMIT, size_of::<TcpRetransmit>(), pid, tid),
        sport: field(&ctx, off.tcp_sport),
        dport: field(&ctx, off.tcp_dport),
        family,
        state: field::<i32>(&ctx, off.tcp_state) as u16,
        saddr,
        daddr,
    });
    0
}
