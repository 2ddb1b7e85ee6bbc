//! The CPU a traced process got and waited for (`/proc/PID/task/*/schedstat`,
//! read by the recorder by default), and the `cpu-wait` peer metric built on
//! it, on real processes in lock-step.

use std::path::PathBuf;

use analyzer::peers::{self, CaptureSource, Metric, PeersConfig};
use tests::{capture, cpugroup::CpuGroup, privileged, tracer};

/// Three processes in lock-step: server1 computes and hands each result to
/// server0 and server2, which wait for it in blocking reads. server1 is
/// capped at a tenth of a CPU (a cgroup CFS quota). All three slow down
/// alike, but only server1 is runnable while it waits: its run-queue delay
/// per window is many times its peers', which sleep while they wait for it.
#[test]
fn a_cpu_capped_server_waits_for_a_cpu_and_its_waiting_peers_do_not() {
    if !privileged() {
        return;
    }
    let group = match CpuGroup::new() {
        Ok(group) => group,
        Err(e) => {
            eprintln!("no cpu cgroup to cap a process in: {e}");
            return;
        }
    };
    let capped = group.cap(10).expect("a capped leaf");
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = |i: usize| dir.path().join(format!("to{i}"));
    for i in [0, 2] {
        let made = std::process::Command::new("mkfifo")
            .arg(fifo(i))
            .status()
            .expect("mkfifo");
        assert!(made.success());
    }
    let outs: Vec<PathBuf> = (0..3)
        .map(|i| dir.path().join(format!("server{i}.capture")))
        .collect();
    let scripts: Vec<String> = (0..3)
        .map(|i| {
            if i == 1 {
                format!(
                    "echo $$ > {} && exec timeout 6 sh -c 'exec 3>{} 4>{}; i=0; \
                     while :; do i=$((i+1)); if [ $((i % 50)) = 0 ]; then \
                     echo $i >&3; echo $i >&4; fi; done'",
                    capped.display(),
                    fifo(0).display(),
                    fifo(2).display()
                )
            } else {
                format!(
                    "exec timeout 8 sh -c 'while read x; do :; done < {}'",
                    fifo(i).display()
                )
            }
        })
        .collect();
    let runs: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..3)
            .map(|i| {
                let (script, out) = (&scripts[i], &outs[i]);
                scope.spawn(move || {
                    tracer(&[
                        "record",
                        "--sample-hz",
                        "0",
                        "-o",
                        out.to_str().expect("utf8"),
                        "--",
                        "sh",
                        "-c",
                        script,
                    ])
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("tracer thread"))
            .collect()
    });
    for run in &runs {
        assert!(run.status.success(), "{}", run.stderr);
    }
    let caps: Vec<_> = outs.iter().map(|p| capture(p)).collect();
    let labels = ["server0", "server1", "server2"];
    let sources: Vec<CaptureSource<'_>> = caps
        .iter()
        .zip(&outs)
        .zip(labels)
        .map(|((capture, path), label)| CaptureSource {
            path,
            label,
            capture,
        })
        .collect();
    let cfg = PeersConfig {
        window_ns: 2_000_000_000,
        shift_ns: 1_000_000_000,
        metrics: vec![Metric::CpuWait],
        ..PeersConfig::default()
    };
    let features = peers::extract("cap", &sources, &cfg).expect("features");
    let w = features.windows(&cfg);
    assert!(!w.starts.is_empty(), "a window fits in 6 s");
    let wait = &w.metrics[0];
    assert_eq!(wait.empty, None);
    assert_eq!(wait.components, ["runnable, waiting for a CPU"]);
    // Mean per server over the windows, ms waited per 2 s window.
    let mean =
        |s: usize| wait.vectors.iter().map(|v| v[s][0]).sum::<f64>() / wait.vectors.len() as f64;
    let (waiting0, capped, waiting2) = (mean(0), mean(1), mean(2));
    // Capped at 0.1 CPU, a busy loop is runnable but throttled for most of
    // each period: well over half of a 2 s window.
    assert!(
        capped > 1000.0 && capped > 5.0 * waiting0.max(waiting2),
        "capped {capped:.0} ms a window, its waiting peers {waiting0:.0} and {waiting2:.0}"
    );
}
