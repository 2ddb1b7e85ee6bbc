//! The agent's `[[target]]`s resolved to executables, trusting only what
//! an unprivileged user cannot forge (issue 15): a process found by command
//! name or pid file counts only if it runs as root (or the target's
//! `user`) and its executable is owned by root (or the target's `owner`)
//! and writable by nobody else; a pid file only if it is owned by one of
//! them, not writable by others, and not older than its process. What is
//! refused is said, per target, in `tracer ctl status`.

use std::{
    io::Read as _,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use serde::Serialize;

use super::config::{AgentConfig, TargetSpec};
use crate::{
    procfs,
    trust::{self, Kind},
};

/// One target and what it stands for now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TargetState {
    /// The target as configured (`name=victimd`).
    pub target: String,
    /// `resolved` (executables found; the session says whether they are
    /// recorded), `waiting` (nothing to trace yet), `refused` (only
    /// untrusted matches), `skipped` (resolved, but its executables could
    /// not be probed: see notes).
    pub state: &'static str,
    /// Executables it resolves to.
    pub executables: Vec<PathBuf>,
    /// Why something was refused, skipped or is waited for.
    pub notes: Vec<String>,
}

/// Resolves every target of `config`: the executables to trace, and each
/// target's state.
pub fn resolve(config: &AgentConfig) -> (Vec<PathBuf>, Vec<TargetState>) {
    let mut exes: Vec<PathBuf> = Vec::new();
    let mut states = Vec::with_capacity(config.targets.len());
    for t in &config.targets {
        let state = resolve_one(t);
        for e in &state.executables {
            if !exes.contains(e) {
                exes.push(e.clone());
            }
        }
        states.push(state);
    }
    (exes, states)
}

/// Uids allowed to own a target's files, besides root.
fn owners(t: &TargetSpec) -> Vec<u32> {
    [&t.owner, &t.user]
        .into_iter()
        .flatten()
        .filter_map(|u| u.ids().map(|(uid, _)| uid))
        .collect()
}

fn resolve_one(t: &TargetSpec) -> TargetState {
    let mut state = TargetState {
        target: t.describe(),
        state: "waiting",
        executables: Vec::new(),
        notes: Vec::new(),
    };
    let exe_owners: Vec<u32> = t
        .owner
        .iter()
        .filter_map(|u| u.ids().map(|(uid, _)| uid))
        .collect();
    let user = t.user.as_ref().and_then(|u| u.ids().map(|(uid, _)| uid));
    // A process found by name or pid file: its user and executable.
    let accept = |pid: u32, notes: &mut Vec<String>| -> Option<PathBuf> {
        let uid = procfs::uid(pid).ok()?;
        if uid != 0 && Some(uid) != user {
            notes.push(format!(
                "refused process {pid}: it runs as uid {uid}, not as root{}",
                user.map(|u| format!(" or uid {u} (user)"))
                    .unwrap_or_else(|| " (set `user` to trust another)".into())
            ));
            return None;
        }
        let exe = procfs::exe(pid).ok()?;
        match trust::check(&exe, Kind::File, &exe_owners) {
            Ok(exe) => Some(exe),
            Err(e) => {
                notes.push(format!("refused process {pid}: {e}"));
                None
            }
        }
    };
    if let Some(exe) = &t.exe {
        if !exe.exists() {
            state
                .notes
                .push(format!("{} does not exist", exe.display()));
        } else {
            match trust::check(exe, Kind::File, &exe_owners) {
                Ok(p) => state.executables.push(p),
                Err(e) => state.notes.push(format!("refused: {e}")),
            }
        }
    } else if let Some(name) = &t.name {
        let pids = processes_named(name);
        if pids.is_empty() {
            state.notes.push(format!("no process named {name}"));
        }
        for pid in pids {
            if let Some(exe) = accept(pid, &mut state.notes)
                && !state.executables.contains(&exe)
            {
                state.executables.push(exe);
            }
        }
    } else if let Some(pidfile) = &t.pidfile {
        match pid_from_file(pidfile, &owners(t)) {
            Ok(None) => state.notes.push(format!(
                "no running process in pid file {}",
                pidfile.display()
            )),
            Ok(Some(pid)) => {
                if let Some(exe) = accept(pid, &mut state.notes) {
                    state.executables.push(exe);
                }
            }
            Err(why) => state.notes.push(why),
        }
    }
    state.state = if !state.executables.is_empty() {
        "resolved"
    } else if state.notes.iter().any(|n| n.starts_with("refused")) {
        "refused"
    } else {
        "waiting"
    };
    state
}

/// The pid a trusted pid file names, if that process runs and is not
/// younger than the file; `Err` says why the file is not believed.
fn pid_from_file(path: &Path, owners: &[u32]) -> Result<Option<u32>, String> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    trust::check(path, Kind::File, owners).map_err(|e| format!("refused pid file: {e}"))?;
    let mut text = String::new();
    // A pid is a few digits: read no more than that.
    let read = std::fs::File::open(path)
        .and_then(|f| f.take(64).read_to_string(&mut text))
        .is_ok();
    let Some(pid) = read
        .then(|| text.trim().parse::<u32>().ok())
        .flatten()
        .filter(|pid| *pid > 0)
    else {
        return Ok(None);
    };
    let Ok(started) = procfs::start_time_ns(pid) else {
        return Ok(None);
    };
    // A daemon writes its pid file after it starts. A process that started
    // after the file was last written is another program that got the
    // pid when it was reused (one second for clock precision).
    let written = u64::try_from(meta.mtime())
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(meta.mtime_nsec()).unwrap_or(0));
    if started > written.saturating_add(1_000_000_000) {
        return Err(format!(
            "refused pid file {}: process {pid} started {:.1} s after the file was written (a stale pid file whose pid was reused)",
            path.display(),
            (started - written) as f64 / 1e9
        ));
    }
    Ok(Some(pid))
}

/// Processes whose command name is `name`.
fn processes_named(name: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_file_older_than_its_process_is_stale() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("d.pid");
        std::fs::write(&path, format!("{}\n", std::process::id())).expect("write");
        // SAFETY: no preconditions.
        let me = unsafe { libc::geteuid() };
        assert_eq!(
            pid_from_file(&path, &[me]),
            Ok(Some(std::process::id())),
            "written after this process started"
        );
        // As if written an hour before this process started.
        let old = std::fs::File::options()
            .write(true)
            .open(&path)
            .expect("open");
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        old.set_modified(hour_ago).expect("set mtime");
        let e = pid_from_file(&path, &[me]).expect_err("stale");
        assert!(e.contains("stale pid file whose pid was reused"), "{e}");
        std::fs::write(&path, "not a pid").expect("write");
        assert_eq!(pid_from_file(&path, &[me]), Ok(None));
        assert_eq!(pid_from_file(&dir.path().join("none.pid"), &[me]), Ok(None));
    }
}
