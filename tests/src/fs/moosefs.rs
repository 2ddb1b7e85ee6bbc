//! MooseFS: the master (metadata) on the bridge address in the root
//! namespace, one chunkserver per server namespace, `mfsmount` in the root
//! namespace. Chunkservers refuse a loopback `MASTER_HOST`, hence the bridge
//! address. Each chunk is stored on two chunkservers (the default goal), so
//! the four servers do alike work only over many chunks: the workloads keep
//! several files in flight.
//!
//! The daemons run with `NICE_LEVEL = 0` (their default, -19, would let them
//! starve everything else on a shared 2-core host). Deleted files skip the
//! trash (`mfssettrashtime 0`) and the master's chunk loop runs every second
//! with higher deletion limits (default: every 300 s, 10 chunks per server):
//! with the defaults a matrix filled the servers' disks within three runs of
//! dd and every write crawled.

use std::{
    fs,
    path::{Path, PathBuf},
};

use super::{
    Cluster, FsError, Result, Server, io_err, is_mounted, live_comm, net::CLIENT_ADDR,
    pids_mentioning, sh, wait_for,
};

/// Chunkservers' service port.
const CS_PORT: u16 = 9422;
/// Master's port for chunkservers.
const MATOCS_PORT: u16 = 9420;
/// Master's port for clients.
const MATOCL_PORT: u16 = 9421;

/// Starts the master and chunkservers, mounts the file system.
pub(super) fn start(cluster: &mut Cluster, disks: &[(String, PathBuf)]) -> Result<()> {
    let work = cluster.config.workdir.clone();
    let master = work.join("master");
    fs::create_dir_all(&master).map_err(io_err(&master))?;
    let empty = Path::new("/var/lib/mfs/metadata.mfs.empty");
    let meta = master.join("metadata.mfs");
    fs::copy(empty, &meta).map_err(io_err(empty))?;
    let exports = master.join("mfsexports.cfg");
    write(&exports, "*  /  rw,alldirs,admin,maproot=0:0\n")?;
    let topology = master.join("mfstopology.cfg");
    write(&topology, "")?;
    let master_cfg = master.join("mfsmaster.cfg");
    write(
        &master_cfg,
        &format!(
            "WORKING_USER = mfs\nDATA_PATH = {dir}\nEXPORTS_FILENAME = {exports}\n\
             TOPOLOGY_FILENAME = {topology}\nMATOML_LISTEN_HOST = {CLIENT_ADDR}\n\
             MATOCS_LISTEN_HOST = {CLIENT_ADDR}\nMATOCS_LISTEN_PORT = {MATOCS_PORT}\n\
             MATOCL_LISTEN_HOST = {CLIENT_ADDR}\nMATOCL_LISTEN_PORT = {MATOCL_PORT}\n\
             NICE_LEVEL = 0\nSYSLOG_IDENT = eftfs-master\n\
             CHUNKS_LOOP_MIN_TIME = 1\nCHUNKS_SOFT_DEL_LIMIT = 100\n\
             CHUNKS_HARD_DEL_LIMIT = 200\n",
            dir = master.display(),
            exports = exports.display(),
            topology = topology.display(),
        ),
    )?;
    chown_mfs(&master)?;
    let cfg = master_cfg.display().to_string();
    sh(60, None, "mfsmaster", &["-c", &cfg, "start"])?;
    let master_pid = pids_mentioning(&cfg)
        .into_iter()
        .find(|p| live_comm(*p).as_deref() == Some("mfsmaster"))
        .ok_or_else(|| FsError::Parse {
            what: "mfsmaster start".into(),
            detail: "no mfsmaster process with its configuration".into(),
        })?;
    cluster.extra_pids.push(master_pid);

    let mut configs = Vec::new();
    for (i, (_, mnt)) in disks.iter().enumerate() {
        let dir = cluster.server_dir(i).join("state");
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let chunks = mnt.join("chunks");
        fs::create_dir_all(&chunks).map_err(io_err(&chunks))?;
        chown_mfs(&chunks)?;
        let hdd = dir.join("mfshdd.cfg");
        write(&hdd, &format!("{}\n", chunks.display()))?;
        let addr = cluster.net.server_addr(i);
        let cs_cfg = dir.join("mfschunkserver.cfg");
        write(
            &cs_cfg,
            &format!(
                "WORKING_USER = mfs\nDATA_PATH = {dir}\nHDD_CONF_FILENAME = {hdd}\n\
                 MASTER_HOST = {CLIENT_ADDR}\nMASTER_PORT = {MATOCS_PORT}\n\
                 BIND_HOST = {addr}\nCSSERV_LISTEN_HOST = {addr}\n\
                 CSSERV_LISTEN_PORT = {CS_PORT}\nHDD_LEAVE_SPACE_DEFAULT = 64MiB\n\
                 NICE_LEVEL = 0\nSYSLOG_IDENT = eftfs-cs{n}\n",
                dir = dir.display(),
                hdd = hdd.display(),
                n = i + 1,
            ),
        )?;
        chown_mfs(&dir)?;
        let cs_cfg = cs_cfg.display().to_string();
        let ns = cluster.net.server_ns(i);
        sh(60, Some(&ns), "mfschunkserver", &["-c", &cs_cfg, "start"])?;
        configs.push(cs_cfg);
    }
    for (i, cs_cfg) in configs.iter().enumerate() {
        let ns = cluster.net.server_ns(i);
        let pid = pids_mentioning(cs_cfg)
            .into_iter()
            .find(|p| live_comm(*p).as_deref() == Some("mfschunkserver"))
            .ok_or_else(|| FsError::Parse {
                what: format!("mfschunkserver start in {ns}"),
                detail: "no mfschunkserver process with its configuration".into(),
            })?;
        let filter = format!("( dport = :{MATOCS_PORT} )");
        wait_for(
            &format!("chunkserver {} to reach the master", i + 1),
            30,
            || {
                sh(
                    10,
                    Some(&ns),
                    "ss",
                    &["-Htn", "state", "established", &filter],
                )
                .is_ok_and(|out| !out.trim().is_empty())
            },
        )?;
        let (dev, mnt) = &disks[i];
        cluster.servers.push(Server {
            label: format!("server{}", i + 1),
            index: i,
            pid,
            port: CS_PORT,
            addr: cluster.net.server_addr(i),
            netns: ns,
            veth: cluster.net.server_veth(i),
            loop_device: dev.clone(),
            disk_dir: mnt.display().to_string(),
            peers_label: cs_cfg.clone(),
        });
    }

    let mount = cluster.mount.clone();
    fs::create_dir_all(&mount).map_err(io_err(&mount))?;
    sh(
        60,
        None,
        "mfsmount",
        &[
            mount.to_str().unwrap_or_default(),
            "-H",
            CLIENT_ADDR,
            "-P",
            &MATOCL_PORT.to_string(),
        ],
    )?;
    wait_for("the FUSE mount", 30, || is_mounted(&mount))?;
    sh(
        30,
        None,
        "mfssettrashtime",
        &["-r", "0", mount.to_str().unwrap_or_default()],
    )?;
    // Chunkservers register their space a moment after connecting: until
    // the master knows all of them, new chunks would land on fewer servers.
    let probe = mount.join(".eftfs-probe");
    let source = cluster.source.clone();
    wait_for("chunkservers to store a file", 60, || {
        probe_copies(&source, &probe).is_ok_and(|n| n >= 2)
    })?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

/// Writes 1 MiB to `probe` and counts its chunk's valid copies.
fn probe_copies(source: &Path, probe: &Path) -> Result<usize> {
    let out = format!("of={}", probe.display());
    let inf = format!("if={}", source.display());
    sh(
        30,
        None,
        "dd",
        &[
            &inf,
            &out,
            "bs=1M",
            "count=1",
            "oflag=direct",
            "status=none",
        ],
    )?;
    let info = sh(
        30,
        None,
        "mfsfileinfo",
        &[probe.to_str().unwrap_or_default()],
    )?;
    Ok(info.matches("status:VALID").count())
}

fn write(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).map_err(io_err(path))
}

fn chown_mfs(path: &Path) -> Result<()> {
    sh(
        10,
        None,
        "chown",
        &["-R", "mfs:mfs", path.to_str().unwrap_or_default()],
    )?;
    Ok(())
}
