//! Which functions to probe: `[OBJECT:]GLOB` patterns resolved against the
//! ELF symbol tables of a target's executable and shared objects.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use globset::{Glob, GlobMatcher};
use tracer_common::capture::{EntryClass, Probe};

use crate::{
    elf::{ElfCache, ElfError, file_offset},
    procfs::{self, ProcError},
};

/// Errors resolving patterns.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A pattern is not a valid glob.
    #[error("invalid function pattern '{pattern}'")]
    BadPattern {
        /// The pattern.
        pattern: String,
        /// The cause.
        #[source]
        source: globset::Error,
    },
    /// No object of the target matches a pattern's object part.
    #[error(
        "pattern '{pattern}': no object named '{object}' is loaded by the target (objects: {available}) or known to the loader cache (ldconfig -p)"
    )]
    NoObject {
        /// The pattern.
        pattern: String,
        /// Its object part.
        object: String,
        /// The objects that were searched.
        available: String,
    },
    /// A pattern matched no function.
    #[error("pattern '{pattern}' matches no function in {objects}{hint}")]
    NoMatch {
        /// The pattern.
        pattern: String,
        /// The objects searched.
        objects: String,
        /// Advice, e.g. about stripped binaries.
        hint: String,
    },
    /// An object could not be read.
    #[error(transparent)]
    Elf(#[from] ElfError),
    /// A process could not be inspected.
    #[error(transparent)]
    Proc(#[from] ProcError),
    /// A function's address is outside every loadable segment.
    #[error("{symbol} in {object} is at {vaddr:#x}, outside every loadable segment")]
    NoSegment {
        /// The object.
        object: String,
        /// The symbol.
        symbol: String,
        /// Its address.
        vaddr: u64,
    },
}

/// A parsed `[OBJECT:]GLOB` pattern.
#[derive(Debug, Clone)]
pub struct FunctionPattern {
    raw: String,
    object: Option<String>,
    object_glob: Option<GlobMatcher>,
    function: GlobMatcher,
    /// Record the argument registers of matching functions.
    pub args: bool,
    /// Probe only the entries of matching functions (no return probe).
    pub entry_only: bool,
    /// Resolve to nothing, instead of an error, when no object or function
    /// matches (a preset's part for libraries a system may lack).
    pub optional: bool,
}

impl FunctionPattern {
    /// Parses `pattern`; with `args`, entry records carry the argument registers.
    pub fn parse(pattern: &str, args: bool) -> Result<Self, TargetError> {
        let bad = |source| TargetError::BadPattern {
            pattern: pattern.to_string(),
            source,
        };
        let (object, function) = match pattern.rsplit_once(':') {
            Some((o, f)) if !o.is_empty() => (Some(o.to_string()), f),
            _ => (None, pattern),
        };
        let function = Glob::new(function).map_err(bad)?.compile_matcher();
        let object_glob = object
            .as_deref()
            .map(Glob::new)
            .transpose()
            .map_err(bad)?
            .map(|g| g.compile_matcher());
        Ok(Self {
            raw: pattern.to_string(),
            object,
            object_glob,
            function,
            args,
            entry_only: false,
            optional: false,
        })
    }

    /// Parses `pattern` for entry-only probes.
    pub fn parse_entries(pattern: &str) -> Result<Self, TargetError> {
        Ok(Self {
            entry_only: true,
            ..Self::parse(pattern, false)?
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// Whether this pattern applies to object `path` (`main` is the target's executable).
    fn applies_to(&self, path: &Path, main: bool) -> bool {
        let Some(object) = &self.object else {
            return main;
        };
        if path.as_os_str() == object.as_str() {
            return true;
        }
        let Some(base) = path.file_name().and_then(|n| n.to_str()) else {
            return false;
        };
        // "libc" matches libc.so.6, "libmpich.so.12" matches itself.
        base == object
            || base
                .strip_prefix(object.as_str())
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('-'))
            || self.object_glob.as_ref().is_some_and(|g| g.is_match(base))
    }
}

/// The objects of a target: its executable first, then its shared objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetObjects {
    /// The executable.
    pub exe: PathBuf,
    /// Shared objects, in load order, without the executable.
    pub libs: Vec<PathBuf>,
}

impl TargetObjects {
    /// Objects mapped executable in running process `pid`.
    pub fn of_pid(pid: u32) -> Result<Self, TargetError> {
        let exe = procfs::exe(pid)?;
        let mut libs = Vec::new();
        for map in procfs::exec_maps(pid)? {
            let path = PathBuf::from(&map.path);
            if map.path.starts_with('/') && path != exe && !libs.contains(&path) {
                libs.push(path);
            }
        }
        Ok(Self { exe, libs })
    }

    /// Objects of an executable that is not running yet: the executable and
    /// what the dynamic loader would load for it (`ldd`).
    pub fn of_executable(exe: &Path) -> Self {
        let libs = Command::new("ldd")
            .arg(exe)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| parse_ldd(&String::from_utf8_lossy(&out.stdout)))
            .unwrap_or_default();
        Self {
            exe: exe.to_path_buf(),
            libs,
        }
    }

    fn all(&self) -> impl Iterator<Item = (&Path, bool)> {
        std::iter::once((self.exe.as_path(), true))
            .chain(self.libs.iter().map(|l| (l.as_path(), false)))
    }
}

fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.trim(),
                None => line,
            };
            let path = path.split(" (").next()?.trim();
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// The `--mpi` preset: the `MPI_*` functions of the MPI library, with their
/// argument registers (peers, roots, ops). MPICH ABI (MPICH, Intel MPI, Cray)
/// and Open MPI sonames. Language bindings (`libmpichfort`, Open MPI's
/// `mpif.h`/`use mpi`/`use mpi_f08` libraries) are not probed: the C calls
/// they make carry the top of the stack, where their call site is.
pub const MPI_PATTERN: &str = "{libmpich.so.12*,libmpi.so.12*,libmpi.so.40*}:MPI_*";

/// Libraries known to the dynamic loader's cache (`ldconfig -p`) that
/// `pattern`'s object part names, resolved to their files. Lets a pattern name
/// a library the target itself does not load yet: `mpiexec` never loads
/// `libmpich.so.12`, the ranks it starts do, and uprobes on the library's
/// file see every process that maps it later.
fn system_libraries(pattern: &FunctionPattern) -> Vec<PathBuf> {
    if pattern.object.is_none() {
        return Vec::new();
    }
    let Ok(out) = Command::new("ldconfig").arg("-p").output() else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "\tlibmpich.so.12 (libc6,x86-64) => /lib/x86_64-linux-gnu/libmpich.so.12"
        let Some((name, path)) = line.trim().split_once(" => ") else {
            continue;
        };
        if !name.contains("x86-64") {
            continue;
        }
        let path = Path::new(path);
        if !pattern.applies_to(path, false) {
            continue;
        }
        if let Ok(real) = path.canonicalize()
            && !found.contains(&real)
        {
            found.push(real);
        }
    }
    found
}

/// What one pattern resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Functions matched.
    pub functions: usize,
    /// Objects searched.
    pub objects: Vec<PathBuf>,
    /// The objects came from the loader's cache, not from the target.
    pub from_system: bool,
}

/// Resolves `patterns` against `objects`, appending new probes to `probes`
/// (a function already there is not added twice; its id stays). A pattern
/// whose object the target does not load falls back to the system's
/// libraries of that name.
pub fn resolve(
    patterns: &[FunctionPattern],
    objects: &TargetObjects,
    probes: &mut Vec<Probe>,
    cache: &mut ElfCache,
) -> Result<Vec<Resolved>, TargetError> {
    let mut counts = Vec::with_capacity(patterns.len());
    for pattern in patterns {
        let mut targets: Vec<PathBuf> = objects
            .all()
            .filter(|(p, main)| pattern.applies_to(p, *main))
            .map(|(p, _)| p.to_path_buf())
            .collect();
        let from_system = targets.is_empty();
        if from_system {
            targets = system_libraries(pattern);
        }
        if targets.is_empty() && pattern.optional {
            counts.push(Resolved {
                functions: 0,
                objects: Vec::new(),
                from_system,
            });
            continue;
        }
        if targets.is_empty() {
            let available = objects
                .all()
                .map(|(p, _)| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(TargetError::NoObject {
                pattern: pattern.raw.clone(),
                object: pattern.object.clone().unwrap_or_default(),
                available,
            });
        }
        let mut matched = 0;
        let mut stripped = Vec::new();
        for path in &targets {
            let first_new = probes.len();
            let elf = cache.get(path)?;
            if !elf.has_symtab {
                stripped.push(path.display().to_string());
            }
            // Group names by address: aliases (MPI_Send/PMPI_Send) are one function.
            let mut by_addr: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
            for sym in &elf.names {
                by_addr.entry(sym.addr).or_default().push(&sym.name);
            }
            for (vaddr, names) in by_addr {
                let Some(name) = names.iter().find(|n| pattern.function.is_match(n)) else {
                    continue;
                };
                matched += 1;
                let object = path.display().to_string();
                if let Some(existing) = probes
                    .iter_mut()
                    .find(|p| p.object == object && p.vaddr == vaddr)
                {
                    existing.args |= pattern.args;
                    existing.entry_only &= pattern.entry_only;
                    continue;
                }
                let file_offset = file_offset(&elf.table.segments, vaddr).ok_or_else(|| {
                    TargetError::NoSegment {
                        object: object.clone(),
                        symbol: name.to_string(),
                        vaddr,
                    }
                })?;
                probes.push(Probe {
                    func_id: probes.len() as u32,
                    object,
                    symbol: name.to_string(),
                    aliases: names
                        .iter()
                        .filter(|n| *n != name)
                        .map(|n| n.to_string())
                        .collect(),
                    vaddr,
                    file_offset,
                    args: pattern.args,
                    entry_only: pattern.entry_only,
                    entry_class: EntryClass::Stepped,
                });
            }
            // Where each new probe goes and what the kernel does with the
            // instruction there (its cost): past a CET `endbr64`, which the
            // kernel would single-step on every call; a few bytes at each,
            // with one open file per object.
            let offsets: Vec<u64> = probes[first_new..].iter().map(|p| p.file_offset).collect();
            for (probe, (past, class)) in probes[first_new..]
                .iter_mut()
                .zip(crate::overhead::entry_sites_in(path, &offsets))
            {
                probe.file_offset += past;
                probe.entry_class = class;
            }
        }
        if matched == 0 && pattern.optional {
            counts.push(Resolved {
                functions: 0,
                objects: targets,
                from_system,
            });
            continue;
        }
        if matched == 0 {
            let hint = if stripped.is_empty() {
                String::new()
            } else {
                let dirs: Vec<String> = cache
                    .debug_dirs()
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect();
                format!(
                    "; {} has no .symtab (stripped) and no separate debug file was found \
                     (by build id under {}, or by .gnu_debuglink): only exported functions \
                     can be named. Install its debug symbols (the -dbg or -dbgsym package), \
                     point --debug-dir at a directory holding them, or rebuild without stripping",
                    stripped.join(", "),
                    dirs.join(", ")
                )
            };
            let objects = targets
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(TargetError::NoMatch {
                pattern: pattern.raw.clone(),
                objects,
                hint,
            });
        }
        counts.push(Resolved {
            functions: matched,
            objects: targets,
            from_system,
        });
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_part_matches_by_basename() {
        let p = FunctionPattern::parse("libc:malloc", false).expect("valid");
        assert!(p.applies_to(Path::new("/lib/x86_64-linux-gnu/libc.so.6"), false));
        assert!(!p.applies_to(Path::new("/lib/x86_64-linux-gnu/libcrypt.so.1"), false));
        let p = FunctionPattern::parse("libmpich.so.12:MPI_*", false).expect("valid");
        assert!(p.applies_to(Path::new("/usr/lib/x86_64-linux-gnu/libmpich.so.12"), false));
        let p = FunctionPattern::parse("handle_*", false).expect("valid");
        assert!(p.applies_to(Path::new("/usr/bin/x"), true));
        assert!(!p.applies_to(Path::new("/lib/libc.so.6"), false));
    }

    #[test]
    fn parses_ldd_output() {
        let text = "\tlinux-vdso.so.1 (0x00007ffc)\n\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(text),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libm.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    #[test]
    fn resolves_own_functions_and_reports_misses() {
        let exe = std::env::current_exe().expect("exe");
        let objects = TargetObjects {
            exe: exe.clone(),
            libs: vec![],
        };
        let mut probes = Vec::new();
        let mut cache = ElfCache::new(&[]);
        let pats = [FunctionPattern::parse("main", true).expect("valid")];
        let counts = resolve(&pats, &objects, &mut probes, &mut cache).expect("main resolves");
        assert_eq!(counts[0].functions, 1);
        assert!(!counts[0].from_system);
        assert_eq!(probes[0].symbol, "main");
        assert!(probes[0].args);
        // Resolving again adds nothing.
        resolve(&pats, &objects, &mut probes, &mut cache).expect("again");
        assert_eq!(probes.len(), 1);
        let none = [FunctionPattern::parse("no_such_function_*", false).expect("valid")];
        assert!(matches!(
            resolve(&none, &objects, &mut probes, &mut cache),
            Err(TargetError::NoMatch { .. })
        ));
        let nolib = [FunctionPattern::parse("libnothere:f", false).expect("valid")];
        assert!(matches!(
            resolve(&nolib, &objects, &mut probes, &mut cache),
            Err(TargetError::NoObject { .. })
        ));
    }
}
