//! Process and global models (000 §2.3–2.4): per process group (same process
//! signature), one call tree per unit kind and one per connection of handler
//! units, each node annotated with its coverage probability `p_g = n_g / n_f`.
//!
//! Models are mergeable summaries: a tree keeps, per node, the sum of the
//! probabilities over the process models merged into it and how many were
//! merged, so its value is their mean (000 §2.4), and learning over many
//! captures is a sequence of merges.

mod tree;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
pub use tree::{CallTreeModel, ModelNode, NormalRange};

use crate::units::{ProcessUnits, UnitKind, Variant};

/// Version of the serialized model.
pub const MODEL_VERSION: u32 = 1;

/// The models of one process group.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupModel {
    /// The process signature shared by the group.
    pub signature: Vec<String>,
    /// Process models merged into this group.
    pub processes: u32,
    /// Example process names (up to 8), for reports.
    pub examples: Vec<String>,
    /// Initializer units.
    pub initializer: CallTreeModel,
    /// Finalizer units.
    pub finalizer: CallTreeModel,
    /// Pre-processing units (001 variant).
    pub pre_process: CallTreeModel,
    /// Post-processing units (001 variant).
    pub post_process: CallTreeModel,
    /// Handler units by connection key.
    pub handlers: BTreeMap<String, CallTreeModel>,
}

impl GroupModel {
    /// The tree for units of `kind` (and `connection`, for handlers).
    pub fn tree(&self, kind: UnitKind, connection: Option<&str>) -> Option<&CallTreeModel> {
        let t = match kind {
            UnitKind::Initializer => &self.initializer,
            UnitKind::Finalizer => &self.finalizer,
            UnitKind::PreProcess => &self.pre_process,
            UnitKind::PostProcess => &self.post_process,
            UnitKind::Handler => return self.handlers.get(connection?),
        };
        (t.models > 0).then_some(t)
    }

    /// Mutable [`GroupModel::tree`].
    pub fn tree_mut(
        &mut self,
        kind: UnitKind,
        connection: Option<&str>,
    ) -> Option<&mut CallTreeModel> {
        let t = match kind {
            UnitKind::Initializer => &mut self.initializer,
            UnitKind::Finalizer => &mut self.finalizer,
            UnitKind::PreProcess => &mut self.pre_process,
            UnitKind::PostProcess => &mut self.post_process,
            UnitKind::Handler => return self.handlers.get_mut(connection?),
        };
        (t.models > 0).then_some(t)
    }
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
}

impl GlobalModel {
    /// An empty model.
    pub fn new(variant: Variant) -> Self {
        Self {
            version: MODEL_VERSION,
            variant,
            groups: Vec::new(),
            sources: Vec::new(),
        }
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
                    ..GroupModel::default()
                });
                self.groups.len() - 1
            }
        };
        let group = &mut self.groups[idx];
        group.processes += 1;
        if group.examples.len() < 8 {
            group.examples.push(format!(
                "{}[{}]@{}",
                process.comm, process.pid, process.host
            ));
        }
        let kinds = [
            (UnitKind::Initializer, &mut group.initializer),
            (UnitKind::Finalizer, &mut group.finalizer),
            (UnitKind::PreProcess, &mut group.pre_process),
            (UnitKind::PostProcess, &mut group.post_process),
        ];
        for (kind, tree) in kinds {
            let units: Vec<_> = process.units.iter().filter(|u| u.kind == kind).collect();
            if !units.is_empty() {
                tree.merge_process(&process.nodes, &units);
            }
        }
        let mut by_conn: BTreeMap<&str, Vec<_>> = BTreeMap::new();
        for u in process.units.iter().filter(|u| u.kind == UnitKind::Handler) {
            let key = u.connection.as_ref().map_or("unknown", |c| c.as_str());
            by_conn.entry(key).or_default().push(u);
        }
        for (conn, units) in by_conn {
            group
                .handlers
                .entry(conn.to_string())
                .or_default()
                .merge_process(&process.nodes, &units);
        }
    }

    /// Merges another global model (learned with the same variant) into this one.
    pub fn merge(&mut self, other: &GlobalModel) {
        for g in &other.groups {
            match self
                .groups
                .iter_mut()
                .find(|mine| mine.signature == g.signature)
            {
                Some(mine) => {
                    mine.processes += g.processes;
                    for e in &g.examples {
                        if mine.examples.len() < 8 {
                            mine.examples.push(e.clone());
                        }
                    }
                    mine.initializer.merge(&g.initializer);
                    mine.finalizer.merge(&g.finalizer);
                    mine.pre_process.merge(&g.pre_process);
                    mine.post_process.merge(&g.post_process);
                    for (conn, tree) in &g.handlers {
                        mine.handlers.entry(conn.clone()).or_default().merge(tree);
                    }
                }
                None => self.groups.push(g.clone()),
            }
        }
        self.sources.extend(other.sources.iter().cloned());
    }
}
