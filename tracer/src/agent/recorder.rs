//! The flight recorder's files: a directory of capture files, each a
//! standalone capture, rotated by size and age, the oldest removed first so
//! that the set stays under its disk and age limits. Whatever is removed is
//! counted.

use std::{
    collections::VecDeque,
    fs,
    os::unix::fs::{
        DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
    },
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime},
};

use serde::Serialize;

use crate::session::ClosedFile;

/// Errors managing the directory.
#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    /// The directory could not be created or read.
    #[error("cannot use the directory {path}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The state directory is not root's alone.
    #[error(
        "refusing the state directory: {0} (it holds what the agent records; make it root's, mode 0700)"
    )]
    Untrusted(#[from] crate::trust::TrustError),
}

/// Makes `path` a directory only root uses: created mode 0700 when missing;
/// an existing one must be a directory, not a symbolic link (never
/// followed), owned by root, and is set to mode 0700 through its own
/// descriptor.
pub fn private_dir(path: &Path) -> Result<(), RecorderError> {
    let err = |source| RecorderError::Dir {
        path: path.to_path_buf(),
        source,
    };
    match fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(err(e)),
    }
    // O_NOFOLLOW: a symbolic link planted here fails (ELOOP) instead of
    // leading the chmod, and the files after it, elsewhere.
    let dir = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY)
        .open(path)
        .map_err(|e| {
            let link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
            if link || e.raw_os_error() == Some(libc::ELOOP) {
                err(std::io::Error::other(
                    "it is a symbolic link; the agent does not follow one here",
                ))
            } else {
                err(e)
            }
        })?;
    let meta = dir.metadata().map_err(err)?;
    // SAFETY: no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(err(std::io::Error::other(format!(
            "owned by uid {}, not by the agent (uid {me})",
            meta.uid()
        ))));
    }
    dir.set_permissions(fs::Permissions::from_mode(0o700))
        .map_err(err)?;
    Ok(())
}

/// The limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// All files together, bytes.
    pub max_disk: u64,
    /// Oldest file kept.
    pub max_age: Duration,
    /// Rotate at this size.
    pub file_bytes: u64,
    /// Or this age.
    pub file_age: Duration,
    /// Most one drain can add to the current file before limits are
    /// checked again (the ring's size): kept free so the limit holds.
    pub headroom: u64,
}

/// A closed file.
#[derive(Clone, Debug, Serialize)]
pub struct FileEntry {
    /// The file.
    pub path: PathBuf,
    /// The recording session it belongs to (files of one session share
    /// probe ids and can be joined); `None` for files of an earlier run.
    pub session: Option<u64>,
    /// Size, bytes.
    pub bytes: u64,
    /// Records (unknown for files of an earlier run: 0).
    pub records: u64,
    /// First and last record, `CLOCK_MONOTONIC` ns (0: unknown).
    pub first_ns: u64,
    /// See `first_ns`.
    pub last_ns: u64,
    /// When it was closed.
    #[serde(skip)]
    pub closed: SystemTime,
}

/// What was removed to stay within the limits.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Removed {
    /// Files.
    pub files: u64,
    /// Records in them (as counted when they were written).
    pub records: u64,
    /// Bytes.
    pub bytes: u64,
}

/// The directory and its files.
#[derive(Debug)]
pub struct FlightRecorder {
    dir: PathBuf,
    run: u64,
    seq: u64,
    limits: Limits,
    closed: VecDeque<FileEntry>,
    opened: Instant,
    /// Removed by the size limit.
    pub removed_for_size: Removed,
    /// Removed by the age limit.
    pub removed_for_age: Removed,
}

impl FlightRecorder {
    /// Opens `dir` (created mode 0700), adopting capture files an earlier run
    /// left there, so the limits hold across restarts.
    pub fn open(dir: &Path, limits: Limits) -> Result<Self, RecorderError> {
        let err = |source| RecorderError::Dir {
            path: dir.to_path_buf(),
            source,
        };
        private_dir(dir)?;
        let mut old: Vec<FileEntry> = fs::read_dir(dir)
            .map_err(err)?
            .filter_map(|e| {
                let e = e.ok()?;
                let path = e.path();
                if path.extension()? != "capture" {
                    return None;
                }
                // Not through links: only files the agent wrote.
                let meta = e.metadata().ok().filter(fs::Metadata::is_file)?;
                Some(FileEntry {
                    path,
                    session: None,
                    bytes: meta.len(),
                    records: 0,
                    first_ns: 0,
                    last_ns: 0,
                    closed: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                })
            })
            .collect();
        // Names start with the run's start time: name order is age order.
        old.sort_by(|a, b| a.path.cmp(&b.path));
        let run = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(Self {
            dir: dir.to_path_buf(),
            run,
            seq: 0,
            limits,
            closed: old.into(),
            opened: Instant::now(),
            removed_for_size: Removed::default(),
            removed_for_age: Removed::default(),
        })
    }

    /// The path for the next file of `session`; starts its age.
    pub fn next_path(&mut self, session: u64) -> PathBuf {
        self.seq += 1;
        self.opened = Instant::now();
        self.dir.join(format!(
            "{:010}-{session:04}-{:06}.capture",
            self.run, self.seq
        ))
    }

    /// Whether the current file (of `bytes`) should be closed now.
    pub fn should_rotate(&self, bytes: u64) -> bool {
        bytes >= self.limits.file_bytes || self.opened.elapsed() >= self.limits.file_age
    }

    /// Takes a file the session closed.
    pub fn closed(&mut self, file: ClosedFile, session: u64) {
        self.closed.push_back(FileEntry {
            path: file.path,
            session: Some(session),
            bytes: file.bytes,
            records: file.records,
            first_ns: file.first_ns,
            last_ns: file.last_ns,
            closed: SystemTime::now(),
        });
    }

    /// Removes the oldest files until the closed ones, the current one (of
    /// `current_bytes`) and the headroom fit in `max_disk`, and every file
    /// older than `max_age`. Returns how many were removed.
    pub fn enforce(&mut self, current_bytes: u64) -> usize {
        let mut n = 0;
        let now = SystemTime::now();
        while let Some(oldest) = self.closed.front() {
            let total: u64 = self.closed.iter().map(|f| f.bytes).sum::<u64>() + current_bytes;
            let too_big = total + self.limits.headroom > self.limits.max_disk;
            let too_old = now
                .duration_since(oldest.closed)
                .is_ok_and(|age| age > self.limits.max_age);
            if !too_big && !too_old {
                break;
            }
            let Some(f) = self.closed.pop_front() else {
                break;
            };
            if let Err(e) = fs::remove_file(&f.path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                log::warn!("cannot remove {}: {e}", f.path.display());
            }
            let removed = if too_big {
                &mut self.removed_for_size
            } else {
                &mut self.removed_for_age
            };
            removed.files += 1;
            removed.records += f.records;
            removed.bytes += f.bytes;
            n += 1;
        }
        n
    }

    /// Closed files, oldest first.
    pub fn files(&self) -> impl Iterator<Item = &FileEntry> {
        self.closed.iter()
    }

    /// Bytes of the closed files.
    pub fn closed_bytes(&self) -> u64 {
        self.closed.iter().map(|f| f.bytes).sum()
    }

    /// Changes the limits (a reloaded configuration); the next
    /// [`FlightRecorder::enforce`] applies them.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_disk: 1000,
            max_age: Duration::from_secs(3600),
            file_bytes: 300,
            file_age: Duration::from_secs(60),
            headroom: 100,
        }
    }

    fn close(r: &mut FlightRecorder, session: u64, bytes: usize) -> PathBuf {
        let path = r.next_path(session);
        fs::write(&path, vec![0u8; bytes]).expect("write");
        r.closed(
            ClosedFile {
                path: path.clone(),
                bytes: bytes as u64,
                records: 10,
                first_ns: 1,
                last_ns: 2,
            },
            session,
        );
        path
    }

    #[test]
    fn the_oldest_files_go_first_and_are_counted() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut r = FlightRecorder::open(dir.path(), limits()).expect("open");
        let first = close(&mut r, 1, 300);
        let second = close(&mut r, 1, 300);
        assert_eq!(r.enforce(200), 0, "300+300+200+100 fits in 1000");
        assert_eq!(r.enforce(301), 1, "300+300+301+100 does not");
        assert!(!first.exists() && second.exists());
        assert_eq!(r.removed_for_size.files, 1);
        assert_eq!(r.removed_for_size.records, 10);
        assert_eq!(r.removed_for_size.bytes, 300);
        assert_eq!(r.closed_bytes(), 300);
    }

    #[test]
    fn files_of_an_earlier_run_are_adopted_in_order() {
        let dir = tempfile::tempdir().expect("tmp");
        fs::write(
            dir.path().join("0000000001-0001-000002.capture"),
            [0u8; 500],
        )
        .expect("w");
        fs::write(
            dir.path().join("0000000001-0001-000001.capture"),
            [0u8; 500],
        )
        .expect("w");
        fs::write(dir.path().join("notes.txt"), b"kept").expect("w");
        let mut r = FlightRecorder::open(dir.path(), limits()).expect("open");
        assert_eq!(r.closed_bytes(), 1000);
        assert_eq!(r.enforce(0), 1);
        assert!(!dir.path().join("0000000001-0001-000001.capture").exists());
        assert!(dir.path().join("notes.txt").exists());
        let mode = fs::metadata(dir.path()).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn age_limits_remove_old_files() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut r = FlightRecorder::open(
            dir.path(),
            Limits {
                max_age: Duration::from_millis(1),
                ..limits()
            },
        )
        .expect("open");
        close(&mut r, 1, 10);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(r.enforce(0), 1);
        assert_eq!(r.removed_for_age.files, 1);
    }
}
