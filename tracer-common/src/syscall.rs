//! The x86-64 system calls traced for the processes under observation.
//!
//! The eBPF programs attach to `syscalls:sys_enter_<name>` and
//! `syscalls:sys_exit_<name>` for each entry of [`TRACED`], and look up how to
//! read a call's arguments with [`spec`]. Calls that also apply to files
//! (`read`, `write`, `close`, ...) are recorded only on socket descriptors.

/// How to read one system call's arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Index of the fd argument, or [`NONE`].
    pub fd_arg: u8,
    /// Index of the sockaddr pointer argument, or [`NONE`].
    pub addr_arg: u8,
    /// Index of the argument stored in `Syscall::arg` (length, flags), or [`NONE`].
    pub len_arg: u8,
    /// Bits of [`flag`].
    pub flags: u8,
}

/// No such argument.
pub const NONE: u8 = 0xff;

/// Bits of [`Spec::flags`].
pub mod flag {
    /// Record only when the fd is a known socket of the process.
    pub const SOCKET_FD_ONLY: u8 = 1;
    /// A successful call returns a new socket fd.
    pub const RETURNS_SOCKET: u8 = 2;
    /// The call closes its fd.
    pub const CLOSES_FD: u8 = 4;
    /// The call waits for readiness (select/poll/epoll).
    pub const WAIT: u8 = 8;
    /// A successful call writes two new socket fds (`int sv[2]`) at the
    /// address argument; the record's `arg` holds them (`sv[0] | sv[1] << 32`).
    pub const RETURNS_PAIR: u8 = 16;
}

/// x86-64 system call numbers of the traced calls.
#[allow(missing_docs, reason = "the names are the documentation")]
pub mod nr {
    pub const READ: u32 = 0;
    pub const WRITE: u32 = 1;
    pub const CLOSE: u32 = 3;
    pub const POLL: u32 = 7;
    pub const READV: u32 = 19;
    pub const WRITEV: u32 = 20;
    pub const SELECT: u32 = 23;
    pub const SOCKET: u32 = 41;
    pub const SOCKETPAIR: u32 = 53;
    pub const CONNECT: u32 = 42;
    pub const ACCEPT: u32 = 43;
    pub const SENDTO: u32 = 44;
    pub const RECVFROM: u32 = 45;
    pub const SENDMSG: u32 = 46;
    pub const RECVMSG: u32 = 47;
    pub const SHUTDOWN: u32 = 48;
    pub const BIND: u32 = 49;
    pub const LISTEN: u32 = 50;
    pub const EPOLL_WAIT: u32 = 232;
    pub const PSELECT6: u32 = 270;
    pub const PPOLL: u32 = 271;
    pub const EPOLL_PWAIT: u32 = 281;
    pub const ACCEPT4: u32 = 288;
    pub const RECVMMSG: u32 = 299;
    pub const SENDMMSG: u32 = 307;
    pub const EPOLL_PWAIT2: u32 = 441;
}

/// Every traced system call: (number, tracefs name).
pub const TRACED: &[(u32, &str)] = &[
    (nr::READ, "read"),
    (nr::WRITE, "write"),
    (nr::CLOSE, "close"),
    (nr::POLL, "poll"),
    (nr::READV, "readv"),
    (nr::WRITEV, "writev"),
    (nr::SELECT, "select"),
    (nr::SOCKET, "socket"),
    (nr::SOCKETPAIR, "socketpair"),
    (nr::CONNECT, "connect"),
    (nr::ACCEPT, "accept"),
    (nr::SENDTO, "sendto"),
    (nr::RECVFROM, "recvfrom"),
    (nr::SENDMSG, "sendmsg"),
    (nr::RECVMSG, "recvmsg"),
    (nr::SHUTDOWN, "shutdown"),
    (nr::BIND, "bind"),
    (nr::LISTEN, "listen"),
    (nr::EPOLL_WAIT, "epoll_wait"),
    (nr::PSELECT6, "pselect6"),
    (nr::PPOLL, "ppoll"),
    (nr::EPOLL_PWAIT, "epoll_pwait"),
    (nr::ACCEPT4, "accept4"),
    (nr::RECVMMSG, "recvmmsg"),
    (nr::SENDMMSG, "sendmmsg"),
    (nr::EPOLL_PWAIT2, "epoll_pwait2"),
];

#[inline(always)]
const fn s(fd_arg: u8, addr_arg: u8, len_arg: u8, flags: u8) -> Option<Spec> {
    Some(Spec {
        fd_arg,
        addr_arg,
        len_arg,
        flags,
    })
}

/// How to read the arguments of system call `nr`, or `None` if it is not traced.
// Inlined: as a BPF subprogram, returning the `Option<Spec>` aggregate
// miscompiles (the verifier sees an unset r0).
#[inline(always)]
pub const fn spec(nr: u32) -> Option<Spec> {
    use flag::*;
    match nr {
        nr::READ | nr::WRITE => s(0, NONE, 2, SOCKET_FD_ONLY),
        nr::READV | nr::WRITEV => s(0, NONE, 2, SOCKET_FD_ONLY),
        nr::CLOSE => s(0, NONE, NONE, SOCKET_FD_ONLY | CLOSES_FD),
        nr::SOCKET => s(NONE, NONE, 0, RETURNS_SOCKET),
        nr::SOCKETPAIR => s(NONE, 3, 0, RETURNS_PAIR),
        nr::CONNECT | nr::BIND => s(0, 1, NONE, 0),
        nr::ACCEPT | nr::ACCEPT4 => s(0, 1, NONE, RETURNS_SOCKET),
        nr::SENDTO | nr::RECVFROM => s(0, 4, 2, 0),
        nr::SENDMSG | nr::RECVMSG | nr::SENDMMSG | nr::RECVMMSG => s(0, NONE, 2, 0),
        nr::SHUTDOWN | nr::LISTEN => s(0, NONE, 1, 0),
        nr::POLL | nr::PPOLL => s(NONE, NONE, 1, WAIT),
        nr::SELECT | nr::PSELECT6 => s(NONE, NONE, 0, WAIT),
        nr::EPOLL_WAIT | nr::EPOLL_PWAIT | nr::EPOLL_PWAIT2 => s(0, NONE, 2, WAIT),
        _ => None,
    }
}

/// The tracefs name of system call `nr`, or `None` if it is not traced.
pub fn name(nr: u32) -> Option<&'static str> {
    TRACED.iter().find(|(n, _)| *n == nr).map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_traced_call_has_a_spec_and_names_are_unique() {
        for (i, (nr, name)) in TRACED.iter().enumerate() {
            assert!(spec(*nr).is_some(), "{name}");
            assert!(
                TRACED[i + 1..].iter().all(|(n, m)| n != nr && m != name),
                "{name}"
            );
        }
        assert_eq!(spec(60), None, "exit is not traced");
        assert_eq!(name(nr::ACCEPT4), Some("accept4"));
    }
}
