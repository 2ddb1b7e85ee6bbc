//! GlusterFS: one node per server namespace, each a `glusterd` with one brick.
//!
//! A host has one `/var/lib/glusterd`, `/run/gluster` and glusterd socket;
//! each node's glusterd runs in a mount namespace of its own (the one `ip
//! netns exec` makes) with private directories bind-mounted over those, so
//! four nodes share a kernel as four machines would share nothing. The CLI
//! talks to node 1's glusterd from inside its namespaces (`nsenter`).
//!
//! A *disperse* volume, 3 data + 1 redundancy bricks: like PVFS's striping in
//! the paper, every write is split into fragments written to all four bricks
//! in lock-step, so the four servers are peers doing the same work (a
//! distribute volume puts each file on one brick). Reads need 3 of 4
//! fragments; `disperse.read-policy round-robin` spreads them over all bricks
//! instead of pinning each file to the same three. `performance.strict-o-
//! direct` passes the workloads' `O_DIRECT` through to the bricks, so their
//! I/O reaches the disks instead of the page cache, where disk faults could
//! not touch it.

use std::{
    fs,
    path::{Path, PathBuf},
};

use super::{
    Cluster, FsError, Result, SERVERS, Server, bounded, io_err, is_mounted, output, sh, wait_for,
};

/// The volume's name.
pub const VOLUME: &str = "eftfs";

/// One node's private state directories and glusterd.
struct Node {
    pidfile: PathBuf,
    sockfile: PathBuf,
}

/// `gluster --mode=script ARGS` against node `node`'s glusterd.
fn cli(pid: u32, node: &Node, args: &[&str]) -> Result<String> {
    let sock = format!("--glusterd-sock={}", node.sockfile.display());
    let target = pid.to_string();
    let mut all = vec![
        "-t",
        target.as_str(),
        "-m",
        "-n",
        "gluster",
        "--mode=script",
        sock.as_str(),
    ];
    all.extend_from_slice(args);
    output(bounded(60, None, "nsenter", &all))
}

fn read_pid(path: &Path) -> Option<u32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Starts the nodes, builds and starts the volume, mounts it.
pub(super) fn start(cluster: &mut Cluster, disks: &[(String, PathBuf)]) -> Result<()> {
    if !Path::new("/run/gluster").is_dir() {
        fs::create_dir_all("/run/gluster").map_err(io_err(Path::new("/run/gluster")))?;
    }
    let mut nodes = Vec::new();
    let mut bricks = Vec::new();
    for (i, (_, mnt)) in disks.iter().enumerate() {
        let dir = cluster.server_dir(i);
        let (lib, run, log) = (dir.join("lib"), dir.join("run"), dir.join("log"));
        for d in [&lib, &run, &log] {
            fs::create_dir_all(d).map_err(io_err(d))?;
        }
        let brick = mnt.join("brick");
        fs::create_dir_all(&brick).map_err(io_err(&brick))?;
        bricks.push(brick);
        let node = Node {
            pidfile: dir.join("glusterd.pid"),
            sockfile: dir.join("glusterd.socket"),
        };
        let script = format!(
            "mount --bind '{lib}' /var/lib/glusterd && mount --bind '{run}' /run/gluster && \
             mount --bind '{log}' /var/log/glusterfs && \
             exec glusterd -p '{pid}' --xlator-option '*.glusterd-sockfile={sock}'",
            lib = lib.display(),
            run = run.display(),
            log = log.display(),
            pid = node.pidfile.display(),
            sock = node.sockfile.display(),
        );
        sh(30, Some(&cluster.net.server_ns(i)), "sh", &["-c", &script])?;
        nodes.push(node);
    }
    let mut pids = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let mut pid = 0;
        wait_for(
            &format!("glusterd of server{} to answer", i + 1),
            30,
            || {
                pid = read_pid(&node.pidfile).unwrap_or(0);
                pid > 0 && cli(pid, node, &["volume", "list"]).is_ok()
            },
        )?;
        pids.push(pid);
    }
    let first = (pids[0], &nodes[0]);
    for i in 1..SERVERS {
        cli(
            first.0,
            first.1,
            &["peer", "probe", &cluster.net.server_addr(i)],
        )?;
    }
    wait_for("every node to join the pool", 60, || {
        cli(first.0, first.1, &["pool", "list"])
            .is_ok_and(|out| out.lines().filter(|l| l.contains("Connected")).count() == SERVERS)
    })?;
    let mut create = vec![
        "volume".to_string(),
        "create".into(),
        VOLUME.into(),
        "disperse".into(),
        SERVERS.to_string(),
        "redundancy".into(),
        "1".into(),
        "transport".into(),
        "tcp".into(),
    ];
    for (i, b) in bricks.iter().enumerate() {
        create.push(format!("{}:{}", cluster.net.server_addr(i), b.display()));
    }
    // A peer that just joined may not have synced yet: retry briefly.
    let args: Vec<&str> = create.iter().map(String::as_str).collect();
    let mut last = None;
    for _ in 0..10 {
        match cli(first.0, first.1, &args) {
            Ok(_) => {
                last = None;
                break;
            }
            Err(e) => {
                last = Some(e);
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
        }
    }
    if let Some(e) = last {
        return Err(e);
    }
    for (key, value) in [
        ("disperse.read-policy", "round-robin"),
        ("performance.strict-o-direct", "on"),
    ] {
        cli(first.0, first.1, &["volume", "set", VOLUME, key, value])?;
    }
    cli(first.0, first.1, &["volume", "start", VOLUME])?;
    let mut status = Vec::new();
    wait_for("all bricks online", 60, || {
        match brick_status(first.0, first.1) {
            Ok(s) if s.len() == SERVERS && s.iter().all(|b| b.1 > 0 && b.2 > 0) => {
                status = s;
                true
            }
            _ => false,
        }
    })?;
    for (i, brick) in bricks.iter().enumerate() {
        let path = brick.display().to_string();
        let Some(&(_, port, pid)) = status.iter().find(|s| s.0 == path) else {
            return Err(FsError::Parse {
                what: "gluster volume status".into(),
                detail: format!("no brick {path}"),
            });
        };
        cluster.servers.push(Server {
            label: format!("server{}", i + 1),
            index: i,
            pid,
            port,
            addr: cluster.net.server_addr(i),
            netns: cluster.net.server_ns(i),
            veth: cluster.net.server_veth(i),
            loop_device: disks[i].0.clone(),
            disk_dir: disks[i].1.display().to_string(),
            peers_label: path,
        });
    }
    let mount = cluster.mount.clone();
    fs::create_dir_all(&mount).map_err(io_err(&mount))?;
    sh(
        60,
        None,
        "mount",
        &[
            "-t",
            "glusterfs",
            &format!("{}:/{VOLUME}", cluster.net.server_addr(0)),
            mount.to_str().unwrap_or_default(),
        ],
    )?;
    wait_for("the FUSE mount", 30, || is_mounted(&mount))?;
    Ok(())
}

/// (brick path, port, pid) of every brick, from `gluster volume status --xml`.
fn brick_status(pid: u32, node: &Node) -> Result<Vec<(String, u16, u32)>> {
    let xml = cli(pid, node, &["volume", "status", VOLUME, "--xml"])?;
    let tag = |block: &str, name: &str| -> Option<String> {
        let open = format!("<{name}>");
        let start = block.find(&open)? + open.len();
        let end = block[start..].find(&format!("</{name}>"))? + start;
        Some(block[start..end].trim().to_string())
    };
    let mut out = Vec::new();
    for block in xml.split("<node>").skip(1) {
        let block = block.split("</node>").next().unwrap_or("");
        let Some(path) = tag(block, "path") else {
            continue;
        };
        // Self-heal daemons list a host name, not a brick path.
        if !path.starts_with('/') {
            continue;
        }
        let port = tag(block, "port").and_then(|p| p.parse().ok()).unwrap_or(0);
        let pid = tag(block, "pid").and_then(|p| p.parse().ok()).unwrap_or(0);
        out.push((path, port, pid));
    }
    Ok(out)
}
