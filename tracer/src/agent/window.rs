//! Joins flight-recorder files of one session into one capture: the
//! analysis window the agent evaluates, or a snapshot written to disk.
//! Chunks are copied raw (metadata is not decoded), repeated metadata is
//! written once, and each process's preamble goes first, so the result
//! reads like a recording that simply lost the records in between.

use std::{
    collections::HashSet,
    fs::File,
    io::{BufReader, Write},
    path::{Path, PathBuf},
};

use serde::Serialize;
use tracer_common::{
    capture::{
        CaptureError, CaptureReader, CaptureWriter, ChunkKind, End, Meta, RawChunk, RawRecords,
    },
    record::kind,
};

/// Errors joining files.
#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    /// A file could not be opened.
    #[error("cannot open {path}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The first file has no readable header.
    #[error("{path} has no capture header")]
    NoHeader {
        /// The file.
        path: PathBuf,
    },
    /// Nothing to join.
    #[error("no capture files in the window")]
    Empty,
    /// Reading or writing a capture failed.
    #[error("joining capture files")]
    Capture(#[from] CaptureError),
}

/// What went into a joined capture.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Joined {
    /// Files read.
    pub files: usize,
    /// Records from the files (in the window).
    pub records: u64,
    /// Records from the preambles.
    pub preamble_records: u64,
    /// First and last record time of the window, `CLOCK_MONOTONIC` ns.
    pub first_ns: u64,
    /// See `first_ns`.
    pub last_ns: u64,
    /// Files that ended inside a chunk (a killed writer; read up to there).
    pub truncated: Vec<PathBuf>,
}

/// Writes to `out` one capture made of `preamble` (records older than
/// `since_ns`), then every record at or after `since_ns` in `files` (of one
/// session, oldest first), their metadata once, the last loss counters and
/// an end marker saying `reason`.
pub fn join(
    files: &[&Path],
    preamble: &[u8],
    since_ns: u64,
    reason: &str,
    out: impl Write,
) -> Result<Joined, WindowError> {
    let first = files.first().ok_or(WindowError::Empty)?;
    let header = {
        let mut reader = open(first)?;
        match reader.next_chunk()? {
            Some(tracer_common::capture::Chunk::Meta { meta, .. }) => match *meta {
                Meta::Header(h) => h,
                _ => {
                    return Err(WindowError::NoHeader {
                        path: first.to_path_buf(),
                    });
                }
            },
            _ => {
                return Err(WindowError::NoHeader {
                    path: first.to_path_buf(),
                });
            }
        }
    };
    let mut writer = CaptureWriter::new(out, &header)?;
    let mut joined = Joined {
        files: files.len(),
        ..Joined::default()
    };
    let mut batch = Vec::with_capacity(1 << 20);
    for (h, rec) in RawRecords::new(preamble).flatten() {
        if h.ts_ns < since_ns {
            batch.extend_from_slice(rec);
            joined.preamble_records += 1;
            if batch.len() >= 1 << 20 {
                writer.write_records(&batch)?;
                batch.clear();
            }
        }
    }
    writer.write_records(&batch)?;
    let mut seen_meta: HashSet<(u32, usize)> = HashSet::new();
    let mut last_stats: Option<RawChunk> = None;
    // When the session's recording began (every probe attached), from the
    // end markers of its rotated files; 0 when none says.
    let mut started_ns = 0;
    for path in files {
        let mut reader = open(path)?;
        loop {
            let chunk = match reader.next_raw_chunk() {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(CaptureError::Truncated { .. }) => {
                    joined.truncated.push(path.to_path_buf());
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            match chunk.kind {
                ChunkKind::Meta => match chunk.meta_type() {
                    Some("header") => {}
                    Some("end") => {
                        if let Ok(Meta::End(end)) = serde_json::from_slice(&chunk.payload) {
                            started_ns = started_ns.max(end.started_ns);
                        }
                    }
                    Some("stats") => last_stats = Some(chunk),
                    _ => {
                        if seen_meta.insert((chunk.crc, chunk.payload.len())) {
                            writer.write_raw(&chunk)?;
                        }
                    }
                },
                ChunkKind::Records => {
                    batch.clear();
                    let mut all = true;
                    for (h, rec) in RawRecords::new(&chunk.payload).flatten() {
                        // USDT strings are written again at the start of
                        // every file (sent once per process, needed by all).
                        if h.ts_ns >= since_ns || h.kind == kind::USDT_STRING {
                            batch.extend_from_slice(rec);
                            if h.kind != kind::USDT_STRING {
                                joined.records += 1;
                                if joined.first_ns == 0 || h.ts_ns < joined.first_ns {
                                    joined.first_ns = h.ts_ns;
                                }
                                joined.last_ns = joined.last_ns.max(h.ts_ns);
                            }
                        } else {
                            all = false;
                        }
                    }
                    if all {
                        writer.write_raw(&chunk)?;
                    } else {
                        writer.write_records(&batch)?;
                    }
                }
            }
        }
    }
    if let Some(stats) = last_stats {
        writer.write_raw(&stats)?;
    }
    // What was observed starts at the window's start, or when the
    // recording began if that was later: the peer comparison's windows
    // start there, not at the first file's header.
    writer.write_meta(&Meta::End(End {
        stop_ns: joined.last_ns,
        reason: reason.to_string(),
        started_ns: since_ns.max(started_ns),
        ..Default::default()
    }))?;
    writer.flush()?;
    Ok(joined)
}

fn open(path: &Path) -> Result<CaptureReader<BufReader<File>>, WindowError> {
    let file = File::open(path).map_err(|source| WindowError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(CaptureReader::new(BufReader::with_capacity(1 << 20, file))?)
}

#[cfg(test)]
mod tests {
    use tracer_common::{
        capture::{CaptureHeader, Chunk, ProcessInfo},
        record::{FuncReturn, Header, Pod as _},
    };

    use super::*;

    fn ret(ts: u64, pid: u32) -> FuncReturn {
        FuncReturn {
            header: Header {
                ts_ns: ts,
                pid,
                tid: pid,
                kind: kind::FUNC_RETURN,
                size: size_of::<FuncReturn>() as u16,
                cpu: 0,
            },
            func_id: 0,
            _pad: 0,
            ret: 0,
        }
    }

    /// When the test session's recording began, as its rotated files say.
    const SESSION_STARTED: u64 = 12;

    fn file(dir: &Path, name: &str, pid: u32, times: std::ops::Range<u64>, end: bool) -> PathBuf {
        let path = dir.join(name);
        let mut w = CaptureWriter::new(
            File::create(&path).expect("create"),
            &CaptureHeader::default(),
        )
        .expect("header");
        w.write_meta(&Meta::Process(ProcessInfo {
            pid,
            comm: "p".into(),
            ..ProcessInfo::default()
        }))
        .expect("process");
        let mut recs = Vec::new();
        for ts in times {
            recs.extend_from_slice(ret(ts, pid).as_bytes());
        }
        w.write_records(&recs).expect("records");
        if end {
            w.write_meta(&Meta::End(End {
                stop_ns: 0,
                reason: "rotated".into(),
                started_ns: SESSION_STARTED,
                ..Default::default()
            }))
            .expect("end");
        }
        w.flush().expect("flush");
        path
    }

    fn read(bytes: &[u8]) -> (Vec<u64>, usize, Vec<(String, u64)>) {
        let mut r = CaptureReader::new(bytes).expect("joined header");
        let (mut times, mut processes, mut ends) = (Vec::new(), 0, Vec::new());
        while let Some(c) = r.next_chunk().expect("joined chunk") {
            match c {
                Chunk::Records { bytes, .. } => {
                    for (h, _) in RawRecords::new(&bytes).flatten() {
                        times.push(h.ts_ns);
                    }
                }
                Chunk::Meta { meta, .. } => match *meta {
                    Meta::Process(_) => processes += 1,
                    Meta::End(e) => ends.push((e.reason, e.started_ns)),
                    _ => {}
                },
            }
        }
        (times, processes, ends)
    }

    /// A rotated file (times 10..20, its end marker) and the live one after it
    /// (20..30), of process 7.
    fn rotated_then_live(dir: &Path) -> (PathBuf, PathBuf) {
        (
            file(dir, "a.capture", 7, 10..20, true),
            file(dir, "b.capture", 7, 20..30, false),
        )
    }

    #[test]
    fn joins_the_window_after_the_preamble_once_each() {
        let dir = tempfile::tempdir().expect("tmp");
        let (a, b) = rotated_then_live(dir.path());
        let mut preamble = Vec::new();
        for ts in [1, 2, 3, 15] {
            preamble.extend_from_slice(ret(ts, 7).as_bytes());
        }
        let mut out = Vec::new();
        let j = join(&[&a, &b], &preamble, 15, "snapshot", &mut out).expect("join");
        let (times, processes, ends) = read(&out);
        let want: Vec<u64> = [1, 2, 3].into_iter().chain(15..30).collect();
        assert_eq!(times, want, "preamble before since, then the window");
        assert_eq!(
            processes, 1,
            "the repeated process snapshot is written once"
        );
        assert_eq!(
            ends,
            [("snapshot".to_string(), 15)],
            "one end marker, the joined one, observed from the window's start"
        );
        assert_eq!((j.records, j.preamble_records), (15, 3));
        assert_eq!((j.first_ns, j.last_ns), (15, 29));
    }

    #[test]
    fn a_window_from_before_the_recording_began_starts_when_it_began() {
        let dir = tempfile::tempdir().expect("tmp");
        let (a, b) = rotated_then_live(dir.path());
        let mut out = Vec::new();
        join(&[&a, &b], &[], 5, "snapshot", &mut out).expect("join");
        assert_eq!(read(&out).2, [("snapshot".to_string(), SESSION_STARTED)]);
        // No rotated file, no end marker to say: the window's start.
        let mut out = Vec::new();
        join(&[&b], &[], 5, "snapshot", &mut out).expect("join");
        assert_eq!(read(&out).2, [("snapshot".to_string(), 5)]);
    }

    #[test]
    fn a_truncated_file_is_read_up_to_its_last_chunk() {
        let dir = tempfile::tempdir().expect("tmp");
        let a = file(dir.path(), "a.capture", 7, 10..20, false);
        let len = std::fs::metadata(&a).expect("meta").len();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&a)
            .expect("open");
        f.set_len(len - 5).expect("truncate");
        let mut out = Vec::new();
        let j = join(&[&a], &[], 0, "x", &mut out).expect("join");
        assert_eq!(j.truncated, std::slice::from_ref(&a));
        assert_eq!(
            read(&out).0,
            Vec::<u64>::new(),
            "the cut records chunk is left out"
        );
    }

    #[test]
    fn nothing_to_join_is_an_error() {
        assert!(matches!(
            join(&[], &[], 0, "x", Vec::new()),
            Err(WindowError::Empty)
        ));
    }
}
