//! Sizes, ids and counts read from a capture are bounded by what the file
//! holds (issue 15, item 2): a crafted file makes the decoder fail with a
//! typed error, never allocate gigabytes. Each test measures the largest
//! single allocation its own thread asks for, with a counting allocator
//! (this test binary's only global allocator).

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
};

use tracer_common::{
    capture::{
        CHUNK_MAGIC, CaptureError, CaptureHeader, CaptureWriter, FILE_HEADER_LEN, Meta, Probe,
        UsdtProbe,
    },
    decode::{Capture, DecodeError},
};

struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn note(size: usize) {
    // `try_with`: the slot is gone while the thread shuts down.
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result and the largest allocation it made.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    let out = f();
    (out, LARGEST.with(Cell::get))
}

const MIB: usize = 1 << 20;

fn with_meta(meta: &[Meta]) -> Vec<u8> {
    let mut w = CaptureWriter::new(Vec::new(), &CaptureHeader::default()).expect("header");
    for m in meta {
        w.write_meta(m).expect("meta");
    }
    w.into_inner()
}

fn probe(func_id: u32) -> Probe {
    Probe {
        func_id,
        object: "/usr/sbin/victimd".into(),
        symbol: "handle".into(),
        ..Probe::default()
    }
}

/// A valid-checksum probe table with `"func_id": 2147483647` (and 20 M,
/// which cost 2 GB before) is refused with the id named, in kilobytes.
#[test]
fn issue_15_a_huge_probe_id_is_an_error_not_an_allocation() {
    for id in [2_147_483_647, 20_000_000, 2] {
        let file = with_meta(&[Meta::Probes {
            probes: vec![probe(0), probe(id)],
        }]);
        let (read, largest) = largest_allocation(|| Capture::read(file.as_slice()));
        assert!(
            matches!(
                read,
                Err(DecodeError::IdOutOfRange { what: "probe", id: i, declared: 2, .. }) if i == id
            ),
            "id {id}: {read:?}"
        );
        assert!(largest < MIB, "id {id}: allocated {largest} bytes");
    }
    let file = with_meta(&[Meta::UsdtProbes {
        probes: vec![UsdtProbe {
            probe_id: u32::MAX,
            ..UsdtProbe::default()
        }],
    }]);
    let (read, largest) = largest_allocation(|| Capture::read(file.as_slice()));
    assert!(
        matches!(
            read,
            Err(DecodeError::IdOutOfRange {
                what: "USDT probe",
                ..
            })
        ),
        "{read:?}"
    );
    assert!(largest < MIB, "allocated {largest} bytes");
}

/// Ids within the declared count load, across several tables (a rotated
/// file repeats its table; a later one may add probes).
#[test]
fn declared_ids_load_in_any_order() {
    let file = with_meta(&[
        Meta::Probes {
            probes: vec![probe(1), probe(0)],
        },
        Meta::Probes {
            probes: vec![probe(2)],
        },
    ]);
    let cap = Capture::read(file.as_slice()).expect("capture");
    assert_eq!(cap.probes.len(), 3);
    assert_eq!(cap.probe(2).map(|p| p.func_id), Some(2));
}

/// A chunk header that claims the largest payload the format allows, in a
/// file that then ends, is a truncation found without reserving the
/// claimed 256 MiB first.
#[test]
fn a_chunk_length_is_not_trusted_before_the_bytes_arrive() {
    let mut file = with_meta(&[]);
    let mut header = [0u8; 24];
    header[0..4].copy_from_slice(&CHUNK_MAGIC);
    header[4..8].copy_from_slice(&1u32.to_le_bytes());
    header[12..16].copy_from_slice(&(256u32 << 20).to_le_bytes());
    file.extend_from_slice(&header);
    file.extend_from_slice(&[0u8; 100]);
    let (read, largest) = largest_allocation(|| Capture::read(file.as_slice()));
    let cap = read.expect("the header chunk before it reads");
    assert!(
        matches!(cap.truncated, Some(CaptureError::Truncated { offset, .. }) if offset > FILE_HEADER_LEN),
        "{:?}",
        cap.truncated
    );
    assert!(largest <= 2 * MIB, "allocated {largest} bytes");
}
