//! MPI profiles (002 §2.1): per rank, one 4-tuple per MPI call, recovered
//! from uprobes on the MPI library's `MPI_*` entry points (recorded with
//! `tracer record -a 'libmpich.so.12:MPI_*'`, which stores the six integer
//! argument registers of each entry).
//!
//! * Function: the probed symbol; MPICH's `MPI_*` are weak aliases of
//!   `PMPI_*` at the same address, so either name maps to `MPI_*`.
//! * Peer (§2.1): the partner rank of point-to-point calls from the call's
//!   arguments (System V AMD64: rdi, rsi, rdx, rcx, r8, r9; MPICH handles
//!   are `int`s); for collectives "an appropriate parameter or a fixed
//!   number": the operation of reductions, the communicator of barriers,
//!   the root of broadcasts, a constant for waits and everything else.
//!   `MPI_Sendrecv`'s source is its 9th argument (on the stack, not
//!   recorded): its peer is the destination.
//! * Computation time: from the return of the rank's previous MPI call to
//!   this call's entry (0 for the first call).
//! * Communication time: entry to return.
//!
//! Only outermost MPI calls count: an `MPI_*` called from inside another
//! (ROMIO does this) is part of the outer call's communication time.
//! Calls still open when the capture ends are dropped and counted.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::decode::{Capture, DecodeError, Event};

/// Version of the [`Profiles`] serde layout.
pub const PROFILE_VERSION: u32 = 1;

/// MPICH's `MPI_ANY_SOURCE` (mpi.h: `#define MPI_ANY_SOURCE (-2)`).
const MPI_ANY_SOURCE: i32 = -2;
/// MPICH's `MPI_PROC_NULL` (mpi.h: `#define MPI_PROC_NULL (-1)`).
const MPI_PROC_NULL: i32 = -1;

/// Errors building profiles.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// A record could not be decoded.
    #[error("decoding capture {capture}")]
    Decode {
        /// Which capture (its position in the input list).
        capture: usize,
        /// The cause.
        #[source]
        source: DecodeError,
    },
    /// Two processes claim the same MPI rank.
    #[error(
        "rank {rank} appears twice (pid {first} on {first_host} and pid {second} on {second_host})"
    )]
    DuplicateRank {
        /// The rank.
        rank: u32,
        /// First process.
        first: u32,
        /// Its host.
        first_host: String,
        /// Second process.
        second: u32,
        /// Its host.
        second_host: String,
    },
}

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
    /// Root of a rooted collective (`MPI_Bcast`).
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
    /// The peer of a call of `function` with argument registers `args`.
    pub fn of(function: &str, args: Option<&[u64; 6]>) -> Peer {
        PeerRule::of(function).apply(args)
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
}

/// Where a function's peer is among its arguments: decided once per
/// function, applied to every call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeerRule {
    /// (buf, count, datatype, dest|source, tag, comm, ...): argument 3.
    Rank3,
    /// (source, tag, comm, ...): argument 0.
    Rank0,
    /// (buffer, count, datatype, root, comm): the root, argument 3.
    Root3,
    /// (sendbuf, recvbuf, count, datatype, op, ...): the op, argument 4.
    Op4,
    /// (comm): argument 0.
    Comm0,
    /// No peer.
    None,
}

impl PeerRule {
    /// The rule of MPI function `function`.
    pub(crate) fn of(function: &str) -> Self {
        match function {
            "MPI_Send"
            | "MPI_Isend"
            | "MPI_Ssend"
            | "MPI_Issend"
            | "MPI_Rsend"
            | "MPI_Irsend"
            | "MPI_Bsend"
            | "MPI_Ibsend"
            | "MPI_Recv"
            | "MPI_Irecv"
            | "MPI_Send_init"
            | "MPI_Recv_init"
            | "MPI_Ssend_init"
            | "MPI_Rsend_init"
            | "MPI_Bsend_init"
            | "MPI_Sendrecv"
            | "MPI_Sendrecv_replace"
            | "MPI_Isendrecv"
            | "MPI_Isendrecv_replace" => Self::Rank3,
            "MPI_Probe" | "MPI_Iprobe" | "MPI_Mprobe" | "MPI_Improbe" => Self::Rank0,
            "MPI_Bcast" | "MPI_Ibcast" => Self::Root3,
            "MPI_Reduce"
            | "MPI_Ireduce"
            | "MPI_Allreduce"
            | "MPI_Iallreduce"
            | "MPI_Scan"
            | "MPI_Exscan"
            | "MPI_Reduce_scatter_block" => Self::Op4,
            "MPI_Barrier" | "MPI_Ibarrier" => Self::Comm0,
            _ => Self::None,
        }
    }

    /// The peer of one call with argument registers `args`.
    pub(crate) fn apply(self, args: Option<&[u64; 6]>) -> Peer {
        let Some(a) = args else {
            return Peer::None;
        };
        // MPICH handles and ranks are C `int`s: the low 32 bits of the register.
        let int = |i: usize| a[i] as u32 as i32;
        let rank = |r: i32| match r {
            MPI_ANY_SOURCE => Peer::AnySource,
            MPI_PROC_NULL => Peer::ProcNull,
            r => Peer::Rank(r),
        };
        match self {
            Self::Rank3 => rank(int(3)),
            Self::Rank0 => rank(int(0)),
            Self::Root3 => Peer::Root(int(3)),
            Self::Op4 => Peer::Op(int(4) as u32),
            Self::Comm0 => Peer::Comm(int(0) as u32),
            Self::None => Peer::None,
        }
    }
}

/// One MPI call: the paper's 4-tuple plus where and when.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// Index into [`RankProfile::functions`].
    pub function: u16,
    /// The peer entry.
    pub peer: Peer,
    /// Computation time: previous MPI call's return to this entry (ns).
    pub compute_ns: u64,
    /// Communication time: entry to return (ns).
    pub comm_ns: u64,
    /// Entry time (CLOCK_MONOTONIC, ns).
    pub start_ns: u64,
    /// CPU the call entered on.
    pub cpu: u32,
    /// Thread that made the call.
    pub tid: u32,
    /// Return address of the call (the caller's call site, a runtime user
    /// address of the process; 0 when the capture does not have it).
    #[serde(default)]
    pub call_site: u64,
}

/// How a process's rank was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankSource {
    /// From the launcher's environment (`PMI_RANK` of Hydra,
    /// `OMPI_COMM_WORLD_RANK`, `PMIX_RANK`).
    Environment,
    /// No rank in the environment (the process snapshot was missed): the
    /// processes of a capture are numbered in pid order, which is launch
    /// order for Hydra's proxies on one host.
    PidOrder,
}

/// The profile of one rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankProfile {
    /// MPI rank in `MPI_COMM_WORLD`.
    pub rank: u32,
    /// How `rank` was found.
    pub rank_source: RankSource,
    /// Job size from the environment (`PMI_SIZE`), if present.
    pub size: Option<u32>,
    /// Host (the capture header's).
    pub host: String,
    /// Process id on `host`.
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// CPUs the rank's MPI calls entered on (one when pinned).
    pub cpus: Vec<u32>,
    /// Function names; [`Call::function`] indexes this.
    pub functions: Vec<String>,
    /// Outermost MPI calls in entry order.
    pub calls: Vec<Call>,
    /// Calls with no return in the capture (dropped).
    pub unfinished: u64,
}

impl RankProfile {
    /// Name of `call`'s function.
    pub fn function_name(&self, call: &Call) -> &str {
        self.functions
            .get(call.function as usize)
            .map_or("?", String::as_str)
    }

    /// Number of calls per function name.
    pub fn call_counts(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for c in &self.calls {
            *out.entry(self.function_name(c).to_string()).or_default() += 1;
        }
        out
    }
}

/// Profiles of every rank of one run, possibly from several captures (one
/// per host).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profiles {
    /// [`PROFILE_VERSION`].
    pub version: u32,
    /// Ranks, ascending.
    pub ranks: Vec<RankProfile>,
}

impl Profiles {
    /// The profile of `rank`.
    pub fn rank(&self, rank: u32) -> Option<&RankProfile> {
        self.ranks.iter().find(|r| r.rank == rank)
    }

    /// Total calls over all ranks.
    pub fn total_calls(&self) -> usize {
        self.ranks.iter().map(|r| r.calls.len()).sum()
    }
}

/// The `MPI_*` name of a probed symbol (`PMPI_Send` → `MPI_Send`), or `None`
/// when the probe is not an MPI entry point.
fn mpi_name(symbol: &str, aliases: &[String]) -> Option<String> {
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

fn env_rank(env: &BTreeMap<String, String>, keys: &[&str]) -> Option<u32> {
    keys.iter()
        .find_map(|k| env.get(*k).and_then(|v| v.trim().parse().ok()))
}

struct Open {
    function: u16,
    func_id: u32,
    peer: Peer,
    start_ns: u64,
    cpu: u32,
    call_site: u64,
    /// Nesting depth of MPI calls inside this one.
    depth: u32,
}

#[derive(Default)]
struct Building {
    functions: Vec<String>,
    /// func_id → index into `functions`.
    by_probe: rustc_hash::FxHashMap<u32, u16>,
    calls: Vec<Call>,
    /// (entry ns, return ns) per call, to compute computation times once all
    /// threads' calls are in entry order.
    open: rustc_hash::FxHashMap<u32, Open>,
    unfinished: u64,
}

/// Builds per-rank profiles from captures of one run (one capture per host
/// is typical; one capture with every rank works too).
pub fn extract(captures: &[&Capture]) -> Result<Profiles, ProfileError> {
    let mut ranks: Vec<RankProfile> = Vec::new();
    for (index, capture) in captures.iter().enumerate() {
        ranks.extend(extract_one(capture, index)?);
    }
    ranks.sort_by_key(|r| r.rank);
    for pair in ranks.windows(2) {
        if pair[0].rank == pair[1].rank {
            return Err(ProfileError::DuplicateRank {
                rank: pair[0].rank,
                first: pair[0].pid,
                first_host: pair[0].host.clone(),
                second: pair[1].pid,
                second_host: pair[1].host.clone(),
            });
        }
    }
    Ok(Profiles {
        version: PROFILE_VERSION,
        ranks,
    })
}

fn extract_one(capture: &Capture, index: usize) -> Result<Vec<RankProfile>, ProfileError> {
    // func_id → MPI name and peer rule, once: entries only index this.
    let names: Vec<Option<(String, PeerRule)>> = capture
        .probes
        .iter()
        .map(|p| mpi_name(&p.symbol, &p.aliases).map(|n| (PeerRule::of(&n), n)))
        .map(|o| o.map(|(rule, name)| (name, rule)))
        .collect();
    let mut procs: BTreeMap<u32, Building> = BTreeMap::new();
    for event in capture.events() {
        let event = event.map_err(|source| ProfileError::Decode {
            capture: index,
            source,
        })?;
        match event {
            Event::Entry { rec, args } => {
                let Some(Some((name, rule))) = names.get(rec.func_id as usize) else {
                    continue;
                };
                let b = procs.entry(rec.header.pid).or_default();
                if let Some(open) = b.open.get_mut(&rec.header.tid) {
                    open.depth += 1;
                    continue;
                }
                let function = match b.by_probe.get(&rec.func_id) {
                    Some(id) => *id,
                    None => {
                        // Aliases in several objects share one name: one index.
                        let id = match b.functions.iter().position(|f| f == name) {
                            Some(i) => i as u16,
                            None => {
                                b.functions.push(name.clone());
                                (b.functions.len() - 1) as u16
                            }
                        };
                        b.by_probe.insert(rec.func_id, id);
                        id
                    }
                };
                b.open.insert(
                    rec.header.tid,
                    Open {
                        function,
                        func_id: rec.func_id,
                        peer: rule.apply(args.as_ref()),
                        start_ns: rec.header.ts_ns,
                        cpu: rec.header.cpu,
                        call_site: rec.call_site,
                        depth: 0,
                    },
                );
            }
            Event::Return(rec) => {
                let Some(b) = procs.get_mut(&rec.header.pid) else {
                    continue;
                };
                let Some(open) = b.open.get_mut(&rec.header.tid) else {
                    continue;
                };
                if open.depth > 0 {
                    open.depth -= 1;
                    continue;
                }
                if open.func_id != rec.func_id {
                    // A return we did not see enter (lost record): resync.
                    continue;
                }
                let Some(open) = b.open.remove(&rec.header.tid) else {
                    continue;
                };
                b.calls.push(Call {
                    function: open.function,
                    peer: open.peer,
                    compute_ns: 0,
                    comm_ns: rec.header.ts_ns.saturating_sub(open.start_ns),
                    start_ns: open.start_ns,
                    cpu: open.cpu,
                    tid: rec.header.tid,
                    call_site: open.call_site,
                });
            }
            _ => {}
        }
    }

    let host = capture.header.host.clone();
    let mut out = Vec::new();
    let mut by_pid_order = 0u32;
    for (pid, mut b) in procs {
        if b.calls.is_empty() {
            continue;
        }
        b.unfinished += b.open.len() as u64;
        b.calls.sort_by_key(|c| c.start_ns);
        let mut prev_end: Option<u64> = None;
        for c in &mut b.calls {
            c.compute_ns = prev_end.map_or(0, |e| c.start_ns.saturating_sub(e));
            let end = c.start_ns + c.comm_ns;
            prev_end = Some(prev_end.map_or(end, |p| p.max(end)));
        }
        let info = capture.processes.get(&pid).and_then(|v| v.last());
        let env = info.map(|p| &p.env);
        let from_env =
            env.and_then(|e| env_rank(e, &["PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"]));
        let (rank, rank_source) = match from_env {
            Some(r) => (r, RankSource::Environment),
            None => (by_pid_order, RankSource::PidOrder),
        };
        by_pid_order += 1;
        let cpus: BTreeSet<u32> = b.calls.iter().map(|c| c.cpu).collect();
        out.push(RankProfile {
            rank,
            rank_source,
            size: env.and_then(|e| env_rank(e, &["PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"])),
            host: host.clone(),
            pid,
            comm: capture.comm(pid).unwrap_or("?").to_string(),
            cpus: cpus.into_iter().collect(),
            functions: b.functions,
            calls: b.calls,
            unfinished: b.unfinished,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs(a: [i64; 6]) -> [u64; 6] {
        a.map(|x| x as u64)
    }

    #[test]
    fn peers_follow_the_mpich_argument_positions() {
        // MPI_Send(buf, count, type, dest = 3, tag, comm)
        let send = regs([0x1000, 1, 0x4c00080b, 3, 7, 0x44000000]);
        assert_eq!(Peer::of("MPI_Send", Some(&send)), Peer::Rank(3));
        assert_eq!(Peer::of("MPI_Irecv", Some(&send)), Peer::Rank(3));
        // An int -2 in a 64-bit register whose upper half is garbage.
        let any = [0, 1, 0, 0xdead_beef_ffff_fffe, 0, 0];
        assert_eq!(Peer::of("MPI_Recv", Some(&any)), Peer::AnySource);
        let null = regs([0, 1, 0, -1, 0, 0]);
        assert_eq!(Peer::of("MPI_Isend", Some(&null)), Peer::ProcNull);
        // MPI_Bcast(buf, count, type, root = 1, comm)
        assert_eq!(
            Peer::of("MPI_Bcast", Some(&regs([0, 1, 0, 1, 0x44000000, 0]))),
            Peer::Root(1)
        );
        // MPI_Reduce(sbuf, rbuf, count, type, op = MPI_SUM, root, comm)
        let reduce = regs([0, 0, 1, 0, 0x58000003, 0]);
        assert_eq!(Peer::of("MPI_Reduce", Some(&reduce)), Peer::Op(0x58000003));
        assert_eq!(
            Peer::of("MPI_Allreduce", Some(&reduce)),
            Peer::Op(0x58000003)
        );
        assert_eq!(
            Peer::of("MPI_Barrier", Some(&regs([0x44000000, 0, 0, 0, 0, 0]))),
            Peer::Comm(0x44000000)
        );
        assert_eq!(Peer::of("MPI_Waitall", Some(&send)), Peer::None);
        assert_eq!(Peer::of("MPI_Send", None), Peer::None);
    }

    /// A capture built in memory: rank 1 (by PMI_RANK) makes an
    /// MPI_Send with an MPI_Type_size nested inside (not a call of its own),
    /// then an MPI_Recv; rank 0 has no environment (pid order) and an
    /// MPI_Barrier that never returns (dropped, counted).
    #[test]
    fn extracts_outermost_calls_with_times_and_ranks() {
        use tracer_common::{
            capture::{CaptureHeader, CaptureWriter, FORMAT_VERSION, Meta, Probe, ProcessInfo},
            record::{FuncEntry, FuncEntryArgs, FuncReturn, Header, Pod as _, kind},
        };
        let mut w = CaptureWriter::new(
            Vec::new(),
            &CaptureHeader {
                format_version: FORMAT_VERSION,
                host: "node7".into(),
                ..Default::default()
            },
        )
        .expect("writer");
        let names = [
            "PMPI_Send",
            "MPI_Type_size",
            "MPI_Recv",
            "MPI_Barrier",
            "malloc",
        ];
        let probes = names
            .iter()
            .enumerate()
            .map(|(i, n)| Probe {
                func_id: i as u32,
                object: "libmpich.so.12".into(),
                symbol: n.to_string(),
                ..Default::default()
            })
            .collect();
        w.write_meta(&Meta::Probes { probes }).expect("probes");
        let mut env = BTreeMap::new();
        env.insert("PMI_RANK".to_string(), "1".to_string());
        env.insert("PMI_SIZE".to_string(), "2".to_string());
        w.write_meta(&Meta::Process(ProcessInfo {
            pid: 20,
            env,
            ..Default::default()
        }))
        .expect("process");
        let h = |pid: u32, kind, size: usize, ts| Header {
            ts_ns: ts,
            pid,
            tid: pid,
            kind,
            size: size as u16,
            cpu: 1,
        };
        let mut recs = Vec::new();
        let entry = |recs: &mut Vec<u8>, pid, f: u32, ts, peer: u64| {
            recs.extend_from_slice(
                FuncEntryArgs {
                    entry: FuncEntry {
                        header: h(pid, kind::FUNC_ENTRY_ARGS, size_of::<FuncEntryArgs>(), ts),
                        func_id: f,
                        ..Default::default()
                    },
                    args: [0, 1, 0, peer, 0, 0x44000000],
                }
                .as_bytes(),
            )
        };
        let ret = |recs: &mut Vec<u8>, pid, f: u32, ts| {
            recs.extend_from_slice(
                FuncReturn {
                    header: h(pid, kind::FUNC_RETURN, size_of::<FuncReturn>(), ts),
                    func_id: f,
                    ..Default::default()
                }
                .as_bytes(),
            )
        };
        entry(&mut recs, 20, 0, 1_000, 0); // MPI_Send(dest 0)
        entry(&mut recs, 20, 1, 1_100, 0); //   MPI_Type_size (nested)
        ret(&mut recs, 20, 1, 1_200);
        entry(&mut recs, 20, 4, 1_300, 0); //   malloc (not MPI)
        ret(&mut recs, 20, 4, 1_400);
        ret(&mut recs, 20, 0, 1_500);
        entry(&mut recs, 10, 3, 1_600, 0); // rank 0: MPI_Barrier, no return
        entry(&mut recs, 20, 2, 4_500, u64::MAX - 1); // MPI_Recv(ANY_SOURCE)
        ret(&mut recs, 20, 2, 5_000);
        w.write_records(&recs).expect("records");
        let cap = Capture::read(w.into_inner().as_slice()).expect("capture");
        let p = extract(&[&cap]).expect("profiles");

        // Rank 0 made no complete call: no profile.
        assert_eq!(p.ranks.len(), 1);
        let r = &p.ranks[0];
        assert_eq!(
            (r.rank, r.rank_source, r.size),
            (1, RankSource::Environment, Some(2))
        );
        assert_eq!(
            (r.host.as_str(), r.pid, r.cpus.as_slice()),
            ("node7", 20, &[1][..])
        );
        let got: Vec<(&str, Peer, u64, u64)> = r
            .calls
            .iter()
            .map(|c| (r.function_name(c), c.peer, c.compute_ns, c.comm_ns))
            .collect();
        assert_eq!(
            got,
            vec![
                ("MPI_Send", Peer::Rank(0), 0, 500),
                ("MPI_Recv", Peer::AnySource, 3_000, 500),
            ]
        );
    }

    #[test]
    fn pmpi_names_map_to_mpi() {
        assert_eq!(mpi_name("PMPI_Send", &[]).as_deref(), Some("MPI_Send"));
        assert_eq!(
            mpi_name("PMPI_Send", &["MPI_Send".into()]).as_deref(),
            Some("MPI_Send")
        );
        assert_eq!(mpi_name("MPIR_Foo", &[]), None);
        assert_eq!(mpi_name("malloc", &[]), None);
    }
}
