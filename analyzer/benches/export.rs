//! Export rates: a capture of 1 M records of one daemon (nested traced
//! calls, system calls, CPU samples) built in memory and exported in every
//! format to a null sink; and DWARF line lookups in this benchmark's own
//! executable (built with debug information). Prints records/s and
//! lookups/s. Run with `cargo bench -p analyzer --bench export`.

use std::{io::sink, time::Instant};

use analyzer::{
    Capture,
    debuginfo::{AddressKind, SourceLines},
    export::{self, ProfileKind, chrome, parquet, pprof, stacks},
};
use object::{Object as _, ObjectSymbol as _};
use tracer_common::{
    capture::{
        CaptureHeader, CaptureWriter, FORMAT_VERSION, MapEntry, Meta, ObjectSymbols, Probe,
        ProcessInfo, RecordSettings, Segment, Symbol,
    },
    record::{FuncEntry, FuncReturn, Header, Pod as _, Sample, Syscall, kind},
    syscall::nr,
};

/// Iterations of the daemon's loop; 10 records each.
const ITERATIONS: u64 = 100_000;
const BASE: u64 = 0x5555_0000_0000;

fn header(kind: u16, size: usize, ts: u64) -> Header {
    Header {
        ts_ns: ts,
        pid: 42,
        tid: 43,
        kind,
        size: size as u16,
        cpu: 1,
    }
}

fn entry(ts: u64, func_id: u32, site: u64) -> Vec<u8> {
    FuncEntry {
        header: header(kind::FUNC_ENTRY, 48, ts),
        func_id,
        _pad: 0,
        ip: 0,
        call_site: BASE + site,
    }
    .as_bytes()
    .to_vec()
}

fn ret(ts: u64, func_id: u32) -> Vec<u8> {
    FuncReturn {
        header: header(kind::FUNC_RETURN, 40, ts),
        func_id,
        _pad: 0,
        ret: 0,
    }
    .as_bytes()
    .to_vec()
}

/// A daemon: main loop (0) handles a request (1) that parses (2) and logs
/// (3), with a receive and a send, and a sample in each iteration.
fn build() -> Capture {
    let mut w = CaptureWriter::new(
        Vec::new(),
        &CaptureHeader {
            format_version: FORMAT_VERSION,
            host: "bench".into(),
            settings: RecordSettings {
                sample_hz: 99,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .expect("writer");
    w.write_meta(&Meta::Process(ProcessInfo {
        pid: 42,
        traced: true,
        comm: "daemon".into(),
        exe: "/opt/daemon".into(),
        maps: vec![MapEntry {
            start: BASE,
            end: BASE + 0x10000,
            offset: 0,
            perms: "r-xp".into(),
            path: "/opt/daemon".into(),
        }],
        ..Default::default()
    }))
    .expect("process");
    let names = ["main_loop", "handle", "parse", "log", "helper"];
    w.write_meta(&Meta::Object(ObjectSymbols {
        path: "/opt/daemon".into(),
        build_id: Some("0123456789abcdef".into()),
        segments: vec![Segment {
            vaddr: 0,
            offset: 0,
            filesz: 0x10000,
        }],
        symbols: names
            .iter()
            .enumerate()
            .map(|(i, n)| Symbol {
                addr: 0x1000 * (i as u64 + 1),
                size: 0x1000,
                name: (*n).into(),
            })
            .collect(),
        ..Default::default()
    }))
    .expect("object");
    w.write_meta(&Meta::Probes {
        probes: names[..4]
            .iter()
            .enumerate()
            .map(|(i, n)| Probe {
                func_id: i as u32,
                object: "/opt/daemon".into(),
                symbol: (*n).into(),
                vaddr: 0x1000 * (i as u64 + 1),
                ..Default::default()
            })
            .collect(),
    })
    .expect("probes");
    let mut chunk = Vec::with_capacity(1 << 20);
    let mut t = 1_000_000u64;
    chunk.extend(entry(t, 0, 0x100));
    for i in 0..ITERATIONS {
        let mut next = || {
            t += 1000;
            t
        };
        let exit = next();
        let recv = Syscall {
            header: header(kind::SYSCALL, 88, exit),
            enter_ns: exit - 500,
            nr: nr::RECVFROM,
            fd: 5,
            ret: 512,
            ..Default::default()
        };
        chunk.extend(recv.as_bytes());
        chunk.extend(entry(next(), 1, 0x1010 + i % 4));
        chunk.extend(entry(next(), 2, 0x2020));
        chunk.extend(
            Sample {
                header: header(kind::SAMPLE, 56, next()),
                user_ip: BASE + 0x3000 + (i % 64) * 4,
                kernel_ip: 0,
                comm: *b"daemon\0\0\0\0\0\0\0\0\0\0",
            }
            .as_bytes(),
        );
        chunk.extend(ret(next(), 2));
        chunk.extend(entry(next(), 3, 0x2040));
        chunk.extend(ret(next(), 3));
        let exit = next();
        let send = Syscall {
            header: header(kind::SYSCALL, 88, exit),
            enter_ns: exit - 300,
            nr: nr::SENDTO,
            fd: 5,
            ret: 512,
            ..Default::default()
        };
        chunk.extend(send.as_bytes());
        chunk.extend(ret(next(), 1));
        chunk.extend(
            Sample {
                header: header(kind::SAMPLE, 56, next()),
                user_ip: BASE + 0x5000 + (i % 16) * 8,
                kernel_ip: 0,
                comm: *b"daemon\0\0\0\0\0\0\0\0\0\0",
            }
            .as_bytes(),
        );
        if chunk.len() >= 1 << 20 {
            w.write_records(&chunk).expect("write");
            chunk.clear();
        }
    }
    w.write_records(&chunk).expect("write");
    Capture::read(w.into_inner().as_slice()).expect("capture")
}

fn rate(what: &str, records: u64, started: Instant) {
    let s = started.elapsed().as_secs_f64();
    println!(
        "{what:<34} {:>7.2} M records/s ({s:.2} s)",
        records as f64 / s / 1e6
    );
}

fn main() {
    let cap = build();
    let records = cap.events().count() as u64;
    println!("capture: {records} records of one daemon");
    let refs = [&cap];

    let t = Instant::now();
    let samples = stacks::build(&refs, ProfileKind::Samples, &mut SourceLines::new(&[]));
    rate("stacks (samples profile)", records, t);
    let t = Instant::now();
    let time = stacks::build(&refs, ProfileKind::Time, &mut SourceLines::new(&[]));
    rate("stacks (time profile)", records, t);
    let t = Instant::now();
    pprof::write(&time, &export::build_ids(&refs), None, sink()).expect("pprof");
    pprof::write(&samples, &export::build_ids(&refs), None, sink()).expect("pprof");
    println!(
        "pprof encoding of both profiles     {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let t = Instant::now();
    chrome::write(&refs, &mut SourceLines::new(&[]), sink()).expect("chrome");
    rate("chrome-trace", records, t);
    let t = Instant::now();
    parquet::write_events(&[("bench", &cap)], &mut SourceLines::new(&[]), sink()).expect("parquet");
    rate("parquet events", records, t);

    // DWARF lookups: every function start of this executable.
    let exe = std::env::current_exe().expect("exe");
    let data = std::fs::read(&exe).expect("read exe");
    let elf = object::File::parse(&*data).expect("ELF");
    let build_id: Option<String> = elf
        .build_id()
        .ok()
        .flatten()
        .map(|id| id.iter().map(|b| format!("{b:02x}")).collect());
    let addrs: Vec<u64> = elf
        .symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 8)
        .map(|s| s.address() + 4)
        .take(20_000)
        .collect();
    let object = ObjectSymbols {
        path: exe.display().to_string(),
        build_id,
        ..Default::default()
    };
    let mut lines = SourceLines::new(&[]);
    let t = Instant::now();
    let mut with_lines = 0;
    for a in &addrs {
        with_lines += usize::from(
            lines.frames(&object, *a, AddressKind::Instruction)[0]
                .line
                .is_some(),
        );
    }
    let cold = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for a in &addrs {
        lines.frames(&object, *a, AddressKind::Instruction);
    }
    let warm = t.elapsed().as_secs_f64();
    println!(
        "DWARF lookups: {} addresses ({with_lines} with a line): first {:.0}/s (file load included), cached {:.0}/s",
        addrs.len(),
        addrs.len() as f64 / cold,
        addrs.len() as f64 / warm
    );
}
