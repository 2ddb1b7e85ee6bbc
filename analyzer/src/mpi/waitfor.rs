//! Hangs: who the blocked ranks wait for, and who holds everyone up.
//!
//! A run is hung when a rank still alive has made no MPI transition for
//! longer than a threshold (given, learned from normal runs as the paper's
//! "maximum transition time" (004 §4.2), or this run's own: ten times its
//! 99th-percentile transition, at least one second). Each rank is then one
//! of:
//! * finished (exited after `MPI_Finalize` returned), dead (exited
//!   otherwise), stopped by a signal, computing (alive, not inside MPI),
//! * or blocked inside an MPI call, waiting for the ranks its arguments
//!   name: a receive's source (all others for `MPI_ANY_SOURCE`), a blocking
//!   send's destination, the members of a collective's communicator that
//!   are not inside the same collective, or the partners of the
//!   nonblocking calls a wait completes (matched by the address of their
//!   request handles).
//!
//! The culprits are the ranks the blocked ones wait for, directly or
//! through others, that wait for nobody themselves: dead, stopped or
//! computing. When every rank is blocked inside MPI (a deadlock), the
//! culprits are the ranks in a collective that fewer members entered than
//! any other collective on that communicator (an extra or a missing
//! collective), else the ranks of the wait cycle.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{
    args::{MPI_ANY_SOURCE, MPI_COMM_WORLD, MPI_PROC_NULL, Partners},
    profile::{Profiles, RankProfile},
    verdict::{Suspect, Verdict},
};

/// Version of the [`HangReport`] serde layout.
pub const HANG_VERSION: u32 = 1;

/// A hang threshold below this is raised to it: scheduling and page faults
/// alone make sub-second pauses.
pub const MIN_HANG_NS: u64 = 1_000_000_000;

/// What a rank was doing when the capture ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RankState {
    /// Exited after its `MPI_Finalize` returned.
    Finished,
    /// Exited without finishing (no `MPI_Finalize`, or inside an MPI call).
    Dead {
        /// When (CLOCK_MONOTONIC ns).
        at_ns: u64,
    },
    /// Stopped by a signal (`SIGSTOP`, `SIGTSTP`), in or out of MPI.
    Stopped,
    /// Alive and not inside MPI: computing, or stuck outside MPI.
    Computing,
    /// Inside an MPI call, waiting for other ranks.
    Blocked,
    /// Inside an MPI call that waits for no other rank.
    InMpi,
}

/// One rank's place in the wait-for graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankWait {
    /// MPI rank.
    pub rank: u32,
    /// Host.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// What it was doing.
    pub state: RankState,
    /// The call it is inside (`MPI_*`), if any.
    pub call: Option<String>,
    /// That call's site (a runtime address; see [`super::Call::call_site`]),
    /// or, when not inside MPI, the site of its last call.
    pub call_site: u64,
    /// Ranks it waits for.
    pub waits_for: Vec<u32>,
    /// Time since its last MPI transition when the capture ended (ns).
    pub idle_ns: u64,
}

/// A rank that holds the others up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Culprit {
    /// MPI rank.
    pub rank: u32,
    /// Why it is one, in words.
    pub reason: String,
    /// Ranks waiting for it, directly or through others.
    pub blocking: Vec<u32>,
}

/// The hang analysis of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HangReport {
    /// [`HANG_VERSION`].
    pub version: u32,
    /// Idle time over which a rank counts as hung (ns).
    pub threshold_ns: u64,
    /// Where the threshold came from (`given`, `learned`, `this run`).
    pub threshold_source: String,
    /// Whether the run was hung when the capture ended.
    pub hung: bool,
    /// Every rank, by rank.
    pub ranks: Vec<RankWait>,
    /// The ranks that hold the others up (empty when not hung).
    pub culprits: Vec<Culprit>,
}

impl HangReport {
    /// The entry of `rank`.
    pub fn rank(&self, rank: u32) -> Option<&RankWait> {
        self.ranks.iter().find(|r| r.rank == rank)
    }

    /// The report as a verdict (analysis `hang`): the culprits, scored by
    /// how long the run had been idle against the threshold.
    pub fn verdict(&self, profiles: &Profiles) -> Verdict {
        let suspects = self
            .culprits
            .iter()
            .filter_map(|c| {
                let w = self.rank(c.rank)?;
                Some(Suspect {
                    rank: c.rank,
                    host: w.host.clone(),
                    pid: w.pid,
                    cpus: profiles
                        .rank(c.rank)
                        .map(|p| p.cpus.clone())
                        .unwrap_or_default(),
                    score: w.idle_ns as f64 / 1e9,
                    threshold: self.threshold_ns as f64 / 1e9,
                    evidence: "hang culprit".into(),
                    detail: c.reason.clone(),
                })
            })
            .collect();
        let mut v = Verdict::new(
            "hang",
            suspects,
            Vec::new(),
            self.ranks.iter().map(|r| r.rank).collect(),
            "the MPI progress of",
        );
        if self.hung && self.culprits.is_empty() {
            v.summary = "hung, culprit not found".into();
        }
        v
    }
}

/// The longest transition (computation or communication time of one call)
/// of normal runs: a threshold learned from them (004 §4.2).
pub fn max_transition_ns(profiles: &Profiles) -> u64 {
    profiles
        .ranks
        .iter()
        .flat_map(|r| &r.calls)
        .map(|c| c.compute_ns.max(c.comm_ns))
        .max()
        .unwrap_or(0)
}

/// This run's own threshold: ten times its 99th-percentile transition
/// (leaving out `MPI_Init` and `MPI_Finalize`, which take long once), at
/// least [`MIN_HANG_NS`].
pub fn own_threshold_ns(profiles: &Profiles) -> u64 {
    let mut t: Vec<u64> = profiles
        .ranks
        .iter()
        .flat_map(|r| {
            r.calls.iter().filter(|c| {
                !matches!(
                    r.function_name(c),
                    "MPI_Init" | "MPI_Init_thread" | "MPI_Finalize"
                )
            })
        })
        .map(|c| c.compute_ns.max(c.comm_ns))
        .collect();
    if t.is_empty() {
        return MIN_HANG_NS;
    }
    let i = (t.len() * 99 / 100).min(t.len() - 1);
    let (_, p99, _) = t.select_nth_unstable(i);
    (p99.saturating_mul(10)).max(MIN_HANG_NS)
}

/// Members of communicator `comm`: every rank for `MPI_COMM_WORLD`; for
/// others, the ranks that ever named it (handles of derived communicators
/// are what MPICH gives each member, so this is a best effort).
fn members(profiles: &Profiles, comm: Option<u32>) -> BTreeSet<u32> {
    match comm {
        None | Some(MPI_COMM_WORLD) => profiles.ranks.iter().map(|r| r.rank).collect(),
        Some(c) => profiles
            .ranks
            .iter()
            .filter(|r| {
                r.calls.iter().any(
                    |call| matches!(call.partners, Partners::Collective { comm: Some(x), .. } if x == c),
                ) || r.open.as_ref().is_some_and(
                    |o| matches!(o.partners, Partners::Collective { comm: Some(x), .. } if x == c),
                )
            })
            .map(|r| r.rank)
            .collect(),
    }
}

/// The partners of the nonblocking calls whose requests a wait on
/// `count` handles from address `requests` completes: for each handle
/// address, the latest call that posted it.
fn posted_partners(r: &RankProfile, requests: Option<u64>, count: u32) -> Option<BTreeSet<i32>> {
    let lo = requests?;
    let hi = lo.checked_add(4 * u64::from(count.max(1)))?;
    let mut latest: BTreeMap<u64, (Option<i32>, Option<i32>)> = BTreeMap::new();
    for c in &r.calls {
        match c.partners {
            Partners::Post {
                dest,
                source,
                request: Some(addr),
            } if addr >= lo && addr < hi => {
                latest.insert(addr, (dest, source));
            }
            Partners::Collective {
                request: Some(addr),
                ..
            } if addr >= lo && addr < hi => {
                // A nonblocking collective: waits for every member.
                latest.insert(addr, (Some(MPI_ANY_SOURCE), None));
            }
            _ => {}
        }
    }
    if latest.is_empty() {
        return None;
    }
    Some(
        latest
            .values()
            .flat_map(|(d, s)| [*d, *s])
            .flatten()
            .collect(),
    )
}

/// Ranks `peer` stands for: itself, every other rank for any-source,
/// nobody for `MPI_PROC_NULL`.
fn expand(peer: i32, me: u32, all: &BTreeSet<u32>) -> Vec<u32> {
    match peer {
        MPI_ANY_SOURCE => all.iter().copied().filter(|r| *r != me).collect(),
        MPI_PROC_NULL => Vec::new(),
        p if p >= 0 && all.contains(&(p as u32)) => vec![p as u32],
        _ => Vec::new(),
    }
}

/// The key of a collective a rank is inside: (communicator, function).
fn collective_of(r: &RankProfile) -> Option<(Option<u32>, &str)> {
    let o = r.open.as_ref()?;
    match o.partners {
        Partners::Collective {
            comm,
            request: None,
            ..
        } => Some((comm, o.function.as_str())),
        _ => None,
    }
}

/// Analyses where the run stood when its capture ended. `threshold` is
/// (ns, source); `None` uses this run's own ([`own_threshold_ns`]). Call
/// sites are told apart by their offset in their page (the same for every
/// process of an executable whatever its load address); [`analyze_sited`]
/// compares them by name.
pub fn analyze(profiles: &Profiles, threshold: Option<(u64, &str)>) -> HangReport {
    analyze_sited(profiles, threshold, &mut |_, addr| {
        format!("{:#x}", addr & 0xfff)
    })
}

/// [`analyze`], with call sites named by `site` (e.g.
/// [`super::sites::Sites::label`]).
pub fn analyze_sited(
    profiles: &Profiles,
    threshold: Option<(u64, &str)>,
    site: &mut dyn FnMut(&RankProfile, u64) -> String,
) -> HangReport {
    let (threshold_ns, threshold_source) = match threshold {
        Some((t, s)) => (t.max(1), s.to_string()),
        None => (own_threshold_ns(profiles), "this run".to_string()),
    };
    let all: BTreeSet<u32> = profiles.ranks.iter().map(|r| r.rank).collect();
    let by_rank: BTreeMap<u32, &RankProfile> = profiles.ranks.iter().map(|r| (r.rank, r)).collect();
    let mut ranks = Vec::new();
    for r in &profiles.ranks {
        let last_function = r.calls.last().map(|c| r.function_name(c));
        let finished = r.open.is_none() && last_function == Some("MPI_Finalize");
        let stopped = r.state.as_deref().is_some_and(|s| s == "T" || s == "t");
        let state = match (r.exited_ns, &r.open) {
            (Some(_), None) if finished => RankState::Finished,
            (Some(at_ns), _) => RankState::Dead { at_ns },
            _ if stopped => RankState::Stopped,
            (None, None) => RankState::Computing,
            (None, Some(_)) => RankState::InMpi,
        };
        let mut waits_for = BTreeSet::new();
        if state == RankState::InMpi
            && let Some(o) = &r.open
        {
            match o.partners {
                Partners::PointToPoint { dest, source } => {
                    for p in [dest, source].into_iter().flatten() {
                        waits_for.extend(expand(p, r.rank, &all));
                    }
                }
                Partners::Collective { comm, .. } => {
                    for m in members(profiles, comm) {
                        // Members inside the same collective are no reason
                        // to wait; any other member is.
                        let same = by_rank.get(&m).and_then(|p| collective_of(p))
                            == Some((comm, o.function.as_str()));
                        if m != r.rank && !same {
                            waits_for.insert(m);
                        }
                    }
                }
                Partners::Completion { requests, count } => {
                    match posted_partners(r, requests, count) {
                        Some(peers) => {
                            for p in peers {
                                waits_for.extend(expand(p, r.rank, &all));
                            }
                        }
                        // Requests not matched (a capture without stack
                        // arguments): any other rank may be the one.
                        None => waits_for.extend(all.iter().copied().filter(|x| *x != r.rank)),
                    }
                }
                Partners::Post { .. } | Partners::None => {}
            }
        }
        let state = if state == RankState::InMpi && !waits_for.is_empty() {
            RankState::Blocked
        } else {
            state
        };
        ranks.push(RankWait {
            rank: r.rank,
            host: r.host.clone(),
            pid: r.pid,
            call: r.open.as_ref().map(|o| o.function.clone()),
            call_site: r
                .open
                .as_ref()
                .map(|o| o.call_site)
                .or_else(|| r.calls.last().map(|c| c.call_site))
                .unwrap_or(0),
            state,
            waits_for: waits_for.into_iter().collect(),
            idle_ns: r.idle_ns(),
        });
    }
    let hung = ranks.iter().any(|w| {
        !matches!(w.state, RankState::Finished | RankState::Dead { .. }) && w.idle_ns > threshold_ns
    });
    let culprits = if hung {
        culprits(&ranks, profiles, site)
    } else {
        Vec::new()
    };
    HangReport {
        version: HANG_VERSION,
        threshold_ns,
        threshold_source,
        hung,
        ranks,
        culprits,
    }
}

/// Ranks that reach `target` through waits-for edges.
fn waiting_on(ranks: &[RankWait], target: u32) -> Vec<u32> {
    let mut found: BTreeSet<u32> = BTreeSet::new();
    let mut frontier = vec![target];
    while let Some(t) = frontier.pop() {
        for w in ranks {
            if w.rank != target && w.waits_for.contains(&t) && found.insert(w.rank) {
                frontier.push(w.rank);
            }
        }
    }
    found.into_iter().collect()
}

fn describe(w: &RankWait, r: &RankProfile) -> String {
    let s = |ns: u64| ns as f64 / 1e9;
    let since = |at: u64| s(at.saturating_sub(r.calls.first().map_or(at, |c| c.start_ns)));
    match &w.state {
        RankState::Finished => {
            "finished (its MPI_Finalize returned) while others still wait for it".to_string()
        }
        RankState::Dead { at_ns } => match &w.call {
            Some(c) => format!("exited inside {c} at {:.2} s", since(*at_ns)),
            None => format!(
                "exited at {:.2} s without MPI_Finalize (its last call: {})",
                since(*at_ns),
                r.calls.last().map_or("none", |c| r.function_name(c))
            ),
        },
        RankState::Stopped => match &w.call {
            Some(c) => format!("stopped by a signal inside {c}"),
            None => "stopped by a signal, outside MPI".to_string(),
        },
        RankState::Computing => format!(
            "not inside MPI for {:.1} s: computing since its {} returned",
            s(w.idle_ns),
            r.calls.last().map_or("start", |c| r.function_name(c))
        ),
        _ => match &w.call {
            Some(c) => format!("inside {c}, waiting for ranks {:?}", w.waits_for),
            None => "waiting".to_string(),
        },
    }
}

fn culprits(
    ranks: &[RankWait],
    profiles: &Profiles,
    site: &mut dyn FnMut(&RankProfile, u64) -> String,
) -> Vec<Culprit> {
    let profile = |rank: u32| profiles.ranks.iter().find(|r| r.rank == rank);
    // Ranks waited for that wait for nobody: dead, stopped, computing.
    let mut out: Vec<Culprit> = ranks
        .iter()
        .filter(|w| {
            matches!(
                w.state,
                RankState::Finished
                    | RankState::Dead { .. }
                    | RankState::Stopped
                    | RankState::Computing
            )
        })
        .filter_map(|w| {
            let blocking = waiting_on(ranks, w.rank);
            // A finished-looking rank that nobody waits for is no culprit;
            // a stopped one is, even if nobody waits for it yet.
            if blocking.is_empty() && w.state != RankState::Stopped {
                return None;
            }
            Some(Culprit {
                rank: w.rank,
                reason: describe(w, profile(w.rank)?),
                blocking,
            })
        })
        .collect();
    if !out.is_empty() {
        return out;
    }
    // A deadlock inside MPI. Collectives first: on each communicator, the
    // collective fewer members entered than another; then, when the same
    // collective is entered from different call sites (an extra barrier
    // that matched the program's last one), the site fewer members entered
    // it from.
    // How many calls of each function each rank completed (counted once:
    // looked up per waiting rank and collective), and all ranks together.
    let counts: Vec<(u32, BTreeMap<String, usize>)> = profiles
        .ranks
        .iter()
        .map(|r| (r.rank, r.call_counts()))
        .collect();
    let done = |rank: u32, f: &str| -> usize {
        counts
            .iter()
            .find(|(r, _)| *r == rank)
            .and_then(|(_, c)| c.get(f))
            .copied()
            .unwrap_or(0)
    };
    let completed = |f: &str| -> usize { counts.iter().filter_map(|(_, c)| c.get(f)).sum() };
    for by_site in [false, true] {
        let mut by_coll: BTreeMap<(Option<u32>, String), Vec<u32>> = BTreeMap::new();
        for w in ranks {
            if let Some(p) = profile(w.rank)
                && let Some((comm, f)) = collective_of(p)
            {
                // Another rank already went through this call of `f` (the
                // same count of it completed before, and this one): it is
                // the program's, and this rank waits in it for a rank that
                // is elsewhere, not an extra one (issue 17: a worker's
                // extra barrier left a peer in the program's MPI_Reduce,
                // which the others had already passed).
                let mine = done(w.rank, f);
                if counts
                    .iter()
                    .any(|(o, c)| *o != w.rank && c.get(f).copied().unwrap_or(0) > mine)
                {
                    continue;
                }
                let name = if by_site {
                    format!("{f} at {}", site(p, w.call_site))
                } else {
                    f.to_string()
                };
                by_coll
                    .entry((comm.or(Some(MPI_COMM_WORLD)), name))
                    .or_default()
                    .push(w.rank);
            }
        }
        let mut comms: BTreeMap<Option<u32>, Vec<(&String, &Vec<u32>)>> = BTreeMap::new();
        for ((comm, f), members) in &by_coll {
            comms.entry(*comm).or_default().push((f, members));
        }
        for groups in comms.values() {
            if groups.len() < 2 {
                continue;
            }
            // How often the collective's function was completed before: the
            // one a run makes every iteration is no surprise, an extra one is.
            let function = |name: &str| name.split(" at ").next().unwrap_or(name).to_string();
            // The odd group: the fewest members, then the least usual call.
            let key = |g: &(&String, &Vec<u32>)| (g.1.len(), completed(&function(g.0)));
            let mut ordered: Vec<&(&String, &Vec<u32>)> = groups.iter().collect();
            ordered.sort_by_key(|g| key(g));
            let mut odd = ordered[0];
            if key(odd) == key(ordered[1]) {
                // Two call sites alike: the one a rank entered first, by
                // more than a second (the others blocked after it; issue
                // 17: a worker's extra barrier 1.2 s before its peer's
                // program barrier). Otherwise no verdict from collectives.
                let first = |g: &(&String, &Vec<u32>)| {
                    g.1.iter()
                        .filter_map(|r| ranks.iter().find(|w| w.rank == *r))
                        .map(|w| w.idle_ns)
                        .max()
                        .unwrap_or(0)
                };
                let mut tied: Vec<&(&String, &Vec<u32>)> = ordered
                    .iter()
                    .copied()
                    .filter(|g| key(g) == key(odd))
                    .collect();
                tied.sort_by_key(|g| std::cmp::Reverse(first(g)));
                if !by_site || first(tied[0]) <= first(tied[1]).saturating_add(MIN_HANG_NS) {
                    continue;
                }
                odd = tied[0];
            }
            let others: Vec<&str> = ordered
                .iter()
                .filter(|g| g.0 != odd.0)
                .map(|g| g.0.as_str())
                .collect();
            for &rank in odd.1 {
                out.push(Culprit {
                    rank,
                    reason: format!(
                        "inside {}, a collective the other members did not enter (they are in {}){}",
                        odd.0,
                        others.join(", "),
                        if completed(&function(odd.0)) == 0 {
                            "; no rank completed one before"
                        } else {
                            ""
                        }
                    ),
                    blocking: waiting_on(ranks, rank),
                });
            }
        }
        if !out.is_empty() {
            return out;
        }
    }
    let mut by_coll: BTreeMap<(Option<u32>, String), Vec<u32>> = BTreeMap::new();
    for w in ranks {
        if let Some(p) = profile(w.rank)
            && let Some((comm, f)) = collective_of(p)
        {
            by_coll
                .entry((comm.or(Some(MPI_COMM_WORLD)), f.to_string()))
                .or_default()
                .push(w.rank);
        }
    }
    // A collective only some ranks are in, while the rest wait elsewhere.
    if out.is_empty() {
        for ((_, f), members) in &by_coll {
            let blocking: Vec<u32> = members
                .iter()
                .flat_map(|m| waiting_on(ranks, *m))
                .filter(|r| !members.contains(r))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            if members.len() < ranks.len() && !blocking.is_empty() && by_coll.len() == 1 {
                for &rank in members {
                    out.push(Culprit {
                        rank,
                        reason: format!(
                            "inside {f}, which the ranks waiting for it have not entered"
                        ),
                        blocking: blocking.clone(),
                    });
                }
            }
        }
    }
    if !out.is_empty() {
        return out;
    }
    // Point-to-point cycles: every rank on one is a culprit.
    let blocked: Vec<&RankWait> = ranks
        .iter()
        .filter(|w| w.state == RankState::Blocked)
        .collect();
    for w in &blocked {
        let reach = waiting_on(ranks, w.rank);
        if reach.contains(&w.rank) || w.waits_for.iter().any(|t| reach.contains(t)) {
            out.push(Culprit {
                rank: w.rank,
                reason: format!(
                    "in a wait cycle: {}",
                    describe(
                        w,
                        match profile(w.rank) {
                            Some(p) => p,
                            None => continue,
                        }
                    )
                ),
                blocking: reach,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpi::{
        Call, OpenCall, Peer, RankSource,
        args::{MPI_COMM_WORLD, Partners},
    };

    const W: Option<u32> = Some(MPI_COMM_WORLD);

    fn call(f: u16, partners: Partners, start: u64) -> Call {
        Call {
            function: f,
            peer: Peer::None,
            compute_ns: 1_000_000,
            comm_ns: 1_000_000,
            start_ns: start,
            cpu: 0,
            tid: 1,
            call_site: 0x1000 + u64::from(f),
            partners,
        }
    }

    const FUNCTIONS: [&str; 6] = [
        "MPI_Sendrecv",
        "MPI_Allreduce",
        "MPI_Barrier",
        "MPI_Irecv",
        "MPI_Waitall",
        "MPI_Finalize",
    ];

    /// A rank that made a few calls then sits in `open` (or computes, with
    /// `None`), last active at 1 s, the capture ending at 10 s.
    fn rank(r: u32, open: Option<(&str, Partners)>) -> RankProfile {
        RankProfile {
            rank: r,
            rank_source: RankSource::Environment,
            size: Some(4),
            host: "h".into(),
            pid: 100 + r,
            comm: "app".into(),
            cpus: vec![0],
            functions: FUNCTIONS.iter().map(|s| s.to_string()).collect(),
            calls: vec![
                call(
                    0,
                    Partners::PointToPoint {
                        dest: Some(1),
                        source: Some(1),
                    },
                    0,
                ),
                call(
                    1,
                    Partners::Collective {
                        comm: W,
                        root: None,
                        request: None,
                    },
                    1_000_000_000,
                ),
            ],
            unfinished: u64::from(open.is_some()),
            open: open.map(|(f, partners)| OpenCall {
                function: f.into(),
                peer: Peer::None,
                partners,
                call_site: 0x2000,
                start_ns: 1_000_000_000,
                tid: 1,
            }),
            last_ns: 1_000_000_000,
            exited_ns: None,
            state: Some("R".into()),
            end_ns: 10_000_000_000,
            cpu: Vec::new(),
        }
    }

    fn recv_from(s: i32) -> Option<(&'static str, Partners)> {
        Some((
            "MPI_Sendrecv",
            Partners::PointToPoint {
                dest: Some(s),
                source: Some(s),
            },
        ))
    }

    fn coll(f: &'static str) -> Option<(&'static str, Partners)> {
        Some((
            f,
            Partners::Collective {
                comm: W,
                root: None,
                request: None,
            },
        ))
    }

    fn run(ranks: Vec<RankProfile>) -> HangReport {
        analyze(&Profiles { version: 2, ranks }, None)
    }

    fn culprit_ranks(h: &HangReport) -> Vec<u32> {
        h.culprits.iter().map(|c| c.rank).collect()
    }

    /// Rank 2 computes forever: 1 and 3 wait for it in receives, 0 waits
    /// in the reduction for everyone. Only 2 is the culprit.
    #[test]
    fn a_rank_stuck_computing_is_the_culprit() {
        let h = run(vec![
            rank(0, coll("MPI_Allreduce")),
            rank(1, recv_from(2)),
            rank(2, None),
            rank(3, recv_from(2)),
        ]);
        assert!(h.hung);
        assert_eq!(culprit_ranks(&h), vec![2]);
        assert_eq!(h.culprits[0].blocking, vec![0, 1, 3]);
        assert_eq!(h.rank(2).map(|w| &w.state), Some(&RankState::Computing));
        assert_eq!(h.rank(0).map(|w| w.waits_for.clone()), Some(vec![1, 2, 3]));
        let p = Profiles {
            version: 2,
            ranks: vec![rank(2, None)],
        };
        let v = h.verdict(&p);
        assert_eq!(v.suspect_ranks(), vec![2]);
        assert_eq!(v.analysis, "hang");
    }

    /// Rank 1 exited without finalizing: its neighbours wait for it.
    #[test]
    fn a_dead_peer_is_the_culprit() {
        let mut dead = rank(1, None);
        dead.exited_ns = Some(2_000_000_000);
        let h = run(vec![
            rank(0, recv_from(1)),
            dead,
            rank(2, recv_from(1)),
            rank(3, recv_from(2)),
        ]);
        assert_eq!(culprit_ranks(&h), vec![1]);
        assert_eq!(h.culprits[0].blocking, vec![0, 2, 3]);
        assert!(h.culprits[0].reason.contains("without MPI_Finalize"));
    }

    /// Rank 3 made an extra barrier: the others are in the reduction (or
    /// wait for 3 in receives). The odd collective names it.
    #[test]
    fn an_extra_collective_is_the_culprit() {
        let h = run(vec![
            rank(0, coll("MPI_Allreduce")),
            rank(1, coll("MPI_Allreduce")),
            rank(2, recv_from(3)),
            rank(3, coll("MPI_Barrier")),
        ]);
        assert_eq!(culprit_ranks(&h), vec![3]);
        assert!(h.culprits[0].reason.contains("MPI_Barrier"));
    }

    /// One rank in an extra barrier, one in the reduction every iteration
    /// makes, the others waiting in receives: equal groups, and the barrier
    /// no rank ever completed is the odd one.
    #[test]
    fn an_extra_collective_beside_one_other_is_the_culprit() {
        let h = run(vec![
            rank(0, coll("MPI_Allreduce")),
            rank(1, coll("MPI_Barrier")),
            rank(2, recv_from(1)),
            rank(3, recv_from(2)),
        ]);
        assert_eq!(culprit_ranks(&h), vec![1]);
        assert!(
            h.culprits[0]
                .reason
                .contains("no rank completed one before")
        );
    }

    /// An extra barrier that matched the final barrier of the ranks that
    /// were done: one collective, two call sites; the site fewer ranks
    /// entered from is the odd one.
    #[test]
    fn an_extra_collective_matching_the_last_one_is_the_culprit() {
        let at = |r: u32, site: u64| {
            let mut p = rank(r, coll("MPI_Barrier"));
            if let Some(o) = &mut p.open {
                o.call_site = site;
            }
            p
        };
        let h = run(vec![
            rank(0, recv_from(MPI_ANY_SOURCE)),
            at(1, 0x5111),
            at(2, 0x6222),
            at(3, 0x7222),
        ]);
        assert_eq!(culprit_ranks(&h), vec![1]);
        assert!(h.culprits[0].reason.contains("MPI_Barrier at"));
    }

    /// A worker's extra barrier (rank 3, entered at 1 s) held up the
    /// program's end: rank 2 waits in the program's reduce, which rank 1
    /// already passed before entering the program's barrier 1.5 s later.
    /// The reduce is no extra collective (another rank went through it),
    /// and of the two barrier sites the one entered first is the culprit.
    #[test]
    fn an_extra_barrier_before_the_programs_reduce_and_barrier() {
        let later = |mut p: RankProfile| {
            p.last_ns = 2_500_000_000;
            if let Some(o) = &mut p.open {
                o.start_ns = 2_500_000_000;
            }
            p
        };
        let mut passed = later(rank(1, coll("MPI_Barrier")));
        passed.calls.push(call(
            1,
            Partners::Collective {
                comm: W,
                root: None,
                request: None,
            },
            2_000_000_000,
        ));
        if let Some(o) = &mut passed.open {
            o.call_site = 0x5111;
        }
        let mut extra = rank(3, coll("MPI_Barrier"));
        if let Some(o) = &mut extra.open {
            o.call_site = 0x7222;
        }
        let h = run(vec![
            rank(0, recv_from(MPI_ANY_SOURCE)),
            passed,
            later(rank(2, coll("MPI_Allreduce"))),
            extra,
        ]);
        assert_eq!(culprit_ranks(&h), vec![3], "{h:?}");
    }

    /// A stopped rank inside MPI is still the culprit, and a wait on
    /// requests finds the posted receives' sources by address.
    #[test]
    fn a_stopped_rank_and_request_matching() {
        let mut stopped = rank(1, recv_from(0));
        stopped.state = Some("T".into());
        let mut waiting = rank(
            0,
            Some((
                "MPI_Waitall",
                Partners::Completion {
                    requests: Some(0x7f00),
                    count: 2,
                },
            )),
        );
        waiting.calls.push(call(
            3,
            Partners::Post {
                dest: None,
                source: Some(1),
                request: Some(0x7f04),
            },
            900_000_000,
        ));
        let h = run(vec![waiting, stopped, rank(2, coll("MPI_Allreduce"))]);
        assert_eq!(h.rank(0).map(|w| w.waits_for.clone()), Some(vec![1]));
        assert_eq!(culprit_ranks(&h), vec![1]);
        assert!(h.culprits[0].reason.contains("stopped"));
    }

    /// Every rank finished, long before the capture ended: not a hang. A
    /// busy run (last transitions recent) is not one either.
    #[test]
    fn finished_and_busy_runs_are_not_hung() {
        let done = |r| {
            let mut p = rank(r, None);
            p.calls.push(call(
                5,
                Partners::Collective {
                    comm: W,
                    root: None,
                    request: None,
                },
                1_000_000_000,
            ));
            p.exited_ns = Some(1_100_000_000);
            p
        };
        let h = run(vec![done(0), done(1), done(2)]);
        assert!(!h.hung);
        assert!(h.culprits.is_empty());
        assert!(h.ranks.iter().all(|w| w.state == RankState::Finished));
        let mut busy = rank(0, coll("MPI_Allreduce"));
        busy.last_ns = busy.end_ns - 1000;
        let h = run(vec![busy]);
        assert!(!h.hung);
    }

    #[test]
    fn own_threshold_is_ten_p99_transitions_at_least_a_second() {
        let p = Profiles {
            version: 2,
            ranks: vec![rank(0, None)],
        };
        assert_eq!(own_threshold_ns(&p), MIN_HANG_NS);
        assert_eq!(max_transition_ns(&p), 1_000_000);
    }
}
