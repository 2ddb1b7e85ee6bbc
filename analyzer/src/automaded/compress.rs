//! Graph compression (004 §3.2, Figures 3–5).
//!
//! 1. Support reduction: an edge's support is the number of tasks of its
//!    equivalence class that have it; only edges present in every task of
//!    the class may be merged, so transitions seen in a few (possibly
//!    abnormal) tasks are never hidden.
//! 2. Local compression: a state is *interior* when it has one incoming
//!    and one outgoing edge, the outgoing one has probability 1, and both
//!    are fully supported. Loop heads (in-degree > 1), loop tails
//!    (out-degree > 1) and the first and last states are never interior,
//!    so the walk of Figure 5 that queues edges and merges the queue at
//!    heads, tails and the final state is one pass over the edges from
//!    every non-interior state along interior ones (O(edges)).
//!
//! A compressed edge keeps the key of its first original edge (unique in
//! the task, so two chains between the same end states stay apart), its
//! probability, and the sums of the communication and of the computation
//! normals (kept separate). [`CompressedTask::members`] maps it back to the
//! original edges for drill-down.

use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

use super::smm::{Edge, EdgeKey, Models, StateId, TaskModel, edge_ends};

/// One task's compressed graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompressedTask {
    /// Compressed edges sorted by key.
    pub edges: Vec<Edge>,
    /// Compressed edge key → original edge keys, in chain order (only for
    /// edges that merged more than one original edge).
    pub members: FxHashMap<EdgeKey, Vec<EdgeKey>>,
}

impl CompressedTask {
    /// The original edges behind compressed edge `key` (itself when it
    /// was not merged).
    pub fn originals(&self, key: EdgeKey) -> Vec<EdgeKey> {
        self.members.get(&key).cloned().unwrap_or_else(|| vec![key])
    }

    /// The last state of compressed edge `key`.
    pub fn end(&self, key: EdgeKey) -> StateId {
        let last = self.members.get(&key).and_then(|m| m.last()).copied();
        edge_ends(last.unwrap_or(key)).1
    }
}

/// Edges present in every task of each class: `classes[i]` is task i's
/// class (all zeros for one class).
pub fn supported(models: &Models, classes: &[u32]) -> FxHashMap<u32, FxHashSet<EdgeKey>> {
    let mut sizes: FxHashMap<u32, usize> = FxHashMap::default();
    let mut support: FxHashMap<(u32, EdgeKey), usize> = FxHashMap::default();
    for (i, t) in models.tasks.iter().enumerate() {
        let class = classes.get(i).copied().unwrap_or(0);
        *sizes.entry(class).or_default() += 1;
        for e in &t.edges {
            *support.entry((class, e.key)).or_default() += 1;
        }
    }
    let mut out: FxHashMap<u32, FxHashSet<EdgeKey>> = FxHashMap::default();
    for ((class, key), n) in support {
        if sizes.get(&class) == Some(&n) {
            out.entry(class).or_default().insert(key);
        }
    }
    out
}

/// Compresses one task's graph given its class's fully supported edges.
pub fn compress_task(task: &TaskModel, supported: &FxHashSet<EdgeKey>) -> CompressedTask {
    let edges = &task.edges;
    let mut indeg: FxHashMap<StateId, u32> = FxHashMap::default();
    let mut in_edge: FxHashMap<StateId, usize> = FxHashMap::default();
    let mut outdeg: FxHashMap<StateId, u32> = FxHashMap::default();
    for (i, e) in edges.iter().enumerate() {
        let (s, d) = edge_ends(e.key);
        *indeg.entry(d).or_default() += 1;
        in_edge.insert(d, i);
        *outdeg.entry(s).or_default() += 1;
    }
    // Edges are sorted by key, hence grouped by source: the out-edge of an
    // out-degree-1 state is found by binary search.
    let first_out = |s: StateId| -> Option<usize> {
        let i = edges.partition_point(|e| edge_ends(e.key).0 < s);
        (i < edges.len() && edge_ends(edges[i].key).0 == s).then_some(i)
    };
    let interior = |v: StateId| -> Option<usize> {
        if indeg.get(&v) != Some(&1) || outdeg.get(&v) != Some(&1) {
            return None;
        }
        let out = first_out(v)?;
        let inn = *in_edge.get(&v)?;
        (edges[out].prob >= 1.0
            && supported.contains(&edges[out].key)
            && supported.contains(&edges[inn].key))
        .then_some(out)
    };
    let mut used = vec![false; edges.len()];
    let mut out = Vec::with_capacity(edges.len());
    let mut members = FxHashMap::default();
    for (i, e) in edges.iter().enumerate() {
        if interior(edge_ends(e.key).0).is_some() {
            continue;
        }
        used[i] = true;
        let mut merged = *e;
        let mut chain = vec![e.key];
        let mut cur = edge_ends(e.key).1;
        while let Some(next) = interior(cur) {
            if used[next] {
                break;
            }
            used[next] = true;
            let n = &edges[next];
            merged.comm = merged.comm.plus(n.comm);
            merged.comp = merged.comp.plus(n.comp);
            chain.push(n.key);
            cur = edge_ends(n.key).1;
        }
        if chain.len() > 1 {
            members.insert(e.key, chain);
        }
        out.push(merged);
    }
    // A cycle of interior states has no way in: keep it as it is.
    for (i, e) in edges.iter().enumerate() {
        if !used[i] {
            out.push(*e);
        }
    }
    out.sort_unstable_by_key(|e| e.key);
    CompressedTask {
        edges: out,
        members,
    }
}

/// Compresses every task: support reduction per class, then local
/// compression.
pub fn compress(models: &Models, classes: &[u32]) -> Vec<CompressedTask> {
    let support = supported(models, classes);
    let empty = FxHashSet::default();
    models
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let class = classes.get(i).copied().unwrap_or(0);
            compress_task(t, support.get(&class).unwrap_or(&empty))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::automaded::smm::{Normal, SMM_VERSION, StateTable, edge_key};

    fn e(s: StateId, d: StateId, prob: f64, comm: f64, comp: f64) -> Edge {
        let n = |m: f64| Normal {
            mean: m,
            sd: m / 10.0,
        };
        Edge {
            key: edge_key(s, d),
            count: 1,
            prob,
            comm: n(comm),
            comp: n(comp),
        }
    }

    fn task(rank: u32, mut edges: Vec<Edge>) -> TaskModel {
        edges.sort_by_key(|e| e.key);
        TaskModel {
            rank,
            host: "h".into(),
            pid: rank,
            edges,
        }
    }

    /// Figure 3/4: 1→2→3→4 is a chain in every task, 4→5→4 is a loop, and
    /// one task also has 4→6→7 (unsupported, kept). Chains become one edge
    /// with summed parameters; the loop head 4 stays.
    #[test]
    fn chains_merge_loops_and_unsupported_edges_stay() {
        let common = || {
            vec![
                e(1, 2, 1.0, 10.0, 0.0),
                e(2, 3, 1.0, 0.0, 20.0),
                e(3, 4, 1.0, 30.0, 0.0),
                e(4, 5, 0.5, 0.0, 40.0),
                e(5, 4, 1.0, 50.0, 0.0),
            ]
        };
        let normal = task(0, {
            let mut v = common();
            v.push(e(4, 9, 0.5, 0.0, 1.0));
            v
        });
        let mut odd = common();
        odd.push(e(4, 6, 0.5, 0.0, 1.0));
        odd.push(e(6, 7, 1.0, 2.0, 0.0));
        let odd = task(1, odd);
        let models = Models {
            version: SMM_VERSION,
            states: StateTable::default(),
            tasks: vec![normal.clone(), normal, odd],
        };
        let c = compress(&models, &[]);
        let keys: Vec<EdgeKey> = c[0].edges.iter().map(|e| e.key).collect();
        assert_eq!(keys, vec![edge_key(1, 2), edge_key(4, 5), edge_key(4, 9)]);
        // The loop body 4→5→4 is one edge too; the head 4 stays.
        assert_eq!(c[0].end(edge_key(4, 5)), 4);
        let chain = &c[0].edges[0];
        assert_eq!((chain.comm.mean, chain.comp.mean), (40.0, 20.0));
        assert_eq!((chain.comm.sd, chain.comp.sd), (4.0, 2.0));
        assert_eq!(
            c[0].originals(edge_key(1, 2)),
            vec![edge_key(1, 2), edge_key(2, 3), edge_key(3, 4)]
        );
        assert_eq!(c[0].end(edge_key(1, 2)), 4);
        // The odd task's 4→6→7 is not in every task: not merged.
        assert!(c[2].edges.iter().any(|e| e.key == edge_key(6, 7)));
        // Round trip: every original edge is behind exactly one compressed edge.
        for (t, ct) in models.tasks.iter().zip(&c) {
            let mut back: Vec<EdgeKey> =
                ct.edges.iter().flat_map(|e| ct.originals(e.key)).collect();
            back.sort_unstable();
            let orig: Vec<EdgeKey> = t.edges.iter().map(|e| e.key).collect();
            assert_eq!(back, orig);
        }
    }
}
