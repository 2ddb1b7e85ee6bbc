//! The agent's configuration file: parsed and checked, and a valid one
//! turned into recording settings (patterns, presets).
#![no_main]

use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use tracer::agent::config::AgentConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = AgentConfig::parse(text, Path::new("agent.toml")) else {
        return;
    };
    let _ = config.record_config(
        &[PathBuf::from("/usr/bin/true")],
        true,
        &["f".to_string()],
        PathBuf::from("/nonexistent/x.capture"),
    );
    let _ = config.alerts_path();
    let _ = config.recorder.file_bytes();
});
