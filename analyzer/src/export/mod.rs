//! Exports other tools read: profiles for pprof and flame graphs, traces
//! for Perfetto and chrome://tracing, and Parquet tables for SQL.
//!
//! | format | from | read by |
//! | --- | --- | --- |
//! | `pprof` ([`pprof`]) | IP samples or traced functions' exclusive time ([`stacks`]) | `go tool pprof`, Pyroscope, Speedscope |
//! | `folded` ([`StackProfile::folded`]) | the same stacks | `flamegraph.pl`, inferno, Speedscope |
//! | `flamegraph` ([`flamegraph`]) | the same stacks | a web browser (SVG, drawn by inferno) |
//! | `chrome-trace` ([`chrome`]) | calls, system calls, lifecycle, retransmissions | Perfetto UI, chrome://tracing |
//! | `parquet` ([`parquet`]) | events; scored units; peer windows | DuckDB, pyarrow, pandas, Spark |
//!
//! Function names, files and lines come from [`crate::debuginfo`]: the
//! capture's symbol tables, and DWARF where the recorded builds' files (or
//! their debug files) are on this machine. What could not be resolved is
//! said in the profile's notes (pprof comments), never silently dropped.
//!
//! ## Parquet schemas
//!
//! **events** (one row per record of every capture, in capture order):
//!
//! | column | type | meaning |
//! | --- | --- | --- |
//! | capture | string | the capture file, as given |
//! | host | string | host it was recorded on |
//! | ts_ns | int64 | record time, `CLOCK_MONOTONIC` ns (a system call's exit) |
//! | wall_ns | int64 | the same as wall-clock ns since the epoch |
//! | pid, tid, cpu | int32 | process, thread, CPU |
//! | kind | string | `entry`, `return`, `syscall`, `sample`, `fork`, `exec`, `exit`, `tcp_retransmit`, `usdt`, `usdt_string`, `unknown` |
//! | name | string? | function (entry, return), system call, USDT probe (`provider:name`), command (sample, lifecycle) |
//! | duration_ns | int64? | system calls: exit − entry |
//! | fd | int32? | system calls: the descriptor, −1 for none |
//! | ret | int64? | return value (return, syscall) |
//! | address | string? | system calls: the peer address; retransmissions: the local end |
//! | remote | string? | retransmissions: the remote end |
//! | location | string? | entry: the call site (`caller+0x1a`); sample: the user function |
//! | source | string? | `file.c:42` of the call site or sampled instruction, when debug information is present |
//! | kernel_location | string? | sample: the kernel function |
//! | args | string? | JSON: entry's six argument registers, a USDT hit's arguments, a USDT string's text |
//!
//! **units** (one row per execution unit scored against a model, most
//! suspect first; [`crate::score::ScoreReport`]):
//!
//! | column | type | meaning |
//! | --- | --- | --- |
//! | rank | int32 | 1 = most suspect |
//! | capture, host | string | where the unit was recorded |
//! | pid, tid | int32 | its process and thread |
//! | comm | string | its command |
//! | kind | string | `initializer`, `handler`, `finalizer`, … |
//! | role | string | its thread's role |
//! | start_ns, end_ns | int64 | `CLOCK_MONOTONIC` ns |
//! | t_s | double | start, seconds since its capture began |
//! | wall_ns | int64 | start, wall-clock ns since the epoch |
//! | connection, peer | string? | handler units: the connection and peer address |
//! | score | double | suspect score, 0..1 |
//! | normal | double? | highest score of normal units of its tree (calibrated models) |
//! | anomalous | boolean | behaviour no normal run showed |
//! | earliest | boolean | the earliest anomalous unit of its capture |
//! | reason | string? | why it has no model, when it has none |
//! | top_difference | string? | its largest contribution (`missing a > b (p=0.90)`) |
//! | differences | string | every contribution, JSON (`path`, `kind`, `p`, `delta`) |
//!
//! **windows** (peer comparison: one row per run, window, server, metric and
//! kept component; [`crate::peers`]):
//!
//! | column | type | meaning |
//! | --- | --- | --- |
//! | run | string | the run (directory or capture) |
//! | window_index | int32 | window index, from 0 (`window` is an SQL keyword) |
//! | start_ns | int64 | window start, wall-clock ns since the epoch |
//! | window_ns | int64 | window length |
//! | server | string | server label |
//! | metric | string | `samples`, `count`, `time`, `retransmits`, … |
//! | unit | string | the value's unit (`% of the median server's total` for normalised metrics) |
//! | component | string | function, system call, … (after dimensionality reduction) |
//! | value | double | the feature value as compared |
//! | score | double | the server's score in this metric and window (median distance to its peers) |

pub mod chrome;
pub mod flamegraph;
pub mod parquet;
pub mod pprof;
pub mod stacks;

pub use stacks::{FrameKind, ProcessKey, ProfileKind, StackFrame, StackProfile};

/// Errors writing an export.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Writing failed.
    #[error("writing the export")]
    Io(#[from] std::io::Error),
    /// Serializing JSON failed.
    #[error("serializing JSON")]
    Json(#[from] serde_json::Error),
    /// The Parquet writer failed.
    #[error("writing Parquet")]
    Parquet(#[from] ::parquet::errors::ParquetError),
    /// A capture's records could not be decoded.
    #[error(transparent)]
    Decode(#[from] crate::decode::DecodeError),
    /// There is nothing to export.
    #[error("{what}")]
    Empty {
        /// What is missing and what to do.
        what: String,
    },
}

/// Build ids of the objects of `captures`, by path: pprof's mappings carry
/// them so a profile names the exact builds.
pub fn build_ids(captures: &[&crate::Capture]) -> std::collections::HashMap<String, String> {
    captures
        .iter()
        .flat_map(|c| c.objects.values())
        .filter_map(|o| Some((o.path.clone(), o.build_id.clone()?)))
        .collect()
}

/// The executable of the first traced process of `captures`: the program a
/// profile is named after.
pub fn main_object<'a>(captures: &[&'a crate::Capture]) -> Option<&'a str> {
    captures.iter().find_map(|c| {
        c.processes
            .values()
            .flatten()
            .find(|p| p.traced && !p.exe.is_empty())
            .map(|p| p.exe.as_str())
    })
}

#[cfg(test)]
mod tests;
