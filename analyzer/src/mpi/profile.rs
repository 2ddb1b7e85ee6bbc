//! MPI profiles (002 §2.1): per rank, one 4-tuple per MPI call, recovered
//! from uprobes on the MPI library's `MPI_*` entry points (recorded with
//! `tracer record --mpi`, which stores each entry's first ten integer
//! arguments: six registers and four stack words).
//!
//! * Function: the probed symbol; MPICH's `MPI_*` are weak aliases of
//!   `PMPI_*` at the same address, so either name maps to `MPI_*`.
//! * Peer (§2.1) and partners: see [`super::args`].
//! * Computation time: from the return of the rank's previous MPI call to
//!   this call's entry (0 for the first call).
//! * Communication time: entry to return.
//! * Call site: the return address of the call into the MPI library. A
//!   call made through a language binding (Fortran's `mpi_send_` in
//!   `libmpichfort.so`) takes the binding's call site, in the program
//!   (found by the binding's call frame information in the stack words its
//!   C call's entry kept: [`super::binding`]); the C calls one binding call
//!   makes are one call, told from the next by the binding frame (its
//!   address and call site), by the return address inside the binding,
//!   which moves forward within one binding call, and by the binding's own
//!   C function, which one binding call calls once. Captures of recorders
//!   that probed the bindings' entries (entry only) are read as before:
//!   such a call starts when the binding was entered.
//!
//! Only outermost MPI calls count: an `MPI_*` called from inside another
//! (ROMIO does this) is part of the outer call's communication time.
//! Calls still open when the capture ends are kept apart
//! ([`RankProfile::open`]): a hang analysis needs them.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use tracer_common::record::{STACK_ARGS, lifecycle};

use super::args::{ArgRule, c_name, wrapper_name};
pub use super::args::{Partners, Peer};
use crate::decode::{Capture, DecodeError, Event};

/// Version of the [`Profiles`] serde layout.
pub const PROFILE_VERSION: u32 = 2;

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
        "rank {rank} appears twice (pid {first} on {first_host} and pid {second} on {second_host}): give each run's captures separately"
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
    /// What the call waits for (from its arguments).
    #[serde(default)]
    pub partners: Partners,
}

/// A call that had not returned when the capture ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpenCall {
    /// `MPI_*` name.
    pub function: String,
    /// The peer entry.
    pub peer: Peer,
    /// What the call waits for.
    pub partners: Partners,
    /// Return address of the call (see [`Call::call_site`]).
    pub call_site: u64,
    /// Entry time (CLOCK_MONOTONIC, ns).
    pub start_ns: u64,
    /// Thread.
    pub tid: u32,
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
    /// Calls with no return in the capture (not in `calls`).
    pub unfinished: u64,
    /// The outermost call the rank was inside when the capture ended (the
    /// earliest, when several threads were).
    #[serde(default)]
    pub open: Option<OpenCall>,
    /// Last MPI transition (an entry or a return), CLOCK_MONOTONIC ns.
    #[serde(default)]
    pub last_ns: u64,
    /// When the process exited, if it did while recorded.
    #[serde(default)]
    pub exited_ns: Option<u64>,
    /// Its scheduler state when recording stopped (`R`, `S`, `T`, ...), if
    /// it was still alive and the recorder wrote it.
    #[serde(default)]
    pub state: Option<String>,
    /// End of its capture: the stop time, or the last record.
    #[serde(default)]
    pub end_ns: u64,
    /// Its CPU times as the recorder read them, in time order (empty when
    /// the capture has none: `tracer record --mpi` or `--cpu-times`).
    #[serde(default)]
    pub cpu: Vec<CpuReading>,
}

/// A process's cumulative CPU times at one moment (see
/// `tracer_common::record::CpuTimes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuReading {
    /// When read (CLOCK_MONOTONIC ns).
    pub ts_ns: u64,
    /// Time on a CPU so far (ns).
    pub run_ns: u64,
    /// Time runnable but waiting for a CPU so far (ns).
    pub wait_ns: u64,
    /// Threads summed (a thread that exits takes its times with it).
    #[serde(default)]
    pub threads: u32,
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

    /// Time since the last MPI transition when the capture ended (ns).
    pub fn idle_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.last_ns)
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

    /// For a person, when some ranks were numbered by pid order rather
    /// than by the launcher: which, and why their numbers may not be their
    /// `MPI_COMM_WORLD` ranks. `None` when every rank's number is the
    /// launcher's.
    pub fn rank_numbering_note(&self) -> Option<String> {
        let guessed: Vec<String> = self
            .ranks
            .iter()
            .filter(|r| r.rank_source == RankSource::PidOrder)
            .map(|r| format!("rank {} (pid {} on {})", r.rank, r.pid, r.host))
            .collect();
        (!guessed.is_empty()).then(|| {
            format!(
                "{} numbered by pid order, not by the launcher: the environment was not read (the process was gone before the recorder read its /proc), so the number may not be the MPI_COMM_WORLD rank",
                if guessed.len() == 1 {
                    format!("{} is", guessed[0])
                } else {
                    format!("{} are", guessed.join(", "))
                }
            )
        })
    }
}

/// MPI functions an overhead budget (`tracer record --overhead`) detached
/// while the ranks ran: their calls after that are not in the profiles.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Detached {
    /// `MPI_*` C functions detached, with the earliest time one went
    /// (seconds into its capture).
    pub calls: BTreeMap<String, f64>,
    /// Language-binding wrappers detached (their calls are still profiled,
    /// from the C functions they make; their call sites are the wrapper's).
    pub bindings: BTreeSet<String>,
}

impl Detached {
    /// What the captures' overhead budgets detached of MPI.
    pub fn of(captures: &[&Capture]) -> Self {
        let mut out = Self::default();
        for c in captures {
            let Some(o) = &c.overhead else { continue };
            let start = c.header.clock.monotonic_ns;
            for d in &o.dropped {
                let Some(p) = c.probes.get(d.func_id as usize) else {
                    continue;
                };
                if p.entry_only {
                    if let Some(name) = wrapper_name(&p.symbol, &p.aliases) {
                        out.bindings.insert(name);
                    }
                } else if let Some(name) = c_name(&p.symbol, &p.aliases) {
                    let at = d.at_ns.saturating_sub(start) as f64 / 1e9;
                    let e = out.calls.entry(name).or_insert(at);
                    *e = e.min(at);
                }
            }
        }
        out
    }

    /// Whether calls are missing: the MPI analyses cannot judge the run.
    pub fn loses_calls(&self) -> bool {
        !self.calls.is_empty()
    }

    /// What is missing and what it means, for a person; `None` when the
    /// budgets detached nothing of MPI.
    pub fn note(&self) -> Option<String> {
        if let Some(first) = self.calls.values().copied().reduce(f64::min) {
            return Some(format!(
                "an overhead budget detached {} from {first:.1} s into the recording: their calls after that are missing, so ranks would seem to stop calling them; no MPI verdict is drawn from these captures (record MPI ranks without --overhead)",
                self.calls.keys().cloned().collect::<Vec<_>>().join(", "),
            ));
        }
        (!self.bindings.is_empty()).then(|| {
            format!(
                "an overhead budget detached the language bindings of {}: their calls are profiled from the C functions they make, but the call sites of later calls are the MPI library's wrappers, not the program",
                self.bindings.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
    }
}

fn env_rank(env: &BTreeMap<String, String>, keys: &[&str]) -> Option<u32> {
    keys.iter()
        .find_map(|k| env.get(*k).and_then(|v| v.trim().parse().ok()))
}

/// What a probe is to the profile.
enum ProbeRole {
    /// A C binding `MPI_*`: its name and argument rule.
    Mpi(String, ArgRule),
    /// A language binding probed at entry only: the `MPI_*` it stands for.
    Binding(String),
    /// Not MPI.
    Other,
}

/// A language-binding entry, waiting for the C calls it makes.
#[derive(Clone, Copy)]
struct Binding {
    ts_ns: u64,
    call_site: u64,
    /// Its probe (for its `MPI_*` name).
    func_id: u32,
    /// Binding entries seen on the thread so far: tells one binding call
    /// from the next.
    seq: u64,
}

struct Open {
    function: u16,
    func_id: u32,
    peer: Peer,
    partners: Partners,
    /// When the call (or its binding) was entered.
    start_ns: u64,
    cpu: u32,
    call_site: u64,
    /// The binding call it was made by, and whether it is the binding's own
    /// function (not a helper such as `MPI_Type_free` the binding calls).
    binding: Option<(u64, bool)>,
    /// Nesting depth of MPI calls inside this one.
    depth: u32,
}

/// The last binding call seen through a C call's stack words.
#[derive(Clone, Copy)]
struct ViaFrame {
    cfa: u64,
    site: u64,
    /// The latest C call's return address inside the binding.
    ret: u64,
    seq: u64,
    /// Whether the binding call has made its own C function's call.
    had_own: bool,
}

#[derive(Default)]
struct Thread {
    open: Option<Open>,
    binding: Option<Binding>,
    via: Option<ViaFrame>,
    seq: u64,
    /// The thread's last call (index into `Building::calls`) and the binding
    /// call it was made by: a further C call of that binding call extends it.
    last: Option<(usize, u64)>,
}

#[derive(Default)]
struct Building {
    functions: Vec<String>,
    /// func_id → index into `functions`.
    by_probe: rustc_hash::FxHashMap<u32, u16>,
    calls: Vec<Call>,
    threads: rustc_hash::FxHashMap<u32, Thread>,
    last_ns: u64,
    exited_ns: Option<u64>,
    cpu: Vec<CpuReading>,
}

impl Building {
    fn function_index(&mut self, func_id: u32, name: &str) -> u16 {
        if let Some(id) = self.by_probe.get(&func_id) {
            return *id;
        }
        // Aliases in several objects share one name: one index.
        let id = match self.functions.iter().position(|f| f == name) {
            Some(i) => i as u16,
            None => {
                self.functions.push(name.to_string());
                (self.functions.len() - 1) as u16
            }
        };
        self.by_probe.insert(func_id, id);
        id
    }
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

/// Address ranges, per process, of the objects holding language bindings:
/// a C call made from inside one was made by a binding.
fn binding_ranges(capture: &Capture) -> BTreeMap<u32, Vec<(u64, u64)>> {
    let objects: BTreeSet<&str> = capture
        .probes
        .iter()
        .filter(|p| p.entry_only)
        .map(|p| p.object.as_str())
        .collect();
    let mut out: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    if objects.is_empty() {
        return out;
    }
    for (pid, snaps) in &capture.processes {
        for m in snaps.iter().flat_map(|s| &s.maps) {
            if objects.contains(m.path.as_str()) {
                out.entry(*pid).or_default().push((m.start, m.end));
            }
        }
    }
    out
}

fn extract_one(capture: &Capture, index: usize) -> Result<Vec<RankProfile>, ProfileError> {
    // func_id → role, once: entries only index this.
    let roles: Vec<ProbeRole> = capture
        .probes
        .iter()
        .map(|p| {
            if p.entry_only {
                wrapper_name(&p.symbol, &p.aliases).map_or(ProbeRole::Other, ProbeRole::Binding)
            } else {
                c_name(&p.symbol, &p.aliases).map_or(ProbeRole::Other, |n| {
                    let rule = ArgRule::of(&n);
                    ProbeRole::Mpi(n, rule)
                })
            }
        })
        .collect();
    let ranges = binding_ranges(capture);
    let symbolizer = std::cell::OnceCell::new();
    let mut frames = super::binding::BindingFrames::default();
    let mut procs: BTreeMap<u32, Building> = BTreeMap::new();
    let mut last_record = 0u64;
    let mut words = [0u64; 6 + STACK_ARGS];
    for event in capture.events() {
        let event = event.map_err(|source| ProfileError::Decode {
            capture: index,
            source,
        })?;
        match event {
            Event::Entry {
                rec,
                args,
                stack,
                frame,
            } => {
                let h = rec.header;
                let (name, rule) = match roles.get(rec.func_id as usize) {
                    Some(ProbeRole::Mpi(name, rule)) => (name, rule),
                    Some(ProbeRole::Binding(_)) => {
                        last_record = last_record.max(h.ts_ns);
                        let b = procs.entry(h.pid).or_default();
                        b.last_ns = b.last_ns.max(h.ts_ns);
                        let t = b.threads.entry(h.tid).or_default();
                        if t.open.is_none() {
                            t.seq += 1;
                            t.binding = Some(Binding {
                                ts_ns: h.ts_ns,
                                call_site: rec.call_site,
                                func_id: rec.func_id,
                                seq: t.seq,
                            });
                        }
                        continue;
                    }
                    _ => continue,
                };
                last_record = last_record.max(h.ts_ns);
                let from_binding = match ranges.get(&h.pid) {
                    Some(r) => r
                        .iter()
                        .any(|(lo, hi)| rec.call_site >= *lo && rec.call_site < *hi),
                    // No maps for the process: trust a pending binding.
                    None => true,
                };
                let b = procs.entry(h.pid).or_default();
                b.last_ns = b.last_ns.max(h.ts_ns);
                let function = b.function_index(rec.func_id, name);
                let t = b.threads.entry(h.tid).or_default();
                if let Some(open) = &mut t.open {
                    open.depth += 1;
                    continue;
                }
                let a = args.map(|regs| {
                    words[..6].copy_from_slice(&regs);
                    let n = match stack {
                        Some(s) => {
                            words[6..].copy_from_slice(&s);
                            6 + STACK_ARGS
                        }
                        None => 6,
                    };
                    &words[..n]
                });
                let via = frame.as_deref().and_then(|f| {
                    let sym = symbolizer.get_or_init(|| crate::decode::Symbolizer::new(capture));
                    frames.resolve(sym, h.pid, f)
                });
                let (binding, own) = match via {
                    Some(bf) => {
                        // A further C call of the thread's last binding call
                        // (same frame, same site, further on in the binding),
                        // or a new binding call.
                        // A binding calls its own C function once: a second
                        // one is the next binding call (one whose C call
                        // took a later branch of the binding).
                        let own = bf.name.as_deref() == Some(name.as_str());
                        let (seq, had_own) = match t.via {
                            Some(v)
                                if v.cfa == bf.cfa
                                    && v.site == bf.site
                                    && bf.ret > v.ret
                                    && !(v.had_own && own) =>
                            {
                                (v.seq, v.had_own)
                            }
                            _ => {
                                t.seq += 1;
                                (t.seq, false)
                            }
                        };
                        t.via = Some(ViaFrame {
                            cfa: bf.cfa,
                            site: bf.site,
                            ret: bf.ret,
                            seq,
                            had_own: had_own || own,
                        });
                        let binding = Binding {
                            ts_ns: h.ts_ns,
                            call_site: bf.site,
                            func_id: rec.func_id,
                            seq,
                        };
                        (Some(binding), own)
                    }
                    None => {
                        t.via = None;
                        let binding = t.binding.filter(|_| from_binding);
                        let own = binding.is_some_and(|bd| {
                            matches!(roles.get(bd.func_id as usize),
                                Some(ProbeRole::Binding(w)) if w == name)
                        });
                        (binding, own)
                    }
                };
                t.open = Some(Open {
                    function,
                    func_id: rec.func_id,
                    peer: rule.peer(a),
                    partners: rule.partners(a),
                    start_ns: binding.map_or(h.ts_ns, |bd| bd.ts_ns),
                    cpu: h.cpu,
                    call_site: binding.map_or(rec.call_site, |bd| bd.call_site),
                    binding: binding.map(|bd| (bd.seq, own)),
                    depth: 0,
                });
            }
            Event::Return(rec) => {
                let h = rec.header;
                let Some(b) = procs.get_mut(&h.pid) else {
                    continue;
                };
                let Some(t) = b.threads.get_mut(&h.tid) else {
                    continue;
                };
                let Some(open) = &mut t.open else {
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
                let Some(open) = t.open.take() else {
                    continue;
                };
                last_record = last_record.max(h.ts_ns);
                b.last_ns = b.last_ns.max(h.ts_ns);
                let prev = match (open.binding, t.last) {
                    (Some((seq, _)), Some((i, last_seq))) if seq == last_seq => b.calls.get_mut(i),
                    _ => None,
                };
                if let Some(prev) = prev {
                    // Another C call of the same binding call: one call.
                    prev.comm_ns = h.ts_ns.saturating_sub(prev.start_ns);
                    if open.binding.is_some_and(|(_, own)| own) {
                        prev.function = open.function;
                        prev.peer = open.peer;
                        prev.partners = open.partners;
                    }
                } else {
                    b.calls.push(Call {
                        function: open.function,
                        peer: open.peer,
                        compute_ns: 0,
                        comm_ns: h.ts_ns.saturating_sub(open.start_ns),
                        start_ns: open.start_ns,
                        cpu: open.cpu,
                        tid: h.tid,
                        call_site: open.call_site,
                        partners: open.partners,
                    });
                    t.last = open.binding.map(|(seq, _)| (b.calls.len() - 1, seq));
                }
            }
            Event::CpuTimes(c) => {
                procs.entry(c.header.pid).or_default().cpu.push(CpuReading {
                    ts_ns: c.header.ts_ns,
                    run_ns: c.run_ns,
                    wait_ns: c.wait_ns,
                    threads: c.threads,
                });
            }
            Event::Lifecycle(l) => {
                last_record = last_record.max(l.header.ts_ns);
                if l.event == lifecycle::EXIT
                    && l.group_dead != 0
                    && let Some(b) = procs.get_mut(&l.header.pid)
                {
                    b.exited_ns = Some(l.header.ts_ns);
                }
            }
            _ => {}
        }
    }

    let host = capture.header.host.clone();
    let end_ns = capture
        .end
        .as_ref()
        .map_or(last_record, |e| e.stop_ns.max(last_record));
    let states: BTreeMap<u32, &str> = capture
        .end
        .iter()
        .flat_map(|e| &e.processes)
        .map(|p| (p.pid, p.state.as_str()))
        .collect();
    const RANK_VARS: [&str; 3] = ["PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"];
    // The launcher's rank, from the latest snapshot that has one (a
    // process gone before its /proc was read has none).
    let launcher_rank = |pid: u32| {
        capture
            .processes
            .get(&pid)?
            .iter()
            .rev()
            .find_map(|p| env_rank(&p.env, &RANK_VARS))
    };
    // Ranks without one take, in pid order, the numbers no launcher's rank
    // took: one rank missed among others never repeats a number.
    let taken: BTreeSet<u32> = procs.keys().filter_map(|pid| launcher_rank(*pid)).collect();
    let mut by_pid_order = 0u32;
    let mut out = Vec::new();
    for (pid, mut b) in procs {
        let mut open: Vec<OpenCall> = b
            .threads
            .iter()
            .filter_map(|(tid, t)| {
                let o = t.open.as_ref()?;
                Some(OpenCall {
                    function: b.functions.get(o.function as usize)?.clone(),
                    peer: o.peer,
                    partners: o.partners,
                    call_site: o.call_site,
                    start_ns: o.start_ns,
                    tid: *tid,
                })
            })
            .collect();
        open.sort_by_key(|o| (o.start_ns, o.tid));
        if b.calls.is_empty() && open.is_empty() {
            continue;
        }
        b.calls.sort_by_key(|c| c.start_ns);
        let mut prev_end: Option<u64> = None;
        for c in &mut b.calls {
            c.compute_ns = prev_end.map_or(0, |e| c.start_ns.saturating_sub(e));
            let end = c.start_ns + c.comm_ns;
            prev_end = Some(prev_end.map_or(end, |p| p.max(end)));
        }
        let info = capture.processes.get(&pid).and_then(|v| v.last());
        let env = info.map(|p| &p.env);
        let (rank, rank_source) = match launcher_rank(pid) {
            Some(r) => (r, RankSource::Environment),
            None => {
                while taken.contains(&by_pid_order) {
                    by_pid_order += 1;
                }
                by_pid_order += 1;
                (by_pid_order - 1, RankSource::PidOrder)
            }
        };
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
            unfinished: open.len() as u64,
            open: open.into_iter().next(),
            last_ns: b.last_ns,
            exited_ns: b.exited_ns,
            state: states.get(&pid).map(|s| s.to_string()),
            end_ns,
            cpu: {
                b.cpu.sort_by_key(|c| c.ts_ns);
                b.cpu
            },
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use tracer_common::{
        capture::{
            CaptureHeader, CaptureWriter, End, FORMAT_VERSION, MapEntry, Meta, Probe, ProcessInfo,
            ProcessState,
        },
        record::{
            FuncEntry, FuncEntryArgs, FuncEntryStack, FuncReturn, Header, Lifecycle, Pod as _, kind,
        },
    };

    use super::*;

    /// Writes records into an in-memory capture.
    struct Builder {
        recs: Vec<u8>,
    }

    impl Builder {
        fn h(pid: u32, kind: u16, size: usize, ts: u64) -> Header {
            Header {
                ts_ns: ts,
                pid,
                tid: pid,
                kind,
                size: size as u16,
                cpu: 1,
            }
        }

        /// An entry with ten argument words (registers and stack).
        fn entry(&mut self, pid: u32, f: u32, ts: u64, site: u64, args: [u64; 10]) {
            let mut regs = [0; 6];
            regs.copy_from_slice(&args[..6]);
            let mut stack = [0; STACK_ARGS];
            stack.copy_from_slice(&args[6..]);
            let rec = FuncEntryStack {
                entry: FuncEntryArgs {
                    entry: FuncEntry {
                        header: Self::h(
                            pid,
                            kind::FUNC_ENTRY_STACK,
                            size_of::<FuncEntryStack>(),
                            ts,
                        ),
                        func_id: f,
                        call_site: site,
                        ..Default::default()
                    },
                    args: regs,
                },
                stack,
            };
            self.recs.extend_from_slice(rec.as_bytes());
        }

        /// An entry of an entry-only probe (no arguments).
        fn mark(&mut self, pid: u32, f: u32, ts: u64, site: u64) {
            let rec = FuncEntry {
                header: Self::h(pid, kind::FUNC_ENTRY, size_of::<FuncEntry>(), ts),
                func_id: f,
                call_site: site,
                ..Default::default()
            };
            self.recs.extend_from_slice(rec.as_bytes());
        }

        fn ret(&mut self, pid: u32, f: u32, ts: u64) {
            let rec = FuncReturn {
                header: Self::h(pid, kind::FUNC_RETURN, size_of::<FuncReturn>(), ts),
                func_id: f,
                ..Default::default()
            };
            self.recs.extend_from_slice(rec.as_bytes());
        }

        fn exit(&mut self, pid: u32, ts: u64) {
            let rec = Lifecycle {
                header: Self::h(pid, kind::LIFECYCLE, size_of::<Lifecycle>(), ts),
                event: lifecycle::EXIT,
                group_dead: 1,
                ..Default::default()
            };
            self.recs.extend_from_slice(rec.as_bytes());
        }
    }

    /// A capture of `probes` ((object, symbol, entry only)), processes
    /// (pid, PMI_RANK, maps) and the records `build` writes; `states` go
    /// into the end item.
    fn capture(
        probes: &[(&str, &str, bool)],
        procs: &[(u32, Option<u32>, Vec<MapEntry>)],
        states: &[(u32, &str)],
        build: impl FnOnce(&mut Builder),
    ) -> Capture {
        let mut w = CaptureWriter::new(
            Vec::new(),
            &CaptureHeader {
                format_version: FORMAT_VERSION,
                host: "node7".into(),
                ..Default::default()
            },
        )
        .expect("writer");
        let probes = probes
            .iter()
            .enumerate()
            .map(|(i, (object, symbol, entry_only))| Probe {
                func_id: i as u32,
                object: object.to_string(),
                symbol: symbol.to_string(),
                args: !entry_only,
                entry_only: *entry_only,
                ..Default::default()
            })
            .collect();
        w.write_meta(&Meta::Probes { probes }).expect("probes");
        for (pid, rank, maps) in procs {
            let mut env = BTreeMap::new();
            if let Some(r) = rank {
                env.insert("PMI_RANK".to_string(), r.to_string());
                env.insert("PMI_SIZE".to_string(), "2".to_string());
            }
            w.write_meta(&Meta::Process(ProcessInfo {
                pid: *pid,
                env,
                maps: maps.clone(),
                ..Default::default()
            }))
            .expect("process");
        }
        let mut b = Builder { recs: Vec::new() };
        build(&mut b);
        w.write_records(&b.recs).expect("records");
        w.write_meta(&Meta::End(End {
            stop_ns: 10_000,
            processes: states
                .iter()
                .map(|(pid, s)| ProcessState {
                    pid: *pid,
                    state: s.to_string(),
                })
                .collect(),
            ..Default::default()
        }))
        .expect("end");
        Capture::read(w.into_inner().as_slice()).expect("capture")
    }

    const COMM_WORLD: u64 = 0x4400_0000;

    /// A rank whose snapshot was missed (no environment) takes the number
    /// no launcher's rank took, not its place in pid order: here pid order
    /// would make it a second rank 1 and the profile would fail.
    #[test]
    fn a_rank_without_its_environment_takes_the_free_number() {
        let lib = "libmpich.so.12";
        let cap = capture(
            &[(lib, "MPI_Barrier", false)],
            &[(10, Some(1), Vec::new()), (30, Some(2), Vec::new())],
            &[],
            |b| {
                for (i, pid) in [10, 20, 30].into_iter().enumerate() {
                    let t = 1_000 * (i as u64 + 1);
                    b.entry(pid, 0, t, 0x40, [COMM_WORLD, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
                    b.ret(pid, 0, t + 100);
                }
            },
        );
        let p = extract(&[&cap]).expect("profiles");
        let got: Vec<(u32, u32, RankSource)> = p
            .ranks
            .iter()
            .map(|r| (r.pid, r.rank, r.rank_source))
            .collect();
        assert_eq!(
            got,
            vec![
                (20, 0, RankSource::PidOrder),
                (10, 1, RankSource::Environment),
                (30, 2, RankSource::Environment),
            ]
        );
        // Every report that names ranks says which number is a guess.
        let note = p.rank_numbering_note().expect("a note");
        assert!(
            note.starts_with("rank 0 (pid 20 on ") && note.contains("not by the launcher"),
            "{note}"
        );
        let launched = Profiles {
            ranks: p.ranks[1..].to_vec(),
            ..p
        };
        assert_eq!(launched.rank_numbering_note(), None);
    }

    /// What an overhead budget detached of MPI is told: C functions (calls
    /// missing: no verdict) apart from bindings (call sites only).
    #[test]
    fn mpi_functions_an_overhead_budget_detached_are_told() {
        let probes = [
            ("libmpich.so.12", "MPI_Send", false),
            ("libmpichfort.so.12", "mpi_recv_", true),
            ("libmpich.so.12", "MPI_Recv", false),
        ];
        let with = |dropped: &[(u32, &str, u64)]| {
            let mut cap = capture(&probes, &[], &[], |_| {});
            cap.header.clock.monotonic_ns = 1_000_000_000;
            cap.overhead = Some(tracer_common::capture::Overhead {
                dropped: dropped
                    .iter()
                    .map(|(id, symbol, at_ns)| tracer_common::capture::DroppedProbe {
                        func_id: *id,
                        symbol: symbol.to_string(),
                        at_ns: *at_ns,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            });
            cap
        };
        let none = with(&[]);
        assert_eq!(Detached::of(&[&none]).note(), None);
        let binding = with(&[(1, "mpi_recv_", 1_500_000_000)]);
        let d = Detached::of(&[&binding]);
        assert!(!d.loses_calls());
        let note = d.note().expect("a note");
        assert!(note.contains("language bindings of MPI_Recv"), "{note}");
        let calls = with(&[
            (0, "MPI_Send", 3_500_000_000),
            (1, "mpi_recv_", 1_500_000_000),
        ]);
        let d = Detached::of(&[&binding, &calls]);
        assert!(d.loses_calls());
        let note = d.note().expect("a note");
        assert!(
            note.contains("detached MPI_Send from 2.5 s") && note.contains("no MPI verdict"),
            "{note}"
        );
    }

    /// Rank 1 (by PMI_RANK) makes an MPI_Send with an MPI_Type_size nested
    /// inside (not a call of its own), then an MPI_Recv; rank 0 has no
    /// environment (pid order) and an MPI_Barrier that never returns: no
    /// call, but the open call a hang analysis needs.
    #[test]
    fn extracts_outermost_calls_with_times_and_ranks() {
        let lib = "libmpich.so.12";
        let cap = capture(
            &[
                (lib, "PMPI_Send", false),
                (lib, "MPI_Type_size", false),
                (lib, "MPI_Recv", false),
                (lib, "MPI_Barrier", false),
                (lib, "malloc", false),
            ],
            &[(20, Some(1), Vec::new())],
            &[(10, "S")],
            |b| {
                let send = [0, 1, 0, 0, 0, COMM_WORLD, 0, 0, 0, 0];
                b.entry(20, 0, 1_000, 0x40, send); // MPI_Send(dest 0)
                b.entry(20, 1, 1_100, 0x50, send); //   MPI_Type_size (nested)
                b.ret(20, 1, 1_200);
                b.entry(20, 4, 1_300, 0x60, send); //   malloc (not MPI)
                b.ret(20, 4, 1_400);
                b.ret(20, 0, 1_500);
                b.entry(10, 3, 1_600, 0x70, [COMM_WORLD, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
                let any = (-2i64) as u64;
                b.entry(
                    20,
                    2,
                    4_500,
                    0x80,
                    [0, 1, 0, any, 0, COMM_WORLD, 0, 0, 0, 0],
                );
                b.ret(20, 2, 5_000);
            },
        );
        let p = extract(&[&cap]).expect("profiles");
        assert_eq!(p.ranks.len(), 2);
        let r = &p.ranks[1];
        assert_eq!(
            (r.rank, r.rank_source, r.size),
            (1, RankSource::Environment, Some(2))
        );
        assert_eq!(
            (r.host.as_str(), r.pid, r.cpus.as_slice()),
            ("node7", 20, &[1][..])
        );
        let got: Vec<(&str, Peer, u64, u64, u64)> = r
            .calls
            .iter()
            .map(|c| {
                (
                    r.function_name(c),
                    c.peer,
                    c.compute_ns,
                    c.comm_ns,
                    c.call_site,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("MPI_Send", Peer::Rank(0), 0, 500, 0x40),
                ("MPI_Recv", Peer::AnySource, 3_000, 500, 0x80),
            ]
        );
        assert_eq!((r.open.as_ref(), r.unfinished, r.last_ns), (None, 0, 5_000));
        assert_eq!(
            (r.end_ns, r.idle_ns(), r.state.as_deref()),
            (10_000, 5_000, None)
        );
        // Rank 0 (pid order) is inside its barrier, sleeping.
        let r0 = &p.ranks[0];
        assert_eq!((r0.rank, r0.rank_source), (0, RankSource::PidOrder));
        assert!(r0.calls.is_empty());
        let open = r0.open.as_ref().expect("open barrier");
        assert_eq!(
            (open.function.as_str(), open.start_ns, open.call_site),
            ("MPI_Barrier", 1_600, 0x70)
        );
        assert_eq!(
            open.partners,
            Partners::Collective {
                comm: Some(COMM_WORLD as u32),
                root: None,
                request: None
            }
        );
        assert_eq!((r0.unfinished, r0.state.as_deref()), (1, Some("S")));
    }

    /// Fortran: `mpi_sendrecv_` (entry only, in the binding library) calls
    /// MPI_Sendrecv and a helper. The call is one, from the binding's call
    /// site in the program, starting at the binding's entry, with the
    /// source read from the stack. A C call from the program itself (not
    /// from the binding library) keeps its own site. A process that exited
    /// says when.
    #[test]
    fn binding_calls_take_the_programs_call_site() {
        let (lib, fort) = ("/lib/libmpich.so.12", "/lib/libmpichfort.so.12");
        let maps = vec![
            MapEntry {
                start: 0x7000_0000,
                end: 0x7010_0000,
                path: fort.into(),
                ..Default::default()
            },
            MapEntry {
                start: 0x7100_0000,
                end: 0x7110_0000,
                path: lib.into(),
                ..Default::default()
            },
        ];
        let cap = capture(
            &[
                (lib, "PMPI_Sendrecv", false),
                (lib, "PMPI_Type_free", false),
                (fort, "mpi_sendrecv_", true),
                (fort, "mpi_barrier_", true),
                (lib, "MPI_Barrier", false),
            ],
            &[(30, Some(0), maps)],
            &[],
            |b| {
                // sendrecv(dest 1, source 3) from the program at 0x401234.
                b.mark(30, 2, 1_000, 0x40_1234);
                let sr = [0, 1, 0, 1, 5, 0x10, 1, 0, 3, 6];
                b.entry(30, 0, 1_100, 0x7000_0040, sr);
                b.ret(30, 0, 1_900);
                b.entry(30, 1, 1_950, 0x7000_0048, sr); // helper, same binding call
                b.ret(30, 1, 2_000);
                // The program's own C code calls MPI_Barrier directly.
                b.entry(
                    30,
                    4,
                    3_000,
                    0x40_2000,
                    [COMM_WORLD, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                );
                b.ret(30, 4, 3_500);
                // Fortran barrier, still open when the process exits.
                b.mark(30, 3, 4_000, 0x40_1300);
                b.entry(
                    30,
                    4,
                    4_100,
                    0x7000_0090,
                    [COMM_WORLD, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                );
                b.exit(30, 6_000);
            },
        );
        let p = extract(&[&cap]).expect("profiles");
        let r = &p.ranks[0];
        let got: Vec<(&str, u64, u64, u64)> = r
            .calls
            .iter()
            .map(|c| (r.function_name(c), c.start_ns, c.comm_ns, c.call_site))
            .collect();
        assert_eq!(
            got,
            vec![
                ("MPI_Sendrecv", 1_000, 1_000, 0x40_1234),
                ("MPI_Barrier", 3_000, 500, 0x40_2000),
            ]
        );
        assert_eq!(r.calls[0].peer, Peer::Rank(1));
        assert_eq!(
            r.calls[0].partners,
            Partners::PointToPoint {
                dest: Some(1),
                source: Some(3)
            }
        );
        let open = r.open.as_ref().expect("open barrier");
        assert_eq!(
            (open.function.as_str(), open.start_ns, open.call_site),
            ("MPI_Barrier", 4_000, 0x40_1300)
        );
        assert_eq!((r.exited_ns, r.last_ns), (Some(6_000), 4_100));
    }
}
