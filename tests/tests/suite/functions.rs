//! Function entry/return probes on the `calls` fixture.

use std::{
    io::Write as _,
    process::{Command, Stdio},
};

use tests::{
    Background, call_sites, capture, entries_by_function, fixture, privileged, returns_by_function,
    tracer,
};

/// Exact entry and return counts, return values and distinct call sites,
/// with function probes in uprobe_multi links (the default).
#[test]
fn counts_returns_and_call_sites_are_exact() {
    counts_returns_and_call_sites(&[]);
}

/// The same through one perf link per probe (kernels without uprobe_multi).
#[test]
fn counts_are_exact_with_one_perf_link_per_probe() {
    counts_returns_and_call_sites(&["--no-uprobe-multi"]);
}

fn counts_returns_and_call_sites(extra: &[&str]) {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("f.capture");
    let mut argv = vec!["record"];
    argv.extend_from_slice(extra);
    // uprobe_multi: one entry and one return link for the object's 3 functions.
    let multi = extra.is_empty();
    let run = tracer(
        &[
            argv.as_slice(),
            &[
                "-f",
                "leaf",
                "-f",
                "site_*",
                "--sample-hz",
                "0",
                "-o",
                out.to_str().expect("utf8"),
                "--",
                calls.to_str().expect("utf8"),
                "run",
                "7",
            ],
        ]
        .concat(),
    );
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(
        run.stderr.contains("links, 2 of them uprobe_multi)"),
        multi,
        "{}",
        run.stderr
    );
    let cap = capture(&out);
    let counts = entries_by_function(&cap);
    let per_fn: Vec<(&str, usize)> = counts.iter().map(|((_, f), n)| (f.as_str(), *n)).collect();
    assert_eq!(per_fn, vec![("leaf", 7 + 3), ("site_a", 1), ("site_b", 3)]);
    let rets = returns_by_function(&cap);
    assert_eq!(rets["leaf"], vec![0, 2, 4, 6, 8, 10, 12, 20, 22, 24]);
    assert_eq!(rets["site_a"], vec![42]);
    assert_eq!(rets["site_b"], vec![21, 23, 25]);
    // leaf is called from one place in site_a and one in site_b.
    let sites = call_sites(&cap, "leaf");
    assert_eq!(sites.len(), 2, "{sites:?}");
    assert_eq!(
        sites
            .iter()
            .filter(|(s, _)| s.starts_with("site_a+"))
            .map(|(_, n)| *n)
            .sum::<usize>(),
        7,
        "{sites:?}"
    );
    assert_eq!(
        sites
            .iter()
            .filter(|(s, _)| s.starts_with("site_b+"))
            .map(|(_, n)| *n)
            .sum::<usize>(),
        3,
        "{sites:?}"
    );
    assert!(cap.end.is_some(), "the capture was closed");
    assert_eq!(cap.lost_records(), 0);
}

/// `-a` records the argument registers.
#[test]
fn argument_registers_are_recorded() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("a.capture");
    let run = tracer(&[
        "record",
        "-a",
        "leaf",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        calls.to_str().expect("utf8"),
        "run",
        "4",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let cap = capture(&out);
    let args: Vec<u64> = tests::events(&cap)
        .into_iter()
        .filter_map(|e| match e {
            analyzer::Event::Entry { args: Some(a), .. } => Some(a[0]),
            _ => None,
        })
        .collect();
    assert_eq!(args, vec![0, 1, 2, 3, 10, 11, 12]);
}

/// A function of a CET build starts with `endbr64`, which the kernel
/// single-steps under a probe (~10 us a call here): the probe goes past it,
/// where the `push` is emulated (~1 us), and records the same calls, with
/// the same arguments and return values.
#[test]
fn a_cet_function_is_probed_past_its_endbr64() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("endbr.capture");
    let run = tracer(&[
        "record",
        "-a",
        "endbr_leaf",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        calls.to_str().expect("utf8"),
        "endbr",
        "200",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let cap = capture(&out);
    let probe = cap
        .probes
        .iter()
        .find(|p| p.symbol == "endbr_leaf")
        .unwrap_or_else(|| panic!("endbr_leaf probed: {:?}", cap.probes));
    // Weighed by the `push` after the endbr64: attached there.
    assert_eq!(
        probe.entry_class,
        tracer_common::capture::EntryClass::Push,
        "{probe:?}"
    );
    let events = tests::events(&cap);
    let args: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            analyzer::Event::Entry { args: Some(a), .. } => Some(a[0]),
            _ => None,
        })
        .collect();
    assert_eq!(args, (0..200).collect::<Vec<u64>>());
    let returned: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            analyzer::Event::Return(r) => Some(r.ret),
            _ => None,
        })
        .collect();
    assert_eq!(returned, (0..200).map(|i| 3 * i).collect::<Vec<u64>>());
}

/// Attaching to a process that is already running.
#[test]
fn attaches_to_a_running_pid() {
    if !privileged() {
        return;
    }
    let calls = fixture("calls", None);
    let mut target = Command::new(&calls)
        .args(["wait", "5"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("fixture starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("p.capture");
    let pid = target.id().to_string();
    let bg = Background::start(&[
        "record",
        "-p",
        &pid,
        "-f",
        "leaf",
        "-o",
        out.to_str().expect("utf8"),
    ]);
    target
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("release the fixture");
    assert!(target.wait().expect("fixture exits").success());
    let mut child = bg;
    let status = child
        .child
        .wait()
        .expect("tracer exits when its target did");
    assert!(status.success());
    let cap = capture(&out);
    let counts = entries_by_function(&cap);
    assert_eq!(
        counts.get(&(target.id(), "leaf".to_string())),
        Some(&8),
        "{counts:?}"
    );
    assert_eq!(
        cap.end.as_ref().map(|e| e.reason.as_str()),
        Some("targets exited")
    );
}
