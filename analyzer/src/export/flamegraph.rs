//! Flame graph SVGs of a [`StackProfile`], drawn by
//! [inferno](https://github.com/jonhoo/inferno) (the Rust port of
//! FlameGraph) from the folded stacks: interactive in a browser (zoom,
//! search), kernel frames and inlined frames in their own colours.

use std::io::Write;

use inferno::flamegraph::{
    self, Options,
    color::{MultiPalette, Palette},
};

use super::{ExportError, ProfileKind, StackProfile};

/// Writes the flame graph of `profile` with `title`.
pub fn write(profile: &StackProfile, title: &str, out: impl Write) -> Result<(), ExportError> {
    let lines = profile.folded();
    if lines.is_empty() {
        return Err(ExportError::Empty {
            what: match profile.kind {
                ProfileKind::Samples => "no samples to draw: record with --sample-hz (the default is 99) or export --profile time".into(),
                ProfileKind::Time => "no traced calls to draw: record with -f PATTERN or export --profile samples".into(),
            },
        });
    }
    let mut opt = Options::default();
    opt.title = title.to_string();
    opt.count_name = match profile.kind {
        ProfileKind::Samples => "samples".into(),
        ProfileKind::Time => "ns".into(),
    };
    // The Java palette colours `_[k]` (kernel) and `_[i]` (inlined) frames
    // apart, the suffixes the folded stacks use.
    opt.colors = Palette::Multi(MultiPalette::Java);
    opt.deterministic = true;
    if !profile.notes.is_empty() {
        opt.subtitle = Some(format!(
            "{} note(s): see the export's output",
            profile.notes.len()
        ));
    }
    flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), out)?;
    Ok(())
}
