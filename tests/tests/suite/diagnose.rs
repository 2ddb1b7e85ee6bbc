//! `analyzer diagnose` end to end: a recorded faulty run of the daemon ring
//! (the model test's fixture), one combined verdict naming the daemons the
//! fault shows in, and the HTML report loaded in a real headless browser.

use analyzer::{
    diagnose::{AnalysisKind, DIAGNOSIS_VERSION, Diagnosis, Level, Outcome, Status},
    score::ScoreReport,
};
use tests::{analyzer, fixture, installed, privileged};

/// Records one ring run (4 daemons, 10 rounds) of the program `exe` and
/// returns the capture path.
fn ring_run(
    exe: &std::path::Path,
    dir: &std::path::Path,
    name: &str,
    port: u16,
    fault: Option<u16>,
) -> String {
    let out = dir.join(format!("{name}.capture"));
    tests::record_ring(exe, &out, port, fault);
    out.display().to_string()
}

/// The DOM of `page` after its scripts ran, from headless chromium.
fn dump_dom(page: &std::path::Path, profile: &std::path::Path) -> tests::Run {
    tests::run_bounded(
        std::path::Path::new("chromium"),
        &[
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            &format!("--user-data-dir={}", profile.display()),
            "--dump-dom",
            &format!("file://{}", page.display()),
        ],
    )
}

/// With a model of three normal runs, `diagnose` on the faulty run exits 1,
/// and its JSON verdict puts the daemon that closed the connection (where
/// the fault first showed) first among processes, the daemon that sent the
/// broken header next, `close_connection` among the functions, and says
/// that the peer and MPI analyses did not run and why. The HTML report
/// loads in chromium without a script error, the verdict and every
/// section in its DOM. Without a model nothing can judge the run: exit 0
/// and "no verdict", not "nothing stands out"; a missing capture is a usage
/// error (2).
#[test]
fn diagnose_names_the_faulty_daemons_and_its_report_loads_in_a_browser() {
    if !privileged() || !installed(&["chromium"], "apt-get install chromium (scripts/setup)") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // A copy of the program, stripped once recorded (at the end).
    let ring = dir.path().join("ring");
    std::fs::copy(fixture("ring", None), &ring).expect("copy the ring program");
    let base = tests::port_block(20);
    let normal: Vec<String> = (0..3)
        .map(|i| ring_run(&ring, dir.path(), &format!("normal{i}"), base + i * 5, None))
        .collect();
    let faulty_base = base + 15;
    let faulty = ring_run(&ring, dir.path(), "faulty", faulty_base, Some(2));
    let model = dir.path().join("model.json").display().to_string();
    let mut learn = vec!["model", "learn", "-o", &model];
    learn.extend(normal.iter().map(String::as_str));
    let run = analyzer(&learn);
    assert!(run.status.success(), "{}", run.stderr);

    // Which pid is which daemon, from `model score`: the earliest anomaly
    // is daemon 3's close; daemon 2's handler of its right-hand connection
    // (to daemon 3, listening on base + 3) saw the reset.
    let run = analyzer(&["model", "score", "--model", &model, &faulty, "--json"]);
    assert!(run.status.success(), "{}", run.stderr);
    let scores: ScoreReport = serde_json::from_str(&run.stdout).expect("a score report");
    let closer = scores
        .earliest_in(&faulty)
        .expect("an earliest anomaly")
        .pid;
    let rhs = format!("127.0.0.1:{}", faulty_base + 3);
    let sender = scores
        .units
        .iter()
        .find(|u| u.peer.as_deref() == Some(rhs.as_str()) && u.anomalous)
        .expect("daemon 2's reset handler")
        .pid;
    assert_ne!(closer, sender);

    let html = dir.path().join("report.html");
    let html_arg = html.display().to_string();
    let run = analyzer(&[
        "diagnose", &faulty, "--model", &model, "--json", "-o", &html_arg,
    ]);
    assert_eq!(run.status.code(), Some(1), "a suspect: {}", run.stderr);
    let d: Diagnosis = serde_json::from_str(&run.stdout).expect("a diagnosis");
    assert_eq!(d.version, DIAGNOSIS_VERSION);
    assert_eq!(d.outcome, Outcome::SuspectFound);
    let status = |k: AnalysisKind| d.analysis(k).expect("every analysis is listed").status;
    assert_eq!(status(AnalysisKind::Model), Status::Found);
    for k in [
        AnalysisKind::Peers,
        AnalysisKind::Interference,
        AnalysisKind::Outliers,
        AnalysisKind::Hang,
    ] {
        assert_eq!(status(k), Status::NotRun, "{k:?}");
    }
    let reason = |k: AnalysisKind| {
        d.analysis(k)
            .and_then(|a| a.reason.clone())
            .unwrap_or_default()
    };
    assert!(reason(AnalysisKind::Peers).contains("1 capture(s)"));
    assert!(reason(AnalysisKind::Hang).contains("no MPI calls"));
    assert_eq!(
        d.at(Level::Server).count(),
        0,
        "one host: no server suspect"
    );
    let processes: Vec<&str> = d.at(Level::Process).map(|s| s.name.as_str()).collect();
    let (closer_name, sender_name) = (format!("ring[{closer}]"), format!("ring[{sender}]"));
    assert_eq!(
        processes[..2],
        [closer_name.as_str(), sender_name.as_str()],
        "{processes:?}"
    );
    let first = d.at(Level::Process).next().expect("a process");
    assert!(
        first.wall.is_some() && first.sentence.contains("[model]"),
        "{first:#?}"
    );
    assert!(
        d.summary[0].starts_with(&format!("most suspect process: ring[{closer}] (by model")),
        "{:?}",
        d.summary
    );
    let close = d
        .at(Level::Function)
        .find(|s| s.key == "close_connection")
        .unwrap_or_else(|| panic!("{:#?}", d.at(Level::Function).collect::<Vec<_>>()));
    // The call's source line, from the fixture's debug information: the
    // line of ring.c that calls close_connection.
    let source = close.findings[0].source.as_deref().expect("a source line");
    let line: usize = source
        .strip_prefix("ring.c:")
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("{source}"));
    let ring_c = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/ring.c"),
    )
    .expect("ring.c");
    assert!(
        ring_c
            .lines()
            .nth(line - 1)
            .is_some_and(|l| l.contains("close_connection(")),
        "{source}"
    );
    assert!(
        close.sentence.contains(&format!("(at {source})")),
        "{}",
        close.sentence
    );
    assert!(d.at(Level::Unit).count() >= 2);

    // The text verdict says the same and where the report is.
    let run = analyzer(&["diagnose", &faulty, "--model", &model, "-o", &html_arg]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(
        run.stdout.starts_with("verdict: suspect found\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!("report: {html_arg}")),
        "{}",
        run.stdout
    );
    // Each suspect's score against its normal range, under its sentence.
    let normal = first.findings[0].normal.expect("a normal range");
    assert!(
        run.stdout.contains(&format!(
            "     scores: model {:.3} (normal up to {normal:.3})",
            first.findings[0].score.expect("a score")
        )),
        "{}",
        run.stdout
    );

    // The report, in a browser.
    let page = std::fs::read_to_string(&html).expect("the report was written");
    assert!(!page.contains(" src="), "the page fetches nothing");
    // No address to fetch from: the only URL is the SVG namespace, which
    // names, not fetches; no stylesheet link, import or url().
    let urls: Vec<String> = page
        .match_indices("http")
        .map(|(i, _)| page[i..].chars().take(40).collect::<String>())
        .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
        .filter(|u| !u.starts_with("http://www.w3.org/2000/svg\""))
        .collect();
    assert!(urls.is_empty(), "{urls:?}");
    for fetch in ["<link", "@import", "url(", "<iframe", "<img"] {
        assert!(!page.contains(fetch), "{fetch}");
    }
    let profile = tempfile::tempdir().expect("browser profile");
    let dom = dump_dom(&html, profile.path());
    assert!(dom.status.success(), "chromium: {}", dom.stderr);
    let dom = dom.stdout;
    assert!(
        dom.contains(r#"data-ready="1""#),
        "the scripts did not finish: {dom}"
    );
    // The page's error catcher adds this element on any script error.
    assert!(
        !dom.contains(r#"<div id="script-error">"#),
        "a script error: {dom}"
    );
    for section in [
        "verdict",
        "suspects",
        "analysis-model",
        "analysis-peers",
        "analysis-interference",
        "analysis-outliers",
        "analysis-hang",
    ] {
        assert!(
            dom.contains(&format!(r#"<section id="{section}">"#)),
            "{section}"
        );
        // The table of contents the script builds links every section.
        assert!(
            dom.contains(&format!(r##"<a href="#{section}">"##)),
            "{section}"
        );
    }
    assert!(dom.contains(&format!("most suspect process: ring[{closer}]")));
    assert!(dom.contains(r#"data-outcome="suspect_found""#));
    assert!(dom.contains("<svg"), "the scores plot is inline");

    // The tables sort: a click on the units table's score header (as a
    // person would, by a script added after the page's own) orders its
    // rows by score, lowest first, and marks the column.
    let clicked = dir.path().join("clicked.html");
    let click = r#"<script>document.querySelector('#model-units th:nth-child(2)').click();</script></body>"#;
    std::fs::write(&clicked, page.replacen("</body>", click, 1)).expect("write the copy");
    let dom = dump_dom(&clicked, profile.path());
    assert!(dom.status.success(), "chromium: {}", dom.stderr);
    let table = dom
        .stdout
        .split(r#"id="model-units""#)
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .expect("the units table");
    assert!(table.contains(r#"<th class="asc">score</th>"#), "{table}");
    let scores: Vec<f64> = table
        .split("<tr>")
        .skip(2)
        .filter_map(|row| {
            row.split(r#"data-v=""#)
                .nth(2)?
                .split('"')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(scores.len() >= 2, "{table}");
    assert!(
        scores.windows(2).all(|w| w[0] <= w[1]),
        "not sorted by score: {scores:?}"
    );
    assert!(
        scores.first() < scores.last(),
        "the scores differ, so the order shows: {scores:?}"
    );

    // No model: no analysis applies; "no verdict", exit 0.
    let run = analyzer(&["diagnose", &faulty]);
    assert_eq!(run.status.code(), Some(0), "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with("verdict: no verdict (no analysis could judge the run)"),
        "{}",
        run.stdout
    );
    let missing = dir.path().join("missing.capture").display().to_string();
    let run = analyzer(&["diagnose", &missing]);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(run.stderr.contains(&missing), "{}", run.stderr);

    // A capture cut short (as by a full disk or a killed recorder): the
    // verdict is made from its complete part and says what is missing, in
    // the JSON and on the page.
    let bytes = std::fs::read(&faulty).expect("the faulty capture");
    let cut = dir.path().join("cut.capture");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).expect("write the cut capture");
    let cut = cut.display().to_string();
    let cut_html = dir.path().join("cut.html");
    let run = analyzer(&[
        "diagnose",
        &cut,
        "--model",
        &model,
        "--json",
        "-o",
        &cut_html.display().to_string(),
    ]);
    assert!(matches!(run.status.code(), Some(0 | 1)), "{}", run.stderr);
    let d: Diagnosis = serde_json::from_str(&run.stdout).expect("a diagnosis");
    assert!(
        d.warnings
            .iter()
            .any(|w| w.starts_with(&cut) && w.contains("ends inside a chunk")),
        "{:?}",
        d.warnings
    );
    let page = std::fs::read_to_string(&cut_html).expect("the report");
    assert!(page.contains(r#"<ul id="warnings">"#));

    // The program stripped since it was recorded, as packagers ship it:
    // no source line from it, and the note says why; with its debug file
    // under --debug-dir (found by build id), the same line as before.
    let split_dir = dir.path().join("split");
    std::fs::create_dir_all(&split_dir).expect("mkdir");
    let split = tracer_common::testprog::Program::split(&ring, &split_dir, "ring")
        .expect("binutils are installed");
    std::fs::copy(&split.stripped, &ring).expect("strip the recorded program");
    let close_source = |run: &tests::Run| -> Option<String> {
        let d: Diagnosis = serde_json::from_str(&run.stdout).expect("a diagnosis");
        d.at(Level::Function)
            .find(|s| s.key == "close_connection")
            .and_then(|s| s.findings[0].source.clone())
    };
    let run = analyzer(&["diagnose", &faulty, "--model", &model, "--json"]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert_eq!(
        close_source(&run),
        None,
        "a stripped program lends no lines"
    );
    assert!(
        run.stderr.contains("no source lines for") && run.stderr.contains("ring"),
        "{}",
        run.stderr
    );
    let root = dir.path().join("debug");
    split.install_debug(&root);
    let run = analyzer(&[
        "diagnose",
        &faulty,
        "--model",
        &model,
        "--json",
        "--debug-dir",
        &root.display().to_string(),
    ]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert_eq!(
        close_source(&run).as_deref(),
        Some(source),
        "{}",
        run.stderr
    );
}

/// A hung MPI run (rank 2 computes forever from its tenth iteration, the
/// other ranks wait for it): with no model given, `diagnose` finds the MPI
/// calls and runs the MPI analyses on its own; it exits 1, the hang
/// analysis names rank 2, which leads the process suspects; the
/// interference analysis says it needs a model; and the report's hang
/// section, in chromium, says the run is hung.
#[test]
fn diagnose_names_the_rank_that_hangs_an_mpi_run() {
    use tests::mpi::{Fault, Job, build, record};
    if !privileged()
        || !installed(
            &["mpicc", "mpiexec", "chromium"],
            "apt packages mpich libmpich-dev chromium",
        )
    {
        return;
    }
    let _mpi = tests::mpi::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let job = Job {
        exe: build("mpi_halo", dir.path()),
        args: vec!["400".into(), "4000".into()],
        ranks: 4,
        limit: std::time::Duration::from_secs(6),
    };
    let o = record(
        &job,
        Fault::Hang { rank: 2, iter: 10 },
        &dir.path().join("hang.capture"),
    );
    let pid = o
        .ranks
        .iter()
        .find(|(r, _)| *r == 2)
        .expect("rank 2's pid")
        .1;
    let capture = o.capture.display().to_string();
    let html = dir.path().join("report.html");
    let html_arg = html.display().to_string();
    let run = analyzer(&["diagnose", &capture, "--json", "-o", &html_arg]);
    assert_eq!(run.status.code(), Some(1), "{}{}", run.stdout, run.stderr);
    let d: Diagnosis = serde_json::from_str(&run.stdout).expect("a diagnosis");
    let status = |k: AnalysisKind| d.analysis(k).expect("listed").status;
    assert_eq!(
        status(AnalysisKind::Hang),
        Status::Found,
        "{:#?}",
        d.analyses
    );
    assert_eq!(status(AnalysisKind::Model), Status::NotRun);
    assert_eq!(status(AnalysisKind::Interference), Status::NotRun);
    assert!(
        d.analysis(AnalysisKind::Interference)
            .and_then(|a| a.reason.as_deref())
            .is_some_and(|r| r.contains("--mpi-model")),
        "{:#?}",
        d.analyses
    );
    assert_ne!(status(AnalysisKind::Outliers), Status::NotRun, "it applies");
    let top = d.at(Level::Process).next().expect("a process suspect");
    assert!(
        top.key.ends_with(&format!("/{pid}")) && top.name.contains("rank 2"),
        "{top:#?}"
    );
    assert!(top.analyses.contains(&AnalysisKind::Hang), "{top:#?}");
    // Since when: its last MPI transition, on the wall clock.
    assert!(
        top.wall.is_some() && top.sentence.contains(" UTC: "),
        "{top:#?}"
    );
    // Where: rank 2 computes outside MPI, after its last MPI call, whose
    // line is in the program's own source.
    let place = d
        .at(Level::Function)
        .find(|s| s.parents.contains(&top.key))
        .unwrap_or_else(|| panic!("{:#?}", d.suspects));
    let source = place.findings[0].source.as_deref().unwrap_or_default();
    assert!(
        source.contains("mpi_halo.c:") && place.sentence.contains("outside MPI"),
        "{place:#?}"
    );
    let run = analyzer(&["diagnose", &capture]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(
        run.stdout
            .contains(&format!("most suspect process: rank 2 (pid {pid}")),
        "{}",
        run.stdout
    );
    eprintln!("{}", run.stdout);

    let profile = tempfile::tempdir().expect("browser profile");
    let dom = dump_dom(&html, profile.path());
    assert!(dom.status.success(), "chromium: {}", dom.stderr);
    assert!(dom.stdout.contains(r#"data-ready="1""#));
    assert!(!dom.stdout.contains(r#"<div id="script-error">"#));
    assert!(dom.stdout.contains("The run is hung"), "{}", dom.stdout);
}

/// Records "servers" (NAME, calls per second) at once into `dir`, one
/// capture each (`NAME.capture`), each a `calls pace` process for 12 s.
// The recorders attach one after another on a loaded CI machine (seen
// 1.5 s apart), and peer comparison judges only the span all of them
// recorded: 8 s runs left 6.5 s, too short for the 5 windows of 2 s every
// 1 s that training needs. 12 s leaves room for 6 s of skew.
fn paced_servers(dir: &std::path::Path, servers: &[(&str, &str)]) {
    let calls = fixture("calls", None);
    let runs: Vec<tests::Run> = std::thread::scope(|scope| {
        let handles: Vec<_> = servers
            .iter()
            .map(|(name, rate)| {
                let out = dir.join(format!("{name}.capture"));
                let calls = &calls;
                scope.spawn(move || {
                    tests::tracer(&[
                        "record",
                        "-f",
                        "leaf",
                        "--sample-hz",
                        "0",
                        "-o",
                        &out.display().to_string(),
                        "--",
                        &calls.display().to_string(),
                        "pace",
                        rate,
                        "12",
                    ])
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("recorder thread"))
            .collect()
    });
    for run in &runs {
        assert!(run.status.success(), "{}", run.stderr);
    }
}

/// Peer comparison alone, untrained: four "servers" (one capture each)
/// call `leaf` at a steady pace, one four times as often. With no
/// thresholds, `diagnose` compares them untrained: it exits 1, names the
/// busy one as the server suspect by the call counts, and says everywhere
/// (JSON, text, page) that the comparison was untrained. Three of them
/// compared untrained say what that cannot see. With thresholds trained on
/// a run where all four keep the same pace, the busy one is a suspect by
/// trained evidence.
#[test]
fn diagnose_compares_servers_untrained_and_says_so() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    paced_servers(
        dir.path(),
        &[("s1", "500"), ("s2", "500"), ("s3", "2000"), ("s4", "500")],
    );
    let run_dir = dir.path().display().to_string();
    let html = dir.path().join("report.html");
    let run = analyzer(&[
        "diagnose",
        &run_dir,
        "--json",
        "-o",
        &html.display().to_string(),
    ]);
    assert_eq!(run.status.code(), Some(1), "{}{}", run.stdout, run.stderr);
    let d: Diagnosis = serde_json::from_str(&run.stdout).expect("a diagnosis");
    let peers = d.analysis(AnalysisKind::Peers).expect("listed");
    assert_eq!(peers.status, Status::Found, "{peers:#?}");
    assert!(peers.untrained, "{peers:#?}");
    assert!(
        peers
            .notes
            .iter()
            .any(|n| n.starts_with("untrained comparison")),
        "{:?}",
        peers.notes
    );
    let s3 = d
        .at(Level::Server)
        .find(|s| s.key == "s3")
        .unwrap_or_else(|| panic!("{:#?}", d.suspects));
    assert!(s3.untrained_only, "{s3:#?}");
    assert!(
        s3.sentence.contains("calls of traced functions")
            && s3.sentence.contains("(untrained comparison)")
            && s3.wall.is_some(),
        "{}",
        s3.sentence
    );
    let run = analyzer(&["diagnose", &run_dir]);
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert!(run.stdout.contains(", untrained"), "{}", run.stdout);
    assert!(
        run.stdout.contains("suspect found (untrained)"),
        "{}",
        run.stdout
    );
    let page = std::fs::read_to_string(&html).expect("the report");
    assert!(
        page.contains("<span class=untrained>untrained comparison: no thresholds learned"),
        "the peers section is labelled"
    );

    // Three of them, the busy one among them: an untrained comparison of
    // three servers cannot name one that stood out all along, and says so
    // rather than only "nothing stands out".
    let three: Vec<String> = ["s1", "s2", "s3"]
        .iter()
        .map(|s| {
            dir.path()
                .join(format!("{s}.capture"))
                .display()
                .to_string()
        })
        .collect();
    let mut args = vec!["diagnose", "--json"];
    args.extend(three.iter().map(String::as_str));
    let run = analyzer(&args);
    let d: Diagnosis = serde_json::from_str(&run.stdout).expect("a diagnosis");
    let peers = d.analysis(AnalysisKind::Peers).expect("listed");
    assert!(
        peers.status == Status::Found
            || peers
                .notes
                .iter()
                .any(|n| n.starts_with("with 3 servers, an untrained comparison cannot name")),
        "{peers:#?}"
    );

    // Trained on a run where all four call at the same pace: the busy one
    // is a suspect by trained thresholds, not labelled untrained.
    let clean = dir.path().join("clean");
    std::fs::create_dir_all(&clean).expect("mkdir");
    paced_servers(
        &clean,
        &[("s1", "500"), ("s2", "500"), ("s3", "500"), ("s4", "500")],
    );
    let thresholds = dir.path().join("thresholds.json").display().to_string();
    let run = analyzer(&[
        "peers",
        "train",
        &clean.display().to_string(),
        "--window",
        "2s",
        "--shift",
        "1s",
        "-o",
        &thresholds,
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let run = analyzer(&["diagnose", &run_dir, "--thresholds", &thresholds, "--json"]);
    assert_eq!(run.status.code(), Some(1), "{}{}", run.stdout, run.stderr);
    let d: Diagnosis = serde_json::from_str(&run.stdout).expect("a diagnosis");
    let peers = d.analysis(AnalysisKind::Peers).expect("listed");
    assert_eq!(peers.status, Status::Found, "{peers:#?}");
    assert!(!peers.untrained, "{peers:#?}");
    let s3 = d
        .at(Level::Server)
        .find(|s| s.key == "s3")
        .unwrap_or_else(|| panic!("{:#?}", d.suspects));
    assert!(
        !s3.untrained_only && !s3.sentence.contains("untrained"),
        "{s3:#?}"
    );
}

/// Issue 18's MPI path end to end, through the commands a user types: an
/// interference model learned (`analyzer mpi learn`) from three clean runs
/// (the fewest whose slow stretches its metric trusts,
/// `mpi::learn::MIN_CLEAN_RUNS`)
/// and one with a CPU hog on core 1, then `diagnose --mpi-model` on fresh
/// runs. A continuous hog of three workers on core 0 (the core training did
/// not hog: every processor is monitored) exits 1 with the rank bound to
/// core 0 as the most suspect process, by interference; its report's
/// interference section loads in chromium. (One worker, half the core, is
/// the matrix's hog: on a loaded CI machine the clean runs' own spread set
/// thresholds it missed in 2 of 3 runs at load 5-8; three leave the rank a
/// quarter of its core, found 4 of 4 at load 8-11.) A fresh clean run is judged on both
/// processors (a verdict, not "no data"); whether it is quiet is the
/// matrix's question (`cargo xtask mpi-matrix`), since on a loaded machine
/// other work is itself interference.
#[test]
fn diagnose_with_an_mpi_model_names_the_rank_on_the_hogged_core() {
    use tests::mpi::{Fault, Job, build, record};
    if !privileged()
        || !installed(
            &["mpicc", "mpiexec", "stress-ng", "taskset", "chromium"],
            "apt packages mpich libmpich-dev stress-ng chromium",
        )
    {
        return;
    }
    let _mpi = tests::mpi::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    // `xtask mpi-matrix`'s 2-rank halo job.
    let job = Job {
        exe: build("mpi_halo", dir.path()),
        args: vec!["4500".into(), "20000".into()],
        ranks: 2,
        limit: std::time::Duration::from_secs(20),
    };
    let run = |name: &str, fault: Fault| {
        let out = dir.path().join(format!("{name}.capture"));
        let o = record(&job, fault, &out);
        assert!(
            o.status.is_some_and(|s| s.success()),
            "{name}: the job failed: {:?} ({})",
            o.status,
            o.cpu_group
        );
        o
    };
    let clean: Vec<String> = (0..3)
        .map(|i| {
            run(&format!("clean{i}"), Fault::None)
                .capture
                .display()
                .to_string()
        })
        .collect();
    let hog1 = run(
        "hog1",
        Fault::Hog {
            cpu: 1,
            on_off: false,
            slice_ms: 0,
            workers: 1,
        },
    );
    let model = dir.path().join("mpi-model.json").display().to_string();
    let hog1_capture = hog1.capture.display().to_string();
    let learn = analyzer(&[
        "mpi",
        "learn",
        "--clean",
        &clean[0],
        "--clean",
        &clean[1],
        "--clean",
        &clean[2],
        "--interfered",
        &hog1_capture,
        "-o",
        &model,
    ]);
    assert!(learn.status.success(), "{}{}", learn.stdout, learn.stderr);

    let hog0 = run(
        "hog0",
        Fault::Hog {
            cpu: 0,
            on_off: false,
            slice_ms: 0,
            workers: 3,
        },
    );
    let capture = hog0.capture.display().to_string();
    let html = dir.path().join("report.html");
    let html_arg = html.display().to_string();
    let d = analyzer(&[
        "diagnose",
        &capture,
        "--mpi-model",
        &model,
        "--json",
        "-o",
        &html_arg,
    ]);
    assert_eq!(d.status.code(), Some(1), "{}{}", d.stdout, d.stderr);
    let diagnosis: Diagnosis = serde_json::from_str(&d.stdout).expect("a diagnosis");
    let interference = diagnosis
        .analysis(AnalysisKind::Interference)
        .expect("listed");
    assert_eq!(
        interference.status,
        Status::Found,
        "{:#?}",
        diagnosis.analyses
    );
    let top = diagnosis
        .at(Level::Process)
        .next()
        .expect("a process suspect");
    assert!(
        top.name.contains("CPUs [0]") && top.analyses.contains(&AnalysisKind::Interference),
        "the rank on core 0 first: {top:#?}"
    );
    let profile = tempfile::tempdir().expect("browser profile");
    let dom = dump_dom(&html, profile.path());
    assert!(dom.status.success(), "chromium: {}", dom.stderr);
    assert!(dom.stdout.contains(r#"data-ready="1""#));
    assert!(!dom.stdout.contains(r#"<div id="script-error">"#));
    assert!(
        dom.stdout.contains(r#"id="interference-processors""#),
        "{}",
        dom.stdout
    );

    let fresh = run("clean3", Fault::None).capture.display().to_string();
    let d = analyzer(&["diagnose", &fresh, "--mpi-model", &model, "--json"]);
    assert!(
        matches!(d.status.code(), Some(0 | 1)),
        "{}{}",
        d.stdout,
        d.stderr
    );
    let diagnosis: Diagnosis = serde_json::from_str(&d.stdout).expect("a diagnosis");
    let interference = diagnosis
        .analysis(AnalysisKind::Interference)
        .expect("listed");
    assert!(
        matches!(
            interference.status,
            Status::Found | Status::NothingStandsOut
        ) && interference.not_judged.is_empty(),
        "both processors judged: {interference:#?}"
    );
    eprintln!("clean run: {}", interference.summary);
}
