//! Weighted call stacks of captures, the common ground of the profile
//! exports (pprof, folded stacks, flame graphs).
//!
//! - **samples**: every IP sample is one stack: the traced calls open on its
//!   thread at that moment (outermost first), then the sampled user
//!   function with the functions inlined at the IP, then the kernel
//!   function when the sample hit the kernel. Values: samples, and CPU time
//!   (samples × the sampling period).
//! - **time**: the exclusive wall-clock time of every traced call path (a
//!   frame's time runs while it is the innermost traced frame of its
//!   thread, system calls and blocking included, as the peer comparison's
//!   `time` metric counts it), and the calls made of it. Calls still open
//!   when recording stopped are charged up to the stop.
//!
//! Traced frames carry the file and line of the call they made to the next
//! traced frame (from the call site the uprobe read), so a caller shows
//! where it called from, as in a debugger's backtrace.

use std::{collections::HashMap, rc::Rc};

use rustc_hash::FxHashMap;

use crate::{
    debuginfo::{AddressKind, Frame, SourceLines},
    decode::{Capture, Event, Symbolizer},
    units::{NodeTable, ThreadTraces, TraceEntry, TraceEntryKind, thread_traces},
};

/// What a stack frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// A traced call (a function probe or a Python function).
    Traced,
    /// The sampled user function.
    User,
    /// A function inlined at the frame below it (the next one toward the
    /// root).
    Inlined,
    /// The sampled kernel function.
    Kernel,
}

/// One frame of a stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StackFrame {
    /// Function name.
    pub function: String,
    /// Source file, when known.
    pub file: Option<String>,
    /// Line, when known.
    pub line: Option<u32>,
    /// What the frame is.
    pub kind: FrameKind,
    /// The code address the frame is at, as (object path, object address):
    /// the sampled IP, or the call site of the traced call above it. Frames
    /// inlined at one address share it.
    pub address: Option<(Rc<str>, u64)>,
}

/// The process a stack was recorded in.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessKey {
    /// Host name of the capture.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Command name.
    pub comm: String,
}

impl ProcessKey {
    /// `comm[pid]`, with `@host` when `with_host`.
    pub fn label(&self, with_host: bool) -> String {
        let comm = if self.comm.is_empty() {
            "?"
        } else {
            &self.comm
        };
        if with_host {
            format!("{comm}[{}]@{}", self.pid, self.host)
        } else {
            format!("{comm}[{}]", self.pid)
        }
    }
}

/// Which profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProfileKind {
    /// CPU samples (`tracer record --sample-hz`).
    Samples,
    /// Exclusive time and calls of traced functions (`tracer record -f`).
    Time,
}

impl ProfileKind {
    /// Names and units of the two values of every stack (pprof's sample
    /// types); pprof shows the second by default.
    pub fn value_types(self) -> [(&'static str, &'static str); 2] {
        match self {
            Self::Samples => [("samples", "count"), ("cpu", "nanoseconds")],
            Self::Time => [("calls", "count"), ("time", "nanoseconds")],
        }
    }
}

/// Weighted stacks of one or more captures.
#[derive(Clone, Debug)]
pub struct StackProfile {
    /// Which profile.
    pub kind: ProfileKind,
    /// Frames, interned.
    pub frames: Vec<StackFrame>,
    /// Processes, interned.
    pub processes: Vec<ProcessKey>,
    /// Stacks: frame ids root first, process id, values (see
    /// [`ProfileKind::value_types`]). Aggregated: each (process, stack) once.
    pub stacks: Vec<(Vec<u32>, u32, [u64; 2])>,
    /// Sampling period in ns (samples), 0 for time.
    pub period_ns: u64,
    /// Wall-clock start of the earliest capture, ns since the epoch.
    pub start_wall_ns: u64,
    /// Wall-clock span covered, ns.
    pub duration_ns: u64,
    /// Captures the stacks came from.
    pub captures: usize,
    /// What the export could not do (lost lines, skipped records).
    pub notes: Vec<String>,
}

/// Accumulates stacks.
struct Builder {
    kind: ProfileKind,
    frames: Vec<StackFrame>,
    frame_ids: HashMap<StackFrame, u32>,
    processes: Vec<ProcessKey>,
    process_ids: HashMap<ProcessKey, u32>,
    stacks: HashMap<(u32, Vec<u32>), [u64; 2]>,
}

impl Builder {
    fn frame(&mut self, f: StackFrame) -> u32 {
        if let Some(id) = self.frame_ids.get(&f) {
            return *id;
        }
        let id = self.frames.len() as u32;
        self.frames.push(f.clone());
        self.frame_ids.insert(f, id);
        id
    }

    fn process(&mut self, p: ProcessKey) -> u32 {
        if let Some(id) = self.process_ids.get(&p) {
            return *id;
        }
        let id = self.processes.len() as u32;
        self.processes.push(p.clone());
        self.process_ids.insert(p, id);
        id
    }

    fn add(&mut self, process: u32, stack: &[u32], values: [u64; 2]) {
        let slot = self
            .stacks
            .entry((process, stack.to_vec()))
            .or_insert([0, 0]);
        slot[0] += values[0];
        slot[1] += values[1];
    }
}

/// Frames of `frames` (innermost first, from [`SourceLines`]) as stack
/// frames root first; the outermost takes `kind`, the others are inlined.
fn from_lines(
    frames: &[Frame],
    kind: FrameKind,
    address: Option<(Rc<str>, u64)>,
) -> impl Iterator<Item = StackFrame> + '_ {
    let n = frames.len();
    frames
        .iter()
        .rev()
        .enumerate()
        .map(move |(i, f)| StackFrame {
            function: f.function.clone(),
            file: f.file.clone(),
            line: f.line,
            kind: if i == 0 && n > 0 {
                kind
            } else {
                FrameKind::Inlined
            },
            address: address.clone(),
        })
}

/// Per capture: the traced call paths of its processes as frame ids.
struct Paths<'a> {
    symbols: &'a Symbolizer<'a>,
    objects: FxHashMap<&'a str, Rc<str>>,
    /// By (pid, innermost node): the frame ids root first.
    cache: FxHashMap<(u32, u32), Rc<[u32]>>,
}

impl<'a> Paths<'a> {
    fn new(symbols: &'a Symbolizer<'a>) -> Self {
        Self {
            symbols,
            objects: FxHashMap::default(),
            cache: FxHashMap::default(),
        }
    }

    fn object(&mut self, path: &'a str) -> Rc<str> {
        Rc::clone(self.objects.entry(path).or_insert_with(|| Rc::from(path)))
    }

    /// The frames of traced call stack `stack` (nodes, outermost first):
    /// each traced function at the line where it called the next one.
    fn frames(
        &mut self,
        pid: u32,
        traces: &ThreadTraces,
        stack: &[u32],
        lines: &mut SourceLines,
        b: &mut Builder,
    ) -> Rc<[u32]> {
        let Some(&inner) = stack.last() else {
            return Rc::from([]);
        };
        if let Some(ids) = self.cache.get(&(pid, inner)) {
            return Rc::clone(ids);
        }
        let mut ids: Vec<u32> = Vec::new();
        for (i, &node) in stack.iter().enumerate() {
            let function = traces.nodes.node_key(node).callee.clone();
            // Where this frame called the next traced one.
            let site = stack
                .get(i + 1)
                .and_then(|next| traces.call_sites.get(&traces.nodes.key_id(*next)))
                .copied();
            let placed = site.and_then(|s| {
                let o = self.symbols.user_object(pid, s)?;
                Some((o.table?, o.vaddr?))
            });
            match placed {
                Some((table, vaddr)) => {
                    let at = lines.frames(table, vaddr, AddressKind::Return);
                    let address = Some((self.object(&table.path), vaddr));
                    // The traced name stays (probe symbols and aliases name
                    // a function one way everywhere); DWARF adds the line
                    // and the functions inlined at the call.
                    let mut frames: Vec<StackFrame> =
                        from_lines(&at, FrameKind::Traced, address).collect();
                    if let Some(outer) = frames.first_mut() {
                        outer.function = function;
                    }
                    ids.extend(frames.into_iter().map(|f| b.frame(f)));
                }
                None => ids.push(b.frame(StackFrame {
                    function,
                    file: None,
                    line: None,
                    kind: FrameKind::Traced,
                    address: None,
                })),
            }
        }
        let ids: Rc<[u32]> = ids.into();
        self.cache.insert((pid, inner), Rc::clone(&ids));
        ids
    }
}

/// The nodes open after each entry of a thread, replayed entry by entry.
struct Replay<'t> {
    entries: &'t [TraceEntry],
    next: usize,
    stack: Vec<u32>,
}

impl<'t> Replay<'t> {
    fn new(entries: &'t [TraceEntry]) -> Self {
        Self {
            entries,
            next: 0,
            stack: Vec::new(),
        }
    }

    /// Applies the next entry; `None` at the end.
    fn step(&mut self) -> Option<&'t TraceEntry> {
        let e = self.entries.get(self.next)?;
        self.next += 1;
        match e.kind {
            TraceEntryKind::Call => {
                self.stack.truncate((e.depth as usize).saturating_sub(1));
                self.stack.push(e.node);
            }
            TraceEntryKind::Return => self.stack.truncate(e.depth as usize),
            TraceEntryKind::Syscall { .. } => {}
        }
        Some(e)
    }

    /// Applies every entry up to time `t` (inclusive).
    fn advance_to(&mut self, t: u64) {
        while self.entries.get(self.next).is_some_and(|e| e.ts_ns <= t) {
            self.step();
        }
    }
}

/// The last record time of a capture, or its end marker's.
pub(super) fn capture_end(capture: &Capture) -> u64 {
    let last = capture
        .events()
        .filter_map(Result::ok)
        .map(|e| e.header().ts_ns)
        .max()
        .unwrap_or(0);
    capture.end.as_ref().map_or(last, |e| e.stop_ns.max(last))
}

/// The process key of `pid` in `capture`.
fn process_key(capture: &Capture, pid: u32, comm: Option<&str>) -> ProcessKey {
    ProcessKey {
        host: capture.header.host.clone(),
        pid,
        comm: capture.comm(pid).or(comm).unwrap_or_default().to_string(),
    }
}

/// Builds the `kind` profile of `captures`; `lines` resolves files and
/// lines (and says which objects had none).
pub fn build(captures: &[&Capture], kind: ProfileKind, lines: &mut SourceLines) -> StackProfile {
    let mut b = Builder {
        kind,
        frames: Vec::new(),
        frame_ids: HashMap::new(),
        processes: Vec::new(),
        process_ids: HashMap::new(),
        stacks: HashMap::new(),
    };
    let mut notes = Vec::new();
    let mut period_ns = 0;
    let mut start = u64::MAX;
    let mut end = 0u64;
    for capture in captures {
        let clock = capture.header.clock;
        let stop = capture_end(capture);
        start = start.min(clock.realtime_ns);
        end = end.max(clock.to_realtime(stop));
        let symbols = Symbolizer::new(capture);
        let traces = thread_traces(capture);
        let mut paths = Paths::new(&symbols);
        match kind {
            ProfileKind::Samples => {
                let hz = capture.header.settings.sample_hz;
                let period = 1_000_000_000u64.checked_div(hz).unwrap_or(0);
                if period_ns != 0 && period_ns != period {
                    notes.push(
                        "captures were sampled at different rates: pprof's period is that of \
                         the first; each sample's CPU time is its own capture's period"
                            .to_string(),
                    );
                } else {
                    period_ns = period;
                }
                add_samples(
                    capture, &traces, &mut paths, lines, &mut b, &mut notes, period,
                );
            }
            ProfileKind::Time => add_time(capture, &traces, &mut paths, lines, &mut b, stop),
        }
    }
    notes.extend(lines.missing_notes());
    let mut stacks: Vec<(Vec<u32>, u32, [u64; 2])> =
        b.stacks.into_iter().map(|((p, s), v)| (s, p, v)).collect();
    // A stable order for files and tests.
    stacks.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    StackProfile {
        kind: b.kind,
        frames: b.frames,
        processes: b.processes,
        stacks,
        period_ns,
        start_wall_ns: if start == u64::MAX { 0 } else { start },
        duration_ns: end.saturating_sub(if start == u64::MAX { end } else { start }),
        captures: captures.len(),
        notes,
    }
}

fn add_samples(
    capture: &Capture,
    traces: &std::collections::BTreeMap<u32, ThreadTraces>,
    paths: &mut Paths<'_>,
    lines: &mut SourceLines,
    b: &mut Builder,
    notes: &mut Vec<String>,
    period_ns: u64,
) {
    // Samples per thread, in time order.
    // (time, user IP, kernel IP, command) per (pid, tid).
    type Samples = Vec<(u64, u64, u64, [u8; 16])>;
    let mut per_thread: FxHashMap<(u32, u32), Samples> = FxHashMap::default();
    let mut idle = 0u64;
    for event in capture.events().filter_map(Result::ok) {
        if let Event::Sample(s) = event {
            let h = s.header;
            if h.pid == 0 {
                idle += 1;
                continue;
            }
            per_thread.entry((h.pid, h.tid)).or_default().push((
                h.ts_ns,
                s.user_ip,
                s.kernel_ip,
                s.comm,
            ));
        }
    }
    if idle > 0 {
        notes.push(format!(
            "{}: {idle} samples of the idle task left out",
            capture.header.host
        ));
    }
    let mut keys: Vec<(u32, u32)> = per_thread.keys().copied().collect();
    keys.sort_unstable();
    let empty: Vec<TraceEntry> = Vec::new();
    for (pid, tid) in keys {
        let Some(mut samples) = per_thread.remove(&(pid, tid)) else {
            continue;
        };
        samples.sort_by_key(|s| s.0);
        let process_traces = traces.get(&pid);
        let entries = process_traces
            .and_then(|t| t.threads.get(&tid))
            .unwrap_or(&empty);
        let mut replay = Replay::new(entries);
        let comm = crate::decode::comm_string(&samples[0].3);
        let process = b.process(process_key(capture, pid, Some(&comm)));
        // Samples of one place count together; stacks are built once per
        // place (innermost traced node, user IP, kernel IP).
        let mut places: FxHashMap<(u32, u64, u64), u64> = FxHashMap::default();
        for (ts, user_ip, kernel_ip, _) in samples {
            replay.advance_to(ts);
            let node = replay.stack.last().copied().unwrap_or(u32::MAX);
            *places.entry((node, user_ip, kernel_ip)).or_default() += 1;
        }
        let mut places: Vec<((u32, u64, u64), u64)> = places.into_iter().collect();
        places.sort_unstable();
        for ((node, user_ip, kernel_ip), n) in places {
            let mut stack: Vec<u32> = match process_traces {
                Some(t) if node != u32::MAX => {
                    let path: Vec<u32> = node_path(&t.nodes, node);
                    paths.frames(pid, t, &path, lines, b).to_vec()
                }
                _ => Vec::new(),
            };
            if user_ip != 0 {
                let at = lines.frames_at(paths.symbols, pid, user_ip, AddressKind::Instruction);
                let address = paths
                    .symbols
                    .user_object(pid, user_ip)
                    .and_then(|o| Some((paths.object(o.object), o.vaddr?)));
                let user: Vec<StackFrame> = from_lines(&at, FrameKind::User, address).collect();
                // A sample inside the innermost traced function itself: one frame.
                if let (Some(&last), Some(first)) = (stack.last(), user.first())
                    && b.frames[last as usize].function == first.function
                {
                    stack.pop();
                }
                stack.extend(user.into_iter().map(|f| b.frame(f)));
            }
            if kernel_ip != 0 {
                let function = paths
                    .symbols
                    .kernel(kernel_ip)
                    .and_then(|l| l.symbol.map(str::to_string))
                    .unwrap_or_else(|| format!("{kernel_ip:#x}"));
                stack.push(b.frame(StackFrame {
                    function,
                    file: None,
                    line: None,
                    kind: FrameKind::Kernel,
                    address: None,
                }));
            }
            b.add(process, &stack, [n, n * period_ns]);
        }
    }
}

/// The nodes from the root to `node`.
fn node_path(nodes: &NodeTable, mut node: u32) -> Vec<u32> {
    let mut path = Vec::new();
    while node != NodeTable::ROOT {
        path.push(node);
        node = nodes.parent(node);
    }
    path.reverse();
    path
}

fn add_time(
    capture: &Capture,
    traces: &std::collections::BTreeMap<u32, ThreadTraces>,
    paths: &mut Paths<'_>,
    lines: &mut SourceLines,
    b: &mut Builder,
    stop: u64,
) {
    for (pid, t) in traces {
        let process = b.process(process_key(capture, *pid, None));
        // Per innermost node: (calls, exclusive ns); stacks built once each.
        let mut per_node: FxHashMap<u32, [u64; 2]> = FxHashMap::default();
        for entries in t.threads.values() {
            let mut replay = Replay::new(entries);
            // Since when the innermost frame has been innermost.
            let mut since = 0u64;
            while let Some(e) = replay.entries.get(replay.next) {
                if matches!(e.kind, TraceEntryKind::Syscall { .. }) {
                    replay.step();
                    continue;
                }
                if let Some(&inner) = replay.stack.last() {
                    per_node.entry(inner).or_default()[1] += e.ts_ns.saturating_sub(since);
                }
                replay.step();
                if e.kind == TraceEntryKind::Call {
                    per_node.entry(e.node).or_default()[0] += 1;
                }
                since = e.ts_ns;
            }
            if let Some(&inner) = replay.stack.last() {
                per_node.entry(inner).or_default()[1] += stop.saturating_sub(since);
            }
        }
        let mut per_node: Vec<(u32, [u64; 2])> = per_node.into_iter().collect();
        per_node.sort_unstable();
        for (node, values) in per_node {
            let ids = paths.frames(*pid, t, &node_path(&t.nodes, node), lines, b);
            b.add(process, &ids, values);
        }
    }
}

impl StackProfile {
    /// Folded stacks (`frame;frame;… value`), root first, one line per
    /// stack: the process (`comm[pid]`, with `@host` for several captures),
    /// then the frames; kernel frames end in `_[k]` and inlined ones in
    /// `_[i]` (the suffixes flame graph tools color by). The value is the
    /// sample count, or the exclusive time in ns.
    pub fn folded(&self) -> Vec<String> {
        let with_host = self.captures > 1;
        // Stacks that differ only in lines or addresses fold into one.
        let mut folded: std::collections::BTreeMap<String, u64> = Default::default();
        for (stack, process, values) in &self.stacks {
            let value = match self.kind {
                ProfileKind::Samples => values[0],
                ProfileKind::Time => values[1],
            };
            if value == 0 {
                continue;
            }
            let mut line = folded_name(&self.processes[*process as usize].label(with_host));
            for id in stack {
                let f = &self.frames[*id as usize];
                line.push(';');
                line.push_str(&folded_name(&f.function));
                match f.kind {
                    FrameKind::Kernel => line.push_str("_[k]"),
                    FrameKind::Inlined => line.push_str("_[i]"),
                    FrameKind::Traced | FrameKind::User => {}
                }
            }
            *folded.entry(line).or_default() += value;
        }
        folded
            .into_iter()
            .map(|(stack, value)| format!("{stack} {value}"))
            .collect()
    }

    /// The sum of the first and second values over every stack.
    pub fn totals(&self) -> [u64; 2] {
        self.stacks
            .iter()
            .fold([0, 0], |acc, (_, _, v)| [acc[0] + v[0], acc[1] + v[1]])
    }
}

/// A name as one folded frame: `;` separates frames and the last space the
/// value, so neither may appear inside a name, nor a line break.
fn folded_name(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_whitespace() => '_',
            c => c,
        })
        .collect()
}
