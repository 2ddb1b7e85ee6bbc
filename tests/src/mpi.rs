//! MPI runs with faults, recorded with `tracer record --mpi`: the harness
//! of the MPI diagnosis tests and of `cargo xtask mpi-matrix` (issue 17).
//!
//! Faults from outside the program: a CPU hog on a core (continuous or on
//! and off), a rank paused (`SIGSTOP`, then `SIGCONT`), a rank capped
//! (cgroup v1 `cpu.cfs_quota_us`). Faults inside it (the fixtures'
//! `FAULT` switch, see `fixtures/mpi_fault.h`): a rank hung in computation,
//! a rank that exits (a dead peer), an extra collective.
//!
//! Each run's job (mpiexec and its ranks, the injected hog, the recorder)
//! runs in a cpu cgroup of its own with a high weight ([`CpuGroup`]), so
//! the hog competes with the ranks on equal terms and other load on a
//! shared machine barely reaches them; a capped rank goes into a capped
//! leaf of that group. Without a usable cpu controller the run says so
//! ([`Outcome::cpu_group`]) and the job runs in the caller's session at
//! nice -19, which under autogroup scheduling orders it only against that
//! session's own tasks.
//!
//! Every cgroup, hog and job is named after this process and removed or
//! killed on drop, also when a test fails.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use crate::{Background, cpugroup::CpuGroup};

/// Taken by every test that runs MPI jobs, for the rest of the test: the
/// host to itself ([`crate::alone`]). Each job's ranks busy-poll their
/// cores, and [`record`] gives the job (and the hog it injects) a cpu group
/// of high weight, which shields it from other load but not wholly: beside
/// another test a clean half-size run read an interference metric of 0.263
/// against a threshold of 0.2 (CI here), since other work on the cores is
/// interference too.
pub fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    crate::alone()
}

/// A fault to inject into one run.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// A clean run.
    None,
    /// `stress-ng --cpu 1` on `cpu`, in the job's cpu group at the ranks'
    /// nice value, for the whole run or (`on_off`) in turns of
    /// `slice_ms` on and as long off.
    Hog {
        /// The core.
        cpu: u32,
        /// On and off instead of continuous.
        on_off: bool,
        /// Length of an on (and an off) turn, ms; 0: 400 ms (runs recorded
        /// before turns were sized to the job).
        #[serde(default)]
        slice_ms: u32,
        /// Busy workers on the core (stress-ng `--cpu N`): each takes as
        /// much of it as the rank there, so N leave the rank 1/(N+1).
        #[serde(default = "one")]
        workers: u32,
    },
    /// `SIGSTOP` to `rank` after `at`, `SIGCONT` after `length` more.
    Pause {
        /// The rank.
        rank: u32,
        /// When, after every rank started.
        at: Duration,
        /// How long.
        length: Duration,
    },
    /// `rank` limited to `percent` of a core (a cpu quota: cgroup v1
    /// `cpu.cfs_quota_us` or v2 `cpu.max`) from `at` on.
    Cap {
        /// The rank.
        rank: u32,
        /// Share of one core, in percent.
        percent: u32,
        /// When, after every rank started.
        at: Duration,
    },
    /// `rank` computes forever from iteration `iter` on (`FAULT=hang`).
    Hang {
        /// The rank.
        rank: u32,
        /// Iteration.
        iter: u32,
    },
    /// `rank` exits at iteration `iter` (`FAULT=exit`): a dead peer.
    Exit {
        /// The rank.
        rank: u32,
        /// Iteration.
        iter: u32,
    },
    /// `rank` makes one extra `MPI_Barrier` at iteration `iter`
    /// (`FAULT=collective`).
    Collective {
        /// The rank.
        rank: u32,
        /// Iteration.
        iter: u32,
    },
}

fn one() -> u32 {
    1
}

impl Fault {
    /// Short name: `clean`, `hog`, `on-off`, `pause`, `cap`, `hang`,
    /// `dead-peer`, `extra-collective`.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::None => "clean",
            Fault::Hog { on_off: false, .. } => "hog",
            Fault::Hog { on_off: true, .. } => "on-off-hog",
            Fault::Pause { .. } => "pause",
            Fault::Cap { .. } => "cap",
            Fault::Hang { .. } => "hang",
            Fault::Exit { .. } => "dead-peer",
            Fault::Collective { .. } => "extra-collective",
        }
    }

    /// The faulty rank, for faults made on a rank.
    pub fn rank(&self) -> Option<u32> {
        match *self {
            Fault::Pause { rank, .. }
            | Fault::Cap { rank, .. }
            | Fault::Hang { rank, .. }
            | Fault::Exit { rank, .. }
            | Fault::Collective { rank, .. } => Some(rank),
            Fault::None | Fault::Hog { .. } => None,
        }
    }

    /// Whether the job never ends by itself.
    pub fn hangs(&self) -> bool {
        matches!(
            self,
            Fault::Hang { .. } | Fault::Exit { .. } | Fault::Collective { .. }
        )
    }
}

/// How long an on-off hog's turns last, ms: six turns (three on, three
/// off) in a clean run, between 100 and 400 ms. A fixed 400 ms turn left
/// cg's 0.6 s runs (~0.4 s of them computing) with one partial "on" turn:
/// its hog took 0-10% of the core, a clean run in effect.
pub fn on_off_turn_ms(clean: &[f64]) -> u32 {
    let mut v: Vec<f64> = clean.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let median = v.get(v.len() / 2).copied().unwrap_or(f64::INFINITY);
    (median * 1000.0 / 6.0).clamp(100.0, 400.0) as u32
}

/// One MPI job.
#[derive(Clone, Debug)]
pub struct Job {
    /// The program.
    pub exe: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Ranks.
    pub ranks: u32,
    /// A job that hangs is stopped this long after its ranks started; one
    /// that does not is killed after it (and the run fails).
    pub limit: Duration,
}

/// A recorded run.
#[derive(Debug)]
pub struct Outcome {
    /// The capture.
    pub capture: PathBuf,
    /// The job's exit status; `None` when it was stopped (hung).
    pub status: Option<ExitStatus>,
    /// The job's wall time, from mpiexec's start to its end (or stop).
    pub elapsed: Duration,
    /// The ranks' pids: (rank, pid).
    pub ranks: Vec<(u32, u32)>,
    /// The tracer's summary lines.
    pub summary: String,
    /// Where the job ran: its cpu group, or why it had none.
    pub cpu_group: String,
    /// Whether the fault was made: false when a pause or a cap was due
    /// after the job had ended (or its rank was never seen), so the run is
    /// in fact clean.
    pub fault_applied: bool,
    /// The CPU a hog's workers took while the ranks ran, share of one core
    /// (0 to 1); `None` without a hog or when it could not be read.
    pub hog_share: Option<f64>,
}

/// Processes running `exe`, with their `PMI_RANK`.
pub fn rank_pids(exe: &Path) -> Vec<(u32, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .as_deref()
            != Some(exe)
        {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let rank = env
            .split(|b| *b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok())
            .find_map(|kv| kv.strip_prefix("PMI_RANK="))
            .and_then(|v| v.parse().ok());
        if let Some(rank) = rank {
            out.push((rank, pid));
        }
    }
    out.sort_unstable();
    out
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// A CPU hog, killed (its process group) on drop.
struct Hog(Option<Child>);

impl Hog {
    fn start(cpu: u32, on_off: Option<u32>, workers: u32, group: Option<&CpuGroup>) -> Self {
        let workers = workers.max(1);
        let script = match on_off {
            // One stress-ng whose workers are stopped and continued: a
            // stress-ng started per turn spent much of a short turn
            // starting (an "on" of 0.4 s gave ~0.25 s of load), and a job
            // shorter than a turn and its pause saw little of it.
            Some(ms) => {
                let turn = format!("{}.{:03}", ms / 1000, ms % 1000);
                format!(
                    "stress-ng --cpu {workers} -q --timeout 300 & s=$!; while :; do sleep {turn}; pkill -STOP -P $s; sleep {turn}; pkill -CONT -P $s; done"
                )
            }
            None => format!("exec stress-ng --cpu {workers} -q --timeout 300"),
        };
        // In the job's group at the ranks' nice value (see `record`): the
        // hog and the rank on its core share that core equally.
        let mut cmd = Command::new("nice");
        cmd.args([
            "-n",
            "-19",
            "taskset",
            "-c",
            &cpu.to_string(),
            "sh",
            "-c",
            &script,
        ]);
        let mut cmd = match group {
            Some(g) => g.wrap(&cmd),
            None => cmd,
        };
        let child = cmd
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        // Let stress-ng reach its busy loop before the ranks start.
        std::thread::sleep(Duration::from_millis(200));
        Self(child)
    }
}

impl Hog {
    /// CPU seconds the hog's processes have used so far (the shell, stress-ng
    /// and its workers); `None` when it did not start or cannot be read.
    fn cpu_s(&self) -> Option<f64> {
        let root = self.0.as_ref()?.id();
        // The shell and stress-ng last the whole run; `sleep` and `pkill`
        // children come and go between the listing and the reading, and
        // are skipped when gone.
        let mut ticks = crate::fs::cpu_ticks(root)?;
        let mut todo = children(root);
        let mut seen = 0;
        while let Some(pid) = todo.pop() {
            seen += 1;
            if seen > 256 {
                break;
            }
            ticks += crate::fs::cpu_ticks(pid).unwrap_or(0);
            todo.extend(children(pid));
        }
        // /proc counts in USER_HZ, 100 on x86-64 whatever the kernel's HZ.
        Some(ticks as f64 / 100.0)
    }
}

/// The children of process `pid` (of its main thread), none when gone.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect()
}

impl Drop for Hog {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
        }
    }
}

/// The launched job, killed (with every rank) on drop.
struct Launched {
    child: Child,
    exe: PathBuf,
}

impl Drop for Launched {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Ranks a proxy left behind.
        for (_, pid) in rank_pids(&self.exe) {
            signal(pid, "KILL");
        }
    }
}

/// Starts a tracer on every process of `exe` with the `--mpi` preset
/// (functions with arguments; calls through a Fortran binding keep the stack words
/// their program call site is in), without system calls or samples.
pub fn tracer_for(exe: &Path, out: &Path) -> Background {
    let (exe, out) = (exe.display().to_string(), out.display().to_string());
    let tracer = Background::start(&[
        "record",
        "--mpi",
        "--sample-hz",
        "0",
        "--no-syscalls",
        "--exe",
        &exe,
        "-o",
        &out,
    ]);
    // The ranks' nice value (see `record`): at a lower one, ranks and a hog
    // that busy-poll both cores in the same group or session starve the
    // recorder of its ticks.
    let _ = Command::new("renice")
        .args(["-n", "-19", "-p", &tracer.child.id().to_string()])
        .stdout(Stdio::null())
        .status();
    tracer
}

/// Records one run of `job` with `fault` into `out`.
pub fn record(job: &Job, fault: Fault, out: &Path) -> Outcome {
    // The job's own cpu group (dropped last: after the job, hog and
    // recorder have ended).
    let group = CpuGroup::new();
    let cpu_group = match &group {
        Ok(g) => g.describe(),
        Err(e) => format!(
            "no cpu group ({}); the job runs at nice -19 in this session, which under autogroup scheduling does not order it against other sessions",
            error_chain(e)
        ),
    };
    let tracer = tracer_for(&job.exe, out);
    if let Ok(g) = &group
        && let Err(e) = g.add(tracer.child.id())
    {
        panic!(
            "moving the recorder into {}: {}",
            g.describe(),
            error_chain(&e)
        );
    }
    let hog = match fault {
        Fault::Hog {
            cpu,
            on_off,
            slice_ms,
            workers,
        } => {
            let turn = on_off.then_some(if slice_ms == 0 { 400 } else { slice_ms });
            Some(Hog::start(cpu, turn, workers, group.as_ref().ok()))
        }
        _ => None,
    };
    // mpiexec, its proxy and the ranks start inside the job's group, all at
    // nice -19 like the hog and the recorder: inside the group nice values
    // order them against each other, so they are equal. (Without a group
    // nice -19 is all there is; see the module's doc.) Two ranks are pinned
    // to the two cores (oversubscribed ranks busy-poll each other's cores).
    let mut cmd = Command::new("timeout");
    cmd.args(["-s", "KILL"])
        .arg(format!("{}", job.limit.as_secs() + 30))
        .args(["nice", "-n", "-19", "mpiexec"]);
    if matches!(fault, Fault::Exit { .. }) {
        // Hydra would otherwise kill every rank when one exits.
        cmd.arg("-disable-auto-cleanup");
    }
    if job.ranks <= 2 {
        cmd.args(["-bind-to", "core"]);
    }
    cmd.args(["-n", &job.ranks.to_string()])
        .arg(&job.exe)
        .args(&job.args);
    match fault {
        Fault::Hang { rank, iter }
        | Fault::Exit { rank, iter }
        | Fault::Collective { rank, iter } => {
            let kind = match fault {
                Fault::Hang { .. } => "hang",
                Fault::Exit { .. } => "exit",
                _ => "collective",
            };
            cmd.env("FAULT", kind)
                .env("FAULT_RANK", rank.to_string())
                .env("FAULT_ITER", iter.to_string());
        }
        _ => {}
    }
    let mut cmd = match &group {
        Ok(g) => g.wrap(&cmd),
        Err(_) => cmd,
    };
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let start = Instant::now();
    let mut launched = Launched {
        child: cmd.spawn().expect("mpiexec starts"),
        exe: job.exe.clone(),
    };
    // Wait for every rank to exist (faults need their pids).
    let mut ranks = Vec::new();
    let seen = Instant::now();
    while seen.elapsed() < Duration::from_secs(20) {
        ranks = rank_pids(&job.exe);
        if ranks.len() as u32 >= job.ranks {
            break;
        }
        if launched.child.try_wait().ok().flatten().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = Instant::now();
    let hog_cpu_at_start = hog.as_ref().and_then(Hog::cpu_s);
    let pid_of = |r: u32| ranks.iter().find(|(rank, _)| *rank == r).map(|(_, p)| *p);
    let mut pending: Option<(Duration, Box<dyn FnMut()>)> = None;
    // Faults with no timed action are made by the launch itself.
    let mut fault_applied = !matches!(fault, Fault::Pause { .. } | Fault::Cap { .. });
    match fault {
        Fault::Pause { rank, at, length } => {
            if let Some(pid) = pid_of(rank) {
                pending = Some((
                    at,
                    Box::new(move || {
                        signal(pid, "STOP");
                        std::thread::sleep(length);
                        signal(pid, "CONT");
                    }),
                ));
            }
        }
        Fault::Cap { rank, percent, at } => {
            if let Some(pid) = pid_of(rank) {
                let procs = match &group {
                    Ok(g) => g.cap(percent),
                    Err(e) => panic!(
                        "a CPU cap needs a cpu cgroup (run as root): {}",
                        error_chain(e)
                    ),
                };
                let procs =
                    procs.unwrap_or_else(|e| panic!("capping rank {rank}: {}", error_chain(&e)));
                pending = Some((
                    at,
                    Box::new(move || {
                        // Every thread of the rank.
                        let _ = std::fs::write(&procs, pid.to_string());
                    }),
                ));
            }
        }
        _ => {}
    }
    let status = loop {
        if let Some((at, _)) = &pending
            && started.elapsed() >= *at
            && let Some((_, mut act)) = pending.take()
        {
            act();
            fault_applied = true;
        }
        if let Some(status) = launched.child.try_wait().ok().flatten() {
            break Some(status);
        }
        if started.elapsed() >= job.limit {
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = start.elapsed();
    let hog_share = match (hog_cpu_at_start, hog.as_ref().and_then(Hog::cpu_s)) {
        (Some(a), Some(b)) => Some(((b - a) / started.elapsed().as_secs_f64().max(1e-3)).max(0.0)),
        _ => None,
    };
    // A hung job is still hanging here: recording stops first, so the
    // capture ends with where every rank is; then the job is ended.
    let out_status = stop(tracer);
    drop(launched);
    drop(hog);
    drop(group);
    Outcome {
        capture: out.to_path_buf(),
        status,
        elapsed,
        ranks,
        summary: out_status,
        cpu_group,
        fault_applied,
        hog_share,
    }
}

/// An error and its causes, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out += &format!(": {s}");
        source = s.source();
    }
    out
}

/// Stops the tracer (SIGINT) and returns the rest of its output.
fn stop(tracer: Background) -> String {
    let lines = tracer.stderr_lines.join("");
    let status = tracer.stop("INT");
    assert!(status.success(), "tracer failed: {status}; {lines}");
    lines
}

/// Builds an MPI fixture (`tests/fixtures/NAME.c` with mpicc, or
/// `NAME.f90` with mpif90) into `dir`, with debug information.
pub fn build(name: &str, dir: &Path) -> PathBuf {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let out = dir.join(name);
    let (cc, src) = if fixtures.join(format!("{name}.f90")).exists() {
        ("mpif90", fixtures.join(format!("{name}.f90")))
    } else {
        ("mpicc", fixtures.join(format!("{name}.c")))
    };
    let status = Command::new(cc)
        .args(["-O2", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("{cc} runs (apt-get install mpich libmpich-dev gfortran): {e}"));
    assert!(status.success(), "compiling {}", src.display());
    out
}
