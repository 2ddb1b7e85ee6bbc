//! `cargo xtask man`: man pages and shell completions of `tracer` and
//! `analyzer`, generated from their command-line definitions (clap_mangen,
//! clap_complete) by the built binaries themselves, and optionally
//! installed.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

/// `cargo xtask man`.
#[derive(Debug, clap::Args)]
pub(crate) struct ManArgs {
    /// Also install them: man pages into PREFIX/share/man/man1, completions
    /// into PREFIX/share/bash-completion/completions, PREFIX/share/zsh/site-functions
    /// and PREFIX/share/fish/vendor_completions.d (needs write access there).
    #[arg(long)]
    install: bool,
    /// Installation prefix.
    #[arg(long, default_value = "/usr/local")]
    prefix: PathBuf,
    /// Where to generate them (default: target/man).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Use a debug build of the binaries (quicker to build; same pages).
    #[arg(long)]
    debug: bool,
}

/// The programs documented.
const PROGRAMS: [&str; 2] = ["tracer", "analyzer"];

/// (shell, directory under `completions/` and under PREFIX/share, file name).
fn completion_files(program: &str) -> [(&'static str, &'static str, String); 3] {
    [
        ("bash", "bash-completion/completions", program.to_string()),
        ("zsh", "zsh/site-functions", format!("_{program}")),
        (
            "fish",
            "fish/vendor_completions.d",
            format!("{program}.fish"),
        ),
    ]
}

fn output_of(cmd: &mut Command) -> anyhow::Result<Vec<u8>> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().with_context(|| format!("starting {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}

/// Copies every file of `from` into `to` (created), mode 0644; the paths
/// written.
fn install_dir(from: &Path, to: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    let mut written = Vec::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(from)
        .with_context(|| format!("listing {}", from.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    entries.sort();
    for file in entries {
        let Some(name) = file.file_name() else {
            continue;
        };
        let dest = to.join(name);
        fs::copy(&file, &dest)
            .with_context(|| format!("copying {} to {}", file.display(), dest.display()))?;
        fs::set_permissions(&dest, fs::Permissions::from_mode(0o644))?;
        written.push(dest);
    }
    Ok(written)
}

pub(crate) fn run(args: ManArgs) -> anyhow::Result<()> {
    let tracer = crate::build_tracer(!args.debug)?;
    let bin_dir = tracer
        .parent()
        .context("the tracer binary has a directory")?
        .to_path_buf();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| crate::target_dir().join("man"));
    let man1 = out.join("man1");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&man1).with_context(|| format!("creating {}", man1.display()))?;
    for program in PROGRAMS {
        let bin = bin_dir.join(program);
        crate::run(Command::new(&bin).arg("manpages").arg(&man1))?;
        for (shell, dir, file) in completion_files(program) {
            let script = output_of(Command::new(&bin).args(["completions", shell]))?;
            let dir = out.join("completions").join(dir);
            fs::create_dir_all(&dir)?;
            fs::write(dir.join(&file), script)?;
        }
    }
    let pages = fs::read_dir(&man1)?.count();
    println!(
        "{pages} man pages in {} and completions for bash, zsh and fish in {}",
        man1.display(),
        out.join("completions").display()
    );
    if !args.install {
        println!(
            "read one: man -l {}   install: cargo xtask man --install [--prefix /usr/local]",
            man1.join("tracer-record.1").display()
        );
        return Ok(());
    }
    let share = args.prefix.join("share");
    let mut written = install_dir(&man1, &share.join("man/man1"))?;
    for program in PROGRAMS {
        for (_, dir, _) in completion_files(program) {
            written.extend(install_dir(
                &out.join("completions").join(dir),
                &share.join(dir),
            )?);
        }
    }
    written.sort();
    written.dedup();
    // Refresh the man index where there is one (man finds pages without it).
    if Command::new("mandb")
        .args(["-q"])
        .arg(share.join("man"))
        .status()
        .is_err()
    {
        println!("(no mandb: the man index was not refreshed; `man` finds the pages anyway)");
    }
    println!(
        "installed {} files under {}: try `man tracer-record`; completions load in new shells",
        written.len(),
        share.display()
    );
    Ok(())
}
