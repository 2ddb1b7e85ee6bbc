//! How high normal units score: cross-validation over the learned runs.
//!
//! The papers rank units by score and leave the cut to the operator. But
//! trees differ in how much normal units vary: a handler that serves many
//! kinds of request merges them into one tree of low probabilities, so its
//! normal units score higher than a finalizer that never varies. Each run is
//! held out in turn, the others learned, and every held-out unit scored
//! against its tree; the highest score per tree is that tree's normal range,
//! stored in the model. A trial unit above it behaves as no normal unit did
//! ([`super::UnitScore::anomalous`]); the earliest such unit is where a fault
//! first showed.

use std::collections::HashMap;

use crate::{
    model::{GlobalModel, NormalRange},
    units::{ProcessUnits, UnitKind},
};

use super::{
    Scoring, score_tree,
    suspect::{Sequences, match_behaviour, out_of_order},
};

/// A held-out process's units of one tree: how many had each learned
/// behaviour, and how many had none.
type Deviations = (HashMap<u32, u32>, u32);

/// Folds at most: beyond this each fold learns most of the runs anyway.
const MAX_FOLDS: usize = 5;

/// What [`calibrate`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calibration {
    /// Folds (each learned without some runs and scored them).
    pub folds: usize,
    /// Held-out units scored.
    pub units: u64,
    /// Trees of `model` that received a normal range.
    pub trees: usize,
}

/// Sets the normal range of every tree of `model`, which must have been
/// learned from `base` (a model merged into, or none) plus `runs` (one entry
/// per capture, its decomposed processes): each fold learns `base` and the
/// runs outside it and scores the runs inside it. Needs two runs, or one run
/// and a base; otherwise nothing is calibrated (`folds` 0).
pub fn calibrate(
    model: &mut GlobalModel,
    base: Option<&GlobalModel>,
    runs: &[Vec<ProcessUnits>],
) -> Calibration {
    let folds = if base.is_some() || runs.len() >= 2 {
        runs.len().min(MAX_FOLDS)
    } else {
        0
    };
    let mut ranges: HashMap<(&[String], UnitKind, &str), NormalRange> = HashMap::new();
    let mut units = 0;
    for fold in 0..folds {
        let mut learned = base
            .cloned()
            .unwrap_or_else(|| GlobalModel::new(model.variant));
        for (i, run) in runs.iter().enumerate() {
            if i % folds != fold {
                for p in run {
                    learned.learn(p);
                }
            }
        }
        for (i, run) in runs.iter().enumerate() {
            if i % folds != fold {
                continue;
            }
            for p in run {
                let group = learned.group(&p.signature);
                // Per tree: this process's units by learned behaviour, and
                // its units no learned one matched.
                let mut per_tree: HashMap<(UnitKind, &str), Deviations> = HashMap::new();
                let mut sequences = Sequences::default();
                // A unit cut by the end of its thread's trace is judged
                // only by its calls: it widens no range.
                for u in p.units.iter().filter(|u| !u.cut) {
                    let key = (u.kind, u.model_key());
                    let tree = group.and_then(|g| g.tree(u.kind, u.model_key()));
                    let range = ranges
                        .entry((&p.signature, u.kind, u.model_key()))
                        .or_default();
                    // No group or tree: the trial would score 1 (000 §3.1).
                    let (nodes, edges) = match tree {
                        Some(tree) => (
                            score_tree(tree, &p.nodes, u, Scoring::Nodes).0,
                            score_tree(tree, &p.nodes, u, Scoring::Edges).0,
                        ),
                        None => (1.0, 1.0),
                    };
                    units += 1;
                    range.add(nodes, edges);
                    if !u.open.is_empty() {
                        range.open += 1;
                    }
                    let entry = per_tree.entry(key).or_default();
                    let seen = tree.map(|t| (t, match_behaviour(t, &p.nodes, u).id));
                    if let Some((t, id)) = seen {
                        let before = sequences.before(u);
                        sequences.push(u, id);
                        if out_of_order(t, before, id, u).is_some() {
                            range.out_of_order += 1;
                        }
                    }
                    match seen {
                        Some((_, Some(id))) => *entry.0.entry(id).or_default() += 1,
                        _ => {
                            range.novel += 1;
                            entry.1 += 1;
                        }
                    }
                }
                for ((kind, key), (by_behaviour, novel)) in per_tree {
                    let tree = group.and_then(|g| g.tree(kind, key));
                    // As the report counts them (`report::repeated`):
                    // beyond the most, and the largest share, of a
                    // learned process.
                    let total = novel + by_behaviour.values().sum::<u32>();
                    let excess: u32 = by_behaviour
                        .iter()
                        .map(|(id, n)| {
                            let beyond = tree
                                .and_then(|t| t.behaviours.get(*id as usize))
                                .map_or(*n, |b| b.beyond(*n, total));
                            if beyond > 0 { *n } else { 0 }
                        })
                        .sum();
                    let range = ranges.entry((&p.signature, kind, key)).or_default();
                    range.deviating_per_process = range.deviating_per_process.max(novel + excess);
                }
            }
        }
    }
    let mut trees = 0;
    for ((signature, kind, key), range) in ranges {
        let tree = model
            .groups
            .iter_mut()
            .find(|g| g.signature.as_slice() == signature)
            .and_then(|g| g.tree_mut(kind, key));
        if let Some(tree) = tree {
            tree.normal = Some(range);
            trees += 1;
        }
    }
    Calibration {
        folds,
        units,
        trees,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        score::score_processes,
        units::{ConnectionKey, NodeKey, NodeTable, Unit, Variant},
    };

    /// A process whose handler units (one connection) call the given paths
    /// of callee names, one unit per entry.
    fn process(pid: u32, units: &[&[&[&str]]]) -> ProcessUnits {
        let mut table = NodeTable::default();
        let units = units
            .iter()
            .enumerate()
            .map(|(i, paths)| {
                let mut nodes = Vec::new();
                for path in *paths {
                    let mut parent = NodeTable::ROOT;
                    for name in *path {
                        let key = table.key(NodeKey {
                            site: format!("site_of_{name}"),
                            callee: name.to_string(),
                        });
                        parent = table.child(parent, key);
                        nodes.push(parent);
                    }
                }
                nodes.sort_unstable();
                nodes.dedup();
                Unit {
                    first_ns: vec![i as u64 * 10; nodes.len()],
                    kind: UnitKind::Handler,
                    tid: pid,
                    start_ns: i as u64 * 10,
                    end_ns: i as u64 * 10 + 5,
                    nodes,
                    connection: Some(ConnectionKey("listen".into())),
                    fd: Some(4),
                    peer: None,
                    entries: (0, 0),
                    role: "main".into(),
                    open: Vec::new(),
                    exited: false,
                    cut: false,
                    peer_ended_ns: None,
                }
            })
            .collect();
        ProcessUnits {
            pid,
            comm: "d".into(),
            host: "h".into(),
            signature: vec!["listen".into()],
            nodes: table,
            units,
            ended: None,
        }
    }

    const GET: &[&[&str]] = &[&["serve", "recv"], &["serve", "get"]];
    const PUT: &[&[&str]] = &[
        &["serve", "recv"],
        &["serve", "put"],
        &["serve", "put", "write"],
    ];
    const CLOSE: &[&[&str]] = &[&["serve", "recv"], &["serve", "deregister"]];

    /// `units` `k` times over: enough learned units (MIN_LEARNED_UNITS) for
    /// what none of them did to count.
    fn times<'a>(units: &[&'a [&'a [&'a str]]], k: usize) -> Vec<&'a [&'a [&'a str]]> {
        (0..k).flat_map(|_| units.iter().copied()).collect()
    }

    fn learned(runs: &[Vec<ProcessUnits>]) -> GlobalModel {
        let mut model = GlobalModel::new(Variant::Paper000);
        for p in runs.iter().flatten() {
            model.learn(p);
        }
        model
    }

    fn scores(model: &GlobalModel, trial: &ProcessUnits) -> Vec<super::super::UnitScore> {
        use tracer_common::capture::{CaptureHeader, CaptureWriter};
        let w = CaptureWriter::new(Vec::new(), &CaptureHeader::default()).expect("writer");
        let capture = crate::decode::Capture::read(w.into_inner().as_slice()).expect("capture");
        score_processes(
            model,
            &capture,
            "trial",
            std::slice::from_ref(trial),
            Scoring::Nodes,
        )
    }

    /// Threads of two roles (a main thread and a worker) keep their own
    /// initializer trees, so each scores 0 against its own, where one tree
    /// of both would call each role's calls half-missing; a thread of a role
    /// the model never saw has no tree and scores 1, saying so.
    #[test]
    fn each_thread_role_has_its_own_trees() {
        let with_roles = |pid, roles: [&str; 2]| {
            let mut p = process(pid, &[GET, PUT]);
            for (u, role) in p.units.iter_mut().zip(roles) {
                u.kind = UnitKind::Initializer;
                u.role = role.into();
            }
            p
        };
        let two = ["main", "worker"];
        let model = learned(&[vec![with_roles(1, two)], vec![with_roles(2, two)]]);
        let keys: Vec<&String> = model.groups[0].initializer.keys().collect();
        assert_eq!(keys, ["main", "worker"]);
        let s = scores(&model, &with_roles(3, two));
        assert!(s.iter().all(|u| u.score == 0.0), "{s:#?}");

        let one = ["main", "main"];
        let mixed = learned(&[vec![with_roles(1, one)], vec![with_roles(2, one)]]);
        let s = scores(&mixed, &with_roles(3, one));
        assert!(s.iter().all(|u| u.score >= 0.2), "one tree of both: {s:#?}");

        let s = scores(&model, &with_roles(4, ["main", "helper"]));
        let helper = s.iter().find(|u| u.role == "helper").expect("scored");
        assert_eq!(helper.score, 1.0);
        assert!(helper.reason.contains("role 'helper'"), "{}", helper.reason);
    }

    /// A handler serving two kinds of request mixes them into one tree, so
    /// its normal units score above 0; the range holds them, and a unit that
    /// makes a call no normal unit made lies above it although its score is
    /// lower than the tree's mix would suggest.
    #[test]
    fn the_normal_range_holds_normal_units_and_not_new_behaviour() {
        let runs: Vec<Vec<ProcessUnits>> = (0..3)
            .map(|i| vec![process(10 + i, &times(&[GET, PUT], 10))])
            .collect();
        let mut model = learned(&runs);
        let c = calibrate(&mut model, None, &runs);
        assert_eq!((c.folds, c.units, c.trees), (3, 60, 1));
        let tree = model.groups[0]
            .tree(UnitKind::Handler, "listen")
            .expect("the handler tree");
        let range = tree.normal.expect("calibrated");
        assert!(range.nodes > 0.0 && range.nodes < 1.0, "{range:?}");
        assert_eq!(range.units, 60);

        let normal = scores(&model, &process(20, &[PUT, GET]));
        assert!(
            normal
                .iter()
                .all(|s| !s.anomalous && s.normal == Some(range.nodes)),
            "{normal:#?}"
        );
        let faulty = scores(&model, &process(21, &[GET, CLOSE]));
        let close = faulty.iter().find(|s| s.start_ns == 10).expect("unit 2");
        assert!(close.anomalous, "{close:#?}");
        assert!(
            !faulty
                .iter()
                .find(|s| s.start_ns == 0)
                .expect("unit 1")
                .anomalous
        );
    }

    /// A behaviour seen in one run only is outside the model of the others:
    /// held out, it scores high, and the range widens to it (such a tree
    /// flags little until more runs are learned).
    #[test]
    fn a_behaviour_of_one_run_widens_the_range_to_the_top() {
        let runs = vec![
            vec![process(1, &[GET, GET])],
            vec![process(2, &[GET, GET])],
            vec![process(3, &[GET, PUT])],
        ];
        let mut model = learned(&runs);
        calibrate(&mut model, None, &runs);
        let range = model.groups[0].handlers["listen"]
            .normal
            .expect("calibrated");
        assert!(range.nodes > 0.3, "{range:?}");
    }

    /// One capture alone cannot be held out; with a model to merge into it
    /// can, and a later merge drops the range (the tree changed).
    #[test]
    fn one_capture_needs_a_base_and_merging_drops_the_range() {
        let one = vec![vec![process(1, &times(&[GET, PUT], 30))]];
        let mut model = learned(&one);
        assert_eq!(calibrate(&mut model, None, &one).folds, 0);
        assert!(model.groups[0].handlers["listen"].normal.is_none());
        // Uncalibrated: no range, but a call no learned unit made still counts.
        let close = scores(&model, &process(2, &[CLOSE, PUT]));
        assert!(close.iter().all(|s| s.normal.is_none()), "{close:#?}");
        let flags: Vec<(u64, bool)> = close.iter().map(|s| (s.start_ns, s.anomalous)).collect();
        assert!(
            flags.contains(&(0, true)) && flags.contains(&(10, false)),
            "{flags:?}"
        );

        let base = model.clone();
        let more = vec![vec![process(3, &times(&[GET, PUT], 30))]];
        for p in more.iter().flatten() {
            model.learn(p);
        }
        let c = calibrate(&mut model, Some(&base), &more);
        assert_eq!((c.folds, c.trees), (1, 1));
        assert!(model.groups[0].handlers["listen"].normal.is_some());

        model.merge(&base);
        assert!(model.groups[0].handlers["listen"].normal.is_none());
    }

    /// A call that every learned unit made whenever it made the caller is
    /// missed: anomalous whatever the score (the paper's Δ = p = 1), even
    /// uncalibrated; but not in a unit that never completed, whose missing
    /// calls are the truncation's.
    #[test]
    fn a_call_every_normal_unit_made_and_this_one_skipped_is_anomalous() {
        use crate::score::Evidence;
        let runs: Vec<Vec<ProcessUnits>> = (0..3)
            .map(|i| vec![process(10 + i, &times(&[GET, PUT], 10))])
            .collect();
        let model = learned(&runs);
        const PUT_UNLOGGED: &[&[&str]] = &[&["serve", "recv"], &["serve", "put"]];
        let s = scores(&model, &process(20, &[PUT_UNLOGGED]));
        let skipped = s[0].evidence.iter().find_map(|e| match e {
            Evidence::Skipped { paths, learned } => Some((paths.clone(), *learned)),
            _ => None,
        });
        assert_eq!(
            skipped,
            Some((
                vec!["serve@site_of_serve > put@site_of_put > write@site_of_write".to_string()],
                30
            )),
            "{:#?}",
            s[0]
        );
        assert!(s[0].anomalous && s[0].score < 0.5);

        let mut open = process(21, &[PUT_UNLOGGED]);
        open.units[0].open = vec![open.units[0].nodes[0]];
        let s = scores(&model, &open);
        assert!(
            !s[0]
                .evidence
                .iter()
                .any(|e| matches!(e, Evidence::Skipped { .. })),
            "{:#?}",
            s[0]
        );
    }

    /// Normal units either receive and handle, or close: each call has
    /// p < 1, so a unit that does neither skips nothing the model says is
    /// certain, but no learned unit had its call paths together, and
    /// held-out normal units always matched a behaviour of another run: it
    /// is a new behaviour, with the nearest normal one named.
    #[test]
    fn a_combination_no_normal_unit_had_is_anomalous_where_held_out_units_always_matched() {
        use crate::score::Evidence;
        const HANDLED: &[&[&str]] = &[&["serve", "recv"], &["serve", "handle"]];
        const CLOSED: &[&[&str]] = &[&["serve", "close"]];
        const NEITHER: &[&[&str]] = &[&["serve", "recv"]];
        let runs: Vec<Vec<ProcessUnits>> = (0..4)
            .map(|i| {
                vec![process(
                    10 + i,
                    &times(&[HANDLED, HANDLED, HANDLED, CLOSED], 4),
                )]
            })
            .collect();
        let mut model = learned(&runs);
        calibrate(&mut model, None, &runs);
        let range = model.groups[0].handlers["listen"]
            .normal
            .expect("calibrated");
        assert_eq!((range.novel, range.deviating_per_process), (0, 0));
        let s = scores(&model, &process(20, &[HANDLED, NEITHER]));
        let neither = s.iter().find(|u| u.start_ns == 10).expect("unit 2");
        assert_eq!(neither.evidence, [Evidence::NewBehaviour { learned: 64 }]);
        let near = neither
            .behaviour
            .as_ref()
            .and_then(|b| b.nearest.clone())
            .expect("the nearest behaviour");
        assert_eq!(near.units, 48);
        assert_eq!(
            near.missing,
            ["serve@site_of_serve > handle@site_of_handle"]
        );
        assert!(
            s.iter()
                .find(|u| u.start_ns == 0)
                .is_some_and(|u| !u.anomalous)
        );
    }

    /// A unit dated by its start would be where a fault began, but a
    /// handler unit runs until the next receive on a socket: one that made
    /// a normal request and then forwarded pipe output for a long time
    /// before a close came may start long before the fault. A new
    /// combination is dated when its calls stopped fitting every learned
    /// behaviour (here the close, after the request and the forwarding that
    /// normal units made together); a unit that only lacks calls, by its
    /// end. The nearest behaviour named is the one that lacks only the
    /// close.
    #[test]
    fn a_new_combination_is_dated_when_it_stopped_fitting_every_learned_behaviour() {
        use crate::score::Evidence;
        const FORWARD: &[&[&str]] = &[&["serve", "recv"], &["serve", "get"], &["forward", "write"]];
        const EOF: &[&[&str]] = &[&["serve", "recv"], &["forward", "deregister"]];
        const FORWARD_EOF: &[&[&str]] = &[
            &["serve", "recv"],
            &["serve", "get"],
            &["forward", "write"],
            &["forward", "deregister"],
        ];
        const RECV_ONLY: &[&[&str]] = &[&["serve", "recv"]];
        let runs: Vec<Vec<ProcessUnits>> = (0..4)
            .map(|i| vec![process(10 + i, &times(&[GET, FORWARD, GET, EOF], 4))])
            .collect();
        let mut model = learned(&runs);
        calibrate(&mut model, None, &runs);

        let mut trial = process(20, &[FORWARD_EOF, RECV_ONLY]);
        let table = trial.nodes.clone();
        let eof = &mut trial.units[0];
        eof.end_ns = 100;
        for (n, t) in eof.nodes.iter().zip(eof.first_ns.iter_mut()) {
            let path = table.path_string(*n);
            *t = if path.contains("deregister") {
                90
            } else if path.contains("forward") {
                50
            } else {
                0
            };
        }
        let lacking = &mut trial.units[1];
        lacking.end_ns = 200;

        let s = scores(&model, &trial);
        let eof = s.iter().find(|u| u.start_ns == 0).expect("unit 1");
        assert!(
            matches!(eof.evidence.as_slice(), [Evidence::NewBehaviour { .. }]),
            "{eof:#?}"
        );
        assert_eq!(eof.deviated_wall_ns - eof.wall_ns, 90, "{eof:#?}");
        // Named by the behaviour that lacks only the close, not by the more
        // frequent one that lacks the forwarding with it.
        let near = eof
            .behaviour
            .as_ref()
            .and_then(|b| b.nearest.clone())
            .expect("the nearest behaviour");
        assert_eq!(near.units, 16, "{near:#?}");
        assert_eq!(
            near.extra,
            ["forward@site_of_forward > deregister@site_of_deregister"]
        );
        let lacking = s.iter().find(|u| u.start_ns == 10).expect("unit 2");
        assert!(
            matches!(lacking.evidence.as_slice(), [Evidence::NewBehaviour { .. }]),
            "{lacking:#?}"
        );
        assert_eq!(
            lacking.deviated_wall_ns - lacking.wall_ns,
            190,
            "{lacking:#?}"
        );
    }

    /// A node's probability is the mean over the process models that made
    /// its caller: a process of the group that never made the caller does
    /// not pull it down (000 §2.4, the mean of the original nodes); learned
    /// in two parts and merged, the tree, its probabilities and its
    /// behaviours are those learned at once.
    #[test]
    fn probabilities_are_over_the_processes_that_made_the_caller_and_merge() {
        let a = process(1, &[PUT, PUT]);
        let b = process(2, &[CLOSE]);
        let whole = learned(&[vec![a.clone(), b.clone()]]);
        let tree = &whole.groups[0].handlers["listen"];
        let write = tree
            .canonical()
            .into_iter()
            .find(|(path, _)| path.ends_with("write@site_of_write"))
            .expect("write");
        assert_eq!(write.1, 1.0, "{:?}", tree.canonical());
        let recv = tree
            .canonical()
            .into_iter()
            .find(|(path, _)| path.ends_with("recv@site_of_recv"))
            .expect("recv");
        assert_eq!(recv.1, 1.0);

        let mut merged = learned(&[vec![a]]);
        merged.merge(&learned(&[vec![b]]));
        let m = &merged.groups[0].handlers["listen"];
        assert_eq!(m.canonical(), tree.canonical());
        let behaviours = |t: &crate::model::CallTreeModel| {
            let mut out: Vec<(Vec<String>, u64, u32)> = t
                .behaviours
                .iter()
                .map(|b| {
                    let mut paths: Vec<String> =
                        b.nodes.iter().map(|n| t.path_string(*n)).collect();
                    paths.sort();
                    (paths, b.units, b.max_per_process)
                })
                .collect();
            out.sort();
            out
        };
        assert_eq!(behaviours(m), behaviours(tree));
        assert_eq!(
            behaviours(tree)
                .iter()
                .map(|b| (b.1, b.2))
                .collect::<Vec<_>>()
                .len(),
            2
        );
    }

    /// An initializer (one unit per thread) that took a path none of the
    /// few learned initializers took (a connect retried at start-up) is
    /// noted, not anomalous, while its tree holds fewer than
    /// MIN_LEARNED_UNITS units; the report says nothing stands out and
    /// why. So is a new path in a handler tree as small (a listening socket
    /// that accepts once per peer). One that never completed still is
    /// anomalous, and with enough learned units the new path counts again.
    #[test]
    fn a_new_path_in_a_tree_of_few_learned_units_is_noted_not_anomalous() {
        use crate::score::{Evidence, MIN_LEARNED_UNITS, Ranking, ScoreReport, Verdict};
        let init = |pid: u32, paths: &[&[&[&str]]]| {
            let mut p = process(pid, paths);
            for u in &mut p.units {
                u.kind = UnitKind::Initializer;
            }
            p
        };
        let report = |units| {
            ScoreReport::new(
                Variant::Paper000,
                Scoring::Nodes,
                Ranking::Evidence,
                &["trial".to_string()],
                units,
            )
        };
        let runs = |n: u32| -> Vec<Vec<ProcessUnits>> {
            (0..n).map(|i| vec![init(10 + i, &[GET])]).collect()
        };
        let few = runs(8);
        let mut model = learned(&few);
        calibrate(&mut model, None, &few);
        assert_eq!(model.groups[0].initializer["main"].units, 8);

        let s = scores(&model, &init(30, &[CLOSE]));
        assert!(!s[0].anomalous, "{:#?}", s[0]);
        assert!(
            matches!(
                s[0].unsure.as_slice(),
                [Evidence::NewCall { learned: 8, .. }, ..]
            ),
            "{:#?}",
            s[0].unsure
        );
        let r = report(s);
        assert_eq!(r.verdict, Verdict::NothingStandsOut);
        assert!(
            r.summary
                .contains("1 unit(s) did what no learned unit of their tree did")
                && r.summary.contains("never in 8 learned units"),
            "{}",
            r.summary
        );

        // A handler tree as small (one accept per peer) is no surer.
        let handlers: Vec<Vec<ProcessUnits>> =
            (0..4).map(|i| vec![process(40 + i, &[GET, GET])]).collect();
        let mut small = learned(&handlers);
        calibrate(&mut small, None, &handlers);
        let s = scores(&small, &process(50, &[CLOSE]));
        assert!(
            !s[0].anomalous
                && matches!(
                    s[0].unsure.as_slice(),
                    [Evidence::NewCall { learned: 8, .. }, ..]
                ),
            "{:#?}",
            s[0]
        );

        let mut hung = init(31, &[CLOSE]);
        hung.units[0].open = vec![hung.units[0].nodes[0]];
        let s = scores(&model, &hung);
        assert!(
            s[0].anomalous && matches!(s[0].evidence.as_slice(), [Evidence::Open { .. }]),
            "{:#?}",
            s[0]
        );

        let many = runs(MIN_LEARNED_UNITS as u32);
        let mut model = learned(&many);
        calibrate(&mut model, None, &many);
        let s = scores(&model, &init(32, &[CLOSE]));
        assert!(
            s[0].anomalous
                && s[0].unsure.is_empty()
                && matches!(
                    s[0].evidence.as_slice(),
                    [Evidence::NewCall { learned: 60, .. }, ..]
                ),
            "{:#?}",
            s[0]
        );
    }

    /// A request routed to the wrong handler makes a unit just like the
    /// other handler's normal ones; only its place among the connection's
    /// units is new. Requests come in a fixed cycle (put, get, put, stats):
    /// a get where the cycle has a stats, after a put that followed a get,
    /// is out of order, where none of the learned units that followed
    /// (get, put) did so and held-out normal runs never came out of order.
    /// The same behaviours in the learned order are not; nor is anything
    /// where a learned order was seen only once, or in a model of version
    /// 3, which knows no order.
    #[test]
    fn a_normal_unit_in_an_order_no_normal_run_took_is_out_of_order() {
        use crate::score::Evidence;
        const STATS: &[&[&str]] = &[&["serve", "recv"], &["serve", "stats"]];
        let runs: Vec<Vec<ProcessUnits>> = (0..4)
            .map(|i| vec![process(10 + i, &times(&[PUT, GET, PUT, STATS], 20))])
            .collect();
        let mut model = learned(&runs);
        calibrate(&mut model, None, &runs);
        let tree = &model.groups[0].handlers["listen"];
        assert_eq!(tree.normal.expect("calibrated").out_of_order, 0);
        assert!(tree.order_known());

        let normal = scores(&model, &process(20, &[PUT, GET, PUT, STATS, PUT, GET]));
        assert!(normal.iter().all(|u| !u.anomalous), "{normal:#?}");

        // put, get, put, get: the fourth unit is the wrong branch.
        let wrong = scores(&model, &process(21, &[PUT, GET, PUT, GET, PUT, GET]));
        let anomalous: Vec<_> = wrong.iter().filter(|u| u.anomalous).collect();
        assert_eq!(anomalous.len(), 2, "{anomalous:#?}");
        let first = anomalous.iter().min_by_key(|u| u.start_ns).expect("one");
        assert_eq!(first.start_ns, 30);
        match first.evidence.as_slice() {
            [
                Evidence::OutOfOrder {
                    after,
                    this,
                    usual,
                    followed,
                },
            ] => {
                assert_eq!(after, &["get", "put, write"]);
                assert_eq!(this, "get");
                assert_eq!(usual, "stats");
                // Every (get, put) pair of the 4 learned runs was followed
                // by a stats: 20 a run.
                assert_eq!(*followed, 80);
            }
            other => panic!("{other:#?}"),
        }

        // One learned run that once took another order (a succession seen
        // only once): by Good-Turing new orders keep coming, and the tree's
        // order is no evidence.
        let mut varied = runs.clone();
        varied.push(vec![process(15, &[PUT, GET, PUT, GET, PUT, STATS])]);
        let mut once = learned(&varied);
        calibrate(&mut once, None, &varied);
        assert!(!once.groups[0].handlers["listen"].order_known());
        let s = scores(&once, &process(23, &[PUT, GET, PUT, GET, PUT, GET]));
        assert!(
            !s.iter().any(|u| u
                .evidence
                .iter()
                .any(|e| matches!(e, Evidence::OutOfOrder { .. }))),
            "{s:#?}"
        );

        // A model written before the order was kept merges into one that
        // then knows none: no order evidence.
        let mut old = model.clone();
        for t in old.groups[0].handlers.values_mut() {
            t.successions.clear();
            t.unlisted_successions = 0;
        }
        let mut merged = GlobalModel::new(Variant::Paper000);
        merged.merge(&old);
        merged.merge(&model);
        assert!(!merged.groups[0].handlers["listen"].order_known());
        let mut plain = old.clone();
        for t in plain.groups[0].handlers.values_mut() {
            t.prepare();
        }
        let s = scores(&plain, &process(22, &[PUT, GET, PUT, GET, PUT, GET]));
        assert!(s.iter().all(|u| !u.anomalous), "{s:#?}");
    }

    /// Where requests come in a random mix, a rare one (1 in 16) that has
    /// not yet followed some pair of units is chance, not order: 20 fresh
    /// runs of the mix raise nothing. And where held-out normal runs came
    /// out of order, the order of that tree is not used at all.
    #[test]
    fn order_counts_only_where_normal_units_keep_it() {
        use crate::score::Evidence;
        const STATS: &[&[&str]] = &[&["serve", "recv"], &["serve", "stats"]];
        // A pseudo-random mix of put and get, a stats rarely.
        let mix = |seed: u64, n: usize| {
            let mut x = seed;
            (0..n)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    match (x >> 33) % 16 {
                        0 => STATS,
                        k if k % 2 == 0 => PUT,
                        _ => GET,
                    }
                })
                .collect::<Vec<_>>()
        };
        let runs: Vec<Vec<ProcessUnits>> = (0..4)
            .map(|i| vec![process(10 + i, &mix(u64::from(i), 80))])
            .collect();
        let mut model = learned(&runs);
        calibrate(&mut model, None, &runs);
        for seed in 100..120 {
            let s = scores(&model, &process(30, &mix(seed, 80)));
            assert!(
                !s.iter().any(|u| u
                    .evidence
                    .iter()
                    .any(|e| matches!(e, Evidence::OutOfOrder { .. }))),
                "seed {seed}: {:#?}",
                s.iter().filter(|u| u.anomalous).collect::<Vec<_>>()
            );
        }

        // Learned in a fixed cycle, but one held-out run breaks it: the
        // tree's order is not evidence.
        let mut runs: Vec<Vec<ProcessUnits>> = (0..4)
            .map(|i| vec![process(10 + i, &times(&[PUT, GET, PUT, STATS], 20))])
            .collect();
        runs.push(vec![process(14, &times(&[PUT, GET, PUT, GET], 20))]);
        let mut model = learned(&runs);
        calibrate(&mut model, None, &runs);
        let tree = &model.groups[0].handlers["listen"];
        assert!(tree.normal.expect("calibrated").out_of_order > 0);
        let s = scores(&model, &process(21, &[PUT, GET, PUT, STATS, STATS, PUT]));
        assert!(
            !s.iter().any(|u| u
                .evidence
                .iter()
                .any(|e| matches!(e, Evidence::OutOfOrder { .. }))),
            "{s:#?}"
        );
    }

    /// The records of a server (pid 1, listening on port 7000, accepting
    /// on descriptor 4) and a client (pid 2, connected from port 40001 on
    /// descriptor 3) that closes its end at `close_ns`.
    fn connected_capture(close_ns: u64) -> crate::decode::Capture {
        use tracer_common::{
            capture::{CaptureHeader, CaptureWriter},
            record::{Header, Pod as _, SockAddr, Syscall, kind},
            syscall::nr,
        };
        let inet = |port: u16| SockAddr {
            family: 2,
            port_be: port.to_be(),
            _pad: 0,
            addr: [127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        };
        let call =
            |t: u64, pid: u32, call: u32, fd: i32, ret: i64, addr: SockAddr, local: u16| Syscall {
                header: Header {
                    ts_ns: t + 1,
                    pid,
                    tid: pid,
                    kind: kind::SYSCALL,
                    size: size_of::<Syscall>() as u16,
                    cpu: 0,
                },
                enter_ns: t,
                nr: call,
                fd,
                ret,
                conn_port: local,
                addr,
                ..Default::default()
            };
        let records = [
            call(1, 1, nr::BIND, 3, 0, inet(7000), 0),
            call(2, 2, nr::CONNECT, 3, 0, inet(7000), 40001),
            // An accept that asked for no address: the kernel's peer port.
            call(3, 1, nr::ACCEPT, 3, 4, SockAddr::default(), 40001),
            call(close_ns, 2, nr::CLOSE, 3, 0, SockAddr::default(), 0),
        ];
        let bytes: Vec<u8> = records.iter().flat_map(|r| r.as_bytes().to_vec()).collect();
        let mut w = CaptureWriter::new(Vec::new(), &CaptureHeader::default()).expect("writer");
        w.write_records(&bytes).expect("records");
        crate::decode::Capture::read(w.into_inner().as_slice()).expect("capture")
    }

    /// A unit that found its connection ended by the other end, in a tree
    /// whose learned units never did, and deviated, is blamed on the
    /// process that closed the other end: that unit ranks first and the
    /// explanation says the peer closed first. Where learned units did see
    /// the other end close (a client that leaves), the deviation stays the
    /// receiver's own.
    #[test]
    fn a_deviation_after_the_other_end_closed_first_is_the_closers() {
        use crate::score::Evidence;
        const SEND: &[&[&str]] = &[&["client", "send"]];
        let client = |pid: u32, n: usize| {
            let mut p = process(pid, &times(&[SEND], n));
            p.signature = vec!["connect".into()];
            for u in &mut p.units {
                u.connection = Some(ConnectionKey("connect".into()));
                u.fd = Some(3);
            }
            p
        };
        // The server's last unit of each learned run: as in a trial that
        // ends early, or (`eof_learned`) found its client gone.
        let runs = |eof_learned: bool| -> Vec<Vec<ProcessUnits>> {
            (0..4)
                .map(|i| {
                    let mut server = process(1, &times(&[GET, PUT], 20));
                    if eof_learned && let Some(last) = server.units.last_mut() {
                        last.peer_ended_ns = Some(last.start_ns);
                    }
                    vec![server, client(2 + 10 * i, 10)]
                })
                .collect()
        };
        let trial = || {
            // The server's third unit finds the connection ended and calls
            // what no learned unit called; the client's second unit
            // (10..15) closed it at 12.
            let mut server = process(1, &[GET, PUT, CLOSE]);
            server.units[2].peer_ended_ns = Some(20);
            vec![server, client(2, 3)]
        };
        let capture = connected_capture(12);
        let score = |model: &GlobalModel| {
            let mut units = Vec::new();
            for p in trial() {
                units.extend(score_processes(
                    model,
                    &capture,
                    "trial",
                    std::slice::from_ref(&p),
                    Scoring::Nodes,
                ));
            }
            let both = trial();
            let together = score_processes(model, &capture, "trial", &both, Scoring::Nodes);
            (units, together)
        };

        let model = learned(&runs(false));
        assert_eq!(model.groups[0].handlers["listen"].peer_ended, Some(0));
        let (alone, together) = score(&model);
        // Scored one process at a time, the other end is not there.
        assert!(alone.iter().all(|u| u.ended_by.is_none()));
        let closer = together
            .iter()
            .find(|u| u.pid == 2 && u.start_ns == 10)
            .expect("the client's unit");
        assert!(closer.anomalous);
        assert!(matches!(
            closer.evidence.as_slice(),
            [Evidence::ClosedFirst {
                peer: 1,
                learned: 160,
                ..
            }]
        ));
        let receiver = together
            .iter()
            .find(|u| u.pid == 1 && u.start_ns == 20)
            .expect("the server's unit");
        assert_eq!(receiver.ended_by, Some(2));
        let report = super::super::ScoreReport::new(
            Variant::Paper000,
            Scoring::Nodes,
            super::super::Ranking::Evidence,
            &["trial".to_string()],
            together,
        );
        assert_eq!(report.first().map(|u| u.pid), Some(2));
        assert_eq!(report.units.first().map(|u| u.pid), Some(2));
        assert!(
            report
                .explanation
                .iter()
                .any(|l| l.contains("the peer pid 2 closed first")),
            "{:#?}",
            report.explanation
        );

        // Learned with the other end closing first: not evidence.
        let model = learned(&runs(true));
        assert_eq!(model.groups[0].handlers["listen"].peer_ended, Some(4));
        let (_, together) = score(&model);
        assert!(together.iter().all(|u| u.ended_by.is_none()));
        assert!(together.iter().filter(|u| u.pid == 2).all(|u| !u.anomalous));
        assert!(together.iter().any(|u| u.pid == 1 && u.anomalous));
    }

    /// A process that crashed (or exited with an error) as no learned
    /// process of its group did is named, at the unit it was in when it
    /// ended, even when every unit it ran behaves normally (the handler it
    /// crashed in not traced, as under an overhead budget). An ending the
    /// normal runs also showed, a signal others send, and a model that
    /// does not know how its processes ended say nothing.
    #[test]
    fn a_process_that_failed_as_no_learned_one_did_is_named() {
        use crate::score::Evidence;
        use tracer_common::record::ExitStatus;
        let ended = |status: Option<ExitStatus>| {
            let mut p = process(1, &times(&[GET, PUT], 40));
            p.ended = Some((1_000, status));
            p
        };
        let normal = |status| -> Vec<Vec<ProcessUnits>> {
            (0..4)
                .map(|_| vec![ended(status), process(2, &times(&[GET], 40))])
                .collect()
        };
        let segv = ExitStatus::Killed {
            signal: 11,
            core: false,
        };
        let crashed = |status| {
            let mut p = process(1, &[GET, PUT, GET]);
            // Inside the second unit (10..15).
            p.ended = Some((12, Some(status)));
            p
        };
        let model = learned(&normal(Some(ExitStatus::Exited(0))));
        assert_eq!(model.groups[0].failures, Some(Default::default()));
        let units = scores(&model, &crashed(segv));
        let died: Vec<_> = units.iter().filter(|u| u.anomalous).collect();
        assert_eq!(died.len(), 1, "{units:#?}");
        assert_eq!(died[0].start_ns, 10);
        assert!(matches!(
            died[0].evidence.as_slice(),
            [Evidence::Died { how, learned: 8, .. }] if how == "killed by SIGSEGV"
        ));
        let report = super::super::ScoreReport::new(
            Variant::Paper000,
            Scoring::Nodes,
            super::super::Ranking::Evidence,
            &["trial".to_string()],
            units,
        );
        assert_eq!(report.first().map(|u| u.pid), Some(1));
        assert!(
            report
                .explanation
                .iter()
                .any(|l| l.contains("killed by SIGSEGV: a failure of its own")),
            "{:#?}",
            report.explanation
        );
        // An error exit is a failure too; a kill by TERM is someone else's.
        assert!(
            scores(&model, &crashed(ExitStatus::Exited(1)))
                .iter()
                .any(|u| u.anomalous)
        );
        let term = ExitStatus::Killed {
            signal: 15,
            core: false,
        };
        assert!(scores(&model, &crashed(term)).iter().all(|u| !u.anomalous));
        // The normal runs' processes ended so too: nothing new.
        let model = learned(&normal(Some(segv)));
        assert_eq!(
            model.groups[0]
                .failures
                .as_ref()
                .map(|f| f["killed by SIGSEGV"]),
            Some(4)
        );
        assert!(scores(&model, &crashed(segv)).iter().all(|u| !u.anomalous));
        // Learned from captures that did not record how processes ended.
        let model = learned(&normal(None));
        assert_eq!(model.groups[0].failures, None);
        assert!(scores(&model, &crashed(segv)).iter().all(|u| !u.anomalous));
        // A model from before endings were kept reads without them.
        let mut old = serde_json::to_value(&model.groups[0]).expect("json");
        old.as_object_mut().expect("group").remove("failures");
        let old: crate::model::GroupModel = serde_json::from_value(old).expect("old group");
        assert_eq!(old.failures, None);
    }
}
