//! Offline (and live) analysis of captures written by `tracer record`.
//!
//! The pipeline runs one way: [`decode`] turns a capture into typed,
//! symbolized events; [`units`] cuts each thread's calls and socket calls
//! into execution units with call trees; [`model`] learns mergeable models of
//! normal runs; [`score`] gives each unit of a trial run its suspect score
//! (Maruyama & Matsuoka); [`peers`] compares servers with their peers
//! window by window to find the faulty one (Kasick et al.); [`automaded`]
//! finds abnormal MPI tasks and edges with semi-Markov models (Laguna et al.);
//! [`diagnose`] combines
//! every analysis that applies to a run into one ranked verdict and an HTML
//! report; [`debuginfo`] turns code addresses into functions, files and lines (DWARF,
//! inlined frames, separate debug files) for every report. `tracer replay`
//! uses [`decode`] too, so there is
//! one decoding path for files and for live rings.

pub mod automaded;
pub mod blocked;
pub mod debuginfo;
pub mod diagnose;
pub mod export;
/// Decoding captures is defined beside the capture format, in `tracer-common`.
pub use tracer_common::decode;
pub mod live;
pub mod load;
pub mod model;
pub mod mpi;
pub mod peers;
pub mod report;
pub mod score;
pub mod sequitur;
pub mod units;

pub use decode::{Capture, DecodeError, Event, Symbolizer};
