//! Decoded events: the record structs of `tracer-common`, by kind.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::{
    kernel::{BlockIo, DeviceName, FileIo, NetAddr, NetDev, NetSnmp, TcpRetransmitSock},
    record::{
        BlockedStack, CpuTimes, Enroll, FRAME_WORDS, FuncEntry, FuncReturn, Header, Lifecycle, Pod,
        STACK_ARGS, Sample, SockAddr, Syscall, TcpRetransmit, UsdtHit, UsdtString, kind,
    },
    syscall,
};

/// The top of a caller's stack at a function's entry (see
/// [`crate::record::FuncEntryFrame`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The stack pointer at entry: the address of `words[0]`.
    pub sp: u64,
    /// The words at `sp` and above (`words[0]` is the return address).
    pub words: [u64; FRAME_WORDS],
}

/// One decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Function entry; `args` when the probe recorded argument registers,
    /// `stack` when it read the stack-passed ones too.
    Entry {
        /// The record.
        rec: FuncEntry,
        /// rdi, rsi, rdx, rcx, r8, r9.
        args: Option<[u64; 6]>,
        /// Arguments 7 to 10 (absent in records of older recorders).
        stack: Option<[u64; STACK_ARGS]>,
        /// The top of the stack, for a call from outside the main
        /// executable's text ([`kind::FUNC_ENTRY_FRAME`]).
        frame: Option<Box<Frame>>,
    },
    /// Function return.
    Return(FuncReturn),
    /// A system call.
    Syscall(Syscall),
    /// An instruction-pointer sample.
    Sample(Sample),
    /// Fork, exec or exit.
    Lifecycle(Lifecycle),
    /// A process started running an `--exe` target.
    Enroll(Enroll),
    /// A TCP retransmission (from an older capture, with its addresses only:
    /// [`TcpRetransmitSock::identity`] is `None`). Reads as a
    /// [`TcpRetransmit`] through `Deref`.
    TcpRetransmit(TcpRetransmitSock),
    /// A USDT probe fired; `Capture::usdt_probe(rec.probe_id)` names it.
    Usdt(UsdtHit),
    /// The text of a USDT string argument (see [`Event::usdt_text`]).
    UsdtString(UsdtString),
    /// File I/O system calls of a process during a stats interval.
    FileIo(FileIo),
    /// Block requests of a device and submitter during a stats interval.
    BlockIo(BlockIo),
    /// A network interface's counters (cumulative).
    NetDev(NetDev),
    /// A network namespace's IP/TCP/UDP counters (cumulative).
    NetSnmp(NetSnmp),
    /// The name of a device.
    DeviceName(DeviceName),
    /// A local address of a network namespace.
    NetAddr(NetAddr),
    /// A traced process's CPU times, read by the recorder.
    CpuTimes(CpuTimes),
    /// A traced thread inside a system call at the stop, with its stack.
    Blocked(Box<BlockedStack>),
    /// A record of a kind this build does not know (skipped, counted).
    Unknown(Header),
}

impl Event {
    /// Decodes one record (header included). `None` if it is shorter than its kind.
    #[inline]
    pub fn decode(header: &Header, bytes: &[u8]) -> Option<Self> {
        Some(match header.kind {
            kind::FUNC_ENTRY => Self::Entry {
                rec: FuncEntry::read_from(bytes)?,
                args: None,
                stack: None,
                frame: None,
            },
            kind::FUNC_ENTRY_ARGS => {
                let full = crate::record::FuncEntryArgs::read_from(bytes)?;
                Self::Entry {
                    rec: full.entry,
                    args: Some(full.args),
                    stack: None,
                    frame: None,
                }
            }
            kind::FUNC_ENTRY_STACK => {
                let full = crate::record::FuncEntryStack::read_from(bytes)?;
                Self::Entry {
                    rec: full.entry.entry,
                    args: Some(full.entry.args),
                    stack: Some(full.stack),
                    frame: None,
                }
            }
            kind::FUNC_ENTRY_FRAME => {
                // Every field is plain data and bounded by its type: the
                // words are only ever read as values, never followed.
                let full = crate::record::FuncEntryFrame::read_from(bytes)?;
                Self::Entry {
                    rec: full.entry.entry.entry,
                    args: Some(full.entry.entry.args),
                    stack: Some(full.entry.stack),
                    frame: Some(Box::new(Frame {
                        sp: full.sp,
                        words: full.frame,
                    })),
                }
            }
            kind::FUNC_RETURN => Self::Return(FuncReturn::read_from(bytes)?),
            kind::SYSCALL => Self::Syscall(Syscall::read_from(bytes)?),
            kind::SAMPLE => Self::Sample(Sample::read_from(bytes)?),
            kind::LIFECYCLE => Self::Lifecycle(Lifecycle::read_from(bytes)?),
            kind::ENROLL => Self::Enroll(Enroll::read_from(bytes)?),
            kind::TCP_RETRANSMIT => Self::TcpRetransmit(TcpRetransmitSock {
                base: TcpRetransmit::read_from(bytes)?,
                ..TcpRetransmitSock::default()
            }),
            kind::TCP_RETRANSMIT_SOCK => Self::TcpRetransmit(TcpRetransmitSock::read_from(bytes)?),
            kind::USDT => Self::Usdt(UsdtHit::read_from(bytes)?),
            kind::USDT_STRING => Self::UsdtString(UsdtString::read_from(bytes)?),
            kind::FILE_IO => Self::FileIo(FileIo::read_from(bytes)?),
            kind::BLOCK_IO => Self::BlockIo(BlockIo::read_from(bytes)?),
            kind::NET_DEV => Self::NetDev(NetDev::read_from(bytes)?),
            kind::NET_SNMP => Self::NetSnmp(NetSnmp::read_from(bytes)?),
            kind::DEVICE_NAME => Self::DeviceName(DeviceName::read_from(bytes)?),
            kind::NET_ADDR => Self::NetAddr(NetAddr::read_from(bytes)?),
            kind::CPU_TIMES => Self::CpuTimes(CpuTimes::read_from(bytes)?),
            kind::BLOCKED_STACK => Self::Blocked(Box::new(BlockedStack::read_from(bytes)?)),
            _ => Self::Unknown(*header),
        })
    }

    /// The record's header.
    pub fn header(&self) -> &Header {
        match self {
            Self::Entry { rec, .. } => &rec.header,
            Self::Return(r) => &r.header,
            Self::Syscall(r) => &r.header,
            Self::Sample(r) => &r.header,
            Self::Lifecycle(r) => &r.header,
            Self::Enroll(r) => &r.header,
            Self::TcpRetransmit(r) => &r.base.header,
            Self::Usdt(r) => &r.header,
            Self::UsdtString(r) => &r.header,
            Self::FileIo(r) => &r.header,
            Self::BlockIo(r) => &r.header,
            Self::NetDev(r) => &r.header,
            Self::NetSnmp(r) => &r.header,
            Self::DeviceName(r) => &r.header,
            Self::NetAddr(r) => &r.header,
            Self::CpuTimes(r) => &r.header,
            Self::Blocked(r) => &r.header,
            Self::Unknown(h) => h,
        }
    }

    /// Short name of the event's kind.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::Entry { .. } => "entry",
            Self::Return(_) => "return",
            Self::Syscall(_) => "syscall",
            Self::Sample(_) => "sample",
            Self::Lifecycle(l) => match l.event {
                crate::record::lifecycle::FORK => "fork",
                crate::record::lifecycle::EXEC => "exec",
                _ => "exit",
            },
            Self::Enroll(_) => "enroll",
            Self::TcpRetransmit(_) => "tcp_retransmit",
            Self::Usdt(_) => "usdt",
            Self::UsdtString(_) => "usdt_string",
            Self::FileIo(_) => "file_io",
            Self::BlockIo(_) => "block_io",
            Self::NetDev(_) => "net_dev",
            Self::NetSnmp(_) => "net_snmp",
            Self::DeviceName(_) => "device_name",
            Self::NetAddr(_) => "net_addr",
            Self::CpuTimes(_) => "cpu_times",
            Self::Blocked(_) => "blocked",
            Self::Unknown(_) => "unknown",
        }
    }
}

impl Event {
    /// For a USDT string record: (pid, pointer, text). Hits of the same
    /// process that carry the pointer after this record mean this text.
    pub fn usdt_text(&self) -> Option<(u32, u64, String)> {
        let Self::UsdtString(s) = self else {
            return None;
        };
        let len = (s.len as usize).min(s.text.len());
        Some((
            s.header.pid,
            s.ptr,
            String::from_utf8_lossy(&s.text[..len]).into_owned(),
        ))
    }
}

/// Name of system call `nr`.
pub fn syscall_name(nr: u32) -> String {
    syscall::name(nr)
        .map(str::to_string)
        .unwrap_or_else(|| format!("syscall_{nr}"))
}

/// An IP address of a `family` (`AF_INET` in the first 4 bytes, or
/// `AF_INET6`), IPv4-mapped IPv6 addresses folded to IPv4; `None` for
/// another family.
pub fn ip_addr(family: u16, addr: &[u8; 16]) -> Option<std::net::IpAddr> {
    use std::net::IpAddr;
    match family {
        2 => Some(IpAddr::V4(Ipv4Addr::new(
            addr[0], addr[1], addr[2], addr[3],
        ))),
        10 => {
            let v6 = Ipv6Addr::from(*addr);
            Some(match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            })
        }
        _ => None,
    }
}

/// A socket address as text (`1.2.3.4:80`, `[::1]:80`, `unix:/path`), or
/// `None` when absent.
pub fn addr_string(addr: &SockAddr) -> Option<String> {
    let port = u16::from_be(addr.port_be);
    match addr.family {
        2 => {
            let ip = Ipv4Addr::new(addr.addr[0], addr.addr[1], addr.addr[2], addr.addr[3]);
            Some(format!("{ip}:{port}"))
        }
        10 => Some(format!("[{}]:{port}", Ipv6Addr::from(addr.addr))),
        1 => {
            let end = addr
                .addr
                .iter()
                .position(|b| *b == 0)
                .unwrap_or(addr.addr.len());
            Some(format!(
                "unix:{}",
                String::from_utf8_lossy(&addr.addr[..end])
            ))
        }
        _ => None,
    }
}

/// A NUL-padded command name as text.
pub fn comm_string(comm: &[u8; 16]) -> String {
    nul_padded(comm)
}

/// A NUL-padded name (interface, device, mount point) as text.
pub fn nul_padded(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// A kernel `dev_t` as `major:minor`.
pub fn dev_string(dev: u32) -> String {
    let (major, minor) = crate::kernel::dev_parts(dev);
    format!("{major}:{minor}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_addresses() {
        let v4 = SockAddr {
            family: 2,
            port_be: 8080u16.to_be(),
            _pad: 0,
            addr: [127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        };
        assert_eq!(addr_string(&v4).as_deref(), Some("127.0.0.1:8080"));
        let mut v6 = SockAddr {
            family: 10,
            port_be: 443u16.to_be(),
            ..Default::default()
        };
        v6.addr[15] = 1;
        assert_eq!(addr_string(&v6).as_deref(), Some("[::1]:443"));
        assert_eq!(addr_string(&SockAddr::default()), None);
    }
}
