//! Builds the eBPF programs (`../tracer-ebpf`, its own workspace) for
//! `bpfel-unknown-none` with the nightly toolchain and `bpf-linker`, following
//! `../shared/TOOLCHAIN.md`, and leaves the object in `OUT_DIR` for
//! `include_bytes!`. Set `TRACER_EBPF_OBJECT` to embed a prebuilt object.

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dest = out_dir.join("tracer.bpf.o");
    println!("cargo:rerun-if-env-changed=TRACER_EBPF_OBJECT");
    if let Some(prebuilt) = env::var_os("TRACER_EBPF_OBJECT") {
        std::fs::copy(&prebuilt, &dest).expect("copy TRACER_EBPF_OBJECT");
        return;
    }
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let ebpf_dir = manifest_dir.join("../tracer-ebpf");
    let common_dir = manifest_dir.join("../tracer-common");
    for dir in [ebpf_dir.join("src"), common_dir.join("src")] {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    for file in ["Cargo.toml", "rust-toolchain.toml"] {
        println!("cargo:rerun-if-changed={}", ebpf_dir.join(file).display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        common_dir.join("Cargo.toml").display()
    );

    let target_dir = out_dir.join("ebpf-target");
    // Cargo sets RUSTC, RUSTFLAGS-derived and toolchain variables for this
    // build script; the nested nightly build must not inherit them.
    let mut cmd = Command::new("cargo");
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy();
        if (key.starts_with("CARGO") || key.starts_with("RUST"))
            && key != "CARGO_HOME"
            && key != "RUSTUP_HOME"
        {
            cmd.env_remove(&*key);
        }
    }
    // scripts/setup installs bpf-linker under the cache; find it there too.
    let tools = env::var_os("EFTRACE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/cache/eftrace".into())
        .join("tools/bin");
    println!("cargo:rerun-if-env-changed=EFTRACE_CACHE");
    if let Some(path) = env::var_os("PATH") {
        let mut dirs: Vec<PathBuf> = env::split_paths(&path).collect();
        if tools.join("bpf-linker").exists() && !dirs.iter().any(|d| d.join("bpf-linker").exists())
        {
            dirs.push(tools);
            cmd.env(
                "PATH",
                env::join_paths(dirs).expect("PATH entries are joinable"),
            );
        }
    }
    cmd.current_dir(&ebpf_dir)
        .args([
            "build",
            "--release",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTFLAGS", "-C debuginfo=2 -C link-arg=--btf");
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo for the eBPF build: {e}"));
    if !status.success() {
        panic!(
            "building the eBPF programs failed ({status}).\n\
             They need the nightly toolchain with rust-src and bpf-linker on PATH, \
             built against that nightly's LLVM: run `sudo scripts/setup` or see \
             ../shared/TOOLCHAIN.md."
        );
    }
    let built: &Path = &target_dir.join("bpfel-unknown-none/release/tracer");
    std::fs::copy(built, &dest).unwrap_or_else(|e| panic!("copy {}: {e}", built.display()));
}
