//! Call sites in words: `function (file.c:42)` from the program's debug
//! information when it has it, else `symbol+0x1c` from the capture's symbol
//! tables, else `object+0x11c9`.
//!
//! A call site is a return address; its line is the call instruction's,
//! one byte before.

use std::collections::HashMap;

use crate::{
    decode::{Capture, Symbolizer},
    srcline::SourceLines,
};

/// Labels of call sites of the processes of some captures, computed once
/// per (host, pid, address).
pub struct Sites<'a> {
    symbolizers: Vec<(&'a str, Symbolizer<'a>)>,
    lines: SourceLines,
    cache: HashMap<(String, u32, u64), String>,
}

impl<'a> Sites<'a> {
    /// For the processes of `captures` (matched by host).
    pub fn new(captures: &[&'a Capture]) -> Self {
        let build_ids = captures.iter().flat_map(|c| {
            c.objects
                .values()
                .filter_map(|o| Some((o.path.clone(), o.build_id.clone()?)))
        });
        Self {
            lines: SourceLines::new(build_ids.collect::<Vec<_>>()),
            symbolizers: captures
                .iter()
                .map(|c| (c.header.host.as_str(), Symbolizer::new(c)))
                .collect(),
            cache: HashMap::new(),
        }
    }

    /// The label of return address `addr` in process `pid` on `host`; empty
    /// for address 0 (not recorded) or an address no object covers.
    pub fn label(&mut self, host: &str, pid: u32, addr: u64) -> String {
        if addr == 0 {
            return String::new();
        }
        let key = (host.to_string(), pid, addr);
        if let Some(l) = self.cache.get(&key) {
            return l.clone();
        }
        let label = self
            .symbolizers
            .iter()
            .find(|(h, _)| *h == host)
            .map(|(_, s)| s)
            .and_then(|s| {
                let line = s
                    .file_offset(pid, addr.saturating_sub(1))
                    .and_then(|(object, offset)| self.lines.locate(object, offset))
                    .filter(|l| l.line.is_some());
                match line {
                    Some(l) => Some(l.label()),
                    None => s.user(pid, addr).map(|l| l.to_string()),
                }
            })
            .unwrap_or_default();
        self.cache.insert(key, label.clone());
        label
    }
}
