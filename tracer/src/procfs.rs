//! What `/proc` says about a process: executable, command line, maps, socket
//! descriptors, parent, and the environment variables that identify its role.

use std::{
    collections::BTreeMap,
    fs, io,
    path::{Path, PathBuf},
};

use tracer_common::capture::{MapEntry, ProcessInfo, SocketEntry};

/// Environment variables recorded when present: MPI launchers set them, and
/// they tell which rank a process is.
pub const ROLE_ENV: &[&str] = &[
    "PMI_RANK",
    "PMI_SIZE",
    "PMIX_RANK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "MPI_LOCALRANKID",
    "MPIR_CVAR_CH3_INTERFACE_HOSTNAME",
];

/// Errors reading `/proc`.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The process does not exist (or is gone).
    #[error("no process with pid {pid}")]
    NoSuchProcess {
        /// The pid.
        pid: u32,
    },
    /// Reading a file under `/proc/PID` failed.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A file under `/proc/PID` is larger than any real process makes it
    /// (another user's process controls its maps, command line and sockets;
    /// a root tracer reads no more than this of them).
    #[error("{path} is larger than {limit} bytes; not read")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The bound.
        limit: u64,
    },
}

/// Bounds on what is read of files under `/proc/PID`. Kernel-made files of a
/// real process stay far below them (maps: 65,530 mappings at most by
/// default, about 100 bytes each), but their size is set by the process.
mod limit {
    /// `status`, `stat`, `children` of one thread.
    pub const SMALL: u64 = 64 << 10;
    /// `cmdline`: the rest of a longer command line is left out.
    pub const CMDLINE: u64 = 128 << 10;
    /// `environ`: only the launchers' role variables are kept.
    pub const ENVIRON: u64 = 1 << 20;
    /// `maps`: beyond this the process is not snapshotted.
    pub const MAPS: u64 = 64 << 20;
    /// `net/tcp{,6}`: the rest of a longer table is left out.
    pub const TCP_TABLE: u64 = 64 << 20;
    /// Entries read of a directory (`fd`, `task`).
    pub const DIR_ENTRIES: usize = 1 << 18;
}

/// Up to `limit` bytes of `path`, and whether there was more.
fn read_prefix(path: &Path, limit: u64) -> io::Result<(Vec<u8>, bool)> {
    use io::Read as _;
    let mut bytes = Vec::new();
    fs::File::open(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    let more = bytes.len() as u64 > limit;
    bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok((bytes, more))
}

/// `path` as text, refused when longer than `limit`.
fn read(path: PathBuf, limit: u64) -> Result<String, ProcError> {
    match read_prefix(&path, limit) {
        Ok((_, true)) => Err(ProcError::TooLarge { path, limit }),
        Ok((bytes, false)) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(source) => Err(ProcError::Read { path, source }),
    }
}

/// The text of `/proc/PID/maps` (bounded), or why not.
pub fn maps_text(pid: u32) -> Result<String, ProcError> {
    read(PathBuf::from(format!("/proc/{pid}/maps")), limit::MAPS).map_err(|e| match e {
        ProcError::Read { .. } if !exists(pid) => ProcError::NoSuchProcess { pid },
        e => e,
    })
}

/// Whether process `pid` exists.
pub fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The scheduler state letter of `pid` (`R`, `S`, `D`, `T`, `t`, `Z`, ...),
/// from `/proc/PID/stat`; `None` when the process is gone.
pub fn state(pid: u32) -> Option<String> {
    let text = read(PathBuf::from(format!("/proc/{pid}/stat")), limit::SMALL).ok()?;
    parse_state(&text)
}

/// The state field of a `/proc/PID/stat` line: the first field after the
/// command name, which is in parentheses and may itself hold `)` and spaces.
fn parse_state(stat: &str) -> Option<String> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let state = rest.split_whitespace().next()?;
    (state.len() == 1).then(|| state.to_string())
}

/// CPU times of `pid` summed over its current threads, from
/// `/proc/PID/task/*/schedstat` (run ns, run-queue wait ns, time slices):
/// (run, wait, slices, threads), or `None` when the process is gone.
pub fn cpu_times(pid: u32) -> Option<(u64, u64, u64, u32)> {
    let threads = thread_cpu_times(pid)?;
    let mut total = (0u64, 0u64, 0u64, 0u32);
    for (_, t) in &threads {
        total.0 = total.0.saturating_add(t[0]);
        total.1 = total.1.saturating_add(t[1]);
        total.2 = total.2.saturating_add(t[2]);
        total.3 += 1;
    }
    Some(total)
}

/// Most threads of one process read by [`thread_cpu_times`]: a process
/// with more is summed partially.
pub const MAX_THREADS_READ: usize = 4096;

/// Each current thread's CPU times (run ns, run-queue wait ns, time
/// slices), from `/proc/PID/task/TID/schedstat`, at most
/// [`MAX_THREADS_READ`] threads; `None` when the process is gone or has no
/// readable thread.
pub fn thread_cpu_times(pid: u32) -> Option<Vec<(u32, [u64; 3])>> {
    let dir = fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut out = Vec::new();
    for entry in dir.flatten().take(MAX_THREADS_READ) {
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(text) = read(entry.path().join("schedstat"), limit::SMALL) else {
            continue;
        };
        if let Some(t) = parse_schedstat(&text) {
            out.push((tid, t));
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The three fields of a `schedstat` file: time on a CPU (ns), time
/// runnable on a run queue (ns), time slices.
pub fn parse_schedstat(text: &str) -> Option<[u64; 3]> {
    let mut f = text.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some([f.next()??, f.next()??, f.next()??])
}

/// Path of the executable of `pid`.
pub fn exe(pid: u32) -> Result<PathBuf, ProcError> {
    let path = PathBuf::from(format!("/proc/{pid}/exe"));
    fs::read_link(&path).map_err(|source| {
        if exists(pid) {
            ProcError::Read { path, source }
        } else {
            ProcError::NoSuchProcess { pid }
        }
    })
}

/// The real uid of `pid` (who started it), from `/proc/PID/status`.
pub fn uid(pid: u32) -> Result<u32, ProcError> {
    let path = PathBuf::from(format!("/proc/{pid}/status"));
    let text = read(path.clone(), limit::SMALL)?;
    text.lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or(ProcError::Read {
            path,
            source: io::Error::other("no Uid line"),
        })
}

/// When `pid` started, `CLOCK_REALTIME` ns (to clock-tick precision).
pub fn start_time_ns(pid: u32) -> Result<u64, ProcError> {
    let since_boot_ns = start_since_boot_ns(pid)?;
    let boot_ns = clock_ns(libc::CLOCK_REALTIME).saturating_sub(clock_ns(libc::CLOCK_BOOTTIME));
    Ok(boot_ns.saturating_add(since_boot_ns))
}

/// When `pid` started, `CLOCK_BOOTTIME` ns (to clock-tick precision): the
/// clock to compare with [`boottime_ns`], which no time step moves.
pub fn start_since_boot_ns(pid: u32) -> Result<u64, ProcError> {
    let path = PathBuf::from(format!("/proc/{pid}/stat"));
    let text = read(path.clone(), limit::SMALL)?;
    let bad = || ProcError::Read {
        path: path.clone(),
        source: io::Error::other("unexpected /proc/PID/stat format"),
    };
    // Fields after the command name, which may hold spaces and ')'.
    let rest = text.rsplit_once(')').ok_or_else(bad)?.1;
    // starttime is field 22; `rest` starts at field 3.
    let ticks: u64 = rest
        .split_whitespace()
        .nth(19)
        .and_then(|f| f.parse().ok())
        .ok_or_else(bad)?;
    Ok(ticks.saturating_mul(1_000_000_000) / clock_hz())
}

/// Clock ticks per second of `/proc` times (`_SC_CLK_TCK`, usually 100).
fn clock_hz() -> u64 {
    // SAFETY: no preconditions.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|hz| *hz > 0)
        .unwrap_or(100)
}

/// One clock tick of `/proc` times, ns: the precision of
/// [`start_since_boot_ns`].
pub fn clock_tick_ns() -> u64 {
    1_000_000_000 / clock_hz()
}

/// The host's CPU time over every core, clock ticks: (busy, all), from the
/// first line of `/proc/stat` (busy: all but idle and I/O wait).
pub fn host_cpu_ticks() -> Option<(u64, u64)> {
    let (bytes, _) = read_prefix(Path::new("/proc/stat"), 4096).ok()?;
    parse_host_cpu(&String::from_utf8_lossy(&bytes))
}

fn parse_host_cpu(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guests are in user).
    let all = v.iter().fold(0u64, |a, x| a.saturating_add(*x));
    let idle = v.get(3)?.saturating_add(*v.get(4)?);
    Some((all.saturating_sub(idle), all))
}

/// `CLOCK_BOOTTIME` now, ns.
pub fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Parses `/proc/PID/maps` text.
pub fn parse_maps(text: &str) -> Vec<MapEntry> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(6, ' ');
            let range = parts.next()?;
            let perms = parts.next()?;
            let offset = u64::from_str_radix(parts.next()?, 16).ok()?;
            let _dev = parts.next()?;
            let _inode = parts.next()?;
            let path = parts.next().unwrap_or("").trim().to_string();
            let (start, end) = range.split_once('-')?;
            Some(MapEntry {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset,
                perms: perms.to_string(),
                path,
            })
        })
        .collect()
}

/// Executable mappings of `pid`.
pub fn exec_maps(pid: u32) -> Result<Vec<MapEntry>, ProcError> {
    Ok(parse_maps(&maps_text(pid)?)
        .into_iter()
        .filter(|m| m.perms.contains('x'))
        .collect())
}

/// A snapshot of process `pid`, taken at `now_ns`.
pub fn snapshot(pid: u32, now_ns: u64, traced: bool) -> Result<ProcessInfo, ProcError> {
    if !exists(pid) {
        return Err(ProcError::NoSuchProcess { pid });
    }
    let status = read(PathBuf::from(format!("/proc/{pid}/status")), limit::SMALL)?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
            .unwrap_or_default()
    };
    // /proc/TID exists for threads too; only thread-group leaders are processes.
    if field("Tgid:").parse::<u32>().ok() != Some(pid) {
        return Err(ProcError::NoSuchProcess { pid });
    }
    let cmdline = cmdline(pid)?;
    let env = read_prefix(Path::new(&format!("/proc/{pid}/environ")), limit::ENVIRON)
        .map(|(bytes, _)| role_env(&bytes))
        .unwrap_or_default();
    Ok(ProcessInfo {
        pid,
        ppid: field("PPid:").parse().unwrap_or(0),
        seen_ns: now_ns,
        traced,
        comm: field("Name:"),
        exe: exe(pid)
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        cmdline,
        env,
        maps: exec_maps(pid)?,
        sockets: tcp_sockets(pid),
        netns: netns(pid).unwrap_or(0),
        probes_from_ns: None,
    })
}

/// The arguments of `pid`; past [`limit::CMDLINE`] bytes, the arguments that
/// fit and a last one saying how long the line was not.
fn cmdline(pid: u32) -> Result<Vec<String>, ProcError> {
    let path = PathBuf::from(format!("/proc/{pid}/cmdline"));
    let (mut bytes, more) = match read_prefix(&path, limit::CMDLINE) {
        Ok(read) => read,
        Err(source) => return Err(ProcError::Read { path, source }),
    };
    if more {
        // The last argument is cut: leave it out rather than keep half.
        let whole = bytes.iter().rposition(|b| *b == 0).map_or(0, |i| i + 1);
        bytes.truncate(whole);
    }
    let mut args: Vec<String> = bytes
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    if more {
        args.push(format!(
            "[command line longer than {} bytes]",
            limit::CMDLINE
        ));
    }
    Ok(args)
}

/// Inode number of the network namespace of `pid` (`/proc/PID/ns/net`).
pub fn netns(pid: u32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    fs::metadata(format!("/proc/{pid}/ns/net"))
        .ok()
        .map(|m| m.ino())
}

/// TCP sockets of `pid` (its network namespace's tables, matched by inode;
/// a table read within [`TCP_TABLE_REUSE`] serves again).
pub fn tcp_sockets(pid: u32) -> Vec<SocketEntry> {
    tcp_sockets_within(pid, TCP_TABLE_REUSE)
}

fn tcp_sockets_within(pid: u32, reuse: std::time::Duration) -> Vec<SocketEntry> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let by_inode: BTreeMap<u64, i32> = dir
        .take(limit::DIR_ENTRIES)
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let target = fs::read_link(entry.path()).ok()?;
            let target = target.to_str()?;
            let inode = target.strip_prefix("socket:[")?.strip_suffix(']')?;
            Some((
                inode.parse().ok()?,
                entry.file_name().to_str()?.parse().ok()?,
            ))
        })
        .collect();
    if by_inode.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (table, v6) in [("tcp", false), ("tcp6", true)] {
        let Some(text) = tcp_table(pid, table, reuse) else {
            continue;
        };
        out.extend(parse_tcp_table(&text, v6, &by_inode));
    }
    out.sort_by_key(|s| s.fd);
    out
}

/// How long a read TCP table of a network namespace serves other
/// processes' snapshots: each read walks the kernel's whole established
/// hash (~5 ms on a 2-vCPU VM for a 26-line table), and a job's processes
/// starting together were snapshotted a dozen times in a fraction of a
/// second (issue 17 item 9). A socket opened within this window may be
/// missing from a snapshot; its system calls are traced.
const TCP_TABLE_REUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// `/proc/PID/net/TABLE` as text, from a read of the same network
/// namespace's table within [`TCP_TABLE_REUSE`] when there is one.
fn tcp_table(
    pid: u32,
    table: &'static str,
    reuse: std::time::Duration,
) -> Option<std::sync::Arc<str>> {
    type Tables = BTreeMap<(u64, &'static str), (std::time::Instant, std::sync::Arc<str>)>;
    static CACHE: std::sync::Mutex<Tables> = std::sync::Mutex::new(BTreeMap::new());
    let ns = netns(pid);
    let now = std::time::Instant::now();
    if let Some(ns) = ns {
        let cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, text)) = cache.get(&(ns, table))
            && now.duration_since(*at) < reuse
        {
            return Some(text.clone());
        }
    }
    let path = PathBuf::from(format!("/proc/{pid}/net/{table}"));
    let (bytes, _) = read_prefix(&path, limit::TCP_TABLE).ok()?;
    let text: std::sync::Arc<str> = String::from_utf8_lossy(&bytes).into();
    if let Some(ns) = ns {
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        cache.retain(|_, (at, _)| now.duration_since(*at) < TCP_TABLE_REUSE);
        cache.insert((ns, table), (now, text.clone()));
    }
    Some(text)
}

/// Lines of `/proc/net/tcp{,6}` whose inode is one of `by_inode`.
fn parse_tcp_table(text: &str, v6: bool, by_inode: &BTreeMap<u64, i32>) -> Vec<SocketEntry> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let inode: u64 = f.get(9)?.parse().ok()?;
            let fd = *by_inode.get(&inode)?;
            let state = match u8::from_str_radix(f.get(3)?, 16).ok()? {
                0x01 => "established".to_string(),
                0x0a => "listen".to_string(),
                n => format!("{n}"),
            };
            let remote = hex_addr(f.get(2)?, v6)?;
            Some(SocketEntry {
                fd,
                local: hex_addr(f.get(1)?, v6)?,
                remote: if state == "listen" {
                    String::new()
                } else {
                    remote
                },
                state,
            })
        })
        .collect()
}

/// `0100007F:1F90` -> `127.0.0.1:8080` (the kernel prints each 32-bit word
/// of the address in host order).
fn hex_addr(field: &str, v6: bool) -> Option<String> {
    let (addr, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    // Each 32-bit word is the in-memory (network order) bytes read as a
    // little-endian integer: its little-endian bytes are the address bytes.
    let mut bytes = Vec::with_capacity(16);
    for i in 0..addr.len() / 8 {
        let word = u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok()?;
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    if v6 {
        let a: [u8; 16] = bytes.try_into().ok()?;
        let ip = std::net::Ipv6Addr::from(a);
        Some(match ip.to_ipv4_mapped() {
            Some(v4) => format!("{v4}:{port}"),
            None => format!("[{ip}]:{port}"),
        })
    } else {
        let a: [u8; 4] = bytes.try_into().ok()?;
        Some(format!("{}:{port}", std::net::Ipv4Addr::from(a)))
    }
}

fn role_env(environ: &[u8]) -> BTreeMap<String, String> {
    environ
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            ROLE_ENV
                .contains(&k)
                .then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// Socket descriptors open in `pid` (from `/proc/PID/fd`).
pub fn socket_fds(pid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.take(limit::DIR_ENTRIES)
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let target = fs::read_link(entry.path()).ok()?;
            target
                .to_string_lossy()
                .starts_with("socket:[")
                .then(|| entry.file_name().to_str()?.parse().ok())?
        })
        .collect()
}

/// Whether `pid` is a process (a thread-group leader), not another thread
/// of one: `/proc/TID` exists for threads too.
pub fn is_process(pid: u32) -> bool {
    read(PathBuf::from(format!("/proc/{pid}/status")), limit::SMALL).is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .and_then(|v| v.trim().parse::<u32>().ok())
            == Some(pid)
    })
}

/// Thread ids of `pid`.
pub fn threads(pid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.take(limit::DIR_ENTRIES)
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The system call thread `tid` of `pid` is blocked in, from
/// `/proc/PID/task/TID/syscall`: (number, user stack pointer, user
/// instruction pointer); `None` while it runs user code or when the file
/// cannot be read.
pub fn blocked_syscall(pid: u32, tid: u32) -> Option<(u32, u64, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    parse_syscall(&text)
}

/// Parses a `syscall` file: `NR ARG1 … ARG6 SP PC`, or `running`, or `-1
/// SP PC` (blocked, not in a system call).
pub fn parse_syscall(text: &str) -> Option<(u32, u64, u64)> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let [nr, _, _, _, _, _, _, sp, pc] = fields.as_slice() else {
        return None;
    };
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    Some((nr.parse().ok()?, hex(sp)?, hex(pc)?))
}

/// Children of `pid` (all threads' children), for following processes that
/// were started before the tracer attached.
pub fn children(pid: u32) -> Vec<u32> {
    threads(pid)
        .into_iter()
        .filter_map(|tid| {
            let path = PathBuf::from(format!("/proc/{pid}/task/{tid}/children"));
            let (mut bytes, more) = read_prefix(&path, limit::SMALL).ok()?;
            if more {
                // A cut pid is no pid: keep the whole ones.
                let whole = bytes.iter().rposition(|b| *b == b' ').unwrap_or(0);
                bytes.truncate(whole);
            }
            Some(bytes)
        })
        .flat_map(|bytes| {
            String::from_utf8_lossy(&bytes)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The most descendants [`descendants`] lists: a process tree that forks
/// faster than it can be read must not keep the walk going.
const MAX_DESCENDANTS: usize = 65_536;

/// Every descendant of `pid` alive now (children, their children, …),
/// each once, at most [`MAX_DESCENDANTS`].
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut seen = std::collections::HashSet::from([pid]);
    let mut out = Vec::new();
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        for child in children(p) {
            // A pid reused while walking could point back up the tree.
            if out.len() < MAX_DESCENDANTS && seen.insert(child) {
                out.push(child);
                stack.push(child);
            }
        }
    }
    out
}

#[cfg(test)]
mod syscall_file_tests {
    use super::*;

    #[test]
    fn a_blocked_threads_syscall_file_gives_its_call_and_registers() {
        let text = "230 0x0 0x0 0x7f10 0x0 0x5 0x0 0x7ffd4a1c 0x7f9a3c1d\n";
        assert_eq!(parse_syscall(text), Some((230, 0x7ffd_4a1c, 0x7f9a_3c1d)));
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("-1 0x7ffd4a1c 0x7f9a3c1d\n"), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_cpu_is_busy_and_all_ticks() {
        let stat = "cpu  100 5 50 800 20 3 2 0 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(parse_host_cpu(stat), Some((160, 980)));
        assert_eq!(parse_host_cpu("cpu 1 2\n"), None);
        assert_eq!(parse_host_cpu("intr 1 2 3\n"), None);
        let (busy, all) = host_cpu_ticks().expect("this host's /proc/stat");
        assert!(busy <= all && all > 0);
    }

    /// A child's child is a descendant too, each listed once.
    #[test]
    fn descendants_reach_grandchildren() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh starts");
        let mut line = String::new();
        io::BufRead::read_line(
            &mut io::BufReader::new(child.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("grandchild pid");
        let grandchild: u32 = line.trim().parse().expect("a pid");
        let all = descendants(std::process::id());
        let _ = std::process::Command::new("kill")
            .arg(grandchild.to_string())
            .status();
        let _ = child.kill();
        let _ = child.wait();
        assert!(all.contains(&child.id()), "{all:?}");
        assert!(all.contains(&grandchild), "{all:?}");
        let mut unique = all.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "{all:?}");
    }

    #[test]
    fn parses_maps_lines() {
        let text = "55d0c0a00000-55d0c0a01000 r-xp 00001000 fe:01 1234   /usr/bin/x y\n\
                    7ffd1000-7ffd2000 rw-p 00000000 00:00 0 \n";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 2);
        assert_eq!(maps[0].start, 0x55d0c0a00000);
        assert_eq!(maps[0].offset, 0x1000);
        assert_eq!(maps[0].path, "/usr/bin/x y");
        assert_eq!(maps[1].path, "");
    }

    #[test]
    fn parses_tcp_tables() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n\
   1: 0100007F:9C40 0200A8C0:1F90 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n\
   2: 0100007F:9C41 0200A8C0:1F90 01 00000000:00000000 00:00000000 00000000     0        0 333 1\n";
        let mine: BTreeMap<u64, i32> = [(111, 3), (222, 4)].into_iter().collect();
        let s = parse_tcp_table(v4, false, &mine);
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!(
            (
                s[0].fd,
                s[0].local.as_str(),
                s[0].remote.as_str(),
                s[0].state.as_str()
            ),
            (3, "127.0.0.1:8080", "", "listen")
        );
        assert_eq!(
            (
                s[1].local.as_str(),
                s[1].remote.as_str(),
                s[1].state.as_str()
            ),
            ("127.0.0.1:40000", "192.168.0.2:8080", "established")
        );
        let v6 = "  sl  local_address                         remote_address                        st\n\
   0: 0000000000000000FFFF00000100007F:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n";
        let s = parse_tcp_table(v6, true, &mine);
        assert_eq!(s[0].local, "127.0.0.1:8080", "v4-mapped");
    }

    /// A listening socket of this very process shows up with its port.
    #[test]
    fn snapshots_own_listening_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        // A fresh read: a table another test read may not have it yet.
        let socks = tcp_sockets_within(std::process::id(), std::time::Duration::ZERO);
        assert!(
            socks
                .iter()
                .any(|s| s.state == "listen" && s.local == format!("127.0.0.1:{port}")),
            "{socks:?}"
        );
    }

    #[test]
    fn a_table_read_serves_again_within_the_reuse_window() {
        let me = std::process::id();
        let first = tcp_table(me, "tcp", TCP_TABLE_REUSE).expect("tcp table");
        // A listener opened now is in a fresh read, not in the reused one.
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = format!(":{:04X}", l.local_addr().expect("addr").port());
        let again = tcp_table(me, "tcp", std::time::Duration::from_secs(3600)).expect("tcp table");
        assert!(std::sync::Arc::ptr_eq(&first, &again) || !again.contains(&port));
        let fresh = tcp_table(me, "tcp", std::time::Duration::ZERO).expect("tcp table");
        assert!(fresh.contains(&port), "{fresh}");
    }

    #[test]
    fn own_uid_and_start_time() {
        let me = std::process::id();
        // SAFETY: no preconditions.
        assert_eq!(uid(me).expect("own uid"), unsafe { libc::getuid() });
        let started = start_time_ns(me).expect("own start");
        let now = clock_ns(libc::CLOCK_REALTIME);
        assert!(started <= now + 20_000_000, "{started} > {now}");
        assert!(now - started < 3_600_000_000_000, "started an hour ago?");
    }

    #[test]
    fn keeps_only_role_variables() {
        let env = role_env(b"PATH=/bin\0PMI_RANK=3\0X=1\0PMI_SIZE=4\0");
        assert_eq!(env.len(), 2);
        assert_eq!(env["PMI_RANK"], "3");
    }

    #[test]
    fn snapshot_of_self_has_executable_maps() {
        let me = std::process::id();
        let info = snapshot(me, 1, true).expect("own process");
        assert_eq!(info.pid, me);
        assert!(info.maps.iter().any(|m| m.path == info.exe), "{info:?}");
        assert!(matches!(
            snapshot(u32::MAX - 1, 0, false),
            Err(ProcError::NoSuchProcess { .. })
        ));
    }

    #[test]
    fn a_file_longer_than_its_bound_is_refused_not_read_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("maps");
        fs::write(&path, vec![b'x'; 1025]).expect("write");
        assert!(matches!(
            read(path.clone(), 1024),
            Err(ProcError::TooLarge { limit: 1024, .. })
        ));
        assert_eq!(read(path, 1025).expect("fits").len(), 1025);
    }

    #[test]
    fn a_long_command_line_keeps_the_arguments_that_fit_and_says_so() {
        // Two arguments of 100 KiB: the first fits the bound, the second not.
        // They are handed to a shell that ignores them: given to sleep, they
        // made it exit at once (invalid interval), and a zombie's command
        // line reads empty.
        let long = "a".repeat(100 << 10);
        let script = "sleep 30; :";
        let mut child = std::process::Command::new("sh")
            .args(["-c", script, &long, &long])
            .spawn()
            .expect("spawn sh");
        // spawn() may return before exec has replaced the command line: read
        // until it is the shell's.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let args = loop {
            let args = cmdline(child.id());
            let is_shell = matches!(&args, Ok(a) if a.get(2).is_some_and(|c| c == script));
            if is_shell || std::time::Instant::now() > deadline {
                break args;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        child.kill().ok();
        child.wait().ok();
        let args = args.expect("cmdline");
        assert_eq!(
            args.len(),
            5,
            "sh, -c, the script, one long argument, the note"
        );
        assert_eq!(args[3], long);
        assert!(args[4].contains("longer than"), "{}", args[4]);
    }

    #[test]
    fn state_is_read_after_the_command_name() {
        assert_eq!(
            parse_state("4242 (mpi ) rank) T 1 4242 4242 0 -1").as_deref(),
            Some("T")
        );
        assert_eq!(parse_state("4242 (sh) R 1").as_deref(), Some("R"));
        assert_eq!(parse_state("garbage"), None);
    }

    #[test]
    fn schedstat_fields_are_read_or_refused() {
        assert_eq!(
            parse_schedstat("564083962 4931404820 79\n"),
            Some([564_083_962, 4_931_404_820, 79])
        );
        assert_eq!(parse_schedstat("12 x 3"), None);
        assert_eq!(parse_schedstat("12 3"), None);
    }
}
