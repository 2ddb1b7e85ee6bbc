//! Per-task semi-Markov models (004 §2): states are MPI call contexts
//! (function + call site) and the computation regions between consecutive
//! calls; an edge (s, d) carries the transition probability P(d | s) and a
//! normal fit of the time spent in s before moving to d, kept separately
//! for communication (time inside a call) and computation (time between
//! calls).
//!
//! States are interned once per run in a [`StateTable`] and edges are keyed
//! by a pair of `u32` ids, so comparing two tasks' edges is an integer
//! comparison (the paper's "unique references instead of strings").

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::hang::Tail;
use crate::{
    decode::Capture,
    mpi::{Profiles, sites::Sites},
};

/// Version of the [`Models`] serde layout.
pub const SMM_VERSION: u32 = 1;

/// A state id in the run's [`StateTable`].
pub type StateId = u32;

/// An edge key: `(source << 32) | destination`, so sorted keys group
/// outgoing edges by source.
pub type EdgeKey = u64;

/// The key of edge (`src`, `dst`).
pub fn edge_key(src: StateId, dst: StateId) -> EdgeKey {
    (u64::from(src) << 32) | u64::from(dst)
}

/// Source and destination of `key`.
pub fn edge_ends(key: EdgeKey) -> (StateId, StateId) {
    ((key >> 32) as StateId, key as StateId)
}

/// What a state stands for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum State {
    /// Before a task's first MPI call (or the start of a phase).
    Start,
    /// Inside an MPI call made from a call site.
    Call {
        /// `MPI_*` name.
        function: String,
        /// The call site: `main (app.c:42)` with debug information,
        /// `main+0x1c` with symbols only, `app+0x11c9` without; empty when
        /// the capture has no call sites.
        site: String,
    },
    /// Computation between the return of call context `after` and the entry
    /// of call context `before` (state ids of [`State::Call`]s).
    Compute {
        /// The call that returned.
        after: StateId,
        /// The call that was entered next.
        before: StateId,
    },
    /// After a task's last call (or the end of a phase).
    End,
}

/// Every state of a run, interned: ids are indexes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StateTable {
    /// States by id.
    pub states: Vec<State>,
    #[serde(skip)]
    ids: HashMap<State, StateId>,
}

impl StateTable {
    /// The id of `state`, adding it when new.
    pub fn intern(&mut self, state: State) -> StateId {
        if self.ids.len() != self.states.len() {
            // Deserialized: rebuild the index.
            self.ids = self
                .states
                .iter()
                .enumerate()
                .map(|(i, s)| (s.clone(), i as StateId))
                .collect();
        }
        if let Some(id) = self.ids.get(&state) {
            return *id;
        }
        let id = self.states.len() as StateId;
        self.states.push(state.clone());
        self.ids.insert(state, id);
        id
    }

    /// A short human label: `MPI_Send@main+0x1c`, `compute(MPI_Recv@.. -> MPI_Send@..)`.
    pub fn label(&self, id: StateId) -> String {
        match self.states.get(id as usize) {
            None => format!("state {id}"),
            Some(State::Start) => "START".into(),
            Some(State::End) => "END".into(),
            Some(State::Call { function, site }) if site.is_empty() => function.clone(),
            Some(State::Call { function, site }) => format!("{function}@{site}"),
            Some(State::Compute { after, before }) => {
                format!("compute[{} -> {}]", self.label(*after), self.label(*before))
            }
        }
    }

    /// Whether `id` is a computation region.
    pub fn is_compute(&self, id: StateId) -> bool {
        matches!(self.states.get(id as usize), Some(State::Compute { .. }))
    }
}

/// A normal fit of a time (ns). Both zero means "no time of this kind".
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Normal {
    /// Mean (ns).
    pub mean: f64,
    /// Standard deviation (ns).
    pub sd: f64,
}

impl Normal {
    /// The sum of two independent normals as the paper adds them (§3.2):
    /// means add and standard deviations add (an upper bound of the true
    /// sqrt(sd1² + sd2²), kept for fidelity).
    pub fn plus(self, other: Normal) -> Normal {
        Normal {
            mean: self.mean + other.mean,
            sd: self.sd + other.sd,
        }
    }

    /// Whether this is the empty distribution (no time of this kind).
    pub fn is_none(&self) -> bool {
        self.mean == 0.0 && self.sd == 0.0
    }
}

/// One edge of a model.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Edge {
    /// [`edge_key`] of (source, destination).
    pub key: EdgeKey,
    /// Transitions observed.
    pub count: u64,
    /// P(destination | source).
    pub prob: f64,
    /// Time in MPI calls.
    pub comm: Normal,
    /// Time computing between MPI calls.
    pub comp: Normal,
}

/// The semi-Markov model of one task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskModel {
    /// MPI rank.
    pub rank: u32,
    /// Host the rank ran on.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Edges sorted by key.
    pub edges: Vec<Edge>,
}

impl TaskModel {
    /// The edge with `key`.
    pub fn edge(&self, key: EdgeKey) -> Option<&Edge> {
        self.edges
            .binary_search_by_key(&key, |e| e.key)
            .ok()
            .map(|i| &self.edges[i])
    }
}

/// The models of every task of a run, with their shared state table.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Models {
    /// [`SMM_VERSION`].
    pub version: u32,
    /// States of all tasks.
    pub states: StateTable,
    /// One model per task, ascending rank.
    pub tasks: Vec<TaskModel>,
}

/// Which part of a run a model covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Phase {
    /// Everything.
    #[default]
    Whole,
    /// Calls that entered within [from, to) ns after the run's first call.
    Window {
        /// Start (ns since the run's first call).
        from_ns: u64,
        /// End (ns since the run's first call).
        to_ns: u64,
    },
    /// Each task's calls number `from..to` (0-based, in entry order): an
    /// iteration range when the loop makes a fixed number of calls.
    Calls {
        /// First call.
        from: usize,
        /// One past the last call.
        to: usize,
    },
}

/// Running sums of a time.
#[derive(Clone, Copy, Default)]
struct Sums {
    n: u64,
    sum: f64,
    sq: f64,
}

impl Sums {
    fn add(&mut self, x: f64) {
        self.n += 1;
        self.sum += x;
        self.sq += x * x;
    }

    fn normal(&self) -> Normal {
        if self.n == 0 {
            return Normal::default();
        }
        let n = self.n as f64;
        let mean = self.sum / n;
        let var = if self.n > 1 {
            ((self.sq - n * mean * mean) / (n - 1.0)).max(0.0)
        } else {
            0.0
        };
        Normal {
            mean,
            sd: var.sqrt(),
        }
    }
}

/// One step of a task's trajectory: entering `to` after spending `comm_ns`
/// in an MPI call or `comp_ns` computing in the source state.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    /// Source state.
    pub from: StateId,
    /// Destination state.
    pub to: StateId,
    /// Time in the source state when it is a call.
    pub comm_ns: u64,
    /// Time in the source state when it is a computation region.
    pub comp_ns: u64,
}

/// Fits a model to a task's trajectory.
pub fn fit(rank: u32, host: &str, pid: u32, steps: &[Step]) -> TaskModel {
    let mut per_edge: HashMap<EdgeKey, (Sums, Sums)> = HashMap::new();
    let mut out_of: HashMap<StateId, u64> = HashMap::new();
    for s in steps {
        let e = per_edge.entry(edge_key(s.from, s.to)).or_default();
        e.0.add(s.comm_ns as f64);
        e.1.add(s.comp_ns as f64);
        *out_of.entry(s.from).or_default() += 1;
    }
    let mut edges: Vec<Edge> = per_edge
        .into_iter()
        .map(|(key, (comm, comp))| {
            let total = out_of.get(&edge_ends(key).0).copied().unwrap_or(1).max(1);
            let none_if_zero = |n: Normal| if n.mean == 0.0 { Normal::default() } else { n };
            Edge {
                key,
                count: comm.n,
                prob: comm.n as f64 / total as f64,
                comm: none_if_zero(comm.normal()),
                comp: none_if_zero(comp.normal()),
            }
        })
        .collect();
    edges.sort_unstable_by_key(|e| e.key);
    TaskModel {
        rank,
        host: host.to_string(),
        pid,
        edges,
    }
}

/// Builds the run's models from MPI profiles, optionally symbolizing call
/// sites with the captures the profiles came from (matched by host and
/// pid); without captures a state is the MPI function alone, and a call
/// site that does not resolve is said unplaced (see [`Sites::label`]).
pub fn build(profiles: &Profiles, captures: &[&Capture], phase: Phase) -> Models {
    build_with_tails(profiles, captures, phase, None)
}

/// [`build`], ending each task with where it was when the capture ended
/// (hang analysis, see [`super::hang`]): still inside a call (an edge from
/// that call to END carrying the time spent in it so far) or computing
/// since its last call returned (a computation region before END).
pub fn build_with_tails(
    profiles: &Profiles,
    captures: &[&Capture],
    phase: Phase,
    tails: Option<&HashMap<(String, u32), Tail>>,
) -> Models {
    let mut sites = Sites::new(captures);
    let t0 = profiles
        .ranks
        .iter()
        .filter_map(|r| r.calls.first().map(|c| c.start_ns))
        .min()
        .unwrap_or(0);
    let mut states = StateTable::default();
    let start = states.intern(State::Start);
    let end = states.intern(State::End);
    let mut tasks = Vec::with_capacity(profiles.ranks.len());
    for r in &profiles.ranks {
        let calls: Vec<_> = r
            .calls
            .iter()
            .enumerate()
            .filter(|(i, c)| match phase {
                Phase::Whole => true,
                Phase::Window { from_ns, to_ns } => {
                    let t = c.start_ns.saturating_sub(t0);
                    t >= from_ns && t < to_ns
                }
                Phase::Calls { from, to } => *i >= from && *i < to,
            })
            .map(|(_, c)| c)
            .collect();
        let mut steps = Vec::with_capacity(2 * calls.len() + 1);
        let mut prev = start;
        // Without captures no site is wanted: the function alone.
        let mut site_of = |addr: u64| {
            if captures.is_empty() {
                String::new()
            } else {
                sites.label(&r.host, r.pid, addr)
            }
        };
        // (function, call site) → state, per rank: the strings of a state
        // are built and interned once, not once per call.
        let mut call_states = rustc_hash::FxHashMap::default();
        for (i, c) in calls.iter().enumerate() {
            let call = *call_states
                .entry((c.function, c.call_site))
                .or_insert_with(|| {
                    states.intern(State::Call {
                        function: r.function_name(c).to_string(),
                        site: site_of(c.call_site),
                    })
                });
            if i == 0 {
                steps.push(Step {
                    from: prev,
                    to: call,
                    comm_ns: 0,
                    comp_ns: c.compute_ns,
                });
            } else {
                let comp = states.intern(State::Compute {
                    after: prev,
                    before: call,
                });
                let before = calls[i - 1];
                steps.push(Step {
                    from: prev,
                    to: comp,
                    comm_ns: before.comm_ns,
                    comp_ns: 0,
                });
                steps.push(Step {
                    from: comp,
                    to: call,
                    comm_ns: 0,
                    comp_ns: c.compute_ns,
                });
            }
            prev = call;
        }
        let tail = tails.and_then(|t| t.get(&(r.host.clone(), r.pid)));
        match (calls.last(), tail) {
            (Some(last), None) => steps.push(Step {
                from: prev,
                to: end,
                comm_ns: last.comm_ns,
                comp_ns: 0,
            }),
            (last, Some(tail)) => {
                let last_end = last.map_or(tail.last_ns, |c| c.start_ns + c.comm_ns);
                let (next, comp_ns, stuck) = match &tail.open_call {
                    Some((function, addr, entry)) => (
                        states.intern(State::Call {
                            function: function.clone(),
                            site: site_of(*addr),
                        }),
                        entry.saturating_sub(last_end),
                        Some(tail.end_ns.saturating_sub(*entry)),
                    ),
                    None => (end, tail.end_ns.saturating_sub(last_end), None),
                };
                let comp = states.intern(State::Compute {
                    after: prev,
                    before: next,
                });
                steps.push(Step {
                    from: prev,
                    to: comp,
                    comm_ns: last.map_or(0, |c| c.comm_ns),
                    comp_ns: 0,
                });
                steps.push(Step {
                    from: comp,
                    to: next,
                    comm_ns: 0,
                    comp_ns,
                });
                if let Some(comm_ns) = stuck {
                    steps.push(Step {
                        from: next,
                        to: end,
                        comm_ns,
                        comp_ns: 0,
                    });
                }
            }
            (None, None) => {}
        }
        tasks.push(fit(r.rank, &r.host, r.pid, &steps));
    }
    Models {
        version: SMM_VERSION,
        states,
        tasks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpi::{Call, Peer, RankProfile, RankSource};

    fn profile(rank: u32, calls: &[(&str, u64, u64)]) -> RankProfile {
        let functions: Vec<String> = calls.iter().map(|c| c.0.to_string()).collect();
        let mut t = 0;
        RankProfile {
            rank,
            rank_source: RankSource::Environment,
            size: None,
            host: "h".into(),
            pid: 100 + rank,
            comm: "app".into(),
            cpus: vec![0],
            functions: functions.clone(),
            calls: calls
                .iter()
                .enumerate()
                .map(|(i, (_, comp, comm))| {
                    t += comp;
                    let c = Call {
                        function: functions.iter().position(|f| f == calls[i].0).unwrap_or(0)
                            as u16,
                        peer: Peer::None,
                        compute_ns: *comp,
                        comm_ns: *comm,
                        start_ns: t,
                        cpu: 0,
                        tid: 0,
                        call_site: 0,
                        partners: Default::default(),
                    };
                    t += comm;
                    c
                })
                .collect(),
            unfinished: 0,
            open: None,
            last_ns: 0,
            exited_ns: None,
            state: None,
            end_ns: 0,
            cpu: Vec::new(),
        }
    }

    /// Send, Recv, Send, Recv: Send→compute→Recv twice, Recv→compute→Send
    /// once, the last Recv to END; probabilities and times per edge.
    #[test]
    fn edges_carry_probabilities_and_separate_times() {
        let p = Profiles {
            version: 1,
            ranks: vec![profile(
                0,
                &[
                    ("MPI_Send", 0, 10),
                    ("MPI_Recv", 100, 20),
                    ("MPI_Send", 300, 30),
                    ("MPI_Recv", 100, 40),
                ],
            )],
        };
        let m = build(&p, &[], Phase::Whole);
        let st = &m.states;
        let t = &m.tasks[0];
        let id = |s: State| st.ids[&s];
        let call = |f: &str| {
            id(State::Call {
                function: f.into(),
                site: String::new(),
            })
        };
        let (send, recv) = (call("MPI_Send"), call("MPI_Recv"));
        let c_sr = id(State::Compute {
            after: send,
            before: recv,
        });
        let e = t.edge(edge_key(send, c_sr)).expect("send -> compute");
        assert_eq!((e.count, e.prob), (2, 1.0));
        assert_eq!(e.comm.mean, 20.0);
        assert!(e.comp.is_none());
        let e = t.edge(edge_key(c_sr, recv)).expect("compute -> recv");
        assert_eq!(e.comp.mean, 100.0);
        assert_eq!(e.comp.sd, 0.0);
        // Recv is left twice: once to compute, once to END.
        let e = t.edge(edge_key(recv, id(State::End))).expect("recv -> end");
        assert_eq!((e.prob, e.comm.mean), (0.5, 40.0));
        // Phase: only the first two calls.
        let m2 = build(&p, &[], Phase::Calls { from: 0, to: 2 });
        assert_eq!(m2.tasks[0].edges.len(), 4);
    }

    /// Hang analysis: a task stuck computing since its last call ends with
    /// a computation region carrying the time so far; one stuck inside a
    /// call ends with that call carrying it.
    #[test]
    fn tails_end_tasks_where_they_were() {
        let p = Profiles {
            version: 1,
            ranks: vec![
                profile(0, &[("MPI_Send", 0, 10), ("MPI_Recv", 100, 20)]),
                profile(1, &[("MPI_Send", 0, 10), ("MPI_Recv", 100, 20)]),
            ],
        };
        let tail = |pid: u32, open_call| Tail {
            host: "h".into(),
            pid,
            last_ns: 130,
            open_call,
            end_ns: 5_000,
        };
        let mut tails = HashMap::new();
        tails.insert(("h".to_string(), 100), tail(100, None));
        tails.insert(
            ("h".to_string(), 101),
            tail(101, Some(("MPI_Barrier".to_string(), 0, 1_000))),
        );
        let m = build_with_tails(&p, &[], Phase::Whole, Some(&tails));
        let st = &m.states;
        let id = |s: State| st.ids[&s];
        let call = |f: &str| {
            id(State::Call {
                function: f.into(),
                site: String::new(),
            })
        };
        let end = id(State::End);
        let (recv, barrier) = (call("MPI_Recv"), call("MPI_Barrier"));
        // Rank 0 computed from the Recv's return (130) to the end (5000).
        let computing = id(State::Compute {
            after: recv,
            before: end,
        });
        let e = m.tasks[0]
            .edge(edge_key(computing, end))
            .expect("pending compute");
        assert_eq!(e.comp.mean, 4_870.0);
        // Rank 1 entered MPI_Barrier at 1000 and is still inside it.
        let e = m.tasks[1]
            .edge(edge_key(barrier, end))
            .expect("pending call");
        assert_eq!(e.comm.mean, 4_000.0);
        let waiting = id(State::Compute {
            after: recv,
            before: barrier,
        });
        assert_eq!(
            m.tasks[1]
                .edge(edge_key(waiting, barrier))
                .map(|e| e.comp.mean),
            Some(870.0)
        );
    }
}
