//! Test support (feature `test-support`, for the workspace's tests only):
//! an ELF program as a distribution ships it, stripped, beside its separate
//! debug file, for the tests of symbols, debug files and source lines.

use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
    process::Command,
};

use crate::debugfile;

/// A program with debug information, its stripped copy and its debug file.
#[derive(Clone, Debug)]
pub struct Program {
    /// As linked, with DWARF and symbol table.
    pub full: PathBuf,
    /// `strip --strip-all` of `full`.
    pub stripped: PathBuf,
    /// `objcopy --only-keep-debug` of `full`.
    pub debug: PathBuf,
    /// GNU build id, hex.
    pub build_id: String,
}

/// Runs a build tool; `None` (reason printed) when it is not installed, a
/// panic when it fails.
pub fn tool(program: &str, args: &[&OsStr]) -> Option<()> {
    match Command::new(program).args(args).status() {
        Ok(s) if s.success() => Some(()),
        Ok(s) => panic!("{program} {args:?} failed: {s}"),
        Err(e) => {
            eprintln!("skipped: {program} is not runnable ({e}); apt-get install gcc binutils");
            None
        }
    }
}

/// The GNU build id of `file`, from `readelf -n`; `None` when it has none
/// or readelf is not installed.
pub fn build_id(file: &Path) -> Option<String> {
    let out = Command::new("readelf").arg("-n").arg(file).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
}

impl Program {
    /// Compiles C `source` (written to `dir/app.c`, the name the DWARF
    /// gives) with `gcc -g` and `opt` (`-O0`, `-O2`...), then [`split`]s
    /// it as `dir/app`. `None` when gcc or binutils are not installed.
    ///
    /// [`split`]: Program::split
    pub fn build(dir: &Path, source: &str, opt: &str) -> Option<Self> {
        let src = dir.join("app.c");
        std::fs::write(&src, source).expect("write the source");
        let full = dir.join("app.full");
        tool(
            "gcc",
            &[
                opt.as_ref(),
                "-g".as_ref(),
                "-o".as_ref(),
                full.as_os_str(),
                src.as_os_str(),
            ],
        )?;
        Self::split(&full, dir, "app")
    }

    /// Splits the linked program `full` as packagers do: its debug file
    /// `dir/NAME.debug` and its stripped copy `dir/NAME`. `None` when
    /// binutils are not installed.
    pub fn split(full: &Path, dir: &Path, name: &str) -> Option<Self> {
        let stripped = dir.join(name);
        let debug = dir.join(format!("{name}.debug"));
        tool(
            "objcopy",
            &[
                "--only-keep-debug".as_ref(),
                full.as_os_str(),
                debug.as_os_str(),
            ],
        )?;
        tool(
            "strip",
            &[
                "--strip-all".as_ref(),
                "-o".as_ref(),
                stripped.as_os_str(),
                full.as_os_str(),
            ],
        )?;
        let build_id = build_id(full).expect("gcc links with --build-id");
        Some(Self {
            full: full.to_path_buf(),
            stripped,
            debug,
            build_id,
        })
    }

    /// Copies the debug file under debug directory `root`, where a lookup
    /// by build id finds it; returns its path there.
    pub fn install_debug(&self, root: &Path) -> PathBuf {
        let installed = debugfile::build_id_path(root, &self.build_id).expect("hex build id");
        std::fs::create_dir_all(installed.parent().expect("parent")).expect("mkdir");
        std::fs::copy(&self.debug, &installed).expect("install the debug file");
        installed
    }
}
