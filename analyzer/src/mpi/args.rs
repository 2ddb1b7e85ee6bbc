//! What an MPI call's arguments say about whom it talks to, decided once per
//! probed function and applied to every call.
//!
//! The MPI standard's C bindings fix each argument's position; on x86-64 the
//! first six integer arguments are in registers and the 7th to 10th on the
//! stack, both recorded at entry (`FuncEntryStack`). MPICH handles, ranks
//! and roots are C `int`s: the low 32 bits of a word.
//!
//! Two views of a call:
//! * [`Peer`], paper 002's second tuple entry (§2.1): the partner rank of a
//!   point-to-point call, "an appropriate parameter or a fixed number" for
//!   the others (the root of rooted collectives, the operation of
//!   reductions, the communicator of barriers);
//! * [`Partners`], what a blocked call waits for: source and destination,
//!   the communicator and root of a collective, the request a nonblocking
//!   call completes through and the requests a wait completes (their
//!   addresses: the MPI library writes the handle where the caller said).

use serde::{Deserialize, Serialize};

/// MPICH's `MPI_ANY_SOURCE` (mpi.h: `#define MPI_ANY_SOURCE (-2)`).
pub const MPI_ANY_SOURCE: i32 = -2;
/// MPICH's `MPI_PROC_NULL` (mpi.h: `#define MPI_PROC_NULL (-1)`).
pub const MPI_PROC_NULL: i32 = -1;
/// MPICH's `MPI_COMM_WORLD` handle.
pub const MPI_COMM_WORLD: u32 = 0x4400_0000;

/// The peer entry of a 4-tuple (002 §2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Peer {
    /// Destination or source rank of a point-to-point call.
    Rank(i32),
    /// `MPI_ANY_SOURCE` as a receive's source.
    AnySource,
    /// `MPI_PROC_NULL` as a partner (a no-op transfer).
    ProcNull,
    /// Root of a rooted collective (`MPI_Bcast`, `MPI_Gather`, `MPI_Scatter`).
    Root(i32),
    /// Reduction operation handle (`MPI_Reduce`, `MPI_Allreduce`; MPICH
    /// `MPI_SUM` = 0x58000003).
    Op(u32),
    /// Communicator handle (`MPI_Barrier`; `MPI_COMM_WORLD` = 0x44000000).
    Comm(u32),
    /// The fixed peer of calls without one (`MPI_Wait`, `MPI_Init`, ...).
    None,
}

impl Peer {
    /// The peer of a call of `function` with argument words `args` (the six
    /// registers, then the stack-passed ones when recorded).
    pub fn of(function: &str, args: Option<&[u64]>) -> Peer {
        ArgRule::of(function).peer(args)
    }

    /// Short text: `3`, `any`, `null`, `root 0`, `op 0x58000003`, `comm 0x44000000`, `-`.
    pub fn label(&self) -> String {
        match self {
            Peer::Rank(r) => r.to_string(),
            Peer::AnySource => "any".into(),
            Peer::ProcNull => "null".into(),
            Peer::Root(r) => format!("root {r}"),
            Peer::Op(h) => format!("op {h:#x}"),
            Peer::Comm(h) => format!("comm {h:#x}"),
            Peer::None => "-".into(),
        }
    }

    /// (kind, value) for flat tables.
    pub fn columns(&self) -> (&'static str, Option<i64>) {
        match *self {
            Peer::Rank(r) => ("rank", Some(r.into())),
            Peer::AnySource => ("any_source", None),
            Peer::ProcNull => ("proc_null", None),
            Peer::Root(r) => ("root", Some(r.into())),
            Peer::Op(h) => ("op", Some(h.into())),
            Peer::Comm(h) => ("comm", Some(h.into())),
            Peer::None => ("none", None),
        }
    }

    fn rank(r: i32) -> Peer {
        match r {
            MPI_ANY_SOURCE => Peer::AnySource,
            MPI_PROC_NULL => Peer::ProcNull,
            r => Peer::Rank(r),
        }
    }
}

/// What a call waits for, from its arguments (`None` where the argument was
/// not recorded: a capture without stack arguments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Partners {
    /// Nothing to wait for (local calls, tests, queries).
    #[default]
    None,
    /// A blocking point-to-point call: sends to `dest`, receives from
    /// `source` (`MPI_ANY_SOURCE` = -2, `MPI_PROC_NULL` = -1).
    PointToPoint {
        /// Destination rank.
        dest: Option<i32>,
        /// Source rank.
        source: Option<i32>,
    },
    /// A nonblocking point-to-point call (or a persistent one's set-up),
    /// completed later through the request handle stored at `request`.
    Post {
        /// Destination rank.
        dest: Option<i32>,
        /// Source rank.
        source: Option<i32>,
        /// Address of the caller's request handle.
        request: Option<u64>,
    },
    /// A collective over `comm` (every member must take part).
    Collective {
        /// Communicator handle.
        comm: Option<u32>,
        /// Root of a rooted collective.
        root: Option<i32>,
        /// For a nonblocking collective: address of its request handle.
        request: Option<u64>,
    },
    /// Waits for `count` requests whose handles are stored from address
    /// `requests` on (4 bytes each: MPICH handles are `int`s).
    Completion {
        /// Address of the first handle.
        requests: Option<u64>,
        /// Number of handles.
        count: u32,
    },
}

impl Partners {
    /// Whether the call can wait on another rank (a blocking transfer, a
    /// collective, or a completion).
    pub fn blocks(&self) -> bool {
        !matches!(self, Partners::None | Partners::Post { .. })
            && !matches!(
                self,
                Partners::Collective {
                    request: Some(_),
                    ..
                }
            )
    }
}

/// Where each role's argument is (0-based argument index), per function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ArgRule {
    peer: PeerKind,
    dest: Option<u8>,
    source: Option<u8>,
    comm: Option<u8>,
    root: Option<u8>,
    request: Option<u8>,
    /// (count, array) of a wait on several requests; (None, array) for one.
    completion: Option<(Option<u8>, u8)>,
    kind: CallKind,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum PeerKind {
    /// A rank at this argument.
    Rank(u8),
    /// A root at this argument.
    Root(u8),
    /// A reduction operation at this argument.
    Op(u8),
    /// A communicator at this argument.
    Comm(u8),
    #[default]
    None,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum CallKind {
    #[default]
    Local,
    PointToPoint,
    Post,
    Collective,
    Completion,
}

/// The name without MPI 4's large-count suffix (`MPI_Send_c` → `MPI_Send`).
fn base_name(function: &str) -> &str {
    function.strip_suffix("_c").unwrap_or(function)
}

impl ArgRule {
    /// The rule of MPI function `function` (`MPI_*`).
    pub(crate) fn of(function: &str) -> Self {
        use CallKind::*;
        let p2p = |peer: u8, dest: Option<u8>, source: Option<u8>| ArgRule {
            peer: PeerKind::Rank(peer),
            dest,
            source,
            kind: PointToPoint,
            ..ArgRule::default()
        };
        let post = |peer: u8, dest: Option<u8>, source: Option<u8>, request: Option<u8>| ArgRule {
            peer: PeerKind::Rank(peer),
            dest,
            source,
            request,
            kind: Post,
            ..ArgRule::default()
        };
        let coll = |peer: PeerKind, comm: u8, root: Option<u8>, request: Option<u8>| ArgRule {
            peer,
            comm: Some(comm),
            root,
            request,
            kind: Collective,
            ..ArgRule::default()
        };
        let wait = |count: Option<u8>, array: u8| ArgRule {
            completion: Some((count, array)),
            kind: Completion,
            ..ArgRule::default()
        };
        match base_name(function) {
            "MPI_Send" | "MPI_Ssend" | "MPI_Rsend" | "MPI_Bsend" => p2p(3, Some(3), None),
            "MPI_Recv" => p2p(3, None, Some(3)),
            "MPI_Sendrecv" => p2p(3, Some(3), Some(8)),
            "MPI_Sendrecv_replace" => p2p(3, Some(3), Some(5)),
            "MPI_Probe" | "MPI_Mprobe" => p2p(0, None, Some(0)),
            "MPI_Iprobe" | "MPI_Improbe" => ArgRule {
                peer: PeerKind::Rank(0),
                ..ArgRule::default()
            },
            "MPI_Isend" | "MPI_Issend" | "MPI_Irsend" | "MPI_Ibsend" => {
                post(3, Some(3), None, Some(6))
            }
            "MPI_Irecv" => post(3, None, Some(3), Some(6)),
            "MPI_Send_init" | "MPI_Ssend_init" | "MPI_Rsend_init" | "MPI_Bsend_init" => {
                post(3, Some(3), None, Some(6))
            }
            "MPI_Recv_init" => post(3, None, Some(3), Some(6)),
            // The request is the 12th argument: beyond what is recorded.
            "MPI_Isendrecv" => post(3, Some(3), Some(8), None),
            "MPI_Isendrecv_replace" => post(3, Some(3), Some(5), Some(8)),
            "MPI_Barrier" => coll(PeerKind::Comm(0), 0, None, None),
            "MPI_Ibarrier" => coll(PeerKind::Comm(0), 0, None, Some(1)),
            "MPI_Bcast" => coll(PeerKind::Root(3), 4, Some(3), None),
            "MPI_Ibcast" => coll(PeerKind::Root(3), 4, Some(3), Some(5)),
            "MPI_Reduce" => coll(PeerKind::Op(4), 6, Some(5), None),
            "MPI_Ireduce" => coll(PeerKind::Op(4), 6, Some(5), Some(7)),
            "MPI_Allreduce"
            | "MPI_Scan"
            | "MPI_Exscan"
            | "MPI_Reduce_scatter"
            | "MPI_Reduce_scatter_block" => coll(PeerKind::Op(4), 5, None, None),
            "MPI_Iallreduce"
            | "MPI_Iscan"
            | "MPI_Iexscan"
            | "MPI_Ireduce_scatter"
            | "MPI_Ireduce_scatter_block" => coll(PeerKind::Op(4), 5, None, Some(6)),
            "MPI_Gather" | "MPI_Scatter" => coll(PeerKind::Root(6), 7, Some(6), None),
            "MPI_Igather" | "MPI_Iscatter" => coll(PeerKind::Root(6), 7, Some(6), Some(8)),
            "MPI_Gatherv" | "MPI_Scatterv" => coll(PeerKind::Root(7), 8, Some(7), None),
            "MPI_Igatherv" | "MPI_Iscatterv" => coll(PeerKind::Root(7), 8, Some(7), Some(9)),
            "MPI_Allgather" | "MPI_Alltoall" => coll(PeerKind::None, 6, None, None),
            "MPI_Iallgather" | "MPI_Ialltoall" => coll(PeerKind::None, 6, None, Some(7)),
            "MPI_Allgatherv" => coll(PeerKind::None, 7, None, None),
            "MPI_Iallgatherv" => coll(PeerKind::None, 7, None, Some(8)),
            "MPI_Alltoallv" | "MPI_Alltoallw" => coll(PeerKind::None, 8, None, None),
            "MPI_Ialltoallv" | "MPI_Ialltoallw" => coll(PeerKind::None, 8, None, Some(9)),
            // Communicator constructors are collective over their parent.
            "MPI_Comm_split" | "MPI_Comm_dup" | "MPI_Comm_create" | "MPI_Cart_create" => {
                coll(PeerKind::None, 0, None, None)
            }
            // Init and Finalize synchronize every process of the job.
            "MPI_Init" | "MPI_Init_thread" | "MPI_Finalize" => ArgRule {
                kind: Collective,
                ..ArgRule::default()
            },
            "MPI_Wait" => wait(None, 0),
            "MPI_Waitall" | "MPI_Waitany" | "MPI_Waitsome" => wait(Some(0), 1),
            _ => ArgRule::default(),
        }
    }

    /// Argument `i` as a C `int` (registers, then stack words).
    fn int(args: &[u64], i: u8) -> Option<i32> {
        args.get(usize::from(i)).map(|w| *w as u32 as i32)
    }

    /// The 002 peer of a call with argument words `args`.
    pub(crate) fn peer(&self, args: Option<&[u64]>) -> Peer {
        let Some(a) = args else {
            return Peer::None;
        };
        let get = |i| Self::int(a, i);
        match self.peer {
            PeerKind::Rank(i) => get(i).map_or(Peer::None, Peer::rank),
            PeerKind::Root(i) => get(i).map_or(Peer::None, Peer::Root),
            PeerKind::Op(i) => get(i).map_or(Peer::None, |v| Peer::Op(v as u32)),
            PeerKind::Comm(i) => get(i).map_or(Peer::None, |v| Peer::Comm(v as u32)),
            PeerKind::None => Peer::None,
        }
    }

    /// What a call with argument words `args` waits for.
    pub(crate) fn partners(&self, args: Option<&[u64]>) -> Partners {
        let a = args.unwrap_or(&[]);
        let int = |i: Option<u8>| i.and_then(|i| Self::int(a, i));
        let word = |i: Option<u8>| i.and_then(|i| a.get(usize::from(i)).copied());
        match self.kind {
            CallKind::Local => Partners::None,
            CallKind::PointToPoint => Partners::PointToPoint {
                dest: int(self.dest),
                source: int(self.source),
            },
            CallKind::Post => Partners::Post {
                dest: int(self.dest),
                source: int(self.source),
                request: word(self.request),
            },
            CallKind::Collective => Partners::Collective {
                comm: match self.comm {
                    Some(i) => Self::int(a, i).map(|c| c as u32),
                    None => Some(MPI_COMM_WORLD),
                },
                root: int(self.root),
                request: word(self.request),
            },
            CallKind::Completion => {
                let (count, array) = self.completion.unwrap_or((None, 0));
                Partners::Completion {
                    requests: word(Some(array)),
                    count: match count {
                        Some(i) => Self::int(a, i).map_or(0, |c| c.clamp(0, 1 << 20) as u32),
                        None => 1,
                    },
                }
            }
        }
    }
}

/// The `MPI_*` name of a C-binding symbol (`PMPI_Send` → `MPI_Send`), or
/// `None` when the probe is not an MPI entry point.
pub fn c_name(symbol: &str, aliases: &[String]) -> Option<String> {
    std::iter::once(symbol)
        .chain(aliases.iter().map(String::as_str))
        .find_map(|s| {
            if s.starts_with("MPI_") {
                Some(s.to_string())
            } else {
                s.strip_prefix('P')
                    .filter(|s| s.starts_with("MPI_"))
                    .map(str::to_string)
            }
        })
}

/// The `MPI_*` name of a language-binding wrapper (Fortran's `mpi_send_`,
/// `pmpi_send__`, `MPI_SEND`, `mpi_send_f08ts_`; C `MPI_*` names as they
/// are), or `None`: `MPI_` and the first letter upper case, the rest lower
/// case, as every MPI C binding is spelled.
pub fn wrapper_name(symbol: &str, aliases: &[String]) -> Option<String> {
    std::iter::once(symbol)
        .chain(aliases.iter().map(String::as_str))
        .find_map(|s| {
            let lower = s.to_ascii_lowercase();
            let rest = lower
                .strip_prefix("pmpi_")
                .or_else(|| lower.strip_prefix("mpi_"))?;
            let mut rest = rest.trim_end_matches('_');
            for suffix in ["_f08ts_large", "_f08ts", "_f08_large", "_f08", "_large"] {
                if let Some(r) = rest.strip_suffix(suffix) {
                    rest = r;
                    break;
                }
            }
            let mut chars = rest.chars();
            let first = chars.next()?.to_ascii_uppercase();
            Some(format!("MPI_{first}{}", chars.as_str()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs(a: &[i64]) -> Vec<u64> {
        a.iter().map(|x| *x as u64).collect()
    }

    #[test]
    fn peers_follow_the_mpich_argument_positions() {
        // MPI_Send(buf, count, type, dest = 3, tag, comm)
        let send = regs(&[0x1000, 1, 0x4c00080b, 3, 7, 0x44000000]);
        assert_eq!(Peer::of("MPI_Send", Some(&send)), Peer::Rank(3));
        assert_eq!(Peer::of("MPI_Irecv", Some(&send)), Peer::Rank(3));
        // An int -2 in a 64-bit register whose upper half is garbage.
        let any = [0, 1, 0, 0xdead_beef_ffff_fffe, 0, 0];
        assert_eq!(Peer::of("MPI_Recv", Some(&any)), Peer::AnySource);
        let null = regs(&[0, 1, 0, -1, 0, 0]);
        assert_eq!(Peer::of("MPI_Isend", Some(&null)), Peer::ProcNull);
        // MPI_Bcast(buf, count, type, root = 1, comm)
        assert_eq!(
            Peer::of("MPI_Bcast", Some(&regs(&[0, 1, 0, 1, 0x44000000, 0]))),
            Peer::Root(1)
        );
        // MPI_Reduce(sbuf, rbuf, count, type, op = MPI_SUM, root, comm)
        let reduce = regs(&[0, 0, 1, 0, 0x58000003, 0]);
        assert_eq!(Peer::of("MPI_Reduce", Some(&reduce)), Peer::Op(0x58000003));
        assert_eq!(
            Peer::of("MPI_Allreduce", Some(&reduce)),
            Peer::Op(0x58000003)
        );
        assert_eq!(
            Peer::of("MPI_Barrier", Some(&regs(&[0x44000000, 0, 0, 0, 0, 0]))),
            Peer::Comm(0x44000000)
        );
        assert_eq!(Peer::of("MPI_Waitall", Some(&send)), Peer::None);
        assert_eq!(Peer::of("MPI_Send", None), Peer::None);
        assert_eq!(Peer::of("MPI_Send_c", Some(&send)), Peer::Rank(3));
    }

    /// Arguments 7 and later come from the stack words: Sendrecv's source,
    /// Gather's and Scatterv's roots, a nonblocking call's request.
    #[test]
    fn stack_arguments_complete_peers_and_roots() {
        // MPI_Sendrecv(sbuf, scount, stype, dest 1, stag, rbuf | rcount,
        //              rtype, source 3, rtag, comm, status)
        let sendrecv = regs(&[0, 1, 0, 1, 5, 0x10, 1, 0, 3, 6]);
        assert_eq!(
            ArgRule::of("MPI_Sendrecv").partners(Some(&sendrecv)),
            Partners::PointToPoint {
                dest: Some(1),
                source: Some(3)
            }
        );
        // Without stack words the source is unknown, not wrong.
        assert_eq!(
            ArgRule::of("MPI_Sendrecv").partners(Some(&sendrecv[..6])),
            Partners::PointToPoint {
                dest: Some(1),
                source: None
            }
        );
        // MPI_Gather(sbuf, scount, stype, rbuf, rcount, rtype | root 2, comm)
        let gather = regs(&[0, 1, 0, 0, 1, 0, 2, 0x44000000, 0, 0]);
        assert_eq!(Peer::of("MPI_Gather", Some(&gather)), Peer::Root(2));
        assert_eq!(
            ArgRule::of("MPI_Scatter").partners(Some(&gather)),
            Partners::Collective {
                comm: Some(0x44000000),
                root: Some(2),
                request: None
            }
        );
        // MPI_Scatterv(sbuf, scounts, displs, stype, rbuf, rcount | rtype,
        //              root 0, comm)
        let scatterv = regs(&[0, 0, 0, 0, 0, 1, 0, 0, 0x44000000, 0]);
        assert_eq!(Peer::of("MPI_Scatterv", Some(&scatterv)), Peer::Root(0));
        // MPI_Irecv(buf, count, type, source 4, tag, comm | request)
        let irecv = regs(&[0, 1, 0, 4, 1, 0x44000000, 0x7ffd_0010, 0, 0, 0]);
        assert_eq!(
            ArgRule::of("MPI_Irecv").partners(Some(&irecv)),
            Partners::Post {
                dest: None,
                source: Some(4),
                request: Some(0x7ffd_0010)
            }
        );
        // MPI_Waitall(count 4, requests, statuses)
        assert_eq!(
            ArgRule::of("MPI_Waitall").partners(Some(&regs(&[4, 0x7ffd_0010, 0]))),
            Partners::Completion {
                requests: Some(0x7ffd_0010),
                count: 4
            }
        );
        assert_eq!(
            ArgRule::of("MPI_Finalize").partners(None),
            Partners::Collective {
                comm: Some(MPI_COMM_WORLD),
                root: None,
                request: None
            }
        );
        assert!(!ArgRule::of("MPI_Isend").partners(Some(&irecv)).blocks());
        assert!(ArgRule::of("MPI_Wait").partners(Some(&irecv)).blocks());
        assert!(!ArgRule::of("MPI_Comm_rank").partners(None).blocks());
    }

    #[test]
    fn c_and_wrapper_names_map_to_mpi() {
        assert_eq!(c_name("PMPI_Send", &[]).as_deref(), Some("MPI_Send"));
        assert_eq!(
            c_name("PMPI_Send", &["MPI_Send".into()]).as_deref(),
            Some("MPI_Send")
        );
        assert_eq!(c_name("MPIR_Foo", &[]), None);
        assert_eq!(c_name("malloc", &[]), None);
        for (s, want) in [
            ("mpi_send_", "MPI_Send"),
            ("pmpi_send__", "MPI_Send"),
            ("MPI_SEND", "MPI_Send"),
            ("mpi_comm_rank_", "MPI_Comm_rank"),
            ("mpi_sendrecv_replace_f08ts_", "MPI_Sendrecv_replace"),
            ("mpi_allreduce_f08ts_large_", "MPI_Allreduce"),
        ] {
            assert_eq!(wrapper_name(s, &[]).as_deref(), Some(want), "{s}");
        }
        assert_eq!(wrapper_name("mpirinitf_", &[]), None);
    }
}
