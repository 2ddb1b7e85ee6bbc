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
}

/// The highest scores of normal units held out of the model they were
/// scored against (cross-validation over the learned captures): a trial
/// unit above them behaves as no normal unit did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NormalRange {
    /// Highest node score (000 eq. 1–2).
    pub nodes: f64,
    /// Highest edge score (001).
    pub edges: f64,
    /// Held-out units scored.
    pub units: u64,
}

impl NormalRange {
    /// Widens the range by one held-out unit's scores.
    pub fn add(&mut self, nodes: f64, edges: f64) {
        self.nodes = self.nodes.max(nodes);
        self.edges = self.edges.max(edges);
        self.units += 1;
    }
}

/// A call-tree model of one unit kind or connection.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CallTreeModel {
    /// Process models merged (the divisor of every node's `p_sum`).
    pub models: u32,
    /// Units these models were learned from, in total.
    pub units: u64,
    /// Nodes; parents come before their children.
    pub nodes: Vec<ModelNode>,
    /// How high normal units score against this tree, when calibrated
    /// (`model learn` on several captures); any change to the tree drops it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normal: Option<NormalRange>,
    #[serde(skip)]
    index: HashMap<(Option<u32>, String, String), u32>,
    #[serde(skip)]
    children: Vec<Vec<u32>>,
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

    /// Indexes the tree for lookups (after deserializing).
    pub fn prepare(&mut self) {
        self.rebuild_index();
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

    /// Mean probability of `node`.
    pub fn p(&self, node: u32) -> f64 {
        if self.models == 0 {
            return 0.0;
        }
        self.nodes[node as usize].p_sum / f64::from(self.models)
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
            if n_f > 0.0 {
                self.nodes[id as usize].p_sum += f64::from(counts[&n]) / n_f;
            }
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
            mapped.push(id);
        }
        self.models += other.models;
        self.units += other.units;
        self.normal = None;
    }
}
