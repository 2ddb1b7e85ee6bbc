//! The x86-64 system calls traced for the processes under observation.
//!
//! The eBPF programs attach to the two `raw_syscalls` tracepoints (every
//! system call of the node passes there), keep the traced processes' calls,
//! and look up how to read a call's arguments with [`spec`]. Socket calls
//! ([`TRACED`]) are recorded one by one. File I/O calls ([`FILE_CALLS`], and
//! `read`, `write`, `close`... on a file rather than a socket) are counted in
//! the kernel per process, call and device ([`crate::kernel::FileIo`]).
//! Calls on neither (pipes, terminals, eventfds) are not kept.

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
    /// [`crate::kernel::file_class`] when the call is file I/O on its fd
    /// argument (or, with [`flag::PATH`], on a path), else 0.
    pub file: u8,
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
    /// A file system call that names a path (or works on no descriptor,
    /// like asynchronous I/O): counted as file I/O with device 0, without
    /// looking at a descriptor.
    pub const PATH: u8 = 32;
}

/// x86-64 system call numbers of the traced calls.
#[allow(missing_docs, reason = "the names are the documentation")]
pub mod nr {
    pub const READ: u32 = 0;
    pub const WRITE: u32 = 1;
    pub const CLOSE: u32 = 3;
    pub const DUP2: u32 = 33;
    pub const DUP3: u32 = 292;
    pub const CLOSE_RANGE: u32 = 436;
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
    pub const OPEN: u32 = 2;
    pub const STAT: u32 = 4;
    pub const FSTAT: u32 = 5;
    pub const LSTAT: u32 = 6;
    pub const PREAD64: u32 = 17;
    pub const PWRITE64: u32 = 18;
    pub const ACCESS: u32 = 21;
    pub const SENDFILE: u32 = 40;
    pub const FSYNC: u32 = 74;
    pub const FDATASYNC: u32 = 75;
    pub const TRUNCATE: u32 = 76;
    pub const FTRUNCATE: u32 = 77;
    pub const GETDENTS: u32 = 78;
    pub const RENAME: u32 = 82;
    pub const MKDIR: u32 = 83;
    pub const RMDIR: u32 = 84;
    pub const CREAT: u32 = 85;
    pub const LINK: u32 = 86;
    pub const UNLINK: u32 = 87;
    pub const SYMLINK: u32 = 88;
    pub const READLINK: u32 = 89;
    pub const CHMOD: u32 = 90;
    pub const FCHMOD: u32 = 91;
    pub const CHOWN: u32 = 92;
    pub const FCHOWN: u32 = 93;
    pub const LCHOWN: u32 = 94;
    pub const MKNOD: u32 = 133;
    pub const SETXATTR: u32 = 188;
    pub const LSETXATTR: u32 = 189;
    pub const FSETXATTR: u32 = 190;
    pub const GETXATTR: u32 = 191;
    pub const LGETXATTR: u32 = 192;
    pub const FGETXATTR: u32 = 193;
    pub const LISTXATTR: u32 = 194;
    pub const LLISTXATTR: u32 = 195;
    pub const FLISTXATTR: u32 = 196;
    pub const REMOVEXATTR: u32 = 197;
    pub const LREMOVEXATTR: u32 = 198;
    pub const FREMOVEXATTR: u32 = 199;
    pub const IO_GETEVENTS: u32 = 208;
    pub const IO_SUBMIT: u32 = 209;
    pub const GETDENTS64: u32 = 217;
    pub const OPENAT: u32 = 257;
    pub const MKDIRAT: u32 = 258;
    pub const MKNODAT: u32 = 259;
    pub const FCHOWNAT: u32 = 260;
    pub const NEWFSTATAT: u32 = 262;
    pub const UNLINKAT: u32 = 263;
    pub const RENAMEAT: u32 = 264;
    pub const LINKAT: u32 = 265;
    pub const SYMLINKAT: u32 = 266;
    pub const READLINKAT: u32 = 267;
    pub const FCHMODAT: u32 = 268;
    pub const FACCESSAT: u32 = 269;
    pub const SYNC_FILE_RANGE: u32 = 277;
    pub const UTIMENSAT: u32 = 280;
    pub const FALLOCATE: u32 = 285;
    pub const PREADV: u32 = 295;
    pub const PWRITEV: u32 = 296;
    pub const SYNCFS: u32 = 306;
    pub const RENAMEAT2: u32 = 316;
    pub const COPY_FILE_RANGE: u32 = 326;
    pub const PREADV2: u32 = 327;
    pub const PWRITEV2: u32 = 328;
    pub const STATX: u32 = 332;
    pub const IO_PGETEVENTS: u32 = 333;
    pub const IO_URING_ENTER: u32 = 426;
    pub const OPENAT2: u32 = 437;
    pub const FACCESSAT2: u32 = 439;
    pub const WAIT4: u32 = 61;
    pub const WAITID: u32 = 247;
}

/// The socket system calls recorded one by one: (number, name).
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

/// The file I/O system calls counted per process, call and device, beyond
/// `read`, `write`, `readv`, `writev` and `close` (in [`TRACED`], counted
/// here when their descriptor is a file): (number, name).
pub const FILE_CALLS: &[(u32, &str)] = &[
    (nr::OPEN, "open"),
    (nr::STAT, "stat"),
    (nr::FSTAT, "fstat"),
    (nr::LSTAT, "lstat"),
    (nr::PREAD64, "pread64"),
    (nr::PWRITE64, "pwrite64"),
    (nr::ACCESS, "access"),
    (nr::SENDFILE, "sendfile"),
    (nr::FSYNC, "fsync"),
    (nr::FDATASYNC, "fdatasync"),
    (nr::TRUNCATE, "truncate"),
    (nr::FTRUNCATE, "ftruncate"),
    (nr::GETDENTS, "getdents"),
    (nr::RENAME, "rename"),
    (nr::MKDIR, "mkdir"),
    (nr::RMDIR, "rmdir"),
    (nr::CREAT, "creat"),
    (nr::LINK, "link"),
    (nr::UNLINK, "unlink"),
    (nr::SYMLINK, "symlink"),
    (nr::READLINK, "readlink"),
    (nr::CHMOD, "chmod"),
    (nr::FCHMOD, "fchmod"),
    (nr::CHOWN, "chown"),
    (nr::FCHOWN, "fchown"),
    (nr::LCHOWN, "lchown"),
    (nr::MKNOD, "mknod"),
    (nr::SETXATTR, "setxattr"),
    (nr::LSETXATTR, "lsetxattr"),
    (nr::FSETXATTR, "fsetxattr"),
    (nr::GETXATTR, "getxattr"),
    (nr::LGETXATTR, "lgetxattr"),
    (nr::FGETXATTR, "fgetxattr"),
    (nr::LISTXATTR, "listxattr"),
    (nr::LLISTXATTR, "llistxattr"),
    (nr::FLISTXATTR, "flistxattr"),
    (nr::REMOVEXATTR, "removexattr"),
    (nr::LREMOVEXATTR, "lremovexattr"),
    (nr::FREMOVEXATTR, "fremovexattr"),
    (nr::IO_GETEVENTS, "io_getevents"),
    (nr::IO_SUBMIT, "io_submit"),
    (nr::GETDENTS64, "getdents64"),
    (nr::OPENAT, "openat"),
    (nr::MKDIRAT, "mkdirat"),
    (nr::MKNODAT, "mknodat"),
    (nr::FCHOWNAT, "fchownat"),
    (nr::NEWFSTATAT, "newfstatat"),
    (nr::UNLINKAT, "unlinkat"),
    (nr::RENAMEAT, "renameat"),
    (nr::LINKAT, "linkat"),
    (nr::SYMLINKAT, "symlinkat"),
    (nr::READLINKAT, "readlinkat"),
    (nr::FCHMODAT, "fchmodat"),
    (nr::FACCESSAT, "faccessat"),
    (nr::SYNC_FILE_RANGE, "sync_file_range"),
    (nr::UTIMENSAT, "utimensat"),
    (nr::FALLOCATE, "fallocate"),
    (nr::PREADV, "preadv"),
    (nr::PWRITEV, "pwritev"),
    (nr::SYNCFS, "syncfs"),
    (nr::RENAMEAT2, "renameat2"),
    (nr::COPY_FILE_RANGE, "copy_file_range"),
    (nr::PREADV2, "preadv2"),
    (nr::PWRITEV2, "pwritev2"),
    (nr::STATX, "statx"),
    (nr::IO_PGETEVENTS, "io_pgetevents"),
    (nr::IO_URING_ENTER, "io_uring_enter"),
    (nr::OPENAT2, "openat2"),
    (nr::FACCESSAT2, "faccessat2"),
];

#[inline(always)]
const fn s(fd_arg: u8, addr_arg: u8, len_arg: u8, flags: u8) -> Option<Spec> {
    f(fd_arg, addr_arg, len_arg, flags, 0)
}

#[inline(always)]
const fn f(fd_arg: u8, addr_arg: u8, len_arg: u8, flags: u8, file: u8) -> Option<Spec> {
    Some(Spec {
        fd_arg,
        addr_arg,
        len_arg,
        flags,
        file,
    })
}

/// Whether system call `nr` can free descriptor numbers, so that a number
/// names another file afterwards: close, close_range, and dup2 / dup3
/// (onto an open number). Exec closes close-on-exec descriptors too.
#[inline(always)]
pub const fn frees_fds(nr: u32) -> bool {
    matches!(nr, nr::CLOSE | nr::CLOSE_RANGE | nr::DUP2 | nr::DUP3)
}

/// How to read the arguments of system call `nr`, or `None` if it is not traced.
// Inlined: as a BPF subprogram, returning the `Option<Spec>` aggregate
// miscompiles (the verifier sees an unset r0).
#[inline(always)]
pub const fn spec(nr: u32) -> Option<Spec> {
    use crate::kernel::file_class::{ASYNC, META, READ, SYNC, WRITE};
    use flag::*;
    match nr {
        nr::READ | nr::READV => f(0, NONE, 2, SOCKET_FD_ONLY, READ),
        nr::WRITE | nr::WRITEV => f(0, NONE, 2, SOCKET_FD_ONLY, WRITE),
        nr::CLOSE => f(0, NONE, NONE, SOCKET_FD_ONLY | CLOSES_FD, META),
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
        // File I/O on a descriptor: counted when it is a file.
        nr::PREAD64 | nr::PREADV | nr::PREADV2 | nr::COPY_FILE_RANGE => f(0, NONE, NONE, 0, READ),
        nr::SENDFILE => f(1, NONE, NONE, 0, READ),
        nr::PWRITE64 | nr::PWRITEV | nr::PWRITEV2 => f(0, NONE, NONE, 0, WRITE),
        nr::FSYNC | nr::FDATASYNC | nr::SYNC_FILE_RANGE | nr::SYNCFS => f(0, NONE, NONE, 0, SYNC),
        nr::FSTAT
        | nr::FTRUNCATE
        | nr::FALLOCATE
        | nr::GETDENTS
        | nr::GETDENTS64
        | nr::FCHMOD
        | nr::FCHOWN
        | nr::FSETXATTR
        | nr::FGETXATTR
        | nr::FLISTXATTR
        | nr::FREMOVEXATTR => f(0, NONE, NONE, 0, META),
        // File system calls on paths: always counted.
        nr::OPEN
        | nr::CREAT
        | nr::OPENAT
        | nr::OPENAT2
        | nr::STAT
        | nr::LSTAT
        | nr::NEWFSTATAT
        | nr::STATX
        | nr::ACCESS
        | nr::FACCESSAT
        | nr::FACCESSAT2
        | nr::TRUNCATE
        | nr::RENAME
        | nr::RENAMEAT
        | nr::RENAMEAT2
        | nr::MKDIR
        | nr::MKDIRAT
        | nr::RMDIR
        | nr::LINK
        | nr::LINKAT
        | nr::UNLINK
        | nr::UNLINKAT
        | nr::SYMLINK
        | nr::SYMLINKAT
        | nr::READLINK
        | nr::READLINKAT
        | nr::CHMOD
        | nr::FCHMODAT
        | nr::CHOWN
        | nr::LCHOWN
        | nr::FCHOWNAT
        | nr::UTIMENSAT
        | nr::MKNOD
        | nr::MKNODAT
        | nr::SETXATTR
        | nr::LSETXATTR
        | nr::GETXATTR
        | nr::LGETXATTR
        | nr::LISTXATTR
        | nr::LLISTXATTR
        | nr::REMOVEXATTR
        | nr::LREMOVEXATTR => f(NONE, NONE, NONE, PATH, META),
        nr::IO_SUBMIT | nr::IO_GETEVENTS | nr::IO_PGETEVENTS | nr::IO_URING_ENTER => {
            f(NONE, NONE, NONE, PATH, ASYNC)
        }
        _ => None,
    }
}

/// System calls threads commonly block in that are neither recorded nor
/// counted, by name: where a thread stood at the end of a capture
/// ([`crate::record::BlockedStack`]) is said with them.
pub const WAITS: &[(u32, &str)] = &[
    (24, "sched_yield"),
    (34, "pause"),
    (35, "nanosleep"),
    (nr::WAIT4, "wait4"),
    (65, "semop"),
    (70, "msgrcv"),
    (73, "flock"),
    (128, "rt_sigtimedwait"),
    (130, "rt_sigsuspend"),
    (202, "futex"),
    (220, "semtimedop"),
    (230, "clock_nanosleep"),
    (nr::WAITID, "waitid"),
    (449, "futex_waitv"),
];

/// Whether a thread in system call `nr` waits for a peer: a readiness wait
/// (`poll`, `select`, `epoll_wait`...), a receive or an accept. How long it
/// takes is the peer's doing (how soon it sent or connected), not the
/// caller's work.
pub fn waits_for_peer(nr: u32) -> bool {
    spec(nr).is_some_and(|s| s.flags & flag::WAIT != 0)
        || matches!(
            nr,
            nr::READ
                | nr::READV
                | nr::RECVFROM
                | nr::RECVMSG
                | nr::RECVMMSG
                | nr::ACCEPT
                | nr::ACCEPT4
        )
}

/// The number of the system call named `name` among those [`name`] knows.
pub fn number(name: &str) -> Option<u32> {
    TRACED
        .iter()
        .chain(FILE_CALLS)
        .chain(WAITS)
        .find(|(_, n)| *n == name)
        .map(|(nr, _)| *nr)
}

/// The name of system call `nr`, or `None` if it is neither recorded nor
/// counted nor one of the [`WAITS`].
pub fn name(nr: u32) -> Option<&'static str> {
    TRACED
        .iter()
        .chain(FILE_CALLS)
        .chain(WAITS)
        .find(|(n, _)| *n == nr)
        .map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_traced_call_has_a_spec_and_names_are_unique() {
        let all: Vec<(u32, &str)> = TRACED.iter().chain(FILE_CALLS).copied().collect();
        for (i, (nr, name)) in all.iter().enumerate() {
            assert!(spec(*nr).is_some(), "{name}");
            assert!(
                all[i + 1..].iter().all(|(n, m)| n != nr && m != name),
                "{name}"
            );
        }
        assert_eq!(spec(60), None, "exit is not traced");
        assert_eq!(name(nr::ACCEPT4), Some("accept4"));
        assert_eq!(name(nr::PREAD64), Some("pread64"));
    }

    /// Every file call has a class, socket-only calls have none, and the
    /// calls that are both are socket calls first.
    #[test]
    fn file_calls_are_classified() {
        use crate::kernel::file_class;
        for (nr, name) in FILE_CALLS {
            let s = spec(*nr).expect("spec");
            assert_ne!(s.file, file_class::NONE, "{name}");
            assert_eq!(s.flags & flag::SOCKET_FD_ONLY, 0, "{name}");
        }
        for (nr, class) in [
            (nr::READ, file_class::READ),
            (nr::WRITEV, file_class::WRITE),
            (nr::CLOSE, file_class::META),
        ] {
            let s = spec(nr).expect("spec");
            assert_eq!(s.file, class);
            assert_ne!(s.flags & flag::SOCKET_FD_ONLY, 0);
        }
        for nr in [nr::SENDTO, nr::ACCEPT, nr::EPOLL_WAIT, nr::SOCKET] {
            assert_eq!(spec(nr).expect("spec").file, file_class::NONE);
        }
        assert_eq!(
            spec(nr::SENDFILE).expect("spec").fd_arg,
            1,
            "its input file"
        );
        assert_ne!(spec(nr::OPENAT).expect("spec").flags & flag::PATH, 0);
    }
}
