//! Addresses to functions, offline, with the process maps and symbol tables
//! stored in the capture.

use std::{collections::HashMap, sync::OnceLock};

use crate::{
    capture::{ObjectSymbols, RawRecords, Symbol},
    record::{FuncEntry, Pod as _, kind},
};

use super::Capture;

/// Where an address is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location<'a> {
    /// Object path (or `[kernel]`).
    pub object: &'a str,
    /// Enclosing function, when known.
    pub symbol: Option<&'a str>,
    /// Offset from the function's start (or from the object's start when the
    /// function is unknown: the object-relative virtual address).
    pub offset: u64,
}

impl std::fmt::Display for Location<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let base = self.object.rsplit('/').next().unwrap_or(self.object);
        match self.symbol {
            Some(sym) if self.offset == 0 => write!(f, "{sym}"),
            Some(sym) => write!(f, "{sym}+{:#x}", self.offset),
            None => write!(f, "{base}+{:#x}", self.offset),
        }
    }
}

/// A user address placed in its object (see [`Symbolizer::user_object`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectAddress<'a> {
    /// Object path, as mapped.
    pub object: &'a str,
    /// The object's symbol table from the capture, when it has one.
    pub table: Option<&'a ObjectSymbols>,
    /// Address in the object as its ELF file numbers it (what DWARF and
    /// symbol tables use), when the object's segments are known.
    pub vaddr: Option<u64>,
    /// Offset in the object's file, when known.
    pub file_offset: Option<u64>,
}

/// The function of `table` containing object address `vaddr`, or the bare
/// address when none does.
pub fn locate_in(table: &ObjectSymbols, vaddr: u64) -> Location<'_> {
    locate(&table.path, table, vaddr)
}

/// File offset of object address `vaddr`, from the object's segments
/// (which come from a capture: no arithmetic on them may overflow).
fn segment_offset(table: &ObjectSymbols, vaddr: u64) -> Option<u64> {
    table
        .segments
        .iter()
        .find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)
        .and_then(|s| (vaddr - s.vaddr).checked_add(s.offset))
}

/// Object address of file offset `file_offset`, from the object's segments
/// (the inverse of [`segment_offset`]; `None` outside every segment).
pub fn segment_vaddr(table: &ObjectSymbols, file_offset: u64) -> Option<u64> {
    table
        .segments
        .iter()
        .find(|s| file_offset >= s.offset && file_offset - s.offset < s.filesz)
        .and_then(|s| (file_offset - s.offset).checked_add(s.vaddr))
}

struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    object: usize,
}

/// Where a probed object was loaded in one process, learned from the probe
/// hits themselves: a function entry's runtime address minus the function's
/// address in its object. Covers processes whose `/proc` snapshot was missed
/// (one that execs and exits before the recorder looks).
struct Anchor<'a> {
    start: u64,
    end: u64,
    bias: u64,
    object: &'a str,
    table: &'a ObjectSymbols,
}

/// Resolves addresses of one capture.
pub struct Symbolizer<'a> {
    capture: &'a Capture,
    objects: Vec<(&'a str, Option<&'a ObjectSymbols>)>,
    maps: HashMap<u32, Vec<Mapping>>,
    anchors: OnceLock<HashMap<u32, Vec<Anchor<'a>>>>,
    /// Processes forked by a process with maps, that never exec'd and have
    /// none of their own: their parent's pid (built on first need).
    forked: OnceLock<HashMap<u32, u32>>,
    kernel: &'a [Symbol],
}

impl<'a> Symbolizer<'a> {
    /// Indexes `capture`'s maps and symbol tables.
    pub fn new(capture: &'a Capture) -> Self {
        let mut objects: Vec<(&str, Option<&ObjectSymbols>)> = Vec::new();
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut maps: HashMap<u32, Vec<Mapping>> = HashMap::new();
        for (pid, snapshots) in &capture.processes {
            let list = maps.entry(*pid).or_default();
            // Latest snapshot first: after an exec its maps are the right ones.
            for snap in snapshots.iter().rev() {
                for m in &snap.maps {
                    if m.path.is_empty() {
                        continue;
                    }
                    let idx = *index.entry(m.path.as_str()).or_insert_with(|| {
                        objects.push((m.path.as_str(), capture.objects.get(&m.path)));
                        objects.len() - 1
                    });
                    list.push(Mapping {
                        start: m.start,
                        end: m.end,
                        offset: m.offset,
                        object: idx,
                    });
                }
            }
        }
        Self {
            capture,
            objects,
            maps,
            anchors: OnceLock::new(),
            forked: OnceLock::new(),
            kernel: &capture.kernel_symbols,
        }
    }

    /// Load addresses of probed objects per process, from the first entry
    /// record of each (process, probe). Built on first need: one pass over
    /// the records, only when a process's maps do not cover an address.
    fn anchors(&self) -> &HashMap<u32, Vec<Anchor<'a>>> {
        self.anchors.get_or_init(|| {
            let capture = self.capture;
            // Per record: the last pid each probe fired in, a cheap check
            // before the per-(pid, object) one.
            let mut last_pid: Vec<u32> = vec![u32::MAX; capture.probes.len()];
            let mut seen: std::collections::HashSet<(u32, &str)> = Default::default();
            let mut anchors: HashMap<u32, Vec<Anchor<'a>>> = HashMap::new();
            // Raw records, entries only: cheaper than decoding every event.
            let entries = capture.chunks.iter().flat_map(|(_, bytes)| {
                RawRecords::new(bytes).filter_map(|r| {
                    let (header, bytes) = r.ok()?;
                    matches!(
                        header.kind,
                        kind::FUNC_ENTRY
                            | kind::FUNC_ENTRY_ARGS
                            | kind::FUNC_ENTRY_STACK
                            | kind::FUNC_ENTRY_FRAME
                    )
                    .then(|| FuncEntry::read_from(bytes))
                    .flatten()
                })
            });
            for rec in entries {
                let Some(probe) = capture.probe(rec.func_id) else {
                    continue;
                };
                let pid = rec.header.pid;
                let last = last_pid.get_mut(rec.func_id as usize);
                if last.as_deref() == Some(&pid) {
                    continue;
                }
                if let Some(l) = last {
                    *l = pid;
                }
                if !seen.insert((pid, probe.object.as_str())) {
                    continue;
                }
                let Some(table) = capture.objects.get(&probe.object) else {
                    continue;
                };
                let bias = rec.ip.wrapping_sub(probe.vaddr);
                let lo = table.segments.iter().map(|s| s.vaddr).min().unwrap_or(0);
                let hi = table
                    .segments
                    .iter()
                    .map(|s| s.vaddr.saturating_add(s.filesz))
                    .max()
                    .unwrap_or(0);
                anchors.entry(pid).or_default().push(Anchor {
                    start: lo.wrapping_add(bias),
                    end: hi.wrapping_add(bias),
                    bias,
                    object: probe.object.as_str(),
                    table,
                });
            }
            anchors
        })
    }

    /// A forked child shares its parent's address space until it execs, so
    /// a child gone before the recorder read its maps (a short-lived
    /// helper) is placed with its parent's. One pass over the lifecycle
    /// records, on first need.
    fn forked(&self) -> &HashMap<u32, u32> {
        self.forked.get_or_init(|| {
            let mut parent: HashMap<u32, u32> = HashMap::new();
            let mut exec: std::collections::HashSet<u32> = Default::default();
            for (_, bytes) in &self.capture.chunks {
                for (header, rec) in RawRecords::new(bytes).map_while(Result::ok) {
                    if header.kind != kind::LIFECYCLE {
                        continue;
                    }
                    let Some(l) = crate::record::Lifecycle::read_from(rec) else {
                        continue;
                    };
                    match l.event {
                        crate::record::lifecycle::FORK if l.child_tid != header.pid => {
                            parent.entry(l.child_tid).or_insert(header.pid);
                        }
                        crate::record::lifecycle::EXEC => {
                            exec.insert(header.pid);
                        }
                        _ => {}
                    }
                }
            }
            parent.retain(|child, _| {
                !exec.contains(child) && self.maps.get(child).is_none_or(Vec::is_empty)
            });
            parent
        })
    }

    /// The mapping holding `addr` in `pid`, or in the parent it was forked
    /// from when it has no maps of its own (see [`Symbolizer::forked`]).
    fn mapping(&self, pid: u32, addr: u64) -> Option<&Mapping> {
        let find = |pid: u32| {
            self.maps
                .get(&pid)
                .and_then(|maps| maps.iter().find(|m| addr >= m.start && addr < m.end))
        };
        find(pid).or_else(|| {
            let mut at = pid;
            // Up the fork chain, a bounded number of steps (ids come from records).
            for _ in 0..8 {
                at = *self.forked().get(&at)?;
                if let Some(m) = find(at) {
                    return Some(m);
                }
            }
            None
        })
    }

    /// The location of user address `addr` in process `pid`.
    pub fn user(&self, pid: u32, addr: u64) -> Option<Location<'a>> {
        if is_uretprobe_trampoline(addr) {
            return Some(Location {
                object: "[uprobes]",
                symbol: Some("[uretprobe trampoline]"),
                offset: 0,
            });
        }
        let Some(map) = self.mapping(pid, addr) else {
            let anchor = self
                .anchors()
                .get(&pid)?
                .iter()
                .find(|a| addr >= a.start && addr < a.end)?;
            return Some(locate(
                anchor.object,
                anchor.table,
                addr.wrapping_sub(anchor.bias),
            ));
        };
        let (object, table) = self.objects[map.object];
        let file_offset = (addr - map.start).checked_add(map.offset)?;
        let Some(table) = table else {
            return Some(Location {
                object,
                symbol: None,
                offset: file_offset,
            });
        };
        let vaddr = segment_vaddr(table, file_offset).unwrap_or(file_offset);
        Some(locate(object, table, vaddr))
    }

    /// The object user address `addr` of process `pid` is in, and where in
    /// it: what a DWARF lookup needs (the analyzer's `debuginfo`). `None`
    /// for addresses outside every known mapping and for the uretprobe
    /// trampoline. Same placement rules as [`Symbolizer::user`].
    pub fn user_object(&self, pid: u32, addr: u64) -> Option<ObjectAddress<'a>> {
        if is_uretprobe_trampoline(addr) {
            return None;
        }
        let Some(map) = self.mapping(pid, addr) else {
            let anchor = self
                .anchors()
                .get(&pid)?
                .iter()
                .find(|a| addr >= a.start && addr < a.end)?;
            let vaddr = addr.wrapping_sub(anchor.bias);
            return Some(ObjectAddress {
                object: anchor.object,
                table: Some(anchor.table),
                vaddr: Some(vaddr),
                file_offset: segment_offset(anchor.table, vaddr),
            });
        };
        let (object, table) = self.objects[map.object];
        let file_offset = (addr - map.start).checked_add(map.offset)?;
        let vaddr = table.and_then(|t| segment_vaddr(t, file_offset));
        Some(ObjectAddress {
            object,
            table,
            vaddr,
            file_offset: Some(file_offset),
        })
    }

    /// The location of kernel address `addr`.
    pub fn kernel(&self, addr: u64) -> Option<Location<'a>> {
        let idx = self
            .kernel
            .partition_point(|s| s.addr <= addr)
            .checked_sub(1)?;
        let sym = &self.kernel[idx];
        Some(Location {
            object: "[kernel]",
            symbol: Some(&sym.name),
            offset: addr - sym.addr,
        })
    }
}

/// Whether `addr` is in the page the kernel maps for uretprobes on x86-64
/// (`[uprobes]`, one page below the top of the 47-bit user address space).
/// A function's return address reads as this page when its caller is itself
/// under a uretprobe and reached it by a tail call (`jmp`): the caller's real
/// return address is held by the kernel, so the call site is the caller's.
pub fn is_uretprobe_trampoline(addr: u64) -> bool {
    (0x7fff_ffff_e000..0x7fff_ffff_f000).contains(&addr)
}

/// The location of object-relative `vaddr` in `object`.
fn locate<'a>(object: &'a str, table: &'a ObjectSymbols, vaddr: u64) -> Location<'a> {
    match lookup(&table.symbols, vaddr) {
        Some(sym) => Location {
            object,
            symbol: Some(&sym.name),
            offset: vaddr - sym.addr,
        },
        None => Location {
            object,
            symbol: None,
            offset: vaddr,
        },
    }
}

/// The symbol containing `vaddr` in a table sorted by address (one
/// without a size contains everything up to the next).
pub fn lookup(symbols: &[Symbol], vaddr: u64) -> Option<&Symbol> {
    let idx = symbols
        .partition_point(|s| s.addr <= vaddr)
        .checked_sub(1)?;
    // Several names may share an address; any of them contains vaddr equally.
    let sym = &symbols[idx];
    // Tables come from captures: unsorted or huge entries must not overflow.
    let offset = vaddr.checked_sub(sym.addr)?;
    (sym.size == 0 || offset < sym.size).then_some(sym)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Segments and symbols come from captures: sizes and offsets near
    /// `u64::MAX`, and tables out of order, give no place rather than an
    /// overflow (found by the `capture_structured` fuzz target).
    #[test]
    fn hostile_segments_and_symbols_do_not_overflow() {
        let table = ObjectSymbols {
            path: "/bin/app".into(),
            segments: vec![crate::capture::Segment {
                vaddr: u64::MAX - 4,
                offset: u64::MAX - 8,
                filesz: u64::MAX,
            }],
            ..ObjectSymbols::default()
        };
        assert_eq!(segment_vaddr(&table, u64::MAX - 2), None);
        assert_eq!(segment_offset(&table, u64::MAX - 1), Some(u64::MAX - 5));
        let low = Symbol {
            addr: 0x10,
            size: 0x10,
            name: "low".into(),
        };
        let huge = Symbol {
            addr: u64::MAX - 1,
            size: u64::MAX,
            name: "huge".into(),
        };
        let sorted = vec![low.clone(), huge.clone()];
        assert!(lookup(&sorted, u64::MAX).is_some_and(|s| s.name == "huge"));
        assert!(lookup(&sorted, 0x18).is_some_and(|s| s.name == "low"));
        // Out of order: whatever is found, nothing panics.
        let unsorted = vec![huge, low];
        for vaddr in [0, 0x18, u64::MAX - 1, u64::MAX] {
            let _ = lookup(&unsorted, vaddr);
        }
    }

    fn syms() -> Vec<Symbol> {
        vec![
            Symbol {
                addr: 0x1000,
                size: 0x10,
                name: "a".into(),
            },
            Symbol {
                addr: 0x1010,
                size: 0x20,
                name: "b".into(),
            },
            Symbol {
                addr: 0x2000,
                size: 0,
                name: "c".into(),
            },
        ]
    }

    #[test]
    fn finds_enclosing_symbols() {
        let s = syms();
        assert_eq!(lookup(&s, 0x1000).map(|s| s.name.as_str()), Some("a"));
        assert_eq!(lookup(&s, 0x101f).map(|s| s.name.as_str()), Some("b"));
        assert_eq!(lookup(&s, 0x1030), None, "past b's end");
        assert_eq!(
            lookup(&s, 0x2400).map(|s| s.name.as_str()),
            Some("c"),
            "size 0 extends"
        );
        assert_eq!(lookup(&s, 0x10), None);
    }

    /// A process with no snapshot (it exec'd and exited before the recorder
    /// looked) still has its call sites placed, from where its probes hit.
    #[test]
    fn places_unsnapshotted_processes_from_probe_hits() {
        use crate::{
            capture::{Probe, Segment},
            record::{FuncEntry, Header, Pod, kind},
        };
        let object = "/bin/app".to_string();
        let table = ObjectSymbols {
            path: object.clone(),
            build_id: None,
            segments: vec![Segment {
                vaddr: 0x1000,
                offset: 0x1000,
                filesz: 0x2000,
            }],
            symbols: syms(),
            ..Default::default()
        };
        let bias = 0x5555_0000_0000;
        let entry = FuncEntry {
            header: Header {
                ts_ns: 1,
                pid: 42,
                tid: 42,
                kind: kind::FUNC_ENTRY,
                size: size_of::<FuncEntry>() as u16,
                cpu: 0,
            },
            func_id: 0,
            _pad: 0,
            ip: bias + 0x1010,
            call_site: bias + 0x1004,
        };
        let capture = Capture {
            header: Default::default(),
            processes: Default::default(),
            objects: [(object.clone(), table)].into_iter().collect(),
            probes: vec![Probe {
                func_id: 0,
                object: object.clone(),
                symbol: "b".into(),
                vaddr: 0x1010,
                file_offset: 0x1010,
                ..Default::default()
            }],
            usdt_probes: Vec::new(),
            kernel_symbols: Vec::new(),
            stats: None,
            end: None,
            overhead: None,
            chunks: vec![(0, entry.as_bytes().to_vec())],
            truncated: None,
            left_out: Default::default(),
        };
        let sym = Symbolizer::new(&capture);
        let site = sym.user(42, bias + 0x1004).expect("placed");
        assert_eq!((site.symbol, site.offset), (Some("a"), 4));
        let placed = sym.user_object(42, bias + 0x1004).expect("placed");
        assert_eq!(
            (placed.object, placed.vaddr, placed.file_offset),
            ("/bin/app", Some(0x1004), Some(0x1004))
        );
        assert_eq!(sym.user_object(42, 0x7fff_ffff_e010), None, "trampoline");
        assert_eq!(sym.user(42, bias + 0x9000), None, "outside the object");
        assert_eq!(sym.user(43, bias + 0x1004), None, "another process");
    }

    /// A child forked by a process with maps and gone before its own were
    /// read is placed with its parent's, until it execs.
    #[test]
    fn forked_children_use_their_parents_maps() {
        use crate::{
            capture::{MapEntry, ProcessInfo, Segment},
            record::{Header, Lifecycle, Pod, kind, lifecycle},
        };
        let object = "/bin/app".to_string();
        let table = ObjectSymbols {
            path: object.clone(),
            segments: vec![Segment {
                vaddr: 0x1000,
                offset: 0x1000,
                filesz: 0x2000,
            }],
            symbols: syms(),
            ..Default::default()
        };
        let base = 0x5555_0000_0000;
        let parent = ProcessInfo {
            pid: 10,
            maps: vec![MapEntry {
                start: base,
                end: base + 0x2000,
                offset: 0x1000,
                perms: "r-xp".into(),
                path: object.clone(),
            }],
            ..Default::default()
        };
        let lc = |pid: u32, event: u32, child: u32| Lifecycle {
            header: Header {
                ts_ns: 1,
                pid,
                tid: pid,
                kind: kind::LIFECYCLE,
                size: size_of::<Lifecycle>() as u16,
                cpu: 0,
            },
            event,
            child_tid: child,
            group_dead: 0,
            exit_code: 0,
            comm: [0; 16],
        };
        let records = [
            lc(10, lifecycle::FORK, 11).as_bytes().to_vec(),
            lc(11, lifecycle::FORK, 12).as_bytes().to_vec(),
            lc(10, lifecycle::FORK, 13).as_bytes().to_vec(),
            lc(13, lifecycle::EXEC, 0).as_bytes().to_vec(),
        ]
        .concat();
        let capture = Capture {
            header: Default::default(),
            processes: [(10, vec![parent])].into_iter().collect(),
            objects: [(object.clone(), table)].into_iter().collect(),
            probes: Vec::new(),
            usdt_probes: Vec::new(),
            kernel_symbols: Vec::new(),
            stats: None,
            end: None,
            overhead: None,
            chunks: vec![(0, records)],
            truncated: None,
            left_out: Default::default(),
        };
        let sym = Symbolizer::new(&capture);
        let at = base + 0x14;
        let name = |pid| sym.user(pid, at).and_then(|l| l.symbol);
        assert_eq!(name(10), Some("b"));
        assert_eq!(name(11), Some("b"), "a child");
        assert_eq!(name(12), Some("b"), "a grandchild");
        assert_eq!(name(13), None, "exec'd: another image");
        assert_eq!(name(14), None, "not forked here");
        assert_eq!(sym.user_object(11, at).and_then(|o| o.vaddr), Some(0x1014));
    }
}
