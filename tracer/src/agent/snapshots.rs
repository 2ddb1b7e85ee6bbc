//! The snapshots directory under a disk budget (`max_snapshots_disk`):
//! snapshots taken on alerts and on request count against it, the oldest
//! removed first, the newest always kept; snapshots an earlier run left
//! count too. What was removed is counted.

use std::{
    collections::VecDeque,
    fs,
    path::{Path, PathBuf},
};

use serde::Serialize;

use super::recorder::{RecorderError, Removed, private_dir};

/// The snapshots, as `status` shows them.
#[derive(Clone, Debug, Serialize)]
pub struct SnapshotsStatus {
    /// The directory.
    pub dir: PathBuf,
    /// Snapshots kept.
    pub files: usize,
    /// Their size together.
    pub bytes: u64,
    /// The budget.
    pub max_bytes: u64,
    /// Removed to stay within it (records are not counted: 0).
    pub removed: Removed,
}

/// The directory and its files, oldest first.
#[derive(Debug)]
pub struct Snapshots {
    dir: PathBuf,
    max_bytes: u64,
    files: VecDeque<(PathBuf, u64)>,
    removed: Removed,
}

impl Snapshots {
    /// Opens `dir` (private, see [`private_dir`]), adopting the snapshots
    /// in it, and applies the budget.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Self, RecorderError> {
        private_dir(dir)?;
        let mut files: Vec<(PathBuf, u64)> = fs::read_dir(dir)
            .map_err(|source| RecorderError::Dir {
                path: dir.to_path_buf(),
                source,
            })?
            .filter_map(|e| {
                let e = e.ok()?;
                let path = e.path();
                if path.extension()? != "capture" {
                    return None;
                }
                let meta = e.metadata().ok().filter(fs::Metadata::is_file)?;
                Some((path, meta.len()))
            })
            .collect();
        // Names start with the time taken: name order is age order.
        files.sort();
        let mut s = Self {
            dir: dir.to_path_buf(),
            max_bytes,
            files: files.into(),
            removed: Removed::default(),
        };
        s.enforce();
        Ok(s)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes a snapshot just written and removes the oldest until the
    /// budget holds (the newest stays even if it alone is over).
    pub fn added(&mut self, path: PathBuf, bytes: u64) {
        self.files.push_back((path, bytes));
        self.enforce();
    }

    /// A new budget (a reloaded configuration), applied now.
    pub fn set_budget(&mut self, max_bytes: u64) {
        self.max_bytes = max_bytes;
        self.enforce();
    }

    fn enforce(&mut self) {
        while self.files.len() > 1 && self.bytes() > self.max_bytes {
            let Some((path, bytes)) = self.files.pop_front() else {
                break;
            };
            if let Err(e) = fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                log::warn!("cannot remove {}: {e}", path.display());
            }
            self.removed.files += 1;
            self.removed.bytes += bytes;
        }
    }

    fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, b)| b).sum()
    }

    /// For `status`.
    pub fn status(&self) -> SnapshotsStatus {
        SnapshotsStatus {
            dir: self.dir.clone(),
            files: self.files.len(),
            bytes: self.bytes(),
            max_bytes: self.max_bytes,
            removed: self.removed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_go_first_and_the_newest_stays() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("snapshots");
        fs::create_dir(&dir).expect("mkdir");
        // Two from an earlier run: adopted, and over the budget of 1000.
        for (name, n) in [
            ("20260101T000001-a.capture", 600),
            ("20260101T000000-b.capture", 600),
        ] {
            fs::write(dir.join(name), vec![0u8; n]).expect("write");
        }
        let mut s = Snapshots::open(&dir, 1000).expect("open");
        assert!(
            !dir.join("20260101T000000-b.capture").exists(),
            "oldest removed"
        );
        assert_eq!((s.status().files, s.status().removed.files), (1, 1));
        let big = dir.join("20260101T000002-c.capture");
        fs::write(&big, vec![0u8; 1500]).expect("write");
        s.added(big.clone(), 1500);
        assert!(
            big.exists(),
            "the newest is kept even alone over the budget"
        );
        let st = s.status();
        assert_eq!(
            (st.files, st.bytes, st.removed.files, st.removed.bytes),
            (1, 1500, 2, 1200)
        );
    }
}
