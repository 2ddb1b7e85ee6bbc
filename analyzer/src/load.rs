//! Reading learned models and trained thresholds back from their JSON
//! files, checking their format version: the CLI and the agent load them
//! the same way.

use std::path::{Path, PathBuf};

use crate::{
    model::{GlobalModel, MODEL_VERSION},
    peers::{THRESHOLDS_VERSION, Thresholds},
};

/// Errors loading a model or thresholds file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// It is not JSON of the expected kind.
    #[error("{path} is not {what}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What it should be.
        what: &'static str,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// It was written by another format version.
    #[error(
        "{path} has format version {found:?}, this build reads {wanted}; learn or train it again"
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: Option<u64>,
        /// Ours.
        wanted: u32,
    },
}

fn read(path: &Path, what: &'static str, wanted: u32) -> Result<String, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let found = serde_json::from_str::<serde_json::Value>(&text)
        .map_err(|source| LoadError::Parse {
            path: path.to_path_buf(),
            what,
            source,
        })?
        .get("version")
        .and_then(serde_json::Value::as_u64);
    if found != Some(u64::from(wanted)) {
        return Err(LoadError::Version {
            path: path.to_path_buf(),
            found,
            wanted,
        });
    }
    Ok(text)
}

/// Reads a model written by `analyzer model learn`, ready for scoring.
pub fn model(path: &Path) -> Result<GlobalModel, LoadError> {
    let text = read(path, "a model", MODEL_VERSION)?;
    let mut model: GlobalModel =
        serde_json::from_str(&text).map_err(|source| LoadError::Parse {
            path: path.to_path_buf(),
            what: "a model",
            source,
        })?;
    for g in &mut model.groups {
        for t in [
            &mut g.initializer,
            &mut g.finalizer,
            &mut g.pre_process,
            &mut g.post_process,
        ] {
            t.prepare();
        }
        for t in g.handlers.values_mut() {
            t.prepare();
        }
    }
    Ok(model)
}

/// Reads thresholds written by `analyzer peers train`.
pub fn thresholds(path: &Path) -> Result<Thresholds, LoadError> {
    let text = read(path, "a thresholds file", THRESHOLDS_VERSION)?;
    serde_json::from_str(&text).map_err(|source| LoadError::Parse {
        path: path.to_path_buf(),
        what: "a thresholds file",
        source,
    })
}
