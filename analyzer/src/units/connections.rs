//! Connection identity (000 §2.3): a connection is known by the set of call
//! stacks to the calls that established it (bind, listen, connect, accept),
//! not by addresses or ports, so models carry over to other hosts and ports.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
};

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use tracer_common::syscall::nr;

use super::trace::{NodeTable, TraceEntry, TraceEntryKind};

/// The identity of a connection: its establishing call stacks, sorted and
/// joined; `unknown` for a descriptor opened before recording began.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConnectionKey(pub Arc<str>);

impl ConnectionKey {
    /// The text of [`ConnectionKey::unknown`].
    pub const UNKNOWN: &str = "unknown";

    /// The key of descriptors whose establishment was not recorded.
    pub fn unknown() -> Self {
        Self(Self::UNKNOWN.into())
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Clone, Debug, Default)]
struct Socket {
    stacks: BTreeSet<String>,
    peer: Option<Arc<str>>,
    /// What receives on it are told, built once per change of the above.
    info: Option<ReceiveInfo>,
}

impl Socket {
    fn info(&mut self) -> ReceiveInfo {
        if let Some(i) = &self.info {
            return i.clone();
        }
        let i = info(Some(self));
        self.info = Some(i.clone());
        i
    }
}

/// Entries by (thread id, index in that thread's trace).
pub(crate) type ByEntry<T> = FxHashMap<(u32, usize), T>;

/// The receives of one thread, by entry index: a dense slot table, as
/// decomposition asks about every entry in order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Receives {
    slot: Vec<u32>,
    infos: Vec<ReceiveInfo>,
}

impl Receives {
    const NONE: u32 = u32::MAX;

    /// No receives among `n` entries.
    pub(crate) fn new(n: usize) -> Self {
        Self {
            slot: vec![Self::NONE; n],
            infos: Vec::new(),
        }
    }

    /// Entry `i` is a receive (or accept) on the connection `info`.
    pub(crate) fn insert(&mut self, i: usize, info: ReceiveInfo) {
        if i >= self.slot.len() {
            self.slot.resize(i + 1, Self::NONE);
        }
        self.slot[i] = self.infos.len() as u32;
        self.infos.push(info);
    }

    /// What entry `i` received from, if it is a receive.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&ReceiveInfo> {
        match self.slot.get(i) {
            Some(&s) if s != Self::NONE => self.infos.get(s as usize),
            _ => None,
        }
    }

    /// Whether entry `i` is a receive.
    #[inline]
    pub(crate) fn contains(&self, i: usize) -> bool {
        self.slot.get(i).is_some_and(|&s| s != Self::NONE)
    }
}

/// What the connection tracker knows of one receive (cheap to clone).
#[derive(Clone, Debug)]
pub(crate) struct ReceiveInfo {
    pub(crate) key: ConnectionKey,
    pub(crate) peer: Option<Arc<str>>,
}

/// Walks a process's socket calls in time order across its threads (the fd
/// table is per process) and returns, for each receive-class entry
/// `(tid, index)`, its connection; and the establishing stacks seen, by entry.
pub(crate) fn track(
    nodes: &NodeTable,
    threads: &std::collections::BTreeMap<u32, Vec<TraceEntry>>,
    peers: &HashMap<(u32, usize), String>,
    pairs: &HashMap<(u32, usize), (i32, i32)>,
) -> (FxHashMap<u32, Receives>, ByEntry<String>) {
    // System calls of all threads in time order: (time, thread, entry index).
    let threads: Vec<(u32, &[TraceEntry])> =
        threads.iter().map(|(t, e)| (*t, e.as_slice())).collect();
    let mut calls: Vec<(u64, u32, u32)> = Vec::new();
    for (k, (_, entries)) in threads.iter().enumerate() {
        for (i, e) in entries.iter().enumerate() {
            if matches!(e.kind, TraceEntryKind::Syscall { .. }) {
                calls.push((e.ts_ns, k as u32, i as u32));
            }
        }
    }
    if !calls.is_sorted_by_key(|c| c.0) {
        calls.sort_by_key(|c| c.0);
    }
    let mut sockets: FxHashMap<i32, Socket> = FxHashMap::default();
    let mut receives: Vec<Receives> = threads
        .iter()
        .map(|(_, entries)| Receives::new(entries.len()))
        .collect();
    let mut establishing = ByEntry::default();
    let unknown = info(None);
    for (_, k, i) in calls {
        let (tid, entries) = threads[k as usize];
        let i = i as usize;
        let e = &entries[i];
        let TraceEntryKind::Syscall { nr: call, fd, ret } = e.kind else {
            continue;
        };
        let call = u32::from(call);
        let node = e.node;
        let receive = &mut receives[k as usize];
        let path = || nodes.path_string(node);
        match call {
            nr::SOCKET if ret >= 0 => {
                sockets.insert(ret as i32, Socket::default());
            }
            // Both ends of a socketpair are known by the stack that made it.
            nr::SOCKETPAIR if ret == 0 => {
                let p = path();
                establishing.insert((tid, i), p.clone());
                if let Some((a, b)) = pairs.get(&(tid, i)) {
                    for fd in [*a, *b] {
                        let mut s = Socket::default();
                        s.stacks.insert(p.clone());
                        sockets.insert(fd, s);
                    }
                }
            }
            nr::BIND | nr::LISTEN if ret == 0 => {
                let p = path();
                establishing.insert((tid, i), p.clone());
                let s = sockets.entry(fd).or_default();
                s.stacks.insert(p);
                s.info = None;
            }
            nr::CONNECT if ret == 0 || ret == -115 => {
                let p = path();
                establishing.insert((tid, i), p.clone());
                let s = sockets.entry(fd).or_default();
                s.stacks.insert(p);
                s.peer = peers.get(&(tid, i)).map(|p| Arc::from(p.as_str()));
                s.info = None;
            }
            nr::ACCEPT | nr::ACCEPT4 if ret >= 0 => {
                let p = path();
                establishing.insert((tid, i), p.clone());
                let mut s = sockets.get(&fd).cloned().unwrap_or_default();
                s.stacks.insert(p);
                s.peer = peers.get(&(tid, i)).map(|p| Arc::from(p.as_str()));
                s.info = None;
                sockets.insert(ret as i32, s);
                let listener = sockets
                    .get_mut(&fd)
                    .map_or_else(|| unknown.clone(), Socket::info);
                receive.insert(i, listener);
            }
            nr::CLOSE => {
                sockets.remove(&fd);
            }
            nr::READ | nr::READV | nr::RECVFROM | nr::RECVMSG | nr::RECVMMSG => {
                let r = sockets
                    .get_mut(&fd)
                    .map_or_else(|| unknown.clone(), Socket::info);
                receive.insert(i, r);
            }
            _ => {}
        }
    }
    let receives = threads.iter().map(|(tid, _)| *tid).zip(receives).collect();
    (receives, establishing)
}

fn info(socket: Option<&Socket>) -> ReceiveInfo {
    match socket {
        Some(s) if !s.stacks.is_empty() => ReceiveInfo {
            key: ConnectionKey(
                s.stacks
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" | ")
                    .into(),
            ),
            peer: s.peer.clone(),
        },
        _ => ReceiveInfo {
            key: ConnectionKey::unknown(),
            peer: socket.and_then(|s| s.peer.clone()),
        },
    }
}
