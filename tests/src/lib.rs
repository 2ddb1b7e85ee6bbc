//! Helpers for the end-to-end tests: build the C fixtures, run the tracer
//! binary on them, read the captures back with the analyzer library.
//!
//! The tests need root (they load eBPF programs). Without root they skip with
//! a printed reason, unless `EFTRACE_REQUIRE_ROOT` is set (CI), where skipping
//! would hide a failure.

use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Mutex, OnceLock},
    time::{Duration, Instant},
};

use analyzer::{Capture, Event, Symbolizer};

pub mod bugclass;
pub mod cpugroup;
pub mod fs;
pub mod mpi;
pub mod sandbox;

/// The tracer binary under test: `$TRACER_BIN`, or the workspace's debug build.
pub fn tracer_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TRACER_BIN") {
        return PathBuf::from(p);
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/tracer");
    assert!(
        p.exists(),
        "no tracer binary at {}: run `cargo xtask test`",
        p.display()
    );
    p
}

/// Whether privileged tests can run; prints why not, or panics under CI.
pub fn privileged() -> bool {
    // SAFETY: no preconditions.
    let root = unsafe { libc_geteuid() } == 0;
    if !root {
        assert!(
            std::env::var_os("EFTRACE_REQUIRE_ROOT").is_none(),
            "EFTRACE_REQUIRE_ROOT is set but the tests do not run as root"
        );
        eprintln!("skipped: needs root to load eBPF programs");
        return false;
    }
    SHARED.with(|shared| {
        let mut shared = shared.borrow_mut();
        if shared.is_none() && !ALONE.get() {
            *shared = Some(HOST.read().unwrap_or_else(|e| e.into_inner()));
        }
    });
    root
}

/// The host's cores, shared by the privileged tests (each holds it shared
/// from its [`privileged`] check until its thread ends) and held alone by
/// a test whose verdict other work on the cores would change ([`alone`]).
/// The lock prefers writers: once such a test waits, no other starts, and
/// it runs when the tests already running have ended.
static HOST: std::sync::RwLock<()> = std::sync::RwLock::new(());

thread_local! {
    static SHARED: std::cell::RefCell<Option<std::sync::RwLockReadGuard<'static, ()>>> =
        const { std::cell::RefCell::new(None) };
    static ALONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Waits until no other privileged test runs and holds the host until the
/// guard drops; privileged tests that start meanwhile wait.
pub fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    // This test's own shared hold first, or it would wait for itself.
    SHARED.with(|shared| shared.borrow_mut().take());
    ALONE.set(true);
    HOST.write().unwrap_or_else(|e| e.into_inner())
}

/// Whether every program of `programs` is on PATH; otherwise prints why the
/// test skips (`hint`: what installs them), or panics under CI
/// (`EFTRACE_REQUIRE_ROOT`), where a missing package must not pass a test.
pub fn installed(programs: &[&str], hint: &str) -> bool {
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|p| {
            !std::env::var_os("PATH")
                .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(p).is_file()))
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("EFTRACE_REQUIRE_ROOT").is_none(),
        "EFTRACE_REQUIRE_ROOT is set but {missing:?} are missing ({hint})"
    );
    eprintln!("skipped: {missing:?} missing ({hint})");
    false
}

/// The first of `width` TCP ports on loopback no other test of this run
/// uses: blocks handed out in turn above a base that differs between runs
/// (so a run does not meet sockets a previous one left in TIME_WAIT), all
/// below the kernel's ephemeral range (32768..). `EFTRACE_PORT_BASE` sets
/// the base instead, for runs that share a host with others.
pub fn port_block(width: u16) -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let base = std::env::var("EFTRACE_PORT_BASE")
        .ok()
        .and_then(|b| b.parse::<u16>().ok())
        .unwrap_or(20_000 + (std::process::id() % 40) as u16 * 300);
    base + NEXT.fetch_add(width, std::sync::atomic::Ordering::Relaxed)
}

/// Debian's CPython 3.11, built with USDT probes (the `python3` on PATH may
/// be a pyenv build without them).
pub const PYTHON: &str = "/usr/bin/python3.11";

/// [`PYTHON`] when it is installed; otherwise as [`installed`].
pub fn python() -> Option<&'static str> {
    if Path::new(PYTHON).exists() {
        return Some(PYTHON);
    }
    assert!(
        std::env::var_os("EFTRACE_REQUIRE_ROOT").is_none(),
        "EFTRACE_REQUIRE_ROOT is set but {PYTHON} is missing (apt package python3.11)"
    );
    eprintln!("skipped: {PYTHON} (Debian's python3.11, with USDT probes) is not installed");
    None
}

/// The Python with DuckDB that `scripts/setup` installs (a venv of Debian's
/// python3 under the tool cache).
pub fn duckdb_python() -> Option<PathBuf> {
    let cache = std::env::var_os("EFTRACE_CACHE").unwrap_or_else(|| "/var/cache/eftrace".into());
    let python = Path::new(&cache).join("pyexport/bin/python");
    let ok = Command::new(&python)
        .args(["-c", "import duckdb"])
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(python);
    }
    assert!(
        std::env::var_os("EFTRACE_REQUIRE_ROOT").is_none(),
        "EFTRACE_REQUIRE_ROOT is set but {} has no duckdb (run scripts/setup)",
        python.display()
    );
    eprintln!(
        "skipped: no DuckDB at {} (run scripts/setup)",
        python.display()
    );
    None
}

/// Runs `sql` in DuckDB (through `python`, from [`duckdb_python`]) and
/// returns the result rows, each a list of column values as text (NULL as
/// `None`).
pub fn duckdb(python: &Path, sql: &str) -> Vec<Vec<Option<String>>> {
    let script = "import duckdb, json, sys\n\
                  rows = duckdb.sql(sys.argv[1]).fetchall()\n\
                  print(json.dumps([[None if v is None else str(v) for v in r] for r in rows]))";
    let out = Command::new("timeout")
        .args(["-s", "KILL", "60"])
        .arg(python)
        .args(["-c", script, sql])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "duckdb failed on {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON rows")
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

static BUILD_DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// Held by every test that records a Python interpreter's USDT probes: the
/// probes of one binary are shared by every recorder on the host, and a
/// recorder that holds a site's semaphore for one process refuses another
/// that follows forks (as a user would be told); tests run in parallel.
static USDT_LOCK: Mutex<()> = Mutex::new(());

/// Takes [`USDT_LOCK`] for the rest of the calling test.
pub fn usdt_exclusive() -> std::sync::MutexGuard<'static, ()> {
    USDT_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Compiles `tests/fixtures/NAME.c` once per test run and returns the binary,
/// copied to `as_name` when given (so it runs under another command name).
pub fn fixture(name: &str, as_name: Option<&str>) -> PathBuf {
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = BUILD_DIR.get_or_init(|| tempfile::tempdir().expect("temp dir for fixtures"));
    let out = dir.path().join(as_name.unwrap_or(name));
    if !out.exists() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(format!("{name}.c"));
        // MPI fixtures (`mpi_*.c`) need MPICH's wrapper for headers and libmpich.
        let cc = if name.starts_with("mpi_") {
            "mpicc"
        } else {
            "gcc"
        };
        let status = Command::new(cc)
            .args(["-O2", "-g", "-fno-omit-frame-pointer", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("{cc} runs (apt-get install mpich libmpich-dev): {e}"));
        assert!(status.success(), "compiling {}", src.display());
    }
    out
}

/// A finished `tracer` or `analyzer` run.
#[derive(Debug)]
pub struct Run {
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `tracer ARGS` to completion (bounded by 60 s).
pub fn tracer(args: &[&str]) -> Run {
    run_bounded(&tracer_bin(), args)
}

/// The analyzer binary built beside the tracer under test.
pub fn analyzer_bin() -> PathBuf {
    let p = tracer_bin().with_file_name("analyzer");
    assert!(
        p.exists(),
        "no analyzer binary at {}: run `cargo xtask test`",
        p.display()
    );
    p
}

/// Runs `analyzer ARGS` to completion (bounded by 60 s).
pub fn analyzer(args: &[&str]) -> Run {
    run_bounded(&analyzer_bin(), args)
}

/// Runs `program ARGS` to completion (bounded by 60 s).
pub fn run_bounded(program: &Path, args: &[&str]) -> Run {
    let out = Command::new("timeout")
        .args(["-s", "KILL", "60"])
        .arg(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", program.display()));
    Run {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A tracer running in the background.
pub struct Background {
    /// The tracer process.
    pub child: Child,
    /// Lines it printed on stderr before it said it was recording.
    pub stderr_lines: Vec<String>,
    /// The last lines it printed on stderr since.
    tail: std::sync::Arc<Mutex<std::collections::VecDeque<String>>>,
}

impl Background {
    /// Starts `tracer ARGS` and waits until it prints that it is recording.
    pub fn start(args: &[&str]) -> Self {
        let mut child = Command::new(tracer_bin())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tracer starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let mut reader = BufReader::new(stderr);
        let mut lines = Vec::new();
        let started = Instant::now();
        loop {
            let mut line = String::new();
            let n = reader.read_line(&mut line).expect("read tracer stderr");
            assert!(n > 0, "tracer exited before recording: {lines:?}");
            let recording = line.contains("recording");
            lines.push(line);
            if recording {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "tracer did not start: {lines:?}"
            );
        }
        // Keep draining stderr so the tracer never blocks on a full pipe;
        // the last lines are shown if it exits with an error.
        let tail = std::sync::Arc::new(Mutex::new(std::collections::VecDeque::new()));
        let kept = tail.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                let mut t = kept.lock().unwrap_or_else(|e| e.into_inner());
                if t.len() == 20 {
                    t.pop_front();
                }
                t.push_back(std::mem::take(&mut line));
            }
        });
        Self {
            child,
            stderr_lines: lines,
            tail,
        }
    }

    /// Starts a tracer on every process of the MPI program `exe` (from its
    /// entry point, so ranks started later are seen whole), probing
    /// `libmpich.so.12:FUNCTION` with argument registers for each pattern,
    /// without syscalls or samples, into `out`.
    pub fn mpi_ranks(exe: &Path, out: &Path, functions: &[&str]) -> Self {
        let (exe, out) = (exe.display().to_string(), out.display().to_string());
        let mut args: Vec<String> = [
            "record",
            "--sample-hz",
            "0",
            "--no-syscalls",
            "--exe",
            &exe,
            "-o",
            &out,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for f in functions {
            args.push("-a".into());
            args.push(format!("libmpich.so.12:{f}"));
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        Self::start(&refs)
    }

    /// Sends `signal` and waits for the tracer to exit.
    pub fn stop(mut self, signal: &str) -> ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-s", signal, &pid])
            .status()
            .expect("kill runs");
        let status = self.child.wait().expect("tracer exits");
        if !status.success() {
            // Give the drain a moment to read the last lines.
            std::thread::sleep(Duration::from_millis(100));
            let tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
            eprintln!(
                "tracer exited with {status}; before recording: {:?}; its last lines:\n{}",
                self.stderr_lines,
                tail.iter().map(String::as_str).collect::<String>()
            );
        }
        status
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads a capture, panicking with the error if it cannot be read.
pub fn capture(path: &Path) -> Capture {
    Capture::open(path).unwrap_or_else(|e| panic!("reading {}: {e:?}", path.display()))
}

/// Records `python3 -c SCRIPT` from its first instruction for `duration`
/// (e.g. `"2s"`) without samples into `out`, and reads the capture: a
/// short program whose threads the tests stop in a known call.
pub fn record_python(out: &Path, duration: &str, script: &str) -> Capture {
    let out_arg = out.to_str().expect("utf8 capture path");
    let run = tracer(&[
        "record",
        "--sample-hz",
        "0",
        "--duration",
        duration,
        "-o",
        out_arg,
        "--",
        "python3",
        "-c",
        script,
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    capture(out)
}

/// All events of a capture.
pub fn events(capture: &Capture) -> Vec<Event> {
    capture
        .events()
        .collect::<Result<_, _>>()
        .expect("records decode")
}

/// Function entries per (pid, function name).
pub fn entries_by_function(capture: &Capture) -> BTreeMap<(u32, String), usize> {
    let mut counts = BTreeMap::new();
    for e in events(capture) {
        if let Event::Entry { rec, .. } = e {
            *counts
                .entry((rec.header.pid, capture.function_name(rec.func_id)))
                .or_default() += 1;
        }
    }
    counts
}

/// Function returns per function name: the list of return values, in order.
pub fn returns_by_function(capture: &Capture) -> BTreeMap<String, Vec<i64>> {
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for e in events(capture) {
        if let Event::Return(r) = e {
            out.entry(capture.function_name(r.func_id))
                .or_default()
                .push(r.ret as i64);
        }
    }
    out
}

/// Call sites of `function`'s entries, symbolized, with counts.
pub fn call_sites(capture: &Capture, function: &str) -> BTreeMap<String, usize> {
    let sym = Symbolizer::new(capture);
    let mut out = BTreeMap::new();
    for e in events(capture) {
        if let Event::Entry { rec, .. } = e
            && capture.function_name(rec.func_id) == function
        {
            let site = sym
                .user(rec.header.pid, rec.call_site)
                .map(|l| l.to_string())
                .unwrap_or_else(|| "?".into());
            *out.entry(site).or_default() += 1;
        }
    }
    out
}

/// Hydra built with symbols by `scripts/hydra-build` (cached): its bin
/// directory, or `None` with a printed reason when the Debian source package
/// cannot be fetched. Under `EFTRACE_REQUIRE_ROOT` (CI) that panics instead,
/// and any other build failure always does.
pub fn hydra_bin() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/hydra-build");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    if out.status.code() == Some(3) && std::env::var_os("EFTRACE_REQUIRE_ROOT").is_none() {
        eprintln!("skipped: Hydra cannot be built (mpich source package not reachable)");
        return None;
    }
    assert!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        out.status
    );
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// The functions traced in the C ring daemons (`fixtures/ring.c`).
pub const RING_FUNCTIONS: &[&str] = &[
    "handle_*",
    "*_msg",
    "close_connection",
    "main_loop",
    "connect_rhs",
    "listen_port",
    "finish",
];

/// Records one run of the C ring `exe` (4 daemons, 10 rounds, ports from
/// `port`, the partial-receive fault at daemon `fault`) into `out` with
/// `tracer record`, without samples.
pub fn record_ring(exe: &Path, out: &Path, port: u16, fault: Option<u16>) {
    record_ring_waiting(exe, out, port, fault, None);
}

/// [`record_ring`] with the daemons' loops waiting by `wait` (`poll`,
/// `select` or `epoll`, `+threads` for two loops in two threads per daemon;
/// see `fixtures/ring.c`).
pub fn record_ring_waiting(
    exe: &Path,
    out: &Path,
    port: u16,
    fault: Option<u16>,
    wait: Option<&str>,
) {
    let mut args: Vec<String> = vec!["record".into(), "--sample-hz".into(), "0".into()];
    for f in RING_FUNCTIONS {
        args.extend(["-f".to_string(), f.to_string()]);
    }
    args.extend([
        "-o".into(),
        out.display().to_string(),
        "--".into(),
        exe.display().to_string(),
        "4".into(),
        "10".into(),
        port.to_string(),
    ]);
    match wait {
        None => args.extend(fault.map(|n| n.to_string())),
        Some(w) => args.extend([
            fault.map_or("-1".to_string(), |n| n.to_string()),
            "1500".into(),
            w.to_string(),
        ]),
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = tracer(&refs);
    assert!(run.status.success(), "{}", run.stderr);
}

/// Decomposes each capture of `paths` (one run each), learns a model of
/// them all and calibrates it (each run held out in turn). Returns the
/// model, the decomposed runs and what calibration did.
pub fn learn_calibrated(
    paths: &[PathBuf],
    variant: analyzer::units::Variant,
) -> (
    analyzer::model::GlobalModel,
    Vec<Vec<analyzer::units::ProcessUnits>>,
    analyzer::score::Calibration,
) {
    let mut model = analyzer::model::GlobalModel::new(variant);
    let runs: Vec<_> = paths
        .iter()
        .map(|path| analyzer::units::decompose_capture(&capture(path), variant))
        .collect();
    for p in runs.iter().flatten() {
        model.learn(p);
    }
    let calibration = analyzer::score::calibrate(&mut model, None, &runs);
    (model, runs, calibration)
}

/// The ring daemons' partial-receive fault (model.rs, pyring.rs), scored
/// with `model`: the normal `trial` run's worst unit stays under
/// `threshold`, and nothing in it stands out; in the `faulty` run (ports
/// from `faulty_base`, fault at daemon 2), in the papers' ranking by score,
/// the first unit is daemon 2's handler of its connection to daemon 3,
/// scoring 1, and a unit among the top 3 makes an unexpected call whose
/// path contains both `closing` texts, and that unit is the earliest
/// anomalous one; in the evidence ranking, the first unit is of the
/// process that closed the connection (daemon 3, whose `recv_msg` has the
/// bug). Returns the trial's worst score and the faulty run's top 3 (by
/// score) as text.
pub fn assert_ring_fault_localized(
    model: &analyzer::model::GlobalModel,
    scoring: analyzer::score::Scoring,
    (trial, faulty, faulty_base): (&Path, &Path, u16),
    threshold: f64,
    closing: [&str; 2],
) -> (f64, String) {
    use analyzer::{
        score::{DifferenceKind, Ranking, ScoreReport, Verdict, score_processes},
        units::{UnitKind, decompose_capture},
    };
    let variant = model.variant;
    let trial_cap = capture(trial);
    let trial_scores = score_processes(
        model,
        &trial_cap,
        "trial",
        &decompose_capture(&trial_cap, variant),
        scoring,
    );
    let worst_normal = trial_scores[0].score;
    assert!(
        worst_normal < threshold,
        "{variant:?}: a normal run scores {worst_normal}: {:?}",
        trial_scores[0]
    );
    let trial_report = ScoreReport::new(
        variant,
        scoring,
        Ranking::Evidence,
        &["trial".to_string()],
        trial_scores,
    );
    assert_eq!(
        trial_report.verdict,
        Verdict::NothingStandsOut,
        "{variant:?}: {}: {:#?}",
        trial_report.summary,
        trial_report.first()
    );

    let cap = capture(faulty);
    let faulty_scores = score_processes(
        model,
        &cap,
        "faulty",
        &decompose_capture(&cap, variant),
        scoring,
    );
    let by_evidence = ScoreReport::new(
        variant,
        scoring,
        Ranking::Evidence,
        &["faulty".to_string()],
        faulty_scores.clone(),
    );
    let report = ScoreReport::new(
        variant,
        scoring,
        Ranking::Score,
        &["faulty".to_string()],
        faulty_scores,
    );
    let scores = &report.units;
    let first = &scores[0];
    // Daemon 2's right-hand side is daemon 3, listening on base + 3.
    assert_eq!(first.kind, UnitKind::Handler, "{first:?}");
    assert_eq!(
        first.peer.as_deref(),
        Some(format!("127.0.0.1:{}", faulty_base + 3).as_str()),
        "{variant:?}: {first:?}"
    );
    // A connection the model never saw handled: the most suspect.
    assert_eq!(first.score, 1.0, "{variant:?}: {first:?}");
    let found = scores[..3].iter().find(|s| {
        s.differences.iter().any(|d| {
            d.kind == DifferenceKind::Unexpected && closing.iter().all(|c| d.path.contains(c))
        })
    });
    assert!(
        found.is_some(),
        "{variant:?}: the closing unit is not in the top 3: {:#?}",
        &scores[..3]
    );
    // Where the fault first showed: the unit that closed the connection
    // comes before the reset it caused, however they score.
    let earliest = report
        .earliest_in("faulty")
        .expect("the faulty run has anomalous units");
    assert!(
        earliest.differences.iter().any(|d| {
            d.kind == DifferenceKind::Unexpected && closing.iter().all(|c| d.path.contains(c))
        }),
        "{variant:?}: the earliest anomaly is not the closing unit: {earliest:#?}"
    );
    // Ranked by evidence, the process that closed the connection (whose
    // unit came first) leads, not the neighbour that saw the reset.
    assert_eq!(by_evidence.verdict, Verdict::Anomalous);
    assert_eq!(
        by_evidence.units[0].pid, earliest.pid,
        "{variant:?}: {:#?}",
        by_evidence.units[0]
    );
    assert_eq!(
        by_evidence.first().map(|u| u.start_ns),
        Some(earliest.start_ns)
    );
    let top = scores[..3]
        .iter()
        .map(|s| format!("{:?} {:?} {:.3}", s.kind, s.peer, s.score))
        .collect::<Vec<_>>()
        .join(", ");
    (worst_normal, top)
}

/// A `tracer agent` in the background, with its configuration, state
/// directory (`DIR/state`) and control socket (`DIR/ctl.sock`) in a
/// directory the test owns; stopped (SIGTERM, then SIGKILL) on drop.
pub struct Agent {
    /// The agent process.
    pub child: Child,
    /// Its configuration file (`DIR/agent.toml`).
    pub config: PathBuf,
    /// `[agent] state_dir`.
    pub state_dir: PathBuf,
    /// `[agent] socket`.
    pub socket: PathBuf,
    log: std::sync::Arc<Mutex<Vec<String>>>,
}

impl Agent {
    /// The configuration for `dir`: an `[agent]` section placing the state
    /// and socket in `dir`, then `body` (targets, trace, recorder, ...).
    pub fn config_text(dir: &Path, body: &str) -> String {
        format!(
            "[agent]\nstate_dir = \"{}\"\nsocket = \"{}\"\n\n{body}",
            dir.join("state").display(),
            dir.join("ctl.sock").display()
        )
    }

    /// Writes `DIR/agent.toml` from `body` and starts `tracer agent` on it;
    /// returns once `tracer ctl status` answers (panics after 30 s, with
    /// what the agent printed).
    pub fn start(dir: &Path, body: &str) -> Self {
        let config = dir.join("agent.toml");
        std::fs::write(&config, Self::config_text(dir, body)).expect("write agent.toml");
        let mut child = Command::new(tracer_bin())
            .arg("agent")
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tracer agent starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = std::sync::Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        // Keep draining stderr so the agent never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        });
        let mut agent = Self {
            child,
            config,
            state_dir: dir.join("state"),
            socket: dir.join("ctl.sock"),
            log,
        };
        let started = Instant::now();
        loop {
            if agent.socket.exists() && agent.ctl(&["status", "--json"]).status.success() {
                return agent;
            }
            if let Ok(Some(status)) = agent.child.try_wait() {
                // Let the reader thread catch the last lines.
                std::thread::sleep(Duration::from_millis(100));
                panic!("the agent exited ({status}): {}", agent.log());
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the agent does not answer: {}",
                agent.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs `tracer ctl --socket SOCKET ARGS`.
    pub fn ctl(&self, args: &[&str]) -> Run {
        let socket = self.socket.display().to_string();
        tracer(&[&["ctl", "--socket", &socket], args].concat())
    }

    /// `tracer ctl status --json`: the status object.
    pub fn status(&self) -> serde_json::Value {
        self.request(&["status"])
    }

    /// `tracer ctl ARGS --json` that must succeed: its `result`.
    pub fn request(&self, args: &[&str]) -> serde_json::Value {
        let run = self.ctl(&[args, &["--json"]].concat());
        assert!(
            run.status.success(),
            "tracer ctl {args:?}: {}{}\nagent: {}",
            run.stdout,
            run.stderr,
            self.log()
        );
        let mut response: serde_json::Value =
            serde_json::from_str(&run.stdout).expect("ctl --json prints JSON");
        assert_eq!(response["ok"], true, "{response}");
        response["result"].take()
    }

    /// Polls the status every 100 ms until `done` holds and returns it;
    /// panics after `timeout` naming `what`.
    pub fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let started = Instant::now();
        loop {
            let status = self.status();
            if done(&status) {
                return status;
            }
            assert!(
                started.elapsed() < timeout,
                "waited {timeout:?} for {what}; status: {status:#}\nagent: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last-known session's snapshot of the past `window`, via
    /// `tracer ctl snapshot --window WINDOW --json`: the result object.
    pub fn snapshot(&self, window: &str) -> serde_json::Value {
        self.request(&["snapshot", "--window", window])
    }

    /// The flight recorder's capture files now, by name (oldest first), with
    /// their sizes; files removed while listing are left out.
    pub fn ring_files(&self) -> Vec<(PathBuf, u64)> {
        let mut files: Vec<(PathBuf, u64)> = std::fs::read_dir(self.state_dir.join("rings"))
            .map(|d| {
                d.filter_map(|e| {
                    let path = e.ok()?.path();
                    if path.extension()? != "capture" {
                        return None;
                    }
                    Some((path.clone(), std::fs::metadata(&path).ok()?.len()))
                })
                .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    }

    /// What the agent printed on stderr so far.
    pub fn log(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("\n")
    }

    /// Sends `signal` and waits (at most 30 s) for the agent to exit.
    pub fn stop(&mut self, signal: &str) -> ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-s", signal, &pid])
            .status()
            .expect("kill runs");
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the agent") {
                return status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the agent did not stop on {signal}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // SIGTERM first: the agent detaches and closes its file cleanly.
            let pid = self.child.id().to_string();
            let _ = Command::new("kill").args(["-s", "TERM", &pid]).status();
            let started = Instant::now();
            while matches!(self.child.try_wait(), Ok(None))
                && started.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
