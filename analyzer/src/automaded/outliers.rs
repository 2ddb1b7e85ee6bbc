//! Abnormal tasks and abnormal edges (004 §3.3).
//!
//! * Clustering (§3.3.1): k-medoids ([`super::kmedoids`]: FasterPAM,
//!   initialized by PAM BUILD) on a constant-size deterministic sample of
//!   tasks, k chosen by the Bayesian information criterion (X-means form,
//!   one dimension: the distance to the medoid); every task is then
//!   assigned to its nearest medoid, its distance normalized by its
//!   cluster's standard deviation (root mean square distance to the
//!   medoid), and the top k reported. Clusters smaller than
//!   [`OutlierConfig::min_cluster`] are abnormal by construction (a fault
//!   creating its own cluster, §2): their tasks join the nearest larger
//!   cluster.
//! * Nearest neighbour (§3.3.2): each task's distance to the nearest of a
//!   constant-size deterministic random sample of tasks, the task itself
//!   excluded.
//! * Edge isolation (§3.3.3): the abnormal task's edges ranked by their
//!   contribution to its distance from its medoid (or summed over the
//!   sample); on compressed graphs, the flagged compressed edges are
//!   drilled down to the original edges, compared again, and ranked.
//!
//! Everything is O(n · s) dissimilarities for n tasks and sample size s
//! (plus O(s²) for clustering), spread over the machine's cores.

use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

use super::{
    compress::{CompressedTask, compress},
    dissim::{DissimConfig, PreparedEdge, contributions, dissimilarity_prepared, prepare},
    kmedoids,
    overlap::OverlapTable,
    smm::{Edge, EdgeKey, Models, Normal, edge_ends},
};

/// Version of the [`Analysis`] serde layout.
pub const ANALYSIS_VERSION: u32 = 1;

/// How abnormal tasks are found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// k-medoids clustering, k by BIC, distances normalized per cluster.
    #[default]
    Kmedoids,
    /// Nearest neighbour among a sample of tasks.
    Sample,
}

/// Analysis settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutlierConfig {
    /// Clustering or nearest neighbour.
    pub method: Method,
    /// Abnormal tasks to report (top-k).
    pub top: usize,
    /// Abnormal edges to report per abnormal task.
    pub top_edges: usize,
    /// Tasks sampled for clustering (the medoids come from them).
    pub cluster_sample: usize,
    /// Tasks sampled as nearest-neighbour candidates.
    pub nn_sample: usize,
    /// Largest k tried by BIC.
    pub max_k: usize,
    /// A fixed number of clusters instead of BIC (the paper: known from
    /// the application, e.g. 2 for master/workers, or from earlier phases).
    pub clusters: Option<usize>,
    /// Clusters with fewer tasks are merged into the nearest larger one.
    pub min_cluster: usize,
    /// Distances below this are noise to BIC (its variance is at least the
    /// square): without it, tasks that differ by timer jitter split into
    /// many tight clusters and an outlier can anchor one of its own.
    pub resolution: f64,
    /// Seed of the deterministic sampling (the same on every run).
    pub seed: u64,
    /// Compress graphs before task isolation (§3.2).
    pub compress: bool,
    /// Edge comparison.
    pub dissim: DissimConfig,
}

impl Default for OutlierConfig {
    fn default() -> Self {
        OutlierConfig {
            method: Method::Kmedoids,
            top: 5,
            top_edges: 5,
            cluster_sample: 128,
            nn_sample: 32,
            max_k: 8,
            clusters: None,
            min_cluster: 3,
            resolution: 0.5,
            seed: 0x5eed_0004,
            compress: true,
            dissim: DissimConfig::default(),
        }
    }
}

/// One task's place in the analysis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskScore {
    /// Index into [`Models::tasks`].
    pub task: usize,
    /// MPI rank.
    pub rank: u32,
    /// Host.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Cluster (k-medoids only).
    pub cluster: Option<usize>,
    /// Task index of its medoid or nearest sample.
    pub reference: usize,
    /// Dissimilarity to `reference`.
    pub distance: f64,
    /// `distance` over the cluster's standard deviation (k-medoids) or
    /// over the standard deviation of all nearest-neighbour distances.
    pub normalized: f64,
}

/// Time of an edge, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct EdgeTimes {
    /// P(destination | source).
    pub prob: f64,
    /// Transitions.
    pub count: u64,
    /// Communication time (ns).
    pub comm: Normal,
    /// Computation time (ns).
    pub comp: Normal,
}

impl From<&Edge> for EdgeTimes {
    fn from(e: &Edge) -> Self {
        EdgeTimes {
            prob: e.prob,
            count: e.count,
            comm: e.comm,
            comp: e.comp,
        }
    }
}

/// An abnormal edge of an abnormal task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AbnormalEdge {
    /// Source state id.
    pub from: u32,
    /// Destination state id.
    pub to: u32,
    /// Source state, symbolized.
    pub from_label: String,
    /// Destination state, symbolized.
    pub to_label: String,
    /// Contribution to the task's distance.
    pub contribution: f64,
    /// The task's edge (absent: the edge is only in the reference).
    pub task: Option<EdgeTimes>,
    /// The reference's edge (its medoid's, or the first sample's).
    pub reference: Option<EdgeTimes>,
}

/// A compressed edge flagged in the first round of edge isolation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompressedFlag {
    /// First state of the chain.
    pub from_label: String,
    /// Last state of the chain.
    pub to_label: String,
    /// Original edges merged.
    pub edges: usize,
    /// Contribution to the compressed distance.
    pub contribution: f64,
}

/// An abnormal task with its abnormal edges.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AbnormalTask {
    /// Its score.
    pub score: TaskScore,
    /// Compressed edges flagged first (empty without compression).
    pub compressed: Vec<CompressedFlag>,
    /// Original edges, largest contribution first.
    pub edges: Vec<AbnormalEdge>,
}

/// The result of an analysis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    /// [`ANALYSIS_VERSION`].
    pub version: u32,
    /// Settings used.
    pub config: OutlierConfig,
    /// Clusters chosen by BIC (k-medoids), after merging small ones.
    pub clusters: usize,
    /// Mean edges per task before compression.
    pub edges_original: f64,
    /// Mean edges per task after compression.
    pub edges_compressed: f64,
    /// Every task, most abnormal first.
    pub tasks: Vec<TaskScore>,
    /// The top tasks with their abnormal edges.
    pub abnormal: Vec<AbnormalTask>,
}

/// Errors of the analysis.
#[derive(Debug, thiserror::Error)]
pub enum OutlierError {
    /// Fewer than three tasks: with two, distances are symmetric and
    /// cannot tell which one is abnormal.
    #[error("{tasks} tasks with MPI calls; at least 3 are needed to tell an abnormal one")]
    TooFewTasks {
        /// Tasks found.
        tasks: usize,
    },
}

/// A deterministic sample of `s` of `n` indices (partial Fisher–Yates with
/// xorshift64*), ascending.
pub fn sample(n: usize, s: usize, seed: u64) -> Vec<usize> {
    if s >= n {
        return (0..n).collect();
    }
    let mut idx: Vec<usize> = (0..n).collect();
    let mut x = seed | 1;
    for i in 0..s {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let j = i + (r % (n - i) as u64) as usize;
        idx.swap(i, j);
    }
    idx.truncate(s);
    idx.sort_unstable();
    idx
}

/// Runs `f(i)` for i in 0..n on every core, in order.
fn par_map<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads <= 1 || n < 64 {
        return (0..n).map(f).collect();
    }
    let chunk = n.div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .step_by(chunk)
            .map(|lo| {
                let f = &f;
                scope.spawn(move || (lo..(lo + chunk).min(n)).map(f).collect::<Vec<T>>())
            })
            .collect();
        let mut out = Vec::with_capacity(n);
        for h in handles {
            // A panic in a worker is a bug in this module: pass it on.
            match h.join() {
                Ok(v) => out.extend(v),
                Err(p) => std::panic::resume_unwind(p),
            }
        }
        out
    })
}

/// The sample's distances, row-major.
struct Matrix {
    n: usize,
    d: Vec<f64>,
}

/// X-means BIC of a clustering (one dimension: distances to medoids).
fn bic(dist_to_medoid: &[f64], assign: &[usize], k: usize, resolution: f64) -> f64 {
    let r = dist_to_medoid.len() as f64;
    let kf = k as f64;
    let sq: f64 = dist_to_medoid.iter().map(|d| d * d).sum();
    let var = if r > kf { sq / (r - kf) } else { 0.0 }
        .max(resolution * resolution)
        .max(1e-12);
    let mut sizes = vec![0usize; k];
    for a in assign {
        sizes[*a] += 1;
    }
    let ll: f64 = sizes
        .iter()
        .filter(|n| **n > 0)
        .map(|&n| {
            let n = n as f64;
            n * n.ln()
                - n * r.ln()
                - n / 2.0 * (2.0 * std::f64::consts::PI * var).ln()
                - (n - kf) / 2.0
        })
        .sum();
    let params = (kf - 1.0) + kf + 1.0;
    ll - params / 2.0 * r.ln()
}

/// Clusters of the sample: the medoids (as sample positions) of the k with
/// the best BIC.
fn cluster_sample(m: &Matrix, ks: std::ops::RangeInclusive<usize>, resolution: f64) -> Vec<usize> {
    let Some(matrix) = kmedoids::Matrix::new(m.n, &m.d) else {
        return Vec::new();
    };
    let mut best: Option<(f64, Vec<usize>)> = None;
    for k in ks {
        let c = kmedoids::fasterpam(&matrix, kmedoids::build(&matrix, k), 100);
        let d: Vec<f64> = c
            .assignment
            .iter()
            .enumerate()
            .map(|(i, a)| m.get_d(i, c.medoids[*a]))
            .collect();
        let score = bic(&d, &c.assignment, k, resolution);
        if best.as_ref().is_none_or(|(b, _)| score > *b) {
            best = Some((score, c.medoids));
        }
    }
    best.map(|b| b.1).unwrap_or_default()
}

impl Matrix {
    fn get_d(&self, x: usize, y: usize) -> f64 {
        self.d[x * self.n + y]
    }
}

/// Finds abnormal tasks and their abnormal edges.
pub fn analyze(models: &Models, cfg: &OutlierConfig) -> Result<Analysis, OutlierError> {
    let n = models.tasks.len();
    if n < 3 {
        return Err(OutlierError::TooFewTasks { tasks: n });
    }
    let table = OverlapTable::shared();
    let dc = &cfg.dissim;
    let graphs: Vec<CompressedTask> = if cfg.compress {
        compress(models, &[])
    } else {
        models
            .tasks
            .iter()
            .map(|t| CompressedTask {
                edges: t.edges.clone(),
                members: Default::default(),
            })
            .collect()
    };
    let prepared: Vec<Vec<PreparedEdge>> = par_map(n, |t| prepare(dc, &graphs[t].edges));
    let d = |a: usize, b: usize| dissimilarity_prepared(dc, table, &prepared[a], &prepared[b]);

    let (mut scores, clusters) = match cfg.method {
        Method::Kmedoids => {
            let s = sample(n, cfg.cluster_sample.max(1), cfg.seed);
            let sn = s.len();
            let rows = par_map(sn, |i| {
                (0..sn)
                    .map(|j| if i == j { 0.0 } else { d(s[i], s[j]) })
                    .collect::<Vec<f64>>()
            });
            let m = Matrix {
                n: sn,
                d: rows.concat(),
            };
            let mut medoids: Vec<usize> = cluster_sample(
                &m,
                match cfg.clusters {
                    Some(k) => k.clamp(1, sn)..=k.clamp(1, sn),
                    None => 1..=cfg.max_k.clamp(1, sn),
                },
                cfg.resolution,
            )
            .iter()
            .map(|&i| s[i])
            .collect();
            // Assign every task to its nearest medoid.
            let mut assign: Vec<(usize, f64)> = par_map(n, |t| {
                medoids
                    .iter()
                    .enumerate()
                    .map(|(c, &med)| (c, if med == t { 0.0 } else { d(t, med) }))
                    .min_by(|a, b| a.1.total_cmp(&b.1))
                    .unwrap_or((0, 0.0))
            });
            // Merge clusters that are too small into the nearest large one.
            loop {
                let mut sizes = vec![0usize; medoids.len()];
                for a in &assign {
                    sizes[a.0] += 1;
                }
                let Some(small) = (0..medoids.len())
                    .filter(|&c| sizes[c] < cfg.min_cluster)
                    .min_by_key(|&c| sizes[c])
                else {
                    break;
                };
                if medoids.len() == 1 {
                    break;
                }
                medoids.remove(small);
                assign = par_map(n, |t| {
                    medoids
                        .iter()
                        .enumerate()
                        .map(|(c, &med)| (c, if med == t { 0.0 } else { d(t, med) }))
                        .min_by(|a, b| a.1.total_cmp(&b.1))
                        .unwrap_or((0, 0.0))
                });
            }
            let k = medoids.len();
            let mut sq = vec![0.0; k];
            let mut cnt = vec![0usize; k];
            for (c, dist) in &assign {
                sq[*c] += dist * dist;
                cnt[*c] += 1;
            }
            let sd: Vec<f64> = (0..k)
                .map(|c| (sq[c] / cnt[c].max(1) as f64).sqrt())
                .collect();
            let scores = assign
                .iter()
                .enumerate()
                .map(|(t, (c, dist))| score(models, t, Some(*c), medoids[*c], *dist, sd[*c]))
                .collect::<Vec<_>>();
            (scores, k)
        }
        Method::Sample => {
            let s = sample(n, cfg.nn_sample.max(2), cfg.seed);
            let nn: Vec<(usize, f64)> = par_map(n, |t| {
                s.iter()
                    .filter(|&&x| x != t)
                    .map(|&x| (x, d(t, x)))
                    .min_by(|a, b| a.1.total_cmp(&b.1))
                    .unwrap_or((t, 0.0))
            });
            let sd = (nn.iter().map(|x| x.1 * x.1).sum::<f64>() / n as f64).sqrt();
            let scores = nn
                .iter()
                .enumerate()
                .map(|(t, (r, dist))| score(models, t, None, *r, *dist, sd))
                .collect();
            (scores, 0)
        }
    };
    scores.sort_by(|a, b| {
        b.normalized
            .total_cmp(&a.normalized)
            .then(b.distance.total_cmp(&a.distance))
            .then(a.rank.cmp(&b.rank))
    });

    let refs_of = |t: &TaskScore| -> Vec<usize> {
        match cfg.method {
            Method::Kmedoids => vec![t.reference],
            Method::Sample => sample(n, cfg.nn_sample.max(2), cfg.seed)
                .into_iter()
                .filter(|&x| x != t.task)
                .collect(),
        }
    };
    let abnormal = scores
        .iter()
        .take(cfg.top)
        .map(|s| isolate_edges(models, &graphs, s, &refs_of(s), cfg, table))
        .collect();
    let mean = |f: &dyn Fn(usize) -> usize| (0..n).map(f).sum::<usize>() as f64 / n as f64;
    Ok(Analysis {
        version: ANALYSIS_VERSION,
        config: *cfg,
        clusters,
        edges_original: mean(&|t| models.tasks[t].edges.len()),
        edges_compressed: mean(&|t| graphs[t].edges.len()),
        tasks: scores,
        abnormal,
    })
}

fn score(
    models: &Models,
    t: usize,
    cluster: Option<usize>,
    reference: usize,
    distance: f64,
    sd: f64,
) -> TaskScore {
    let m = &models.tasks[t];
    TaskScore {
        task: t,
        rank: m.rank,
        host: m.host.clone(),
        pid: m.pid,
        cluster,
        reference,
        distance,
        normalized: if sd > 0.0 { distance / sd } else { 0.0 },
    }
}

/// Sums contributions over references, largest first.
fn ranked(
    cfg: &OutlierConfig,
    table: &OverlapTable,
    task: &[Edge],
    refs: &[&[Edge]],
) -> Vec<(EdgeKey, f64)> {
    let mut acc: rustc_hash::FxHashMap<EdgeKey, f64> = Default::default();
    for r in refs {
        for (k, c) in contributions(&cfg.dissim, table, task, r) {
            *acc.entry(k).or_default() += c;
        }
    }
    let mut v: Vec<(EdgeKey, f64)> = acc.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

fn isolate_edges(
    models: &Models,
    graphs: &[CompressedTask],
    s: &TaskScore,
    refs: &[usize],
    cfg: &OutlierConfig,
    table: &OverlapTable,
) -> AbnormalTask {
    let st = &models.states;
    let g = &graphs[s.task];
    let ref_graphs: Vec<&[Edge]> = refs.iter().map(|&r| graphs[r].edges.as_slice()).collect();
    let flagged: Vec<(EdgeKey, f64)> = ranked(cfg, table, &g.edges, &ref_graphs)
        .into_iter()
        .take(cfg.top_edges)
        .collect();
    // Drill down: the original edges behind the flagged compressed edges,
    // in the task and in its references, compared again uncompressed.
    let mut keys: FxHashSet<EdgeKey> = FxHashSet::default();
    for (k, _) in &flagged {
        keys.extend(g.originals(*k));
        for &r in refs {
            keys.extend(graphs[r].originals(*k));
        }
    }
    let pick = |t: usize| -> Vec<Edge> {
        models.tasks[t]
            .edges
            .iter()
            .filter(|e| keys.contains(&e.key))
            .copied()
            .collect()
    };
    let mine = pick(s.task);
    let theirs: Vec<Vec<Edge>> = refs.iter().map(|&r| pick(r)).collect();
    let theirs_ref: Vec<&[Edge]> = theirs.iter().map(Vec::as_slice).collect();
    let first_ref = refs.first().map(|&r| &models.tasks[r]);
    let edges = ranked(cfg, table, &mine, &theirs_ref)
        .into_iter()
        .take(cfg.top_edges)
        .map(|(key, contribution)| {
            let (from, to) = edge_ends(key);
            AbnormalEdge {
                from,
                to,
                from_label: st.label(from),
                to_label: st.label(to),
                contribution,
                task: models.tasks[s.task].edge(key).map(EdgeTimes::from),
                reference: first_ref.and_then(|m| m.edge(key)).map(EdgeTimes::from),
            }
        })
        .collect();
    let compressed = if cfg.compress {
        flagged
            .iter()
            .map(|&(k, contribution)| CompressedFlag {
                from_label: st.label(edge_ends(k).0),
                to_label: st.label(g.end(k)),
                edges: g.originals(k).len(),
                contribution,
            })
            .collect()
    } else {
        Vec::new()
    };
    AbnormalTask {
        score: s.clone(),
        compressed,
        edges,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::automaded::smm::{SMM_VERSION, StateTable, TaskModel, edge_key};

    fn e(s: u32, d: u32, prob: f64, comp: f64) -> Edge {
        Edge {
            key: edge_key(s, d),
            count: 10,
            prob,
            comm: Normal::default(),
            comp: Normal {
                mean: comp,
                sd: comp / 20.0,
            },
        }
    }

    /// A loop 1→2→3→(4 | 1) of `n` tasks with a little deterministic jitter
    /// in the times; `fault` changes task `faulty`.
    fn run(n: usize, faulty: usize, fault: impl Fn(&mut Vec<Edge>)) -> Models {
        let tasks = (0..n)
            .map(|t| {
                let j = 1.0 + ((t * 7919) % 13) as f64 / 1000.0;
                let mut edges = vec![
                    e(0, 1, 1.0, 1e5 * j),
                    e(1, 2, 1.0, 2e6 * j),
                    e(2, 3, 1.0, 5e5 * j),
                    e(3, 1, 0.9, 1e6 * j),
                    e(3, 4, 0.1, 3e6 * j),
                ];
                if t == faulty {
                    fault(&mut edges);
                }
                edges.sort_by_key(|e| e.key);
                TaskModel {
                    rank: t as u32,
                    host: "h".into(),
                    pid: t as u32,
                    edges,
                }
            })
            .collect();
        Models {
            version: SMM_VERSION,
            states: StateTable::default(),
            tasks,
        }
    }

    fn check(models: &Models, faulty: usize, edge: EdgeKey) {
        for method in [Method::Kmedoids, Method::Sample] {
            for compress in [true, false] {
                let cfg = OutlierConfig {
                    method,
                    compress,
                    ..Default::default()
                };
                let a = analyze(models, &cfg).expect("analysis");
                assert_eq!(a.tasks[0].task, faulty, "{method:?} compress {compress}");
                let top = &a.abnormal[0].edges[0];
                assert_eq!(
                    edge_key(top.from, top.to),
                    edge,
                    "{method:?} compress {compress}"
                );
            }
        }
    }

    #[test]
    fn a_slow_edge_makes_its_task_the_top_outlier() {
        let m = run(16, 11, |edges| edges[2].comp.mean *= 3.0);
        check(&m, 11, edge_key(2, 3));
    }

    #[test]
    fn an_extra_edge_makes_its_task_the_top_outlier() {
        let m = run(9, 4, |edges| {
            edges[1].prob = 0.5;
            edges.push(e(1, 7, 0.5, 1e6));
        });
        check(&m, 4, edge_key(1, 7));
    }

    #[test]
    fn a_missing_edge_makes_its_task_the_top_outlier() {
        let m = run(7, 0, |edges| {
            edges.retain(|x| x.key != edge_key(3, 4));
            edges[3].prob = 1.0;
        });
        check(&m, 0, edge_key(3, 4));
    }

    /// Two normal behaviours (a master/worker split: 4 tasks whose loop
    /// takes another branch) and one slow worker: BIC finds the two
    /// clusters, and the slow worker, not the small class, is the top
    /// outlier (§3.3.1: normalization per cluster).
    #[test]
    fn bic_keeps_two_normal_behaviours_apart() {
        let m = run(24, 13, |edges| edges[2].comp.mean *= 3.0);
        let mut m = m;
        for t in [0, 6, 12, 18] {
            let edges = &mut m.tasks[t].edges;
            edges.retain(|x| x.key != edge_key(3, 4));
            edges.push(e(3, 5, 0.1, 9e6));
            edges.push(e(5, 1, 1.0, 1e6));
            edges.sort_by_key(|x| x.key);
        }
        let a = analyze(&m, &OutlierConfig::default()).expect("analysis");
        assert_eq!(a.clusters, 2);
        assert_eq!(a.tasks[0].task, 13);
        let minority = a.tasks.iter().find(|t| t.task == 0).and_then(|t| t.cluster);
        let majority = a.tasks.iter().find(|t| t.task == 1).and_then(|t| t.cluster);
        assert_ne!(minority, majority);
    }

    #[test]
    fn two_tasks_are_refused() {
        let m = run(2, 0, |_| {});
        assert!(matches!(
            analyze(&m, &OutlierConfig::default()),
            Err(OutlierError::TooFewTasks { tasks: 2 })
        ));
    }

    #[test]
    fn samples_are_deterministic_and_distinct() {
        let a = sample(1000, 32, 5);
        assert_eq!(a, sample(1000, 32, 5));
        assert_eq!(a.len(), 32);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(sample(10, 32, 5), (0..10).collect::<Vec<_>>());
    }
}
