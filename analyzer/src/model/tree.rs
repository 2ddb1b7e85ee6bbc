//! A call-tree model: nodes keyed by their path of (call site, callee), each
//! with the summed coverage probability of the process models merged in.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::units::{DISPLAY_FRAMES, NodeKey, NodeTable, Unit};

/// `nodes` of `table` ordered parents first: by depth, then by the rank of
/// the parent, then by key. Sorting by depth and full path string gave the
/// same kind of order in time quadratic in the depth (issue 15); this is
/// O(n log n) however deep the stacks are.
fn canonical_order(table: &NodeTable, nodes: impl Iterator<Item = u32>) -> Vec<u32> {
    let mut by_depth: Vec<u32> = nodes.collect();
    by_depth.sort_unstable_by_key(|n| table.depth(*n));
    let mut rank: rustc_hash::FxHashMap<u32, usize> = Default::default();
    let mut order = Vec::with_capacity(by_depth.len());
    for level in by_depth.chunk_by_mut(|a, b| table.depth(*a) == table.depth(*b)) {
        // A parent missing from `nodes` ranks last: its children are
        // skipped by the caller anyway.
        let parent_rank = |n: u32| {
            let p = table.parent(n);
            if p == NodeTable::ROOT {
                0
            } else {
                rank.get(&p).map_or(usize::MAX, |r| r + 1)
            }
        };
        level.sort_by(|a, b| {
            parent_rank(*a)
                .cmp(&parent_rank(*b))
                .then_with(|| table.node_key(*a).cmp(table.node_key(*b)))
        });
        for &n in level.iter() {
            rank.insert(n, order.len());
            order.push(n);
        }
    }
    order
}

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
    /// Held-out units that came after two others in an order the other
    /// runs' units never took, where they had followed those two often
    /// enough for that to count (see `score::out_of_order`): 0 means the
    /// order of this tree's units tells normal from not.
    #[serde(default)]
    pub out_of_order: u64,
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Behaviour {
    /// Model nodes covered, ascending.
    pub nodes: Vec<u32>,
    /// Learned units that covered exactly these nodes.
    pub units: u64,
    /// The most units of one learned process that did.
    pub max_per_process: u32,
    /// The largest share (0..=1) of one learned process's units of the
    /// tree that did: a process with more units of the tree than any
    /// learned one (a busier worker, a longer recording) may have more of
    /// them as well (see [`Behaviour::beyond`]). 0 in models learned
    /// before it was kept: then only `max_per_process` counts.
    #[serde(default)]
    pub max_share: f64,
}

impl Behaviour {
    /// How many of `count` units with this behaviour, of a process with
    /// `total` units in the tree, are more than normal processes had (see
    /// [`beyond_normal`]).
    pub fn beyond(&self, count: u32, total: u32) -> u32 {
        beyond_normal(self.max_per_process, self.max_share, count, total)
    }
}

/// How many of `count` units of one behaviour, of a process with `total`
/// units in the tree, are more than normal processes had: more than the
/// most one learned process had (`max_per_process`), and more than the
/// largest share of its units one learned process had (`max_share` of
/// `total`). A process that does more of everything (a busier worker, a
/// longer recording) is not repeating anything; one that does this far
/// more often than its share is (35 units alike where a learned process
/// had 1 in 40).
pub fn beyond_normal(max_per_process: u32, max_share: f64, count: u32, total: u32) -> u32 {
    // A model file is input: whatever it holds, a share is 0..=1.
    let share = if max_share.is_finite() {
        max_share.clamp(0.0, 1.0)
    } else {
        0.0
    };
    // The smallest whole count at or above the share (a hair below the
    // product is rounding, not a unit).
    let by_share = (share * f64::from(total) - 1e-9).ceil().max(0.0) as u32;
    count.saturating_sub(max_per_process.max(by_share))
}

/// Distinct behaviours kept per tree; units of further ones are counted in
/// [`CallTreeModel::unlisted`]. A tree with that many is too varied for
/// "never seen" to mean anything, and its JSON stays bounded.
pub const MAX_BEHAVIOURS: usize = 256;

/// In a [`Succession`]'s `before`: no unit (the sequence had begun fewer
/// than two units earlier).
pub const NO_UNIT: u32 = u32::MAX;

/// In a [`Succession`]: a behaviour not listed (beyond
/// [`MAX_BEHAVIOURS`], or new to the model).
pub const OTHER_BEHAVIOUR: u32 = u32::MAX - 1;

/// Distinct successions kept per tree; units of further ones are counted
/// in [`CallTreeModel::unlisted_successions`].
pub const MAX_SUCCESSIONS: usize = 4096;

/// How often learned units of one behaviour came right after two others
/// on the same connection (or, for units without one, the same thread):
/// the order of a tree's units, beyond which behaviours occur. A request
/// routed to the wrong handler gives a unit like the handler's normal
/// ones, and only its place in the sequence is new (an n-gram of units,
/// as system-call sequence monitors use n-grams of calls).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Succession {
    /// The behaviours of the two units before, older first ([`NO_UNIT`]
    /// where there was none).
    pub before: [u32; 2],
    /// The behaviour that followed them.
    pub next: u32,
    /// Learned units that did.
    pub units: u64,
}

/// What learned units did after one pair of behaviours (see
/// [`CallTreeModel::followed`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Followed {
    /// Learned units that came after that pair.
    pub units: u64,
    /// Of those, units with the behaviour asked about.
    pub this: u64,
    /// The behaviour that came most often after the pair.
    pub usual: Option<u32>,
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
    /// The distinct behaviours of the learned units, most frequent first
    /// after [`CallTreeModel::prepare`].
    #[serde(default)]
    pub behaviours: Vec<Behaviour>,
    /// Learned units whose behaviour is not in `behaviours` (beyond
    /// [`MAX_BEHAVIOURS`]): while non-zero, an unlisted behaviour may have
    /// been seen.
    #[serde(default)]
    pub unlisted: u64,
    /// The order of the learned units (model version 4; empty in older
    /// models, which then say nothing about order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub successions: Vec<Succession>,
    /// Learned units whose succession is not in `successions` (beyond
    /// [`MAX_SUCCESSIONS`], or dropped from a damaged file): while
    /// non-zero, an unlisted order may have been seen.
    #[serde(default)]
    pub unlisted_successions: u64,
    /// How high normal units score against this tree, when calibrated
    /// (`model learn` on several captures); any change to the tree drops it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normal: Option<NormalRange>,
    /// Learned units in which the connection's other end had ended it
    /// (a receive found end of stream or a reset; see
    /// [`Unit::peer_ended_ns`]); `None` in models learned before it was
    /// kept, which then say nothing about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_ended: Option<u64>,
    /// Site and callee strings interned, so that a lookup hashes three
    /// integers and allocates nothing.
    #[serde(skip)]
    strings: rustc_hash::FxHashMap<String, u32>,
    /// (parent, site id, callee id) to node.
    #[serde(skip)]
    index: rustc_hash::FxHashMap<(Option<u32>, u32, u32), u32>,
    #[serde(skip)]
    children: Vec<Vec<u32>>,
    #[serde(skip)]
    behaviour_index: HashMap<Vec<u32>, u32>,
    /// Indices of `successions` by their `before`.
    #[serde(skip)]
    succession_index: HashMap<[u32; 2], Vec<u32>>,
    /// Successions indexed (the index is rebuilt when this differs from
    /// their count, as after deserializing).
    #[serde(skip)]
    successions_indexed: usize,
    /// Learned units the indexed successions count.
    #[serde(skip)]
    succession_units: u64,
    /// Indexed successions seen exactly once.
    #[serde(skip)]
    successions_once: usize,
}

/// The id of `s` in `strings`, added when new.
fn intern(strings: &mut rustc_hash::FxHashMap<String, u32>, s: &str) -> u32 {
    if let Some(id) = strings.get(s) {
        return *id;
    }
    let id = strings.len() as u32;
    strings.insert(s.to_string(), id);
    id
}

impl CallTreeModel {
    fn rebuild_index(&mut self) {
        if self.index.len() == self.nodes.len() && self.children.len() == self.nodes.len() {
            return;
        }
        self.index.clear();
        self.strings.clear();
        self.children = vec![Vec::new(); self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            let key = (
                n.parent,
                intern(&mut self.strings, &n.site),
                intern(&mut self.strings, &n.callee),
            );
            self.index.insert(key, i as u32);
            // Out of range only in a model that failed validation.
            if let Some(children) = n.parent.and_then(|p| self.children.get_mut(p as usize)) {
                children.push(i as u32);
            }
        }
    }

    /// Checks what scoring and merging rely on, for a tree read from a
    /// file: every node's parent comes before it (so parents exist and
    /// paths end: no cycle), no node is there twice, probabilities and
    /// normal ranges are finite and not negative.
    pub fn validate(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(p) = n.parent
                && p as usize >= i
            {
                return Err(format!(
                    "node {i}'s parent {p} does not come before it (parents come first)"
                ));
            }
            if !(n.p_sum.is_finite() && n.p_sum >= 0.0) {
                return Err(format!("node {i} has probability sum {}", n.p_sum));
            }
            if !seen.insert((n.parent, n.site.as_str(), n.callee.as_str())) {
                return Err(format!(
                    "node {i} ({}@{} under {:?}) is there twice",
                    n.callee, n.site, n.parent
                ));
            }
        }
        if self.models == 0 && !self.nodes.is_empty() {
            return Err("nodes but no process model merged (models = 0)".into());
        }
        if let Some(r) = &self.normal
            && !(r.nodes.is_finite() && r.edges.is_finite() && r.nodes >= 0.0 && r.edges >= 0.0)
        {
            return Err(format!(
                "normal range {} / {} is not a pair of scores",
                r.nodes, r.edges
            ));
        }
        Ok(())
    }

    /// Indexes the tree for lookups (after deserializing). Behaviours that
    /// name nodes the tree lacks (a damaged file) are dropped.
    pub fn prepare(&mut self) {
        self.rebuild_index();
        let n = self.nodes.len() as u32;
        let listed = self.behaviours.len();
        self.behaviours
            .retain(|b| b.nodes.iter().all(|&id| id < n) && b.nodes.is_sorted());
        self.rebuild_behaviours();
        // Successions name behaviours by index: when some were dropped the
        // indices no longer mean what they did, and the order is unknown.
        let known = self.behaviours.len() as u32;
        let valid = |b: u32| b < known || b == OTHER_BEHAVIOUR;
        let before = self.successions.len();
        if self.behaviours.len() != listed {
            self.successions.clear();
        } else {
            self.successions
                .retain(|s| valid(s.next) && s.before.iter().all(|&b| valid(b) || b == NO_UNIT));
            // A file may list more than learning keeps.
            self.successions.truncate(MAX_SUCCESSIONS);
        }
        if self.successions.len() != before {
            self.unlisted_successions = self.unlisted_successions.max(1);
        }
        self.successions_indexed = usize::MAX;
        self.rebuild_successions();
    }

    fn rebuild_successions(&mut self) {
        if self.successions_indexed == self.successions.len() {
            return;
        }
        self.succession_index.clear();
        self.succession_units = self
            .successions
            .iter()
            .fold(0u64, |sum, s| sum.saturating_add(s.units));
        self.successions_once = self.successions.iter().filter(|s| s.units == 1).count();
        for (i, s) in self.successions.iter().enumerate() {
            self.succession_index
                .entry(s.before)
                .or_default()
                .push(i as u32);
        }
        self.successions_indexed = self.successions.len();
    }

    /// Adds `units` learned units of behaviour `next` after `before`.
    fn add_succession(&mut self, before: [u32; 2], next: u32, units: u64) {
        self.rebuild_successions();
        let found = self.succession_index.get(&before).and_then(|list| {
            list.iter()
                .copied()
                .find(|&i| self.successions[i as usize].next == next)
        });
        match found {
            Some(i) => {
                let s = &mut self.successions[i as usize];
                if s.units == 1 {
                    self.successions_once -= 1;
                }
                // Saturating: counts of a model file are input.
                s.units = s.units.saturating_add(units);
                self.succession_units = self.succession_units.saturating_add(units);
            }
            None if self.successions.len() < MAX_SUCCESSIONS => {
                if units == 1 {
                    self.successions_once += 1;
                }
                self.succession_units = self.succession_units.saturating_add(units);
                self.succession_index
                    .entry(before)
                    .or_default()
                    .push(self.successions.len() as u32);
                self.successions.push(Succession {
                    before,
                    next,
                    units,
                });
                self.successions_indexed = self.successions.len();
            }
            None => self.unlisted_successions = self.unlisted_successions.saturating_add(units),
        }
    }

    /// What learned units did after the behaviours `before` (older first),
    /// counting those of behaviour `next`. Needs an indexed tree (learned
    /// in memory, or [`CallTreeModel::prepare`]d).
    pub fn followed(&self, before: [u32; 2], next: u32) -> Followed {
        let mut f = Followed::default();
        let mut most = 0;
        for &i in self.succession_index.get(&before).into_iter().flatten() {
            let Some(s) = self.successions.get(i as usize) else {
                continue;
            };
            f.units = f.units.saturating_add(s.units);
            if s.next == next {
                f.this = f.this.saturating_add(s.units);
            }
            if s.units > most {
                most = s.units;
                f.usual = Some(s.next);
            }
        }
        f
    }

    /// Whether the order of the learned units is known in full: every
    /// behaviour and every unit's succession listed (a tree learned before
    /// successions were kept, version 3, or merged with one, lacks some),
    /// and none of them seen only once. By Good-Turing, the share of units
    /// that come in an order not seen yet is about the share of orders seen
    /// once: while some were, new ones keep coming now and then with
    /// timing, and one more is no evidence (pyjobs' job manager, 8 runs
    /// learned, had one order seen once, and a fresh normal run then came
    /// in an order never seen in 359 units).
    pub fn order_known(&self) -> bool {
        self.unlisted == 0
            && self.unlisted_successions == 0
            && self.units > 0
            && self.succession_units == self.units
            && self.successions_once == 0
    }

    /// A short name for people of learned behaviour `id`: the functions
    /// its units called that units of some other behaviour of the tree did
    /// not, the rarest among the behaviours first (at most three, shown in
    /// tree order), so two behaviours that differ deep down read apart.
    pub fn behaviour_label(&self, id: u32) -> String {
        let Some(b) = self.behaviours.get(id as usize) else {
            return "a behaviour not listed".to_string();
        };
        // (behaviours with the node, position in the unit, callee).
        let mut telling: Vec<(usize, usize, &str)> = Vec::new();
        for (i, &n) in b.nodes.iter().enumerate() {
            let Some(node) = self.nodes.get(n as usize) else {
                continue;
            };
            let with = self
                .behaviours
                .iter()
                .filter(|o| o.nodes.binary_search(&n).is_ok())
                .count();
            if with < self.behaviours.len() && !telling.iter().any(|t| t.2 == node.callee) {
                telling.push((with, i, &node.callee));
            }
        }
        telling.sort_unstable();
        telling.truncate(3);
        telling.sort_unstable_by_key(|t| t.1);
        if telling.is_empty() {
            "the calls every unit makes".to_string()
        } else {
            telling.iter().map(|t| t.2).collect::<Vec<_>>().join(", ")
        }
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
    /// `per_process` of them from one process, at most `share` of one
    /// process's units of the tree.
    /// Its id, or [`OTHER_BEHAVIOUR`] when the tree lists no more.
    fn add_behaviour(&mut self, nodes: Vec<u32>, units: u64, per_process: u32, share: f64) -> u32 {
        self.rebuild_behaviours();
        match self.behaviour_index.get(&nodes) {
            Some(&i) => {
                let b = &mut self.behaviours[i as usize];
                b.units += units;
                b.max_per_process = b.max_per_process.max(per_process);
                b.max_share = b.max_share.max(share);
                i
            }
            None if self.behaviours.len() < MAX_BEHAVIOURS => {
                let id = self.behaviours.len() as u32;
                self.behaviour_index.insert(nodes.clone(), id);
                self.behaviours.push(Behaviour {
                    nodes,
                    units,
                    max_per_process: per_process,
                    max_share: share,
                });
                id
            }
            None => {
                self.unlisted += units;
                OTHER_BEHAVIOUR
            }
        }
    }

    fn node_id(&mut self, parent: Option<u32>, key: &NodeKey) -> u32 {
        self.rebuild_index();
        if let Some(id) = self.find(parent, key) {
            return id;
        }
        let id = self.nodes.len() as u32;
        self.nodes.push(ModelNode {
            parent,
            site: key.site.clone(),
            callee: key.callee.clone(),
            p_sum: 0.0,
            models: 0,
        });
        let ids = (
            parent,
            intern(&mut self.strings, &key.site),
            intern(&mut self.strings, &key.callee),
        );
        self.index.insert(ids, id);
        self.children.push(Vec::new());
        if let Some(children) = parent.and_then(|p| self.children.get_mut(p as usize)) {
            children.push(id);
        }
        id
    }

    /// Looks up the child of `parent` with `key`.
    pub fn find(&self, parent: Option<u32>, key: &NodeKey) -> Option<u32> {
        let site = *self.strings.get(key.site.as_str())?;
        let callee = *self.strings.get(key.callee.as_str())?;
        self.index.get(&(parent, site, callee)).copied()
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

    /// The path of `node` for people: the frames nearest to it, as
    /// [`NodeTable::path_display`] gives them.
    pub fn path_display(&self, node: u32) -> String {
        let mut parts = Vec::new();
        let mut n = Some(node);
        // A validated model's parents come before their children, so the
        // walk ends; it is bounded all the same.
        while let Some(i) = n
            && parts.len() < DISPLAY_FRAMES
        {
            let Some(m) = self.nodes.get(i as usize) else {
                break;
            };
            parts.push(if m.site.is_empty() {
                m.callee.clone()
            } else {
                format!("{}@{}", m.callee, m.site)
            });
            n = m.parent;
        }
        if n.is_some() {
            parts.push("…".to_string());
        }
        parts.reverse();
        parts.join(" > ")
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
        // Map process nodes to model nodes, parents first, in an order that
        // depends on the paths alone (not on hash order).
        let order = canonical_order(table, counts.keys().copied());
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
        let mut of_unit: Vec<Vec<u32>> = Vec::with_capacity(units.len());
        for u in units {
            let mut ids: Vec<u32> = u
                .nodes
                .iter()
                .filter_map(|n| mapped.get(n).copied())
                .collect();
            ids.sort_unstable();
            *behaviours.entry(ids.clone()).or_default() += 1;
            of_unit.push(ids);
        }
        let mut behaviours: Vec<(Vec<u32>, u32)> = behaviours.into_iter().collect();
        // Most frequent first, then by nodes: the kept set does not depend
        // on hash order when the cap is reached.
        behaviours.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut id_of: HashMap<Vec<u32>, u32> = HashMap::with_capacity(behaviours.len());
        for (ids, count) in behaviours {
            let share = f64::from(count) / units.len() as f64;
            let id = self.add_behaviour(ids.clone(), u64::from(count), count, share);
            id_of.insert(ids, id);
        }
        // The order: each unit's behaviour after the two before it in its
        // sequence, counted per distinct succession.
        let mut successions: HashMap<([u32; 2], u32), u64> = HashMap::new();
        for seq in sequences(units) {
            let mut before = [NO_UNIT; 2];
            for i in seq {
                let id = id_of.get(&of_unit[i]).copied().unwrap_or(OTHER_BEHAVIOUR);
                *successions.entry((before, id)).or_default() += 1;
                before = [before[1], id];
            }
        }
        let mut successions: Vec<(([u32; 2], u32), u64)> = successions.into_iter().collect();
        successions.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        for ((before, next), count) in successions {
            self.add_succession(before, next, count);
        }
        // A tree learned from a model that did not keep the count stays
        // without it.
        if self.units == 0 || self.peer_ended.is_some() {
            let ended = units.iter().filter(|u| u.peer_ended_ns.is_some()).count() as u64;
            self.peer_ended = Some(self.peer_ended.unwrap_or(0) + ended);
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
        let mut behaviour_ids = Vec::with_capacity(other.behaviours.len());
        for b in &other.behaviours {
            let mut ids: Vec<u32> = b
                .nodes
                .iter()
                .filter_map(|&n| mapped.get(n as usize).copied())
                .collect();
            ids.sort_unstable();
            behaviour_ids.push(self.add_behaviour(ids, b.units, b.max_per_process, b.max_share));
        }
        let map = |b: u32| match b {
            NO_UNIT => NO_UNIT,
            b => behaviour_ids
                .get(b as usize)
                .copied()
                .unwrap_or(OTHER_BEHAVIOUR),
        };
        for s in &other.successions {
            self.add_succession([map(s.before[0]), map(s.before[1])], map(s.next), s.units);
        }
        self.unlisted_successions += other.unlisted_successions;
        self.unlisted += other.unlisted;
        self.peer_ended = match (self.peer_ended, other.peer_ended) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (None, b) if self.units == 0 => b,
            (a, None) if other.units == 0 => a,
            // Either side learned without the count: unknown.
            _ => None,
        };
        self.models += other.models;
        self.units += other.units;
        self.normal = None;
    }
}

/// The sequences of `units` (of one tree and process), as indices into
/// it in time order: the units of one connection of one thread (the same
/// descriptor), or of one thread for units without a descriptor.
pub(crate) fn sequences(units: &[&Unit]) -> Vec<Vec<usize>> {
    let mut by_key: std::collections::BTreeMap<(u32, Option<i32>), Vec<usize>> = Default::default();
    for (i, u) in units.iter().enumerate() {
        by_key.entry((u.tid, u.fd)).or_default().push(i);
    }
    by_key
        .into_values()
        .map(|mut seq| {
            seq.sort_by_key(|&i| units[i].start_ns);
            seq
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        score::{Scoring, score_tree},
        units::UnitKind,
    };

    fn unit(nodes: Vec<u32>) -> Unit {
        Unit {
            kind: UnitKind::Initializer,
            tid: 1,
            start_ns: 0,
            end_ns: 0,
            first_ns: vec![0; nodes.len()],
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

    /// Issue 15, item 4: a unit 100,000 calls deep (a thread that never
    /// returns) is learned and scored with work linear in its depth. The
    /// old ordering built every node's full path string, about 5·10⁹
    /// characters here, and ran out of memory.
    #[test]
    fn issue_15_a_unit_a_hundred_thousand_calls_deep_is_learned_and_scored() {
        const DEPTH: u32 = 100_000;
        let mut table = NodeTable::default();
        let keys: Vec<u32> = ["walk", "visit", "descend"]
            .iter()
            .map(|f| {
                table.key(NodeKey {
                    site: format!("caller+0x{}", f.len()),
                    callee: (*f).to_string(),
                })
            })
            .collect();
        let mut parent = NodeTable::ROOT;
        let mut nodes = Vec::new();
        for i in 0..DEPTH {
            parent = table.child(parent, keys[i as usize % 3]);
            nodes.push(parent);
        }
        assert_eq!(table.depth(parent), DEPTH as usize);
        let u = unit(nodes);
        let mut model = CallTreeModel::default();
        model.merge_process(&table, &[&u]);
        assert_eq!(model.nodes.len(), DEPTH as usize);
        // A chain, parents first, every node seen in the one unit.
        for (i, n) in model.nodes.iter().enumerate() {
            assert_eq!(n.parent, i.checked_sub(1).map(|p| p as u32), "node {i}");
            assert_eq!(n.p_sum, 1.0, "node {i}");
        }
        let (score, diffs) = score_tree(&model, &table, &u, Scoring::Nodes);
        assert_eq!((score, diffs.len()), (0.0, 0));

        // Half the depth: the missing half is reported, its paths shortened
        // to the frames nearest each node.
        let half = unit(u.nodes[..DEPTH as usize / 2].to_vec());
        let (score, diffs) = score_tree(&model, &table, &half, Scoring::Nodes);
        assert!(score > 0.0);
        assert_eq!(
            diffs.len(),
            1,
            "only the first missing node is under a common parent"
        );
        let path = &diffs[0].path;
        assert!(
            path.starts_with("… > ") && path.split(" > ").count() == DISPLAY_FRAMES + 1,
            "{}",
            &path[..path.len().min(200)]
        );
    }

    /// The order nodes enter a model depends on their paths, not on the
    /// order the process met them.
    #[test]
    fn learned_node_order_does_not_depend_on_encounter_order() {
        let learn = |paths: &[&[&str]]| {
            let mut table = NodeTable::default();
            let mut nodes = Vec::new();
            for path in paths {
                let mut parent = NodeTable::ROOT;
                for f in *path {
                    let key = table.key(NodeKey {
                        site: String::new(),
                        callee: (*f).to_string(),
                    });
                    parent = table.child(parent, key);
                    nodes.push(parent);
                }
            }
            nodes.sort_unstable();
            nodes.dedup();
            let mut model = CallTreeModel::default();
            model.merge_process(&table, &[&unit(nodes)]);
            model
                .nodes
                .iter()
                .map(|n| (n.parent, n.callee.clone()))
                .collect::<Vec<_>>()
        };
        let a = learn(&[&["main", "b", "y"], &["main", "a", "x"], &["init"]]);
        let b = learn(&[&["init"], &["main", "a", "x"], &["main", "b", "y"]]);
        assert_eq!(a, b);
        let callees: Vec<&str> = a.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(callees, ["init", "main", "a", "b", "x", "y"]);
    }

    /// Successions from a file are input: counts near u64::MAX merge
    /// without overflow, and more than [`MAX_SUCCESSIONS`] are cut to it
    /// with the order then unknown.
    #[test]
    fn successions_from_a_file_are_bounded() {
        let mut table = NodeTable::default();
        let key = table.key(NodeKey {
            site: String::new(),
            callee: "serve".into(),
        });
        let u = unit(vec![table.child(NodeTable::ROOT, key)]);
        let mut tree = CallTreeModel::default();
        tree.merge_process(&table, &[&u, &u]);
        for s in &mut tree.successions {
            s.units = u64::MAX;
        }
        let mut merged = tree.clone();
        merged.prepare();
        merged.merge(&tree);
        assert!(merged.successions.iter().all(|s| s.units == u64::MAX));

        let mut big = tree.clone();
        big.successions = (0..MAX_SUCCESSIONS as u32 + 10)
            .map(|i| Succession {
                before: [NO_UNIT, 0],
                next: if i % 2 == 0 { 0 } else { OTHER_BEHAVIOUR },
                units: 2,
            })
            .collect();
        big.prepare();
        assert_eq!(big.successions.len(), MAX_SUCCESSIONS);
        assert!(!big.order_known());
    }
}
