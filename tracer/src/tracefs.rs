//! tracefs: mounting it when needed and reading tracepoint record formats, so
//! the eBPF programs read fields at this kernel's offsets.

use std::{fs, io, path::Path};

use tracer_common::record::TracepointOffsets;

/// Where tracefs is expected.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// Errors about tracefs.
#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    /// tracefs is not mounted and mounting it failed.
    #[error(
        "tracefs is not mounted at {TRACEFS} and mounting it failed (mount -t tracefs tracefs {TRACEFS})"
    )]
    Mount {
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Mounts tracefs at [`TRACEFS`] if it is not there; returns whether it did.
pub fn ensure_mounted() -> Result<bool, TracefsError> {
    if Path::new(TRACEFS).join("events").is_dir() {
        return Ok(false);
    }
    let target = c"/sys/kernel/tracing";
    // SAFETY: valid NUL-terminated strings; no data argument.
    let rc = unsafe {
        libc::mount(
            c"tracefs".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(TracefsError::Mount {
            source: io::Error::last_os_error(),
        });
    }
    Ok(true)
}

/// Whether the tracepoint `category/name` exists on this kernel.
pub fn has_event(category: &str, name: &str) -> bool {
    Path::new(TRACEFS)
        .join("events")
        .join(category)
        .join(name)
        .is_dir()
}

/// Offset of `field` in the record of tracepoint `category/name`, from its
/// `format` file; `None` when the event or the field does not exist.
pub fn field_offset(category: &str, name: &str, field: &str) -> Option<u16> {
    let path = Path::new(TRACEFS)
        .join("events")
        .join(category)
        .join(name)
        .join("format");
    let text = fs::read_to_string(path).ok()?;
    parse_field_offset(&text, field)
}

fn parse_field_offset(format: &str, field: &str) -> Option<u16> {
    format.lines().find_map(|line| {
        let line = line.trim();
        let decl = line.strip_prefix("field:")?.split(';').next()?;
        // "__u8 saddr[4]" -> "saddr"
        let name = decl.rsplit(' ').next()?.split('[').next()?;
        if name != field {
            return None;
        }
        let offset = line
            .split(';')
            .find_map(|part| part.trim().strip_prefix("offset:"))?;
        offset.trim().parse().ok()
    })
}

/// Offsets of every field the eBPF programs read.
pub fn tracepoint_offsets() -> TracepointOffsets {
    let tcp = |field| field_offset("tcp", "tcp_retransmit_skb", field).unwrap_or(u16::MAX);
    TracepointOffsets {
        fork_child_pid: field_offset("sched", "sched_process_fork", "child_pid")
            .unwrap_or(u16::MAX),
        exit_group_dead: field_offset("sched", "sched_process_exit", "group_dead")
            .unwrap_or(u16::MAX),
        tcp_sport: tcp("sport"),
        tcp_dport: tcp("dport"),
        tcp_family: tcp("family"),
        tcp_state: tcp("state"),
        tcp_saddr: tcp("saddr"),
        tcp_daddr: tcp("daddr"),
        tcp_saddr_v6: tcp("saddr_v6"),
        tcp_daddr_v6: tcp("daddr_v6"),
        _pad: [0; 6],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORK: &str = "name: sched_process_fork\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n\
        \tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;\n\
        \tfield:__u8 saddr_v6[16];\toffset:42;\tsize:16;\tsigned:0;\n";

    #[test]
    fn finds_fields_by_name() {
        assert_eq!(parse_field_offset(FORK, "child_pid"), Some(20));
        assert_eq!(parse_field_offset(FORK, "parent_comm"), Some(8));
        assert_eq!(parse_field_offset(FORK, "saddr_v6"), Some(42));
        assert_eq!(parse_field_offset(FORK, "saddr"), None);
        assert_eq!(parse_field_offset(FORK, "pid"), None);
    }
}
