//! Offline (and live) analysis of captures written by `tracer record`.
//!
//! The pipeline runs one way: [`decode`] turns a capture into typed,
//! symbolized events; later stages (units and features, models, scores,
//! reports) build on it. `tracer replay` uses [`decode`] too, so there is one
//! decoding path for files and for live rings.

pub mod decode;

pub use decode::{Capture, DecodeError, Event, Symbolizer};
