//! Model-based localization throughput: decomposing a capture into units and
//! learning a model from it (events/s on one core), scoring time per unit,
//! and model size. The capture is synthetic but shaped like a poll-loop
//! daemon: each iteration polls, calls a handler that receives, calls a
//! sender that sends, and returns. Times are thread CPU time. Run with `cargo bench -p analyzer --bench model`.

/// CPU time of this thread: "events/s on one core" even while other work
/// shares the machine (wall time is also printed where it differs).
#[derive(Clone, Copy)]
struct Instant(f64);

impl Instant {
    fn now() -> Self {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        Self(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
    }

    fn elapsed(self) -> std::time::Duration {
        std::time::Duration::from_secs_f64((Self::now().0 - self.0).max(0.0))
    }
}

use analyzer::{
    Capture,
    model::GlobalModel,
    score::{Scoring, score_processes},
    units::{Variant, decompose_capture},
};
use tracer_common::{
    capture::{CaptureHeader, CaptureWriter, FORMAT_VERSION, Meta, Probe},
    record::{FuncEntry, FuncReturn, Header, Pod as _, Syscall, kind},
    syscall::nr,
};

const ITERATIONS: u64 = 400_000;

fn build() -> (Vec<u8>, u64) {
    let mut w = CaptureWriter::new(
        Vec::new(),
        &CaptureHeader {
            format_version: FORMAT_VERSION,
            ..Default::default()
        },
    )
    .expect("writer");
    let probes = ["main_loop", "handle_input", "send_msg", "handle_rare"]
        .iter()
        .enumerate()
        .map(|(i, s)| Probe {
            func_id: i as u32,
            object: "/bench".into(),
            symbol: (*s).into(),
            ..Default::default()
        })
        .collect();
    w.write_meta(&Meta::Probes { probes }).expect("probes");
    let mut buf = Vec::with_capacity(1 << 20);
    let mut ts = 0u64;
    let mut n = 0u64;
    let mut h = |k: u16, size: usize| {
        ts += 100;
        Header {
            ts_ns: ts,
            pid: 7,
            tid: 7,
            kind: k,
            size: size as u16,
            cpu: 0,
        }
    };
    let entry = |h: Header, f: u32, site: u64| FuncEntry {
        header: h,
        func_id: f,
        _pad: 0,
        ip: 0,
        call_site: site,
    };
    let ret = |h: Header, f: u32| FuncReturn {
        header: h,
        func_id: f,
        _pad: 0,
        ret: 0,
    };
    let sys = |h: Header, call: u32, fd: i32| Syscall {
        header: h,
        enter_ns: h.ts_ns,
        nr: call,
        fd,
        ret: 8,
        ..Default::default()
    };
    let push = |buf: &mut Vec<u8>, bytes: &[u8], n: &mut u64| {
        buf.extend_from_slice(bytes);
        *n += 1;
    };
    push(
        &mut buf,
        entry(h(kind::FUNC_ENTRY, 48), 0, 0x10).as_bytes(),
        &mut n,
    );
    push(
        &mut buf,
        sys(h(kind::SYSCALL, 88), nr::SOCKET, -1).as_bytes(),
        &mut n,
    );
    for i in 0..ITERATIONS {
        let fd = 4 + (i % 3) as i32;
        push(
            &mut buf,
            sys(h(kind::SYSCALL, 88), nr::POLL, -1).as_bytes(),
            &mut n,
        );
        push(
            &mut buf,
            entry(h(kind::FUNC_ENTRY, 48), 1, 0x20).as_bytes(),
            &mut n,
        );
        push(
            &mut buf,
            sys(h(kind::SYSCALL, 88), nr::RECVFROM, fd).as_bytes(),
            &mut n,
        );
        let sender = if i % 97 == 0 { 3 } else { 2 };
        push(
            &mut buf,
            entry(h(kind::FUNC_ENTRY, 48), sender, 0x30).as_bytes(),
            &mut n,
        );
        push(
            &mut buf,
            sys(h(kind::SYSCALL, 88), nr::SENDTO, fd).as_bytes(),
            &mut n,
        );
        push(
            &mut buf,
            ret(h(kind::FUNC_RETURN, 40), sender).as_bytes(),
            &mut n,
        );
        push(
            &mut buf,
            ret(h(kind::FUNC_RETURN, 40), 1).as_bytes(),
            &mut n,
        );
        if buf.len() > 1 << 20 {
            w.write_records(&buf).expect("records");
            buf.clear();
        }
    }
    push(
        &mut buf,
        ret(h(kind::FUNC_RETURN, 40), 0).as_bytes(),
        &mut n,
    );
    w.write_records(&buf).expect("records");
    (w.into_inner(), n)
}

fn main() {
    let (bytes, events) = build();
    let capture = Capture::read(bytes.as_slice()).expect("capture");
    let start = Instant::now();
    let n = capture.events().count();
    let decode_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let traces = analyzer::units::thread_traces(&capture);
    let traces_s = start.elapsed().as_secs_f64();
    println!(
        "phases: decode {:.3} s, per-thread traces (decode included) {:.3} s for {n} events, {} processes",
        decode_s,
        traces_s,
        traces.len()
    );
    drop(traces);
    for variant in [Variant::Paper000, Variant::Paper001] {
        let mut best = f64::MAX;
        let mut best_learn = f64::MAX;
        let mut model = GlobalModel::new(variant);
        let mut units = 0;
        for _ in 0..3 {
            let start = Instant::now();
            let processes = decompose_capture(&capture, variant);
            let learn = Instant::now();
            let mut m = GlobalModel::new(variant);
            for p in &processes {
                m.learn(p);
            }
            best_learn = best_learn.min(learn.elapsed().as_secs_f64());
            best = best.min(start.elapsed().as_secs_f64());
            units = processes.iter().map(|p| p.units.len()).sum::<usize>();
            model = m;
        }
        let processes = decompose_capture(&capture, variant);
        let start = Instant::now();
        let scores = score_processes(&model, &capture, "bench", &processes, Scoring::Nodes);
        let score_s = start.elapsed().as_secs_f64();
        let size = serde_json::to_vec(&model).expect("json").len();
        println!(
            "model {variant:?}: {events} events, {units} units: decompose+learn {:.3} s (learn {:.3} s) = {:.2} M events/s; \
             scoring {:.2} us/unit; model {} bytes",
            best,
            best_learn,
            events as f64 / best / 1e6,
            score_s / scores.len() as f64 * 1e6,
            size
        );
    }
}
