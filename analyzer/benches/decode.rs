//! Replay decode rate: a capture of 4 M records (entries, returns, system
//! calls, samples), read from memory and decoded. Prints events/s.
//! Run with `cargo bench -p analyzer --bench decode`.

use std::time::Instant;

use analyzer::{Capture, Event};
use tracer_common::{
    capture::{CaptureHeader, CaptureWriter, FORMAT_VERSION},
    record::{FuncEntry, FuncReturn, Header, Pod as _, Sample, Syscall, kind},
};

const RECORDS: u64 = 4_000_000;

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

fn build() -> Vec<u8> {
    let mut w = CaptureWriter::new(
        Vec::new(),
        &CaptureHeader {
            format_version: FORMAT_VERSION,
            ..Default::default()
        },
    )
    .expect("in-memory writer");
    let mut chunk = Vec::with_capacity(1 << 20);
    for i in 0..RECORDS {
        match i % 8 {
            0..=2 => chunk.extend_from_slice(
                FuncEntry {
                    header: header(kind::FUNC_ENTRY, 48, i),
                    func_id: (i % 7) as u32,
                    _pad: 0,
                    ip: 0x1000,
                    call_site: 0x2000 + i % 5,
                }
                .as_bytes(),
            ),
            3..=5 => chunk.extend_from_slice(
                FuncReturn {
                    header: header(kind::FUNC_RETURN, 40, i),
                    func_id: (i % 7) as u32,
                    _pad: 0,
                    ret: i,
                }
                .as_bytes(),
            ),
            6 => chunk.extend_from_slice(
                Syscall {
                    header: header(kind::SYSCALL, 88, i),
                    enter_ns: i,
                    nr: 0,
                    fd: 3,
                    ret: 100,
                    ..Default::default()
                }
                .as_bytes(),
            ),
            _ => chunk.extend_from_slice(
                Sample {
                    header: header(kind::SAMPLE, 56, i),
                    user_ip: 0x1234,
                    kernel_ip: 0,
                    comm: [0; 16],
                }
                .as_bytes(),
            ),
        }
        if chunk.len() >= 1 << 20 {
            w.write_records(&chunk).expect("write");
            chunk.clear();
        }
    }
    w.write_records(&chunk).expect("write");
    w.into_inner()
}

fn main() {
    let bytes = build();
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        let capture = Capture::read(bytes.as_slice()).expect("valid capture");
        let mut checksum = 0u64;
        let mut n = 0u64;
        for event in capture.events() {
            let event = event.expect("valid record");
            checksum = checksum.wrapping_add(event.header().ts_ns);
            if let Event::Return(r) = event {
                checksum ^= r.ret;
            }
            n += 1;
        }
        assert_eq!(n, RECORDS);
        std::hint::black_box(checksum);
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!(
        "decode: {RECORDS} records ({:.1} MB) in {:.3} s = {:.1} M events/s (read + checksum + decode, one core, best of 3)",
        bytes.len() as f64 / 1e6,
        best,
        RECORDS as f64 / best / 1e6
    );
}
