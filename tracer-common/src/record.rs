//! Records written by the eBPF programs into the ring buffer.
//!
//! Every record starts with a [`Header`]; `header.kind` says which struct
//! follows and `header.size` is the whole record's size in bytes, so a reader
//! can skip kinds it does not know. All integers are little-endian (the
//! machine's byte order on x86-64, the only architecture supported), all times
//! are `CLOCK_MONOTONIC` nanoseconds (`bpf_ktime_get_ns`). Records are written
//! to capture files exactly as the kernel delivered them, each padded to a
//! multiple of 8 bytes.
//!
//! Layouts are pinned by the `const` size assertions below and by the offset
//! tests at the bottom of the file: changing one is a capture format change.

use core::mem::size_of;

/// Kinds of record, stored in [`Header::kind`].
pub mod kind {
    /// [`super::FuncEntry`].
    pub const FUNC_ENTRY: u16 = 1;
    /// [`super::FuncEntryArgs`].
    pub const FUNC_ENTRY_ARGS: u16 = 2;
    /// [`super::FuncReturn`].
    pub const FUNC_RETURN: u16 = 3;
    /// [`super::Syscall`].
    pub const SYSCALL: u16 = 4;
    /// [`super::Sample`].
    pub const SAMPLE: u16 = 5;
    /// [`super::Lifecycle`].
    pub const LIFECYCLE: u16 = 6;
    /// [`super::TcpRetransmit`].
    pub const TCP_RETRANSMIT: u16 = 7;
    /// [`super::UsdtHit`].
    pub const USDT: u16 = 8;
    /// [`super::UsdtString`].
    pub const USDT_STRING: u16 = 9;
    /// [`crate::kernel::FileIo`].
    pub const FILE_IO: u16 = 10;
    /// [`crate::kernel::BlockIo`].
    pub const BLOCK_IO: u16 = 11;
    /// [`crate::kernel::NetDev`].
    pub const NET_DEV: u16 = 12;
    /// [`crate::kernel::NetSnmp`].
    pub const NET_SNMP: u16 = 13;
    /// [`crate::kernel::TcpRetransmitSock`], which replaces
    /// [`TCP_RETRANSMIT`] (still read in older captures).
    pub const TCP_RETRANSMIT_SOCK: u16 = 14;
    /// [`crate::kernel::DeviceName`].
    pub const DEVICE_NAME: u16 = 15;
    /// [`crate::kernel::NetAddr`].
    pub const NET_ADDR: u16 = 16;
    /// [`super::FuncEntryStack`]: written instead of [`FUNC_ENTRY_ARGS`] by
    /// recorders that read stack-passed arguments too.
    pub const FUNC_ENTRY_STACK: u16 = 20;
    /// [`super::CpuTimes`]: written by the recorder, not by eBPF.
    pub const CPU_TIMES: u16 = 21;
    /// [`super::Enroll`].
    pub const ENROLL: u16 = 22;
    /// [`super::BlockedStack`]: written by the recorder at the stop, not by
    /// eBPF.
    pub const BLOCKED_STACK: u16 = 23;
    /// [`super::BlockedRaw`]: ring only; the recorder turns it into a
    /// [`BLOCKED_STACK`] record.
    pub const BLOCKED_RAW: u16 = 24;
    /// [`super::FuncEntryFrame`]: written instead of [`FUNC_ENTRY_STACK`]
    /// when the call came from outside the main executable's text (a
    /// language binding such as Fortran's `mpi_send_`).
    pub const FUNC_ENTRY_FRAME: u16 = 25;
}

/// Common prefix of every record (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Time of the event, `CLOCK_MONOTONIC` ns.
    pub ts_ns: u64,
    /// Process id (kernel tgid) of the task the event happened in.
    pub pid: u32,
    /// Thread id (kernel pid) of the task.
    pub tid: u32,
    /// One of the [`kind`] constants.
    pub kind: u16,
    /// Size of the whole record in bytes, header included.
    pub size: u16,
    /// CPU the event was recorded on.
    pub cpu: u32,
}

/// Entry of a traced function (uprobe), 48 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncEntry {
    /// Common header.
    pub header: Header,
    /// Index of the probe in the capture's probe table (`MetaItem::Probe`).
    pub func_id: u32,
    /// Padding, zero.
    pub _pad: u32,
    /// Runtime address of the function (the probed instruction).
    pub ip: u64,
    /// Return address read from the stack at entry: identifies the call site.
    /// Zero when the stack could not be read.
    pub call_site: u64,
}

/// Entry of a traced function with its first six integer arguments
/// (System V AMD64: rdi, rsi, rdx, rcx, r8, r9), 96 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncEntryArgs {
    /// The plain entry record; `entry.header.kind` is [`kind::FUNC_ENTRY_ARGS`].
    pub entry: FuncEntry,
    /// Argument registers in call order.
    pub args: [u64; 6],
}

/// Stack-passed integer arguments [`FuncEntryStack`] carries: the 7th to
/// 10th (MPI_Sendrecv's source is its 9th, MPI_Gatherv's root its 8th).
pub const STACK_ARGS: usize = 4;

/// Entry of a traced function with its first ten integer arguments: the six
/// argument registers and the four words above the return address
/// (System V AMD64 passes the 7th and later integer arguments there, one
/// 8-byte slot each), 128 bytes. For a function with fewer arguments the
/// stack words are whatever the caller's frame holds there.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncEntryStack {
    /// The entry with its argument registers; `entry.entry.header.kind` is
    /// [`kind::FUNC_ENTRY_STACK`].
    pub entry: FuncEntryArgs,
    /// Arguments 7 to 10, in call order.
    pub stack: [u64; STACK_ARGS],
}

/// Words of the caller's stack a [`FuncEntryFrame`] carries, from the
/// return address up: enough for the frame of a language binding (its
/// return address into the program lies within it).
pub const FRAME_WORDS: usize = 32;

/// Entry of a traced argument function called from outside the main
/// executable's text (a library: an MPI language binding), with the top of
/// the stack, 392 bytes. The caller's own return address, into the
/// program, is in `frame`: where, its call frame information says (the
/// analyzer's MPI profile finds it so).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuncEntryFrame {
    /// The entry with its arguments; `entry.entry.entry.header.kind` is
    /// [`kind::FUNC_ENTRY_FRAME`]. `entry.entry.entry.call_site` is
    /// `frame[0]`, `entry.stack` is `frame[1..5]`.
    pub entry: FuncEntryStack,
    /// The stack pointer at entry (where `frame[0]` was read).
    pub sp: u64,
    /// The words at `sp` and above; zero when the stack was unreadable.
    pub frame: [u64; FRAME_WORDS],
}

impl Default for FuncEntryFrame {
    fn default() -> Self {
        Self {
            entry: FuncEntryStack::default(),
            sp: 0,
            frame: [0; FRAME_WORDS],
        }
    }
}

/// The CPU a traced process has had, read by the recorder from
/// `/proc/PID/task/*/schedstat` (summed over its threads) every flush
/// interval (`--cpu-times`, `--mpi`) or every stats interval (by default),
/// 56 bytes. Cumulative: the change between two records is what the
/// process got in between: time running, time runnable but waiting for a
/// CPU (another task had it, or a CPU quota throttled it: a throttled task
/// stays runnable), and the rest of the wall time it slept or was stopped.
///
/// With [`cpu_times_flags::KEEPS_EXITED`] set in `flags`, the sums also
/// hold the last reading of every thread that has exited since the
/// recorder first read the process, so they never go down when a thread
/// ends. Older recorders wrote 0 there: their sums cover the current
/// threads only, and an interval in which a thread ended is not the
/// process's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Common header (`ts_ns`: when read; `tid` = `pid`; `cpu`: 0).
    pub header: Header,
    /// Time on a CPU, ns, summed over the current threads.
    pub run_ns: u64,
    /// Time runnable on a run queue, ns, summed over the current threads.
    pub wait_ns: u64,
    /// Time slices run, summed over the current threads.
    pub slices: u64,
    /// Threads alive at the reading.
    pub threads: u32,
    /// [`cpu_times_flags`] (0 from older recorders).
    pub flags: u32,
}

/// Bits of [`CpuTimes::flags`].
pub mod cpu_times_flags {
    /// The sums keep the last reading of threads that exited.
    pub const KEEPS_EXITED: u32 = 1;
}

/// A process started running an `--exe` target and became traced (its
/// enrolment probe, at the executable's entry point, fired), 40 bytes.
/// Where the entry point was mapped places the executable in the process
/// when the process is gone before the recorder could read its `/proc`
/// maps (a short-lived process on a loaded machine).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Enroll {
    /// Common header.
    pub header: Header,
    /// Index of the executable among the recording's `--exe` targets.
    pub target: u32,
    /// Padding, zero.
    pub _pad: u32,
    /// Runtime address of the entry point.
    pub entry_ip: u64,
}

/// Return from a traced function (uretprobe), 40 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncReturn {
    /// Common header.
    pub header: Header,
    /// Index of the probe in the capture's probe table.
    pub func_id: u32,
    /// Padding, zero.
    pub _pad: u32,
    /// Return value register (rax).
    pub ret: u64,
}

/// A socket address as the kernel's `struct sockaddr_in`/`sockaddr_in6`/
/// `sockaddr_un` begins, 24 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockAddr {
    /// `AF_INET` (2), `AF_INET6` (10), `AF_UNIX` (1), or 0 when absent.
    pub family: u16,
    /// Port in network byte order (big-endian), as in the sockaddr.
    pub port_be: u16,
    /// Padding, zero.
    pub _pad: u32,
    /// IPv4 address in the first 4 bytes, or the IPv6 address, network order;
    /// for `AF_UNIX` the first 16 bytes of the path.
    pub addr: [u8; 16],
}

/// State saved at a system call's entry, until its exit (map value, not a
/// ring record), 40 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyscallEnter {
    /// Entry time, `CLOCK_MONOTONIC` ns.
    pub ts_ns: u64,
    /// System call number (x86-64).
    pub nr: u32,
    /// First argument as an fd, or -1.
    pub fd: i32,
    /// User pointer to a sockaddr, read at exit: an input for connect, bind
    /// and sendto (still valid then), an output for accept and recvfrom; or 0.
    pub addr_ptr: u64,
    /// Third argument (requested length for send/recv, flags otherwise).
    pub arg: u64,
    /// [`crate::kernel::file_class`] of a call on a file (counted in the
    /// file I/O map, not recorded), 0 for a socket call (recorded).
    pub file_class: u32,
    /// For a call on a file: the kernel `dev_t` of its file system.
    pub dev: u32,
}

/// Where a traced thread entered its current system call (map value, not a
/// ring record; any system call, traced or not: `nanosleep`, `futex` and
/// `epoll_wait` are where threads block), 40 bytes. Written at every
/// `sys_enter` of a traced thread, `ts_ns` zeroed at its `sys_exit`; the
/// recorder reads the entries still set when it stops ([`BlockedStack`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockedEntry {
    /// Entry time, `CLOCK_MONOTONIC` ns. Kept after the call returned (the
    /// entry is the thread's last call): the recorder tells a current call
    /// by `/proc/PID/task/TID/syscall`.
    pub ts_ns: u64,
    /// Process id (tgid) of the thread.
    pub pid: u32,
    /// System call number (x86-64).
    pub nr: u32,
    /// User instruction pointer the kernel saved (`pt_regs->ip`: the
    /// instruction after `syscall`).
    pub ip: u64,
    /// User stack pointer (`pt_regs->sp`).
    pub sp: u64,
    /// User frame pointer (`pt_regs->bp`).
    pub bp: u64,
}

/// One traced thread's system-call state, by tid (map value of
/// `INFLIGHT`, not a ring record), 88 bytes: its call in progress and
/// where it entered its last call, in one entry, so that a call's entry
/// looks the thread up once, not once per map (a hash lookup, ~30 ns, of
/// every system call of a traced thread).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadCall {
    /// The call kept for its exit (`ts_ns` 0 once it returned, or when
    /// the thread's calls so far were neither recorded nor counted).
    pub call: SyscallEnter,
    /// Where the thread entered its last system call, any call (`ts_ns` 0
    /// until the first one seen with blocked threads on).
    pub blocked: BlockedEntry,
    /// The `SOCKET_FDS` value of the call's descriptor read at the entry
    /// (the socket's `struct sock` address once known, 1 before), or 0:
    /// the exit then does not look the descriptor up again.
    pub sock: u64,
}

/// Return addresses a [`BlockedStack`] holds at most.
pub const BLOCKED_FRAMES: usize = 64;

/// Bits of [`BlockedStack::flags`].
pub mod blocked_flags {
    /// A frame was unwound by frame pointers: its object had no call frame
    /// information for the address (the frames past it may be wrong).
    pub const FRAME_POINTERS: u32 = 1;
    /// The unwinding stopped at [`super::BLOCKED_FRAMES`] frames.
    pub const TRUNCATED: u32 = 2;
    /// The unwinding stopped early: the stack read ended, or an address
    /// fell in no object with unwind information and no frame pointer.
    pub const INCOMPLETE: u32 = 4;
    /// The thread entered the call before the recording started (no
    /// `sys_enter` of it was seen): read from `/proc/PID/task/TID/syscall`,
    /// `since_ns` is the recording's start (it was blocked at least that
    /// long), and its frame pointer was not known: frames that needed it
    /// were found by looking for a frame record on the stack.
    pub const BEFORE_START: u32 = 8;
    /// Not at the stop: the call was ended by a signal after the thread had
    /// been in it for at least [`super::BLOCKED_MIN_NS`] (`header.ts_ns`:
    /// then), as when a hung process is stopped or killed; unwound from
    /// [`super::BLOCKED_RAW_BYTES`] of its stack at most, copied then.
    pub const ENDED_BY_SIGNAL: u32 = 16;
}

/// How long a thread must have been in a system call that a signal ends
/// for its stack to be recorded then ([`BlockedRaw`]), ns.
pub const BLOCKED_MIN_NS: u64 = 1_000_000_000;

/// Bytes of stack a [`BlockedRaw`] holds at most.
pub const BLOCKED_RAW_BYTES: usize = 8192;

/// A traced thread's system call, in which it had been for at least
/// [`BLOCKED_MIN_NS`], ended by a signal (`-EINTR` or a restart code),
/// with the registers saved at its entry and the top of its user stack,
/// 8256 bytes. Ring only: the process is most likely being stopped or
/// killed, so the stack is copied by eBPF while it still exists, and the
/// recorder unwinds it into a [`BlockedStack`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockedRaw {
    /// Common header (`ts_ns`: when the call ended).
    pub header: Header,
    /// When the thread entered the call, `CLOCK_MONOTONIC` ns.
    pub since_ns: u64,
    /// System call number (x86-64).
    pub nr: u32,
    /// Bytes of `stack` read (0: none could be).
    pub len: u32,
    /// User instruction pointer at the call's entry.
    pub ip: u64,
    /// User stack pointer at the call's entry: the address of `stack[0]`.
    pub sp: u64,
    /// User frame pointer at the call's entry.
    pub bp: u64,
    /// The stack from `sp` up.
    pub stack: [u8; BLOCKED_RAW_BYTES],
}

/// A traced thread that was inside a system call when the recording
/// stopped, with its user call stack, 560 bytes. Written by the recorder
/// (not eBPF) before it detaches, from [`BlockedEntry`] and the thread's
/// stack read with `process_vm_readv`, unwound by the objects' call frame
/// information.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockedStack {
    /// Common header (`ts_ns`: the stop; `cpu`: 0).
    pub header: Header,
    /// When the thread entered the system call, `CLOCK_MONOTONIC` ns.
    pub since_ns: u64,
    /// System call number (x86-64).
    pub nr: u32,
    /// Frames valid in `frames`.
    pub depth: u32,
    /// [`blocked_flags`].
    pub flags: u32,
    /// Padding, zero.
    pub _pad: u32,
    /// `frames[0]`: the instruction after the `syscall`; then return
    /// addresses, innermost first (runtime addresses of the process).
    pub frames: [u64; BLOCKED_FRAMES],
}

impl Default for BlockedStack {
    fn default() -> Self {
        Self {
            header: Header::default(),
            since_ns: 0,
            nr: 0,
            depth: 0,
            flags: 0,
            _pad: 0,
            frames: [0; BLOCKED_FRAMES],
        }
    }
}

impl BlockedStack {
    /// The valid frames, innermost first.
    pub fn frames(&self) -> &[u64] {
        &self.frames[..(self.depth as usize).min(BLOCKED_FRAMES)]
    }
}

/// A completed (or, flagged, unfinished) system call, 88 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Syscall {
    /// Common header; `header.ts_ns` is the exit time.
    pub header: Header,
    /// Entry time, `CLOCK_MONOTONIC` ns.
    pub enter_ns: u64,
    /// System call number (x86-64), see [`crate::syscall`].
    pub nr: u32,
    /// The fd argument (listening fd for accept), or -1.
    pub fd: i32,
    /// Return value (byte count, new fd, or `-errno`).
    pub ret: i64,
    /// Third argument: requested byte count for send/recv, flags otherwise.
    pub arg: u64,
    /// [`SYSCALL_UNFINISHED`] when the call had not returned when recording stopped.
    pub flags: u32,
    /// The connecting socket's port of a TCP connection, read from the
    /// kernel's socket, so both ends of a connection name it alike: for a
    /// connect that succeeded or is in progress, the local port the kernel
    /// gave it; for an accept, the new socket's peer port (whether or not
    /// the caller asked for the address). Host byte order; 0 when unknown
    /// (other calls, a kernel without the socket offsets, or a recorder
    /// older than the field, which wrote padding here).
    pub conn_port: u16,
    /// Padding, zero.
    pub _pad: u16,
    /// Peer address (connect, accept, sendto, recvfrom) or local address (bind).
    pub addr: SockAddr,
}

/// [`Syscall::flags`]: the call was still in progress when recording stopped;
/// `header.ts_ns` is the stop time and `ret` is meaningless.
pub const SYSCALL_UNFINISHED: u32 = 1;

/// An instruction-pointer sample (perf cpu-clock), 56 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Common header (pid/tid 0 for the idle task).
    pub header: Header,
    /// User-space instruction pointer: where the thread was, or will return
    /// to, in user space. Zero for kernel threads.
    pub user_ip: u64,
    /// Kernel instruction pointer when the sample hit kernel mode, else zero.
    pub kernel_ip: u64,
    /// Task command name (`comm`), NUL-padded.
    pub comm: [u8; 16],
}

/// Kinds of [`Lifecycle`] event.
pub mod lifecycle {
    /// A task forked (`sched_process_fork`): `child_pid` is the new task's tid.
    pub const FORK: u32 = 1;
    /// A process executed a new program (`sched_process_exec`).
    pub const EXEC: u32 = 2;
    /// A task exited (`sched_process_exit`); the process is gone when `tid == pid`.
    pub const EXIT: u32 = 3;
    /// Set in [`super::Lifecycle::exit_code`] when the kernel's exit code
    /// was read: captures from before it was recorded, and kernels whose
    /// BTF lacks `task_struct.exit_code`, leave the field zero (unknown,
    /// never "exited with 0").
    pub const EXIT_CODE_KNOWN: u32 = 1 << 31;
}

/// How a process ended, from the kernel's exit code (`task_struct.exit_code`:
/// the status shifted left by 8, or the signal number, with 0x80 when a core
/// was dumped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExitStatus {
    /// `exit(status)` or a return from `main`.
    Exited(u8),
    /// Killed by signal `signal`.
    Killed {
        /// The signal number.
        signal: u8,
        /// Whether a core dump was written (or attempted).
        core: bool,
    },
}

impl ExitStatus {
    /// Decodes a raw kernel exit code.
    pub fn from_code(code: u32) -> Self {
        let signal = (code & 0x7f) as u8;
        if signal == 0 {
            Self::Exited(((code >> 8) & 0xff) as u8)
        } else {
            Self::Killed {
                signal,
                core: code & 0x80 != 0,
            }
        }
    }

    /// Whether the process ended itself abnormally: a non-zero exit
    /// status, or a signal its own fault raises (a bad access, an abort,
    /// a trap). Signals others send to end a process (TERM, KILL, INT,
    /// HUP, QUIT) and a write to a closed pipe or socket (PIPE: its peer
    /// left first) are not its own failure.
    pub fn is_failure(self) -> bool {
        match self {
            Self::Exited(status) => status != 0,
            Self::Killed { signal, .. } => matches!(
                signal,
                4 /* ILL */ | 5 /* TRAP */ | 6 /* ABRT */ | 7 /* BUS */ | 8 /* FPE */
                    | 11 /* SEGV */ | 31 /* SYS */
            ),
        }
    }

    /// `exit status 1`, `killed by SIGSEGV (core dumped)`.
    #[cfg(feature = "std")]
    pub fn describe(self) -> String {
        match self {
            Self::Exited(status) => format!("exit status {status}"),
            Self::Killed { signal, core } => format!(
                "killed by {}{}",
                signal_name(signal),
                if core { " (core dumped)" } else { "" }
            ),
        }
    }
}

/// `SIGSEGV` for 11; `signal 42` for what has no name on Linux x86-64.
#[cfg(feature = "std")]
pub fn signal_name(signal: u8) -> String {
    const NAMES: [&str; 32] = [
        "", "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV",
        "USR2", "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU",
        "URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
    ];
    match NAMES.get(usize::from(signal)) {
        Some(name) if !name.is_empty() => format!("SIG{name}"),
        _ => format!("signal {signal}"),
    }
}

/// Process lifecycle, 56 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lifecycle {
    /// Common header (the parent for a fork).
    pub header: Header,
    /// One of the [`lifecycle`] constants.
    pub event: u32,
    /// Fork: the child's tid (equal to its pid for a new process).
    pub child_tid: u32,
    /// Exit: 1 when the whole thread group is gone (the process ended).
    pub group_dead: u32,
    /// Exit: the kernel's exit code with [`lifecycle::EXIT_CODE_KNOWN`]
    /// set; zero when unknown (see [`Lifecycle::exit_status`]).
    pub exit_code: u32,
    /// Task command name after the event, NUL-padded.
    pub comm: [u8; 16],
}

impl Lifecycle {
    /// How the task ended, for an exit whose code was recorded.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        (self.event == lifecycle::EXIT && self.exit_code & lifecycle::EXIT_CODE_KNOWN != 0)
            .then(|| ExitStatus::from_code(self.exit_code & !lifecycle::EXIT_CODE_KNOWN))
    }
}

/// A TCP retransmission (`tcp:tcp_retransmit_skb`), 64 bytes. Fires in softirq
/// context, so the header's pid/tid are whatever ran then: the addresses are
/// what counts.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpRetransmit {
    /// Common header.
    pub header: Header,
    /// Local port, host byte order.
    pub sport: u16,
    /// Remote port, host byte order.
    pub dport: u16,
    /// `AF_INET` or `AF_INET6`.
    pub family: u16,
    /// TCP state of the socket.
    pub state: u16,
    /// Local address (IPv4 in the first 4 bytes, or IPv6), network order.
    pub saddr: [u8; 16],
    /// Remote address (IPv4 in the first 4 bytes, or IPv6), network order.
    pub daddr: [u8; 16],
}

/// Most arguments a USDT probe's record carries (Python's probes have 3;
/// SystemTap allows 12, probes in the wild rarely pass more than 6).
pub const USDT_MAX_ARGS: usize = 6;

/// A USDT probe fired (a uprobe at a `.note.stapsdt` probe site), with its
/// arguments decoded per the probe's argument specs, 80 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsdtHit {
    /// Common header.
    pub header: Header,
    /// Index of the probe site in the capture's USDT table (`Meta::UsdtProbes`).
    pub probe_id: u32,
    /// Number of valid entries in `args`.
    pub nargs: u32,
    /// Argument values, sign- or zero-extended from their spec's size to 64
    /// bits. Pointers are user-space addresses of the traced process.
    pub args: [u64; USDT_MAX_ARGS],
}

/// Kinds of [`UsdtArgSpec`] (where an argument's value lives).
pub mod usdt_arg {
    /// No argument in this slot.
    pub const NONE: u8 = 0;
    /// A constant: `value`.
    pub const CONST: u8 = 1;
    /// A register: the `u64` at byte `reg_off` of the saved `pt_regs`.
    pub const REG: u8 = 2;
    /// Memory at `register + value` in the traced process.
    pub const MEM: u8 = 3;
}

/// How to fetch one USDT argument (map value, not a ring record), 16 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsdtArgSpec {
    /// The constant ([`usdt_arg::CONST`]) or the byte offset from the
    /// register ([`usdt_arg::MEM`]).
    pub value: i64,
    /// One of the [`usdt_arg`] constants.
    pub kind: u8,
    /// Size of the value in bytes: 1, 2, 4 or 8.
    pub size: u8,
    /// 1 when the value is signed (sign-extended), 0 when unsigned.
    pub signed: u8,
    /// Byte offset of the register in x86-64 `struct pt_regs`.
    pub reg_off: u8,
    /// [`USDT_ARG_STRING`] or 0.
    pub flags: u8,
    /// Padding, zero.
    pub _pad: [u8; 3],
}

/// [`UsdtArgSpec::flags`]: the value points to a NUL-terminated string in
/// the traced process; its text is sent once per process, pointer and first
/// bytes ([`UsdtString`]), and hits carry only the pointer.
pub const USDT_ARG_STRING: u8 = 1;

/// Most bytes of a USDT string argument recorded (longer ones are cut).
pub const USDT_STRING_MAX: usize = 120;

/// The text of a string argument of a USDT probe, sent before the first
/// [`UsdtHit`] of its process that carries the pointer (and again if the
/// memory at the pointer changes), 160 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsdtString {
    /// Common header.
    pub header: Header,
    /// The pointer, as the hits carry it.
    pub ptr: u64,
    /// Bytes of `text` used (no NUL).
    pub len: u32,
    /// Padding, zero.
    pub _pad: u32,
    /// The text, UTF-8 as the process wrote it, cut at [`USDT_STRING_MAX`].
    pub text: [u8; USDT_STRING_MAX],
}

impl Default for UsdtString {
    fn default() -> Self {
        Self {
            header: Header::default(),
            ptr: 0,
            len: 0,
            _pad: 0,
            text: [0; USDT_STRING_MAX],
        }
    }
}

/// Argument specs of one USDT probe site, indexed by the site's attach
/// cookie in the `USDT_SPECS` map, 104 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsdtSpec {
    /// Number of arguments (at most [`USDT_MAX_ARGS`]).
    pub nargs: u32,
    /// Padding, zero.
    pub _pad: u32,
    /// The arguments, in order.
    pub args: [UsdtArgSpec; USDT_MAX_ARGS],
}

/// Field offsets of tracepoint records, read by user space from the tracefs
/// `format` files and passed to the programs as a global, so the programs do
/// not hard-code a kernel's layout. An offset of `u16::MAX` means absent.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracepointOffsets {
    /// `sched_process_fork.child_pid`.
    pub fork_child_pid: u16,
    /// `sched_process_exit.group_dead` (1 byte).
    pub exit_group_dead: u16,
    /// `tcp_retransmit_skb.sport`.
    pub tcp_sport: u16,
    /// `tcp_retransmit_skb.dport`.
    pub tcp_dport: u16,
    /// `tcp_retransmit_skb.family`.
    pub tcp_family: u16,
    /// `tcp_retransmit_skb.state`.
    pub tcp_state: u16,
    /// `tcp_retransmit_skb.saddr` (4 bytes, IPv4).
    pub tcp_saddr: u16,
    /// `tcp_retransmit_skb.daddr` (4 bytes, IPv4).
    pub tcp_daddr: u16,
    /// `tcp_retransmit_skb.saddr_v6` (16 bytes).
    pub tcp_saddr_v6: u16,
    /// `tcp_retransmit_skb.daddr_v6` (16 bytes).
    pub tcp_daddr_v6: u16,
    /// Padding, zero.
    pub _pad: [u16; 6],
}

impl TracepointOffsets {
    /// All offsets absent.
    pub const ABSENT: Self = Self {
        fork_child_pid: u16::MAX,
        exit_group_dead: u16::MAX,
        tcp_sport: u16::MAX,
        tcp_dport: u16::MAX,
        tcp_family: u16::MAX,
        tcp_state: u16::MAX,
        tcp_saddr: u16::MAX,
        tcp_daddr: u16::MAX,
        tcp_saddr_v6: u16::MAX,
        tcp_daddr_v6: u16::MAX,
        _pad: [0; 6],
    };
}

const _: () = assert!(size_of::<Header>() == 24);
const _: () = assert!(size_of::<FuncEntry>() == 48);
const _: () = assert!(size_of::<FuncEntryArgs>() == 96);
const _: () = assert!(size_of::<FuncEntryStack>() == 128);
const _: () = assert!(size_of::<FuncEntryFrame>() == 392);
const _: () = assert!(size_of::<CpuTimes>() == 56);
const _: () = assert!(size_of::<FuncReturn>() == 40);
const _: () = assert!(size_of::<SockAddr>() == 24);
const _: () = assert!(size_of::<SyscallEnter>() == 40);
const _: () = assert!(size_of::<Syscall>() == 88);
const _: () = assert!(size_of::<BlockedEntry>() == 40);
const _: () = assert!(size_of::<ThreadCall>() == 88);
const _: () = assert!(size_of::<BlockedStack>() == 560);
const _: () = assert!(size_of::<BlockedRaw>() == 8256);
const _: () = assert!(size_of::<Sample>() == 56);
const _: () = assert!(size_of::<Lifecycle>() == 56);
const _: () = assert!(size_of::<Enroll>() == 40);
const _: () = assert!(size_of::<TcpRetransmit>() == 64);
const _: () = assert!(size_of::<TracepointOffsets>() == 32);
const _: () = assert!(size_of::<UsdtHit>() == 80);
const _: () = assert!(size_of::<UsdtArgSpec>() == 16);
const _: () = assert!(size_of::<UsdtSpec>() == 104);
const _: () = assert!(size_of::<UsdtString>() == 160);

/// Size in bytes of a record of `kind`, or `None` for an unknown kind.
pub const fn size_of_kind(kind: u16) -> Option<usize> {
    match kind {
        kind::FUNC_ENTRY => Some(size_of::<FuncEntry>()),
        kind::FUNC_ENTRY_ARGS => Some(size_of::<FuncEntryArgs>()),
        kind::FUNC_RETURN => Some(size_of::<FuncReturn>()),
        kind::SYSCALL => Some(size_of::<Syscall>()),
        kind::SAMPLE => Some(size_of::<Sample>()),
        kind::LIFECYCLE => Some(size_of::<Lifecycle>()),
        kind::TCP_RETRANSMIT => Some(size_of::<TcpRetransmit>()),
        kind::USDT => Some(size_of::<UsdtHit>()),
        kind::USDT_STRING => Some(size_of::<UsdtString>()),
        kind::FILE_IO => Some(size_of::<crate::kernel::FileIo>()),
        kind::BLOCK_IO => Some(size_of::<crate::kernel::BlockIo>()),
        kind::NET_DEV => Some(size_of::<crate::kernel::NetDev>()),
        kind::NET_SNMP => Some(size_of::<crate::kernel::NetSnmp>()),
        kind::TCP_RETRANSMIT_SOCK => Some(size_of::<crate::kernel::TcpRetransmitSock>()),
        kind::DEVICE_NAME => Some(size_of::<crate::kernel::DeviceName>()),
        kind::NET_ADDR => Some(size_of::<crate::kernel::NetAddr>()),
        kind::FUNC_ENTRY_STACK => Some(size_of::<FuncEntryStack>()),
        kind::FUNC_ENTRY_FRAME => Some(size_of::<FuncEntryFrame>()),
        kind::CPU_TIMES => Some(size_of::<CpuTimes>()),
        kind::ENROLL => Some(size_of::<Enroll>()),
        kind::BLOCKED_STACK => Some(size_of::<BlockedStack>()),
        kind::BLOCKED_RAW => Some(size_of::<BlockedRaw>()),
        _ => None,
    }
}

/// Plain-old-data records that may be read from and written as raw bytes.
///
/// # Safety
/// Implementors are `#[repr(C)]`, contain only integers and arrays of integers,
/// and have no implicit padding, so every byte pattern is a valid value.
pub unsafe trait Pod: Copy + 'static {
    /// Reads a value from the start of `bytes`, or `None` if it is too short.
    fn read_from(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < size_of::<Self>() {
            return None;
        }
        // SAFETY: length checked above; `Pod` types accept any bit pattern;
        // `read_unaligned` has no alignment requirement.
        Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<Self>()) })
    }

    /// The value's bytes.
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: `Pod` types have no padding, so all bytes are initialised.
        unsafe {
            core::slice::from_raw_parts((self as *const Self).cast::<u8>(), size_of::<Self>())
        }
    }
}

// SAFETY: each is repr(C), integers only, and the size assertions above show no
// implicit padding (explicit `_pad` fields fill the gaps).
unsafe impl Pod for Header {}
// SAFETY: as above.
unsafe impl Pod for FuncEntry {}
// SAFETY: as above.
unsafe impl Pod for FuncEntryArgs {}
// SAFETY: as above.
unsafe impl Pod for FuncEntryStack {}
// SAFETY: as above.
unsafe impl Pod for FuncEntryFrame {}
// SAFETY: as above.
unsafe impl Pod for CpuTimes {}
// SAFETY: as above.
unsafe impl Pod for FuncReturn {}
// SAFETY: as above.
unsafe impl Pod for SockAddr {}
// SAFETY: as above.
unsafe impl Pod for SyscallEnter {}
// SAFETY: as above.
unsafe impl Pod for Syscall {}
// SAFETY: as above.
unsafe impl Pod for Sample {}
// SAFETY: as above.
unsafe impl Pod for Lifecycle {}
// SAFETY: as above.
unsafe impl Pod for Enroll {}
// SAFETY: as above.
unsafe impl Pod for BlockedEntry {}
// SAFETY: as above.
unsafe impl Pod for ThreadCall {}
// SAFETY: as above.
unsafe impl Pod for BlockedStack {}
// SAFETY: as above.
unsafe impl Pod for BlockedRaw {}
// SAFETY: as above.
unsafe impl Pod for TcpRetransmit {}
// SAFETY: as above.
unsafe impl Pod for UsdtHit {}
// SAFETY: as above.
unsafe impl Pod for UsdtString {}

// SAFETY: repr(C), integers only, no implicit padding (size assertions above).
#[cfg(feature = "aya")]
unsafe impl aya::Pod for SyscallEnter {}
// SAFETY: as above.
#[cfg(feature = "aya")]
unsafe impl aya::Pod for BlockedEntry {}
// SAFETY: as above.
#[cfg(feature = "aya")]
unsafe impl aya::Pod for ThreadCall {}
// SAFETY: as above.
#[cfg(feature = "aya")]
unsafe impl aya::Pod for TracepointOffsets {}
// SAFETY: as above.
#[cfg(feature = "aya")]
unsafe impl aya::Pod for UsdtSpec {}

#[cfg(test)]
mod tests {
    use core::mem::offset_of;

    use super::*;

    #[test]
    fn offsets_are_pinned() {
        assert_eq!(offset_of!(Header, ts_ns), 0);
        assert_eq!(offset_of!(Header, pid), 8);
        assert_eq!(offset_of!(Header, tid), 12);
        assert_eq!(offset_of!(Header, kind), 16);
        assert_eq!(offset_of!(Header, size), 18);
        assert_eq!(offset_of!(Header, cpu), 20);
        assert_eq!(offset_of!(FuncEntry, func_id), 24);
        assert_eq!(offset_of!(FuncEntry, ip), 32);
        assert_eq!(offset_of!(FuncEntry, call_site), 40);
        assert_eq!(offset_of!(FuncEntryArgs, args), 48);
        assert_eq!(offset_of!(FuncEntryStack, stack), 96);
        assert_eq!(offset_of!(CpuTimes, run_ns), 24);
        assert_eq!(offset_of!(CpuTimes, threads), 48);
        assert_eq!(offset_of!(FuncReturn, ret), 32);
        assert_eq!(offset_of!(Syscall, enter_ns), 24);
        assert_eq!(offset_of!(Syscall, nr), 32);
        assert_eq!(offset_of!(Syscall, fd), 36);
        assert_eq!(offset_of!(Syscall, ret), 40);
        assert_eq!(offset_of!(Syscall, arg), 48);
        assert_eq!(offset_of!(Syscall, flags), 56);
        assert_eq!(offset_of!(Syscall, addr), 64);
        assert_eq!(offset_of!(Sample, user_ip), 24);
        assert_eq!(offset_of!(Sample, kernel_ip), 32);
        assert_eq!(offset_of!(Sample, comm), 40);
        assert_eq!(offset_of!(Lifecycle, event), 24);
        assert_eq!(offset_of!(Lifecycle, comm), 40);
        assert_eq!(offset_of!(Enroll, entry_ip), 32);
        assert_eq!(offset_of!(BlockedEntry, pid), 8);
        assert_eq!(offset_of!(BlockedEntry, ip), 16);
        assert_eq!(offset_of!(BlockedEntry, sp), 24);
        assert_eq!(offset_of!(BlockedEntry, bp), 32);
        assert_eq!(offset_of!(ThreadCall, blocked), 40);
        assert_eq!(offset_of!(ThreadCall, sock), 80);
        assert_eq!(offset_of!(BlockedStack, since_ns), 24);
        assert_eq!(offset_of!(BlockedStack, nr), 32);
        assert_eq!(offset_of!(BlockedStack, depth), 36);
        assert_eq!(offset_of!(BlockedStack, flags), 40);
        assert_eq!(offset_of!(BlockedStack, frames), 48);
        assert_eq!(offset_of!(FuncEntryFrame, sp), 128);
        assert_eq!(offset_of!(FuncEntryFrame, frame), 136);
        assert_eq!(offset_of!(BlockedRaw, len), 36);
        assert_eq!(offset_of!(BlockedRaw, sp), 48);
        assert_eq!(offset_of!(BlockedRaw, stack), 64);
        assert_eq!(offset_of!(TcpRetransmit, saddr), 32);
        assert_eq!(offset_of!(TcpRetransmit, daddr), 48);
        assert_eq!(offset_of!(UsdtHit, probe_id), 24);
        assert_eq!(offset_of!(UsdtHit, nargs), 28);
        assert_eq!(offset_of!(UsdtHit, args), 32);
        assert_eq!(offset_of!(UsdtArgSpec, kind), 8);
        assert_eq!(offset_of!(UsdtArgSpec, reg_off), 11);
        assert_eq!(offset_of!(UsdtArgSpec, flags), 12);
        assert_eq!(offset_of!(UsdtSpec, args), 8);
        assert_eq!(offset_of!(UsdtString, ptr), 24);
        assert_eq!(offset_of!(UsdtString, text), 40);
    }

    #[test]
    fn every_kind_has_a_size_that_is_a_multiple_of_eight() {
        for k in (1..=16).chain([
            kind::FUNC_ENTRY_STACK,
            kind::CPU_TIMES,
            kind::ENROLL,
            kind::BLOCKED_STACK,
            kind::BLOCKED_RAW,
            kind::FUNC_ENTRY_FRAME,
        ]) {
            let size = size_of_kind(k).expect("known kind");
            assert_eq!(size % 8, 0, "kind {k}");
        }
        assert_eq!(size_of_kind(0), None);
        assert_eq!(size_of_kind(17), None);
    }

    #[test]
    fn pod_round_trips_through_bytes() {
        let rec = FuncReturn {
            header: Header {
                ts_ns: 7,
                pid: 1,
                tid: 2,
                kind: kind::FUNC_RETURN,
                size: 40,
                cpu: 1,
            },
            func_id: 9,
            _pad: 0,
            ret: u64::MAX,
        };
        assert_eq!(FuncReturn::read_from(rec.as_bytes()), Some(rec));
        assert_eq!(FuncReturn::read_from(&rec.as_bytes()[..39]), None);
    }

    /// The kernel's exit codes (`wait(2)`'s status layout) decode to what
    /// a person reads; only a process's own failures count as failures.
    #[test]
    fn exit_codes_decode_and_only_own_failures_count() {
        let exit = |code: u32| Lifecycle {
            event: lifecycle::EXIT,
            group_dead: 1,
            exit_code: code | lifecycle::EXIT_CODE_KNOWN,
            ..Default::default()
        };
        assert_eq!(exit(0).exit_status(), Some(ExitStatus::Exited(0)));
        assert_eq!(exit(3 << 8).exit_status(), Some(ExitStatus::Exited(3)));
        let segv = exit(11 | 0x80).exit_status().expect("known");
        assert_eq!(
            segv,
            ExitStatus::Killed {
                signal: 11,
                core: true
            }
        );
        assert_eq!(segv.describe(), "killed by SIGSEGV (core dumped)");
        assert!(segv.is_failure());
        assert!(ExitStatus::Exited(1).is_failure());
        assert!(!ExitStatus::Exited(0).is_failure());
        // Sent by others, or its peer's leaving: not its own failure.
        for signal in [1, 2, 3, 9, 13, 15] {
            assert!(
                !ExitStatus::Killed {
                    signal,
                    core: false
                }
                .is_failure(),
                "{signal}"
            );
        }
        assert_eq!(signal_name(64), "signal 64");
        // Unknown (older captures): no status, not "exited with 0".
        let unknown = Lifecycle {
            event: lifecycle::EXIT,
            ..Default::default()
        };
        assert_eq!(unknown.exit_status(), None);
        // Only exits carry one.
        let fork = Lifecycle {
            event: lifecycle::FORK,
            exit_code: lifecycle::EXIT_CODE_KNOWN,
            ..Default::default()
        };
        assert_eq!(fork.exit_status(), None);
    }
}
