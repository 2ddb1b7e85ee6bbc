//! Units and the processes they belong to.

use serde::{Deserialize, Serialize};
use tracer_common::record::ExitStatus;

use super::ConnectionKey;

/// Kind of an execution unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnitKind {
    /// From the start of the thread to the event loop.
    Initializer,
    /// One event: from an `accept` or `recv` to the next.
    Handler,
    /// 001 variant: from the loop's wait to the first handler of an iteration.
    PreProcess,
    /// 001 variant: from the end of the last handler to the next wait.
    PostProcess,
    /// After the event loop until the thread ends.
    Finalizer,
}

impl UnitKind {
    /// Every kind.
    pub const ALL: [UnitKind; 5] = [
        Self::Initializer,
        Self::Handler,
        Self::PreProcess,
        Self::PostProcess,
        Self::Finalizer,
    ];

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Initializer => "initializer",
            Self::Handler => "handler",
            Self::PreProcess => "pre-process",
            Self::PostProcess => "post-process",
            Self::Finalizer => "finalizer",
        }
    }
}

/// One execution unit of one thread.
#[derive(Clone, Debug, PartialEq)]
pub struct Unit {
    /// Kind.
    pub kind: UnitKind,
    /// Thread id.
    pub tid: u32,
    /// First event time, `CLOCK_MONOTONIC` ns.
    pub start_ns: u64,
    /// Last event time, `CLOCK_MONOTONIC` ns.
    pub end_ns: u64,
    /// Call-tree nodes that appear in the unit (ids of the process's
    /// [`super::NodeTable`]), sorted, each once (coverage, not frequency).
    pub nodes: Vec<u32>,
    /// When each of `nodes` first appeared in the unit, `CLOCK_MONOTONIC`
    /// ns: when a unit that runs long (a thread without an event loop)
    /// made a call no normal unit made.
    pub first_ns: Vec<u64>,
    /// For handler units: the connection the event came from.
    pub connection: Option<ConnectionKey>,
    /// For handler units: the descriptor.
    pub fd: Option<i32>,
    /// For handler units: the peer address, when known (shared with the
    /// connection's other units).
    pub peer: Option<std::sync::Arc<str>>,
    /// Index of the first and one past the last trace entry of the thread.
    pub entries: (usize, usize),
    /// The role of its thread (see [`thread_role`](super::thread_role)):
    /// threads of one role share initializer, finalizer and pre/post models.
    pub role: std::sync::Arc<str>,
    /// The frames (call-tree nodes, outermost first) this unit had open
    /// when its thread's trace ended, beyond those a thread waiting in its
    /// event loop has open: the unit never completed (a handler that hung,
    /// or a thread that died inside it). Empty for a completed unit.
    pub open: Vec<u32>,
    /// With `open`: whether the thread's exit was recorded (it ended inside
    /// the unit), rather than the capture ending while it was inside.
    pub exited: bool,
    /// The thread's trace ended inside this unit while it waited in its
    /// event loop (killed while idle, or the capture ended): the calls that
    /// would have followed never came, so what is missing at its end says
    /// nothing; what it called still does.
    pub cut: bool,
    /// For handler units: when a receive of the unit on its descriptor
    /// found the connection ended by the other end (end of stream, or
    /// reset), `CLOCK_MONOTONIC` ns of the first such receive.
    pub peer_ended_ns: Option<u64>,
}

impl Unit {
    /// When `node` first appeared in the unit (`None`: it did not).
    pub fn first_time(&self, node: u32) -> Option<u64> {
        let i = self.nodes.binary_search(&node).ok()?;
        self.first_ns.get(i).copied()
    }

    /// What picks its tree in a process model: the connection for a handler
    /// (000 §2.3), the thread role for every other kind (beyond the papers,
    /// whose daemons had one thread: a multi-threaded daemon's threads
    /// start differently, and one tree for all would call every thread's
    /// initializer half-missing).
    pub fn model_key(&self) -> &str {
        match (self.kind, &self.connection) {
            (UnitKind::Handler, Some(c)) => c.as_str(),
            (UnitKind::Handler, None) => ConnectionKey::UNKNOWN,
            _ => &self.role,
        }
    }
}

/// The units of one process, and what identifies its role.
#[derive(Clone, Debug)]
pub struct ProcessUnits {
    /// Process id.
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// Host name.
    pub host: String,
    /// The process signature (000 §2.4): the call stacks to establishing
    /// calls in its initializer units, as node-path strings, sorted.
    pub signature: Vec<String>,
    /// Call-tree nodes of this process.
    pub nodes: super::NodeTable,
    /// Units of every thread, in time order per thread.
    pub units: Vec<Unit>,
    /// When the process ended within the capture (monotonic ns), and how
    /// where the recorder read it.
    pub ended: Option<(u64, Option<ExitStatus>)>,
}
