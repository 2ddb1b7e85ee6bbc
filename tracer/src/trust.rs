//! Whom the root agent trusts on disk: an executable it attaches to or
//! starts, a pid file it believes, a directory it writes into. A path is
//! trusted when it and every directory above it are owned by root (or an
//! owner the configuration names) and cannot be changed by anyone else:
//! not writable by others (a directory may be, with the sticky bit, as
//! `/tmp` is: then only an entry's owner can replace it), nor by a group
//! other than root's. This is the check OpenSSH and sudo make of the files
//! they act on; checked on the canonical path, so symbolic links are
//! judged by where they lead.

use std::{
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

/// Why a path is not trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    /// It (or a directory above it) cannot be read.
    #[error("cannot check {path}: {reason}")]
    Unreadable {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Owned by someone else.
    #[error("{path} is owned by uid {uid}, not by root{}", owners_text(.allowed))]
    Owner {
        /// The path.
        path: PathBuf,
        /// Its owner.
        uid: u32,
        /// Owners allowed besides root.
        allowed: Vec<u32>,
    },
    /// Writable by others or a group.
    #[error("{path} (mode {mode:04o}) can be changed by {who}")]
    Writable {
        /// The path.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
        /// `everyone` or `group GID`.
        who: String,
    },
    /// Not the kind of file expected.
    #[error("{path} is not {expected}")]
    Kind {
        /// The path.
        path: PathBuf,
        /// `a regular file` or `a directory`.
        expected: &'static str,
    },
}

fn owners_text(allowed: &[u32]) -> String {
    if allowed.is_empty() {
        String::new()
    } else {
        format!(
            " or uid {}",
            allowed
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// What the last component must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file (executable, pid file, analyzer).
    File,
    /// A directory (state directory).
    Dir,
}

/// Checks that `path` (made canonical first) and the directories above it
/// are owned by root or one of `owners` and writable by nobody else.
/// Returns the canonical path.
pub fn check(path: &Path, kind: Kind, owners: &[u32]) -> Result<PathBuf, TrustError> {
    let canonical = path.canonicalize().map_err(|e| TrustError::Unreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let meta = std::fs::metadata(&canonical).map_err(|e| TrustError::Unreadable {
        path: canonical.clone(),
        reason: e.to_string(),
    })?;
    let right_kind = match kind {
        Kind::File => meta.is_file(),
        Kind::Dir => meta.is_dir(),
    };
    if !right_kind {
        return Err(TrustError::Kind {
            path: canonical,
            expected: match kind {
                Kind::File => "a regular file",
                Kind::Dir => "a directory",
            },
        });
    }
    check_meta(&canonical, &meta, owners, kind == Kind::Dir)?;
    let mut dir = canonical.parent();
    while let Some(d) = dir {
        let meta = std::fs::metadata(d).map_err(|e| TrustError::Unreadable {
            path: d.to_path_buf(),
            reason: e.to_string(),
        })?;
        check_meta(d, &meta, owners, true)?;
        dir = d.parent();
    }
    Ok(canonical)
}

fn check_meta(
    path: &Path,
    meta: &std::fs::Metadata,
    owners: &[u32],
    dir: bool,
) -> Result<(), TrustError> {
    let uid = meta.uid();
    if uid != 0 && !owners.contains(&uid) {
        return Err(TrustError::Owner {
            path: path.to_path_buf(),
            uid,
            allowed: owners.to_vec(),
        });
    }
    let mode = meta.mode() & 0o7777;
    let sticky = mode & 0o1000 != 0;
    let writable = |who: String| TrustError::Writable {
        path: path.to_path_buf(),
        mode,
        who,
    };
    if mode & 0o002 != 0 && !(dir && sticky) {
        return Err(writable("everyone".into()));
    }
    if mode & 0o020 != 0 && meta.gid() != 0 && !(dir && sticky) {
        return Err(writable(format!("group {}", meta.gid())));
    }
    Ok(())
}

/// The uid of user `name` (or a number given as text), from the password
/// database.
pub fn uid_of(name: &str) -> Option<(u32, u32)> {
    if let Ok(uid) = name.parse::<u32>() {
        // A bare uid: its primary group when it has an entry, else the
        // same number.
        return Some(lookup_uid(uid).unwrap_or((uid, uid)));
    }
    let c = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0u8; 16 << 10];
    // SAFETY: a zeroed passwd is a valid out-parameter.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf outlives it.
    let rc = unsafe {
        libc::getpwnam_r(
            c.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    (rc == 0 && !result.is_null()).then_some((pwd.pw_uid, pwd.pw_gid))
}

fn lookup_uid(uid: u32) -> Option<(u32, u32)> {
    let mut buf = vec![0u8; 16 << 10];
    // SAFETY: a zeroed passwd is a valid out-parameter.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf outlives it.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    (rc == 0 && !result.is_null()).then_some((pwd.pw_uid, pwd.pw_gid))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    /// The checks that do not need another user: modes and kinds. (Owners
    /// are checked on real files in the agent's tests.)
    #[test]
    fn writable_paths_and_wrong_kinds_are_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let me = std::fs::metadata(dir.path()).expect("meta").uid();
        let file = dir.path().join("daemon");
        std::fs::write(&file, b"#!/bin/sh\n").expect("write");
        chmod(&file, 0o755);
        let owners = [me];
        assert_eq!(
            check(&file, Kind::File, &owners).as_deref(),
            Ok(file.canonicalize().expect("c").as_path())
        );
        chmod(&file, 0o757);
        assert!(matches!(
            check(&file, Kind::File, &owners),
            Err(TrustError::Writable { ref who, .. }) if who == "everyone"
        ));
        chmod(&file, 0o755);
        // A world-writable directory above, without the sticky bit.
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).expect("mkdir");
        let inner = sub.join("d");
        std::fs::write(&inner, b"x").expect("write");
        chmod(&sub, 0o777);
        assert!(matches!(
            check(&inner, Kind::File, &owners),
            Err(TrustError::Writable { ref path, .. }) if path == &sub.canonicalize().expect("c")
        ));
        // With the sticky bit (like /tmp) it may be.
        chmod(&sub, 0o1777);
        assert!(check(&inner, Kind::File, &owners).is_ok());
        assert!(matches!(
            check(&sub, Kind::File, &owners),
            Err(TrustError::Kind { .. })
        ));
        assert!(matches!(
            check(&dir.path().join("missing"), Kind::File, &owners),
            Err(TrustError::Unreadable { .. })
        ));
        // A symbolic link is judged by where it leads.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&inner, &link).expect("symlink");
        assert_eq!(
            check(&link, Kind::File, &owners).ok(),
            inner.canonicalize().ok()
        );
    }

    #[test]
    fn users_resolve_by_name_and_number() {
        assert_eq!(uid_of("root"), Some((0, 0)));
        assert_eq!(uid_of("0"), Some((0, 0)));
        assert_eq!(uid_of("no-such-user-eftrace"), None);
        assert_eq!(uid_of("4000000"), Some((4_000_000, 4_000_000)));
    }
}
