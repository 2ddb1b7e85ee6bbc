//! Many uprobes in one kernel link (`BPF_LINK_TYPE_UPROBE_MULTI`, Linux 6.6+).
//!
//! aya 0.14 attaches every uprobe as its own perf event, and the kernel tears
//! each of those down under a global mutex with its own RCU grace period: the
//! 619 `MPI_*` functions of libmpich (1238 perf links) took 85 s to detach on
//! the 2-core VM. A uprobe_multi link holds all probes of one object; it is
//! created and destroyed with one system call each and one grace period.
//!
//! aya cannot load a program for that attach type (the kernel wants
//! `expected_attach_type = BPF_TRACE_UPROBE_MULTI` at load time), so the two
//! function programs are loaded a second time here from the same object,
//! relocated against the maps aya already created: both copies write to the
//! same ring and read the same traced-pid table.

use std::{
    collections::{HashMap, HashSet},
    ffi::CString,
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
};

use aya_obj::generated::{
    BPF_F_UPROBE_MULTI_RETURN, bpf_attach_type, bpf_attr, bpf_cmd, bpf_insn, bpf_prog_type,
};

/// Errors loading or attaching uprobe_multi programs.
#[derive(Debug, thiserror::Error)]
pub enum MultiError {
    /// The embedded object did not parse (a build problem).
    #[error("parsing the eBPF object")]
    Parse(#[from] aya_obj::ParseError),
    /// Relocation against the loaded maps or the kernel's BTF failed.
    #[error("relocating the eBPF object: {0}")]
    Relocate(String),
    /// The object lacks a program.
    #[error("program {0} is not in the eBPF object")]
    MissingProgram(String),
    /// The kernel refused the program (old kernel, or verifier).
    #[error("the kernel refused {name} as a uprobe_multi program: {source}{log}")]
    Load {
        /// The program.
        name: String,
        /// The error.
        #[source]
        source: io::Error,
        /// The tail of the verifier log, when there is one.
        log: String,
    },
    /// The kernel refused the link.
    #[error("uprobe_multi link on {path} ({count} probes)")]
    Link {
        /// The object.
        path: String,
        /// Number of probes in the link.
        count: usize,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// The entry and return programs, loaded for uprobe_multi links.
#[derive(Debug)]
pub struct MultiPrograms {
    entry: OwnedFd,
    ret: OwnedFd,
}

impl MultiPrograms {
    /// Loads programs `entry` and `ret` of `object`, with map references
    /// resolved to `maps` (name, fd of the map aya created).
    pub fn load(
        object: &[u8],
        maps: &[(String, OwnedFd)],
        entry: &str,
        ret: &str,
    ) -> Result<Self, MultiError> {
        let mut fds = load_programs(object, maps, &[entry, ret])?.into_iter();
        match (fds.next(), fds.next()) {
            (Some(entry), Some(ret)) => Ok(Self { entry, ret }),
            _ => Err(MultiError::MissingProgram(ret.to_string())),
        }
    }

    /// One link with entry (or, with `ret`, return) probes at `offsets` of
    /// the file at `path`, each with its cookie, for process `pid` (0: for
    /// every process of the file).
    pub fn attach(
        &self,
        path: &Path,
        offsets: &[u64],
        cookies: &[u64],
        ret: bool,
        pid: u32,
    ) -> Result<OwnedFd, MultiError> {
        let prog = if ret { &self.ret } else { &self.entry };
        link(prog, path, offsets, None, cookies, ret, pid)
    }
}

/// Loads programs `names` of `object` for uprobe_multi links, with map
/// references resolved to `maps` (name, fd of the map aya created).
pub fn load_programs(
    object: &[u8],
    maps: &[(String, OwnedFd)],
    names: &[&str],
) -> Result<Vec<OwnedFd>, MultiError> {
    let mut obj = aya_obj::Object::parse(object)?;
    if let Ok(btf) = aya_obj::btf::Btf::from_sys_fs() {
        obj.relocate_btf(&btf)
            .map_err(|e| MultiError::Relocate(e.to_string()))?;
    }
    let defs = obj.maps.clone();
    let text_sections: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
    obj.relocate_maps(
        maps.iter().filter_map(|(name, fd)| {
            defs.get(name)
                .map(|def| (name.as_str(), fd.as_raw_fd(), def))
        }),
        &text_sections,
    )
    .map_err(|e| MultiError::Relocate(e.to_string()))?;
    obj.relocate_calls(&text_sections)
        .map_err(|e| MultiError::Relocate(e.to_string()))?;
    names
        .iter()
        .map(|name| {
            let program = obj
                .programs
                .get(*name)
                .ok_or_else(|| MultiError::MissingProgram(name.to_string()))?;
            let function = obj
                .functions
                .get(&program.function_key())
                .ok_or_else(|| MultiError::MissingProgram(name.to_string()))?;
            prog_load(name, &function.instructions, &obj.license)
        })
        .collect()
}

/// One uprobe_multi link of program `prog` with probes at `offsets` of the
/// file at `path`, each with its cookie. `ref_ctr_offsets` are the file
/// offsets of USDT semaphores (0 for none): the kernel increments each while
/// the link exists and decrements it when the link goes, in every process
/// the probe is installed in. `pid` 0 probes every process of the file;
/// another pid only that process.
pub fn link(
    prog: &OwnedFd,
    path: &Path,
    offsets: &[u64],
    ref_ctr_offsets: Option<&[u64]>,
    cookies: &[u64],
    ret: bool,
    pid: u32,
) -> Result<OwnedFd, MultiError> {
    debug_assert_eq!(offsets.len(), cookies.len());
    let link_err = |source| MultiError::Link {
        path: path.display().to_string(),
        count: offsets.len(),
        source,
    };
    if ref_ctr_offsets.is_some_and(|r| r.len() != offsets.len()) {
        return Err(link_err(io::Error::from(io::ErrorKind::InvalidInput)));
    }
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| link_err(io::Error::from(io::ErrorKind::InvalidInput)))?;
    // SAFETY: bpf_attr is a plain C union; all-zero is its documented default.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing plain integer fields of the link_create member; the
    // pointers outlive the system call.
    unsafe {
        let lc = &mut attr.link_create;
        lc.__bindgen_anon_1.prog_fd = prog.as_raw_fd() as u32;
        lc.attach_type = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
        let um = &mut lc.__bindgen_anon_3.uprobe_multi;
        um.path = c_path.as_ptr() as u64;
        um.offsets = offsets.as_ptr() as u64;
        um.ref_ctr_offsets = ref_ctr_offsets.map_or(0, |r| r.as_ptr() as u64);
        um.cookies = cookies.as_ptr() as u64;
        um.cnt = offsets.len() as u32;
        um.flags = if ret { BPF_F_UPROBE_MULTI_RETURN } else { 0 };
        um.pid = pid;
    }
    bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr).map_err(link_err)
}

fn prog_load(name: &str, insns: &[bpf_insn], license: &CString) -> Result<OwnedFd, MultiError> {
    let attempt = |log: Option<&mut Vec<u8>>| {
        // SAFETY: as above.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        // SAFETY: writing plain fields of the prog_load member; the pointers
        // outlive the system call.
        unsafe {
            let p = &mut attr.__bindgen_anon_3;
            p.prog_type = bpf_prog_type::BPF_PROG_TYPE_KPROBE as u32;
            p.expected_attach_type = bpf_attach_type::BPF_TRACE_UPROBE_MULTI as u32;
            p.insns = insns.as_ptr() as u64;
            p.insn_cnt = insns.len() as u32;
            p.license = license.as_ptr() as u64;
            for (dst, src) in p.prog_name.iter_mut().zip(name.bytes().take(15)) {
                *dst = src as std::ffi::c_char;
            }
            if let Some(log) = log {
                p.log_level = 1;
                p.log_buf = log.as_mut_ptr() as u64;
                p.log_size = log.len() as u32;
            }
        }
        bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr)
    };
    attempt(None).or_else(|_| {
        // Again with a log, for the message.
        let mut log = vec![0u8; 1 << 20];
        attempt(Some(&mut log)).map_err(|source| {
            let end = log.iter().position(|b| *b == 0).unwrap_or(0);
            let text = String::from_utf8_lossy(&log[..end]);
            let tail: Vec<&str> = text.lines().rev().take(8).collect();
            MultiError::Load {
                name: name.to_string(),
                source,
                log: if tail.is_empty() {
                    String::new()
                } else {
                    format!(
                        "\nverifier: {}",
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    )
                },
            }
        })
    })
}

fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid bpf_attr of the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            size_of::<bpf_attr>(),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as i32) })
}

/// Groups probes by object file: (offsets, cookies) per path, in first-seen order.
pub fn group_by_object<'a>(
    probes: impl IntoIterator<Item = (&'a str, u64, u64)>,
) -> Vec<(&'a str, Vec<u64>, Vec<u64>)> {
    let mut order: Vec<&str> = Vec::new();
    let mut groups: HashMap<&str, (Vec<u64>, Vec<u64>)> = HashMap::new();
    for (path, offset, cookie) in probes {
        let g = groups.entry(path).or_insert_with(|| {
            order.push(path);
            Default::default()
        });
        g.0.push(offset);
        g.1.push(cookie);
    }
    order
        .into_iter()
        .filter_map(|p| groups.remove(p).map(|(o, c)| (p, o, c)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_probes_per_object_in_order() {
        let g = group_by_object([("/b", 1, 10), ("/a", 2, 20), ("/b", 3, 30)]);
        assert_eq!(
            g,
            vec![("/b", vec![1, 3], vec![10, 30]), ("/a", vec![2], vec![20])]
        );
    }
}
