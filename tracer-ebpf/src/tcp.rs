//! TCP retransmissions, node-wide. They fire in softirq or timer context, so
//! the task they interrupt says nothing; the socket does. The raw tracepoint
//! reads the socket (its owner, its identity); the perf tracepoint below is
//! for kernels without BTF, where only the addresses are known.

use aya_ebpf::{
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
};
use tracer_common::{
    kernel::TcpRetransmitSock,
    record::{TcpRetransmit, kind},
};

use crate::{
    SOCK_OWNER, TP_OFFSETS, current, emit, global, header,
    kernel::{off, read},
};

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

/// `tcp_retransmit_skb(sk, skb, err)` as a raw tracepoint: the addresses
/// from the socket itself, what identifies the event alike for every
/// recorder of the host (socket, buffer, sequence number, the socket's
/// retransmission count), and the traced process of this recorder that last
/// used the socket (its owner), so no address lookup is needed to say whose
/// retransmission it is.
#[raw_tracepoint(tracepoint = "tcp_retransmit_skb")]
pub fn raw_tcp_retransmit(ctx: RawTracePointContext) -> i32 {
    let sk: u64 = ctx.arg(0);
    let skb: u64 = ctx.arg(1);
    let err: i64 = ctx.arg(2);
    let (pid, tid) = current();
    let family: u16 = read(sk, off!(sk_family)).unwrap_or(0);
    let mut saddr = [0u8; 16];
    let mut daddr = [0u8; 16];
    if family == AF_INET6 {
        saddr = read(sk, off!(sk_v6_rcv_saddr)).unwrap_or([0; 16]);
        daddr = read(sk, off!(sk_v6_daddr)).unwrap_or([0; 16]);
    } else {
        let s: [u8; 4] = read(sk, off!(sk_rcv_saddr)).unwrap_or([0; 4]);
        let d: [u8; 4] = read(sk, off!(sk_daddr)).unwrap_or([0; 4]);
        saddr[..4].copy_from_slice(&s);
        daddr[..4].copy_from_slice(&d);
    }
    let net: u64 = read(sk, off!(sk_net)).unwrap_or(0);
    let cb_seq = off!(skb_cb).saturating_add(off!(tcp_cb_seq));
    let header = header(
        kind::TCP_RETRANSMIT_SOCK,
        size_of::<TcpRetransmitSock>(),
        pid,
        tid,
    );
    emit(TcpRetransmitSock {
        base: TcpRetransmit {
            header,
            sport: read(sk, off!(sk_num)).unwrap_or(0),
            dport: u16::from_be(read(sk, off!(sk_dport)).unwrap_or(0)),
            family,
            state: u16::from(read::<u8>(sk, off!(sk_state)).unwrap_or(0)),
            saddr,
            daddr,
        },
        sk,
        skb,
        // SAFETY: the value is copied out.
        owner: unsafe { SOCK_OWNER.get(&sk) }.copied().unwrap_or(0),
        seq: read(skb, cb_seq).unwrap_or(0),
        total_retrans: read(sk, off!(tcp_total_retrans)).unwrap_or(0),
        err: err as i32,
        netns: read(net, off!(net_inum)).unwrap_or(0),
        _pad: 0,
    });
    0
}

const AF_INET6: u16 = 10;
