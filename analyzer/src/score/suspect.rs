//! The suspect score of a unit against its call-tree model.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::{
    decode::Capture,
    model::{CallTreeModel, GlobalModel, GroupModel, NO_UNIT, NormalRange, OTHER_BEHAVIOUR},
    units::{Links, NodeTable, ProcessUnits, Unit, UnitKind},
};

/// Which scoring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Scoring {
    /// 000 eq. 1–2: mean Δ over effective nodes (commonality ∪ minimum difference).
    #[default]
    Nodes,
    /// 001: mean Δ over call edges whose source node is in both trees.
    Edges,
}

/// How a node took part in a score.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DifferenceKind {
    /// In the model and the unit: Δ = 1 − p.
    Common,
    /// Expected by the model but not called: Δ = p.
    Missing,
    /// Called but never seen in the model: Δ = 1.
    Unexpected,
}

/// One node's contribution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    /// Call path, `main > serve@main+0x4f > sys:poll`.
    pub path: String,
    /// How it took part.
    pub kind: DifferenceKind,
    /// Model probability (0 for unexpected nodes).
    pub p: f64,
    /// Its Δ.
    pub delta: f64,
}

/// The score of one unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnitScore {
    /// Host.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// Thread id.
    pub tid: u32,
    /// Unit kind.
    pub kind: UnitKind,
    /// Start, `CLOCK_MONOTONIC` ns.
    pub start_ns: u64,
    /// End, `CLOCK_MONOTONIC` ns.
    pub end_ns: u64,
    /// Start in seconds since the capture began.
    pub t_s: f64,
    /// Start as wall-clock time (UTC, `HH:MM:SS.mmm`).
    pub wall: String,
    /// Start as wall-clock ns since the epoch: orders units of captures
    /// taken on different hosts (as far as their clocks agree).
    #[serde(default)]
    pub wall_ns: u64,
    /// When it deviated, wall-clock ns since the epoch: its first call no
    /// normal unit made, or its outermost call that never returned (a
    /// unit of a thread without an event loop runs for the whole run), or
    /// the caller of a call it skipped; for call paths no normal unit had
    /// together, when they stopped fitting every learned behaviour; its
    /// start otherwise.
    #[serde(default)]
    pub deviated_wall_ns: u64,
    /// When it deviated, in seconds since the capture began.
    #[serde(default)]
    pub deviated_s: f64,
    /// The capture the unit came from.
    pub capture: String,
    /// The role of its thread (the function its first traced call was made
    /// from; see [`crate::units::thread_role`]).
    #[serde(default)]
    pub role: String,
    /// The connection (handler units).
    pub connection: Option<String>,
    /// The peer address, when known.
    pub peer: Option<String>,
    /// Suspect score, 0..1.
    pub score: f64,
    /// The highest score of normal units against the same tree, when the
    /// model is calibrated (see [`super::calibrate`]).
    #[serde(default)]
    pub normal: Option<f64>,
    /// Behaviour no normal run showed: `evidence` says which.
    #[serde(default)]
    pub anomalous: bool,
    /// Why: no group for the process, no model for the unit, or the nodes.
    pub reason: String,
    /// Contributions, largest Δ first (non-zero only).
    pub differences: Vec<Difference>,
    /// Why the unit is anomalous, strongest first; empty when it is not.
    #[serde(default)]
    pub evidence: Vec<Evidence>,
    /// What it did that no learned unit of its tree did, where the tree
    /// was learned from fewer than [`MIN_LEARNED_UNITS`] units: too few to
    /// tell a rare normal path from a fault, so it does not make the unit
    /// anomalous; the report mentions it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsure: Vec<Evidence>,
    /// How the unit's call paths compare with the learned units of its
    /// tree (`None` when there is no tree to compare with).
    #[serde(default)]
    pub behaviour: Option<Seen>,
    /// The call paths the unit still had open when its thread's trace
    /// ended: it never completed. Empty for a completed unit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub open: Vec<String>,
    /// With `open`: the thread exited inside the unit (else the capture
    /// ended while it was inside).
    #[serde(default)]
    pub exited: bool,
    /// Its thread's trace ended inside it while it waited in its event
    /// loop: only the calls it made count, not those missing at its end.
    #[serde(default)]
    pub cut: bool,
    /// Anomalous alike (the same tree, the same evidence) in most processes
    /// of its group: a condition they share (a stalled peer, the end of the
    /// run) more than a fault of this one. Set by [`super::ScoreReport`].
    #[serde(default)]
    pub shared: bool,
    /// The process group of the model the process matched (an index into
    /// its groups): processes of one group run the same code, so the report
    /// compares them with each other.
    #[serde(default)]
    pub group: Option<u32>,
    /// The process at the other end of its connection closed it first, and
    /// this unit's deviation followed (the other end's unit holds
    /// [`Evidence::ClosedFirst`]): a consequence, not where it began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<u32>,
    /// Functions the model learned this unit's tree (or, for a unit with
    /// no tree or a process with no group, the trees and signatures of its
    /// process group, of any group) with that this capture's overhead
    /// budget detached: the unit differs from the learned ones for that
    /// reason alone, so it cannot be compared with them and was not judged
    /// (see [`Detached`]). Only evidence that needs no function probe
    /// counts for it: its process dying ([`Evidence::Died`]), and its never
    /// completing ([`Evidence::Open`]). Empty for a unit judged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_judged: Vec<String>,
}

/// How a unit's call paths compare with the learned units of its tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Seen {
    /// The learned behaviour with exactly this unit's call paths (an index
    /// into the tree's behaviours); `None` when no learned unit had them.
    pub id: Option<u32>,
    /// Learned units with exactly these call paths (0: never).
    pub units: u64,
    /// Learned units of the tree.
    pub learned: u64,
    /// The most units of one learned process with these call paths.
    pub max_per_process: u32,
    /// The largest share of one learned process's units of the tree with
    /// these call paths (see [`crate::model::Behaviour::max_share`]).
    #[serde(default)]
    pub max_share: f64,
    /// False when the tree kept only its most frequent behaviours: then a
    /// behaviour not listed may have been seen.
    pub exhaustive: bool,
    /// For call paths no learned unit had: the learned behaviour that
    /// differs least, and how.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nearest: Option<Nearest>,
    /// What held-out normal units of the tree did (calibrated models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normal: Option<NormalRange>,
}

/// The learned behaviour nearest to a unit's, and what differs (minimum
/// differences: a call whose caller differs too is not listed again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nearest {
    /// Learned units with that behaviour.
    pub units: u64,
    /// Calls it made that this unit did not.
    pub missing: Vec<String>,
    /// Calls this unit made that it did not.
    pub extra: Vec<String>,
}

/// Why a unit is anomalous: behaviour no normal run showed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Evidence {
    /// The process's signature matches no learned process group.
    NoGroup,
    /// No learned unit of the group came from this connection (handlers)
    /// or from threads of this role (other units).
    NoModel {
        /// Learned units of the group.
        learned: u64,
    },
    /// Calls made where no learned unit of the tree made them.
    NewCall {
        /// Their call paths.
        paths: Vec<String>,
        /// Learned units of the tree.
        learned: u64,
    },
    /// Calls not made that every learned unit of the tree made when it
    /// made their caller (p = 1: the missing-call twin of `new_call`).
    Skipped {
        /// Their call paths.
        paths: Vec<String>,
        /// Learned units that made their callers (the fewest of them).
        learned: u64,
    },
    /// Call paths no learned unit of the tree had together, in a tree
    /// whose held-out normal units always had those of some other run.
    NewBehaviour {
        /// Learned units of the tree.
        learned: u64,
    },
    /// The unit never completed, where held-out normal units always did.
    Open {
        /// Call paths still open.
        frames: Vec<String>,
        /// The thread exited inside it (else the capture ended first).
        exited: bool,
        /// The innermost open call is one that receives from a peer in
        /// normal units: the thread most likely waits for another process
        /// (a consequence of that one, not a fault of its own).
        #[serde(default)]
        waiting: bool,
    },
    /// Its call paths are a learned behaviour, but learned units never
    /// had it right after the two units before it on its connection (or
    /// thread), though many followed those two: a request handled by the
    /// wrong branch looks like the right branch's normal units, and only
    /// its place in the sequence is new. Used where held-out normal units
    /// never came out of order (see [`out_of_order`]).
    OutOfOrder {
        /// The two behaviours before it, older first, for people.
        after: Vec<String>,
        /// Its own behaviour, for people.
        this: String,
        /// The behaviour that most often came after those two.
        usual: String,
        /// Learned units that came after those two.
        followed: u64,
    },
    /// Its suspect score is above the tree's normal range by more than
    /// [`NORMAL_MARGIN`].
    AboveRange {
        /// The score.
        score: f64,
        /// The highest held-out normal score.
        normal: f64,
    },
    /// Its process deviated (call paths never learned, or learned ones more
    /// often than any learned process) in this tree again and again, more
    /// than held-out normal processes did, while the other processes of
    /// its group did not.
    Repeated {
        /// Deviating units of this process in the tree.
        units: u32,
        /// The most deviating units of one held-out normal process.
        normal: u32,
        /// Deviating units of each other process of the group, ascending.
        peers: Vec<u32>,
    },
    /// The run stalled (no unit began or ended in any process for longer
    /// than any normal run; see [`super::ScoreReport::judge_quiet`]) with
    /// no unit deviating, and this unit ended a connection before the
    /// stall, the first of the run to: every other process then waited as
    /// in normal runs, for a peer that had left.
    LeftFirst {
        /// How long the run stayed quiet, s.
        quiet_s: f64,
        /// The longest quiet span of the normal runs, s.
        normal_s: f64,
    },
    /// Its process ended by a failure of its own (a non-zero exit status,
    /// or a bad access, an abort, a trap: see
    /// [`tracer_common::record::ExitStatus::is_failure`]) that no learned
    /// process of its group ever ended by. The unit is the one the process
    /// was in when it ended, else the last one it began. Needs no function
    /// probe: a crash shows even where an overhead budget detached the
    /// handlers it crashed in.
    Died {
        /// How it ended (`killed by SIGSEGV (core dumped)`).
        how: String,
        /// When, s since the capture began.
        at_s: f64,
        /// Learned processes of the group (none ended so).
        learned: u32,
    },
    /// Its thread was inside a system call at its end (the recording's
    /// stop, or its process's end right after a signal ended the call), at
    /// a place (the call and its call path, from the thread's stack; see
    /// [`crate::blocked`]) where no thread of a learned process of its
    /// group stood at the end of its capture (`normal_s` `None`), or there
    /// far longer than any did. Needs no function probe: a handler that
    /// hangs shows even where an overhead budget detached it. Waiting far
    /// longer at a learned place, or in a call where threads wait for
    /// other processes (`waiting`), is most likely a consequence of
    /// another process.
    Hung {
        /// Thread id.
        tid: u32,
        /// The call and its call path, innermost first.
        place: String,
        /// How long it had been in the call at the stop, s.
        blocked_s: f64,
        /// It entered the call before the recording started: `blocked_s`
        /// is a lower bound.
        #[serde(default)]
        at_least: bool,
        /// The longest a learned thread had been blocked at this place, s;
        /// `None`: none ever stood there.
        normal_s: Option<f64>,
        /// Learned threads of the group that stood inside a system call
        /// at their capture's end.
        learned: u32,
        /// The call is one in which threads wait for other processes (an
        /// event loop's wait, a receive; see
        /// [`crate::blocked::BlockedThread::waits_for_others`]): most
        /// likely waiting for another that hung.
        #[serde(default)]
        waiting: bool,
        /// A signal ended the call, and its process ended right after
        /// (stopped or killed while it hung), before the recording did.
        #[serde(default)]
        ended_by_signal: bool,
    },
    /// It closed its end of a connection, and the process at the other end
    /// then found the connection ended (end of stream or reset) in a unit
    /// of a tree whose learned units never found it so, and deviated there:
    /// the deviation began at this end (an early close, or a message cut
    /// short). See [`closed_first`].
    ClosedFirst {
        /// The process at the other end.
        peer: u32,
        /// Its command name.
        comm: String,
        /// When it found the connection ended, s since the capture began.
        ended_s: f64,
        /// Learned units of its tree (none found the connection ended).
        learned: u64,
    },
}

impl Evidence {
    /// How strong the evidence is, for ordering a process's units: what
    /// no learned unit did at all first, then what none did together,
    /// then a score or a count above its normal range.
    pub fn strength(&self) -> u8 {
        match self {
            Self::NoGroup | Self::NoModel { .. } => 5,
            Self::Open { waiting: false, .. }
            | Self::Died { .. }
            | Self::Hung {
                normal_s: None,
                waiting: false,
                ..
            } => 4,
            Self::Open { waiting: true, .. } | Self::Hung { .. } => 1,
            Self::NewCall { .. } | Self::Skipped { .. } | Self::ClosedFirst { .. } => 3,
            Self::NewBehaviour { .. } | Self::OutOfOrder { .. } | Self::LeftFirst { .. } => 2,
            Self::Repeated { .. } => 1,
            Self::AboveRange { .. } => 0,
        }
    }
}

/// How far above its tree's normal range a unit must score to be anomalous.
/// The range is the highest score of units held out of models learned from
/// fewer runs, so the same behaviour scores a few hundredths higher or lower
/// against the full model (measured on Hydra: up to 0.033 with 5 runs
/// learned, 0.025 with 8); a call no normal unit makes adds 1/terms, 0.05 or
/// more even in Hydra's large PMI handler tree.
pub const NORMAL_MARGIN: f64 = 0.03;

/// Learned units a tree needs before what none of them did counts as
/// evidence. A path none of n normal units took may still come in up to 3/n
/// of normal units (the rule of three, 95% confidence): below 60 units that
/// is more than 1 unit in 20. A tree stays that small when its units come
/// once per thread (initializers, finalizers) or once per peer (the
/// handler of a listening socket that accepts one connection per peer):
/// running longer does not grow it. A start-up race (a connect retried
/// because the peer was not listening yet) that 8 learned runs (16 units)
/// never showed was the earliest "anomaly" of normal and faulty runs alike
/// in the held-out treeagg; in Hydra, a rare order of mpiexec's start-up
/// calls on its accepting socket (2 units a run, 24 learned) came before
/// the fault in about 1 run in 10 on a loaded machine. A unit that never
/// completed (its thread hung or died in it) is no rare path taken and
/// still counts.
pub const MIN_LEARNED_UNITS: u64 = 60;

/// Where each sequence of units (see [`crate::model::sequences`]) stands
/// while a process's units are read in order: the behaviours of its last
/// two units.
#[derive(Default)]
pub(crate) struct Sequences<'a> {
    last: HashMap<(UnitKind, &'a str, u32, Option<i32>), [u32; 2]>,
}

impl<'a> Sequences<'a> {
    /// The behaviours of the two units before `u` in its sequence.
    pub(crate) fn before(&self, u: &'a Unit) -> [u32; 2] {
        self.last
            .get(&(u.kind, u.model_key(), u.tid, u.fd))
            .copied()
            .unwrap_or([NO_UNIT; 2])
    }

    /// `u` came, with behaviour `id` (`None`: no learned one).
    pub(crate) fn push(&mut self, u: &'a Unit, id: Option<u32>) {
        let before = self.before(u);
        self.last.insert(
            (u.kind, u.model_key(), u.tid, u.fd),
            [before[1], id.unwrap_or(OTHER_BEHAVIOUR)],
        );
    }
}

/// How unlikely an order must be, by chance alone, to count: the
/// probability that the units after a pair of behaviours would all have
/// missed a behaviour as common as this one, were order random. Small,
/// because every unit of a run is tested: a run of 10,000 units should
/// not raise a false alarm in most runs.
pub const ORDER_CHANCE: f64 = 1e-3;

/// Whether unit `u`, of learned behaviour `id`, came out of order: after
/// the behaviours `before`, which learned units followed, none with `id`,
/// so many times that a behaviour as frequent as `id` in the tree would
/// have followed them at least once by chance alone, but for a chance of
/// [`ORDER_CHANCE`] (`(1 − p)^n`, `p` its share of the learned units, `n`
/// the units after the pair), and at least [`MIN_LEARNED_UNITS`] times (a
/// follower that comes after the pair once in 20 may have been missed by
/// fewer: in the held-out treeagg, which child's report completes a round
/// is a race, and a pair 8 learned units followed was no order). In a
/// request mix a rare request's absence after a pair is chance and counts
/// only after many more units; in a protocol that keeps an order it is
/// the order. Returns what usually
/// followed and how many did. A unit cut short, or after a unit no
/// learned one matched, says nothing; nor does a tree whose order is not
/// fully known.
pub(crate) fn out_of_order(
    tree: &CallTreeModel,
    before: [u32; 2],
    id: Option<u32>,
    u: &Unit,
) -> Option<(u32, u64)> {
    let id = id?;
    if u.cut || !u.open.is_empty() || !tree.order_known() || before.contains(&OTHER_BEHAVIOUR) {
        return None;
    }
    let share = tree.behaviours.get(id as usize)?.units as f64 / tree.units.max(1) as f64;
    let f = tree.followed(before, id);
    let by_chance = (1.0 - share).powf(f.units as f64);
    (f.this == 0 && f.units >= MIN_LEARNED_UNITS && by_chance <= ORDER_CHANCE)
        .then(|| (f.usual.unwrap_or(OTHER_BEHAVIOUR), f.units))
}

/// Scores the trial unit `unit` (nodes of `table`) against `model`.
pub fn score_tree(
    model: &CallTreeModel,
    table: &NodeTable,
    unit: &Unit,
    scoring: Scoring,
) -> (f64, Vec<Difference>) {
    // Map trial nodes onto model nodes, parents first.
    let mut order = unit.nodes.clone();
    order.sort_by_key(|n| table.depth(*n));
    let mut mapped: HashMap<u32, Option<u32>> = HashMap::new();
    for &n in &order {
        let parent = table.parent(n);
        let model_parent = if parent == NodeTable::ROOT {
            Some(None)
        } else {
            mapped.get(&parent).map(|m| m.map(Some)).unwrap_or(None)
        };
        let m = model_parent.and_then(|mp| model.find(mp, table.node_key(n)));
        mapped.insert(n, m);
    }
    let covered: HashSet<u32> = mapped.values().filter_map(|m| *m).collect();
    let mut diffs = Vec::new();
    let mut terms = 0usize;
    let mut sum = 0.0;
    // Paths are written only for the differences kept (delta > 0), and at
    // most DISPLAY_FRAMES deep: a unit a million calls deep costs linear
    // time, not one path per node.
    let mut add =
        |diffs: &mut Vec<Difference>, path: &dyn Fn() -> String, kind, p: f64, delta: f64| {
            terms += 1;
            sum += delta;
            if delta > 0.0 {
                diffs.push(Difference {
                    path: path(),
                    kind,
                    p,
                    delta,
                });
            }
        };
    // Trial nodes: common or unexpected.
    for &n in &order {
        let parent = table.parent(n);
        let parent_common =
            parent == NodeTable::ROOT || mapped.get(&parent).is_some_and(Option::is_some);
        match mapped[&n] {
            Some(m) => {
                let p = model.p(m);
                let counted = match scoring {
                    Scoring::Nodes => true,
                    // An edge into a top-level node present in both is no edge.
                    Scoring::Edges => parent != NodeTable::ROOT,
                };
                if counted {
                    add(
                        &mut diffs,
                        &|| table.path_display(n),
                        DifferenceKind::Common,
                        p,
                        1.0 - p,
                    );
                }
            }
            // Minimum difference: only where the parent is common.
            None if parent_common => add(
                &mut diffs,
                &|| table.path_display(n),
                DifferenceKind::Unexpected,
                0.0,
                1.0,
            ),
            None => {}
        }
    }
    // Model nodes not called, under a common parent (or top-level).
    let mut parents: Vec<Option<u32>> = vec![None];
    parents.extend(covered.iter().map(|m| Some(*m)));
    for parent in parents {
        for child in model.children(parent) {
            if !covered.contains(&child) {
                let p = model.p(child);
                add(
                    &mut diffs,
                    &|| model.path_display(child),
                    DifferenceKind::Missing,
                    p,
                    p,
                );
            }
        }
    }
    diffs.retain(|d| d.delta > 0.0);
    diffs.sort_by(|a, b| {
        b.delta
            .total_cmp(&a.delta)
            .then_with(|| a.path.cmp(&b.path))
    });
    let score = if terms == 0 { 0.0 } else { sum / terms as f64 };
    (score, diffs)
}

/// A trial unit's nodes as the tree `model` knows them: the model nodes it
/// covered (ascending), and its nodes the model lacks whose caller it has
/// (the minimum difference: their callees are not listed).
pub(crate) fn model_nodes(
    model: &CallTreeModel,
    table: &NodeTable,
    unit: &Unit,
) -> (Vec<u32>, Vec<u32>) {
    let (pairs, unexpected) = model_pairs(model, table, unit);
    (pairs.into_iter().map(|(id, _)| id).collect(), unexpected)
}

/// As [`model_nodes`], each covered model node with the trial node that
/// covered it (ascending by model node).
fn model_pairs(
    model: &CallTreeModel,
    table: &NodeTable,
    unit: &Unit,
) -> (Vec<(u32, u32)>, Vec<u32>) {
    let mut order = unit.nodes.clone();
    order.sort_by_key(|n| table.depth(*n));
    let mut mapped: HashMap<u32, Option<u32>> = HashMap::with_capacity(order.len());
    let mut pairs = Vec::with_capacity(order.len());
    let mut unexpected = Vec::new();
    for &n in &order {
        let parent = table.parent(n);
        let model_parent = if parent == NodeTable::ROOT {
            Some(None)
        } else {
            mapped.get(&parent).copied().flatten().map(Some)
        };
        let m = model_parent.and_then(|mp| model.find(mp, table.node_key(n)));
        match m {
            Some(id) => pairs.push((id, n)),
            None if model_parent.is_some() => unexpected.push(n),
            None => {}
        }
        mapped.insert(n, m);
    }
    pairs.sort_unstable();
    (pairs, unexpected)
}

/// The learned behaviour of `model` nearest to a unit with model nodes
/// `ids` and unexpected nodes `unexpected` (of `table`): fewest minimum
/// differences, then fewest calls differing in all (a behaviour that lacks
/// one of the unit's callees is nearer than one that lacks their caller
/// with all its callees, though each lacks one minimum difference), then
/// the most frequent.
fn nearest(
    model: &CallTreeModel,
    table: &NodeTable,
    ids: &[u32],
    unexpected: &[u32],
) -> Option<Nearest> {
    // Sorted node lists: membership by binary search.
    let has = |set: &[u32], n: u32| set.binary_search(&n).is_ok();
    let parent_in = |set: &[u32], n: u32| {
        model
            .nodes
            .get(n as usize)
            .and_then(|m| m.parent)
            .is_none_or(|p| has(set, p))
    };
    // An unexpected node's caller, as a model node (`None`: top-level).
    let callers: Vec<(u32, Option<u32>)> = unexpected
        .iter()
        .filter_map(|&n| {
            let parent = table.parent(n);
            if parent == NodeTable::ROOT {
                return Some((n, None));
            }
            model_node(model, table, parent).map(|m| (n, Some(m)))
        })
        .collect();
    let differences = |b: &[u32]| {
        let missing = b
            .iter()
            .filter(|&&n| !has(ids, n) && parent_in(ids, n))
            .count();
        let extra = ids
            .iter()
            .filter(|&&n| !has(b, n) && parent_in(b, n))
            .count();
        let new = callers
            .iter()
            .filter(|(_, c)| c.is_none_or(|c| has(b, c)))
            .count();
        missing + extra + new
    };
    // Both sorted: the size of their symmetric difference.
    let all_differences = |b: &[u32]| {
        let common = b.iter().filter(|&&n| has(ids, n)).count();
        b.len() + ids.len() - 2 * common
    };
    let (_, _, _, i) = model
        .behaviours
        .iter()
        .enumerate()
        .map(|(i, b)| {
            (
                differences(&b.nodes),
                all_differences(&b.nodes),
                std::cmp::Reverse(b.units),
                i,
            )
        })
        .min()?;
    let b = &model.behaviours[i];
    let mut extra: Vec<String> = ids
        .iter()
        .filter(|&&n| !has(&b.nodes, n) && parent_in(&b.nodes, n))
        .map(|&n| model.path_string(n))
        .collect();
    extra.extend(
        callers
            .iter()
            .filter(|(_, c)| c.is_none_or(|c| has(&b.nodes, c)))
            .map(|(n, _)| table.path_string(*n)),
    );
    Some(Nearest {
        units: b.units,
        missing: b
            .nodes
            .iter()
            .filter(|&&n| !has(ids, n) && parent_in(ids, n))
            .map(|&n| model.path_string(n))
            .collect(),
        extra,
    })
}

/// The model node of trial node `node` (of `table`), if the model has
/// its whole path.
fn model_node(model: &CallTreeModel, table: &NodeTable, node: u32) -> Option<u32> {
    // Walk the path from the root: short (call depth).
    let mut path = vec![node];
    let mut at = table.parent(node);
    while at != NodeTable::ROOT {
        path.push(at);
        at = table.parent(at);
    }
    let mut parent = None;
    for n in path.into_iter().rev() {
        parent = Some(model.find(parent, table.node_key(n))?);
    }
    parent
}

/// The functions a capture's overhead budget detached (see
/// [`Capture::budget_dropped`]) that the model was learned with (not in
/// [`GlobalModel::left_out`]), and which parts of the model have them.
///
/// A unit of a tree learned with such a function cannot be compared with
/// the tree: the capture leaves the function out, so the unit lacks its
/// calls and has its callees one level up, which every learned unit of the
/// tree did not, for that reason alone. Projecting the tree onto the
/// functions both have is not sound: its probabilities were averaged per
/// process and its normal ranges calibrated on held-out units that had the
/// function, and neither can be recomputed without the learned captures.
/// So such units are not judged ([`UnitScore::not_judged`]); nor are the
/// units with no tree in a group that has such a function somewhere (the
/// thread roles, connections and the event loop that cut units may have
/// changed with it), nor the units of a process whose signature matches no
/// group where some group has one.
pub struct Detached {
    functions: std::collections::BTreeSet<String>,
    /// Per group: the functions of `functions` in each tree (by kind and
    /// key; trees without any left out), and in the whole group (its
    /// signature, tree keys and trees).
    groups: Vec<(TreeFunctions, Vec<String>)>,
    /// The functions of `functions` in any group.
    any: Vec<String>,
}

impl Detached {
    /// What of `model` the budget of `capture` detached.
    pub fn of(model: &GlobalModel, capture: &Capture) -> Self {
        let functions: std::collections::BTreeSet<String> = capture
            .budget_dropped()
            .difference(&model.left_out)
            .cloned()
            .collect();
        let mut groups = Vec::with_capacity(model.groups.len());
        let mut any = std::collections::BTreeSet::new();
        if !functions.is_empty() {
            for g in &model.groups {
                let mut trees = HashMap::new();
                let mut all = std::collections::BTreeSet::new();
                for path in &g.signature {
                    all.extend(path_functions(path, &functions));
                }
                for kind in UnitKind::ALL {
                    for (key, tree) in g.trees(kind) {
                        let mut here: std::collections::BTreeSet<String> =
                            path_functions(key, &functions).collect();
                        here.extend(
                            tree.nodes
                                .iter()
                                .filter(|n| functions.contains(&n.callee))
                                .map(|n| n.callee.clone()),
                        );
                        if !here.is_empty() {
                            all.extend(here.iter().cloned());
                            trees.insert((kind, key.clone()), here.into_iter().collect());
                        }
                    }
                }
                any.extend(all.iter().cloned());
                groups.push((trees, all.into_iter().collect()));
            }
        }
        Self {
            functions,
            groups,
            any: any.into_iter().collect(),
        }
    }

    /// Whether the capture lacks nothing the model has.
    pub fn is_empty(&self) -> bool {
        self.any.is_empty()
    }

    /// Every function the budget detached that the model was learned
    /// with, whether or not a learned tree has it.
    pub fn functions(&self) -> &std::collections::BTreeSet<String> {
        &self.functions
    }

    /// The functions that keep unit `u` of a process matched to group
    /// `group` (`None`: matched to none) from being judged; empty when it
    /// can be.
    fn unit(&self, group: Option<usize>, has_tree: bool, u: &Unit) -> Vec<String> {
        if self.any.is_empty() {
            return Vec::new();
        }
        match group.and_then(|g| self.groups.get(g)) {
            None => self.any.clone(),
            // A tree learned without them compares like any other.
            Some((trees, _)) if has_tree => trees
                .get(&(u.kind, u.model_key().to_string()))
                .cloned()
                .unwrap_or_default(),
            Some((_, all)) => all.clone(),
        }
    }
}

/// Per tree (kind and key): the detached functions it was learned with.
type TreeFunctions = HashMap<(UnitKind, String), Vec<String>>;

/// The functions of `functions` called along `path` (`a@s > b@s2 > c`).
fn path_functions<'a>(
    path: &'a str,
    functions: &'a std::collections::BTreeSet<String>,
) -> impl Iterator<Item = String> + 'a {
    path.split(" > ").filter_map(move |frame| {
        let callee = frame.split_once('@').map_or(frame, |(callee, _)| callee);
        functions.contains(callee).then(|| callee.to_string())
    })
}

/// Scores every unit of `processes` (decomposed from `capture`) against
/// `model`: 1 for a process with no matching group and for a unit with no
/// matching tree (000 §3.1). Each unit is also matched against the learned
/// behaviours of its tree, and marked anomalous with the evidence for it
/// (see [`Evidence`]; a process's repeated deviations are judged by
/// [`super::ScoreReport`], which sees every process of a group). Ranked by
/// [`rank`].
pub fn score_processes(
    model: &GlobalModel,
    capture: &Capture,
    name: &str,
    processes: &[ProcessUnits],
    scoring: Scoring,
) -> Vec<UnitScore> {
    score_linked_processes(
        model,
        capture,
        &Links::of(capture),
        name,
        processes,
        scoring,
    )
}

/// [`score_processes`] with the capture's connections already paired
/// (callers that also judge a stall with them walk the capture once).
pub fn score_linked_processes(
    model: &GlobalModel,
    capture: &Capture,
    links: &Links,
    name: &str,
    processes: &[ProcessUnits],
    scoring: Scoring,
) -> Vec<UnitScore> {
    let blocked = if model.ends_learned.is_some() {
        crate::blocked::blocked_threads(capture, None)
    } else {
        Vec::new()
    };
    score_with_blocked(model, capture, links, name, processes, scoring, &blocked)
}

/// [`score_linked_processes`] with the capture's blocked threads given
/// ([`crate::blocked::blocked_threads`]): a caller that shows them too
/// reads them from the capture once.
pub fn score_with_blocked(
    model: &GlobalModel,
    capture: &Capture,
    links: &Links,
    name: &str,
    processes: &[ProcessUnits],
    scoring: Scoring,
    blocked: &[crate::blocked::BlockedThread],
) -> Vec<UnitScore> {
    let mut out = Vec::new();
    let detached = Detached::of(model, capture);
    for p in processes {
        let group_index = model.groups.iter().position(|g| g.signature == p.signature);
        let group = group_index.map(|i| &model.groups[i]);
        let first = out.len();
        let mut sequences = Sequences::default();
        for u in &p.units {
            let connection = u.connection.as_ref().map(|c| c.0.to_string());
            let mut evidence = Vec::new();
            let mut unsure = Vec::new();
            let mut behaviour = None;
            let (score, normal, reason, differences) = match group {
                None => {
                    evidence.push(Evidence::NoGroup);
                    (
                        1.0,
                        None,
                        "no process group with this signature in the model".to_string(),
                        Vec::new(),
                    )
                }
                Some(g) => match g.tree(u.kind, u.model_key()) {
                    None => {
                        evidence.push(Evidence::NoModel {
                            learned: UnitKind::ALL
                                .iter()
                                .flat_map(|k| g.trees(*k).values())
                                .map(|t| t.units)
                                .sum(),
                        });
                        (
                            1.0,
                            None,
                            if u.kind == UnitKind::Handler {
                                "no handler model for this connection".to_string()
                            } else {
                                format!(
                                    "no {} model for threads of role '{}'",
                                    u.kind.name(),
                                    u.role
                                )
                            },
                            Vec::new(),
                        )
                    }
                    Some(tree) => {
                        let (s, d) = score_tree(tree, &p.nodes, u, scoring);
                        let normal = tree.normal.map(|n| match scoring {
                            Scoring::Nodes => n.nodes,
                            Scoring::Edges => n.edges,
                        });
                        let seen = match_behaviour(tree, &p.nodes, u);
                        evidence = unit_evidence(tree, &seen, &d, s, normal, u, &p.nodes);
                        let before = sequences.before(u);
                        sequences.push(u, seen.id);
                        if evidence.is_empty()
                            && tree.normal.is_some_and(|n| n.out_of_order == 0)
                            && let Some((usual, followed)) = out_of_order(tree, before, seen.id, u)
                        {
                            evidence.push(Evidence::OutOfOrder {
                                after: before
                                    .iter()
                                    .filter(|b| **b != NO_UNIT)
                                    .map(|b| tree.behaviour_label(*b))
                                    .collect(),
                                this: seen
                                    .id
                                    .map_or_else(String::new, |b| tree.behaviour_label(b)),
                                usual: tree.behaviour_label(usual),
                                followed,
                            });
                        }
                        if tree.units < MIN_LEARNED_UNITS {
                            // A thread that hung or died inside the unit
                            // is no rare path: that stays evidence.
                            (evidence, unsure) = std::mem::take(&mut evidence)
                                .into_iter()
                                .partition(|e| matches!(e, Evidence::Open { .. }));
                        }
                        behaviour = Some(seen);
                        (s, normal, String::new(), d)
                    }
                },
            };
            let not_judged = detached.unit(
                group_index,
                group.is_some_and(|g| g.tree(u.kind, u.model_key()).is_some()),
                u,
            );
            if !not_judged.is_empty() {
                // Only a unit that never completed says something without
                // the detached functions (a process that died is judged
                // below, from its exit).
                evidence.retain(|e| matches!(e, Evidence::Open { .. }));
                unsure.clear();
            }
            let wall_ns = capture.header.clock.to_realtime(u.start_ns);
            let deviated_ns = group
                .and_then(|g| g.tree(u.kind, u.model_key()))
                .map_or(u.start_ns, |tree| {
                    deviated(tree, &p.nodes, u, &evidence, behaviour.as_ref())
                });
            out.push(UnitScore {
                host: p.host.clone(),
                pid: p.pid,
                comm: p.comm.clone(),
                tid: u.tid,
                kind: u.kind,
                start_ns: u.start_ns,
                end_ns: u.end_ns,
                t_s: (u.start_ns as f64 - capture.header.clock.monotonic_ns as f64) / 1e9,
                wall: wall_clock(wall_ns),
                wall_ns,
                deviated_wall_ns: capture.header.clock.to_realtime(deviated_ns),
                deviated_s: (deviated_ns as f64 - capture.header.clock.monotonic_ns as f64) / 1e9,
                capture: name.to_string(),
                role: u.role.to_string(),
                connection,
                peer: u.peer.as_deref().map(str::to_string),
                score,
                normal,
                anomalous: !evidence.is_empty(),
                reason,
                differences,
                evidence,
                unsure,
                behaviour,
                open: u.open.iter().map(|n| p.nodes.path_string(*n)).collect(),
                exited: u.exited,
                cut: u.cut,
                shared: false,
                group: group_index.map(|i| i as u32),
                ended_by: None,
                not_judged,
            });
        }
        if let Some(g) = group {
            died(g, capture, p, &mut out[first..]);
            if model.ends_learned.is_some() {
                hung(g, capture, p, blocked, &mut out[first..]);
            }
        }
    }
    closed_first(model, capture, links, processes, &mut out);
    rank(&mut out);
    out
}

/// Marks the unit process `p` was in when it ended by a failure of its own
/// that no learned process of its group `g` ended by ([`Evidence::Died`]),
/// anomalous from its end on. `out` holds the scores of `p`'s units, in
/// their order. A group whose learned endings are unknown says nothing.
fn died(g: &GroupModel, capture: &Capture, p: &ProcessUnits, out: &mut [UnitScore]) {
    let (Some(failures), Some((at_ns, Some(status)))) = (&g.failures, p.ended) else {
        return;
    };
    let how = status.describe();
    if !status.is_failure() || failures.contains_key(&how) {
        return;
    }
    // The unit it was in, else the last it began before its end.
    let Some(i) = out
        .iter()
        .enumerate()
        .filter(|(_, u)| u.start_ns <= at_ns)
        .max_by_key(|(i, u)| (u.end_ns >= at_ns || !u.open.is_empty(), u.start_ns, *i))
        .map(|(i, _)| i)
    else {
        return;
    };
    let clock = &capture.header.clock;
    let u = &mut out[i];
    if !u.anomalous || u.deviated_wall_ns > clock.to_realtime(at_ns) {
        u.deviated_wall_ns = clock.to_realtime(at_ns);
        u.deviated_s = (at_ns as f64 - clock.monotonic_ns as f64) / 1e9;
    }
    u.evidence.push(Evidence::Died {
        how,
        at_s: (at_ns as f64 - clock.monotonic_ns as f64) / 1e9,
        learned: g.processes,
    });
    u.anomalous = true;
}

/// Shortest time in a system call at the stop that can make a thread hung
/// ([`Evidence::Hung`]): a thread caught in a call for less has not hung
/// by any measure, wherever it is.
pub const HUNG_MIN_NS: u64 = 1_000_000_000;

/// How much longer than any learned thread a thread must have been blocked
/// at a learned place to count: three times as long and a second longer
/// (as [`super::report::STALL_FACTOR`]: a loaded machine stretches every
/// wait alike).
pub const HUNG_FACTOR: f64 = 3.0;

/// Marks the units of process `p` whose threads stood, when the recording
/// stopped, inside a system call where no learned thread of its group `g`
/// stood at its capture's end, or there far longer ([`Evidence::Hung`]),
/// anomalous from the call's entry on. The unit is the thread's own at
/// the stop, else the process's last before it. `blocked` holds the
/// capture's blocked threads; `out` the scores of `p`'s units.
fn hung(
    g: &GroupModel,
    capture: &Capture,
    p: &ProcessUnits,
    blocked: &[crate::blocked::BlockedThread],
    out: &mut [UnitScore],
) {
    let Some(ends) = &g.ends else {
        return;
    };
    let learned: u32 = ends.values().map(|e| e.threads).sum();
    let clock = &capture.header.clock;
    let stop_ns = capture.end.as_ref().map(|e| e.stop_ns);
    // Whether a thread stands where no normal thread did, or far longer:
    // `Some(the normal runs' longest there)`.
    let beyond = |t: &crate::blocked::BlockedThread| -> Option<Option<f64>> {
        let blocked_ns = (t.blocked_s * 1e9) as u64;
        if blocked_ns < HUNG_MIN_NS {
            return None;
        }
        match ends.get(&t.place()) {
            None => Some(None),
            Some(e) => {
                let bound = ((e.max_blocked_ns as f64 * HUNG_FACTOR) as u64)
                    .max(e.max_blocked_ns.saturating_add(HUNG_MIN_NS));
                (blocked_ns > bound).then_some(Some(e.max_blocked_ns as f64 / 1e9))
            }
        }
    };
    // A daemon idle in its event loop, receive or accept when the
    // recording stopped (a user stopped the recorder while it ran) waits
    // there for as long as nobody talks to it: the learned captures, which
    // end with their processes' exit, never show it. Such a wait is
    // evidence only beside a thread of the capture stuck elsewhere (whose
    // victim it may be), or where its process ended right after (a
    // launcher's or watchdog's stop).
    let stuck = blocked
        .iter()
        .any(|t| !t.waits_for_others() && beyond(t).is_some());
    for t in blocked.iter().filter(|t| t.pid == p.pid) {
        let Some(normal_s) = beyond(t) else {
            continue;
        };
        if t.waits_for_others() && !t.ended_by_signal && !stuck {
            continue;
        }
        let since_ns = clock
            .monotonic_ns
            .saturating_add_signed((t.since_s * 1e9) as i64);
        let at = stop_ns.unwrap_or(since_ns);
        let own = unit_at(out, None, p.pid, t.tid, at);
        let i = own.or_else(|| {
            out.iter()
                .enumerate()
                .filter(|(_, u)| u.start_ns <= at)
                .max_by_key(|(i, u)| (u.start_ns, *i))
                .map(|(i, _)| i)
        });
        let Some(i) = i else {
            continue;
        };
        let u = &mut out[i];
        let wall = clock.to_realtime(since_ns);
        if !u.anomalous || u.deviated_wall_ns > wall {
            u.deviated_wall_ns = wall;
            u.deviated_s = t.since_s;
        }
        u.evidence.push(Evidence::Hung {
            tid: t.tid,
            place: t.place(),
            blocked_s: t.blocked_s,
            at_least: t.at_least,
            normal_s,
            learned,
            waiting: t.waits_for_others(),
            ended_by_signal: t.ended_by_signal,
        });
        u.evidence.sort_by_key(|e| std::cmp::Reverse(e.strength()));
        u.anomalous = true;
    }
}

/// Blames an anomaly that followed the end of a connection on the process
/// that ended it. A unit that found its connection ended by the other end
/// (end of stream or reset; [`Unit::peer_ended_ns`]) in a tree where none
/// of at least [`MIN_LEARNED_UNITS`] learned units ever did, and deviated,
/// was made to deviate by that end: in normal runs the other end never
/// closes first. Where the other end is a traced process of the capture
/// ([`Links`]) and its close of the descriptor is recorded, the unit that
/// closed it gets [`Evidence::ClosedFirst`] (anomalous from the close on)
/// and the deviating unit is marked a consequence
/// ([`UnitScore::ended_by`]). A tree whose learned units saw the other end
/// close (a client that leaves at its end) says nothing: what a unit does
/// after a normal end is its own. `out` holds the units of `processes` in
/// their order.
pub(crate) fn closed_first(
    model: &GlobalModel,
    capture: &Capture,
    links: &Links,
    processes: &[ProcessUnits],
    out: &mut [UnitScore],
) {
    if links.is_empty() {
        return;
    }
    let mut k = 0;
    // (closer's unit, time of its close)
    let mut blamed: Vec<(usize, u64)> = Vec::new();
    for p in processes {
        let group = model.groups.iter().find(|g| g.signature == p.signature);
        for u in &p.units {
            let i = k;
            k += 1;
            let (Some(g), Some(ended), Some(fd)) = (group, u.peer_ended_ns, u.fd) else {
                continue;
            };
            if !out.get(i).is_some_and(|s| s.anomalous) || u.kind != UnitKind::Handler {
                continue;
            }
            let Some(tree) = g.tree(u.kind, u.model_key()) else {
                continue;
            };
            if tree.peer_ended != Some(0) || tree.units < MIN_LEARNED_UNITS {
                continue;
            }
            let Some(other) = links.other_end(p.pid, fd, ended) else {
                continue;
            };
            let Some((closed, tid)) = links.closed(&other) else {
                continue;
            };
            if other.pid == p.pid || closed > u.end_ns {
                continue;
            }
            if let Some(j) = unit_at(out, None, other.pid, tid, closed) {
                blamed.push((j, closed));
                out[i].ended_by = Some(other.pid);
                let learned = tree.units;
                let comm = p.comm.clone();
                let ended_s = (ended as f64 - capture.header.clock.monotonic_ns as f64) / 1e9;
                let evidence = Evidence::ClosedFirst {
                    peer: p.pid,
                    comm,
                    ended_s,
                    learned,
                };
                let c = &mut out[j];
                if !c.evidence.contains(&evidence) {
                    c.evidence.push(evidence);
                }
            }
        }
    }
    for (j, closed) in blamed {
        let c = &mut out[j];
        let at = capture.header.clock.to_realtime(closed);
        if !c.anomalous || at < c.deviated_wall_ns {
            c.deviated_wall_ns = at;
            c.deviated_s = (closed as f64 - capture.header.clock.monotonic_ns as f64) / 1e9;
        }
        c.anomalous = true;
        c.evidence.sort_by_key(|e| std::cmp::Reverse(e.strength()));
    }
}

/// The unit of thread `tid` of process `pid` (of `capture`, when given)
/// that holds `CLOCK_MONOTONIC` time `t`, or else the last that began
/// before it (a close between two units belongs to the one before).
pub(crate) fn unit_at(
    units: &[UnitScore],
    capture: Option<&str>,
    pid: u32,
    tid: u32,
    t: u64,
) -> Option<usize> {
    units
        .iter()
        .enumerate()
        .filter(|(_, u)| {
            capture.is_none_or(|c| u.capture == c)
                && u.pid == pid
                && u.tid == tid
                && u.start_ns <= t
        })
        .max_by_key(|(_, u)| (u.end_ns >= t, u.start_ns))
        .map(|(i, _)| i)
}

/// The calls `u` did not make that every learned unit of `tree` made
/// whose caller it made (p = 1, minimum differences), with the fewest
/// learned units that made one of those callers; `None` when there are
/// none.
fn skipped(tree: &CallTreeModel, table: &NodeTable, u: &Unit) -> Option<(Vec<String>, u64)> {
    let (ids, _) = model_nodes(tree, table, u);
    let covered: HashSet<u32> = ids.iter().copied().collect();
    let mut parents: Vec<Option<u32>> = vec![None];
    parents.extend(ids.iter().map(|&m| Some(m)));
    let mut paths = Vec::new();
    let mut learned = u64::MAX;
    for parent in parents {
        let missing: Vec<u32> = tree
            .children(parent)
            .into_iter()
            .filter(|c| !covered.contains(c) && tree.p(*c) >= 1.0 - 1e-9)
            .collect();
        if missing.is_empty() {
            continue;
        }
        // How many learned units made the caller: every unit for a
        // top-level call.
        let callers = match parent {
            None => tree.units,
            Some(p) => tree
                .behaviours
                .iter()
                .filter(|b| b.nodes.binary_search(&p).is_ok())
                .map(|b| b.units)
                .sum::<u64>()
                .max(1),
        };
        learned = learned.min(callers);
        paths.extend(missing.into_iter().map(|c| tree.path_string(c)));
    }
    (!paths.is_empty()).then_some((paths, learned))
}

/// Whether trial node `node` (of `table`), as `tree` knows it, receives
/// from a peer in normal units: it makes a receive system call itself.
fn receives_in_normal_units(tree: &CallTreeModel, table: &NodeTable, node: u32) -> bool {
    let Some(m) = model_node(tree, table, node) else {
        return false;
    };
    tree.children(Some(m)).into_iter().any(|c| {
        matches!(
            tree.nodes[c as usize].callee.as_str(),
            "sys:recvfrom" | "sys:recvmsg" | "sys:recvmmsg" | "sys:read" | "sys:readv"
        )
    })
}

/// When unit `u` deviated as `evidence` says: its first call that no
/// learned unit made there, the outermost call it never returned from, the
/// caller of a call it skipped, whichever came first. Evidence without a
/// moment of its own (a new combination, a score, a count) dates a unit
/// whose call paths no learned unit had together (`seen`) by when they
/// stopped fitting every learned behaviour (see [`combination_deviated`]),
/// any other unit by its start.
fn deviated(
    tree: &CallTreeModel,
    table: &NodeTable,
    u: &Unit,
    evidence: &[Evidence],
    seen: Option<&Seen>,
) -> u64 {
    let mut at: Option<u64> = None;
    let mut earlier = |t: Option<u64>| {
        if let Some(t) = t {
            at = Some(at.map_or(t, |a| a.min(t)));
        }
    };
    for e in evidence {
        match e {
            Evidence::NewCall { .. } => {
                let (_, unexpected) = model_nodes(tree, table, u);
                for n in unexpected {
                    earlier(u.first_time(n));
                }
            }
            Evidence::Open { .. } => earlier(u.open.first().and_then(|n| u.first_time(*n))),
            Evidence::Skipped { paths, .. } => {
                for path in paths {
                    let caller = path.rsplit_once(" > ").and_then(|(caller, _)| {
                        u.nodes
                            .iter()
                            .find(|n| table.path_string(**n) == caller)
                            .and_then(|n| u.first_time(*n))
                    });
                    earlier(caller);
                }
            }
            Evidence::NoGroup | Evidence::NoModel { .. } => earlier(Some(u.start_ns)),
            _ => {}
        }
    }
    at.unwrap_or_else(|| {
        seen.filter(|s| s.id.is_none() && s.exhaustive)
            .map_or(u.start_ns, |_| combination_deviated(tree, table, u))
    })
}

/// When unit `u`, whose call paths no learned unit of `tree` had together,
/// became so: the first call after which no learned behaviour held every
/// call it had made so far; its end when one still held them all (it lacks
/// calls instead, which shows only once it is over). A handler unit of an
/// event loop runs until the next receive on a socket, so one that made a
/// normal request and then only forwarded pipe output until a fault came
/// spans the time before the fault: its start would date it too early.
fn combination_deviated(tree: &CallTreeModel, table: &NodeTable, u: &Unit) -> u64 {
    let (pairs, unexpected) = model_pairs(tree, table, u);
    let time = |n: u32| u.first_time(n).unwrap_or(u.start_ns);
    // A call no learned unit made there fits no behaviour.
    let unfit = unexpected.iter().map(|&n| time(n)).min();
    let mut latest: Option<u64> = None;
    for b in &tree.behaviours {
        // The first call of `u` outside behaviour `b`.
        let outside = pairs
            .iter()
            .filter(|(id, _)| b.nodes.binary_search(id).is_err())
            .map(|&(_, n)| time(n))
            .chain(unfit)
            .min();
        match outside {
            // `b` still holds every call `u` made: it only lacks calls.
            None => return u.end_ns,
            Some(t) => latest = Some(latest.map_or(t, |l| l.max(t))),
        }
    }
    latest.unwrap_or(u.start_ns)
}

/// How unit `u` (nodes of `table`) compares with the behaviours of `tree`.
pub(crate) fn match_behaviour(tree: &CallTreeModel, table: &NodeTable, u: &Unit) -> Seen {
    let (ids, unexpected) = model_nodes(tree, table, u);
    let id = if unexpected.is_empty() {
        tree.behaviour(&ids)
    } else {
        None
    };
    let learned = id.and_then(|i| tree.behaviours.get(i as usize));
    Seen {
        id,
        units: learned.map_or(0, |b| b.units),
        learned: tree.units,
        max_per_process: learned.map_or(0, |b| b.max_per_process),
        max_share: learned.map_or(0.0, |b| b.max_share),
        exhaustive: tree.unlisted == 0,
        nearest: if id.is_none() {
            nearest(tree, table, &ids, &unexpected)
        } else {
            None
        },
        normal: tree.normal,
    }
}

/// The evidence a unit gives by itself against its tree: calls no learned
/// unit made there (an unexpected node counts whatever the score: in a
/// tree that mixes many requests, a unit that closes the connection
/// instead scores only 0.259 against a normal range of 0.375); with a
/// calibrated tree, call paths no learned unit had together where held-out
/// normal units always matched a learned one, a unit that never completed
/// where they all did, and a score above the tree's normal range.
fn unit_evidence(
    tree: &CallTreeModel,
    seen: &Seen,
    differences: &[Difference],
    score: f64,
    normal: Option<f64>,
    u: &Unit,
    table: &NodeTable,
) -> Vec<Evidence> {
    let mut evidence = Vec::new();
    if !u.open.is_empty() && tree.normal.is_some_and(|n| n.open == 0) {
        evidence.push(Evidence::Open {
            frames: u.open.iter().map(|n| table.path_string(*n)).collect(),
            exited: u.exited,
            waiting: u
                .open
                .last()
                .is_some_and(|&n| receives_in_normal_units(tree, table, n)),
        });
    }
    let new: Vec<String> = differences
        .iter()
        .filter(|d| d.kind == DifferenceKind::Unexpected)
        .map(|d| d.path.clone())
        .collect();
    // A unit cut by the end of its thread's trace, or that never
    // completed, lacks what would have followed: only what it called
    // counts (and, for one that never completed, that it did not).
    let truncated = u.cut || !u.open.is_empty();
    let skipped = if truncated {
        None
    } else {
        skipped(tree, table, u)
    };
    if !new.is_empty() {
        evidence.push(Evidence::NewCall {
            paths: new,
            learned: tree.units,
        });
    }
    if let Some((paths, learned)) = skipped {
        evidence.push(Evidence::Skipped { paths, learned });
    }
    if evidence
        .iter()
        .any(|e| matches!(e, Evidence::NewCall { .. } | Evidence::Skipped { .. }))
    {
        // Already says what is new.
    } else if seen.id.is_none()
        && !truncated
        && seen.exhaustive
        && tree.normal.is_some_and(|n| n.novel == 0)
    {
        evidence.push(Evidence::NewBehaviour {
            learned: tree.units,
        });
    }
    if let Some(n) = normal
        && !truncated
        && score > n + NORMAL_MARGIN
    {
        evidence.push(Evidence::AboveRange { score, normal: n });
    }
    evidence
}

/// Orders units most suspect first; on a tie, the earlier first.
pub fn rank(units: &mut [UnitScore]) {
    units.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(a.start_ns.cmp(&b.start_ns))
    });
}

/// `HH:MM:SS.mmm` (UTC) of a wall-clock time in ns since the epoch.
fn wall_clock(ns: u64) -> String {
    let ms = ns / 1_000_000;
    let day_ms = ms % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1000 % 60,
        day_ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{blocked::BlockedThread, units::NodeKey};

    /// Builds a table and one unit from paths of callee names.
    fn unit(table: &mut NodeTable, paths: &[&[&str]]) -> Unit {
        let mut nodes = HashSet::new();
        for path in paths {
            let mut parent = NodeTable::ROOT;
            for name in *path {
                let key = table.key(NodeKey {
                    site: format!("site_of_{name}"),
                    callee: name.to_string(),
                });
                parent = table.child(parent, key);
                nodes.insert(parent);
            }
        }
        let mut nodes: Vec<u32> = nodes.into_iter().collect();
        nodes.sort_unstable();
        Unit {
            first_ns: vec![0; nodes.len()],
            kind: UnitKind::Handler,
            tid: 1,
            start_ns: 0,
            end_ns: 0,
            nodes,
            connection: None,
            fd: None,
            peer: None,
            entries: (0, 0),
            role: "main".into(),
            open: Vec::new(),
            exited: false,
            cut: false,
            peer_ended_ns: None,
        }
    }

    /// A model whose node probabilities are exactly `probs` (path -> p),
    /// learned from 100 units so that every conditional p is exact.
    fn model(probs: &[(&[&str], f64)]) -> CallTreeModel {
        let mut table = NodeTable::default();
        let mut units = Vec::new();
        for i in 0..100 {
            let mut paths: Vec<&[&str]> = Vec::new();
            for (path, _) in probs {
                // Unit i has the node if i < 10 * (product of p along the path).
                let mut q = 1.0;
                for depth in 1..=path.len() {
                    q *= probs
                        .iter()
                        .find(|(p, _)| *p == &path[..depth])
                        .map_or(1.0, |(_, v)| *v);
                }
                if (i as f64) < (q * 100.0).round() {
                    paths.push(path);
                }
            }
            units.push(unit(&mut table, &paths));
        }
        let mut m = CallTreeModel::default();
        let refs: Vec<&Unit> = units.iter().collect();
        m.merge_process(&table, &refs);
        m
    }

    /// 000, Figure 3: a(1.0) with children b(0.9), c(0.8), e(0.3); e has a
    /// child f; the trial unit calls a, b, c and an unknown d (with a child).
    #[test]
    fn paper_000_figure_3_scores_0_32() {
        let m = model(&[
            (&["a"], 1.0),
            (&["a", "b"], 0.9),
            (&["a", "c"], 0.8),
            (&["a", "e"], 0.3),
            (&["a", "e", "f"], 1.0),
        ]);
        let mut table = NodeTable::default();
        let u = unit(&mut table, &[&["a", "b"], &["a", "c"], &["a", "d", "x"]]);
        let (score, diffs) = score_tree(&m, &table, &u, Scoring::Nodes);
        assert!((score - 0.32).abs() < 1e-9, "score {score}: {diffs:?}");
        let kinds: Vec<(&str, DifferenceKind)> = diffs
            .iter()
            .map(|d| (d.path.rsplit("> ").next().unwrap_or(""), d.kind))
            .collect();
        assert!(
            kinds.contains(&("d@site_of_d", DifferenceKind::Unexpected)),
            "{kinds:?}"
        );
        assert!(
            kinds.contains(&("e@site_of_e", DifferenceKind::Missing)),
            "{kinds:?}"
        );
        assert!(
            !diffs
                .iter()
                .any(|d| d.path.ends_with("x@site_of_x") || d.path.ends_with("f@site_of_f")),
            "children of the minimum difference do not count"
        );
    }

    /// 001, Figure 2: a→b 0.9, b→c 0.8, b→d 0.2, a→e 0.3, e→f, e→g; the
    /// trial calls a→b→c only.
    #[test]
    fn paper_001_figure_2_scores_0_2() {
        let m = model(&[
            (&["a"], 1.0),
            (&["a", "b"], 0.9),
            (&["a", "b", "c"], 0.8),
            (&["a", "b", "d"], 0.2),
            (&["a", "e"], 0.3),
            (&["a", "e", "f"], 1.0),
            (&["a", "e", "g"], 1.0),
        ]);
        let mut table = NodeTable::default();
        let u = unit(&mut table, &[&["a", "b", "c"]]);
        let (score, diffs) = score_tree(&m, &table, &u, Scoring::Edges);
        assert!((score - 0.2).abs() < 1e-9, "score {score}: {diffs:?}");
    }

    /// A unit identical to an always-seen model scores 0; one of a model's
    /// calls missing scores its probability share.
    #[test]
    fn identical_units_score_zero() {
        let m = model(&[(&["a"], 1.0), (&["a", "b"], 1.0)]);
        let mut table = NodeTable::default();
        let same = unit(&mut table, &[&["a", "b"]]);
        assert_eq!(score_tree(&m, &table, &same, Scoring::Nodes).0, 0.0);
        assert_eq!(score_tree(&m, &table, &same, Scoring::Edges).0, 0.0);
        let missing = unit(&mut table, &[&["a"]]);
        assert!((score_tree(&m, &table, &missing, Scoring::Nodes).0 - 0.5).abs() < 1e-9);
        assert!((score_tree(&m, &table, &missing, Scoring::Edges).0 - 1.0).abs() < 1e-9);
    }

    /// A process learned with `helper` on connection `conn-a` and without
    /// it on `conn-b`, `n` units each.
    fn learned_process(n: usize) -> ProcessUnits {
        let mut table = NodeTable::default();
        let mut units = Vec::new();
        for i in 0..n {
            let mut a = unit(&mut table, &[&["serve", "helper", "work"]]);
            a.connection = Some(crate::units::ConnectionKey("conn-a".into()));
            a.start_ns = 2 * i as u64;
            let mut b = unit(&mut table, &[&["other", "work2"]]);
            b.connection = Some(crate::units::ConnectionKey("conn-b".into()));
            b.start_ns = 2 * i as u64 + 1;
            units.extend([a, b]);
        }
        ProcessUnits {
            pid: 1,
            comm: "d".into(),
            host: "h".into(),
            signature: vec!["listen@main+0x1".into()],
            nodes: table,
            units,
            ended: None,
        }
    }

    /// A capture whose overhead budget detached `dropped`.
    fn capture_without(dropped: &[&str]) -> Capture {
        Capture {
            header: Default::default(),
            processes: Default::default(),
            objects: Default::default(),
            probes: Vec::new(),
            usdt_probes: Vec::new(),
            kernel_symbols: Vec::new(),
            stats: None,
            end: None,
            overhead: Some(tracer_common::capture::Overhead {
                dropped: dropped
                    .iter()
                    .map(|s| tracer_common::capture::DroppedProbe {
                        symbol: s.to_string(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            chunks: Vec::new(),
            truncated: None,
            left_out: Default::default(),
        }
    }

    fn report_of(
        model: &GlobalModel,
        cap: &Capture,
        trial: &ProcessUnits,
    ) -> super::super::ScoreReport {
        let units = score_linked_processes(
            model,
            cap,
            &Links::of(cap),
            "trial",
            std::slice::from_ref(trial),
            Scoring::Nodes,
        );
        super::super::ScoreReport::new(
            model.variant,
            Scoring::Nodes,
            super::super::Ranking::Evidence,
            &["trial".to_string()],
            units,
        )
    }

    /// Units of a tree learned with a function the capture's budget
    /// detached lack its calls for that reason alone: they are not named
    /// anomalous, and the report says it cannot judge them (issue 19). The
    /// same units in a capture that kept the function are named; units of
    /// a tree learned without it are judged as ever; a unit that never
    /// completed, and a process that died, still count.
    #[test]
    fn units_of_trees_learned_with_a_detached_function_are_not_judged() {
        let mut model = GlobalModel::new(crate::units::Variant::Paper000);
        model.learn(&learned_process(MIN_LEARNED_UNITS as usize + 10));
        for tree in model.groups[0].all_trees_mut() {
            tree.normal = Some(NormalRange {
                units: 100,
                ..Default::default()
            });
        }
        // The trial: conn-a without helper (its calls left out of the
        // capture), as the budget leaves it.
        let mut trial = learned_process(5);
        let mut table = NodeTable::default();
        let mut units = Vec::new();
        for i in 0..5u64 {
            let mut a = unit(&mut table, &[&["serve", "work"]]);
            a.connection = Some(crate::units::ConnectionKey("conn-a".into()));
            a.start_ns = 2 * i;
            let mut b = unit(&mut table, &[&["other", "work2"]]);
            b.connection = Some(crate::units::ConnectionKey("conn-b".into()));
            b.start_ns = 2 * i + 1;
            units.extend([a, b]);
        }
        trial.nodes = table;
        trial.units = units;

        // Kept: the units lacking helper are named.
        let kept = report_of(&model, &capture_without(&[]), &trial);
        assert_eq!(
            kept.verdict,
            super::super::Verdict::Anomalous,
            "{}",
            kept.summary
        );
        assert!(kept.not_judged.is_empty());

        // Detached: not judged, and said so.
        let cap = capture_without(&["helper"]);
        let r = report_of(&model, &cap, &trial);
        assert_eq!(
            r.verdict,
            super::super::Verdict::CannotJudge,
            "{}",
            r.summary
        );
        assert!(
            r.summary.starts_with("cannot judge: 5 of 10 units"),
            "{}",
            r.summary
        );
        assert!(r.suspects.is_empty());
        assert_eq!(r.not_judged.len(), 1);
        let p = &r.not_judged[0];
        assert_eq!((p.pid, p.units, p.of), (1, 5, 10));
        assert_eq!(p.functions, ["helper"]);
        for u in &r.units {
            let a = u.connection.as_deref() == Some("conn-a");
            assert_eq!(u.not_judged.is_empty(), !a, "{u:?}");
            assert!(!u.anomalous, "{u:?}");
        }

        // A function the model was learned without changes nothing.
        model.left_out.insert("helper".into());
        let left_out = report_of(&model, &cap, &trial);
        assert!(left_out.not_judged.is_empty());
        model.left_out.clear();

        // A new call in the tree learned without helper is still judged.
        let mut extra = trial.clone();
        let last = extra.units.len() - 1;
        let mut b = unit(
            &mut extra.nodes,
            &[&["other", "work2"], &["other", "surprise"]],
        );
        b.connection = Some(crate::units::ConnectionKey("conn-b".into()));
        b.start_ns = 100;
        extra.units[last] = b;
        let r = report_of(&model, &cap, &extra);
        assert_eq!(r.verdict, super::super::Verdict::Anomalous, "{}", r.summary);
        let first = r.first().expect("an anomaly");
        assert_eq!(first.connection.as_deref(), Some("conn-b"));
        assert!(r.summary.contains("were not judged"), "{}", r.summary);

        // A unit of conn-a that never completed still counts.
        let mut hung = trial.clone();
        let open = hung.units[0].nodes[0];
        hung.units[0].open = vec![open];
        let r = report_of(&model, &cap, &hung);
        assert_eq!(r.verdict, super::super::Verdict::Anomalous, "{}", r.summary);
        let first = r.first().expect("an anomaly");
        assert!(
            matches!(first.evidence[..], [Evidence::Open { .. }]),
            "{:?}",
            first.evidence
        );

        // So does a process that died as no learned one did.
        let mut died = trial.clone();
        died.ended = Some((
            9,
            Some(tracer_common::record::ExitStatus::Killed {
                signal: 11,
                core: true,
            }),
        ));
        let r = report_of(&model, &cap, &died);
        assert_eq!(r.verdict, super::super::Verdict::Anomalous, "{}", r.summary);
        assert!(
            r.first()
                .is_some_and(|u| matches!(u.evidence[..], [Evidence::Died { .. }])),
            "{r:?}"
        );
    }

    /// A blocked thread of process `pid` (thread 1) at `place` (call first,
    /// then functions innermost first), in it from `since_s` for `blocked_s`.
    fn blocked_at(pid: u32, place: &[&str], since_s: f64, blocked_s: f64) -> BlockedThread {
        crate::blocked::tests::at(pid, place[0], &place[1..], since_s, blocked_s)
    }

    const POLL: &[&str] = &["poll", "poll", "event_loop", "main"];
    const STUCK: &[&str] = &[
        "nanosleep",
        "nanosleep",
        "handle_status",
        "dispatch",
        "main",
    ];

    /// Where threads stood at the end of normal captures is learned; a
    /// thread of a trial blocked at a place no normal capture ended at, for
    /// more than a second, names its process, even when another process
    /// (its victim, waiting in its event loop far longer than normal
    /// threads did) began waiting earlier; short waits anywhere, and normal
    /// waits at the learned place, stay quiet.
    #[test]
    fn a_thread_blocked_where_no_normal_run_ended_is_named_hung() {
        let mut model = GlobalModel::new(crate::units::Variant::Paper000);
        let mut two = learned_process(MIN_LEARNED_UNITS as usize);
        two.pid = 2;
        let learned = [learned_process(MIN_LEARNED_UNITS as usize), two];
        for run in 0..3 {
            for p in &learned {
                model.learn(p);
            }
            let ends = [
                blocked_at(1, POLL, 0.0, 0.05 + 0.01 * f64::from(run)),
                blocked_at(2, POLL, 0.0, 0.08),
            ];
            model.learn_ends(&learned, Some(&ends));
        }
        assert_eq!(model.ends_learned, Some(3));
        let ends = model.groups[0].ends.as_ref().expect("ends learned");
        let place = ends
            .get("poll <- poll <- event_loop <- main")
            .expect("the place");
        assert_eq!((place.threads, place.max_blocked_ns), (6, 80_000_000));

        let mut two = learned_process(5);
        two.pid = 2;
        let trial = [learned_process(5), two];
        let cap = capture_without(&[]);
        let report = |blocked: &[BlockedThread]| {
            let units = score_with_blocked(
                &model,
                &cap,
                &Links::of(&cap),
                "trial",
                &trial,
                Scoring::Nodes,
                blocked,
            );
            super::super::ScoreReport::new(
                model.variant,
                Scoring::Nodes,
                super::super::Ranking::Evidence,
                &["trial".to_string()],
                units,
            )
        };

        // Quiet: waits at the learned place within its bound, and a short
        // one anywhere.
        let r = report(&[
            blocked_at(1, POLL, 9.5, 0.5),
            blocked_at(2, STUCK, 9.4, 0.6),
        ]);
        assert_eq!(
            r.verdict,
            super::super::Verdict::NothingStandsOut,
            "{}",
            r.summary
        );

        // Process 2 hung in handle_status at 7 s; process 1 has waited in
        // its event loop since 5 s, far longer than any normal thread.
        let r = report(&[
            blocked_at(1, POLL, 5.0, 5.0),
            blocked_at(2, STUCK, 7.0, 3.0),
        ]);
        assert_eq!(r.verdict, super::super::Verdict::Anomalous, "{}", r.summary);
        let first = r.first().expect("an anomaly");
        assert_eq!(first.pid, 2, "{r:#?}");
        assert!((first.deviated_s - 7.0).abs() < 1e-6);
        assert!(
            matches!(
                &first.evidence[..],
                [Evidence::Hung { normal_s: None, learned: 6, place, .. }]
                    if place == "nanosleep <- nanosleep <- handle_status <- dispatch <- main"
            ),
            "{:?}",
            first.evidence
        );
        assert_eq!(r.units[0].pid, 2, "the hung process ranks first");
        let victim = r
            .units
            .iter()
            .find(|u| u.pid == 1 && u.anomalous)
            .expect("the victim's wait is evidence too");
        assert!(matches!(
            victim.evidence[..],
            [Evidence::Hung {
                normal_s: Some(_),
                ..
            }]
        ));

        // Nothing learned where these stand (every process ended before
        // its recording did): the hung one still comes first, and the one
        // waiting in a receive, though it began waiting earlier, after.
        const RECV: &[&str] = &["recvfrom", "recvfrom", "recv_msg", "main"];
        let r = report(&[
            blocked_at(1, RECV, 5.0, 5.0),
            blocked_at(2, STUCK, 7.0, 3.0),
        ]);
        assert_eq!(r.first().map(|u| u.pid), Some(2), "{r:#?}");
        // Nor does a main thread joining its workers come first.
        const JOIN: &[&str] = &[
            "futex",
            "__futex_abstimed_wait_common",
            "__pthread_clockjoin_ex",
            "main",
        ];
        let r = report(&[
            blocked_at(1, JOIN, 0.1, 9.9),
            blocked_at(2, STUCK, 7.0, 3.0),
        ]);
        assert_eq!(r.first().map(|u| u.pid), Some(2), "{r:#?}");
        assert!(r.units.iter().any(|u| u.pid == 1
            && matches!(
                u.evidence[..],
                [Evidence::Hung {
                    normal_s: None,
                    waiting: true,
                    ..
                }]
            )));

        // The recording stopped while both daemons idled, waiting for
        // work, longer than any normal thread did and where none ended:
        // that is no hang of either (the learned captures ended with
        // their processes). A launcher that ended them right after such a
        // wait still counts.
        let r = report(&[blocked_at(1, POLL, 5.0, 5.0), blocked_at(2, RECV, 2.0, 8.0)]);
        assert_eq!(
            r.verdict,
            super::super::Verdict::NothingStandsOut,
            "{}",
            r.summary
        );
        let mut ended = blocked_at(2, RECV, 2.0, 8.0);
        ended.ended_by_signal = true;
        let r = report(&[blocked_at(1, POLL, 5.0, 5.0), ended]);
        assert_eq!(r.verdict, super::super::Verdict::Anomalous, "{}", r.summary);
        assert!(
            r.units.iter().filter(|u| u.anomalous).all(|u| u.pid == 2),
            "{r:#?}"
        );

        // A model learned without ends says nothing.
        let mut old = model.clone();
        old.ends_learned = None;
        let units = score_with_blocked(
            &old,
            &cap,
            &Links::of(&cap),
            "trial",
            &trial,
            Scoring::Nodes,
            &[blocked_at(2, STUCK, 7.0, 3.0)],
        );
        assert!(units.iter().all(|u| !u.anomalous));
    }

    /// A process whose signature matches no group is not named for it
    /// where a group's signature has a detached function: without the
    /// function its signature could not match.
    #[test]
    fn a_process_matching_no_group_is_not_judged_when_signatures_lost_a_function() {
        let mut model = GlobalModel::new(crate::units::Variant::Paper000);
        let mut learned = learned_process(MIN_LEARNED_UNITS as usize);
        learned.signature = vec!["setup@main+0x1 > listen@setup+0x2".into()];
        model.learn(&learned);
        let mut trial = learned_process(2);
        trial.signature = vec!["listen@setup+0x2".into()];
        let r = report_of(&model, &capture_without(&["setup"]), &trial);
        assert_eq!(
            r.verdict,
            super::super::Verdict::CannotJudge,
            "{}",
            r.summary
        );
        assert_eq!(r.not_judged[0].functions, ["setup"]);
        let r = report_of(&model, &capture_without(&[]), &trial);
        assert_eq!(r.verdict, super::super::Verdict::Anomalous, "{}", r.summary);
    }
}
