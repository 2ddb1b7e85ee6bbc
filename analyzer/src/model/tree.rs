//! A call-tree model: nodes keyed by their path of (call site, callee), each
//! with the summed coverage probability of the process models merged in.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::units::{NodeKey, NodeTable, Unit};

/// A node of a call-tree model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelNode {
    /// Index of the parent node, or `None` for a top-level node.
    pub parent: Option<u32>,
    /// Symbolized call site (empty for system calls).
    pub site: String,
    /// Callee function, or `sys:NAME`.
    pub callee: String,
    /// Sum over merged process models of `p = n_g / n_f`.
    pub p_sum: f64,
    /// Process models that had this node: a node's mean probability is
    /// over the models that had its caller (000 §2.4: the mean of the
    /// original nodes), not over models that never made the caller.
    #[serde(default)]
    pub models: u32,
}

/// What normal units held out of the model they were scored against did
/// (cross-validation over the learned captures): their highest scores, how
/// many showed call paths the other runs had not, how many never
/// completed, and how many deviating units one process had at most. A trial
/// unit beyond them behaves as no normal unit did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NormalRange {
    /// Highest node score (000 eq. 1–2).
    pub nodes: f64,
    /// Highest edge score (001).
    pub edges: f64,
    /// Held-out units scored.
    pub units: u64,
    /// Held-out units whose call paths no unit of the other runs had (a
    /// new call, or a new combination): 0 means every normal unit matched
    /// a behaviour of some other run.
    #[serde(default)]
    pub novel: u64,
    /// Held-out units that never completed.
    #[serde(default)]
    pub open: u64,
    /// The most deviating units (new call paths, or learned ones more
    /// often than any learned process had them) of one held-out process.
    #[serde(default)]
    pub deviating_per_process: u32,
}

impl NormalRange {
    /// Widens the range by one held-out unit's scores.
    pub fn add(&mut self, nodes: f64, edges: f64) {
        self.nodes = self.nodes.max(nodes);
        self.edges = self.edges.max(edges);
        self.units += 1;
    }
}

/// One behaviour of a tree's learned units: the exact set of call paths a
/// unit covered. Node probabilities say how often each call was made; the
/// behaviours say which combinations occurred, so a unit can be told apart
/// from every normal one even when each of its calls, taken alone, is
/// common (a handler that neither handles the message nor closes the
/// connection, where normal units do one or the other).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Behaviour {
    /// Model nodes covered, ascending.
    pub nodes: Vec<u32>,
    /// Learned units that covered exactly these nodes.
    pub units: u64,
    /// The most units of one learned process that did.
    pub max_per_process: u32,
}

/// Distinct behaviours kept per tree; units of further ones are counted in
/// [`CallTreeModel::unlisted`]. A tree with that many is too varied for
/// "never seen" to mean anything, and its JSON stays bounded.
pub const MAX_BEHAVIOURS: usize = 256;

/// A call-tree model of one unit kind or connection.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CallTreeModel {
    /// Process models merged (the divisor of every node's `p_sum`).
    pub models: u32,
    /// Units these models were learned from, in total.
    pub units: u64,
    /// Nodes; parents come before their children.
    pub nodes: Vec<ModelNode>,
    /// The distinct behaviours of the learned units, most frequent first
    /// after [`CallTreeModel::prepare`].
    #[serde(default)]
    pub behaviours: Vec<Behaviour>,
    /// Learned units whose behaviour is not in `behaviours` (beyond
    /// [`MAX_BEHAVIOURS`]): while non-zero, an unlisted behaviour may have
    /// been seen.
    #[serde(default)]
    pub unlisted: u64,
    /// How high normal units score against this tree, when calibrated
    /// (`model learn` on several captures); any change to the tree drops it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normal: Option<NormalRange>,
    #[serde(skip)]
    index: HashMap<(Option<u32>, String, String), u32>,
    #[serde(skip)]
    children: Vec<Vec<u32>>,
    #[serde(skip)]
    behaviour_index: HashMap<Vec<u32>, u32>,
}

impl CallTreeModel {
    fn rebuild_index(&mut self) {
        if self.index.len() == self.nodes.len() && self.children.len() == self.nodes.len() {
            return;
        }
        self.index.clear();
        self.children = vec![Vec::new(); self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            self.index
                .insert((n.parent, n.site.clone(), n.callee.clone()), i as u32);
            if let Some(p) = n.parent {
                self.children[p as usize].push(i as u32);
            }
        }
    }

    /// Indexes the tree for lookups (after deserializing). Behaviours that
    /// name nodes the tree lacks (a damaged file) are dropped.
    pub fn prepare(&mut self) {
        self.rebuild_index();
        let n = self.nodes.len() as u32;
        self.behaviours
            .retain(|b| b.nodes.iter().all(|&id| id < n) && b.nodes.is_sorted());
        self.rebuild_behaviours();
    }

    fn rebuild_behaviours(&mut self) {
        if self.behaviour_index.len() == self.behaviours.len() {
            return;
        }
        self.behaviour_index = self
            .behaviours
            .iter()
            .enumerate()
            .map(|(i, b)| (b.nodes.clone(), i as u32))
            .collect();
    }

    /// The behaviour covering exactly `nodes` (model node ids, ascending).
    pub fn behaviour(&self, nodes: &[u32]) -> Option<u32> {
        self.behaviour_index.get(nodes).copied()
    }

    /// Adds `units` learned units with the behaviour `nodes`, at most
    /// `per_process` of them from one process.
    fn add_behaviour(&mut self, nodes: Vec<u32>, units: u64, per_process: u32) {
        self.rebuild_behaviours();
        match self.behaviour_index.get(&nodes) {
            Some(&i) => {
                let b = &mut self.behaviours[i as usize];
                b.units += units;
                b.max_per_process = b.max_per_process.max(per_process);
            }
            None if self.behaviours.len() < MAX_BEHAVIOURS => {
                self.behaviour_index
                    .insert(nodes.clone(), self.behaviours.len() as u32);
                self.behaviours.push(Behaviour {
                    nodes,
                    units,
                    max_per_process: per_process,
                });
            }
            None => self.unlisted += units,
        }
    }

    fn node_id(&mut self, parent: Option<u32>, key: &NodeKey) -> u32 {
        self.rebuild_index();
        if let Some(id) = self
            .index
            .get(&(parent, key.site.clone(), key.callee.clone()))
        {
            return *id;
        }
        let id = self.nodes.len() as u32;
        self.nodes.push(ModelNode {
            parent,
            site: key.site.clone(),
            callee: key.callee.clone(),
            p_sum: 0.0,
            models: 0,
        });
        self.index
            .insert((parent, key.site.clone(), key.callee.clone()), id);
        self.children.push(Vec::new());
        if let Some(p) = parent {
            self.children[p as usize].push(id);
        }
        id
    }

    /// Looks up the child of `parent` with `key`.
    pub fn find(&self, parent: Option<u32>, key: &NodeKey) -> Option<u32> {
        self.index
            .get(&(parent, key.site.clone(), key.callee.clone()))
            .copied()
    }

    /// Children of `node` (top-level nodes for `None`).
    pub fn children(&self, node: Option<u32>) -> Vec<u32> {
        match node {
            Some(n) => self.children.get(n as usize).cloned().unwrap_or_default(),
            None => (0..self.nodes.len() as u32)
                .filter(|i| self.nodes[*i as usize].parent.is_none())
                .collect(),
        }
    }

    /// Mean probability of `node` over the process models that had its
    /// caller (all of them for a top-level node).
    pub fn p(&self, node: u32) -> f64 {
        let Some(n) = self.nodes.get(node as usize) else {
            return 0.0;
        };
        let callers = n
            .parent
            .and_then(|p| self.nodes.get(p as usize))
            .map_or(self.models, |p| p.models);
        // Models written without per-node counts: all of them.
        let callers = if callers == 0 { self.models } else { callers };
        if callers == 0 {
            return 0.0;
        }
        (n.p_sum / f64::from(callers)).min(1.0)
    }

    /// The path of `node` as text.
    pub fn path_string(&self, mut node: u32) -> String {
        let mut parts = Vec::new();
        loop {
            let n = &self.nodes[node as usize];
            parts.push(if n.site.is_empty() {
                n.callee.clone()
            } else {
                format!("{}@{}", n.callee, n.site)
            });
            match n.parent {
                Some(p) => node = p,
                None => break,
            }
        }
        parts.reverse();
        parts.join(" > ")
    }

    /// Adds one process model built from `units` (all of one kind or
    /// connection): `p_g = n_g / n_f`, with `n_f` the unit count for
    /// top-level nodes (000 §2.3).
    pub fn merge_process(&mut self, table: &NodeTable, units: &[&Unit]) {
        let mut counts: rustc_hash::FxHashMap<u32, u32> = Default::default();
        for u in units {
            for &n in &u.nodes {
                *counts.entry(n).or_default() += 1;
            }
        }
        // Map process nodes to model nodes, parents first (lower depth first),
        // in key order so that models do not depend on hash order.
        let mut order: Vec<u32> = counts.keys().copied().collect();
        order.sort_by_cached_key(|n| (table.depth(*n), table.path_string(*n)));
        let mut mapped: rustc_hash::FxHashMap<u32, u32> = Default::default();
        let total = units.len() as f64;
        for n in order {
            let parent = table.parent(n);
            let (model_parent, n_f) = if parent == NodeTable::ROOT {
                (None, total)
            } else {
                let Some(mp) = mapped.get(&parent) else {
                    continue;
                };
                (
                    Some(*mp),
                    f64::from(counts.get(&parent).copied().unwrap_or(0)),
                )
            };
            let id = self.node_id(model_parent, table.node_key(n));
            mapped.insert(n, id);
            self.nodes[id as usize].models += 1;
            if n_f > 0.0 {
                self.nodes[id as usize].p_sum += f64::from(counts[&n]) / n_f;
            }
        }
        // Each unit's behaviour: its nodes as model nodes (every node's
        // parent is in the unit, so every node was mapped).
        let mut behaviours: HashMap<Vec<u32>, u32> = HashMap::new();
        for u in units {
            let mut ids: Vec<u32> = u
                .nodes
                .iter()
                .filter_map(|n| mapped.get(n).copied())
                .collect();
            ids.sort_unstable();
            *behaviours.entry(ids).or_default() += 1;
        }
        let mut behaviours: Vec<(Vec<u32>, u32)> = behaviours.into_iter().collect();
        // Most frequent first, then by nodes: the kept set does not depend
        // on hash order when the cap is reached.
        behaviours.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        for (ids, count) in behaviours {
            self.add_behaviour(ids, u64::from(count), count);
        }
        self.models += 1;
        self.units += units.len() as u64;
        self.normal = None;
    }

    /// The model as `path -> mean probability`, independent of node order.
    pub fn canonical(&self) -> std::collections::BTreeMap<String, f64> {
        (0..self.nodes.len() as u32)
            .map(|n| (self.path_string(n), self.p(n)))
            .collect()
    }

    /// Adds another model's process models to this one.
    pub fn merge(&mut self, other: &CallTreeModel) {
        let mut mapped: Vec<u32> = Vec::with_capacity(other.nodes.len());
        for n in &other.nodes {
            let parent = n.parent.map(|p| mapped[p as usize]);
            let id = self.node_id(
                parent,
                &NodeKey {
                    site: n.site.clone(),
                    callee: n.callee.clone(),
                },
            );
            self.nodes[id as usize].p_sum += n.p_sum;
            self.nodes[id as usize].models += n.models;
            mapped.push(id);
        }
        for b in &other.behaviours {
            let mut ids: Vec<u32> = b
                .nodes
                .iter()
                .filter_map(|&n| mapped.get(n as usize).copied())
                .collect();
            ids.sort_unstable();
            self.add_behaviour(ids, b.units, b.max_per_process);
        }
        self.unlisted += other.unlisted;
        self.models += other.models;
        self.units += other.units;
        self.normal = None;
    }
}
