//! The suspect score of a unit against its call-tree model.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::{
    decode::Capture,
    model::{CallTreeModel, GlobalModel},
    units::{NodeTable, ProcessUnits, Unit, UnitKind},
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
    /// Behaviour no normal run showed: no model to match at all, a call
    /// never made at that place in any learned unit (an unexpected node),
    /// or a score above the tree's normal range by more than
    /// [`NORMAL_MARGIN`] (calibrated trees only).
    #[serde(default)]
    pub anomalous: bool,
    /// Why: no group for the process, no model for the unit, or the nodes.
    pub reason: String,
    /// Contributions, largest Δ first (non-zero only).
    pub differences: Vec<Difference>,
}

/// How far above its tree's normal range a unit must score to be anomalous.
/// The range is the highest score of units held out of models learned from
/// fewer runs, so the same behaviour scores a few hundredths higher or lower
/// against the full model (measured on Hydra: up to 0.033 with 5 runs
/// learned, 0.025 with 8); a call no normal unit makes adds 1/terms, 0.05 or
/// more even in Hydra's large PMI handler tree.
pub const NORMAL_MARGIN: f64 = 0.03;

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
    let trial: HashSet<u32> = unit.nodes.iter().copied().collect();
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
    let _ = trial;
    diffs.retain(|d| d.delta > 0.0);
    diffs.sort_by(|a, b| {
        b.delta
            .total_cmp(&a.delta)
            .then_with(|| a.path.cmp(&b.path))
    });
    let score = if terms == 0 { 0.0 } else { sum / terms as f64 };
    (score, diffs)
}

/// Scores every unit of `processes` (decomposed from `capture`) against
/// `model`: 1 for a process with no matching group and for a unit with no
/// matching tree (000 §3.1). Ranked by [`rank`].
pub fn score_processes(
    model: &GlobalModel,
    capture: &Capture,
    name: &str,
    processes: &[ProcessUnits],
    scoring: Scoring,
) -> Vec<UnitScore> {
    let mut out = Vec::new();
    for p in processes {
        let group = model.group(&p.signature);
        for u in &p.units {
            let connection = u.connection.as_ref().map(|c| c.0.to_string());
            let (score, normal, reason, differences) = match group {
                None => (
                    1.0,
                    None,
                    "no process group with this signature in the model".to_string(),
                    Vec::new(),
                ),
                Some(g) => match g.tree(u.kind, u.model_key()) {
                    None => (
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
                    ),
                    Some(tree) => {
                        let (s, d) = score_tree(tree, &p.nodes, u, scoring);
                        let normal = tree.normal.map(|n| match scoring {
                            Scoring::Nodes => n.nodes,
                            Scoring::Edges => n.edges,
                        });
                        (s, normal, String::new(), d)
                    }
                },
            };
            let wall_ns = capture.header.clock.to_realtime(u.start_ns);
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
                capture: name.to_string(),
                role: u.role.to_string(),
                connection,
                peer: u.peer.as_deref().map(str::to_string),
                score,
                normal,
                // An unexpected call counts whatever the score: in a tree
                // that mixes many requests (a ring daemon's left-hand
                // handler, normal up to 0.375) a unit that closes the
                // connection instead scores only 0.259.
                anomalous: !reason.is_empty()
                    || differences
                        .iter()
                        .any(|d| d.kind == DifferenceKind::Unexpected)
                    || normal.is_some_and(|n| score > n + NORMAL_MARGIN),
                reason,
                differences,
            });
        }
    }
    rank(&mut out);
    out
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
    use crate::units::NodeKey;

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
}
