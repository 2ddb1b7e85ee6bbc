//! Per-thread trace entries with their call-tree nodes.
//!
//! A call-tree node is identified by its path from the root, each step being
//! (call site, callee) (000 §2.3): calls of one function from two call sites
//! are two nodes, repeated calls from one site are one node. Call sites are
//! symbolized (`caller+0x1a`), so node identities hold across runs and hosts
//! despite address-space randomization. System calls are leaf nodes named
//! `sys:NAME` under the frame they were made from.
//!
//! Python frames are functions too (issue 7): a `python:function__entry` USDT
//! hit is a call of `FILE:FUNCTION:LINE` (the line CPython passes: the first
//! line, or the resume line of a generator), its call site is the calling
//! Python frame as `FUNCTION:LINE`, and `function__return` of the same file
//! and function pops it. Native calls and system calls of the thread
//! interleave in the same tree.

use std::collections::{BTreeMap, HashMap};

use rustc_hash::{FxHashMap, FxHashSet};
use tracer_common::{
    capture::RawRecords,
    record::{
        ExitStatus, FuncEntry, FuncReturn, Header, Lifecycle, Pod as _, SYSCALL_UNFINISHED,
        Syscall, UsdtHit, UsdtString, kind, lifecycle,
    },
    syscall::nr,
};

use crate::decode::{Capture, Symbolizer, addr_string, is_uretprobe_trampoline, syscall_name};

/// One step of a call path.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeKey {
    /// Symbolized call site (`caller+0x1a`); empty for system calls.
    pub site: String,
    /// Function name, or `sys:NAME` for a system call.
    pub callee: String,
}

/// Frames of a path shown in reports ([`NodeTable::path_display`]).
pub const DISPLAY_FRAMES: usize = 64;

/// The call-tree nodes of one process: a trie of [`NodeKey`] paths.
#[derive(Clone, Debug, Default)]
pub struct NodeTable {
    keys: Vec<NodeKey>,
    key_ids: FxHashMap<NodeKey, u32>,
    /// (parent node or [`NodeTable::ROOT`], key id) per node.
    nodes: Vec<(u32, u32)>,
    /// Depth per node (top-level nodes have depth 1): kept, not walked, so
    /// that work per node stays constant on stacks a million calls deep.
    depths: Vec<u32>,
    /// (key id, child) per node, and of the root: fan-out is small, so a
    /// scan beats hashing on every trace entry.
    children: Vec<Vec<(u32, u32)>>,
    root_children: Vec<(u32, u32)>,
    /// (parent, key id) to child, for the children of nodes with more than
    /// [`SCAN_CHILDREN`] of them: a scan per entry would make a node with a
    /// million distinct callees (a damaged or crafted capture) quadratic.
    wide: FxHashMap<(u32, u32), u32>,
}

/// Children of a node searched by scanning; beyond, by hash.
const SCAN_CHILDREN: usize = 32;

impl NodeTable {
    /// The virtual root every path starts from.
    pub const ROOT: u32 = u32::MAX;

    /// Interns a key.
    pub fn key(&mut self, key: NodeKey) -> u32 {
        if let Some(id) = self.key_ids.get(&key) {
            return *id;
        }
        let id = self.keys.len() as u32;
        self.keys.push(key.clone());
        self.key_ids.insert(key, id);
        id
    }

    /// The node for `key_id` under `parent`, created if new.
    #[inline]
    pub fn child(&mut self, parent: u32, key_id: u32) -> u32 {
        let list = if parent == Self::ROOT {
            &mut self.root_children
        } else {
            &mut self.children[parent as usize]
        };
        if list.len() <= SCAN_CHILDREN {
            if let Some(&(_, id)) = list.iter().find(|(k, _)| *k == key_id) {
                return id;
            }
        } else if let Some(id) = self.wide.get(&(parent, key_id)) {
            return *id;
        }
        let id = self.nodes.len() as u32;
        list.push((key_id, id));
        if list.len() > SCAN_CHILDREN {
            if list.len() == SCAN_CHILDREN + 1 {
                for &(k, c) in list.iter() {
                    self.wide.insert((parent, k), c);
                }
            } else {
                self.wide.insert((parent, key_id), id);
            }
        }
        self.nodes.push((parent, key_id));
        let depth = if parent == Self::ROOT {
            1
        } else {
            self.depths[parent as usize].saturating_add(1)
        };
        self.depths.push(depth);
        self.children.push(Vec::new());
        id
    }

    /// The key id of `node` (see [`NodeTable::key`]).
    pub fn key_id(&self, node: u32) -> u32 {
        self.nodes[node as usize].1
    }

    /// Parent of `node` ([`NodeTable::ROOT`] for top-level nodes).
    pub fn parent(&self, node: u32) -> u32 {
        self.nodes[node as usize].0
    }

    /// Key of `node`.
    pub fn node_key(&self, node: u32) -> &NodeKey {
        &self.keys[self.nodes[node as usize].1 as usize]
    }

    /// Depth of `node` (top-level nodes have depth 1).
    pub fn depth(&self, node: u32) -> usize {
        self.depths[node as usize] as usize
    }

    /// The keys from the root to `node`.
    pub fn path(&self, mut node: u32) -> Vec<&NodeKey> {
        let mut out = Vec::new();
        while node != Self::ROOT {
            out.push(self.node_key(node));
            node = self.parent(node);
        }
        out.reverse();
        out
    }

    /// The path of `node` as text: `main > serve@main+0x4f > sys:poll`.
    pub fn path_string(&self, node: u32) -> String {
        self.path(node)
            .iter()
            .map(|k| {
                if k.site.is_empty() {
                    k.callee.clone()
                } else {
                    format!("{}@{}", k.callee, k.site)
                }
            })
            .collect::<Vec<_>>()
            .join(" > ")
    }

    /// The path of `node` for people: [`NodeTable::path_string`], but of
    /// a node deeper than [`DISPLAY_FRAMES`] only the frames nearest to it,
    /// after the number left out (`… 999936 frames > walk@visit+0x10 > …`),
    /// so that reporting a node costs at most that many steps.
    pub fn path_display(&self, node: u32) -> String {
        let mut keys = Vec::new();
        let mut n = node;
        while n != Self::ROOT && keys.len() < DISPLAY_FRAMES {
            keys.push(self.node_key(n));
            n = self.parent(n);
        }
        keys.reverse();
        let steps = keys.iter().map(|k| {
            if k.site.is_empty() {
                k.callee.clone()
            } else {
                format!("{}@{}", k.callee, k.site)
            }
        });
        let left_out = self.depth(node) - keys.len();
        if left_out == 0 {
            steps.collect::<Vec<_>>().join(" > ")
        } else {
            std::iter::once(format!("… {left_out} frames"))
                .chain(steps)
                .collect::<Vec<_>>()
                .join(" > ")
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// What a trace entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceEntryKind {
    /// A function call (its node is pushed on the stack).
    Call,
    /// The return of the node's call.
    Return,
    /// A system call (a leaf node).
    Syscall {
        /// System call number (x86-64 numbers fit 16 bits; it keeps an
        /// entry at 32 bytes, and traces hold one per record).
        nr: u16,
        /// The fd argument, or -1.
        fd: i32,
        /// Return value.
        ret: i64,
    },
}

/// One entry of a thread's trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// Time: entry/return time, or a system call's entry time.
    pub ts_ns: u64,
    /// What happened.
    pub kind: TraceEntryKind,
    /// The call-tree node (for a return, the node returned from).
    pub node: u32,
    /// Stack depth after the entry (calls count themselves, returns do not).
    pub depth: u32,
}

// Traces hold one entry per record: keep them at half a cache line.
const _: () = assert!(size_of::<TraceEntry>() == 32);

/// Per-thread traces of process `pid`, plus peer addresses of its
/// connect/accept calls by (tid, entry index).
pub struct ThreadTraces {
    /// The process's call-tree nodes.
    pub nodes: NodeTable,
    /// Entries by thread id, in time order.
    pub threads: BTreeMap<u32, Vec<TraceEntry>>,
    /// Descriptors made by socketpair entries, by (tid, index).
    pub pairs: HashMap<(u32, usize), (i32, i32)>,
    /// Peer addresses of connect/accept entries, by (tid, index).
    pub peers: HashMap<(u32, usize), String>,
    /// Threads whose exit was recorded, with its time.
    pub exited: BTreeMap<u32, u64>,
    /// When the whole process ended, and how where that was recorded.
    pub ended: Option<(u64, Option<ExitStatus>)>,
    /// The call site (return address, as the process saw it) of each
    /// native call's node key, by key id ([`NodeTable::key_id`]): where
    /// exports look up the caller's file and line.
    pub call_sites: FxHashMap<u32, u64>,
}

/// What [`thread_traces`] takes from one event.
#[derive(Clone, Copy)]
enum Item {
    Call {
        func_id: u32,
        site: u64,
    },
    Return {
        func_id: u32,
    },
    Syscall {
        nr: u32,
        fd: i32,
        ret: i64,
        arg: u64,
    },
    /// A Python function entry (`entry`) or return: texts as
    /// [`UsdtStrings`] ids (see [`python_item`]).
    Py {
        entry: bool,
        file: u32,
        function: u32,
        line: i32,
    },
}

/// What a USDT probe is to the traces, by probe id.
const PY_NONE: u8 = 0;
const PY_ENTRY: u8 = 1;
const PY_RETURN: u8 = 2;

/// The role of each USDT probe of `capture`: Python function entry, return,
/// or nothing for the traces.
fn usdt_roles(capture: &Capture) -> Vec<u8> {
    capture
        .usdt_probes
        .iter()
        .map(|p| match (p.provider.as_str(), p.name.as_str()) {
            _ if p.semaphore_only => PY_NONE,
            ("python", "function__entry") => PY_ENTRY,
            ("python", "function__return") => PY_RETURN,
            _ => PY_NONE,
        })
        .collect()
}

/// The texts of USDT string arguments, interned, and the text each
/// (process, pointer) meant last: records come in ring order, so a hit
/// resolves to the text its process sent before it (the tracer sends a
/// pointer's text again when the memory behind it changed).
#[derive(Default)]
struct UsdtStrings {
    by_ptr: FxHashMap<(u32, u64), u32>,
    texts: Vec<String>,
    ids: FxHashMap<String, u32>,
}

impl UsdtStrings {
    fn intern(&mut self, text: String) -> u32 {
        if let Some(id) = self.ids.get(&text) {
            return *id;
        }
        let id = self.texts.len() as u32;
        self.texts.push(text.clone());
        self.ids.insert(text, id);
        id
    }

    /// Records a [`UsdtString`] record's text for its process and pointer.
    fn record(&mut self, bytes: &[u8]) {
        let Some(s) = UsdtString::read_from(bytes) else {
            return;
        };
        let len = (s.len as usize).min(s.text.len());
        let id = self.intern(String::from_utf8_lossy(&s.text[..len]).into_owned());
        self.by_ptr.insert((s.header.pid, s.ptr), id);
    }

    /// The text id of pointer `ptr` of process `pid` (the address as text
    /// when its string record was lost).
    fn text(&mut self, pid: u32, ptr: u64) -> u32 {
        match self.by_ptr.get(&(pid, ptr)) {
            Some(id) => *id,
            None => self.intern(format!("{ptr:#x}")),
        }
    }

    /// The Python item of a USDT hit record of a Python function probe
    /// (`roles` by probe id, see [`usdt_roles`]), its string pointers
    /// resolved to text ids as of this point of the ring.
    fn python_item(&mut self, roles: &[u8], bytes: &[u8]) -> Option<(u32, u32, u64, Item)> {
        let hit = UsdtHit::read_from(bytes)?;
        let role = roles.get(hit.probe_id as usize).copied()?;
        if role == PY_NONE || hit.nargs < 3 {
            return None;
        }
        let h = hit.header;
        Some((
            h.pid,
            h.tid,
            h.ts_ns,
            Item::Py {
                entry: role == PY_ENTRY,
                file: self.text(h.pid, hit.args[0]),
                function: self.text(h.pid, hit.args[1]),
                line: hit.args[2] as i32,
            },
        ))
    }
}

/// Marks a Python frame in [`ThreadBuilder::stack`]: its `func_id` slot is
/// this bit plus the frame's label id, its site slot is (file, function)
/// text ids, which its return matches. Native function ids are indexes into
/// the probe table and never reach this bit.
const PY_FRAME: u32 = 1 << 31;

/// Key caches of a process's Python frames.
#[derive(Default)]
struct PythonKeys {
    /// (file, function, line) text ids, by label id.
    labels: Vec<(u32, u32, i32)>,
    label_ids: FxHashMap<(u32, u32, i32), u32>,
    /// Node key by (caller label or `u32::MAX`, callee label).
    keys: FxHashMap<(u32, u32), u32>,
}

/// One process's node table and key caches while traces are built.
#[derive(Default)]
struct ProcessBuilder {
    nodes: NodeTable,
    site_keys: FxHashMap<(u64, u32), u32>,
    /// Raw call site of each native call key (the first seen).
    call_sites: FxHashMap<u32, u64>,
    sys_keys: FxHashMap<u32, u32>,
    /// Key caches of Python frames, boxed: processes without them stay small.
    python: Box<PythonKeys>,
    peers: HashMap<(u32, usize), String>,
    pairs: HashMap<(u32, usize), (i32, i32)>,
    threads: Vec<(u32, ThreadBuilder)>,
    thread_index: FxHashMap<u32, usize>,
    exited: BTreeMap<u32, u64>,
    ended: Option<(u64, Option<ExitStatus>)>,
    /// (tid, index into `threads`) of the last record: runs of one thread's
    /// records skip the lookup.
    last_thread: Option<(u32, usize)>,
}

/// One thread's call stack and entries while its trace is built.
#[derive(Default)]
struct ThreadBuilder {
    /// (node, func_id, call site) per open call; see [`PY_FRAME`] for
    /// Python frames.
    stack: Vec<(u32, u32, u64)>,
    entries: Vec<TraceEntry>,
    last_ts: u64,
}

impl ProcessBuilder {
    /// A thread of the process exited at `ts_ns` (the process with it when
    /// `exit.ended`).
    fn exit(&mut self, exit: Exit, ts_ns: u64) {
        self.exited.insert(exit.tid, ts_ns);
        if let Some(status) = exit.ended {
            self.ended = Some((ts_ns, status));
        }
    }

    /// Appends one item of thread `tid`; `false` (and nothing appended) if
    /// it is older than the thread's last entry.
    #[inline]
    fn push(
        &mut self,
        pid: u32,
        tid: u32,
        t: u64,
        item: Item,
        peer: Option<String>,
        (sym, capture): (&Symbolizer<'_>, &Capture),
    ) -> bool {
        let at = self.thread_slot(tid);
        let thread = &mut self.threads[at].1;
        if thread.last_ts > t {
            return false;
        }
        thread.last_ts = t;
        let nodes = &mut self.nodes;
        let parent = thread.stack.last().map_or(NodeTable::ROOT, |f| f.0);
        match item {
            Item::Call { func_id, site } => {
                // A tail call from a function under a uretprobe returns
                // to the trampoline: its real call site is the caller's.
                let site = if is_uretprobe_trampoline(site) {
                    thread.stack.last().map_or(0, |f| f.2)
                } else {
                    site
                };
                let call_sites = &mut self.call_sites;
                let key = *self.site_keys.entry((site, func_id)).or_insert_with(|| {
                    let site_name = sym
                        .user(pid, site)
                        .map(|l| l.to_string())
                        .unwrap_or_default();
                    let key = nodes.key(NodeKey {
                        site: site_name,
                        callee: capture.function_name(func_id),
                    });
                    call_sites.entry(key).or_insert(site);
                    key
                });
                let node = nodes.child(parent, key);
                thread.stack.push((node, func_id, site));
                thread.entries.push(TraceEntry {
                    ts_ns: t,
                    kind: TraceEntryKind::Call,
                    node,
                    depth: thread.stack.len() as u32,
                });
            }
            Item::Return { func_id } => {
                // Pop to the matching frame; a return with no frame
                // (the call began before recording) is dropped.
                let Some(pos) = thread.stack.iter().rposition(|f| f.1 == func_id) else {
                    return true;
                };
                let node = thread.stack[pos].0;
                thread.stack.truncate(pos);
                thread.entries.push(TraceEntry {
                    ts_ns: t,
                    kind: TraceEntryKind::Return,
                    node,
                    depth: thread.stack.len() as u32,
                });
            }
            // Python items go to `push_python`.
            Item::Py { .. } => {}
            Item::Syscall { nr, fd, ret, arg } => {
                let key = *self.sys_keys.entry(nr).or_insert_with(|| {
                    nodes.key(NodeKey {
                        site: String::new(),
                        callee: format!("sys:{}", syscall_name(nr)),
                    })
                });
                let node = nodes.child(parent, key);
                if let Some(peer) = peer {
                    self.peers.insert((tid, thread.entries.len()), peer);
                }
                if nr == nr::SOCKETPAIR && ret == 0 {
                    let pair = (arg as u32 as i32, (arg >> 32) as u32 as i32);
                    self.pairs.insert((tid, thread.entries.len()), pair);
                }
                thread.entries.push(TraceEntry {
                    ts_ns: t,
                    kind: TraceEntryKind::Syscall {
                        nr: nr as u16,
                        fd,
                        ret,
                    },
                    node,
                    depth: thread.stack.len() as u32,
                });
            }
        }
        true
    }

    /// The index in `threads` of thread `tid`, added if new.
    #[inline(always)]
    fn thread_slot(&mut self, tid: u32) -> usize {
        match self.last_thread {
            Some((last, at)) if last == tid => at,
            _ => {
                let next = self.threads.len();
                let at = *self.thread_index.entry(tid).or_insert(next);
                if at == next {
                    self.threads.push((tid, ThreadBuilder::default()));
                }
                self.last_thread = Some((tid, at));
                at
            }
        }
    }

    /// [`ProcessBuilder::push`] of a Python entry or return (texts by
    /// [`UsdtStrings`] id); apart, so the native path stays as it was.
    #[inline(never)]
    fn push_python(&mut self, tid: u32, t: u64, item: Item, texts: &[String]) -> bool {
        let at = self.thread_slot(tid);
        let thread = &mut self.threads[at].1;
        if thread.last_ts > t {
            return false;
        }
        thread.last_ts = t;
        let nodes = &mut self.nodes;
        let py = &mut *self.python;
        let parent = thread.stack.last().map_or(NodeTable::ROOT, |f| f.0);
        match item {
            Item::Py {
                entry: true,
                file,
                function,
                line,
            } => {
                let label = match py.label_ids.get(&(file, function, line)) {
                    Some(l) => *l,
                    None => {
                        let l = py.labels.len() as u32;
                        py.labels.push((file, function, line));
                        py.label_ids.insert((file, function, line), l);
                        l
                    }
                };
                // The calling Python frame: usually the top of the stack,
                // below native frames when called back from C.
                let caller = thread
                    .stack
                    .iter()
                    .rev()
                    .find(|f| f.1 & PY_FRAME != 0)
                    .map_or(u32::MAX, |f| f.1 & !PY_FRAME);
                let labels = &py.labels;
                let key = *py.keys.entry((caller, label)).or_insert_with(|| {
                    let text = |id: u32| texts.get(id as usize).map_or("?", String::as_str);
                    let site = labels
                        .get(caller as usize)
                        .map(|&(_, f, l)| format!("{}:{l}", text(f)))
                        .unwrap_or_default();
                    nodes.key(NodeKey {
                        site,
                        callee: format!("{}:{}:{line}", text(file), text(function)),
                    })
                });
                let node = nodes.child(parent, key);
                let packed = (u64::from(file) << 32) | u64::from(function);
                thread.stack.push((node, PY_FRAME | label, packed));
                thread.entries.push(TraceEntry {
                    ts_ns: t,
                    kind: TraceEntryKind::Call,
                    node,
                    depth: thread.stack.len() as u32,
                });
            }
            Item::Py {
                entry: false,
                file,
                function,
                ..
            } => {
                // The return line differs from the entry's: match the file
                // and function only.
                let packed = (u64::from(file) << 32) | u64::from(function);
                let Some(pos) = thread
                    .stack
                    .iter()
                    .rposition(|f| f.1 & PY_FRAME != 0 && f.2 == packed)
                else {
                    return true;
                };
                let node = thread.stack[pos].0;
                thread.stack.truncate(pos);
                thread.entries.push(TraceEntry {
                    ts_ns: t,
                    kind: TraceEntryKind::Return,
                    node,
                    depth: thread.stack.len() as u32,
                });
            }
            _ => {}
        }
        true
    }

    fn finish(self) -> ThreadTraces {
        ThreadTraces {
            nodes: self.nodes,
            threads: self
                .threads
                .into_iter()
                .map(|(tid, t)| (tid, t.entries))
                .collect(),
            peers: self.peers,
            pairs: self.pairs,
            exited: self.exited,
            ended: self.ended,
            call_sites: self.call_sites,
        }
    }
}

/// The trace item of a raw record (header included in `bytes`), with its
/// process, thread, time and, for an establishing call, the peer address.
/// Reads only the fields it needs: this runs for every record.
#[inline]
fn item(header: &Header, bytes: &[u8]) -> Option<(u32, u32, u64, Item, Option<String>)> {
    let (pid, tid) = (header.pid, header.tid);
    Some(match header.kind {
        kind::FUNC_ENTRY
        | kind::FUNC_ENTRY_ARGS
        | kind::FUNC_ENTRY_STACK
        | kind::FUNC_ENTRY_FRAME => {
            let rec = FuncEntry::read_from(bytes)?;
            (
                pid,
                tid,
                header.ts_ns,
                Item::Call {
                    func_id: rec.func_id,
                    site: rec.call_site,
                },
                None,
            )
        }
        kind::FUNC_RETURN => {
            let rec = FuncReturn::read_from(bytes)?;
            (
                pid,
                tid,
                header.ts_ns,
                Item::Return {
                    func_id: rec.func_id,
                },
                None,
            )
        }
        kind::SYSCALL => {
            let s = Syscall::read_from(bytes)?;
            // A call still in flight when the recording stopped (its
            // process ran on), entered less than a second before: the
            // thread was at work or waiting as it does all the time, and
            // the call says nothing its completed ones do not. Worse, the
            // recorder read what was in flight after its last drain, while
            // the targets ran on: such a call may follow records never
            // drained (a poll inside a handler that never polls). A call in
            // flight longer stays: where a thread was stuck.
            if s.flags & SYSCALL_UNFINISHED != 0
                && header.ts_ns.saturating_sub(s.enter_ns) < super::CAUGHT_AT_WORK_NS
            {
                return None;
            }
            (
                pid,
                tid,
                // Recorded at exit; placed at entry.
                s.enter_ns,
                Item::Syscall {
                    nr: s.nr,
                    fd: s.fd,
                    ret: s.ret,
                    arg: s.arg,
                },
                // Peers name connections at their establishment only.
                if matches!(s.nr, nr::CONNECT | nr::ACCEPT | nr::ACCEPT4) {
                    addr_string(&s.addr)
                } else {
                    None
                },
            )
        }
        _ => return None,
    })
}

/// An exit lifecycle record's thread and, when the whole process ended with
/// it, how (`None` inside: the status was not recorded).
struct Exit {
    tid: u32,
    ended: Option<Option<ExitStatus>>,
}

fn exit_of(header: &Header, bytes: &[u8]) -> Option<Exit> {
    let rec = Lifecycle::read_from(bytes)?;
    (rec.event == lifecycle::EXIT).then(|| Exit {
        tid: header.tid,
        ended: (rec.group_dead != 0).then(|| rec.exit_status()),
    })
}

/// Every record of `capture` as (header, bytes); damaged chunks end early
/// (the decoder reports them; traces use what is readable).
pub(crate) fn raw_records(capture: &Capture) -> impl Iterator<Item = (Header, &[u8])> {
    // Functions the recorder's overhead budget detached part-way are left
    // out from the start: the units before and after the switch are then
    // built from the same functions, and the call tree does not change
    // shape when the probe went.
    // So are those left out to match a model or another capture.
    let dropped: FxHashSet<u32> = capture
        .overhead
        .iter()
        .flat_map(|o| o.dropped.iter().map(|d| d.func_id))
        .chain(capture.left_out.iter().copied())
        .collect();
    capture
        .chunks
        .iter()
        .flat_map(|(_, bytes)| RawRecords::new(bytes).map_while(Result::ok))
        .filter(move |(h, bytes)| dropped.is_empty() || !of_dropped(h, bytes, &dropped))
}

/// Whether a function record belongs to one of the `dropped` functions
/// (read with the records' own decoders, as [`item`] reads them).
fn of_dropped(header: &Header, bytes: &[u8], dropped: &FxHashSet<u32>) -> bool {
    let func_id = match header.kind {
        kind::FUNC_ENTRY
        | kind::FUNC_ENTRY_ARGS
        | kind::FUNC_ENTRY_STACK
        | kind::FUNC_ENTRY_FRAME => FuncEntry::read_from(bytes).map(|r| r.func_id),
        kind::FUNC_RETURN => FuncReturn::read_from(bytes).map(|r| r.func_id),
        _ => None,
    };
    func_id.is_some_and(|id| dropped.contains(&id))
}

/// The builder of process `pid`: `current` if it is that process's, else
/// `current` is put back in `processes` and `pid`'s taken out (runs of one
/// process's records need no lookup). The native path spells this out.
#[inline]
fn builder<'a>(
    current: &'a mut Option<(u32, ProcessBuilder)>,
    processes: &mut FxHashMap<u32, ProcessBuilder>,
    pid: u32,
) -> &'a mut ProcessBuilder {
    if current.as_ref().is_none_or(|(p, _)| *p != pid) {
        if let Some((p, b)) = current.take() {
            processes.insert(p, b);
        }
        *current = Some((pid, processes.remove(&pid).unwrap_or_default()));
    }
    &mut current
        .get_or_insert_with(|| (pid, ProcessBuilder::default()))
        .1
}

/// Builds the traces of every traced process in `capture`.
///
/// A thread's records reach the ring in the order they happened (a system
/// call is recorded at its exit, but its thread runs nothing else in
/// between), so one pass usually builds everything; a capture where some
/// thread's times go backwards is sorted per thread first.
pub fn thread_traces(capture: &Capture) -> BTreeMap<u32, ThreadTraces> {
    let sym = Symbolizer::new(capture);
    let roles = usdt_roles(capture);
    let mut strings = UsdtStrings::default();
    let mut processes: FxHashMap<u32, ProcessBuilder> = FxHashMap::default();
    let mut in_order = true;
    // The process of the last record, taken out of the map while its run of
    // records lasts: no lookup per record.
    let mut current: Option<(u32, ProcessBuilder)> = None;
    for (header, bytes) in raw_records(capture) {
        if let Some((pid, tid, t, it, peer)) = item(&header, bytes) {
            if current.as_ref().is_none_or(|(p, _)| *p != pid) {
                if let Some((p, b)) = current.take() {
                    processes.insert(p, b);
                }
                current = Some((pid, processes.remove(&pid).unwrap_or_default()));
            }
            let Some((_, p)) = current.as_mut() else {
                continue;
            };
            if !p.push(pid, tid, t, it, peer, (&sym, capture)) {
                in_order = false;
                break;
            }
        } else if header.kind == kind::LIFECYCLE {
            if let Some(exit) = exit_of(&header, bytes) {
                builder(&mut current, &mut processes, header.pid).exit(exit, header.ts_ns);
            }
        } else if roles.is_empty() {
            // No USDT probes: nothing else builds traces.
        } else if header.kind == kind::USDT {
            if let Some((pid, tid, t, it)) = strings.python_item(&roles, bytes) {
                let p = builder(&mut current, &mut processes, pid);
                if !p.push_python(tid, t, it, &strings.texts) {
                    in_order = false;
                    break;
                }
            }
        } else if header.kind == kind::USDT_STRING {
            strings.record(bytes);
        }
    }
    if let Some((p, b)) = current.take() {
        processes.insert(p, b);
    }
    if !in_order {
        processes.clear();
        type Items = Vec<(u64, Item, Option<String>)>;
        let mut raw: FxHashMap<(u32, u32), Items> = FxHashMap::default();
        let mut exits: Vec<(u32, u64, Exit)> = Vec::new();
        // Strings resolve in ring order, before the per-thread sort: a
        // pointer's text is sent once per process, by whichever thread.
        strings = UsdtStrings::default();
        for (header, bytes) in raw_records(capture) {
            if let Some((pid, tid, t, it, peer)) = item(&header, bytes) {
                raw.entry((pid, tid)).or_default().push((t, it, peer));
            } else if header.kind == kind::USDT {
                if let Some((pid, tid, t, it)) = strings.python_item(&roles, bytes) {
                    raw.entry((pid, tid)).or_default().push((t, it, None));
                }
            } else if header.kind == kind::USDT_STRING {
                strings.record(bytes);
            } else if header.kind == kind::LIFECYCLE
                && let Some(exit) = exit_of(&header, bytes)
            {
                exits.push((header.pid, header.ts_ns, exit));
            }
        }
        for (pid, t, exit) in exits {
            processes.entry(pid).or_default().exit(exit, t);
        }
        let mut raw: Vec<_> = raw.into_iter().collect();
        raw.sort_unstable_by_key(|(k, _)| *k);
        for ((pid, tid), mut items) in raw {
            // Stable: records of one time keep their ring order.
            items.sort_by_key(|(t, _, _)| *t);
            let p = processes.entry(pid).or_default();
            for (t, it, peer) in items {
                // Sorted: always accepted.
                if matches!(it, Item::Py { .. }) {
                    p.push_python(tid, t, it, &strings.texts);
                } else {
                    p.push(pid, tid, t, it, peer, (&sym, capture));
                }
            }
        }
    }
    processes
        .into_iter()
        // A process seen only exiting made no traced call.
        .filter(|(_, p)| !p.threads.is_empty())
        .map(|(pid, p)| (pid, p.finish()))
        .collect()
}

#[cfg(test)]
mod tests {
    use tracer_common::record::Pod;

    use super::*;

    fn header(kind_: u16, size: usize, ts_ns: u64) -> Header {
        Header {
            ts_ns,
            pid: 7,
            tid: 7,
            kind: kind_,
            size: size as u16,
            cpu: 0,
        }
    }

    fn capture(records: &[Vec<u8>]) -> Capture {
        Capture {
            header: Default::default(),
            processes: Default::default(),
            objects: Default::default(),
            probes: Vec::new(),
            usdt_probes: Vec::new(),
            kernel_symbols: Vec::new(),
            stats: None,
            end: None,
            overhead: None,
            chunks: vec![(0, records.concat())],
            truncated: None,
            left_out: Default::default(),
        }
    }

    fn call(ts: u64) -> Vec<u8> {
        FuncEntry {
            header: header(kind::FUNC_ENTRY, size_of::<FuncEntry>(), ts),
            func_id: 0,
            ..Default::default()
        }
        .as_bytes()
        .to_vec()
    }

    fn ret(ts: u64) -> Vec<u8> {
        FuncReturn {
            header: header(kind::FUNC_RETURN, size_of::<FuncReturn>(), ts),
            func_id: 0,
            ..Default::default()
        }
        .as_bytes()
        .to_vec()
    }

    /// A call of function 1, which the overhead budget dropped part-way.
    fn dropped_call(ts: u64, entry: bool) -> Vec<u8> {
        if entry {
            FuncEntry {
                header: header(kind::FUNC_ENTRY, size_of::<FuncEntry>(), ts),
                func_id: 1,
                ..Default::default()
            }
            .as_bytes()
            .to_vec()
        } else {
            FuncReturn {
                header: header(kind::FUNC_RETURN, size_of::<FuncReturn>(), ts),
                func_id: 1,
                ..Default::default()
            }
            .as_bytes()
            .to_vec()
        }
    }

    /// The records of a function the budget detached are left out from the
    /// start (its entry without a return at the switch included): the
    /// units before and after the switch are built from the same functions.
    #[test]
    fn functions_the_budget_dropped_are_left_out_throughout() {
        let records = [
            call(10),
            dropped_call(11, true),
            dropped_call(12, false),
            dropped_call(13, true),
            ret(20),
            call(30),
            ret(40),
        ];
        let mut c = capture(&records);
        let with = shape(&c).len();
        c.overhead = Some(tracer_common::capture::Overhead {
            dropped: vec![tracer_common::capture::DroppedProbe {
                func_id: 1,
                at_ns: 13,
                ..Default::default()
            }],
            ..Default::default()
        });
        assert_eq!(
            shape(&c),
            [
                (10, "call", 1),
                (20, "return", 0),
                (30, "call", 1),
                (40, "return", 0)
            ]
        );
        assert!(with > 4, "without the item the dropped calls are there");
    }

    fn recv(enter: u64, exit: u64) -> Vec<u8> {
        Syscall {
            header: header(kind::SYSCALL, size_of::<Syscall>(), exit),
            enter_ns: enter,
            nr: nr::RECVFROM,
            fd: 4,
            ret: 8,
            ..Default::default()
        }
        .as_bytes()
        .to_vec()
    }

    /// A recv in flight when the recording stopped, entered `enter_ns`.
    fn in_flight(enter_ns: u64, stop_ns: u64) -> Vec<u8> {
        Syscall {
            header: header(kind::SYSCALL, size_of::<Syscall>(), stop_ns),
            enter_ns,
            nr: nr::RECVFROM,
            fd: 4,
            flags: SYSCALL_UNFINISHED,
            ..Default::default()
        }
        .as_bytes()
        .to_vec()
    }

    /// A call in flight at the stop for under a second is left out (work
    /// or a wait the stop interrupted, or a call entered after the
    /// recorder's last drain); one in flight longer stays (where a thread
    /// was stuck).
    #[test]
    fn calls_in_flight_at_the_stop_count_only_when_long() {
        const S: u64 = 1_000_000_000;
        let c = capture(&[call(10), in_flight(20, 10 * S)]);
        assert_eq!(shape(&c), [(10, "call", 1), (20, "syscall", 1)]);
        let c = capture(&[call(10), in_flight(10 * S - 1_000, 10 * S)]);
        assert_eq!(shape(&c), [(10, "call", 1)]);
        // Entered after the stop's timestamp (read after the last drain).
        let c = capture(&[call(10), in_flight(10 * S + 5, 10 * S)]);
        assert_eq!(shape(&c), [(10, "call", 1)]);
    }

    /// A unit inside which the recording stopped while its process ran on
    /// is cut (the stop interrupted work) when its thread did something in
    /// the last second before the stop, and open (never completed: stuck)
    /// when it had been quiet longer.
    #[test]
    fn a_unit_the_stop_caught_at_work_is_cut_not_open() {
        const S: u64 = 1_000_000_000;
        let mut c = capture(&[call(10), ret(20), call(5 * S)]);
        let last = |c: &Capture| {
            let processes = crate::units::decompose_capture(c, crate::units::Variant::Paper000);
            let u = processes[0].units.last().expect("a unit").clone();
            (u.open.is_empty(), u.cut)
        };
        let stop = |stop_ns| {
            Some(tracer_common::capture::End {
                stop_ns,
                reason: "duration reached".into(),
                ..Default::default()
            })
        };
        c.end = stop(5 * S + S / 2);
        assert_eq!(last(&c), (true, true), "at work");
        c.end = stop(9 * S);
        assert_eq!(last(&c), (false, false), "stuck for 4 s");
    }

    fn shape(capture: &Capture) -> Vec<(u64, &'static str, u32)> {
        let traces = thread_traces(capture);
        traces[&7].threads[&7]
            .iter()
            .map(|e| {
                let k = match e.kind {
                    TraceEntryKind::Call => "call",
                    TraceEntryKind::Return => "return",
                    TraceEntryKind::Syscall { .. } => "syscall",
                };
                (e.ts_ns, k, e.depth)
            })
            .collect()
    }

    fn py_string(ts: u64, ptr: u64, text: &str) -> Vec<u8> {
        let mut rec = UsdtString {
            header: header(kind::USDT_STRING, size_of::<UsdtString>(), ts),
            ptr,
            len: text.len() as u32,
            ..Default::default()
        };
        rec.text[..text.len()].copy_from_slice(text.as_bytes());
        rec.as_bytes().to_vec()
    }

    /// A Python hit of probe 0 (entry) or 1 (return).
    fn py(ts: u64, entry: bool, file: u64, function: u64, line: i64) -> Vec<u8> {
        let mut args = [0; tracer_common::record::USDT_MAX_ARGS];
        args[..3].copy_from_slice(&[file, function, line as u64]);
        UsdtHit {
            header: header(kind::USDT, size_of::<UsdtHit>(), ts),
            probe_id: if entry { 0 } else { 1 },
            nargs: 3,
            args,
        }
        .as_bytes()
        .to_vec()
    }

    fn with_python_probes(mut c: Capture) -> Capture {
        let probe = |name: &str| tracer_common::capture::UsdtProbe {
            object: "/usr/bin/python3.11".into(),
            provider: "python".into(),
            name: name.into(),
            string_args: vec![0, 1],
            ..Default::default()
        };
        c.usdt_probes = vec![probe("function__entry"), probe("function__return")];
        c
    }

    fn paths(c: &Capture) -> Vec<(String, u32)> {
        let traces = thread_traces(c);
        let t = &traces[&7];
        t.threads[&7]
            .iter()
            .map(|e| {
                let k = match e.kind {
                    TraceEntryKind::Call => "call",
                    TraceEntryKind::Return => "return",
                    TraceEntryKind::Syscall { .. } => "syscall",
                };
                (format!("{k} {}", t.nodes.path_string(e.node)), e.depth)
            })
            .collect()
    }

    /// Python entries are calls of `file:function:line` with the calling
    /// Python frame as call site; a return pops its function whatever its
    /// line; native calls and system calls interleave in the same tree;
    /// calls from two Python frames are two nodes.
    #[test]
    fn python_frames_are_functions() {
        const F: u64 = 0x100;
        const LOOP: u64 = 0x200;
        const READ: u64 = 0x300;
        let c = with_python_probes(capture(&[
            py_string(1, F, "d.py"),
            py_string(1, LOOP, "loop"),
            py(2, true, F, LOOP, 10),
            py_string(3, READ, "on_read"),
            py(4, true, F, READ, 20),
            recv(5, 6),
            call(7),
            py(8, true, F, READ, 20),
            py(9, false, F, READ, 23),
            ret(10),
            py(11, false, F, READ, 22),
            py(12, false, F, LOOP, 15),
            // A return without its entry (the call began before recording).
            py(13, false, F, READ, 22),
        ]));
        assert_eq!(
            paths(&c),
            vec![
                ("call d.py:loop:10".to_string(), 1),
                ("call d.py:loop:10 > d.py:on_read:20@loop:10".into(), 2),
                ("syscall d.py:loop:10 > d.py:on_read:20@loop:10 > sys:recvfrom".into(), 2),
                ("call d.py:loop:10 > d.py:on_read:20@loop:10 > func#0".into(), 3),
                (
                    "call d.py:loop:10 > d.py:on_read:20@loop:10 > func#0 > d.py:on_read:20@on_read:20"
                        .into(),
                    4
                ),
                (
                    "return d.py:loop:10 > d.py:on_read:20@loop:10 > func#0 > d.py:on_read:20@on_read:20"
                        .into(),
                    3
                ),
                ("return d.py:loop:10 > d.py:on_read:20@loop:10 > func#0".into(), 2),
                ("return d.py:loop:10 > d.py:on_read:20@loop:10".into(), 1),
                ("return d.py:loop:10".into(), 0),
            ]
        );
    }

    /// A pointer whose text changed resolves to the text sent last; the
    /// per-thread sort keeps the resolution of ring order.
    #[test]
    fn python_strings_resolve_in_ring_order() {
        let c = with_python_probes(capture(&[
            py_string(1, 0x100, "a.py"),
            py_string(1, 0x200, "f"),
            py(2, true, 0x100, 0x200, 1),
            py(3, false, 0x100, 0x200, 1),
            py_string(4, 0x200, "g"),
            py(6, true, 0x100, 0x200, 5),
            py(8, false, 0x100, 0x200, 6),
            // Out of time order: the thread is sorted, `g` is still `g`.
            recv(7, 9),
        ]));
        let names: Vec<String> = paths(&c).into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            names,
            vec![
                "call a.py:f:1",
                "return a.py:f:1",
                "call a.py:g:5",
                "syscall a.py:g:5 > sys:recvfrom",
                "return a.py:g:5"
            ]
        );
    }

    /// A receive made inside a call is a leaf under it, placed at its entry time.
    #[test]
    fn builds_one_thread_in_one_pass() {
        let c = capture(&[call(10), recv(20, 25), ret(30)]);
        assert_eq!(
            shape(&c),
            vec![(10, "call", 1), (20, "syscall", 1), (30, "return", 0)]
        );
    }

    /// Records out of time order within a thread are sorted first.
    #[test]
    fn sorts_a_thread_whose_times_go_backwards() {
        let c = capture(&[call(10), ret(30), recv(20, 25)]);
        assert_eq!(
            shape(&c),
            vec![(10, "call", 1), (20, "syscall", 1), (30, "return", 0)]
        );
    }
}
