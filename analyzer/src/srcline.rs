//! Source lines of code addresses, from the DWARF debug information of the
//! object files on this machine: one question, `(object path, file offset)
//! → (function, file, line)` ([`SourceLines::locate`]).
//!
//! A capture names objects by path and build id; the file at that path is
//! read here (so analyse where the program was built or installed). A file
//! whose build id differs from the recorded one is a different build: its
//! lines would be wrong, so it is not used. Objects without DWARF (stripped,
//! or debug info elsewhere) give no location; callers fall back to symbols.
//! A separate debug file is looked up by build id under
//! `/usr/lib/debug/.build-id/`.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use object::{Object as _, ObjectSection as _, ObjectSegment as _};

/// Largest object file read (bytes): bounds memory for a path a capture
/// names.
const MAX_OBJECT_BYTES: u64 = 1 << 30;

/// Where a code address is in the source.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourceLocation {
    /// The function (the innermost inlined one when the address is in
    /// inlined code), as named in the debug information.
    pub function: Option<String>,
    /// Source file.
    pub file: Option<String>,
    /// Line in `file`.
    pub line: Option<u32>,
}

impl SourceLocation {
    /// `function (file:line)`, or the parts known, with the file's directory
    /// dropped.
    pub fn label(&self) -> String {
        let file = self
            .file
            .as_deref()
            .map(|f| f.rsplit('/').next().unwrap_or(f));
        match (&self.function, file, self.line) {
            (Some(f), Some(file), Some(l)) => format!("{f} ({file}:{l})"),
            (Some(f), Some(file), None) => format!("{f} ({file})"),
            (Some(f), None, _) => f.clone(),
            (None, Some(file), Some(l)) => format!("{file}:{l}"),
            (None, Some(file), None) => file.to_string(),
            (None, None, _) => String::new(),
        }
    }
}

type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

struct Loaded {
    context: addr2line::Context<Reader>,
    /// (file offset, size in file, virtual address) of loadable segments.
    segments: Vec<(u64, u64, u64)>,
}

/// DWARF line tables of object files, loaded once each.
#[derive(Default)]
pub struct SourceLines {
    build_ids: HashMap<String, String>,
    objects: HashMap<String, Option<Loaded>>,
}

impl SourceLines {
    /// Objects are used only when their build id is the one recorded here
    /// (path → hex build id; objects not listed are used as found).
    pub fn new(build_ids: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            build_ids: build_ids.into_iter().collect(),
            objects: HashMap::new(),
        }
    }

    /// Where file offset `file_offset` of `object` is in the source; `None`
    /// when the object cannot be read, is another build, or has no DWARF
    /// for that address. For a return address, ask for the byte before it
    /// (the call instruction).
    pub fn locate(&mut self, object: &str, file_offset: u64) -> Option<SourceLocation> {
        let expected = self.build_ids.get(object).cloned();
        let loaded = self
            .objects
            .entry(object.to_string())
            .or_insert_with(|| load(Path::new(object), expected.as_deref()))
            .as_ref()?;
        let vaddr = loaded
            .segments
            .iter()
            .find(|(off, size, _)| file_offset >= *off && file_offset < off + size)
            .map(|(off, _, vaddr)| file_offset - off + vaddr)?;
        let mut frames = loaded.context.find_frames(vaddr).skip_all_loads().ok()?;
        let frame = frames.next().ok()??;
        let function = frame
            .function
            .as_ref()
            .and_then(|f| f.demangle().ok())
            .map(|n| n.into_owned());
        let (file, line) = match &frame.location {
            Some(l) => (l.file.map(str::to_string), l.line),
            None => (None, None),
        };
        if function.is_none() && file.is_none() {
            return None;
        }
        Some(SourceLocation {
            function,
            file,
            line,
        })
    }
}

fn read_bounded(path: &Path) -> Option<Vec<u8>> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_OBJECT_BYTES {
        return None;
    }
    std::fs::read(path).ok()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn load(path: &Path, expected_build_id: Option<&str>) -> Option<Loaded> {
    let data = read_bounded(path)?;
    let file = object::File::parse(data.as_slice()).ok()?;
    let build_id = file.build_id().ok().flatten().map(hex);
    if let (Some(want), Some(have)) = (expected_build_id, build_id.as_deref())
        && want != have
    {
        return None;
    }
    let segments: Vec<(u64, u64, u64)> = file
        .segments()
        .map(|s| {
            let (offset, size) = s.file_range();
            (offset, size, s.address())
        })
        .collect();
    let has_dwarf = file.section_by_name(".debug_info").is_some();
    let context = if has_dwarf {
        dwarf_context(&file)
    } else {
        // A separate debug file, by build id (Debian's -dbgsym packages).
        let id = build_id?;
        let debug: PathBuf = format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            id.get(..2)?,
            id.get(2..)?
        )
        .into();
        let data = read_bounded(&debug)?;
        let dfile = object::File::parse(data.as_slice()).ok()?;
        dwarf_context(&dfile)
    }?;
    Some(Loaded { context, segments })
}

fn dwarf_context(file: &object::File<'_>) -> Option<addr2line::Context<Reader>> {
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let section = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
        let bytes: Arc<[u8]> = match file.section_by_name(id.name()) {
            // Compressed sections are not read (no decompressor here): such
            // an object has no lines rather than wrong ones.
            Some(s) => s
                .uncompressed_data()
                .map_or_else(|_| Arc::from(&[][..]), |d| Arc::from(&*d)),
            None => Arc::from(&[][..]),
        };
        Ok(gimli::EndianArcSlice::new(bytes, endian))
    };
    let dwarf = gimli::Dwarf::load(section).ok()?;
    addr2line::Context::from_dwarf(dwarf).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary itself has DWARF (test profile): this function's
    /// own address resolves to this file.
    #[test]
    fn locates_a_function_of_this_test_binary() {
        let exe = std::env::current_exe().expect("current exe");
        let exe = exe.to_str().expect("utf-8 path").to_string();
        // The runtime address of a function, as a file offset: through the
        // process maps.
        let addr = locates_a_function_of_this_test_binary as *const () as u64;
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        let offset = maps
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let range = f.next()?;
                let _perms = f.next()?;
                let off = u64::from_str_radix(f.next()?, 16).ok()?;
                let (lo, hi) = range.split_once('-')?;
                let (lo, hi) = (
                    u64::from_str_radix(lo, 16).ok()?,
                    u64::from_str_radix(hi, 16).ok()?,
                );
                (addr >= lo && addr < hi).then_some(addr - lo + off)
            })
            .next()
            .expect("mapped");
        let mut lines = SourceLines::default();
        let loc = lines.locate(&exe, offset).expect("located");
        assert!(
            loc.file
                .as_deref()
                .is_some_and(|f| f.ends_with("srcline.rs")),
            "{loc:?}"
        );
        assert!(
            loc.function
                .as_deref()
                .is_some_and(|f| f.contains("locates_a_function_of_this_test_binary")),
            "{loc:?}"
        );
        // Another build id: not used.
        let mut other = SourceLines::new([(exe.clone(), "00ff".to_string())]);
        assert_eq!(other.locate(&exe, offset), None);
        // Not a file.
        assert_eq!(lines.locate("/nonexistent/object", 0), None);
    }

    #[test]
    fn labels_drop_directories() {
        let l = SourceLocation {
            function: Some("sweep".into()),
            file: Some("/src/app/wave.f90".into()),
            line: Some(42),
        };
        assert_eq!(l.label(), "sweep (wave.f90:42)");
    }
}
