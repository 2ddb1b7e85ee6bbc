//! Counters of what the eBPF programs could not deliver, one per cause, kept
//! in a per-CPU array ([`crate::maps::STATS`]) and written into every capture.

/// Index of a counter in [`crate::maps::STATS`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stat {
    /// A record was dropped because the ring buffer was full.
    RingFull = 0,
    /// The return address could not be read at a function entry.
    CallSiteUnreadable = 1,
    /// A sockaddr could not be read from user memory.
    AddrUnreadable = 2,
    /// The in-flight system call map was full: a call was not recorded.
    InflightFull = 3,
    /// The socket fd map was full: a socket's I/O may be missed.
    SocketMapFull = 4,
    /// The traced pid map was full: a child was not followed.
    PidMapFull = 5,
    /// A sample's user stack could not be read (kernel-mode samples).
    UserIpUnreadable = 6,
    /// A USDT probe fired with no spec for its cookie, or an argument could
    /// not be read (its value is recorded as 0).
    UsdtArgUnreadable = 7,
    /// The file I/O map was full: calls of a new (process, call, device)
    /// were not counted.
    FileMapFull = 8,
    /// The block I/O map was full: requests of a new (device, submitter,
    /// operation) were not counted.
    BlockMapFull = 9,
    /// The in-flight block request map was full: a request's latency was not
    /// measured (it is not counted).
    BlockInflightFull = 10,
    /// A kernel structure could not be read (a descriptor's file, a
    /// request's device, a socket's addresses): that event was not counted
    /// or lacks those details.
    KernelUnreadable = 11,
}

/// Number of counters.
pub const STAT_COUNT: u32 = 12;

/// Names of the counters, indexed by [`Stat`], as written in captures.
pub const STAT_NAMES: [&str; STAT_COUNT as usize] = [
    "ring_full",
    "call_site_unreadable",
    "addr_unreadable",
    "inflight_full",
    "socket_map_full",
    "pid_map_full",
    "user_ip_unreadable",
    "usdt_arg_unreadable",
    "file_map_full",
    "block_map_full",
    "block_inflight_full",
    "kernel_unreadable",
];
