//! Connection identity (000 §2.3): a connection is known by the set of call
//! stacks to the calls that established it (bind, listen, connect, accept),
//! not by addresses or ports, so models carry over to other hosts and ports.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use tracer_common::syscall::nr;

use super::trace::{NodeTable, TraceEntry, TraceEntryKind};

/// The identity of a connection: its establishing call stacks, sorted and
/// joined; `unknown` for a descriptor opened before recording began.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConnectionKey(pub String);

impl ConnectionKey {
    /// The key of descriptors whose establishment was not recorded.
    pub fn unknown() -> Self {
        Self("unknown".into())
    }
}

#[derive(Clone, Debug, Default)]
struct Socket {
    stacks: BTreeSet<String>,
    peer: Option<String>,
}

/// Entries by (thread id, index in that thread's trace).
pub(crate) type ByEntry<T> = HashMap<(u32, usize), T>;

/// What the connection tracker knows of one receive.
#[derive(Clone, Debug)]
pub(crate) struct ReceiveInfo {
    pub(crate) key: ConnectionKey,
    pub(crate) peer: Option<String>,
}

/// Walks a process's socket calls in time order across its threads (the fd
/// table is per process) and returns, for each receive-class entry
/// `(tid, index)`, its connection; and the establishing stacks seen, by entry.
pub(crate) fn track(
    nodes: &NodeTable,
    threads: &std::collections::BTreeMap<u32, Vec<TraceEntry>>,
    peers: &HashMap<(u32, usize), String>,
) -> (ByEntry<ReceiveInfo>, ByEntry<String>) {
    let mut calls: Vec<(u64, u32, usize, u32, i32, i64, u32)> = Vec::new();
    for (tid, entries) in threads {
        for (i, e) in entries.iter().enumerate() {
            if let TraceEntryKind::Syscall { nr, fd, ret } = e.kind {
                calls.push((e.ts_ns, *tid, i, nr, fd, ret, e.node));
            }
        }
    }
    calls.sort_by_key(|c| c.0);
    let mut sockets: HashMap<i32, Socket> = HashMap::new();
    let mut receives = HashMap::new();
    let mut establishing = HashMap::new();
    for (_, tid, i, call, fd, ret, node) in calls {
        let path = || nodes.path_string(node);
        match call {
            nr::SOCKET if ret >= 0 => {
                sockets.insert(ret as i32, Socket::default());
            }
            nr::BIND | nr::LISTEN if ret == 0 => {
                let p = path();
                establishing.insert((tid, i), p.clone());
                sockets.entry(fd).or_default().stacks.insert(p);
            }
            nr::CONNECT if ret == 0 || ret == -115 => {
                let p = path();
                establishing.insert((tid, i), p.clone());
                let s = sockets.entry(fd).or_default();
                s.stacks.insert(p);
                s.peer = peers.get(&(tid, i)).cloned();
            }
            nr::ACCEPT | nr::ACCEPT4 if ret >= 0 => {
                let p = path();
                establishing.insert((tid, i), p.clone());
                let mut s = sockets.get(&fd).cloned().unwrap_or_default();
                s.stacks.insert(p);
                s.peer = peers.get(&(tid, i)).cloned();
                sockets.insert(ret as i32, s);
                receives.insert((tid, i), info(sockets.get(&fd)));
            }
            nr::CLOSE => {
                sockets.remove(&fd);
            }
            nr::READ | nr::READV | nr::RECVFROM | nr::RECVMSG | nr::RECVMMSG => {
                receives.insert((tid, i), info(sockets.get(&fd)));
            }
            _ => {}
        }
    }
    (receives, establishing)
}

fn info(socket: Option<&Socket>) -> ReceiveInfo {
    match socket {
        Some(s) if !s.stacks.is_empty() => ReceiveInfo {
            key: ConnectionKey(s.stacks.iter().cloned().collect::<Vec<_>>().join(" | ")),
            peer: s.peer.clone(),
        },
        _ => ReceiveInfo {
            key: ConnectionKey::unknown(),
            peer: socket.and_then(|s| s.peer.clone()),
        },
    }
}
