//! What the fuzz targets share: reading a capture every way the tools do,
//! and building structurally valid captures (chunks with good checksums)
//! from fuzzed descriptions of their records and metadata, so that the
//! fuzzer reaches the decoder's and the analyzer's logic rather than the
//! checksum test.

use std::sync::OnceLock;

use analyzer::{
    Capture,
    decode::{
        Symbolizer,
        format::{Formatter, Summary},
    },
    model::GlobalModel,
    units::{Variant, decompose_capture},
};
use arbitrary::Arbitrary;
use tracer_common::{
    capture::{
        CaptureHeader, CaptureWriter, ClockRef, End, EntryClass, MapEntry, Meta, ObjectSymbols, Probe,
        ProcessInfo, Segment, SocketEntry, Stats, Symbol, UsdtProbe,
    },
    record::{
        BlockedStack, FuncEntry, FuncEntryArgs, FuncEntryFrame, FuncReturn, STACK_ARGS, Header, Lifecycle, Pod as _, Sample, SockAddr,
        Syscall, TcpRetransmit, UsdtHit, UsdtString, kind,
    },
};

/// Most events rendered per input: formatting is per event, and the
/// decoder's work is what is fuzzed.
const MAX_RENDERED: usize = 2000;

/// Reads `data` as `tracer replay`, `analyzer events` and `summary` do.
pub fn decode_all(data: &[u8]) {
    let Ok(cap) = Capture::read(data) else {
        return;
    };
    exercise(&cap);
}

/// Everything a reader does with a decoded capture.
pub fn exercise(cap: &Capture) {
    let _ = cap.malformed_chunks();
    let _ = Summary::of(cap).to_string();
    let fmt = Formatter::new(cap);
    for event in cap.events().take(MAX_RENDERED).flatten() {
        let _ = fmt.text(&event);
        let _ = fmt.json(&event);
    }
    let sym = Symbolizer::new(cap);
    for pid in cap.processes.keys().take(8) {
        for addr in [0, 0x1000, 0x7fff_ffff_e000, u64::MAX] {
            let _ = sym.user(*pid, addr);
        }
    }
    let _ = sym.kernel(u64::MAX);
    for t in analyzer::blocked::blocked_threads(cap, None) {
        let _ = (t.sentence(), t.place());
    }
}

/// A record, described field by field (kinds and sizes may be wrong on
/// purpose).
#[derive(Arbitrary, Debug)]
pub enum Rec {
    /// A function entry.
    Entry {
        func_id: u8,
        ip: u64,
        site: u64,
        args: bool,
    },
    /// A function entry from a library, with the top of the caller's
    /// stack (`FuncEntryFrame`): words the analyzer reads as addresses.
    EntryFrame {
        func_id: u8,
        ip: u64,
        sp: u64,
        words: Vec<u64>,
    },
    /// A function return.
    Return { func_id: u8, ret: u64 },
    /// A system call.
    Syscall {
        nr: u16,
        fd: i8,
        ret: i64,
        family: u8,
        port: u16,
        addr: [u8; 4],
    },
    /// A sample.
    Sample { user_ip: u64, kernel_ip: u64 },
    /// Fork, exec, exit.
    Lifecycle {
        event: u8,
        child: u8,
        group_dead: bool,
    },
    /// A TCP retransmit.
    Retransmit { family: u8, sport: u16, dport: u16 },
    /// A USDT hit.
    Usdt {
        probe_id: u8,
        nargs: u8,
        args: [u64; 3],
    },
    /// A USDT string.
    UsdtString { ptr: u64, len: u16, text: Vec<u8> },
    /// A thread blocked in a system call at the stop, with its stack.
    Blocked {
        nr: u16,
        since_ns: u64,
        depth: u8,
        flags: u8,
        frames: Vec<u64>,
    },
    /// Raw bytes after a header of any kind and size.
    Raw {
        kind: u16,
        size: u16,
        bytes: Vec<u8>,
    },
}

/// A records chunk: records of a few threads, at fuzzed times.
#[derive(Arbitrary, Debug)]
pub struct Chunk {
    /// (delta time, pid index, tid offset, record).
    pub records: Vec<(u16, u8, u8, Rec)>,
}

/// A metadata item with fuzzed fields.
#[derive(Arbitrary, Debug)]
pub enum MetaSpec {
    /// A process snapshot with maps.
    Process {
        pid: u8,
        maps: Vec<(u64, u32, u32, bool)>,
        sockets: u8,
    },
    /// An object's symbols.
    Object {
        segments: Vec<(u64, u64, u64)>,
        symbols: Vec<(u64, u16, u8)>,
    },
    /// Probes (ids as given).
    Probes { ids: Vec<u32> },
    /// USDT probes (ids as given), string arguments.
    UsdtProbes { ids: Vec<u16>, string_args: Vec<u8> },
    /// Kernel symbols.
    Kernel { addrs: Vec<u64> },
    /// Loss counters.
    Stats { ring_full: u64 },
    /// An end marker.
    End { stop_ns: u64, started_ns: u64 },
}

/// A whole capture.
#[derive(Arbitrary, Debug)]
pub struct Spec {
    /// The header's clock.
    pub monotonic_ns: u64,
    /// Metadata and record chunks, in file order.
    pub items: Vec<Result<MetaSpec, Chunk>>,
    /// Bytes cut off the end (a killed recorder).
    pub cut: u8,
}

const PIDS: [u32; 3] = [100, 200, 4_000_000];
const OBJECT: &str = "/usr/sbin/fuzzd";

fn header(ts: u64, pid: u32, tid: u32, kind: u16, size: usize) -> Header {
    Header {
        ts_ns: ts,
        pid,
        tid,
        kind,
        size: size as u16,
        cpu: 0,
    }
}

impl Rec {
    fn bytes(&self, ts: u64, pid: u32, tid: u32) -> Vec<u8> {
        match self {
            Self::Entry {
                func_id,
                ip,
                site,
                args,
            } => {
                let e = FuncEntry {
                    header: header(ts, pid, tid, kind::FUNC_ENTRY, size_of::<FuncEntry>()),
                    func_id: u32::from(*func_id % 8),
                    _pad: 0,
                    ip: *ip,
                    call_site: *site,
                };
                if *args {
                    let mut a = FuncEntryArgs {
                        entry: e,
                        args: [1, 2, 3, 4, 5, 6],
                    };
                    a.entry.header.kind = kind::FUNC_ENTRY_ARGS;
                    a.entry.header.size = size_of::<FuncEntryArgs>() as u16;
                    a.as_bytes().to_vec()
                } else {
                    e.as_bytes().to_vec()
                }
            }
            Self::EntryFrame {
                func_id,
                ip,
                sp,
                words,
            } => {
                let mut f = FuncEntryFrame::default();
                for (slot, w) in f.frame.iter_mut().zip(words) {
                    *slot = *w;
                }
                f.sp = *sp;
                f.entry.stack.copy_from_slice(&f.frame[1..1 + STACK_ARGS]);
                f.entry.entry.args = [1, 2, 3, 4, 5, 6];
                f.entry.entry.entry = FuncEntry {
                    header: header(
                        ts,
                        pid,
                        tid,
                        kind::FUNC_ENTRY_FRAME,
                        size_of::<FuncEntryFrame>(),
                    ),
                    func_id: u32::from(*func_id % 8),
                    _pad: 0,
                    ip: *ip,
                    call_site: f.frame[0],
                };
                f.as_bytes().to_vec()
            }
            Self::Return { func_id, ret } => FuncReturn {
                header: header(ts, pid, tid, kind::FUNC_RETURN, size_of::<FuncReturn>()),
                func_id: u32::from(*func_id % 8),
                _pad: 0,
                ret: *ret,
            }
            .as_bytes()
            .to_vec(),
            Self::Syscall {
                nr,
                fd,
                ret,
                family,
                port,
                addr,
            } => {
                let mut a = [0u8; 16];
                a[..4].copy_from_slice(addr);
                Syscall {
                    header: header(ts, pid, tid, kind::SYSCALL, size_of::<Syscall>()),
                    enter_ns: ts.saturating_sub(10),
                    nr: u32::from(*nr % 512),
                    fd: i32::from(*fd),
                    ret: *ret,
                    addr: SockAddr {
                        family: u16::from(*family % 12),
                        port_be: port.to_be(),
                        _pad: 0,
                        addr: a,
                    },
                    ..Default::default()
                }
                .as_bytes()
                .to_vec()
            }
            Self::Sample { user_ip, kernel_ip } => Sample {
                header: header(ts, pid, tid, kind::SAMPLE, size_of::<Sample>()),
                user_ip: *user_ip,
                kernel_ip: *kernel_ip,
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            Self::Lifecycle {
                event,
                child,
                group_dead,
            } => Lifecycle {
                header: header(ts, pid, tid, kind::LIFECYCLE, size_of::<Lifecycle>()),
                event: u32::from(*event % 4),
                child_tid: PIDS[usize::from(*child) % PIDS.len()] + u32::from(*child % 3),
                group_dead: u32::from(*group_dead),
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            Self::Retransmit {
                family,
                sport,
                dport,
            } => TcpRetransmit {
                header: header(
                    ts,
                    pid,
                    tid,
                    kind::TCP_RETRANSMIT,
                    size_of::<TcpRetransmit>(),
                ),
                family: if *family % 2 == 0 { 2 } else { 10 },
                sport: *sport,
                dport: *dport,
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            Self::Usdt {
                probe_id,
                nargs,
                args,
            } => UsdtHit {
                header: header(ts, pid, tid, kind::USDT, size_of::<UsdtHit>()),
                probe_id: u32::from(*probe_id % 8),
                nargs: u32::from(*nargs % 8),
                args: [args[0], args[1], args[2], 0, 0, 0],
            }
            .as_bytes()
            .to_vec(),
            Self::UsdtString { ptr, len, text } => {
                let mut s = UsdtString {
                    header: header(ts, pid, tid, kind::USDT_STRING, size_of::<UsdtString>()),
                    ptr: *ptr,
                    len: u32::from(*len),
                    ..Default::default()
                };
                let n = text.len().min(s.text.len());
                s.text[..n].copy_from_slice(&text[..n]);
                s.as_bytes().to_vec()
            }
            Self::Blocked {
                nr,
                since_ns,
                depth,
                flags,
                frames,
            } => {
                // `depth` may exceed the frames given, and the array.
                let mut b = BlockedStack {
                    header: header(ts, pid, tid, kind::BLOCKED_STACK, size_of::<BlockedStack>()),
                    since_ns: *since_ns,
                    nr: u32::from(*nr),
                    depth: u32::from(*depth),
                    flags: u32::from(*flags),
                    ..Default::default()
                };
                for (slot, f) in b.frames.iter_mut().zip(frames) {
                    *slot = *f;
                }
                b.as_bytes().to_vec()
            }
            Self::Raw { kind, size, bytes } => {
                let mut out = header(ts, pid, tid, *kind, usize::from(*size))
                    .as_bytes()
                    .to_vec();
                out.extend_from_slice(&bytes[..bytes.len().min(256)]);
                out
            }
        }
    }
}

impl MetaSpec {
    fn meta(&self) -> Meta {
        match self {
            Self::Process { pid, maps, sockets } => Meta::Process(ProcessInfo {
                pid: PIDS[usize::from(*pid) % PIDS.len()],
                ppid: 1,
                seen_ns: 1,
                traced: pid % 2 == 0,
                comm: format!("fuzzd{pid}"),
                exe: OBJECT.into(),
                cmdline: vec![OBJECT.into(), "--brick-name".into(), format!("b{pid}")],
                env: Default::default(),
                maps: maps
                    .iter()
                    .take(16)
                    .map(|(start, len, offset, named)| MapEntry {
                        start: *start,
                        end: start.wrapping_add(u64::from(*len)),
                        offset: u64::from(*offset),
                        perms: "r-xp".into(),
                        path: if *named { OBJECT.into() } else { String::new() },
                    })
                    .collect(),
                sockets: (0..sockets % 4)
                    .map(|i| SocketEntry {
                        fd: i32::from(i) + 3,
                        local: format!("127.0.0.1:{}", 7000 + u32::from(i)),
                        remote: if i == 0 {
                            String::new()
                        } else {
                            "127.0.0.1:9".into()
                        },
                        state: if i == 0 { "listen" } else { "established" }.into(),
                    })
                    .collect(),
                netns: 4_026_531_840 + u64::from(*pid % 2),
                // A followed process probed late, at any time (before its
                // first record too).
                probes_from_ns: (sockets % 8 >= 4).then(|| u64::from(*sockets) << 20),
            }),
            Self::Object { segments, symbols } => Meta::Object(ObjectSymbols {
                path: OBJECT.into(),
                build_id: None,
                segments: segments
                    .iter()
                    .take(8)
                    .map(|(vaddr, offset, filesz)| Segment {
                        vaddr: *vaddr,
                        offset: *offset,
                        filesz: *filesz,
                    })
                    .collect(),
                symbols: {
                    let mut s: Vec<Symbol> = symbols
                        .iter()
                        .take(64)
                        .map(|(addr, size, name)| Symbol {
                            addr: *addr,
                            size: u64::from(*size),
                            name: format!("f{}", name % 16),
                        })
                        .collect();
                    s.sort_by_key(|s| s.addr);
                    s
                },
                debug_link: None,
                debug_file: None,
            }),
            Self::Probes { ids } => Meta::Probes {
                probes: ids
                    .iter()
                    .take(64)
                    .map(|id| Probe {
                        func_id: *id,
                        object: OBJECT.into(),
                        symbol: format!("f{}", id % 16),
                        aliases: Vec::new(),
                        vaddr: u64::from(*id) * 16,
                        file_offset: u64::from(*id) * 16,
                        args: id % 2 == 0,
                        entry_only: id % 3 == 0,
                        entry_class: EntryClass::ALL[*id as usize % EntryClass::ALL.len()],
                    })
                    .collect(),
            },
            Self::UsdtProbes { ids, string_args } => Meta::UsdtProbes {
                probes: ids
                    .iter()
                    .take(16)
                    .map(|id| UsdtProbe {
                        probe_id: u32::from(*id),
                        object: "/usr/bin/python3.11".into(),
                        provider: "python".into(),
                        name: if id % 2 == 0 {
                            "function__entry"
                        } else {
                            "function__return"
                        }
                        .into(),
                        string_args: string_args.iter().take(4).map(|a| u32::from(*a)).collect(),
                        ..Default::default()
                    })
                    .collect(),
            },
            Self::Kernel { addrs } => Meta::KernelSymbols {
                symbols: addrs
                    .iter()
                    .take(32)
                    .map(|a| Symbol {
                        addr: *a,
                        size: 0,
                        name: format!("k{}", a % 7),
                    })
                    .collect(),
            },
            Self::Stats { ring_full } => Meta::Stats(Stats {
                at_ns: 1,
                counters: [("ring_full".to_string(), *ring_full)]
                    .into_iter()
                    .collect(),
                records_written: 0,
            }),
            Self::End {
                stop_ns,
                started_ns,
            } => Meta::End(End {
                stop_ns: *stop_ns,
                started_ns: *started_ns,
                reason: "fuzzed".into(),
                processes: Vec::new(),
            }),
        }
    }
}

impl Spec {
    /// The capture file this describes: valid chunks (checksums right),
    /// fuzzed content, possibly cut short.
    pub fn bytes(&self) -> Vec<u8> {
        let header = CaptureHeader {
            format_version: tracer_common::capture::FORMAT_VERSION,
            host: "fuzz".into(),
            clock: ClockRef {
                monotonic_ns: self.monotonic_ns,
                realtime_ns: 1_700_000_000_000_000_000,
            },
            ..Default::default()
        };
        let Ok(mut w) = CaptureWriter::new(Vec::new(), &header) else {
            return Vec::new();
        };
        let mut ts = self.monotonic_ns;
        for item in self.items.iter().take(64) {
            let _ = match item {
                Ok(m) => w.write_meta(&m.meta()),
                Err(chunk) => {
                    let mut bytes = Vec::new();
                    for (dt, p, t, rec) in chunk.records.iter().take(512) {
                        ts = ts.wrapping_add(u64::from(*dt));
                        let pid = PIDS[usize::from(*p) % PIDS.len()];
                        bytes.extend(rec.bytes(ts, pid, pid + u32::from(t % 3)));
                    }
                    w.write_records(&bytes)
                }
            };
        }
        let mut out = w.into_inner();
        out.truncate(out.len().saturating_sub(usize::from(self.cut % 64)));
        out
    }
}

/// A small capture of one poll-loop daemon with two connections, and the
/// model learned from it: what the model and thresholds targets score.
pub fn fixture() -> &'static (Capture, GlobalModel) {
    static FIXTURE: OnceLock<(Capture, GlobalModel)> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let spec = Spec {
            monotonic_ns: 1_000,
            items: vec![
                Ok(MetaSpec::Probes {
                    ids: (0..8).collect(),
                }),
                Ok(MetaSpec::Process {
                    pid: 0,
                    maps: Vec::new(),
                    sockets: 2,
                }),
                Err(Chunk {
                    records: [
                        Rec::Entry {
                            func_id: 0,
                            ip: 0,
                            site: 0x10,
                            args: false,
                        },
                        Rec::Syscall {
                            nr: 41,
                            fd: -1,
                            ret: 5,
                            family: 2,
                            port: 7000,
                            addr: [127, 0, 0, 1],
                        },
                        Rec::Syscall {
                            nr: 7,
                            fd: -1,
                            ret: 1,
                            family: 0,
                            port: 0,
                            addr: [0; 4],
                        },
                        Rec::Entry {
                            func_id: 1,
                            ip: 0,
                            site: 0x20,
                            args: false,
                        },
                        Rec::Syscall {
                            nr: 45,
                            fd: 5,
                            ret: 8,
                            family: 0,
                            port: 0,
                            addr: [0; 4],
                        },
                        Rec::Return { func_id: 1, ret: 0 },
                        Rec::Syscall {
                            nr: 7,
                            fd: -1,
                            ret: 1,
                            family: 0,
                            port: 0,
                            addr: [0; 4],
                        },
                        Rec::Entry {
                            func_id: 2,
                            ip: 0,
                            site: 0x30,
                            args: false,
                        },
                        Rec::Syscall {
                            nr: 45,
                            fd: 4,
                            ret: 8,
                            family: 0,
                            port: 0,
                            addr: [0; 4],
                        },
                        Rec::Return { func_id: 2, ret: 0 },
                        Rec::Return { func_id: 0, ret: 0 },
                    ]
                    .into_iter()
                    .map(|r| (100, 0, 0, r))
                    .collect(),
                }),
            ],
            cut: 0,
        };
        let cap = Capture::read(spec.bytes().as_slice()).expect("the fixture decodes");
        let mut model = GlobalModel::new(Variant::Paper000);
        for p in decompose_capture(&cap, Variant::Paper000) {
            model.learn(&p);
        }
        (cap, model)
    })
}

/// The MPI profiles of a real two-rank halo-exchange run (40 iterations,
/// `fixtures/halo-profiles.json`): what the MPI model target detects on.
pub fn mpi_fixture() -> &'static analyzer::mpi::Profiles {
    static FIXTURE: OnceLock<analyzer::mpi::Profiles> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        serde_json::from_str(include_str!("../fixtures/halo-profiles.json"))
            .expect("the MPI fixture parses")
    })
}
