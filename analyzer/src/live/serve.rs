//! `analyzer live`: the agent's live analysis process. The root agent
//! starts it as an unprivileged user and hands it, on its standard input,
//! the model and thresholds once, then a window capture every interval
//! (protocol: [`tracer_common::live`]); it answers each with the findings
//! the agent raises as alerts. Parsing what an attacker may have shaped
//! (captures of any process, models from elsewhere) happens here, never as
//! root; if it dies, the agent records on and starts it again.

use std::{
    collections::BTreeSet,
    io::{BufRead, Write},
    path::Path,
    time::Instant,
};

use tracer_common::live::{
    Answer, Finding, LIVE_VERSION, LiveError, Request, Scoring as WireScoring, read_request,
    write_answer,
};

use super::{LiveModel, LivePeers};
use crate::{
    decode::Capture,
    load,
    score::{Scoring, UnitScore},
};

/// Most unit findings one window gives; the rest are counted in the last.
pub const MAX_UNIT_FINDINGS: usize = 5;

/// What the process evaluates with, and what it remembers between windows.
#[derive(Debug, Default)]
pub struct Server {
    model: Option<LiveModel>,
    peers: Option<LivePeers>,
    alert_score: f64,
    /// Processes already reported as unknown to the model.
    unknown: BTreeSet<u32>,
}

impl Server {
    /// Answers one request with its payloads.
    pub fn handle(&mut self, request: &Request, payloads: &[Vec<u8>]) -> Answer {
        let mut answer = Answer {
            version: LIVE_VERSION,
            ..Answer::default()
        };
        let mut payloads = payloads.iter();
        match request {
            Request::Setup {
                model,
                scoring,
                alert_score,
                thresholds,
                ..
            } => {
                let scoring = match scoring {
                    WireScoring::Nodes => Scoring::Nodes,
                    WireScoring::Edges => Scoring::Edges,
                };
                let mut load = || -> Result<(), load::LoadError> {
                    let model = match model {
                        Some(f) => Some(LiveModel::new(
                            load::model_from_slice(
                                payloads.next().map_or(&[][..], Vec::as_slice),
                                Path::new(&f.name),
                            )?,
                            scoring,
                        )),
                        None => None,
                    };
                    let peers = match thresholds {
                        Some(f) => Some(LivePeers::new(load::thresholds_from_slice(
                            payloads.next().map_or(&[][..], Vec::as_slice),
                            Path::new(&f.name),
                        )?)),
                        None => None,
                    };
                    *self = Self {
                        model,
                        peers,
                        alert_score: *alert_score,
                        unknown: BTreeSet::new(),
                    };
                    Ok(())
                };
                if let Err(e) = load() {
                    answer.error = Some(error_chain(&e));
                }
            }
            Request::Window {
                since_ns, now_ns, ..
            } => {
                let window = payloads.next().map_or(&[][..], Vec::as_slice);
                self.evaluate(window, *since_ns, *now_ns, &mut answer);
            }
        }
        answer
    }

    fn evaluate(&mut self, window: &[u8], since_ns: u64, now_ns: u64, a: &mut Answer) {
        let started = Instant::now();
        let mut capture = match Capture::read(window) {
            Ok(c) => c,
            Err(e) => {
                a.error = Some(format!("decoding the window: {}", error_chain(&e)));
                return;
            }
        };
        if let Some(model) = &mut self.model {
            // The functions the model was learned without are left out of
            // the window's units too (as `model score` does); units of
            // trees learned with a function the window lacks are not
            // judged, so not alerted on.
            let _ = model.model().prepare(&mut capture);
            let scores = model.evaluate(&capture, since_ns, now_ns, "live");
            capture.left_out.clear();
            a.units_scored = scores.len() as u64;
            a.max_score = scores.iter().map(|s| s.score).reduce(f64::max);
            a.findings
                .extend(unit_findings(&scores, self.alert_score, &mut self.unknown));
        }
        if let Some(peers) = &mut self.peers {
            let report = peers.evaluate(&capture, since_ns, now_ns);
            a.peer_windows = report.windows.len() as u64;
            for w in &report.windows {
                for server in &w.faulty {
                    a.findings.push(Finding {
                        kind: "server".into(),
                        summary: format!(
                            "{server} is faulty (anomalous in k of the last 2k-1 windows, and persistently: servers that deviated only briefly beside it are not called); top functions: {}",
                            w.root_causes
                                .iter()
                                .filter(|r| r.server == *server)
                                .flat_map(|r| r.top.iter().take(3))
                                .map(|c| c.component.clone())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        detail: serde_json::to_value(w).unwrap_or_default(),
                    });
                }
            }
            a.peers = serde_json::to_value(&report).ok();
        }
        a.ms = started.elapsed().as_secs_f64() * 1e3;
    }
}

/// Serves requests from `input` until it closes, answering on `output`;
/// payloads larger than `max_payload` bytes end the process with an error
/// (the agent starts another).
pub fn serve(
    mut input: impl BufRead,
    mut output: impl Write,
    max_payload: u64,
) -> Result<(), LiveError> {
    let mut server = Server::default();
    while let Some((request, payloads)) = read_request(&mut input, max_payload)? {
        let answer = server.handle(&request, &payloads);
        drop(payloads);
        write_answer(&mut output, &answer)?;
        trim();
    }
    Ok(())
}

/// Gives the evaluation's memory back to the system (glibc keeps freed
/// heap otherwise, and the resident size would stay at its peak).
fn trim() {
    // SAFETY: no preconditions.
    unsafe { libc::malloc_trim(0) };
}

/// Findings for the units scoring at least `threshold` (`scores` is
/// sorted, highest first), without flooding: a process the model has no
/// group for scores 1 in every unit, so it is reported once, as a process;
/// of the others at most [`MAX_UNIT_FINDINGS`] per window.
pub fn unit_findings(
    scores: &[UnitScore],
    threshold: f64,
    unknown: &mut BTreeSet<u32>,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let (mut units, mut rest) = (0, 0);
    // A unit whose tree the model learned with a function the window's
    // overhead budget detached scores high for that reason alone: it is
    // not judged (see `UnitScore::not_judged`), so no alert.
    for s in scores
        .iter()
        .filter(|s| s.score >= threshold && s.not_judged.is_empty())
    {
        if s.reason.starts_with("no process group") {
            if unknown.insert(s.pid) {
                let mut f = unit_finding(s, threshold);
                f.kind = "process".into();
                f.summary = format!(
                    "{}[{}] matches no process group of the model (its start differs from every learned process): all its units score 1",
                    s.comm, s.pid
                );
                findings.push(f);
            }
            continue;
        }
        if units < MAX_UNIT_FINDINGS {
            units += 1;
            findings.push(unit_finding(s, threshold));
        } else {
            rest += 1;
        }
    }
    if rest > 0
        && let Some(last) = findings.last_mut()
    {
        last.summary.push_str(&format!(
            " (and {rest} more units at or above {threshold} in this window)"
        ));
    }
    // Forget processes that exited (memory stays bounded over days).
    unknown.retain(|p| Path::new(&format!("/proc/{p}")).exists());
    findings
}

fn unit_finding(s: &UnitScore, threshold: f64) -> Finding {
    let why: Vec<String> = s
        .differences
        .iter()
        .take(3)
        .map(|d| format!("{:?} {}", d.kind, d.path))
        .collect();
    Finding {
        kind: "unit".into(),
        summary: format!(
            "{}[{}] tid {} {} unit at {} scores {:.3} (alert at {threshold}){}{}",
            s.comm,
            s.pid,
            s.tid,
            s.kind.name(),
            s.wall,
            s.score,
            s.peer
                .as_deref()
                .map(|p| format!(", peer {p}"))
                .unwrap_or_default(),
            if why.is_empty() {
                format!(": {}", s.reason)
            } else {
                format!(": {}", why.join("; "))
            }
        ),
        detail: serde_json::to_value(s).unwrap_or_default(),
    }
}

/// An error and its causes on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::UnitKind;

    fn score(pid: u32, score: f64, reason: &str) -> UnitScore {
        UnitScore {
            host: "h".into(),
            pid,
            comm: "d".into(),
            tid: pid,
            kind: UnitKind::Handler,
            start_ns: 0,
            end_ns: 0,
            t_s: 0.0,
            wall: String::new(),
            wall_ns: 0,
            deviated_wall_ns: 0,
            deviated_s: 0.0,
            capture: "live".into(),
            role: "main".into(),
            connection: None,
            peer: None,
            score,
            normal: None,
            anomalous: false,
            reason: reason.into(),
            differences: Vec::new(),
            evidence: Vec::new(),
            unsure: Vec::new(),
            behaviour: None,
            open: Vec::new(),
            exited: false,
            cut: false,
            shared: false,
            group: None,
            ended_by: None,
            not_judged: Vec::new(),
        }
    }

    #[test]
    fn findings_do_not_flood() {
        let me = std::process::id();
        let mut unknown = BTreeSet::new();
        let mut scores: Vec<UnitScore> = (0..20)
            .map(|_| score(me, 1.0, "no process group with this signature in the model"))
            .collect();
        scores.extend((0..8).map(|i| score(1, 0.99 - f64::from(i) * 0.001, "nodes")));
        scores.push(score(1, 0.5, "nodes"));
        let findings = unit_findings(&scores, 0.9, &mut unknown);
        let kinds: Vec<&str> = findings.iter().map(|a| a.kind.as_str()).collect();
        assert_eq!(kinds, ["process", "unit", "unit", "unit", "unit", "unit"]);
        assert!(
            findings[5]
                .summary
                .ends_with("(and 3 more units at or above 0.9 in this window)")
        );
        // The unknown process (this test, alive) is reported once.
        let again = unit_findings(&scores[..20], 0.9, &mut unknown);
        assert!(again.is_empty(), "{again:?}");
    }

    /// A setup whose model does not load is answered with the error, and
    /// a window that does not decode too; the process goes on serving.
    #[test]
    fn bad_input_is_answered_not_fatal() {
        use tracer_common::live::{FileRef, write_request};
        let mut pipe = Vec::new();
        let model = br#"{"version":3,"variant":"000","groups":[{"signature":[],"processes":1,"examples":[],"initializer":{},"finalizer":{},"pre_process":{},"post_process":{},"handlers":{"c":{"models":1,"units":1,"nodes":[{"parent":5,"site":"","callee":"a","p_sum":1.0}]}}}],"sources":[]}"#;
        write_request(
            &mut pipe,
            &Request::Setup {
                version: LIVE_VERSION,
                model: Some(FileRef {
                    name: "model.json".into(),
                    bytes: model.len() as u64,
                }),
                scoring: WireScoring::Nodes,
                alert_score: 0.9,
                thresholds: None,
            },
            &[model],
        )
        .expect("write");
        write_request(
            &mut pipe,
            &Request::Window {
                version: LIVE_VERSION,
                since_ns: 0,
                now_ns: 1,
                host: "h".into(),
                bytes: 5,
            },
            &[b"junk!"],
        )
        .expect("write");
        let mut out = Vec::new();
        serve(pipe.as_slice(), &mut out, 1 << 20).expect("serves to the end");
        let answers: Vec<Answer> = out
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| tracer_common::live::parse_answer(l).expect("answer"))
            .collect();
        assert_eq!(answers.len(), 2);
        let e = answers[0].error.as_deref().unwrap_or_default();
        assert!(
            e.contains("model.json is not a valid model") && e.contains("node 0's parent 5"),
            "{e}"
        );
        let e = answers[1].error.as_deref().unwrap_or_default();
        assert!(
            e.starts_with("decoding the window: not a capture file"),
            "{e}"
        );
    }
}
