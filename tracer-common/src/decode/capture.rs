//! Reading a whole capture: metadata gathered, record chunks kept raw and
//! decoded on demand, a truncated tail reported instead of failing.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs::File,
    io::{BufReader, Read},
    path::{Path, PathBuf},
};

use crate::capture::{
    CaptureError, CaptureHeader, CaptureReader, Chunk, End, Meta, ObjectSymbols, Overhead, Probe,
    ProcessInfo, RawRecords, RecordError, Stats, Symbol, UsdtProbe,
};

use super::types::Event;

/// Errors decoding a capture.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The file could not be opened.
    #[error("cannot open capture {path}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The capture is damaged or not a capture.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// The capture has no header item.
    #[error("capture has no header chunk")]
    NoHeader,
    /// A probe table gives an id beyond the probes the capture declares
    /// (ids index a table in memory: one from a damaged or crafted file
    /// must not size it).
    #[error(
        "bad metadata in the chunk at byte offset {offset}: {what} id {id} is out of range ({declared} declared so far)"
    )]
    IdOutOfRange {
        /// Offset of the metadata chunk.
        offset: u64,
        /// `probe` or `USDT probe`.
        what: &'static str,
        /// The id.
        id: u32,
        /// Entries of that table the capture declared up to this chunk.
        declared: usize,
    },
    /// A record inside a chunk is malformed.
    #[error("in the records chunk at byte offset {chunk_offset}")]
    Record {
        /// Offset of the chunk in the file.
        chunk_offset: u64,
        /// The cause.
        #[source]
        source: RecordError,
    },
}

/// A capture read into memory.
#[derive(Debug)]
pub struct Capture {
    /// The header.
    pub header: CaptureHeader,
    /// Process snapshots by pid, in the order written.
    pub processes: BTreeMap<u32, Vec<ProcessInfo>>,
    /// Symbol tables by object path.
    pub objects: BTreeMap<String, ObjectSymbols>,
    /// Function probes, indexed by `func_id`.
    pub probes: Vec<Probe>,
    /// USDT probe sites, indexed by `probe_id` (empty for captures without them).
    pub usdt_probes: Vec<UsdtProbe>,
    /// Kernel symbols seen in samples, sorted by address.
    pub kernel_symbols: Vec<Symbol>,
    /// Last loss counters written.
    pub stats: Option<Stats>,
    /// End marker; `None` when the recorder did not close the file.
    pub end: Option<End>,
    /// The function probes' cost and what the overhead budget dropped
    /// (the last item written); `None` for captures without it.
    pub overhead: Option<Overhead>,
    /// Record chunks: (file offset, bytes).
    pub chunks: Vec<(u64, Vec<u8>)>,
    /// Set when the file ends inside a chunk (a killed recorder).
    pub truncated: Option<CaptureError>,
    /// Functions (by `func_id`) the analysis leaves out of this capture
    /// beside those its overhead budget dropped: ones another capture it
    /// is compared with lacks ([`Capture::leave_out`]). Not in the file.
    pub left_out: BTreeSet<u32>,
}

impl Capture {
    /// Reads the capture at `path`.
    pub fn open(path: &Path) -> Result<Self, DecodeError> {
        let file = File::open(path).map_err(|source| DecodeError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        Self::read(BufReader::with_capacity(1 << 20, file))
    }

    /// Reads a capture from any reader. A truncated tail is kept in
    /// [`Capture::truncated`]; any other damage is an error.
    pub fn read(input: impl Read) -> Result<Self, DecodeError> {
        let mut reader = CaptureReader::new(input)?;
        let mut header = None;
        let mut capture = Capture {
            header: CaptureHeader::default(),
            processes: BTreeMap::new(),
            objects: BTreeMap::new(),
            probes: Vec::new(),
            usdt_probes: Vec::new(),
            kernel_symbols: Vec::new(),
            stats: None,
            end: None,
            overhead: None,
            chunks: Vec::new(),
            truncated: None,
            left_out: BTreeSet::new(),
        };
        // Probe entries declared so far: recorders number probes densely
        // from 0, so an id is below the count of entries written.
        let (mut declared_probes, mut declared_usdt) = (0usize, 0usize);
        loop {
            match reader.next_chunk() {
                Ok(Some(Chunk::Records { offset, bytes })) => capture.chunks.push((offset, bytes)),
                Ok(Some(Chunk::Meta { meta, offset })) => match *meta {
                    Meta::Header(h) => header = Some(h),
                    Meta::Process(p) => capture.processes.entry(p.pid).or_default().push(p),
                    Meta::Object(o) => {
                        capture.objects.insert(o.path.clone(), o);
                    }
                    Meta::Probes { probes } => {
                        declared_probes += probes.len();
                        for p in probes {
                            let id = p.func_id;
                            let slot = slot(&mut capture.probes, id, declared_probes).ok_or(
                                DecodeError::IdOutOfRange {
                                    offset,
                                    what: "probe",
                                    id,
                                    declared: declared_probes,
                                },
                            )?;
                            *slot = p;
                        }
                    }
                    Meta::UsdtProbes { probes } => {
                        declared_usdt += probes.len();
                        for p in probes {
                            let id = p.probe_id;
                            let slot = slot(&mut capture.usdt_probes, id, declared_usdt).ok_or(
                                DecodeError::IdOutOfRange {
                                    offset,
                                    what: "USDT probe",
                                    id,
                                    declared: declared_usdt,
                                },
                            )?;
                            *slot = p;
                        }
                    }
                    Meta::KernelSymbols { symbols } => capture.kernel_symbols.extend(symbols),
                    Meta::Stats(s) => capture.stats = Some(s),
                    Meta::Overhead(o) => capture.overhead = Some(o),
                    Meta::End(e) => capture.end = Some(e),
                },
                Ok(None) => break,
                Err(e @ CaptureError::Truncated { .. }) if header.is_some() => {
                    capture.truncated = Some(e);
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        capture.header = header.ok_or(DecodeError::NoHeader)?;
        capture.kernel_symbols.sort_by_key(|s| s.addr);
        capture.kernel_symbols.dedup_by_key(|s| s.addr);
        Ok(capture)
    }

    /// Every event in file order.
    pub fn events(&self) -> impl Iterator<Item = Result<Event, DecodeError>> + '_ {
        self.chunks
            .iter()
            .flat_map(|(offset, bytes)| decode_records(*offset, bytes))
    }

    /// The probe of `func_id`.
    pub fn probe(&self, func_id: u32) -> Option<&Probe> {
        self.probes
            .get(func_id as usize)
            .filter(|p| !p.object.is_empty())
    }

    /// The functions (symbol names) the recorder's overhead budget detached
    /// part-way: the analysis leaves them out of the whole capture.
    pub fn budget_dropped(&self) -> BTreeSet<String> {
        self.overhead
            .iter()
            .flat_map(|o| o.dropped.iter().map(|d| d.symbol.clone()))
            .collect()
    }

    /// Leaves the functions named `symbols` out of the analysis of this
    /// capture too (a model learned without them, a capture compared with
    /// this one whose budget dropped them), so units on both sides are
    /// built from the same functions.
    pub fn leave_out(&mut self, symbols: &BTreeSet<String>) {
        for p in &self.probes {
            if !p.object.is_empty() && symbols.contains(&p.symbol) {
                self.left_out.insert(p.func_id);
            }
        }
    }

    /// Name of the function probed as `func_id`.
    pub fn function_name(&self, func_id: u32) -> String {
        self.probe(func_id)
            .map(|p| p.symbol.clone())
            .unwrap_or_else(|| format!("func#{func_id}"))
    }

    /// The USDT probe site of `probe_id`.
    pub fn usdt_probe(&self, probe_id: u32) -> Option<&UsdtProbe> {
        self.usdt_probes
            .get(probe_id as usize)
            .filter(|p| !p.object.is_empty())
    }

    /// `provider:name` of USDT probe `probe_id`.
    pub fn usdt_name(&self, probe_id: u32) -> String {
        self.usdt_probe(probe_id)
            .map(|p| format!("{}:{}", p.provider, p.name))
            .unwrap_or_else(|| format!("usdt#{probe_id}"))
    }

    /// Record chunks holding a malformed record. Every reader follows one
    /// rule: a chunk is decoded up to its first malformed record, the rest
    /// of it is skipped, and the skipped chunks are counted and reported
    /// (`tracer replay`, `analyzer events` and `summary` alike).
    pub fn malformed_chunks(&self) -> usize {
        self.chunks
            .iter()
            .filter(|(_, bytes)| RawRecords::new(bytes).any(|r| r.is_err()))
            .count()
    }

    /// Records lost by the eBPF side (ring full), from the last counters.
    pub fn lost_records(&self) -> u64 {
        self.stats
            .as_ref()
            .and_then(|s| s.counters.get("ring_full").copied())
            .unwrap_or(0)
    }

    /// The most recent name of process `pid`.
    pub fn comm(&self, pid: u32) -> Option<&str> {
        self.processes
            .get(&pid)
            .and_then(|v| v.last())
            .map(|p| p.comm.as_str())
    }
}

/// The slot of `id` in `table`, grown to hold it when `id` is below
/// `declared` (the entries the file declared, which bounds the table by
/// what the file holds); `None` beyond.
fn slot<T: Default + Clone>(table: &mut Vec<T>, id: u32, declared: usize) -> Option<&mut T> {
    let id = usize::try_from(id).ok().filter(|id| *id < declared)?;
    if table.len() <= id {
        table.resize(id + 1, T::default());
    }
    table.get_mut(id)
}

/// Decodes the records of one records chunk (the one decoding path for
/// files and live rings).
pub fn decode_records(
    chunk_offset: u64,
    bytes: &[u8],
) -> impl Iterator<Item = Result<Event, DecodeError>> + '_ {
    RawRecords::new(bytes).filter_map(move |item| match item {
        Ok((header, rec)) => Event::decode(&header, rec).map(Ok),
        Err(source) => Some(Err(DecodeError::Record {
            chunk_offset,
            source,
        })),
    })
}
