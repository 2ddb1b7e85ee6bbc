//! Where the separate debug file of an object is, the way GDB looks for it
//! (<https://sourceware.org/gdb/current/onlinedocs/gdb.html/Separate-Debug-Files.html>):
//!
//! 1. by GNU build id: `DIR/.build-id/xx/yyyyyyyy.debug` under each debug
//!    directory (`xx` the id's first byte in hex, the rest after it);
//! 2. by the object's `.gnu_debuglink` name: beside the object, in a
//!    `.debug/` directory beside it, and under each debug directory by the
//!    object's own directory (`DIR/usr/bin/NAME`); the file's CRC-32 must be
//!    the one the link records.
//!
//! Distributions install debug files this way (Debian's `*-dbg` and
//! `*-dbgsym` packages, Fedora's `debuginfo`). Only paths are made here; the
//! callers, which parse ELF, check that a build-id candidate carries the
//! same build id (the tracer at record time for symbol names, the analyzer
//! at analysis time for DWARF lines). This module stays light: no ELF
//! parsing, so `tracer-common` needs no ELF crate.

use std::{
    fs::File,
    io::{self, Read as _},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

/// Debug directories searched when none are configured.
pub const DEFAULT_DEBUG_DIRS: &[&str] = &["/usr/lib/debug"];

/// Environment variable with more debug directories (`:`-separated),
/// searched before the defaults.
pub const DEBUG_DIRS_ENV: &str = "EFTRACE_DEBUG_DIRS";

/// Longest `.gnu_debuglink` name accepted (a corrupt section must not make
/// paths of arbitrary length).
const MAX_LINK_NAME: usize = 255;

/// An object's `.gnu_debuglink`: the debug file's name and its CRC-32.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebugLink {
    /// File name of the debug file (no directory part).
    pub name: String,
    /// CRC-32 (IEEE, as zlib's) of the whole debug file.
    pub crc: u32,
}

impl DebugLink {
    /// A link whose name is a plain file name of sane length, or `None`
    /// (a name with a `/` or `..` could point anywhere).
    pub fn new(name: &str, crc: u32) -> Option<Self> {
        let valid = !name.is_empty()
            && name.len() <= MAX_LINK_NAME
            && !name.contains('/')
            && name != "."
            && name != ".."
            && !name.contains('\0');
        valid.then(|| Self {
            name: name.to_string(),
            crc,
        })
    }
}

/// The debug directories to search: `extra` first (command-line flags),
/// then [`DEBUG_DIRS_ENV`], then [`DEFAULT_DEBUG_DIRS`], without repeats.
pub fn debug_dirs(extra: &[PathBuf]) -> Vec<PathBuf> {
    let env = std::env::var_os(DEBUG_DIRS_ENV).unwrap_or_default();
    let mut dirs: Vec<PathBuf> = Vec::new();
    let all = extra
        .iter()
        .cloned()
        .chain(std::env::split_paths(&env))
        .chain(DEFAULT_DEBUG_DIRS.iter().map(PathBuf::from));
    for d in all {
        if !d.as_os_str().is_empty() && !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

/// `DIR/.build-id/xx/rest.debug` for a hex build id, or `None` when the id
/// is not hex or too short to split (ids come from captures: untrusted).
pub fn build_id_path(dir: &Path, build_id: &str) -> Option<PathBuf> {
    let valid = build_id.len() >= 4
        && build_id.len() <= 128
        && build_id.len().is_multiple_of(2)
        && build_id.bytes().all(|b| b.is_ascii_hexdigit());
    if !valid {
        return None;
    }
    let id = build_id.to_ascii_lowercase();
    let (head, rest) = id.split_at(2);
    Some(
        dir.join(".build-id")
            .join(head)
            .join(format!("{rest}.debug")),
    )
}

/// Candidate paths of `object`'s debug file, most specific first: by build
/// id under each of `dirs`, then by debug link (see the module doc). The
/// object itself is never a candidate.
pub fn candidates(
    object: &Path,
    build_id: Option<&str>,
    link: Option<&DebugLink>,
    dirs: &[PathBuf],
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    if let Some(id) = build_id {
        out.extend(dirs.iter().filter_map(|d| build_id_path(d, id)));
    }
    if let Some(link) = link {
        let parent = object.parent().unwrap_or(Path::new("/"));
        out.push(parent.join(&link.name));
        out.push(parent.join(".debug").join(&link.name));
        // `DIR/usr/lib/x86_64-linux-gnu/NAME` for `/usr/lib/x86_64-linux-gnu/libc.so.6`.
        let relative = parent.strip_prefix("/").unwrap_or(parent);
        for d in dirs {
            out.push(d.join(relative).join(&link.name));
        }
    }
    out.retain(|p| p.as_path() != object);
    out.dedup();
    out
}

/// The CRC-32 `.gnu_debuglink` records for a file: the IEEE CRC of its
/// bytes (GDB's `gnu_debuglink_crc32` is zlib's `crc32`).
pub fn file_crc(path: &Path) -> io::Result<u32> {
    let mut file = File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize())
}

/// The first candidate that exists and is the right file: a build-id
/// candidate when `same_build_id` says so, a debug-link candidate when its
/// CRC matches the link's (or, failing that, when `same_build_id` does:
/// a file rebuilt with the same id is the same code).
pub fn find(
    object: &Path,
    build_id: Option<&str>,
    link: Option<&DebugLink>,
    dirs: &[PathBuf],
    same_build_id: &mut dyn FnMut(&Path) -> bool,
) -> Option<PathBuf> {
    let by_id: Vec<PathBuf> = build_id
        .map(|id| dirs.iter().filter_map(|d| build_id_path(d, id)).collect())
        .unwrap_or_default();
    for path in candidates(object, build_id, link, dirs) {
        if !path.is_file() {
            continue;
        }
        let matches = if by_id.contains(&path) {
            same_build_id(&path)
        } else {
            link.is_some_and(|l| file_crc(&path).ok() == Some(l.crc))
                || (build_id.is_some() && same_build_id(&path))
        };
        if matches {
            return Some(path);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_paths_split_the_first_byte() {
        assert_eq!(
            build_id_path(Path::new("/usr/lib/debug"), "93AC61ec5a"),
            Some(PathBuf::from("/usr/lib/debug/.build-id/93/ac61ec5a.debug"))
        );
        assert_eq!(build_id_path(Path::new("/d"), "../../etc"), None);
        assert_eq!(build_id_path(Path::new("/d"), "ab"), None, "too short");
        assert_eq!(build_id_path(Path::new("/d"), "abc"), None, "odd length");
    }

    #[test]
    fn debug_links_are_plain_names() {
        assert!(DebugLink::new("calls.debug", 1).is_some());
        assert!(DebugLink::new("../etc/passwd", 1).is_none());
        assert!(DebugLink::new("..", 1).is_none());
        assert!(DebugLink::new("", 1).is_none());
        assert!(DebugLink::new(&"x".repeat(300), 1).is_none());
    }

    #[test]
    fn candidates_follow_gdb_order() {
        let link = DebugLink::new("libc.so.6.debug", 0).expect("valid");
        let dirs = [PathBuf::from("/opt/dbg"), PathBuf::from("/usr/lib/debug")];
        let c = candidates(
            Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            Some("93ac61"),
            Some(&link),
            &dirs,
        );
        let c: Vec<&str> = c.iter().filter_map(|p| p.to_str()).collect();
        assert_eq!(
            c,
            [
                "/opt/dbg/.build-id/93/ac61.debug",
                "/usr/lib/debug/.build-id/93/ac61.debug",
                "/usr/lib/x86_64-linux-gnu/libc.so.6.debug",
                "/usr/lib/x86_64-linux-gnu/.debug/libc.so.6.debug",
                "/opt/dbg/usr/lib/x86_64-linux-gnu/libc.so.6.debug",
                "/usr/lib/debug/usr/lib/x86_64-linux-gnu/libc.so.6.debug",
            ]
        );
    }

    /// A link whose name is the object's own (as `objcopy
    /// --add-gnu-debuglink` allows) never points back at the object.
    #[test]
    fn the_object_is_not_its_own_debug_file() {
        let link = DebugLink::new("app", 0).expect("valid");
        let c = candidates(Path::new("/srv/app"), None, Some(&link), &[]);
        assert!(!c.contains(&PathBuf::from("/srv/app")), "{c:?}");
    }

    #[test]
    fn finds_a_linked_file_by_its_crc_and_a_build_id_file_by_its_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        let object = dir.path().join("app");
        std::fs::write(&object, b"stripped").expect("object");
        let debug = dir.path().join("app.debug");
        std::fs::write(&debug, b"debug info").expect("debug");
        let crc = file_crc(&debug).expect("crc");
        assert_eq!(crc, crc32fast::hash(b"debug info"));
        let mut never = |_: &Path| false;
        let good = DebugLink::new("app.debug", crc).expect("valid");
        assert_eq!(
            find(&object, None, Some(&good), &[], &mut never),
            Some(debug.clone())
        );
        let stale = DebugLink::new("app.debug", crc ^ 1).expect("valid");
        assert_eq!(find(&object, None, Some(&stale), &[], &mut never), None);

        let root = dir.path().join("dbg");
        let by_id = build_id_path(&root, "abcdef").expect("path");
        std::fs::create_dir_all(by_id.parent().expect("parent")).expect("mkdir");
        std::fs::write(&by_id, b"x").expect("write");
        let dirs = [root];
        assert_eq!(find(&object, Some("abcdef"), None, &dirs, &mut never), None);
        let mut always = |_: &Path| true;
        assert_eq!(
            find(&object, Some("abcdef"), None, &dirs, &mut always),
            Some(by_id)
        );
    }

    #[test]
    fn configured_dirs_come_before_the_defaults() {
        let dirs = debug_dirs(&[PathBuf::from("/tmp/x"), PathBuf::from("/usr/lib/debug")]);
        assert_eq!(dirs.first(), Some(&PathBuf::from("/tmp/x")));
        assert_eq!(
            dirs.iter()
                .filter(|d| d.as_path() == Path::new("/usr/lib/debug"))
                .count(),
            1
        );
    }
}
