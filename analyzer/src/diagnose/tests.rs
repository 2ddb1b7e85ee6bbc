//! The verdict combination and the page, on hand-made analysis results.

use super::*;

fn finding(analysis: AnalysisKind, level: Level, key: &str, wall_s: Option<u64>) -> Finding {
    Finding {
        analysis,
        level,
        key: key.into(),
        name: key.into(),
        parent: None,
        evidence: "test".into(),
        score: Some(2.0),
        normal: Some(1.0),
        wall_ns: wall_s.map(|s| s * 1_000_000_000),
        at_s: None,
        detail: format!("{} evidence on {key}", analysis.name()),
        site: None,
        source: None,
    }
}

fn result(analysis: AnalysisKind, status: Status, findings: Vec<Finding>) -> AnalysisResult {
    AnalysisResult {
        analysis,
        status,
        summary: format!("{} says {}", analysis.name(), status.describe()),
        reason: None,
        untrained: false,
        notes: Vec::new(),
        not_judged: Vec::new(),
        findings,
    }
}

fn not_run_rest(mut v: Vec<AnalysisResult>) -> Vec<AnalysisResult> {
    for kind in AnalysisKind::ALL {
        if !v.iter().any(|a| a.analysis == kind) {
            v.push(AnalysisResult::not_run(kind, "not given"));
        }
    }
    v
}

/// A server two analyses point at ranks above one that a single analysis
/// names, even when the single one saw its suspect earlier; the findings
/// of both analyses are joined under one suspect.
#[test]
fn suspects_named_by_more_analyses_rank_first() {
    let model = result(
        AnalysisKind::Model,
        Status::Found,
        vec![
            finding(AnalysisKind::Model, Level::Server, "s1", Some(100)),
            finding(AnalysisKind::Model, Level::Process, "s1/77", Some(100)),
        ],
    );
    let peers = result(
        AnalysisKind::Peers,
        Status::Found,
        vec![
            finding(AnalysisKind::Peers, Level::Server, "s1", Some(90)),
            finding(AnalysisKind::Peers, Level::Server, "s2", Some(10)),
        ],
    );
    let d = combine(vec!["run".into()], not_run_rest(vec![peers, model]), 3);
    assert_eq!(d.version, DIAGNOSIS_VERSION);
    assert_eq!(d.outcome, Outcome::SuspectFound);
    let servers: Vec<&Suspect> = d.at(Level::Server).collect();
    assert_eq!(servers[0].key, "s1");
    assert_eq!(
        servers[0].analyses,
        vec![AnalysisKind::Model, AnalysisKind::Peers]
    );
    assert_eq!(
        servers[0].wall.as_deref(),
        Some("00:01:30.000"),
        "the earliest"
    );
    assert!(
        servers[0]
            .sentence
            .starts_with("server s1, from 00:01:30.000 UTC: ")
            && servers[0].sentence.contains("[model]")
            && servers[0].sentence.contains("[peers]"),
        "{}",
        servers[0].sentence
    );
    assert_eq!(servers[1].key, "s2");
    assert!(
        d.summary[0].starts_with("most suspect server: s1 (by model and peers; 1 other"),
        "{:?}",
        d.summary
    );
    assert_eq!(d.analyses.len(), 5);
    assert_eq!(d.analyses[0].analysis, AnalysisKind::Model, "report order");
    // Both name s1: no disagreement at the server level.
    assert!(d.disagreements.is_empty(), "{:?}", d.disagreements);
}

/// Among suspects with the same support, the earliest first; evidence of
/// untrained analyses alone ranks after trained evidence.
#[test]
fn earliest_first_and_untrained_last() {
    let mut peers = result(
        AnalysisKind::Peers,
        Status::Found,
        vec![finding(
            AnalysisKind::Peers,
            Level::Server,
            "early",
            Some(1),
        )],
    );
    peers.untrained = true;
    let model = result(
        AnalysisKind::Model,
        Status::Found,
        vec![
            finding(AnalysisKind::Model, Level::Server, "late", Some(50)),
            finding(AnalysisKind::Model, Level::Server, "later", Some(60)),
        ],
    );
    let d = combine(Vec::new(), not_run_rest(vec![model, peers]), 3);
    let order: Vec<(&str, bool)> = d
        .at(Level::Server)
        .map(|s| (s.key.as_str(), s.untrained_only))
        .collect();
    assert_eq!(
        order,
        vec![("late", false), ("later", false), ("early", true)]
    );
    // Disjoint servers: the analyses disagree, and it is said.
    assert_eq!(d.disagreements.len(), 1, "{:?}", d.disagreements);
    assert!(
        d.disagreements[0].contains("model names late, later but peers names early"),
        "{:?}",
        d.disagreements
    );
}

/// "Nothing stands out" needs an analysis that judged the run; analyses
/// that did not run or had no data give "no data", never "nothing".
#[test]
fn nothing_stands_out_is_never_no_data() {
    let d = combine(Vec::new(), not_run_rest(Vec::new()), 1);
    assert_eq!(d.outcome, Outcome::NoData);
    assert!(d.summary[0].starts_with("no verdict"), "{:?}", d.summary);

    let mut no_units = result(AnalysisKind::Model, Status::NoData, Vec::new());
    no_units.reason = Some("no execution unit in the captures".into());
    let d = combine(Vec::new(), not_run_rest(vec![no_units.clone()]), 1);
    assert_eq!(d.outcome, Outcome::NoData);
    assert!(
        d.summary
            .iter()
            .any(|l| l == "model: no data: no conclusion (no execution unit in the captures)"),
        "{:?}",
        d.summary
    );

    let quiet = result(AnalysisKind::Hang, Status::NothingStandsOut, Vec::new());
    let d = combine(Vec::new(), not_run_rest(vec![no_units, quiet]), 1);
    assert_eq!(d.outcome, Outcome::NothingStandsOut);
    assert!(d.suspects.is_empty());
    assert_eq!(
        d.summary[0],
        "nothing stands out: hang judged the run and found nothing abnormal"
    );
    assert!(
        d.summary.iter().any(|l| l.starts_with("model: no data")),
        "the analysis without data is still named: {:?}",
        d.summary
    );
}

/// One analysis finding a suspect where another judged the run and found
/// nothing is a disagreement; so are two analyses naming different ranks.
#[test]
fn disagreements_are_said() {
    let interference = result(
        AnalysisKind::Interference,
        Status::Found,
        vec![finding(
            AnalysisKind::Interference,
            Level::Process,
            "h/1",
            None,
        )],
    );
    let outliers = result(
        AnalysisKind::Outliers,
        Status::Found,
        vec![finding(AnalysisKind::Outliers, Level::Process, "h/3", None)],
    );
    let hang = result(AnalysisKind::Hang, Status::NothingStandsOut, Vec::new());
    let d = combine(
        Vec::new(),
        not_run_rest(vec![interference, outliers, hang]),
        1,
    );
    assert_eq!(d.outcome, Outcome::SuspectFound);
    assert_eq!(d.disagreements.len(), 3, "{:#?}", d.disagreements);
    assert!(d.disagreements[0].starts_with("interference points at suspects"));
    assert!(d.disagreements[0].contains("where hang finds nothing standing out"));
    assert!(
        d.disagreements[2]
            .contains("at the process level, interference names h/1 but outliers names h/3"),
        "{:#?}",
        d.disagreements
    );
}

/// An analysis that found nothing but could not judge the suspect (an MPI
/// rank it did not monitor) does not disagree: the verdict says it could
/// not judge it; one that judged some of the suspects still disagrees.
#[test]
fn a_suspect_another_analysis_could_not_judge_is_no_disagreement() {
    let hang = result(
        AnalysisKind::Hang,
        Status::Found,
        vec![finding(AnalysisKind::Hang, Level::Process, "h/11", None)],
    );
    let mut interference = result(
        AnalysisKind::Interference,
        Status::NothingStandsOut,
        Vec::new(),
    );
    interference.not_judged = vec!["h/11".into()];
    let outliers = result(AnalysisKind::Outliers, Status::NothingStandsOut, Vec::new());
    let d = combine(
        Vec::new(),
        not_run_rest(vec![hang, interference, outliers]),
        1,
    );
    assert_eq!(
        d.unconfirmed,
        ["interference could not judge h/11, which hang points at"]
    );
    assert_eq!(d.disagreements.len(), 1, "{:#?}", d.disagreements);
    assert!(
        d.disagreements[0].starts_with("hang points at suspects")
            && d.disagreements[0].contains("where outliers finds nothing standing out"),
        "{:#?}",
        d.disagreements
    );
}

/// With one server, "the server" is no localization: server-level findings
/// are left out, processes stay.
#[test]
fn one_server_is_no_suspect() {
    let model = result(
        AnalysisKind::Model,
        Status::Found,
        vec![
            finding(AnalysisKind::Model, Level::Server, "host", Some(5)),
            finding(AnalysisKind::Model, Level::Process, "host/9", Some(5)),
            finding(AnalysisKind::Model, Level::Function, "close", Some(5)),
        ],
    );
    let d = combine(Vec::new(), not_run_rest(vec![model]), 1);
    let levels: Vec<Level> = d.suspects.iter().map(|s| s.level).collect();
    assert_eq!(levels, vec![Level::Process, Level::Function]);
    assert!(d.summary[0].starts_with("most suspect process: host/9"));
}

/// Server labels: the file stems of several captures (as `peers` labels
/// them), the host of one; a host maps to its capture's label when one
/// capture comes from it.
#[test]
fn servers_of_a_run() {
    let one = from::RunServers::new(&[("d/a.capture".into(), "node1".into())]);
    assert_eq!(
        (one.count(), one.of_host("node1")),
        (1, "node1".to_string())
    );
    let two = from::RunServers::new(&[
        ("d/a.capture".into(), "n1".into()),
        ("d/b.capture".into(), "n2".into()),
    ]);
    assert_eq!(two.count(), 2);
    assert_eq!(two.of_capture("d/b.capture", "n2"), "b");
    assert_eq!(two.of_host("n1"), "a");
    assert_eq!(two.of_host("elsewhere"), "elsewhere");
    assert_eq!(
        from::function_of("main > loop@x.c:3 > close@y.c:9"),
        "close"
    );
}

/// Everything from a capture is escaped: a function named `<script>` is
/// text on the page, never markup; every section is there even for
/// analyses that did not run, and the JSON form names its version.
#[test]
fn the_page_escapes_capture_text_and_has_every_section() {
    let evil = "<script>alert('x')</script>";
    let mut f = finding(AnalysisKind::Model, Level::Function, evil, Some(3));
    f.detail = format!("a call no normal run made here: main > {evil}");
    let model = result(AnalysisKind::Model, Status::Found, vec![f]);
    let d = combine(
        vec![format!("/tmp/{evil}.capture")],
        not_run_rest(vec![model]),
        1,
    );
    let page = html::render(&d, &html::Reports::default());
    assert!(!page.contains(evil), "raw capture text in the page");
    assert!(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    // The page's own scripts: the error catcher and the one at the end.
    assert_eq!(page.matches("<script>").count(), 2);
    for id in [
        "verdict",
        "suspects",
        "analysis-model",
        "analysis-peers",
        "analysis-interference",
        "analysis-outliers",
        "analysis-hang",
    ] {
        assert!(page.contains(&format!(r#"<section id="{id}">"#)), "{id}");
    }
    assert!(page.contains(r#"data-outcome="suspect_found""#));
    assert!(!page.contains("src="), "no external resource");
    let json = serde_json::to_value(&d).expect("json");
    assert_eq!(json["version"], DIAGNOSIS_VERSION);
    assert_eq!(json["outcome"], "suspect_found");
    assert_eq!(json["analyses"][1]["status"], "not_run");
}

/// A capture's names reach the page through a model report too (process
/// names, call paths in the evidence, the units table, the plot): all
/// escaped.
#[test]
fn model_report_text_is_escaped_everywhere_on_the_page() {
    use crate::{
        score::{Ranking, ScoreReport, Scoring, UnitScore},
        units::Variant,
    };
    let evil = "<script>alert(1)</script>";
    let unit: UnitScore = serde_json::from_value(serde_json::json!({
        "host": "h<b>", "pid": 7, "comm": evil, "tid": 7, "kind": "handler",
        "start_ns": 1, "end_ns": 2, "t_s": 0.5, "wall": "00:00:01.000",
        "wall_ns": 1_000_000_000u64, "capture": "c.capture", "connection": null,
        "peer": evil, "score": 1.0, "anomalous": true, "reason": evil,
        "differences": [{"path": format!("main > {evil}@main+0x1"), "kind": "unexpected", "p": 1.0, "delta": 1.0}],
        "evidence": [{"kind": "new_call", "paths": [format!("main > {evil}@main+0x1")], "learned": 3}],
    }))
    .expect("a unit score");
    let report = ScoreReport::new(
        Variant::Paper000,
        Scoring::Nodes,
        Ranking::Evidence,
        &["c.capture".to_string()],
        vec![unit],
    );
    let servers = from::RunServers::new(&[("c.capture".into(), "h<b>".into())]);
    let result = from::model(&report, &servers);
    assert_eq!(result.status, Status::Found, "{}", report.summary);
    assert!(
        result
            .findings
            .iter()
            .any(|f| f.level == Level::Function && f.name == evil),
        "{:#?}",
        result.findings
    );
    let d = combine(vec!["c.capture".into()], not_run_rest(vec![result]), 1);
    let page = html::render(
        &d,
        &html::Reports {
            model: Some(&report),
            ..Default::default()
        },
    );
    assert!(
        !page.contains("<script>alert"),
        "raw capture text in the page"
    );
    assert!(!page.contains("<b>"), "raw capture text in the page");
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.contains(r#"<table class="sortable" id="model-units">"#));
}

/// A hung run whose culprit the wait-for graph cannot tell is no "nothing
/// stands out": its stuck ranks are the suspects; a run that is not hung
/// gives none.
#[test]
fn a_hang_without_a_culprit_still_names_the_stuck_ranks() {
    use crate::mpi::{verdict::Verdict as MpiVerdict, waitfor::HangReport};
    let hang = |hung: bool| -> HangReport {
        serde_json::from_value(serde_json::json!({
            "version": 1, "threshold_ns": 1_000_000_000u64, "threshold_source": "given",
            "hung": hung, "culprits": [],
            "ranks": [
                {"rank": 0, "host": "h", "pid": 10, "state": {"kind": "finished"}, "call": null,
                 "call_site": 0, "waits_for": [], "idle_ns": 5_000_000_000u64},
                {"rank": 1, "host": "h", "pid": 11, "state": {"kind": "blocked"}, "call": "MPI_Recv",
                 "call_site": 0, "waits_for": [0], "idle_ns": 5_000_000_000u64},
            ],
        }))
        .expect("a hang report")
    };
    let verdict = MpiVerdict::new(
        "hang",
        Vec::new(),
        Vec::new(),
        vec![0, 1],
        "the MPI progress of",
    );
    let servers = from::RunServers::new(&[("c.capture".into(), "h".into())]);
    let r = from::hang(
        &hang(true),
        &verdict,
        &servers,
        &mut |_| String::new(),
        &mut |_| (None, None),
    );
    assert_eq!(r.status, Status::Found);
    let keys: Vec<&str> = r.findings.iter().map(|f| f.key.as_str()).collect();
    assert_eq!(keys, ["h/11"], "the finished rank is no suspect");
    assert!(
        r.findings[0].detail.contains("in MPI_Recv"),
        "{}",
        r.findings[0].detail
    );
    let r = from::hang(
        &hang(false),
        &verdict,
        &servers,
        &mut |_| String::new(),
        &mut |_| (None, None),
    );
    assert_eq!((r.status, r.findings.len()), (Status::NothingStandsOut, 0));
}

/// A culprit computing outside MPI (a rank stuck in its own code): the
/// process suspect is dated from its last MPI transition, and the code
/// after its last MPI call is the function suspect, with its source line.
#[test]
fn a_hang_culprit_outside_mpi_is_dated_and_placed() {
    use crate::mpi::{
        verdict::{Suspect as MpiSuspect, Verdict as MpiVerdict},
        waitfor::HangReport,
    };
    let report: HangReport = serde_json::from_value(serde_json::json!({
        "version": 1, "threshold_ns": 1_000_000_000u64, "threshold_source": "given",
        "hung": true,
        "culprits": [{"rank": 1, "reason": "computing since its MPI_Allreduce returned", "blocking": [0]}],
        "ranks": [
            {"rank": 0, "host": "h", "pid": 10, "state": {"kind": "blocked"}, "call": "MPI_Recv",
             "call_site": 0, "waits_for": [1], "idle_ns": 5_000_000_000u64},
            {"rank": 1, "host": "h", "pid": 11, "state": {"kind": "computing"}, "call": null,
             "call_site": 4096, "waits_for": [], "idle_ns": 5_000_000_000u64},
        ],
    }))
    .expect("a hang report");
    let verdict = MpiVerdict::new(
        "hang",
        vec![MpiSuspect {
            rank: 1,
            host: "h".into(),
            pid: 11,
            cpus: vec![1],
            score: 5.0,
            threshold: 1.0,
            evidence: "hang culprit".into(),
            detail: "computing since its MPI_Allreduce returned".into(),
        }],
        Vec::new(),
        vec![0, 1],
        "the MPI progress of",
    );
    let servers = from::RunServers::new(&[("c.capture".into(), "h".into())]);
    const LAST: u64 = 1_700_000_003_000_000_000;
    let r = from::hang(
        &report,
        &verdict,
        &servers,
        &mut |w| {
            if w.call_site == 4096 {
                "main (halo.c:80)".to_string()
            } else {
                String::new()
            }
        },
        &mut |w| {
            if w.rank == 1 {
                (Some(LAST), Some(3.0))
            } else {
                (None, None)
            }
        },
    );
    assert_eq!(r.status, Status::Found);
    let d = combine(vec!["c.capture".into()], not_run_rest(vec![r]), 1);
    let process = d.at(Level::Process).next().expect("the culprit");
    assert_eq!(process.key, "h/11");
    assert_eq!(process.wall_ns, Some(LAST));
    assert!(
        process
            .sentence
            .contains(&format!("from {} UTC", wall_clock(LAST))),
        "{}",
        process.sentence
    );
    let function = d.at(Level::Function).next().expect("where it stood");
    assert_eq!(function.key, "main");
    assert_eq!(
        function.findings[0].source.as_deref(),
        Some("main (halo.c:80)")
    );
    assert!(
        function.sentence.contains("outside MPI") && function.sentence.contains("halo.c:80"),
        "{}",
        function.sentence
    );
}
