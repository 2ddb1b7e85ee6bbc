//! Instruction-pointer samples.

use std::process::Command;

use analyzer::{Event, Symbolizer};
use tests::{capture, events, fixture, privileged, tracer};

/// Samples of a busy traced process land in its hot function.
#[test]
fn samples_land_in_the_hot_function() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("h.capture");
    let run = tracer(&[
        "record",
        "--sample-hz",
        "250",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        calls.to_str().expect("utf8"),
        "spin",
        "2500",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let cap = capture(&out);
    let sym = Symbolizer::new(&cap);
    let samples: Vec<_> = events(&cap)
        .into_iter()
        .filter_map(|e| match e {
            Event::Sample(s) => Some(s),
            _ => None,
        })
        .collect();
    assert!(samples.len() >= 100, "{} samples", samples.len());
    let in_hot = samples
        .iter()
        .filter(|s| {
            sym.user(s.header.pid, s.user_ip)
                .and_then(|l| l.symbol.map(str::to_string))
                .is_some_and(|f| f == "hot" || f.contains("clock_gettime"))
        })
        .count();
    assert!(
        in_hot * 10 >= samples.len() * 8,
        "{in_hot} of {} samples in hot()",
        samples.len()
    );
}

/// `--sample-all` sees an untraced busy process by name, and its samples
/// land in its hot function; the capture holds only the symbols its
/// samples fell in, not its objects' whole tables (a busy host's compilers
/// made captures of seconds hundreds of MB and stops a minute late).
#[test]
fn sample_all_sees_another_busy_process() {
    if !privileged() {
        return;
    }
    let hog = fixture("calls", Some("hogger"));
    // Spins until killed: the recording may start late on a loaded machine.
    let mut busy = Command::new(&hog)
        .args(["spin", "60000"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("hog starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("all.capture");
    let run = tracer(&[
        "record",
        "--sample-all",
        "--sample-hz",
        "200",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        "sleep",
        "2",
    ]);
    let _ = busy.kill();
    let _ = busy.wait();
    assert!(run.status.success(), "{}", run.stderr);
    let cap = capture(&out);
    let sym = Symbolizer::new(&cap);
    let hog_samples: Vec<_> = events(&cap)
        .into_iter()
        .filter_map(|e| match e {
            Event::Sample(s) if s.comm.starts_with(b"hogger\0") => Some(s),
            _ => None,
        })
        .collect();
    assert!(
        hog_samples.len() >= 50,
        "{} samples of the hog",
        hog_samples.len()
    );
    let symbolized = hog_samples
        .iter()
        .filter(|s| {
            sym.user(s.header.pid, s.user_ip)
                .is_some_and(|l| l.symbol == Some("hot"))
        })
        .count();
    assert!(
        symbolized * 2 >= hog_samples.len(),
        "{symbolized} of {} hog samples symbolized to hot()",
        hog_samples.len()
    );
    let hog_path = hog.to_str().expect("utf8");
    let table = &cap
        .objects
        .get(hog_path)
        .unwrap_or_else(|| panic!("{:?}", cap.objects.keys()))
        .symbols;
    let sampled: std::collections::BTreeSet<&str> = hog_samples
        .iter()
        .filter_map(|s| sym.user(s.header.pid, s.user_ip))
        .filter(|l| l.object == hog_path)
        .filter_map(|l| l.symbol)
        .collect();
    let written: std::collections::BTreeSet<&str> = table.iter().map(|s| s.name.as_str()).collect();
    // Its samples were placed by this table, so each sampled symbol is in
    // it; what matters is that nothing else is (`calls` has a dozen).
    assert_eq!(written, sampled, "the hog's symbols are those sampled");
}

/// `--sample-all --exe`: a process sampled while it ran a shell (untraced,
/// only the symbols its samples fell in) that then execs the target is
/// traced from its exec: the program's whole table is in the capture, and
/// its samples land in its hot function.
#[test]
fn a_sampled_process_that_execs_the_target_gets_its_whole_table() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", Some("execd"));
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("exec.capture");
    let calls_s = calls.to_str().expect("utf8");
    let rec = tests::Background::start(&[
        "record",
        "--sample-all",
        "--sample-hz",
        "200",
        "--exe",
        calls_s,
        "-f",
        "leaf",
        "-o",
        out.to_str().expect("utf8"),
    ]);
    // The shell spins first (sampled, untraced), then becomes the target.
    let status = Command::new("sh")
        .args([
            "-c",
            &format!("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; exec {calls_s} spin 400"),
        ])
        .status()
        .expect("sh runs");
    assert!(status.success());
    assert!(rec.stop("INT").success());
    let cap = capture(&out);
    let table = &cap
        .objects
        .get(calls_s)
        .unwrap_or_else(|| panic!("{:?}", cap.objects.keys()))
        .symbols;
    for f in ["main", "leaf", "hot"] {
        assert!(
            table.iter().any(|s| s.name == f),
            "{f} missing from the target's table: {:?}",
            table.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
    }
    let sym = Symbolizer::new(&cap);
    let (mut shell, mut hot, mut elsewhere) = (0, 0, Vec::new());
    for e in events(&cap) {
        if let Event::Sample(s) = e {
            if s.comm.starts_with(b"sh\0") {
                shell += 1;
            } else if s.comm.starts_with(b"execd\0") {
                match sym.user(s.header.pid, s.user_ip) {
                    Some(l) if l.symbol == Some("hot") => hot += 1,
                    l => elsewhere.push(l.map(|l| l.to_string())),
                }
            }
        }
    }
    assert!(
        shell > 10 && hot > 20,
        "shell {shell}, hot {hot} samples; elsewhere: {elsewhere:?}"
    );
}
