//! Socket system calls on the loopback client/server fixture.

use analyzer::{
    Event,
    decode::{addr_string, syscall_name},
};
use tests::{capture, events, fixture, privileged, record_python, tracer};
use tracer_common::record::{SYSCALL_UNFINISHED, Syscall};

/// The capture's system call records, in order.
fn syscalls(cap: &analyzer::Capture) -> Vec<Syscall> {
    events(cap)
        .into_iter()
        .filter_map(|e| match e {
            Event::Syscall(s) => Some(s),
            _ => None,
        })
        .collect()
}

/// connect/accept carry the right addresses; byte counts add up.
#[test]
fn addresses_and_byte_counts_match_the_fixture() {
    if !privileged() {
        return;
    }
    let net = fixture("net", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("s.capture");
    let port_file = dir.path().join("port");
    let run = tracer(&[
        "record",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        net.to_str().expect("utf8"),
        port_file.to_str().expect("utf8"),
        "7",
        "3000",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let port: u16 = std::fs::read_to_string(&port_file)
        .expect("port file")
        .trim()
        .parse()
        .expect("port");
    let cap = capture(&out);
    let calls = syscalls(&cap);
    let named = |name: &str| {
        calls
            .iter()
            .filter(move |s| syscall_name(s.nr) == name)
            .copied()
            .collect::<Vec<_>>()
    };
    let connect = named("connect");
    assert_eq!(connect.len(), 1);
    assert_eq!(
        addr_string(&connect[0].addr),
        Some(format!("127.0.0.1:{port}"))
    );
    assert_eq!(connect[0].ret, 0);
    let client = connect[0].header.pid;
    let accept = named("accept");
    assert_eq!(accept.len(), 1);
    let server = accept[0].header.pid;
    assert_ne!(client, server);
    let peer = addr_string(&accept[0].addr).expect("accept has the peer address");
    assert!(
        peer.starts_with("127.0.0.1:") && !peer.ends_with(&format!(":{port}")),
        "{peer}"
    );
    let bind = named("bind");
    assert_eq!(bind.len(), 1);
    let written: i64 = named("write")
        .iter()
        .filter(|s| s.header.pid == client)
        .map(|s| s.ret)
        .sum();
    assert_eq!(written, 7 * 3000);
    let read: i64 = named("read")
        .iter()
        .filter(|s| s.header.pid == server && s.fd == accept[0].ret as i32)
        .map(|s| s.ret)
        .sum();
    assert_eq!(read, 7 * 3000);
    let reply = named("sendto");
    assert_eq!(reply.len(), 1);
    assert_eq!(reply[0].ret, format!("got {}", 7 * 3000).len() as i64);
    assert!(named("poll").iter().all(|s| s.header.pid == server) && !named("poll").is_empty());
    assert_eq!(named("shutdown").len(), 1);
    assert!(named("listen").len() == 1 && named("socket").len() == 2);
    // Only socket descriptors: the fixture's stdout writes are not recorded.
    assert!(calls.iter().all(|s| s.fd != 1), "stdout is not a socket");
}

/// Both ends of a socketpair are sockets: reads and writes on them are
/// recorded in the parent and in the forked child, and the record names the
/// two descriptors.
#[test]
fn socketpair_ends_are_traced() {
    if !privileged() {
        return;
    }
    let pair = fixture("pair", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("p.capture");
    let run = tracer(&[
        "record",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        pair.to_str().expect("utf8"),
        "5",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let cap = capture(&out);
    let calls = syscalls(&cap);
    let made: Vec<_> = calls
        .iter()
        .filter(|s| syscall_name(s.nr) == "socketpair")
        .collect();
    assert_eq!(made.len(), 1, "{calls:?}");
    let (a, b) = (made[0].arg as u32 as i32, (made[0].arg >> 32) as i32);
    assert!(a >= 0 && b >= 0 && a != b, "{:?}", made[0]);
    let writes: i64 = calls
        .iter()
        .filter(|s| syscall_name(s.nr) == "write" && s.fd == b)
        .map(|s| s.ret)
        .sum();
    let reads: Vec<i64> = calls
        .iter()
        .filter(|s| syscall_name(s.nr) == "read" && s.fd == a)
        .map(|s| s.ret)
        .collect();
    assert_eq!(writes, 5 * 16, "the child's writes");
    assert_eq!(reads.iter().sum::<i64>(), 5 * 16, "{reads:?}");
    assert_eq!(reads.last(), Some(&0), "the parent reads EOF: {reads:?}");
}

/// A child's descriptor is its parent's socket only if it was one at the
/// fork: a socket the parent made afterwards may share the number of
/// something else in the child (an epoll descriptor, as a forked Python
/// worker's selector has), whose close is no socket call.
#[test]
fn a_parents_later_socket_does_not_make_the_childs_descriptor_one() {
    if !privileged() {
        return;
    }
    let pair = fixture("pair", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("reuse.capture");
    let run = tracer(&[
        "record",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        pair.to_str().expect("utf8"),
        "reuse",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    let number = |what: &str| -> i32 {
        run.stdout
            .lines()
            .find_map(|l| l.strip_prefix(what))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {what}in {:?}", run.stdout))
    };
    let fd = number("socket ");
    assert_eq!(fd, number("epoll "), "the fixture reuses the number");
    let cap = capture(&out);
    let calls = syscalls(&cap);
    let parent = calls
        .iter()
        .find(|s| syscall_name(s.nr) == "socket")
        .map(|s| s.header.pid)
        .expect("the parent's socket is recorded");
    let closes: Vec<_> = calls
        .iter()
        .filter(|s| syscall_name(s.nr) == "close" && s.fd == fd)
        .map(|s| s.header.pid)
        .collect();
    assert_eq!(closes, [parent], "only the parent closed a socket {fd}");
}

/// A thread whose last socket call returned and that then waits in a call
/// we do not trace (a sleep) when recording stops: its finished calls stay
/// finished, none comes back as a call in progress. The eBPF side keeps
/// each thread's last call, marked done, until the thread exits: read back
/// as in progress, it would be a call from time 0 to the stop.
#[test]
fn a_finished_call_is_not_in_progress_at_the_stop() {
    if !privileged() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cap = record_python(
        &dir.path().join("sleeper.capture"),
        "2s",
        "import socket, time\na, b = socket.socketpair()\na.send(b'x')\nb.recv(1)\ntime.sleep(8)",
    );
    let calls = syscalls(&cap);
    let finished = calls
        .iter()
        .filter(|s| s.flags & SYSCALL_UNFINISHED == 0)
        .count();
    assert!(finished >= 2, "the send and the receive: {calls:?}");
    let start = cap.header.clock.monotonic_ns;
    let unfinished: Vec<&Syscall> = calls
        .iter()
        .filter(|s| s.flags & SYSCALL_UNFINISHED != 0)
        .collect();
    assert!(
        unfinished.iter().all(|s| s.enter_ns >= start),
        "only calls that began while recording: {unfinished:?}"
    );
    assert!(
        unfinished.is_empty(),
        "the sleeper is in no socket call: {unfinished:?}"
    );
}
