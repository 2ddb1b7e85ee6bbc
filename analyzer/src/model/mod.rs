//! Process and global models (000 §2.3–2.4): per process group (same process
//! signature), one call tree per connection of handler units and, beyond the
//! papers, one per unit kind and thread role of the other units (the papers'
//! daemons had one thread), each node annotated with its coverage
//! probability `p_g = n_g / n_f`.
//!
//! Models are mergeable summaries: a tree keeps, per node, the sum of the
//! probabilities over the process models merged into it and how many were
//! merged, so its value is their mean (000 §2.4), and learning over many
//! captures is a sequence of merges.

mod tree;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
pub use tree::{
    Behaviour, CallTreeModel, Followed, MAX_BEHAVIOURS, MAX_SUCCESSIONS, ModelNode, NO_UNIT,
    NormalRange, OTHER_BEHAVIOUR, Succession, beyond_normal,
};

use crate::units::{ProcessUnits, UnitKind, Variant};

/// Version of the serialized model. 2: initializer, finalizer and pre/post
/// trees per thread role. 3: each tree's behaviours (the call-path sets its
/// units showed, and how often) and their normal ranges. 4: the order of
/// each tree's units ([`Succession`]s); version 3 still reads, without it.
/// 5: how many of each tree's units found their connection ended by the
/// other end ([`CallTreeModel::peer_ended`]); versions 3 and 4 still read,
/// without it. 6: how learned processes failed ([`GroupModel::failures`]);
/// versions 3 to 5 still read, without it. 7: where learned threads stood
/// at the end of their captures ([`GroupModel::ends`]); versions 3 to 6
/// still read, without it. 8: each behaviour's largest share of one
/// learned process's units ([`Behaviour::max_share`]); versions 3 to 7
/// still read, without it (repetition then counts beyond the learned
/// per-process count alone).
pub const MODEL_VERSION: u32 = 8;

/// The oldest model version this build reads.
pub const OLDEST_MODEL_VERSION: u32 = 3;

/// Trees of one unit kind by key: thread role for initializers,
/// finalizers and pre/post-processing, connection for handlers.
pub type Trees = BTreeMap<String, CallTreeModel>;

/// The models of one process group.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupModel {
    /// The process signature shared by the group.
    pub signature: Vec<String>,
    /// Process models merged into this group.
    pub processes: u32,
    /// Example process names (up to 8), for reports.
    pub examples: Vec<String>,
    /// Initializer units, by thread role.
    pub initializer: Trees,
    /// Finalizer units, by thread role.
    pub finalizer: Trees,
    /// Pre-processing units (001 variant), by thread role.
    pub pre_process: Trees,
    /// Post-processing units (001 variant), by thread role.
    pub post_process: Trees,
    /// Handler units by connection key.
    pub handlers: Trees,
    /// How learned processes of the group failed (an exit status or signal
    /// of their own failure, see
    /// [`tracer_common::record::ExitStatus::is_failure`], described, and
    /// how many did): empty when none did. `None` when some learned
    /// process ended without a recorded exit status (older recorders), and
    /// in models learned before it was kept: then an ending says nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<BTreeMap<String, u32>>,
    /// Where the learned processes' threads stood when their captures
    /// ended, inside a system call ([`crate::blocked`]): by place (the call
    /// and its call path, [`crate::blocked::BlockedThread::place`]).
    /// `None` in models learned before it was kept, and when a learned
    /// capture had no blocked stacks (an older recorder): then where a
    /// thread stands at the end says nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends: Option<BTreeMap<String, EndPlace>>,
}

/// A place where threads of learned processes stood at the end of their
/// captures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EndPlace {
    /// Learned threads that stood there.
    pub threads: u32,
    /// The longest any of them had been blocked there, ns (a lower bound
    /// for threads blocked since before their recording).
    pub max_blocked_ns: u64,
}

impl GroupModel {
    /// The trees of units of `kind`.
    pub fn trees(&self, kind: UnitKind) -> &Trees {
        match kind {
            UnitKind::Initializer => &self.initializer,
            UnitKind::Finalizer => &self.finalizer,
            UnitKind::PreProcess => &self.pre_process,
            UnitKind::PostProcess => &self.post_process,
            UnitKind::Handler => &self.handlers,
        }
    }

    /// Mutable [`GroupModel::trees`].
    pub fn trees_mut(&mut self, kind: UnitKind) -> &mut Trees {
        match kind {
            UnitKind::Initializer => &mut self.initializer,
            UnitKind::Finalizer => &mut self.finalizer,
            UnitKind::PreProcess => &mut self.pre_process,
            UnitKind::PostProcess => &mut self.post_process,
            UnitKind::Handler => &mut self.handlers,
        }
    }

    /// Every tree of every kind.
    pub fn all_trees_mut(&mut self) -> impl Iterator<Item = &mut CallTreeModel> {
        [
            &mut self.initializer,
            &mut self.finalizer,
            &mut self.pre_process,
            &mut self.post_process,
            &mut self.handlers,
        ]
        .into_iter()
        .flat_map(|trees| trees.values_mut())
    }

    /// The tree for units of `kind` with `key` ([`crate::units::Unit::model_key`]).
    pub fn tree(&self, kind: UnitKind, key: &str) -> Option<&CallTreeModel> {
        self.trees(kind).get(key).filter(|t| t.models > 0)
    }

    /// Mutable [`GroupModel::tree`].
    pub fn tree_mut(&mut self, kind: UnitKind, key: &str) -> Option<&mut CallTreeModel> {
        self.trees_mut(kind).get_mut(key).filter(|t| t.models > 0)
    }
}

/// A model file's content that scoring cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("group {group}, {kind} tree '{key}': {what}")]
pub struct InvalidModel {
    /// Index of the process group.
    pub group: usize,
    /// Unit kind of the tree.
    pub kind: &'static str,
    /// The tree's key (thread role or connection).
    pub key: String,
    /// What is wrong.
    pub what: String,
}

/// The global model: process groups of every process learned from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GlobalModel {
    /// [`MODEL_VERSION`].
    pub version: u32,
    /// The unit decomposition the model was learned with.
    pub variant: Variant,
    /// Process groups.
    pub groups: Vec<GroupModel>,
    /// Captures learned from.
    pub sources: Vec<String>,
    /// The longest span, ns, in which no unit of any process began or
    /// ended in a learned capture (see [`crate::units::quiet_span`]);
    /// `None` in models learned before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_ns: Option<u64>,
    /// Functions left out of every learned capture because the overhead
    /// budget of one of them detached them (see [`GlobalModel::prepare`]).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub left_out: BTreeSet<String>,
    /// Captures whose ends (blocked threads) were learned into the groups'
    /// [`GroupModel::ends`]; `None` when one had none to learn (an older
    /// recorder) and in models learned before they were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ends_learned: Option<u32>,
}

impl GlobalModel {
    /// An empty model.
    pub fn new(variant: Variant) -> Self {
        Self {
            version: MODEL_VERSION,
            variant,
            groups: Vec::new(),
            sources: Vec::new(),
            quiet_ns: None,
            left_out: BTreeSet::new(),
            ends_learned: None,
        }
    }

    /// Makes `capture` comparable with this model: the functions the model
    /// was learned without are left out of it too. Returns what cannot be
    /// made comparable, for a person: functions this capture's overhead
    /// budget detached that the model was learned with, so units that call
    /// them differ from the learned ones for that reason alone.
    pub fn prepare(&self, capture: &mut tracer_common::decode::Capture) -> Option<String> {
        capture.leave_out(&self.left_out);
        let missing: Vec<String> = capture
            .budget_dropped()
            .difference(&self.left_out)
            .cloned()
            .collect();
        (!missing.is_empty()).then(|| {
            let them = if missing.len() == 1 { "it" } else { "them" };
            format!(
                "the overhead budget of this capture detached {} ({}), which the model was learned with: units of trees learned with {them} differ from the learned ones for that reason alone and are not judged; record with `tracer record --like MODEL` (the budget keeps the model's functions where it can), or learn from captures without {them} (-f patterns that leave {them} out)",
                if missing.len() == 1 { "a function" } else { "functions" },
                missing.join(", "),
            )
        })
    }

    /// What the model cannot see, for a person: the functions it was
    /// learned without; `None` when it has every function.
    pub fn left_out_note(&self) -> Option<String> {
        (!self.left_out.is_empty()).then(|| {
            format!(
                "the model was learned without {} (detached by an overhead budget): a fault inside {} cannot show",
                self.left_out.iter().cloned().collect::<Vec<_>>().join(", "),
                if self.left_out.len() == 1 { "it" } else { "them" }
            )
        })
    }

    /// Learns the longest quiet span of a normal capture, whose units
    /// `processes` are, recording stopped at `stop_ns`.
    pub fn learn_quiet(&mut self, processes: &[ProcessUnits], stop_ns: Option<u64>) {
        // Captures learned into a model that did not keep it: unknown.
        if self.quiet_ns.is_none() && !self.sources.is_empty() {
            return;
        }
        if let Some((from, to)) = crate::units::quiet_span(processes, stop_ns) {
            self.quiet_ns = Some(self.quiet_ns.unwrap_or(0).max(to.saturating_sub(from)));
        }
    }

    /// Learns where the threads of one normal capture stood at its end:
    /// `blocked` ([`crate::blocked::blocked_threads`]) of the capture whose
    /// processes are `processes` (already learned with
    /// [`GlobalModel::learn`]); `None` for a capture whose recorder did not
    /// look ([`crate::blocked::recorded`]), which makes the ends unknown
    /// for good, as the capture's name goes to `sources` after it
    /// (the learned captures' names are what tells a first capture from a
    /// later one).
    pub fn learn_ends(
        &mut self,
        processes: &[ProcessUnits],
        blocked: Option<&[crate::blocked::BlockedThread]>,
    ) {
        // A capture learned before without them: unknown.
        if self.ends_learned.is_none() && !self.sources.is_empty() {
            return;
        }
        let Some(blocked) = blocked else {
            self.ends_learned = None;
            for g in &mut self.groups {
                g.ends = None;
            }
            return;
        };
        let first = self.ends_learned.is_none();
        self.ends_learned = Some(self.ends_learned.unwrap_or(0) + 1);
        for g in &mut self.groups {
            if first && g.ends.is_none() {
                g.ends = Some(BTreeMap::new());
            }
        }
        for t in blocked {
            let Some(p) = processes.iter().find(|p| p.pid == t.pid) else {
                continue;
            };
            let Some(g) = self.groups.iter_mut().find(|g| g.signature == p.signature) else {
                continue;
            };
            let ends = g.ends.get_or_insert_with(BTreeMap::new);
            let place = ends.entry(t.place()).or_default();
            place.threads += 1;
            place.max_blocked_ns = place.max_blocked_ns.max((t.blocked_s * 1e9) as u64);
        }
    }

    /// Checks every tree (see [`CallTreeModel::validate`]): a model read
    /// from a file is input like any other.
    pub fn validate(&self) -> Result<(), InvalidModel> {
        for (group, g) in self.groups.iter().enumerate() {
            for kind in UnitKind::ALL {
                for (key, tree) in g.trees(kind) {
                    tree.validate().map_err(|what| InvalidModel {
                        group,
                        kind: kind.name(),
                        key: key.clone(),
                        what,
                    })?;
                }
            }
        }
        Ok(())
    }

    /// The group with `signature`.
    pub fn group(&self, signature: &[String]) -> Option<&GroupModel> {
        self.groups.iter().find(|g| g.signature == signature)
    }

    /// Learns one process: builds its process model and merges it into the
    /// group of its signature.
    pub fn learn(&mut self, process: &ProcessUnits) {
        let idx = match self
            .groups
            .iter()
            .position(|g| g.signature == process.signature)
        {
            Some(i) => i,
            None => {
                self.groups.push(GroupModel {
                    signature: process.signature.clone(),
                    failures: Some(BTreeMap::new()),
                    ..GroupModel::default()
                });
                self.groups.len() - 1
            }
        };
        let group = &mut self.groups[idx];
        group.processes += 1;
        match process.ended {
            // Still running at the end, or ended as it should.
            None => {}
            Some((_, None)) => group.failures = None,
            Some((_, Some(status))) => {
                if let Some(failures) = group.failures.as_mut()
                    && status.is_failure()
                {
                    *failures.entry(status.describe()).or_default() += 1;
                }
            }
        }
        if group.examples.len() < 8 {
            group.examples.push(format!(
                "{}[{}]@{}",
                process.comm, process.pid, process.host
            ));
        }
        // One process model per (kind, key): its units' coverage merged.
        let mut by_key: BTreeMap<(UnitKind, &str), Vec<_>> = BTreeMap::new();
        for u in &process.units {
            by_key.entry((u.kind, u.model_key())).or_default().push(u);
        }
        for ((kind, key), units) in by_key {
            group
                .trees_mut(kind)
                .entry(key.to_string())
                .or_default()
                .merge_process(&process.nodes, &units);
        }
    }

    /// Merges another global model (learned with the same variant) into this one.
    pub fn merge(&mut self, other: &GlobalModel) {
        self.quiet_ns = match (self.quiet_ns, other.quiet_ns) {
            (Some(a), Some(b)) => Some(a.max(b)),
            // A model without it says nothing of quiet spans.
            _ => None,
        };
        self.ends_learned = match (self.ends_learned, other.ends_learned) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        for g in &other.groups {
            match self
                .groups
                .iter_mut()
                .find(|mine| mine.signature == g.signature)
            {
                Some(mine) => {
                    mine.processes += g.processes;
                    mine.failures = match (mine.failures.take(), &g.failures) {
                        (Some(mut a), Some(b)) => {
                            for (how, n) in b {
                                *a.entry(how.clone()).or_default() += n;
                            }
                            Some(a)
                        }
                        _ => None,
                    };
                    mine.ends = match (mine.ends.take(), &g.ends) {
                        (Some(mut a), Some(b)) if self.ends_learned.is_some() => {
                            for (place, e) in b {
                                let m = a.entry(place.clone()).or_default();
                                m.threads += e.threads;
                                m.max_blocked_ns = m.max_blocked_ns.max(e.max_blocked_ns);
                            }
                            Some(a)
                        }
                        _ => None,
                    };
                    for e in &g.examples {
                        if mine.examples.len() < 8 {
                            mine.examples.push(e.clone());
                        }
                    }
                    for kind in UnitKind::ALL {
                        for (key, tree) in g.trees(kind) {
                            mine.trees_mut(kind)
                                .entry(key.clone())
                                .or_default()
                                .merge(tree);
                        }
                    }
                }
                None => self.groups.push(g.clone()),
            }
        }
        self.sources.extend(other.sources.iter().cloned());
    }
}
