//! Execution units (Maruyama & Matsuoka, `papers/000_…` §2.2, and the
//! `001_…` variant): each thread's call/return and socket-syscall stream is
//! cut into an initializer unit, handler units (one per `accept`/`recv`,
//! consecutive receives on one fd counting as one) and a finalizer unit; the
//! 001 variant also cuts each event-loop iteration's pre- and post-processing.
//!
//! - [`trace`] turns a capture into per-thread trace entries with call stacks
//!   and interned call-tree nodes;
//! - [`decompose`] finds the event loop and cuts units, and names each
//!   thread's role (the function its first traced call was made from);
//! - [`connections`] gives each socket the identity the papers use: the set of
//!   call stacks to its establishing calls (bind, connect, listen, accept).

mod connections;
mod decompose;
mod trace;
mod types;

pub use connections::ConnectionKey;
pub use decompose::{Variant, decompose_capture, thread_role};
pub use trace::{
    DISPLAY_FRAMES, NodeKey, NodeTable, ThreadTraces, TraceEntry, TraceEntryKind, thread_traces,
};
pub use types::{ProcessUnits, Unit, UnitKind};
