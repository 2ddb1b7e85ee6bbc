//! Command-line arguments. clap types stay in this file; they are turned into
//! library configurations with `TryFrom`.

use std::{ffi::OsString, path::PathBuf, time::Duration};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tracer::{
    quantity::{parse_duration, parse_percent, parse_size},
    record::{ProbeChoice, RecordConfig, Target},
    targets::FunctionPattern,
    usdt::UsdtPattern,
};

/// Record what running, unmodified processes do (function calls, socket
/// system calls, CPU samples) with eBPF, and replay the captures offline.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None, propagate_version = true)]
pub struct Args {
    /// More log output (-v: info, -vv: debug, includes eBPF-side logs).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Print only errors, warnings and lost records: no attach steps, no
    /// live line, no summary unless records were lost.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Record processes into a capture file (needs root).
    ///
    /// Examples:
    ///   tracer record -p 1234 -f 'handle_*' -o server.capture
    ///   tracer record --exe /usr/sbin/glusterfsd -f 'libglusterfs.so.0:syncop_*' --duration 60s
    ///   tracer record -a 'libmpich.so.12:MPI_*' -- mpiexec -n 2 ./cpi
    ///
    /// Stops on Ctrl-C / SIGTERM, after --duration, or when every traced
    /// process has exited, then prints a summary with any records lost.
    /// On a terminal, a live line shows events/s, losses and processes while
    /// recording -p/--exe targets (not a command, whose output shares it).
    #[command(verbatim_doc_comment)]
    Record(Box<RecordArgs>),
    /// Print a capture's events, symbolized, and a summary.
    #[command(alias = "dump")]
    Replay(ReplayArgs),
    /// List the USDT probes of a binary or shared object, or of every object
    /// a running process maps: provider:name, site address and file offset,
    /// semaphore, argument specs. For a PID, also each semaphore's address in
    /// the process and its current value (non-zero: someone is tracing it).
    ///
    /// Examples:
    ///   tracer list-usdt /usr/bin/python3.11
    ///   tracer list-usdt --json 1234
    #[command(verbatim_doc_comment)]
    ListUsdt(ListUsdtArgs),
    /// Run the privileged agent: record the configured targets all the time
    /// into a flight recorder (rotating capture files under a disk and age
    /// limit), follow them across restarts, freeze the recent past into
    /// snapshots on request, shed load over budget, and answer `tracer ctl`
    /// on a root-only Unix socket. SIGHUP reloads the configuration.
    ///
    /// Examples:
    ///   tracer agent --example-config > /etc/eftrace/agent.toml
    ///   tracer agent --config /etc/eftrace/agent.toml --check
    ///   systemctl start tracer-agent     (packaging/tracer-agent.service)
    #[command(verbatim_doc_comment)]
    Agent(AgentArgs),
    /// Control a running agent: status, snapshot, reload (needs root).
    ///
    /// Examples:
    ///   tracer ctl status
    ///   tracer ctl snapshot --window 5m --reason 'slow writes on node 3'
    ///   tracer ctl reload
    #[command(verbatim_doc_comment)]
    Ctl(CtlArgs),
    /// Print a shell completion script.
    ///
    /// Examples:
    ///   tracer completions bash > /usr/local/share/bash-completion/completions/tracer
    ///   tracer completions zsh > /usr/local/share/zsh/site-functions/_tracer
    /// `cargo xtask man --install` installs them with the man pages.
    #[command(verbatim_doc_comment)]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (one per command) into DIR (used by `cargo xtask man`).
    #[command(hide = true)]
    Manpages {
        /// Output directory.
        dir: PathBuf,
    },
}

/// `tracer agent`.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// The configuration file (TOML; see --example-config).
    #[arg(
        short,
        long,
        value_name = "FILE",
        default_value = "/etc/eftrace/agent.toml"
    )]
    pub config: PathBuf,
    /// Check the configuration and exit (0: valid; 2: the error names the key).
    #[arg(long)]
    pub check: bool,
    /// Print a commented example configuration and exit.
    #[arg(long)]
    pub example_config: bool,
}

/// `tracer ctl`.
#[derive(Debug, clap::Args)]
pub struct CtlArgs {
    /// The agent's control socket (its `agent.socket`).
    #[arg(
        short,
        long,
        value_name = "PATH",
        default_value = "/run/eftrace/agent.sock"
    )]
    pub socket: PathBuf,
    /// Take the socket from this agent configuration (its `agent.socket`).
    #[arg(short, long, value_name = "FILE", conflicts_with = "socket")]
    pub config: Option<PathBuf>,
    /// Print the agent's answer as JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to ask.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// `tracer ctl` requests.
#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// Health: state, processes, event rate, own CPU and memory, losses,
    /// files and disk use, load shed.
    Status,
    /// Freeze the recent past into a standalone capture file and print its path.
    Snapshot {
        /// How much of the past (default: the configured snapshot_window).
        #[arg(short, long, value_name = "TIME", value_parser = parse_duration)]
        window: Option<Duration>,
        /// Why (goes into the file name and its end marker).
        #[arg(short, long)]
        reason: Option<String>,
    },
    /// Re-read the configuration; an invalid one is refused and the running one kept.
    Reload,
    /// Per-window features and verdicts of the last live evaluation.
    Features,
}

/// `tracer list-usdt`.
#[derive(Debug, clap::Args)]
pub struct ListUsdtArgs {
    /// An ELF file (executable or shared object), or the pid of a running process.
    #[arg(value_name = "PATH|PID")]
    pub target: String,
    /// One JSON object per probe site, one per line.
    #[arg(long)]
    pub json: bool,
}

/// `tracer record`.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// Trace this running process and all its threads (repeatable).
    #[arg(short, long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Trace every process running this executable, including ones started later (repeatable).
    #[arg(long = "exe", value_name = "PATH")]
    pub exes: Vec<PathBuf>,
    /// Trace calls of functions matching [OBJECT:]GLOB, searched in .symtab and
    /// .dynsym (and in the .symtab of a stripped object's separate debug
    /// file, see --debug-dir). Without OBJECT, the target's executable; OBJECT names a loaded
    /// shared object by file name or prefix (libc, libmpich.so.12). Repeatable.
    #[arg(short, long = "functions", value_name = "PATTERN")]
    pub functions: Vec<String>,
    /// Also look for the separate debug files of stripped objects in DIR
    /// (by build id, `DIR/.build-id/xx/yyyy.debug`, and by .gnu_debuglink
    /// name), before $EFTRACE_DEBUG_DIRS and /usr/lib/debug. A stripped
    /// object's functions can be named with --functions when its debug file
    /// is found; captures keep the symbols either way. Repeatable.
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dirs: Vec<PathBuf>,
    /// Like --functions, and also record the first ten integer arguments of
    /// each call (six registers, four from the stack).
    #[arg(short = 'a', long = "args", value_name = "PATTERN")]
    pub args: Vec<String>,
    /// Like --functions, but probe only the entries (no return probe: half
    /// the cost, no durations): where calls came from, e.g. a language
    /// binding's callers.
    #[arg(long = "entries", value_name = "PATTERN")]
    pub entries: Vec<String>,
    /// Trace the MPI library's MPI_* functions with their arguments (peers,
    /// roots, reduction ops): MPICH's libmpich.so.12, or libmpi.so.12/.40.
    /// A call from outside the program's text (through a Fortran binding)
    /// also keeps 32 stack words, so the analyzer places it in the program
    /// (by the binding's call frame information), not in the binding.
    /// Works through a launcher that does not load the library itself, e.g.
    ///   tracer record --mpi -o run.capture -- mpiexec -n 2 -bind-to core ./app
    #[arg(long)]
    pub mpi: bool,
    /// Record each traced process's CPU times (running, waiting for a CPU)
    /// every flush interval, not only every stats interval (the default):
    /// what a CPU hog, a pause or a CPU cap take from a process, from
    /// /proc/PID/task/*/schedstat. On with --mpi.
    #[arg(long, conflicts_with = "no_cpu_times")]
    pub cpu_times: bool,
    /// Do not read the traced processes' CPU times (read by default every
    /// stats interval: time running and time runnable but waiting for a
    /// CPU, which a CPU hog beside a server or a CPU cap on it raises).
    #[arg(long)]
    pub no_cpu_times: bool,
    /// Attach the USDT probes matching [OBJECT:]PROVIDER:NAME (globs) in the
    /// target's executable and shared objects, e.g. 'python:function__entry'
    /// or 'python:*', and record their arguments; probe semaphores are
    /// raised while attached (the kernel lowers them again at detach).
    /// `tracer list-usdt PATH|PID` shows what a binary has. Repeatable.
    /// CPython 3.11 fires function__entry/return for Python-to-Python calls
    /// only while its `line` probe is attached too.
    /// `=0,1` after the name records arguments 0 and 1 as strings (sent once
    /// per process and pointer, so records stay small):
    /// 'python:function__entry=0,1' gives file and function names.
    #[arg(long = "usdt", value_name = "PATTERN")]
    pub usdt: Vec<String>,
    /// Raise the semaphores of USDT probes matching PATTERN without recording
    /// their hits (CPython 3.11's `line`, which enables function probes for
    /// Python-to-Python calls). Held by a silent probe at a site that is never
    /// reached where one exists, so it costs no trap per hit. Repeatable.
    #[arg(long = "usdt-semaphore", value_name = "PATTERN")]
    pub usdt_semaphores: Vec<String>,
    /// Attach USDT probes that record nothing, at their own sites, with their
    /// semaphores raised (overhead benchmarks: the bare uprobe cost).
    #[arg(long, value_name = "PATTERN", hide = true)]
    pub bench_empty_usdt: Vec<String>,
    /// Trace the Python functions a CPython interpreter runs (needs a build
    /// with USDT probes, e.g. Debian's /usr/bin/python3.11; pyenv builds have
    /// none): same as
    ///   --usdt 'python:function__entry=0,1' --usdt 'python:function__return=0,1'
    ///   --usdt-semaphore python:line
    /// Entry args: file, function, first line; return args: file, function, line.
    #[arg(long, verbatim_doc_comment)]
    pub python: bool,
    /// Attach empty programs to matching functions (overhead benchmarks).
    #[arg(long, value_name = "PATTERN", hide = true)]
    pub bench_empty_probe: Vec<String>,
    /// Attach empty programs to the system-call tracepoints instead of the
    /// real ones (overhead benchmarks).
    #[arg(long, hide = true)]
    pub bench_empty_syscalls: bool,
    /// Do not keep where each thread entered its system call (overhead
    /// benchmarks: the cost of the blocked-thread entry; no blocked
    /// threads are recorded).
    #[arg(long, hide = true)]
    pub bench_no_blocked: bool,
    /// One perf link per function probe even where uprobe_multi links exist
    /// (tests compare the two paths).
    #[arg(long, hide = true)]
    pub no_uprobe_multi: bool,
    /// Do not trace socket system calls and TCP retransmissions (traced by
    /// default).
    #[arg(long)]
    pub no_syscalls: bool,
    /// Do not count the traced processes' file I/O system calls (read,
    /// write, pread, fsync, open, stat... on files, not sockets or pipes),
    /// which are counted by default per process, call and device, with
    /// bytes and latency.
    #[arg(long)]
    pub no_file_io: bool,
    /// Do not count the node's block requests (counted by default per
    /// device, submitting process and operation, with bytes and latency).
    #[arg(long)]
    pub no_block_io: bool,
    /// Do not read the network counters of the traced processes' network
    /// namespaces (read by default: per interface traffic and drops, TCP
    /// retransmitted segments, from /proc/PID/net).
    #[arg(long)]
    pub no_net_stats: bool,
    /// How often file, block and network counters and CPU times are written.
    #[arg(long, value_name = "TIME", default_value = "250ms", value_parser = parse_duration)]
    pub stats_interval: Duration,
    /// CPU samples per second per CPU (perf cpu-clock); 0 turns sampling off.
    #[arg(long, value_name = "HZ", default_value_t = 99)]
    pub sample_hz: u64,
    /// Sample every process on the node, not only traced ones (a CPU hog
    /// shows up by name). Of objects only untraced processes ran, the
    /// capture holds the symbols their samples fell in, not whole tables
    /// (a busy host's compilers would take hundreds of MB).
    #[arg(long)]
    pub sample_all: bool,
    /// Keep the function probes' cost within PCT percent slowdown of the
    /// traced processes (e.g. 5%). The cost of one probe hit is measured at
    /// start on a function of the tracer's own; each probe's calls are
    /// counted in the kernel over --overhead-interval; then the costliest
    /// probes are detached until the rest fit (functions that delimit
    /// execution units are called least and stay; socket, file and block
    /// signals are never dropped). What was dropped, the estimated and the
    /// measured cost are printed and stored in the capture (`analyzer
    /// summary` shows them). The slowdown is estimated for a process busy
    /// on the CPU: probe time over its CPU time without probes. Without
    /// --overhead, probes estimated at more than 20% of a core are warned
    /// about after the first interval.
    #[arg(long, value_name = "PCT", value_parser = parse_percent)]
    pub overhead: Option<f64>,
    /// With --overhead: keep the functions of the model MODEL (`analyzer
    /// model learn`'s file) while others can go. The budget then drops the
    /// functions the model was learned without first, then those it does
    /// not have, and the model's own only when the rest do not fit (told
    /// when it happens): the capture's units compare with the model's,
    /// where units of trees learned with a function the capture lacks
    /// cannot be judged.
    #[arg(long, value_name = "MODEL", requires = "overhead")]
    pub like: Option<PathBuf>,
    /// How long function probes are counted before they are weighed
    /// against --overhead (with a budget the first look comes after 250 ms,
    /// so that a probe set over budget does not run at full cost for a
    /// whole interval).
    #[arg(long, value_name = "TIME", default_value = "2s", value_parser = parse_duration)]
    pub overhead_interval: Duration,
    /// Do not follow children forked by traced processes.
    #[arg(long)]
    pub no_follow: bool,
    /// Install function probes in every process that maps a probed object,
    /// not only in the processes given with -p and their children: a child
    /// is then recorded from its first call instead of from when its fork is
    /// read, and every other process using a probed library pays each
    /// probe's trap (microseconds) too. A command or --exe target always
    /// probes every process.
    #[arg(long)]
    pub probe_everywhere: bool,
    /// Ring buffer size (power of two; K, M suffixes).
    #[arg(long, value_name = "SIZE", default_value = "8M", value_parser = parse_ring_size)]
    pub ring_size: u32,
    /// Stop after this long (e.g. 30s, 500ms, 2m).
    #[arg(short, long, value_name = "TIME", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Capture file to write: a new file, mode 0600. It is checked before
    /// anything is attached; an existing file is refused unless --force.
    #[arg(short, long, value_name = "FILE", default_value = "trace.capture")]
    pub output: PathBuf,
    /// Replace the output file if it exists (a new file in its place: a
    /// symbolic link there is removed, never followed).
    #[arg(long)]
    pub force: bool,
    /// Command to start and trace from its first instruction.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `tracer replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The capture file.
    pub capture: PathBuf,
    /// Print events as JSON lines (the summary goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Print only the summary.
    #[arg(long, short)]
    pub summary: bool,
}

impl TryFrom<RecordArgs> for RecordConfig {
    type Error = anyhow::Error;

    fn try_from(a: RecordArgs) -> anyhow::Result<Self> {
        let like = a
            .like
            .as_deref()
            .map(|path| {
                tracer::overhead::Keep::from_model_file(path)
                    .map_err(anyhow::Error::msg)
                    .context("--like")
            })
            .transpose()?;
        let mut targets: Vec<Target> = a.pids.into_iter().map(Target::Pid).collect();
        targets.extend(a.exes.into_iter().map(Target::Exe));
        if !a.command.is_empty() {
            targets.push(Target::Command(a.command));
        }
        let (functions, usdt, usdt_semaphores) = ProbeChoice {
            functions: &a.functions,
            args: &a.args,
            entries: &a.entries,
            mpi: a.mpi,
            usdt: &a.usdt,
            usdt_semaphores: &a.usdt_semaphores,
            python: a.python,
        }
        .parse()?;
        let empty_probes = a
            .bench_empty_probe
            .iter()
            .map(|p| FunctionPattern::parse(p, false))
            .collect::<Result<_, _>>()?;
        let usdt_empty = a
            .bench_empty_usdt
            .iter()
            .map(|p| UsdtPattern::parse(p))
            .collect::<Result<_, _>>()?;
        Ok(RecordConfig {
            targets,
            functions,
            empty_probes,
            empty_syscalls: a.bench_empty_syscalls,
            bench_no_blocked: a.bench_no_blocked,
            usdt,
            usdt_semaphores,
            usdt_empty,
            uprobe_multi: !a.no_uprobe_multi,
            syscalls: !a.no_syscalls,
            file_io: !a.no_file_io,
            block_io: !a.no_block_io,
            net_stats: !a.no_net_stats,
            stats_interval: a.stats_interval,
            cpu_times: a.cpu_times || a.mpi,
            cpu_stats: !a.no_cpu_times,
            sample_hz: a.sample_hz,
            sample_all: a.sample_all,
            follow: !a.no_follow,
            probe_everywhere: a.probe_everywhere,
            ring_bytes: a.ring_size,
            duration: a.duration,
            output: a.output,
            overwrite: a.force,
            argv: std::env::args().collect(),
            debug_dirs: a.debug_dirs,
            overhead_percent: a.overhead,
            overhead_interval: a.overhead_interval,
            overhead_keep: like,
            object_tables_after: tracer::record::OBJECT_TABLES_AFTER,
            ..RecordConfig::default()
        })
    }
}

fn parse_ring_size(s: &str) -> Result<u32, String> {
    let bytes = parse_size(s)?;
    u32::try_from(bytes).map_err(|_| "ring sizes above 2G are not supported".to_string())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn cli_is_consistent() {
        Args::command().debug_assert();
    }

    /// Man pages and completions come from the same definitions as `--help`.
    #[test]
    fn man_pages_and_completions_cover_record() {
        let mut page = Vec::new();
        let record = Args::command()
            .find_subcommand("record")
            .cloned()
            .expect("record");
        clap_mangen::Man::new(record)
            .render(&mut page)
            .expect("renders");
        let page = String::from_utf8(page).expect("utf8");
        for option in ["\\-\\-debug\\-dir", "\\-\\-sample\\-hz", "\\-\\-functions"] {
            assert!(page.contains(option), "{option}");
        }
        let mut zsh = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Zsh,
            &mut Args::command(),
            "tracer",
            &mut zsh,
        );
        let zsh = String::from_utf8(zsh).expect("utf8");
        assert!(zsh.contains("--debug-dir") && zsh.contains("list-usdt"));
    }

    #[test]
    fn parses_sizes_and_durations() {
        assert_eq!(parse_ring_size("8M"), Ok(8 << 20));
        assert!(parse_ring_size("4G").is_err());
    }

    #[test]
    fn command_after_double_dash_becomes_a_target() {
        let args = Args::parse_from(["tracer", "record", "-f", "main", "--", "/bin/true", "x"]);
        let Command::Record(rec) = args.command else {
            panic!("record expected")
        };
        let config = RecordConfig::try_from(*rec).expect("valid");
        assert_eq!(
            config.targets,
            vec![Target::Command(vec!["/bin/true".into(), "x".into()])]
        );
        assert_eq!(config.sample_hz, 99);
    }

    #[test]
    fn python_preset_expands_to_function_probes_and_the_line_semaphore() {
        let args = Args::parse_from(["tracer", "record", "--python", "-p", "1"]);
        let Command::Record(rec) = args.command else {
            panic!("record expected")
        };
        let config = RecordConfig::try_from(*rec).expect("valid");
        let usdt: Vec<&str> = config.usdt.iter().map(|p| p.as_str()).collect();
        assert_eq!(usdt, tracer::usdt::PYTHON_PROBES);
        let semaphores: Vec<&str> = config.usdt_semaphores.iter().map(|p| p.as_str()).collect();
        assert_eq!(semaphores, [tracer::usdt::PYTHON_SEMAPHORE]);
        let bad = Args::parse_from(["tracer", "record", "--usdt", "python:line=9", "-p", "1"]);
        let Command::Record(rec) = bad.command else {
            panic!("record expected")
        };
        assert!(RecordConfig::try_from(*rec).is_err(), "string arg index 9");
    }
}
