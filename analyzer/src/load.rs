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
        "{path} {}, this build reads version {wanted}; learn or train it again",
        .found.map_or("has no format version".to_string(), |v| format!("has format version {v}"))
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

/// The file's bytes once they parse as JSON with version `wanted`. Bytes,
/// not text: a capture given by mistake is "not a model", not bad UTF-8.
fn read(path: &Path, what: &'static str, wanted: u32) -> Result<Vec<u8>, LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let found = serde_json::from_slice::<serde_json::Value>(&bytes)
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
    Ok(bytes)
}

/// Reads a model written by `analyzer model learn`, ready for scoring.
pub fn model(path: &Path) -> Result<GlobalModel, LoadError> {
    let bytes = read(path, "a model", MODEL_VERSION)?;
    let mut model: GlobalModel =
        serde_json::from_slice(&bytes).map_err(|source| LoadError::Parse {
            path: path.to_path_buf(),
            what: "a model",
            source,
        })?;
    for g in &mut model.groups {
        for t in g.all_trees_mut() {
            t.prepare();
        }
    }
    Ok(model)
}

/// Reads thresholds written by `analyzer peers train`.
pub fn thresholds(path: &Path) -> Result<Thresholds, LoadError> {
    let bytes = read(path, "a thresholds file", THRESHOLDS_VERSION)?;
    serde_json::from_slice(&bytes).map_err(|source| LoadError::Parse {
        path: path.to_path_buf(),
        what: "a thresholds file",
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Variant;

    /// Each mistake a user makes with `--model` gets its own message naming
    /// the file; a model written by `model learn` loads.
    #[test]
    fn models_load_and_mistakes_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = |name: &str| dir.path().join(name);

        let good = path("model.json");
        let written = serde_json::to_vec(&GlobalModel::new(Variant::Paper001)).expect("json");
        std::fs::write(&good, written).expect("write");
        assert_eq!(model(&good).expect("loads").variant, Variant::Paper001);

        let missing = path("missing.json");
        let e = model(&missing).expect_err("missing");
        assert!(matches!(e, LoadError::Read { .. }), "{e:?}");
        assert_eq!(e.to_string(), format!("reading {}", missing.display()));

        // A capture file (binary) given where the model belongs.
        let binary = path("run.capture");
        std::fs::write(&binary, b"EFTRACE\0\xff\xfe\x01").expect("write");
        let e = model(&binary).expect_err("binary");
        assert_eq!(
            e.to_string(),
            format!("{} is not a model", binary.display())
        );

        let old = path("old.json");
        std::fs::write(&old, br#"{"version": 1, "groups": []}"#).expect("write");
        let e = model(&old).expect_err("old");
        assert!(
            e.to_string().contains(&format!(
                "has format version 1, this build reads version {MODEL_VERSION}"
            )) && e.to_string().contains("learn or train it again"),
            "{e}"
        );

        let e = thresholds(&good).expect_err("a model is not thresholds");
        assert!(
            matches!(e, LoadError::Version { .. } | LoadError::Parse { .. }),
            "{e:?}"
        );
    }
}
