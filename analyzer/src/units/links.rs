//! Which process holds the other end of a TCP connection, within one
//! capture: a `connect` records the local port the kernel gave it and an
//! `accept` its new socket's peer port, the same number
//! ([`Syscall::conn_port`]), so the two ends pair up. Only for traced
//! processes of the same capture; connections whose connect came from a
//! recorder older than the field (local port 0), Unix sockets and UDP have
//! no pair.

use rustc_hash::FxHashMap;
use tracer_common::{
    record::{Pod as _, Syscall, kind},
    syscall::nr,
};

use crate::decode::Capture;

/// One end of a connection: a process's descriptor from when it was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct End {
    /// Process id.
    pub pid: u32,
    /// Descriptor.
    pub fd: i32,
    /// When the descriptor was made (connect or accept entry), ns.
    pub since_ns: u64,
}

/// The connections of a capture whose two ends are both traced, and when
/// each process closed each descriptor.
#[derive(Clone, Debug, Default)]
pub struct Links {
    /// Pairs of ends.
    pairs: Vec<(End, End)>,
    /// By (pid, descriptor): the connections made on it, (its end, the
    /// other), in the order made. A lookup per anomalous unit must not
    /// scan every connection of a long capture.
    by_fd: FxHashMap<(u32, i32), Vec<(End, End)>>,
    /// close/shutdown calls by (pid, fd): (time, thread), in time order.
    closes: FxHashMap<(u32, i32), Vec<(u64, u32)>>,
}

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

struct Connect {
    end: End,
    local_port: u16,
    dest_port: u16,
}

struct Accept {
    end: End,
    listen_fd: i32,
    peer_port: u16,
}

impl Links {
    /// Pairs the connects and accepts of `capture`.
    pub fn of(capture: &Capture) -> Self {
        let mut connects: Vec<Connect> = Vec::new();
        let mut accepts: Vec<Accept> = Vec::new();
        // (pid, fd) -> port it was bound to (the last bind).
        let mut bound: FxHashMap<(u32, i32), u16> = FxHashMap::default();
        let mut closes: FxHashMap<(u32, i32), Vec<(u64, u32)>> = FxHashMap::default();
        for (header, bytes) in super::trace::raw_records(capture) {
            if header.kind != kind::SYSCALL {
                continue;
            }
            let Some(s) = Syscall::read_from(bytes) else {
                continue;
            };
            let inet = matches!(s.addr.family, AF_INET | AF_INET6);
            let pid = header.pid;
            match s.nr {
                nr::CONNECT if (s.ret == 0 || s.ret == -115) && inet && s.conn_port != 0 => {
                    connects.push(Connect {
                        end: End {
                            pid,
                            fd: s.fd,
                            since_ns: s.enter_ns,
                        },
                        local_port: s.conn_port,
                        dest_port: u16::from_be(s.addr.port_be),
                    });
                }
                nr::ACCEPT | nr::ACCEPT4 if s.ret >= 0 && (s.conn_port != 0 || inet) => {
                    accepts.push(Accept {
                        end: End {
                            pid,
                            fd: s.ret as i32,
                            since_ns: s.enter_ns,
                        },
                        listen_fd: s.fd,
                        // The caller's address buffer, where it passed
                        // none (or an older recorder): the same port.
                        peer_port: if s.conn_port != 0 {
                            s.conn_port
                        } else {
                            u16::from_be(s.addr.port_be)
                        },
                    });
                }
                nr::BIND if s.ret == 0 && inet => {
                    bound.insert((pid, s.fd), u16::from_be(s.addr.port_be));
                }
                nr::CLOSE | nr::SHUTDOWN => {
                    closes
                        .entry((pid, s.fd))
                        .or_default()
                        .push((s.enter_ns, header.tid));
                }
                _ => {}
            }
        }
        // An accept pairs with the connect whose local port it names as
        // its peer and, where the listening socket's bind was recorded,
        // whose destination is that port; of several (a port reused over a
        // long capture), the one closest in time.
        let mut by_port: FxHashMap<u16, Vec<usize>> = FxHashMap::default();
        for (i, c) in connects.iter().enumerate() {
            by_port.entry(c.local_port).or_default().push(i);
        }
        let mut pairs = Vec::new();
        for a in &accepts {
            let listen_port = bound.get(&(a.end.pid, a.listen_fd)).copied();
            let best = by_port
                .get(&a.peer_port)
                .into_iter()
                .flatten()
                .map(|&i| &connects[i])
                .filter(|c| listen_port.is_none_or(|p| p == c.dest_port))
                .min_by_key(|c| c.end.since_ns.abs_diff(a.end.since_ns));
            if let Some(c) = best {
                pairs.push((c.end, a.end));
            }
        }
        Self::from_pairs(pairs, closes)
    }

    fn from_pairs(
        pairs: Vec<(End, End)>,
        mut closes: FxHashMap<(u32, i32), Vec<(u64, u32)>>,
    ) -> Self {
        for list in closes.values_mut() {
            list.sort_unstable();
        }
        let mut by_fd: FxHashMap<(u32, i32), Vec<(End, End)>> = FxHashMap::default();
        for &(a, b) in &pairs {
            by_fd.entry((a.pid, a.fd)).or_default().push((a, b));
            by_fd.entry((b.pid, b.fd)).or_default().push((b, a));
        }
        for list in by_fd.values_mut() {
            list.sort_unstable_by_key(|(mine, _)| mine.since_ns);
        }
        Self {
            pairs,
            by_fd,
            closes,
        }
    }

    /// The other end of descriptor `fd` of process `pid` as it was at
    /// `at_ns` (the latest connection made on that descriptor before then).
    pub fn other_end(&self, pid: u32, fd: i32, at_ns: u64) -> Option<End> {
        self.by_fd
            .get(&(pid, fd))?
            .iter()
            .rev()
            .find(|(mine, _)| mine.since_ns <= at_ns)
            .map(|(_, other)| *other)
    }

    /// The first close (or shutdown) of `end`'s descriptor by its process
    /// after it was made: (time, thread).
    pub fn closed(&self, end: &End) -> Option<(u64, u32)> {
        self.closes
            .get(&(end.pid, end.fd))?
            .iter()
            .find(|(t, _)| *t >= end.since_ns)
            .copied()
    }

    /// The first close (or shutdown) of either end of a paired connection
    /// before `until_ns`: (time, process, thread).
    pub fn first_close(&self, until_ns: u64) -> Option<(u64, u32, u32)> {
        self.pairs
            .iter()
            .flat_map(|(a, b)| [a, b])
            .filter_map(|e| self.closed(e).map(|(t, tid)| (t, e.pid, tid)))
            .filter(|(t, _, _)| *t < until_ns)
            .min()
    }

    /// Links from their parts (tests elsewhere in the crate): pairs of
    /// ends, and (process, descriptor, time, thread) of each close.
    #[cfg(test)]
    pub(crate) fn from_parts(pairs: Vec<(End, End)>, closes: &[(u32, i32, u64, u32)]) -> Self {
        let mut map: FxHashMap<(u32, i32), Vec<(u64, u32)>> = FxHashMap::default();
        for &(pid, fd, t, tid) in closes {
            map.entry((pid, fd)).or_default().push((t, tid));
        }
        Self::from_pairs(pairs, map)
    }

    /// Pairs found.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether no pair was found.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(pid: u32, fd: i32, since_ns: u64) -> End {
        End { pid, fd, since_ns }
    }

    #[test]
    fn each_end_finds_the_other_and_its_close() {
        let links = Links::from_parts(
            vec![
                // fd 4 of process 10 reused later for another connection
                // (listed first: the order found must not matter).
                (end(10, 4, 500), end(30, 5, 505)),
                (end(10, 4, 100), end(20, 7, 110)),
            ],
            &[(20, 7, 300, 21), (30, 5, 50, 30), (30, 5, 700, 31)],
        );
        assert_eq!(links.other_end(10, 4, 200), Some(end(20, 7, 110)));
        assert_eq!(links.other_end(20, 7, 200), Some(end(10, 4, 100)));
        assert_eq!(links.other_end(10, 4, 600), Some(end(30, 5, 505)));
        assert_eq!(links.other_end(10, 4, 50), None, "not yet connected");
        assert_eq!(links.other_end(10, 5, 600), None);
        assert_eq!(links.closed(&end(20, 7, 110)), Some((300, 21)));
        // A close of the same number before the connection was made is
        // another descriptor's.
        assert_eq!(links.closed(&end(30, 5, 505)), Some((700, 31)));
        assert_eq!(links.first_close(1000), Some((300, 20, 21)));
        assert_eq!(links.first_close(300), None, "only closes before the time");
    }
}
