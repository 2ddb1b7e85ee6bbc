//! Alerts: one JSON object per line, appended to a file (mode 0600) and
//! printed on standard error, which systemd puts in the journal with a
//! warning priority.

use std::{
    fs::{File, OpenOptions},
    io::Write as _,
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

use serde::Serialize;

/// Version of the alert format.
pub const ALERT_VERSION: u32 = 1;

/// One alert.
#[derive(Clone, Debug, Serialize)]
pub struct Alert {
    /// [`ALERT_VERSION`].
    pub version: u32,
    /// When, UTC wall clock (RFC 3339).
    pub at: String,
    /// The host.
    pub host: String,
    /// `unit` (a suspect execution unit), `process` (a process the model
    /// has no group for), `server` (a faulty peer) or `shed` (load was shed).
    pub kind: String,
    /// One line for people.
    pub summary: String,
    /// The snapshot frozen for it, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<PathBuf>,
    /// The evidence (a unit's score, a server's distances, a shed step).
    pub detail: serde_json::Value,
}

/// Where alerts go.
#[derive(Debug)]
pub struct AlertLog {
    path: PathBuf,
    file: Option<File>,
    journal: bool,
    /// Alerts raised.
    pub count: u64,
}

impl AlertLog {
    /// Appends to `path` (created on the first alert).
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            file: None,
            // systemd sets JOURNAL_STREAM when stderr is the journal; then a
            // `<4>` prefix gives the line warning priority.
            journal: std::env::var_os("JOURNAL_STREAM").is_some(),
            count: 0,
        }
    }

    /// Writes `alert` to the file and standard error.
    pub fn raise(&mut self, alert: &Alert) {
        self.count += 1;
        let line = serde_json::to_string(alert).unwrap_or_default();
        if self.file.is_none() {
            if let Some(dir) = self.path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            // Not through a symbolic link planted at the path.
            match OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&self.path)
            {
                Ok(f) => self.file = Some(f),
                Err(e) => log::warn!("cannot open the alert file {}: {e}", self.path.display()),
            }
        }
        if let Some(f) = &mut self.file
            && let Err(e) = writeln!(f, "{line}")
        {
            log::warn!("cannot write the alert file {}: {e}", self.path.display());
        }
        let prefix = if self.journal { "<4>" } else { "" };
        eprintln!(
            "{prefix}tracer agent: ALERT {}: {}",
            alert.kind, alert.summary
        );
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Now as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alerts_are_json_lines_in_a_private_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("sub/alerts.jsonl");
        let mut log = AlertLog::new(&path);
        for i in 0..2 {
            log.raise(&Alert {
                version: ALERT_VERSION,
                at: now_rfc3339(),
                host: "h".into(),
                kind: "unit".into(),
                summary: format!("alert {i}"),
                snapshot: None,
                detail: serde_json::json!({"score": 1.0}),
            });
        }
        let text = std::fs::read_to_string(&path).expect("alerts written");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["summary"], "alert 1");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
