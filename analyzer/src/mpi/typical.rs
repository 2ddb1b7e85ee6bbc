//! Typical sequences (002 §4.1): Sequitur over one processor's sequence of
//! (MPI function, peer) pairs; its rules sorted by expanded length, longest
//! first; each rule matched against every processor's profile by MPI
//! function only (peers differ between processors); the first L rules found
//! often enough on all processors are the typical sequences.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::profile::{Peer, Profiles};
use crate::sequitur::{RuleId, Sequitur};

/// How typical sequences are chosen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TypicalConfig {
    /// Rank whose profile feeds Sequitur (the paper uses one processor);
    /// `None`: the lowest rank.
    pub reference_rank: Option<u32>,
    /// L, the number of typical sequences kept.
    pub max_sequences: usize,
    /// Shortest rule considered (calls).
    pub min_length: usize,
    /// Non-overlapping occurrences needed on every rank for a rule to count
    /// as "detected frequently on all processors".
    pub min_occurrences: usize,
    /// Rules examined at most (longest first) before giving up.
    pub max_candidates: usize,
}

impl Default for TypicalConfig {
    fn default() -> Self {
        Self {
            reference_rank: None,
            max_sequences: 8,
            min_length: 2,
            min_occurrences: 4,
            max_candidates: 500,
        }
    }
}

/// One typical sequence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypicalSequence {
    /// l, 1-based, in order of decreasing length.
    pub id: usize,
    /// MPI functions, in order.
    pub functions: Vec<String>,
}

impl TypicalSequence {
    /// Length in calls.
    pub fn len(&self) -> usize {
        self.functions.len()
    }

    /// True for an empty sequence (never produced).
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }

    /// Short text: `6 calls: MPI_Irecv MPI_Irecv …`.
    pub fn summary(&self, max_names: usize) -> String {
        let mut s = format!("{} calls:", self.len());
        for f in self.functions.iter().take(max_names) {
            s.push(' ');
            s.push_str(f.strip_prefix("MPI_").unwrap_or(f));
        }
        if self.len() > max_names {
            s.push_str(" …");
        }
        s
    }
}

/// Rank `r`'s call sequence as ids into `names`, adding its functions not
/// yet named; a call of a function the rank does not list is `u32::MAX`.
fn encode(names: &mut HashMap<String, u32>, r: &super::profile::RankProfile) -> Vec<u32> {
    let ids: Vec<u32> = r
        .functions
        .iter()
        .map(|f| {
            let next = names.len() as u32;
            *names.entry(f.clone()).or_insert(next)
        })
        .collect();
    r.calls
        .iter()
        .map(|c| ids.get(c.function as usize).copied().unwrap_or(u32::MAX))
        .collect()
}

/// Global function ids for a set of profiles: `seqs[i]` is rank
/// `profiles.ranks[i]`'s call sequence as ids into `names`.
pub(crate) struct FunctionSeqs {
    pub(crate) names: HashMap<String, u32>,
    pub(crate) seqs: Vec<Vec<u32>>,
}

impl FunctionSeqs {
    pub(crate) fn of(profiles: &Profiles) -> Self {
        let mut names: HashMap<String, u32> = HashMap::new();
        let seqs = profiles
            .ranks
            .iter()
            .map(|r| encode(&mut names, r))
            .collect();
        Self { names, seqs }
    }
}

/// Start indices of the non-overlapping occurrences of `pattern` in `text`,
/// left to right (Knuth–Morris–Pratt, restarted after each match: O(n + m)).
pub fn find_occurrences(text: &[u32], pattern: &[u32]) -> Vec<usize> {
    let m = pattern.len();
    if m == 0 || text.len() < m {
        return Vec::new();
    }
    let mut fail = vec![0usize; m];
    let mut k = 0;
    for i in 1..m {
        while k > 0 && pattern[i] != pattern[k] {
            k = fail[k - 1];
        }
        if pattern[i] == pattern[k] {
            k += 1;
        }
        fail[i] = k;
    }
    let mut out = Vec::new();
    let mut q = 0;
    for (i, &c) in text.iter().enumerate() {
        while q > 0 && c != pattern[q] {
            q = fail[q - 1];
        }
        if c == pattern[q] {
            q += 1;
        }
        if q == m {
            out.push(i + 1 - m);
            q = 0;
        }
    }
    out
}

/// The typical sequences of `profiles` (empty when no rule occurs often
/// enough on every rank).
pub fn typical_sequences(profiles: &Profiles, config: &TypicalConfig) -> Vec<TypicalSequence> {
    let Some(reference) = (match config.reference_rank {
        Some(r) => profiles.ranks.iter().position(|p| p.rank == r),
        None => (!profiles.ranks.is_empty()).then_some(0),
    }) else {
        return Vec::new();
    };
    let seqs = FunctionSeqs::of(profiles);
    let mut by_id = vec![String::new(); seqs.names.len()];
    for (name, id) in &seqs.names {
        by_id[*id as usize] = name.clone();
    }
    let rank = &profiles.ranks[reference];
    let mut sequitur: Sequitur<(u32, Peer)> = Sequitur::new();
    for (call, f) in rank.calls.iter().zip(&seqs.seqs[reference]) {
        sequitur.push((*f, call.peer));
    }
    let grammar = sequitur.grammar();
    let mut rules: Vec<usize> = (1..grammar.rules().len())
        .filter(|&i| grammar.len(RuleId(i)) >= config.min_length.max(1))
        .collect();
    // Longest first; ties in grammar order so the result is deterministic.
    rules.sort_by_key(|&i| (std::cmp::Reverse(grammar.len(RuleId(i))), i));

    let mut seen: HashSet<Vec<u32>> = HashSet::new();
    let mut out = Vec::new();
    for &rule in rules.iter().take(config.max_candidates) {
        if out.len() >= config.max_sequences {
            break;
        }
        let functions: Vec<u32> = grammar.expand(RuleId(rule)).iter().map(|t| t.0).collect();
        if !seen.insert(functions.clone()) {
            continue;
        }
        let frequent = seqs
            .seqs
            .iter()
            .all(|s| find_occurrences(s, &functions).len() >= config.min_occurrences);
        if frequent {
            out.push(TypicalSequence {
                id: out.len() + 1,
                functions: functions
                    .iter()
                    .map(|f| by_id.get(*f as usize).cloned().unwrap_or_default())
                    .collect(),
            });
        }
    }
    out
}

/// Each rank's own typical sequences, for comparing a rank with its own
/// clean behaviour (ranks differ by design: the ends of a line of ranks,
/// a master). Ranks whose call sequences (functions only) are the same in
/// the first run share one Sequitur grammar, over the lowest such rank's
/// (function, peer) sequence, as the paper takes one processor's; each
/// rule, longest first, is kept for a rank when it occurs at least
/// `min_occurrences` times (by function) in that rank's sequence of every
/// run. Ranks missing from a run get none.
pub fn rank_sequences(
    runs: &[&Profiles],
    config: &TypicalConfig,
) -> std::collections::BTreeMap<u32, Vec<TypicalSequence>> {
    use std::collections::BTreeMap;
    let mut out: BTreeMap<u32, Vec<TypicalSequence>> = BTreeMap::new();
    let Some(first) = runs.first() else {
        return out;
    };
    // One name table for every run.
    let mut names: HashMap<String, u32> = HashMap::new();
    // seqs[run][rank]
    let seqs: Vec<BTreeMap<u32, Vec<u32>>> = runs
        .iter()
        .map(|p| {
            p.ranks
                .iter()
                .map(|r| (r.rank, encode(&mut names, r)))
                .collect()
        })
        .collect();
    let mut by_id = vec![String::new(); names.len()];
    for (name, id) in &names {
        by_id[*id as usize] = name.clone();
    }
    // Groups of ranks with the same function sequence in the first run.
    let mut groups: BTreeMap<&[u32], Vec<u32>> = BTreeMap::new();
    for r in &first.ranks {
        if let Some(s) = seqs[0].get(&r.rank) {
            groups.entry(s.as_slice()).or_default().push(r.rank);
        }
    }
    for members in groups.values() {
        let reference = members[0];
        let Some(profile) = first.rank(reference) else {
            continue;
        };
        let mut sequitur: Sequitur<(u32, Peer)> = Sequitur::new();
        for (call, f) in profile.calls.iter().zip(&seqs[0][&reference]) {
            sequitur.push((*f, call.peer));
        }
        let grammar = sequitur.grammar();
        let mut rules: Vec<usize> = (1..grammar.rules().len())
            .filter(|&i| grammar.len(RuleId(i)) >= config.min_length.max(1))
            .collect();
        rules.sort_by_key(|&i| (std::cmp::Reverse(grammar.len(RuleId(i))), i));
        let mut seen: HashSet<Vec<u32>> = HashSet::new();
        for &rule in rules.iter().take(config.max_candidates) {
            let functions: Vec<u32> = grammar.expand(RuleId(rule)).iter().map(|t| t.0).collect();
            if !seen.insert(functions.clone()) {
                continue;
            }
            for &rank in members {
                let list = out.entry(rank).or_default();
                if list.len() >= config.max_sequences {
                    continue;
                }
                let frequent = seqs.iter().all(|run| {
                    run.get(&rank).is_some_and(|s| {
                        find_occurrences(s, &functions).len() >= config.min_occurrences
                    })
                });
                if frequent {
                    list.push(TypicalSequence {
                        id: list.len() + 1,
                        functions: functions
                            .iter()
                            .map(|f| by_id.get(*f as usize).cloned().unwrap_or_default())
                            .collect(),
                    });
                }
            }
            if members
                .iter()
                .all(|r| out.get(r).is_some_and(|l| l.len() >= config.max_sequences))
            {
                break;
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::mpi::profile::{Call, RankProfile, RankSource};

    pub(crate) fn profile(rank: u32, calls: &[(&str, Peer, u64)]) -> RankProfile {
        let mut functions: Vec<String> = Vec::new();
        let mut out = Vec::new();
        let mut t = 0;
        for (name, peer, compute) in calls {
            let f = match functions.iter().position(|f| f == name) {
                Some(i) => i,
                None => {
                    functions.push(name.to_string());
                    functions.len() - 1
                }
            };
            t += compute;
            out.push(Call {
                function: f as u16,
                peer: *peer,
                compute_ns: *compute,
                comm_ns: 1000,
                start_ns: t,
                cpu: rank,
                tid: rank,
                call_site: 0,
                partners: Default::default(),
            });
            t += 1000;
        }
        RankProfile {
            rank,
            rank_source: RankSource::Environment,
            size: None,
            host: "h".into(),
            pid: 100 + rank,
            comm: "t".into(),
            cpus: vec![rank],
            functions,
            calls: out,
            unfinished: 0,
            open: None,
            last_ns: 0,
            exited_ns: None,
            state: None,
            end_ns: 0,
            cpu: Vec::new(),
        }
    }

    #[test]
    fn kmp_finds_non_overlapping_matches() {
        assert_eq!(find_occurrences(&[1, 1, 1, 1, 1], &[1, 1]), vec![0, 2]);
        assert_eq!(
            find_occurrences(&[1, 2, 1, 2, 3, 1, 2, 3], &[1, 2, 3]),
            vec![2, 5]
        );
        assert_eq!(find_occurrences(&[1, 2], &[1, 2, 3]), Vec::<usize>::new());
        assert_eq!(find_occurrences(&[1, 2], &[]), Vec::<usize>::new());
    }

    /// FT-like profile (002 §5.1.1): after a few initializing calls,
    /// (Alltoall, Reduce) repeated; the typical sequences are 8, 4, 2 and 1
    /// repetitions of the pair, as in Table 2 (16, 8, 4, 2 calls).
    #[test]
    fn ft_like_profile_gives_table_2_lengths() {
        let comm = Peer::Comm(0x44000000);
        let op = Peer::Op(0x58000003);
        let mut calls = vec![
            ("MPI_Init", Peer::None, 0),
            ("MPI_Comm_rank", Peer::None, 0),
            ("MPI_Comm_size", Peer::None, 0),
            ("MPI_Barrier", comm, 0),
        ];
        for _ in 0..20 {
            calls.push(("MPI_Alltoall", Peer::None, 10));
            calls.push(("MPI_Reduce", op, 10));
        }
        calls.push(("MPI_Finalize", Peer::None, 0));
        let profiles = Profiles {
            version: 1,
            ranks: (0..4).map(|r| profile(r, &calls)).collect(),
        };
        let ts = typical_sequences(
            &profiles,
            &TypicalConfig {
                min_occurrences: 2,
                ..TypicalConfig::default()
            },
        );
        let lens: Vec<usize> = ts.iter().map(TypicalSequence::len).collect();
        assert_eq!(lens, vec![16, 8, 4, 2]);
        assert_eq!(ts[3].functions, vec!["MPI_Alltoall", "MPI_Reduce"]);
        assert_eq!(
            ts.iter().map(|t| t.id).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
    }

    /// A pipeline: rank 0 only sends, the last rank only receives, the
    /// middle ones do both. Each rank gets sequences of its own calls.
    #[test]
    fn each_rank_gets_its_own_sequences() {
        let steps = |r: u32| -> Vec<(&'static str, Peer, u64)> {
            (0..16)
                .flat_map(|_| {
                    let mut v = Vec::new();
                    if r > 0 {
                        v.push(("MPI_Recv", Peer::Rank(r as i32 - 1), 5));
                    }
                    if r < 2 {
                        v.push(("MPI_Send", Peer::Rank(r as i32 + 1), 5));
                    }
                    v.push(("MPI_Allreduce", Peer::Op(1), 5));
                    v
                })
                .collect()
        };
        let run = Profiles {
            version: 2,
            ranks: (0..3).map(|r| profile(r, &steps(r))).collect(),
        };
        let per = rank_sequences(&[&run, &run], &TypicalConfig::default());
        assert_eq!(per.len(), 3);
        for (rank, seqs) in &per {
            assert!(!seqs.is_empty(), "rank {rank}");
            let own = |f: &str| seqs.iter().all(|s| s.functions.iter().any(|x| x == f));
            assert_eq!(own("MPI_Recv"), *rank > 0, "rank {rank}: {seqs:?}");
            assert_eq!(own("MPI_Send"), *rank < 2, "rank {rank}: {seqs:?}");
        }
        // The common sequences of the paper find nothing on all three.
        assert!(
            typical_sequences(&run, &TypicalConfig::default())
                .iter()
                .all(|s| s.functions.iter().all(|f| f == "MPI_Allreduce"))
        );
    }

    /// Rules are matched by function only: a rank whose peers differ still
    /// matches, a rank that lacks the pattern excludes it.
    #[test]
    fn matching_ignores_peers_and_needs_every_rank() {
        let seq = |peer: i32, n: usize| -> Vec<(&'static str, Peer, u64)> {
            (0..n)
                .flat_map(|_| {
                    [
                        ("MPI_Send", Peer::Rank(peer), 5),
                        ("MPI_Recv", Peer::Rank(peer), 5),
                        ("MPI_Barrier", Peer::Comm(1), 5),
                    ]
                })
                .collect()
        };
        let ranks = vec![profile(0, &seq(1, 16)), profile(1, &seq(0, 16))];
        let ts = typical_sequences(&Profiles { version: 1, ranks }, &TypicalConfig::default());
        assert!(!ts.is_empty());
        assert!(ts.iter().all(|t| t.len() % 3 == 0), "{ts:?}");

        let other: Vec<_> = (0..16)
            .flat_map(|_| [("MPI_Bcast", Peer::Root(0), 5), ("MPI_Wait", Peer::None, 5)])
            .collect();
        let ranks = vec![profile(0, &seq(1, 16)), profile(1, &other)];
        assert!(
            typical_sequences(&Profiles { version: 1, ranks }, &TypicalConfig::default())
                .is_empty()
        );
    }
}
