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
    /// The map of where threads entered their system calls was full: a
    /// thread blocked at the stop may not be reported.
    BlockedFull = 12,
}

/// Number of counters.
pub const STAT_COUNT: u32 = 13;

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
    "blocked_full",
];

/// What a counter says about the records it counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Events were not recorded.
    Lost,
    /// The records were kept, with one field unknown.
    Kept,
}

/// What a counter means and what to do about it, for summaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatInfo {
    /// The counter's name in captures ([`STAT_NAMES`]).
    pub name: &'static str,
    /// Whether events were lost or kept.
    pub effect: Effect,
    /// What happened to the events counted.
    pub meaning: &'static str,
    /// What to do about it.
    pub advice: &'static str,
}

/// Every counter's meaning, indexed by [`Stat`].
pub const STAT_INFO: [StatInfo; STAT_COUNT as usize] = [
    StatInfo {
        name: "ring_full",
        effect: Effect::Lost,
        meaning: "records dropped: the ring buffer was full",
        advice: "grow --ring-size, or trace fewer or less frequently called functions",
    },
    StatInfo {
        name: "call_site_unreadable",
        effect: Effect::Kept,
        meaning: "function entries kept without their call site (the return address on the stack was unreadable)",
        advice: "nothing was lost; call-site attribution misses these entries",
    },
    StatInfo {
        name: "addr_unreadable",
        effect: Effect::Kept,
        meaning: "socket calls kept without their peer address (the sockaddr in user memory was unreadable)",
        advice: "nothing was lost; these calls' peers are unknown",
    },
    StatInfo {
        name: "inflight_full",
        effect: Effect::Lost,
        meaning: "system calls not recorded: more were in flight at once than the tracer tracks",
        advice: "trace fewer processes at once",
    },
    StatInfo {
        name: "socket_map_full",
        effect: Effect::Lost,
        meaning: "sockets not tracked: some socket I/O may be missing",
        advice: "trace fewer processes, or ones with fewer open sockets",
    },
    StatInfo {
        name: "pid_map_full",
        effect: Effect::Lost,
        meaning: "child processes not followed",
        advice: "trace fewer processes, or use --no-follow",
    },
    StatInfo {
        name: "user_ip_unreadable",
        effect: Effect::Kept,
        meaning: "CPU samples taken in the kernel with no user-space frame to read (kernel threads, exiting threads, io_uring workers), kept and counted by their kernel function",
        advice: "nothing was lost; no action needed",
    },
    StatInfo {
        name: "usdt_arg_unreadable",
        effect: Effect::Kept,
        meaning: "USDT probe hits kept with an argument recorded as 0 (unreadable, or no argument spec)",
        advice: "check the probe's argument specs with `tracer list-usdt`",
    },
    StatInfo {
        name: "file_map_full",
        effect: Effect::Lost,
        meaning: "file I/O calls not counted: the map of (process, call, device) totals was full",
        advice: "trace fewer processes, or shorten --stats-interval",
    },
    StatInfo {
        name: "block_map_full",
        effect: Effect::Lost,
        meaning: "block requests not counted: the map of (device, submitter, operation) totals was full",
        advice: "shorten --stats-interval, or record with --no-block-io",
    },
    StatInfo {
        name: "block_inflight_full",
        effect: Effect::Lost,
        meaning: "block requests not counted: more were in flight at once than the tracer tracks",
        advice: "record with --no-block-io on a node with this many outstanding requests",
    },
    StatInfo {
        name: "kernel_unreadable",
        effect: Effect::Lost,
        meaning: "events not counted or missing details: a kernel structure (a descriptor's file, a request's device, a socket's addresses) could not be read",
        advice: "report it with the kernel version; the counts of these events are low by this much",
    },
    StatInfo {
        name: "blocked_full",
        effect: Effect::Lost,
        meaning: "threads not followed into their system calls: more traced threads than the tracer tracks, so some blocked at the stop may be missing",
        advice: "trace fewer threads at once",
    },
];

/// The meaning of the counter called `name`; `None` for a name this build
/// does not know (a newer capture's).
pub fn info(name: &str) -> Option<&'static StatInfo> {
    STAT_INFO.iter().find(|i| i.name == name)
}

/// Summary lines for non-zero counters, losses first: `LOSSES: NAME N:
/// meaning (advice)` for events lost, `kept: NAME N: meaning (advice)` for
/// records kept with a field unknown. A counter this build does not know
/// counts as a loss, since nothing says otherwise.
#[cfg(feature = "std")]
pub fn summary_lines<'a>(counters: impl IntoIterator<Item = (&'a str, u64)>) -> Vec<String> {
    let mut lost = Vec::new();
    let mut kept = Vec::new();
    for (name, n) in counters {
        if n == 0 {
            continue;
        }
        match info(name) {
            Some(i) if i.effect == Effect::Kept => {
                kept.push(format!("kept: {name} {n}: {} ({})", i.meaning, i.advice));
            }
            Some(i) => lost.push(format!("LOSSES: {name} {n}: {} ({})", i.meaning, i.advice)),
            None => lost.push(format!(
                "LOSSES: {name} {n}: a counter this version does not know (a newer tracer's)"
            )),
        }
    }
    lost.extend(kept);
    lost
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;

    #[test]
    fn every_counter_is_described_in_order() {
        for (i, name) in STAT_NAMES.iter().enumerate() {
            assert_eq!(STAT_INFO[i].name, *name);
        }
    }

    /// Samples without a user frame are kept, not lost, and the ring
    /// advice goes with ring_full only.
    #[test]
    fn kept_records_are_not_called_losses() {
        let lines = summary_lines([
            ("user_ip_unreadable", 12),
            ("ring_full", 3),
            ("pid_map_full", 0),
        ]);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("LOSSES: ring_full 3: "), "{lines:?}");
        assert!(lines[0].contains("--ring-size"));
        assert!(
            lines[1].starts_with("kept: user_ip_unreadable 12: "),
            "{lines:?}"
        );
        assert!(!lines[1].contains("--ring-size"), "{lines:?}");
        assert!(summary_lines([("future_counter", 1)])[0].starts_with("LOSSES: future_counter 1"));
        assert!(summary_lines([("ring_full", 0)]).is_empty());
    }
}
