//! Source lines for the evidence: a model finding's call site
//! (`caller+0x1a`) placed in the recorded object that defines `caller`, and
//! looked up in its debug information when it is on this machine.

use super::AnalysisResult;
use crate::{
    Capture,
    debuginfo::{AddressKind, SourceLines},
};

/// `caller+0x1a` → (`caller`, 0x1a); `caller` → (`caller`, 0).
fn parse_site(site: &str) -> Option<(&str, u64)> {
    match site.rsplit_once("+0x") {
        Some((symbol, off)) => Some((symbol, u64::from_str_radix(off, 16).ok()?)),
        None => Some((site, 0)),
    }
}

/// The source line of `site` in the captures' objects: the first object
/// whose symbol table defines the caller, if its debug information has
/// lines there (inlined frames innermost first, `a.c:3 < b.c:9`).
pub fn source_of(site: &str, captures: &[&Capture], lines: &mut SourceLines) -> Option<String> {
    let (symbol, offset) = parse_site(site)?;
    if symbol.is_empty() {
        return None;
    }
    for cap in captures {
        for table in cap.objects.values() {
            let Some(s) = table.symbols.iter().find(|s| s.name == symbol) else {
                continue;
            };
            let frames = lines.frames(table, s.addr.saturating_add(offset), AddressKind::Return);
            let text: Vec<String> = frames.iter().filter_map(|f| f.file_line()).collect();
            return (!text.is_empty()).then(|| text.join(" < "));
        }
    }
    None
}

/// Adds the source line of every finding's call site that has one, and
/// names it in the finding's words.
pub fn add_source_lines(
    results: &mut [AnalysisResult],
    captures: &[&Capture],
    lines: &mut SourceLines,
) {
    for f in results.iter_mut().flat_map(|r| r.findings.iter_mut()) {
        if f.source.is_some() {
            continue;
        }
        let Some(site) = &f.site else { continue };
        if let Some(source) = source_of(site, captures, lines) {
            f.detail.push_str(&format!(" (at {source})"));
            f.source = Some(source);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_parse_as_symbol_and_offset() {
        assert_eq!(
            parse_site("handle_lhs_input+0x6c"),
            Some(("handle_lhs_input", 0x6c))
        );
        assert_eq!(parse_site("main"), Some(("main", 0)));
        assert_eq!(parse_site("f+0xzz"), None);
    }
}
