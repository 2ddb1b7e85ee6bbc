//! `cargo xtask bench`, system-call part: what tracing system calls costs
//! a call, for the traced process and for every other process of the node
//! (the raw `sys_enter`/`sys_exit` tracepoints run for every system call),
//! and how soon the recorder exits after its command ended.
//!
//! Four kinds of call (`bench sys`, CPU time per call, so a busy neighbour
//! does not count): `getppid` (never recorded), a 64-byte write and read on a
//! socketpair (two recorded socket calls), the same on a pipe (neither
//! socket nor file: looked at, not kept), a 4 KiB pread of a cached file
//! (counted file I/O). Measured untraced; while the tracer records another
//! process (the node-wide cost); traced with empty tracepoint programs (the
//! tracepoints' own cost); traced as recorded by default; traced without
//! file I/O. With `--baseline TRACER`, the same for another tracer binary
//! (one built from an older commit) where it has the options.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, bail};

use crate::{bench::median, target_dir};

/// CPU ns per call of the four kinds, from `bench sys` output.
fn parse(stdout: &[u8]) -> anyhow::Result<[f64; 4]> {
    let text = String::from_utf8_lossy(stdout);
    let v: Vec<f64> = text
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    match v[..] {
        [a, b, c, d] => Ok([a, b, c, d]),
        _ => bail!("unexpected bench output: {text}"),
    }
}

/// Where a bench recording goes, emptied: the recorder refuses to replace
/// an existing capture.
fn capture_path() -> std::path::PathBuf {
    let path = target_dir().join("xtask/bench-syscalls.capture");
    let _ = std::fs::remove_file(&path);
    path
}

/// `bench sys calls` under `tracer record ARGS --`, or alone without a tracer.
fn traced(
    tracer: Option<&Path>,
    args: &[&str],
    bench: &str,
    calls: u64,
) -> anyhow::Result<[f64; 4]> {
    let calls = calls.to_string();
    let out = match tracer {
        None => Command::new(bench).args(["sys", &calls]).output(),
        Some(t) => Command::new(t)
            .args(["record", "--sample-hz", "0", "-o"])
            .arg(capture_path())
            .args(args)
            .args(["--", bench, "sys", &calls])
            .output(),
    }
    .context("running the system-call bench")?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr));
    }
    parse(&out.stdout)
}

/// `bench sys calls` untraced while `tracer` records a sleeping process.
fn beside(tracer: &Path, bench: &str, calls: u64) -> anyhow::Result<[f64; 4]> {
    let mut sleeper = Command::new("sleep").arg("600").spawn()?;
    let mut rec = Command::new(tracer)
        .args(["record", "--sample-hz", "0", "-o"])
        .arg(capture_path())
        .args(["-p", &sleeper.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()?;
    // Wait until it records.
    let stderr = rec.stderr.take().context("stderr")?;
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    for line in lines.by_ref() {
        if line?.contains("recording") {
            break;
        }
    }
    let result = traced(None, &[], bench, calls);
    let _ = Command::new("kill")
        .args(["-INT", &rec.id().to_string()])
        .status();
    let _ = rec.wait();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    result
}

/// Seconds between the end of the traced command and the recorder's exit.
fn exit_latency(tracer: &Path) -> anyhow::Result<f64> {
    let out_file = target_dir().join("xtask/bench-exit.time");
    let script = format!("sleep 0.3; date +%s.%N > {}", out_file.display());
    let status = Command::new(tracer)
        .args(["record", "--sample-hz", "0", "-o"])
        .arg(capture_path())
        .args(["--", "sh", "-c", &script])
        .stderr(Stdio::null())
        .status()?;
    let exited = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    if !status.success() {
        bail!("tracer failed ({status})");
    }
    let ended: f64 = std::fs::read_to_string(&out_file)?.trim().parse()?;
    Ok(exited - ended)
}

/// Prints the system-call and exit-time figures of `tracer` (and of
/// `baseline`, when given).
pub(crate) fn syscall_overhead(
    tracer: &Path,
    baseline: Option<&Path>,
    calls: u64,
    repeat: usize,
) -> anyhow::Result<()> {
    let bench = crate::build_c(&crate::root().join("xtask/bench/bench.c"), "bench")?;
    let bench = bench.to_str().context("utf-8 path")?;
    println!(
        "\n== system calls: CPU ns per call ({calls} rounds, median of {repeat}; load average {})",
        load_average()
    );
    type Row<'a> = (&'a str, Box<dyn Fn() -> anyhow::Result<[f64; 4]> + 'a>);
    let mut rows: Vec<Row<'_>> = vec![
        ("untraced", Box::new(|| traced(None, &[], bench, calls))),
        (
            "other process, this tracer recording",
            Box::new(|| beside(tracer, bench, calls)),
        ),
        (
            "traced, empty tracepoint programs",
            Box::new(|| traced(Some(tracer), &["--bench-empty-syscalls"], bench, calls)),
        ),
        (
            "traced (default)",
            Box::new(|| traced(Some(tracer), &[], bench, calls)),
        ),
        (
            "traced, --no-file-io",
            Box::new(|| traced(Some(tracer), &["--no-file-io"], bench, calls)),
        ),
    ];
    if let Some(base) = baseline {
        rows.push((
            "other process, baseline recording",
            Box::new(move || beside(base, bench, calls)),
        ));
        rows.push((
            "traced by the baseline",
            Box::new(move || traced(Some(base), &[], bench, calls)),
        ));
    }
    // Interleaved repetitions: a change of load hits every row alike.
    let mut results: Vec<Vec<[f64; 4]>> = vec![Vec::new(); rows.len()];
    for _ in 0..repeat {
        for (i, (_, run)) in rows.iter().enumerate() {
            results[i].push(run()?);
        }
    }
    println!(
        "  {:<40} {:>8} {:>8} {:>8} {:>8}",
        "", "getppid", "socket", "pipe", "pread"
    );
    for ((name, _), r) in rows.iter().zip(&results) {
        let m: Vec<f64> = (0..4)
            .map(|k| median(r.iter().map(|v| v[k]).collect()))
            .collect();
        println!(
            "  {name:<40} {:>8.0} {:>8.0} {:>8.0} {:>8.0}",
            m[0], m[1], m[2], m[3]
        );
    }
    println!(
        "\n== exit: seconds from the command's end to the recorder's exit (median of {repeat})"
    );
    let mut tracers = vec![("this tracer", tracer)];
    if let Some(base) = baseline {
        tracers.push(("baseline", base));
    }
    for (name, t) in tracers {
        let mut v = Vec::new();
        for _ in 0..repeat {
            v.push(exit_latency(t)?);
            std::thread::sleep(Duration::from_millis(100));
        }
        let shown: Vec<String> = v.iter().map(|s| format!("{s:.3}")).collect();
        println!(
            "  {name:<12} {:.3} s (runs: {})",
            median(v.clone()),
            shown.join(", ")
        );
    }
    Ok(())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// CPU seconds (user + system) of process `pid` so far, from `/proc`.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): utime is the
    // 14th field, stime the 15th.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Runs `cmd` to its end, sampling its CPU time until it exits; returns
/// (its stdout, its CPU seconds as last seen, wall seconds).
fn run_measured(cmd: &mut Command) -> anyhow::Result<(String, f64, f64)> {
    let started = std::time::Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting")?;
    let pid = child.id();
    let mut cpu = 0.0;
    let mut stdout = child.stdout.take().context("stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    while child.try_wait()?.is_none() {
        if let Some(c) = cpu_seconds(pid) {
            cpu = c;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = reader.join().unwrap_or_default();
    Ok((out, cpu, started.elapsed().as_secs_f64()))
}

/// Throughput of two system-call-heavy servers untraced and recorded with
/// no function probes (the defaults otherwise: 99 Hz samples, socket calls,
/// file and block I/O, network counters), and the recorder's own CPU:
/// - file: `fio`, 4 KiB random preads of a cached 64 MiB file (psync), IOPS;
/// - socket: the echo server of the tests, 4 KiB messages from one client,
///   MB/s.
pub(crate) fn workload_overhead(
    tracer: &Path,
    baseline: Option<&Path>,
    seconds: f64,
    repeat: usize,
) -> anyhow::Result<()> {
    let echo = crate::build_c(&crate::root().join("tests/fixtures/tcpecho.c"), "tcpecho")?;
    let dir = target_dir().join("xtask/bench-workload");
    std::fs::create_dir_all(&dir)?;
    let data = dir.join("fio.data");
    println!(
        "\n== system-call-heavy servers, recorded with no -f ({seconds} s runs, median of {repeat}; load average {})",
        load_average()
    );
    let mut tracers: Vec<(&str, Option<&Path>)> =
        vec![("untraced", None), ("this tracer", Some(tracer))];
    if let Some(b) = baseline {
        tracers.push(("baseline", Some(b)));
    }
    let capture = capture_path();
    let secs = format!("{seconds}");
    // (workload, tracer) → (throughputs, recorder CPU shares)
    let mut results: Vec<Vec<(Vec<f64>, Vec<f64>)>> =
        vec![vec![Default::default(); tracers.len()]; 2];
    for _ in 0..repeat {
        for (t, (_, tracer)) in tracers.iter().enumerate() {
            // File server: fio under the tracer (`record -- fio`).
            let fio = [
                "fio".to_string(),
                "--name=r".into(),
                "--rw=randread".into(),
                "--bs=4k".into(),
                "--size=64m".into(),
                "--ioengine=psync".into(),
                "--time_based".into(),
                format!("--runtime={seconds}"),
                format!("--filename={}", data.display()),
                "--output-format=json".into(),
            ];
            let mut cmd = match tracer {
                Some(t) => {
                    let _ = std::fs::remove_file(&capture);
                    let mut c = Command::new(t);
                    c.args(["record", "-o"]).arg(&capture).arg("--").args(&fio);
                    c
                }
                None => {
                    let mut c = Command::new(&fio[0]);
                    c.args(&fio[1..]);
                    c
                }
            };
            let (out, cpu, wall) = run_measured(&mut cmd)?;
            let json: serde_json::Value =
                serde_json::from_str(out.get(out.find('{').unwrap_or(0)..).unwrap_or("{}"))
                    .context("fio's JSON")?;
            let iops = json["jobs"][0]["read"]["iops"].as_f64().unwrap_or(0.0);
            results[0][t].0.push(iops);
            if tracer.is_some() {
                // The recorder's CPU minus fio's own: fio is its child and
                // /proc's times of the recorder do not include it.
                results[0][t].1.push(cpu / wall);
            }
            // Socket server: the echo server under the tracer, one client.
            let port_file = dir.join("port");
            let _ = std::fs::remove_file(&port_file);
            let _ = std::fs::remove_file(&capture);
            let mut server = match tracer {
                Some(t) => Command::new(t)
                    .args(["record", "-o"])
                    .arg(&capture)
                    .args(["--", echo.to_str().context("utf8")?, "serve"])
                    .arg(&port_file)
                    .stderr(Stdio::null())
                    .spawn()?,
                None => Command::new(&echo).arg("serve").arg(&port_file).spawn()?,
            };
            let started = std::time::Instant::now();
            let port = loop {
                if let Some(p) = std::fs::read_to_string(&port_file)
                    .ok()
                    .and_then(|s| s.trim().parse::<u16>().ok())
                {
                    break p;
                }
                if started.elapsed() > Duration::from_secs(30) {
                    bail!("the echo server did not start");
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let cpu_before = cpu_seconds(server.id()).unwrap_or(0.0);
            let client_started = std::time::Instant::now();
            let out = Command::new(&echo)
                .args(["client", "127.0.0.1", &port.to_string(), &secs, "4096"])
                .output()?;
            let wall = client_started.elapsed().as_secs_f64();
            let cpu = cpu_seconds(server.id()).unwrap_or(0.0) - cpu_before;
            let bytes: f64 = String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .unwrap_or(0.0);
            results[1][t].0.push(bytes / 1e6 / seconds);
            if tracer.is_some() {
                results[1][t].1.push(cpu / wall);
            }
            // SIGINT stops the recorder and, with it, the server it started.
            let _ = Command::new("kill")
                .args(["-INT", &server.id().to_string()])
                .status();
            if tracer.is_none() {
                let _ = server.kill();
            }
            let _ = server.wait();
        }
    }
    for (w, (name, unit)) in [
        ("file server (fio psync 4k randread)", "IOPS"),
        ("socket server (echo, 4 KiB)", "MB/s"),
    ]
    .iter()
    .enumerate()
    {
        println!("  {name}");
        let base = median(results[w][0].0.clone());
        for (t, (tname, tracer)) in tracers.iter().enumerate() {
            let (tput, cpu) = &results[w][t];
            let m = median(tput.clone());
            let shown: Vec<String> = tput.iter().map(|v| format!("{v:.0}")).collect();
            if tracer.is_none() {
                println!(
                    "    {tname:<12} {m:>10.0} {unit} (runs {})",
                    shown.join(", ")
                );
            } else {
                println!(
                    "    {tname:<12} {m:>10.0} {unit} (runs {}), slowdown {:.1}%, recorder CPU {:.1}% of a core",
                    shown.join(", "),
                    100.0 * (1.0 - m / base),
                    100.0 * median(cpu.clone())
                );
            }
        }
    }
    Ok(())
}
