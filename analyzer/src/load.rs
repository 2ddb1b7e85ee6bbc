//! Reading learned models and trained thresholds back from their JSON
//! files, checking their format version: the CLI and the agent load them
//! the same way.

use std::path::{Path, PathBuf};

use crate::{
    model::{GlobalModel, MODEL_VERSION, OLDEST_MODEL_VERSION},
    mpi,
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
    /// It parses, but holds what analysis cannot use (a parent index out
    /// of range or a cycle, a NaN, impossible parameters).
    #[error("{path} is not a valid {what}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What it should be.
        what: &'static str,
        /// What is wrong.
        why: String,
    },
    /// It was written by another format version.
    #[error(
        "{path} {}, this build reads {}; learn or train it again",
        .found.map_or("has no format version".to_string(), |v| format!("has format version {v}")),
        if .oldest == .wanted { format!("version {wanted}") } else { format!("versions {oldest} to {wanted}") }
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: Option<u64>,
        /// The oldest version read.
        oldest: u32,
        /// Ours.
        wanted: u32,
    },
}

fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Checks that `bytes` parse as JSON with version `wanted`. Bytes, not
/// text: a capture given by mistake is "not a model", not bad UTF-8.
fn check_version(
    bytes: &[u8],
    path: &Path,
    what: &'static str,
    oldest: u32,
    wanted: u32,
) -> Result<(), LoadError> {
    let found = serde_json::from_slice::<serde_json::Value>(bytes)
        .map_err(|source| LoadError::Parse {
            path: path.to_path_buf(),
            what,
            source,
        })?
        .get("version")
        .and_then(serde_json::Value::as_u64);
    if !found.is_some_and(|v| (u64::from(oldest)..=u64::from(wanted)).contains(&v)) {
        return Err(LoadError::Version {
            path: path.to_path_buf(),
            found,
            oldest,
            wanted,
        });
    }
    Ok(())
}

/// Reads a model written by `analyzer model learn`, checked and ready for
/// scoring.
pub fn model(path: &Path) -> Result<GlobalModel, LoadError> {
    model_from_slice(&read(path)?, path)
}

/// [`model`] from the file's bytes (`path` names it in errors): the live
/// analysis process gets them from the agent, not from the file.
pub fn model_from_slice(bytes: &[u8], path: &Path) -> Result<GlobalModel, LoadError> {
    const WHAT: &str = "model";
    check_version(bytes, path, "a model", OLDEST_MODEL_VERSION, MODEL_VERSION)?;
    let mut model: GlobalModel =
        serde_json::from_slice(bytes).map_err(|source| LoadError::Parse {
            path: path.to_path_buf(),
            what: "a model",
            source,
        })?;
    model.validate().map_err(|e| LoadError::Invalid {
        path: path.to_path_buf(),
        what: WHAT,
        why: e.to_string(),
    })?;
    for g in &mut model.groups {
        for t in g.all_trees_mut() {
            t.prepare();
        }
    }
    Ok(model)
}

/// Reads an MPI interference model written by `analyzer mpi learn`,
/// checked.
pub fn mpi_model(path: &Path) -> Result<mpi::Model, LoadError> {
    mpi_model_from_slice(&read(path)?, path)
}

/// [`mpi_model`] from the file's bytes (`path` names it in errors).
pub fn mpi_model_from_slice(bytes: &[u8], path: &Path) -> Result<mpi::Model, LoadError> {
    const WHAT: &str = "an MPI model";
    check_version(bytes, path, WHAT, mpi::MODEL_VERSION, mpi::MODEL_VERSION)?;
    let model: mpi::Model = serde_json::from_slice(bytes).map_err(|source| LoadError::Parse {
        path: path.to_path_buf(),
        what: WHAT,
        source,
    })?;
    model.validate().map_err(|why| LoadError::Invalid {
        path: path.to_path_buf(),
        what: "MPI model",
        why,
    })?;
    Ok(model)
}

/// Reads thresholds written by `analyzer peers train`, checked.
pub fn thresholds(path: &Path) -> Result<Thresholds, LoadError> {
    thresholds_from_slice(&read(path)?, path)
}

/// [`thresholds`] from the file's bytes (`path` names it in errors).
pub fn thresholds_from_slice(bytes: &[u8], path: &Path) -> Result<Thresholds, LoadError> {
    const WHAT: &str = "thresholds file";
    check_version(
        bytes,
        path,
        "a thresholds file",
        THRESHOLDS_VERSION,
        THRESHOLDS_VERSION,
    )?;
    let t: Thresholds = serde_json::from_slice(bytes).map_err(|source| LoadError::Parse {
        path: path.to_path_buf(),
        what: "a thresholds file",
        source,
    })?;
    let invalid = |why: String| LoadError::Invalid {
        path: path.to_path_buf(),
        what: WHAT,
        why,
    };
    t.config.validate().map_err(|e| invalid(e.to_string()))?;
    for (metric, servers) in &t.metrics {
        for (server, th) in servers {
            for (field, v) in [
                ("threshold", th.threshold),
                ("minimal", th.minimal),
                ("max_score", th.max_score),
            ] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(invalid(format!(
                        "{metric:?} of server '{server}': {field} is {v}"
                    )));
                }
            }
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Variant;

    /// An MPI model written by `mpi learn` (two clean runs of a halo
    /// exchange) loads; one edited to hold what detection cannot use is
    /// refused with what is wrong, before it reaches detection.
    #[test]
    fn mpi_models_are_checked_when_loaded() {
        let seed: &[u8] = include_bytes!("../../fuzz/seeds/mpi_model_load/halo-2clean.json");
        let path = Path::new("m.json");
        let model = mpi_model_from_slice(seed, path).expect("a learned model loads");
        assert!(!model.processors.is_empty());
        let broken = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut v: serde_json::Value = serde_json::from_slice(seed).expect("json");
            edit(&mut v);
            let bytes = serde_json::to_vec(&v).expect("json");
            match mpi_model_from_slice(&bytes, path) {
                Err(LoadError::Invalid { why, .. }) => why,
                other => panic!("not refused as invalid: {other:?}"),
            }
        };
        let why = broken(&|v| v["k"] = serde_json::json!(-1.0));
        assert!(why.contains("K is -1"), "{why}");
        let why = broken(&|v| v["processors"][0]["threshold"] = serde_json::json!(-0.5));
        assert!(why.contains("threshold is -0.5"), "{why}");
        let why = broken(&|v| {
            v["processors"][0]["sequences"][0]["sequence"]["functions"] = serde_json::json!([])
        });
        assert!(why.contains("a typical sequence of 0 calls"), "{why}");
        let why = broken(&|v| {
            let first = v["processors"][0].clone();
            v["processors"].as_array_mut().expect("list").push(first);
        });
        assert!(why.contains("listed twice"), "{why}");
    }

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
                "has format version 1, this build reads versions {OLDEST_MODEL_VERSION} to {MODEL_VERSION}"
            )) && e.to_string().contains("learn or train it again"),
            "{e}"
        );

        let e = thresholds(&good).expect_err("a model is not thresholds");
        assert!(
            matches!(e, LoadError::Version { .. } | LoadError::Parse { .. }),
            "{e:?}"
        );
    }

    /// A model with one handler tree `a > b`, as JSON.
    fn model_json() -> serde_json::Value {
        use crate::model::{CallTreeModel, GroupModel, ModelNode};
        let mut tree = CallTreeModel::default();
        (tree.models, tree.units) = (1, 1);
        for (parent, callee) in [(None, "a"), (Some(0), "b")] {
            tree.nodes.push(ModelNode {
                parent,
                site: String::new(),
                callee: callee.into(),
                p_sum: 1.0,
                models: 1,
            });
        }
        let mut model = GlobalModel::new(Variant::Paper000);
        model.groups.push(GroupModel {
            signature: vec!["main".into()],
            processes: 1,
            handlers: [("conn".to_string(), tree)].into_iter().collect(),
            ..GroupModel::default()
        });
        serde_json::to_value(&model).expect("json")
    }

    /// Issue 15, item 3: a parent index out of range, a parent cycle and a
    /// node given twice are refused when the model loads, with the tree and
    /// node named (they panicked in `model score` and `learn --merge`, or
    /// looped forever in path_string).
    #[test]
    fn issue_15_models_with_bad_parents_are_refused_by_name() {
        let path = Path::new("m.json");
        let load =
            |v: &serde_json::Value| model_from_slice(&serde_json::to_vec(v).expect("json"), path);
        let good = model_json();
        load(&good).expect("the model as learned loads");
        let node = |v: &mut serde_json::Value, i: usize| -> serde_json::Value {
            v["groups"][0]["handlers"]["conn"]["nodes"][i].take()
        };
        type Corrupt = fn(&mut serde_json::Value);
        let cases: [(&str, Corrupt); 4] = [
            ("node 1's parent 99999 does not come before it", |v| {
                v["groups"][0]["handlers"]["conn"]["nodes"][1]["parent"] = 99999.into();
            }),
            ("node 0's parent 1 does not come before it", |v| {
                v["groups"][0]["handlers"]["conn"]["nodes"][0]["parent"] = 1.into();
            }),
            ("node 1's parent 1 does not come before it", |v| {
                v["groups"][0]["handlers"]["conn"]["nodes"][1]["parent"] = 1.into();
            }),
            ("is there twice", |v| {
                v["groups"][0]["handlers"]["conn"]["nodes"][1]["parent"] = serde_json::Value::Null;
                v["groups"][0]["handlers"]["conn"]["nodes"][1]["callee"] = "a".into();
            }),
        ];
        for (needle, corrupt) in cases {
            let mut v = good.clone();
            corrupt(&mut v);
            let e = load(&v).expect_err(needle);
            assert!(matches!(e, LoadError::Invalid { .. }), "{e:?}");
            let text = e.to_string();
            assert!(
                text.starts_with("m.json is not a valid model: group 0, handler tree 'conn': ")
                    && text.contains(needle),
                "{text}"
            );
        }
        let mut v = good.clone();
        let _ = node(&mut v, 0);
        assert!(load(&v).is_err(), "a node that is not a node");
    }

    /// Thresholds whose parameters would size memory beyond reason (1 ns
    /// bins, k in the billions) or whose values are negative are refused.
    #[test]
    fn thresholds_with_impossible_parameters_are_refused() {
        use crate::peers::{PeersConfig, Thresholds};
        let path = Path::new("t.json");
        let t = Thresholds {
            version: THRESHOLDS_VERSION,
            config: PeersConfig::default(),
            metrics: Default::default(),
            runs: Vec::new(),
        };
        let good = serde_json::to_value(&t).expect("json");
        let load = |v: &serde_json::Value| {
            thresholds_from_slice(&serde_json::to_vec(v).expect("json"), path)
        };
        load(&good).expect("defaults load");
        for (field, value, needle) in [
            ("shift_ns", serde_json::json!(1), "whole milliseconds"),
            (
                "k",
                serde_json::json!(4_000_000_000u64),
                "k must be at most 1000",
            ),
            ("k", serde_json::json!(0), "k must be at least 1"),
            ("min_calls", serde_json::json!(-1.0), "min_calls"),
        ] {
            let mut v = good.clone();
            v["config"][field] = value;
            let e = load(&v).expect_err(field);
            assert!(
                matches!(e, LoadError::Invalid { .. }) && e.to_string().contains(needle),
                "{field}: {e}"
            );
        }
    }
}
