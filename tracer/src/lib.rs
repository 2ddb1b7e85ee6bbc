//! The privileged half of the tracer: attach eBPF probes to running,
//! unmodified processes and record what they do into capture files.
//!
//! - [`targets`] resolves `[OBJECT:]GLOB` function patterns to probe sites;
//!   [`elf`] and [`procfs`] read what that needs from disk and `/proc`.
//! - [`loader`] loads the embedded eBPF object and attaches its programs,
//!   with kernel struct offsets from [`btf`].
//! - [`kstats`] writes the kernel's view every stats interval: file and
//!   block I/O counters, network namespace counters, device names.
//! - [`session`] runs a recording session; [`record`] is `tracer record`
//!   (one session); [`sink`] writes the capture.
//! - [`agent`] is `tracer agent`: sessions for as long as it lives, a
//!   flight recorder, snapshots, live analysis, a control socket.
//! - [`overhead`] weighs what function probes cost (a calibration probe,
//!   per-probe call counts) and drops the costliest to fit a budget.
//! - [`tracefs`] mounts tracefs when needed and reads tracepoint formats.
//! - [`usdt`] reads USDT probe notes and argument specs.
//! - [`trust`] decides which files on disk the root agent may act on.
//! - [`unwind`] reads and unwinds the stacks of threads blocked in a
//!   system call when a recording stops.
//!
//! Decoding captures (`tracer replay`) is `tracer_common::decode`, shared with
//! the analyzer: one decoding path.

pub mod agent;
pub mod btf;
pub mod elf;
pub mod kstats;
pub mod loader;
pub mod multi;
pub mod overhead;
pub mod procfs;
pub mod quantity;
pub mod record;
pub mod session;
pub mod sink;
pub mod targets;
pub mod tracefs;
pub mod trust;
pub mod unwind;
pub mod usdt;
