//! Per-thread trace entries with their call-tree nodes.
//!
//! A call-tree node is identified by its path from the root, each step being
//! (call site, callee) (000 §2.3): calls of one function from two call sites
//! are two nodes, repeated calls from one site are one node. Call sites are
//! symbolized (`caller+0x1a`), so node identities hold across runs and hosts
//! despite address-space randomization. System calls are leaf nodes named
//! `sys:NAME` under the frame they were made from.

use std::collections::{BTreeMap, HashMap};

use tracer_common::syscall::nr;

use crate::decode::{
    Capture, Event, Symbolizer, addr_string, is_uretprobe_trampoline, syscall_name,
};

/// One step of a call path.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeKey {
    /// Symbolized call site (`caller+0x1a`); empty for system calls.
    pub site: String,
    /// Function name, or `sys:NAME` for a system call.
    pub callee: String,
}

/// The call-tree nodes of one process: a trie of [`NodeKey`] paths.
#[derive(Clone, Debug, Default)]
pub struct NodeTable {
    keys: Vec<NodeKey>,
    key_ids: HashMap<NodeKey, u32>,
    /// (parent node or [`NodeTable::ROOT`], key id) per node.
    nodes: Vec<(u32, u32)>,
    node_ids: HashMap<(u32, u32), u32>,
}

impl NodeTable {
    /// The virtual root every path starts from.
    pub const ROOT: u32 = u32::MAX;

    /// Interns a key.
    pub fn key(&mut self, key: NodeKey) -> u32 {
        if let Some(id) = self.key_ids.get(&key) {
            return *id;
        }
        let id = self.keys.len() as u32;
        self.keys.push(key.clone());
        self.key_ids.insert(key, id);
        id
    }

    /// The node for `key_id` under `parent`, created if new.
    #[inline]
    pub fn child(&mut self, parent: u32, key_id: u32) -> u32 {
        if let Some(id) = self.node_ids.get(&(parent, key_id)) {
            return *id;
        }
        let id = self.nodes.len() as u32;
        self.nodes.push((parent, key_id));
        self.node_ids.insert((parent, key_id), id);
        id
    }

    /// Parent of `node` ([`NodeTable::ROOT`] for top-level nodes).
    pub fn parent(&self, node: u32) -> u32 {
        self.nodes[node as usize].0
    }

    /// Key of `node`.
    pub fn node_key(&self, node: u32) -> &NodeKey {
        &self.keys[self.nodes[node as usize].1 as usize]
    }

    /// Depth of `node` (top-level nodes have depth 1).
    pub fn depth(&self, mut node: u32) -> usize {
        let mut d = 0;
        while node != Self::ROOT {
            d += 1;
            node = self.parent(node);
        }
        d
    }

    /// The keys from the root to `node`.
    pub fn path(&self, mut node: u32) -> Vec<&NodeKey> {
        let mut out = Vec::new();
        while node != Self::ROOT {
            out.push(self.node_key(node));
            node = self.parent(node);
        }
        out.reverse();
        out
    }

    /// The path of `node` as text: `main > serve@main+0x4f > sys:poll`.
    pub fn path_string(&self, node: u32) -> String {
        self.path(node)
            .iter()
            .map(|k| {
                if k.site.is_empty() {
                    k.callee.clone()
                } else {
                    format!("{}@{}", k.callee, k.site)
                }
            })
            .collect::<Vec<_>>()
            .join(" > ")
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// What a trace entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceEntryKind {
    /// A function call (its node is pushed on the stack).
    Call,
    /// The return of the node's call.
    Return,
    /// A system call (a leaf node).
    Syscall {
        /// System call number.
        nr: u32,
        /// The fd argument, or -1.
        fd: i32,
        /// Return value.
        ret: i64,
    },
}

/// One entry of a thread's trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// Time: entry/return time, or a system call's entry time.
    pub ts_ns: u64,
    /// What happened.
    pub kind: TraceEntryKind,
    /// The call-tree node (for a return, the node returned from).
    pub node: u32,
    /// Stack depth after the entry (calls count themselves, returns do not).
    pub depth: u32,
}

/// Per-thread traces of process `pid`, plus peer addresses of its
/// connect/accept calls by (tid, entry index).
pub struct ThreadTraces {
    /// The process's call-tree nodes.
    pub nodes: NodeTable,
    /// Entries by thread id, in time order.
    pub threads: BTreeMap<u32, Vec<TraceEntry>>,
    /// Peer addresses of connect/accept/recvfrom entries, by (tid, index).
    pub peers: HashMap<(u32, usize), String>,
}

/// Builds the traces of every traced process in `capture`.
pub fn thread_traces(capture: &Capture) -> BTreeMap<u32, ThreadTraces> {
    let sym = Symbolizer::new(capture);
    // Gather per (pid, tid); syscalls sort by their entry time.
    let mut raw: BTreeMap<u32, BTreeMap<u32, Vec<(u64, Event)>>> = BTreeMap::new();
    for event in capture.events().filter_map(Result::ok) {
        let (pid, tid, t) = match &event {
            Event::Entry { rec, .. } => (rec.header.pid, rec.header.tid, rec.header.ts_ns),
            Event::Return(r) => (r.header.pid, r.header.tid, r.header.ts_ns),
            Event::Syscall(s) => (s.header.pid, s.header.tid, s.enter_ns),
            _ => continue,
        };
        raw.entry(pid)
            .or_default()
            .entry(tid)
            .or_default()
            .push((t, event));
    }
    let mut out = BTreeMap::new();
    for (pid, threads) in raw {
        let mut nodes = NodeTable::default();
        let mut site_keys: HashMap<(u64, u32), u32> = HashMap::new();
        let mut sys_keys: HashMap<u32, u32> = HashMap::new();
        let mut peers = HashMap::new();
        let mut traces = BTreeMap::new();
        for (tid, mut events) in threads {
            events.sort_by_key(|(t, _)| *t);
            let mut stack: Vec<(u32, u32, u64)> = Vec::new(); // (node, func_id, call site)
            let mut entries = Vec::with_capacity(events.len());
            for (t, event) in events {
                let parent = stack.last().map_or(NodeTable::ROOT, |f| f.0);
                match event {
                    Event::Entry { rec, .. } => {
                        // A tail call from a function under a uretprobe returns
                        // to the trampoline: its real call site is the caller's.
                        let site = if is_uretprobe_trampoline(rec.call_site) {
                            stack.last().map_or(0, |f| f.2)
                        } else {
                            rec.call_site
                        };
                        let key = *site_keys.entry((site, rec.func_id)).or_insert_with(|| {
                            let site_name = sym
                                .user(pid, site)
                                .map(|l| l.to_string())
                                .unwrap_or_default();
                            nodes.key(NodeKey {
                                site: site_name,
                                callee: capture.function_name(rec.func_id),
                            })
                        });
                        let node = nodes.child(parent, key);
                        stack.push((node, rec.func_id, site));
                        entries.push(TraceEntry {
                            ts_ns: t,
                            kind: TraceEntryKind::Call,
                            node,
                            depth: stack.len() as u32,
                        });
                    }
                    Event::Return(r) => {
                        // Pop to the matching frame; a return with no frame
                        // (the call began before recording) is dropped.
                        let Some(pos) = stack.iter().rposition(|f| f.1 == r.func_id) else {
                            continue;
                        };
                        let node = stack[pos].0;
                        stack.truncate(pos);
                        entries.push(TraceEntry {
                            ts_ns: t,
                            kind: TraceEntryKind::Return,
                            node,
                            depth: stack.len() as u32,
                        });
                    }
                    Event::Syscall(s) => {
                        let key = *sys_keys.entry(s.nr).or_insert_with(|| {
                            nodes.key(NodeKey {
                                site: String::new(),
                                callee: format!("sys:{}", syscall_name(s.nr)),
                            })
                        });
                        let node = nodes.child(parent, key);
                        if matches!(s.nr, nr::CONNECT | nr::ACCEPT | nr::ACCEPT4 | nr::RECVFROM)
                            && let Some(a) = addr_string(&s.addr)
                        {
                            peers.insert((tid, entries.len()), a);
                        }
                        entries.push(TraceEntry {
                            ts_ns: t,
                            kind: TraceEntryKind::Syscall {
                                nr: s.nr,
                                fd: s.fd,
                                ret: s.ret,
                            },
                            node,
                            depth: stack.len() as u32,
                        });
                    }
                    _ => {}
                }
            }
            traces.insert(tid, entries);
        }
        out.insert(
            pid,
            ThreadTraces {
                nodes,
                threads: traces,
                peers,
            },
        );
    }
    out
}
