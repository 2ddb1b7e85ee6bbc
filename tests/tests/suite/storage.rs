//! The kernel's view of storage: file I/O system calls and block requests
//! of real processes on loop-device disks, and the peer metrics built on
//! them.

use std::{collections::BTreeMap, path::PathBuf};

use analyzer::{
    Event,
    decode::{nul_padded, syscall_name},
    peers::{self, CaptureSource, Metric, PeersConfig},
};
use tests::{
    capture, events, fixture, privileged,
    sandbox::{BlkioCgroup, LoopDisk},
    tracer,
};
use tracer_common::kernel::{BlockIo, FileIo, block_op};

/// Every file I/O call of a process on a file is counted, with its bytes
/// and device; its block requests are its own; calls on pipes are not file
/// I/O; the device is named with where it is mounted.
#[test]
fn file_and_block_io_on_a_loop_disk_are_counted_exactly() {
    if !privileged() {
        return;
    }
    let fileio = fixture("fileio", None);
    let disk = LoopDisk::new(64);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("f.capture");
    let run = tracer(&[
        "record",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        fileio.to_str().expect("utf8"),
        "once",
        disk.mount.to_str().expect("utf8"),
        "64",
        "direct",
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "done", "its stdout is a pipe");
    let cap = capture(&out);
    let all = events(&cap);
    let pid = all
        .iter()
        .find_map(|e| match e {
            Event::Lifecycle(l) => Some(l.header.pid),
            _ => None,
        })
        .expect("the fixture's exec");
    let files: Vec<FileIo> = all
        .iter()
        .filter_map(|e| match e {
            Event::FileIo(f) if f.header.pid == pid => Some(*f),
            _ => None,
        })
        .collect();
    // (call, device) → (calls, bytes), over every interval.
    let mut by_call: BTreeMap<(String, u32), (u64, u64)> = BTreeMap::new();
    for f in &files {
        let e = by_call.entry((syscall_name(f.nr), f.dev)).or_default();
        e.0 += f.calls;
        e.1 += f.bytes;
    }
    let dev = disk.kernel_dev();
    let on_disk = |call: &str| by_call.get(&(call.to_string(), dev)).copied();
    assert_eq!(on_disk("pwrite64"), Some((64, 64 * 4096)), "{by_call:?}");
    assert_eq!(on_disk("pread64"), Some((64, 64 * 4096)), "{by_call:?}");
    assert_eq!(on_disk("fsync"), Some((1, 0)), "{by_call:?}");
    // Path-based calls have no device.
    assert!(
        by_call.contains_key(&("unlink".to_string(), 0)),
        "{by_call:?}"
    );
    // "done\n" went to a pipe: not file I/O.
    assert!(
        !by_call.keys().any(|(call, _)| call == "write"),
        "{by_call:?}"
    );
    let time: u64 = files
        .iter()
        .filter(|f| f.dev == dev && syscall_name(f.nr) == "pread64")
        .map(|f| f.time_ns)
        .sum();
    assert!(time > 64 * 1000, "every direct read takes time: {time} ns");
    // Its direct reads and writes are block requests submitted by it.
    let blocks: Vec<BlockIo> = all
        .iter()
        .filter_map(|e| match e {
            Event::BlockIo(b) if b.dev == dev && b.header.pid == pid => Some(*b),
            _ => None,
        })
        .collect();
    let bytes = |op: u32| -> u64 { blocks.iter().filter(|b| b.op == op).map(|b| b.bytes).sum() };
    // The 64 direct reads, and the file system's metadata reads made for
    // its lookups (a few blocks).
    let read = bytes(block_op::READ);
    assert!(
        (64 * 4096..64 * 4096 + 16 * 4096).contains(&read),
        "{read}: {blocks:?}"
    );
    assert!(bytes(block_op::WRITE) >= 64 * 4096, "{blocks:?}");
    assert!(
        blocks
            .iter()
            .all(|b| b.queue_ns >= b.service_ns && b.service_ns > 0)
    );
    let name = all
        .iter()
        .find_map(|e| match e {
            Event::DeviceName(d) if d.dev == dev => Some(*d),
            _ => None,
        })
        .expect("the disk is named");
    assert_eq!(nul_padded(&name.name), disk.dev.trim_start_matches("/dev/"));
    assert_eq!(nul_padded(&name.mount), disk.mount.to_str().expect("utf8"));
}

/// Three processes read from their own disks; one disk is throttled by
/// the kernel (blkio): the `file-latency` peer metric shows that one slower
/// than its peers, and each one's block requests are its own.
#[test]
fn a_throttled_disk_shows_in_file_latency_against_unthrottled_peers() {
    if !privileged() {
        return;
    }
    let Some(cgroup) = BlkioCgroup::new("slow") else {
        return;
    };
    let fileio = fixture("fileio", None);
    let disks: Vec<LoopDisk> = (0..3).map(|_| LoopDisk::new(64)).collect();
    // 64 KiB reads at 2 MiB/s: about 30 ms each, against well under 1 ms.
    cgroup.throttle_reads(disks[1].devno, 2 << 20);
    let dir = tempfile::tempdir().expect("tempdir");
    let outs: Vec<PathBuf> = (0..3)
        .map(|i| dir.path().join(format!("server{i}.capture")))
        .collect();
    let runs: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..3)
            .map(|i| {
                let (fileio, disk, out) = (&fileio, &disks[i], &outs[i]);
                let join = if i == 1 {
                    format!("echo $$ > {} && ", cgroup.procs().display())
                } else {
                    String::new()
                };
                let script = format!(
                    "{join}exec {} reads {} 5 direct",
                    fileio.display(),
                    disk.mount.display()
                );
                scope.spawn(move || {
                    tracer(&[
                        "record",
                        "--sample-hz",
                        "0",
                        "-o",
                        out.to_str().expect("utf8"),
                        "--",
                        "sh",
                        "-c",
                        &script,
                    ])
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("tracer thread"))
            .collect()
    });
    for run in &runs {
        assert!(run.status.success(), "{}", run.stderr);
    }
    let caps: Vec<_> = outs.iter().map(|p| capture(p)).collect();
    let labels = ["server0", "server1", "server2"];
    let sources: Vec<CaptureSource<'_>> = caps
        .iter()
        .zip(&outs)
        .zip(labels)
        .map(|((capture, path), label)| CaptureSource {
            path,
            label,
            capture,
        })
        .collect();
    let cfg = PeersConfig {
        window_ns: 2_000_000_000,
        shift_ns: 1_000_000_000,
        metrics: vec![Metric::FileLatency, Metric::BlockRequests],
        // The throttled reader makes few calls: keep means of any number.
        min_calls: 0.0,
        ..PeersConfig::default()
    };
    let features = peers::extract("throttle", &sources, &cfg).expect("features");
    let w = features.windows(&cfg);
    assert!(!w.starts.is_empty(), "a window fits in 5 s of reading");
    let latency = &w.metrics[0];
    let read = latency
        .components
        .iter()
        .position(|c| c == "read")
        .expect("reads measured");
    // Mean per server over the windows, µs per read.
    let mean = |s: usize| {
        latency.vectors.iter().map(|v| v[s][read]).sum::<f64>() / latency.vectors.len() as f64
    };
    let (fast0, slow, fast2) = (mean(0), mean(1), mean(2));
    assert!(
        slow > 5.0 * fast0.max(fast2) && slow > 10_000.0,
        "throttled {slow:.0} us a read, peers {fast0:.0} and {fast2:.0}"
    );
    // Block reads went to each server: by its own process, on its own disk.
    let requests = &w.metrics[1];
    let read = requests
        .components
        .iter()
        .position(|c| c == "read")
        .expect("block reads");
    for s in 0..3 {
        let n: f64 = requests.vectors.iter().map(|v| v[s][read]).sum();
        assert!(n > 10.0, "server{s}: {n} block reads");
    }
}

/// A descriptor number that named a file and then a pipe, or the reverse,
/// through close, dup2, close_range and exec (the `fdreuse` fixture): its
/// calls count as file I/O exactly while it names a file. The recorder
/// keeps what each number is between calls; a class kept past the file
/// would count the pipe's reads as file reads, or miss the file's.
#[test]
fn a_reused_descriptor_number_counts_as_what_it_names_now() {
    if !privileged() {
        return;
    }
    let fdreuse = fixture("fdreuse", None);
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("r.capture");
    let run = tracer(&[
        "record",
        "--sample-hz",
        "0",
        "-o",
        out.to_str().expect("utf8"),
        "--",
        fdreuse.to_str().expect("utf8"),
        dir.path().to_str().expect("utf8"),
    ]);
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(run.stdout.trim(), "done", "{}", run.stderr);
    let all = events(&capture(&out));
    let pid = all
        .iter()
        .find_map(|e| match e {
            Event::Lifecycle(l) => Some(l.header.pid),
            _ => None,
        })
        .expect("the fixture's exec");
    let mut by_call: BTreeMap<String, u64> = BTreeMap::new();
    for e in &all {
        if let Event::FileIo(f) = e
            && f.header.pid == pid
        {
            *by_call.entry(syscall_name(f.nr)).or_default() += f.calls;
        }
    }
    // 8 + 4 + 2 + 1 on the file before its number went to a pipe.
    assert_eq!(by_call.get("writev"), Some(&15), "{by_call:?}");
    // Only phase 2's, on the file that took a pipe's number; none of the
    // 26 on pipes that took a file's.
    assert_eq!(by_call.get("readv"), Some(&8), "{by_call:?}");
}
