//! USDT (SystemTap SDT) probes: read the `.note.stapsdt` notes of an ELF
//! object, place each probe site and its semaphore in the file, parse the
//! argument specs (`-8@%rax 8@8(%rbx) -4@$5`) and turn them into the table
//! the eBPF `usdt` program reads ([`UsdtSpec`]).
//!
//! Addresses follow libbpf's `usdt.c`: a note's pc is moved by the
//! difference between the `.stapsdt.base` section's address and the note's
//! recorded base (the object was prelinked after the notes were written),
//! then pc and semaphore are turned into file offsets through the loadable
//! segments, which is what uprobes and `ref_ctr_offset` take.
//! <https://github.com/libbpf/libbpf/blob/v1.4.0/src/usdt.c#L620-L700>

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use globset::{Glob, GlobMatcher};
use object::{Object as _, ObjectSection as _};
use tracer_common::{
    capture::UsdtProbe,
    record::{USDT_ARG_STRING, USDT_MAX_ARGS, UsdtArgSpec, UsdtSpec, usdt_arg},
};

use crate::{
    procfs::{self, ProcError},
    targets::TargetObjects,
};

/// The `--python` preset: CPython's function probes with their file and
/// function names as strings (args: file, function, line).
pub const PYTHON_PROBES: [&str; 2] = ["python:function__entry=0,1", "python:function__return=0,1"];

/// The probe whose semaphore CPython 3.11 needs raised to fire
/// `function__entry`/`return` for Python-to-Python calls (it turns on the
/// interpreter's tracing path; see `../shared/TARGETS.md`).
pub const PYTHON_SEMAPHORE: &str = "python:line";

/// Note type of SystemTap probe descriptors.
const NT_STAPSDT: u32 = 3;

/// Errors reading probes or parsing specs.
#[derive(Debug, thiserror::Error)]
pub enum UsdtError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The file is not a parseable ELF object.
    #[error("{path} is not an ELF object")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: object::Error,
    },
    /// A note is cut short or lacks its strings.
    #[error("malformed stapsdt note at byte {offset} of .note.stapsdt in {path}")]
    BadNote {
        /// The file.
        path: PathBuf,
        /// Offset of the note inside the section.
        offset: usize,
    },
    /// An argument spec is not one this tracer understands.
    #[error("unsupported USDT argument spec '{spec}': {reason}")]
    BadArg {
        /// The spec (one argument).
        spec: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A probe site's argument specs did not parse (it can be listed, not attached).
    #[error("probe {probe}: {reason}")]
    UnparsableArgs {
        /// `provider:name`.
        probe: String,
        /// The parse error.
        reason: String,
    },
    /// A probe has more arguments than a record carries.
    #[error("probe {provider}:{name} has {count} arguments; at most {USDT_MAX_ARGS} are supported")]
    TooManyArgs {
        /// Provider.
        provider: String,
        /// Probe name.
        name: String,
        /// Argument count.
        count: usize,
    },
    /// A probe site or semaphore lies outside every loadable segment.
    #[error(
        "{what} of probe {provider}:{name} in {path} is at {vaddr:#x}, outside every loadable segment"
    )]
    NoSegment {
        /// The file.
        path: PathBuf,
        /// Provider.
        provider: String,
        /// Probe name.
        name: String,
        /// `site` or `semaphore`.
        what: &'static str,
        /// The address.
        vaddr: u64,
    },
    /// A `PROVIDER:NAME` pattern is malformed.
    #[error("invalid USDT pattern '{pattern}': {reason}")]
    BadPattern {
        /// The pattern.
        pattern: String,
        /// What is wrong.
        reason: String,
    },
    /// The objects searched have no USDT probes at all.
    #[error("{objects} {verb} no USDT probes (no .note.stapsdt section){hint}")]
    NoProbes {
        /// The objects searched.
        objects: String,
        /// "has" or "have".
        verb: &'static str,
        /// Advice.
        hint: &'static str,
    },
    /// Probes exist, but none matches the pattern.
    #[error(
        "USDT pattern '{pattern}' matches no probe in {objects} (probes there: {available}){hint}"
    )]
    NoMatch {
        /// The pattern.
        pattern: String,
        /// The objects searched.
        objects: String,
        /// `provider:name` of the probes that exist.
        available: String,
        /// Advice when no probe of the pattern's provider exists.
        hint: &'static str,
    },
    /// A process could not be inspected.
    #[error(transparent)]
    Proc(#[from] ProcError),
}

/// Advice when an interpreter has no probes: the usual cause is a build
/// without `--with-dtrace`, which pyenv's default builds are.
const NO_PROBES_HINT: &str = ". USDT probes are compiled in: CPython has them only when built with \
    --with-dtrace (Debian's /usr/bin/python3.11 has them; pyenv and python.org builds do not). \
    Trace a binary that has them, or list them with `tracer list-usdt PATH`";

/// x86-64 registers as they appear in argument specs, with their byte
/// offset in `struct pt_regs` and their width. Sub-registers (`%eax`,
/// `%ax`, `%al`) read the low bytes of the full register (little-endian).
const REGISTERS: &[(&str, u8, u8)] = &[
    ("rax", 80, 8),
    ("eax", 80, 4),
    ("ax", 80, 2),
    ("al", 80, 1),
    ("rbx", 40, 8),
    ("ebx", 40, 4),
    ("bx", 40, 2),
    ("bl", 40, 1),
    ("rcx", 88, 8),
    ("ecx", 88, 4),
    ("cx", 88, 2),
    ("cl", 88, 1),
    ("rdx", 96, 8),
    ("edx", 96, 4),
    ("dx", 96, 2),
    ("dl", 96, 1),
    ("rsi", 104, 8),
    ("esi", 104, 4),
    ("si", 104, 2),
    ("sil", 104, 1),
    ("rdi", 112, 8),
    ("edi", 112, 4),
    ("di", 112, 2),
    ("dil", 112, 1),
    ("rbp", 32, 8),
    ("ebp", 32, 4),
    ("bp", 32, 2),
    ("bpl", 32, 1),
    ("rsp", 152, 8),
    ("esp", 152, 4),
    ("sp", 152, 2),
    ("spl", 152, 1),
    ("rip", 128, 8),
    ("r8", 72, 8),
    ("r9", 64, 8),
    ("r10", 56, 8),
    ("r11", 48, 8),
    ("r12", 24, 8),
    ("r13", 16, 8),
    ("r14", 8, 8),
    ("r15", 0, 8),
];

/// Offset in `pt_regs` of register `name` (`rax`, `r8d`, `r12w`, `r15b`, `eax`).
fn register(name: &str) -> Option<u8> {
    if let Some((_, off, _)) = REGISTERS.iter().find(|(n, _, _)| *n == name) {
        return Some(*off);
    }
    // r8..r15 with a d/w/b suffix.
    let base = name.strip_suffix(['d', 'w', 'b']).unwrap_or(name);
    REGISTERS
        .iter()
        .find(|(n, _, w)| *n == base && *w == 8 && n.starts_with('r') && n.len() <= 3)
        .filter(|(n, _, _)| n[1..].parse::<u8>().is_ok())
        .map(|(_, off, _)| *off)
}

/// Where an argument's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgLocation {
    /// A constant (`$5`).
    Const(i64),
    /// A register (`%rax`), by its byte offset in `pt_regs`.
    Reg {
        /// Byte offset in `pt_regs`.
        reg_off: u8,
    },
    /// Memory at register + offset (`-8(%rbp)`).
    Mem {
        /// Byte offset of the base register in `pt_regs`.
        reg_off: u8,
        /// Displacement in bytes.
        offset: i64,
    },
}

/// One parsed argument spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsdtArg {
    /// Size of the value in bytes (1, 2, 4, 8).
    pub size: u8,
    /// Sign-extended when true.
    pub signed: bool,
    /// Where it is.
    pub location: ArgLocation,
}

impl UsdtArg {
    /// Parses one argument spec, `SIZE@LOCATION` (`-4@%eax`, `8@16(%rsp)`, `-4@$5`).
    /// A spec without `SIZE@` is an 8-byte signed value (old SystemTap).
    pub fn parse(spec: &str) -> Result<Self, UsdtError> {
        let bad = |reason| UsdtError::BadArg {
            spec: spec.to_string(),
            reason,
        };
        let (size, loc) = match spec.split_once('@') {
            Some((size, loc)) => (
                size.parse::<i8>()
                    .map_err(|_| bad("size is not a number"))?,
                loc,
            ),
            None => (-8, spec),
        };
        let signed = size < 0;
        let size = size.unsigned_abs();
        if !matches!(size, 1 | 2 | 4 | 8) {
            return Err(bad("size is not 1, 2, 4 or 8 bytes"));
        }
        let reg = |r: &str| -> Result<u8, UsdtError> {
            let name = r.strip_prefix('%').ok_or(bad("register without %"))?;
            register(name).ok_or(bad("unknown register"))
        };
        let location = if let Some(c) = loc.strip_prefix('$') {
            ArgLocation::Const(parse_int(c).ok_or(bad("constant is not an integer"))?)
        } else if loc.starts_with('%') {
            ArgLocation::Reg { reg_off: reg(loc)? }
        } else if let Some((disp, rest)) = loc.split_once('(') {
            let inner = rest.strip_suffix(')').ok_or(bad("missing ')'"))?;
            if inner.contains(',') {
                return Err(bad(
                    "indexed addressing (base,index,scale) is not supported",
                ));
            }
            let offset = if disp.is_empty() {
                0
            } else {
                parse_int(disp).ok_or(bad(
                    "displacement is not an integer (symbolic addresses are not supported)",
                ))?
            };
            ArgLocation::Mem {
                reg_off: reg(inner)?,
                offset,
            }
        } else {
            return Err(bad("expected $CONST, %REG or OFFSET(%REG)"));
        };
        Ok(Self {
            size,
            signed,
            location,
        })
    }

    /// The wire form read by the eBPF program.
    pub fn wire(&self) -> UsdtArgSpec {
        let (kind, reg_off, value) = match self.location {
            ArgLocation::Const(v) => (usdt_arg::CONST, 0, v),
            ArgLocation::Reg { reg_off } => (usdt_arg::REG, reg_off, 0),
            ArgLocation::Mem { reg_off, offset } => (usdt_arg::MEM, reg_off, offset),
        };
        UsdtArgSpec {
            value,
            kind,
            size: self.size,
            signed: u8::from(self.signed),
            reg_off,
            flags: 0,
            _pad: [0; 3],
        }
    }
}

/// Decimal or `0x` hexadecimal, optionally negative.
fn parse_int(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    let value = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) => i64::from_str_radix(hex, 16).ok()?,
        None => digits.parse::<i64>().ok()?,
    };
    Some(if neg { -value } else { value })
}

/// Parses a whole argument list (space-separated specs).
pub fn parse_args(specs: &str) -> Result<Vec<UsdtArg>, UsdtError> {
    specs.split_whitespace().map(UsdtArg::parse).collect()
}

/// One probe site of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtSite {
    /// The object.
    pub object: PathBuf,
    /// Provider (`python`).
    pub provider: String,
    /// Name (`function__entry`).
    pub name: String,
    /// Address of the site, adjusted for prelinking.
    pub vaddr: u64,
    /// File offset of the site (where the uprobe goes).
    pub file_offset: u64,
    /// Address of the semaphore, 0 without one.
    pub semaphore: u64,
    /// File offset of the semaphore, 0 without one.
    pub semaphore_offset: u64,
    /// The argument specs as written.
    pub args_text: String,
    /// The parsed specs; `Err` keeps a site listable when one spec is exotic.
    pub args: Result<Vec<UsdtArg>, String>,
    /// Bit `i` set: argument `i` points to a string to record ([`USDT_ARG_STRING`]).
    pub string_args: u8,
    /// Attached only to hold the semaphore at `semaphore_offset` raised:
    /// hits record nothing. Set by [`semaphore_holders`].
    pub silent: bool,
    /// Attached for every process of the object without raising its
    /// semaphore, which a [`semaphore_holders`] site holds per traced
    /// process instead: a forked child inherits the raised semaphore (its
    /// memory is a copy), so the site fires in it from its first
    /// instruction, and the eBPF side keeps the hits of traced processes.
    pub wide: bool,
}

impl UsdtSite {
    /// `provider:name`.
    pub fn full_name(&self) -> String {
        format!("{}:{}", self.provider, self.name)
    }

    /// The eBPF-side spec of this site.
    pub fn spec(&self) -> Result<UsdtSpec, UsdtError> {
        let args = self
            .args
            .as_ref()
            .map_err(|reason| UsdtError::UnparsableArgs {
                probe: self.full_name(),
                reason: reason.clone(),
            })?;
        if args.len() > USDT_MAX_ARGS {
            return Err(UsdtError::TooManyArgs {
                provider: self.provider.clone(),
                name: self.name.clone(),
                count: args.len(),
            });
        }
        let mut spec = UsdtSpec {
            nargs: args.len() as u32,
            ..UsdtSpec::default()
        };
        for (i, (slot, arg)) in spec.args.iter_mut().zip(args).enumerate() {
            *slot = arg.wire();
            if self.string_args & (1 << i) != 0 {
                slot.flags = USDT_ARG_STRING;
            }
        }
        Ok(spec)
    }

    /// The capture's description of this site as probe `probe_id`.
    pub fn meta(&self, probe_id: u32) -> UsdtProbe {
        UsdtProbe {
            probe_id,
            object: self.object.display().to_string(),
            provider: self.provider.clone(),
            name: self.name.clone(),
            vaddr: self.vaddr,
            file_offset: self.file_offset,
            semaphore_offset: self.semaphore_offset,
            args: self.args_text.clone(),
            string_args: (0..8u32)
                .filter(|i| self.string_args & (1 << i) != 0)
                .collect(),
            semaphore_only: self.silent,
        }
    }
}

/// Reads every USDT probe site of the object at `path` (none when it has no
/// `.note.stapsdt` section).
pub fn read_sites(path: &Path) -> Result<Vec<UsdtSite>, UsdtError> {
    let data = fs::read(path).map_err(|source| UsdtError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    sites_in(&data, path)
}

/// [`read_sites`] of the object's bytes (`path` names it).
pub fn sites_in(data: &[u8], path: &Path) -> Result<Vec<UsdtSite>, UsdtError> {
    let file = object::File::parse(data).map_err(|source| UsdtError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let Some(notes) = file.section_by_name(".note.stapsdt") else {
        return Ok(Vec::new());
    };
    let notes = notes.data().map_err(|source| UsdtError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let base_section = file.section_by_name(".stapsdt.base").map(|s| s.address());
    let segments = crate::elf::segments(&file);
    let to_offset = |vaddr: u64| crate::elf::file_offset(&segments, vaddr);
    let mut sites = Vec::new();
    for note in parse_notes(notes).map_err(|offset| UsdtError::BadNote {
        path: path.to_path_buf(),
        offset,
    })? {
        let vaddr = match base_section {
            Some(actual) if note.base != 0 => note.pc.wrapping_add(actual).wrapping_sub(note.base),
            _ => note.pc,
        };
        let no_segment = |what, vaddr| UsdtError::NoSegment {
            path: path.to_path_buf(),
            provider: note.provider.clone(),
            name: note.name.clone(),
            what,
            vaddr,
        };
        let file_offset = to_offset(vaddr).ok_or_else(|| no_segment("site", vaddr))?;
        let semaphore_offset = if note.semaphore == 0 {
            0
        } else {
            to_offset(note.semaphore).ok_or_else(|| no_segment("semaphore", note.semaphore))?
        };
        sites.push(UsdtSite {
            object: path.to_path_buf(),
            args: parse_args(&note.args).map_err(|e| e.to_string()),
            provider: note.provider,
            name: note.name,
            vaddr,
            file_offset,
            semaphore: note.semaphore,
            semaphore_offset,
            args_text: note.args,
            string_args: 0,
            silent: false,
            wide: false,
        });
    }
    Ok(sites)
}

/// A raw stapsdt note.
#[derive(Debug, PartialEq, Eq)]
pub struct Note {
    /// The probe site (`pc`).
    pub pc: u64,
    /// The link-time address of `.stapsdt.base`.
    pub base: u64,
    /// The semaphore's address, or 0.
    pub semaphore: u64,
    /// Provider.
    pub provider: String,
    /// Probe name.
    pub name: String,
    /// Argument specs.
    pub args: String,
}

/// Parses the notes of a `.note.stapsdt` section (ELF64, little-endian);
/// `Err` holds the offset of the first malformed note.
pub fn parse_notes(data: &[u8]) -> Result<Vec<Note>, usize> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
    };
    let align4 = |n: usize| n.div_ceil(4) * 4;
    let mut notes = Vec::new();
    let mut at = 0;
    while at + 12 <= data.len() {
        let start = at;
        let (Some(namesz), Some(descsz), Some(kind)) = (u32_at(at), u32_at(at + 4), u32_at(at + 8))
        else {
            return Err(start);
        };
        let name_at = at + 12;
        let desc_at = name_at + align4(namesz as usize);
        let next = desc_at + align4(descsz as usize);
        let owner = data.get(name_at..name_at + namesz as usize).ok_or(start)?;
        let desc = data.get(desc_at..desc_at + descsz as usize).ok_or(start)?;
        at = next;
        if owner != b"stapsdt\0" || kind != NT_STAPSDT {
            continue;
        }
        let word = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(
                desc.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        let (Some(pc), Some(base), Some(semaphore)) = (word(0), word(1), word(2)) else {
            return Err(start);
        };
        let mut strings = desc
            .get(24..)
            .ok_or(start)?
            .split(|b| *b == 0)
            .map(|s| String::from_utf8_lossy(s).into_owned());
        let (Some(provider), Some(name)) = (strings.next(), strings.next()) else {
            return Err(start);
        };
        if provider.is_empty() || name.is_empty() {
            return Err(start);
        }
        notes.push(Note {
            pc,
            base,
            semaphore,
            provider,
            name,
            args: strings.next().unwrap_or_default(),
        });
    }
    Ok(notes)
}

/// A parsed `[OBJECT:]PROVIDER:NAME[=STRINGS]` pattern; PROVIDER and NAME
/// are globs (`python:*`, `python:function__*`); STRINGS lists the indexes
/// of arguments that point to strings to record (`=0,1`).
#[derive(Debug, Clone)]
pub struct UsdtPattern {
    raw: String,
    object: Option<String>,
    provider: GlobMatcher,
    name: GlobMatcher,
    string_args: u8,
}

impl UsdtPattern {
    /// Parses `pattern`.
    pub fn parse(pattern: &str) -> Result<Self, UsdtError> {
        let bad = |reason: String| UsdtError::BadPattern {
            pattern: pattern.to_string(),
            reason,
        };
        let (probe, strings) = match pattern.split_once('=') {
            Some((probe, strings)) => (probe, Some(strings)),
            None => (pattern, None),
        };
        let mut string_args = 0u8;
        for index in strings.into_iter().flat_map(|s| s.split(',')) {
            match index.trim().parse::<usize>() {
                Ok(i) if i < USDT_MAX_ARGS => string_args |= 1 << i,
                _ => {
                    return Err(bad(format!(
                        "'{index}' is not an argument index below {USDT_MAX_ARGS} (=0,1 marks the first two arguments as strings)"
                    )));
                }
            }
        }
        let parts: Vec<&str> = probe.rsplitn(3, ':').collect();
        let (object, provider, name) = match parts.as_slice() {
            [name, provider] => (None, *provider, *name),
            [name, provider, object] => (Some(object.to_string()), *provider, *name),
            _ => {
                return Err(bad(
                    "expected PROVIDER:NAME, e.g. python:function__entry".into()
                ));
            }
        };
        if provider.is_empty() || name.is_empty() {
            return Err(bad(
                "expected PROVIDER:NAME, e.g. python:function__entry".into()
            ));
        }
        let glob = |g: &str| {
            Glob::new(g)
                .map(|g| g.compile_matcher())
                .map_err(|e| bad(e.to_string()))
        };
        Ok(Self {
            raw: pattern.to_string(),
            object,
            provider: glob(provider)?,
            name: glob(name)?,
            string_args,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    fn matches(&self, site: &UsdtSite) -> bool {
        self.provider.is_match(&site.provider)
            && self.name.is_match(&site.name)
            && self.object.as_deref().is_none_or(|o| {
                site.object.as_os_str() == o
                    || site
                        .object
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| {
                            n == o || n.strip_prefix(o).is_some_and(|r| r.starts_with('.'))
                        })
            })
    }
}

/// Every probe site of the objects of a target (executable and shared
/// objects), in object order.
pub fn sites_of(objects: &TargetObjects) -> Result<Vec<UsdtSite>, UsdtError> {
    let mut sites = Vec::new();
    for path in std::iter::once(&objects.exe).chain(&objects.libs) {
        sites.extend(read_sites(path)?);
    }
    Ok(sites)
}

/// The sites among `all` (read from `objects`) that `patterns` select, each
/// once, in order. Errors name what exists when nothing matches.
pub fn select(
    patterns: &[UsdtPattern],
    all: &[UsdtSite],
    objects: &[PathBuf],
) -> Result<Vec<UsdtSite>, UsdtError> {
    let names = || {
        objects
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if all.is_empty() && !patterns.is_empty() {
        return Err(UsdtError::NoProbes {
            objects: names(),
            verb: if objects.len() == 1 { "has" } else { "have" },
            hint: NO_PROBES_HINT,
        });
    }
    let mut chosen: Vec<UsdtSite> = Vec::new();
    for pattern in patterns {
        let mut matched = 0;
        for site in all.iter().filter(|s| pattern.matches(s)) {
            matched += 1;
            match chosen
                .iter_mut()
                .find(|c| c.object == site.object && c.file_offset == site.file_offset)
            {
                Some(c) => c.string_args |= pattern.string_args,
                None => chosen.push(UsdtSite {
                    string_args: pattern.string_args,
                    ..site.clone()
                }),
            }
        }
        if matched == 0 {
            let mut available: Vec<String> = all.iter().map(UsdtSite::full_name).collect();
            available.dedup();
            let provider_known = all.iter().any(|s| pattern.provider.is_match(&s.provider));
            return Err(UsdtError::NoMatch {
                pattern: pattern.raw.clone(),
                objects: names(),
                available: available.join(", "),
                hint: if provider_known { "" } else { NO_PROBES_HINT },
            });
        }
    }
    Ok(chosen)
}

/// Sites that hold the semaphores of `wanted` raised without probing them.
///
/// Some programs need a probe's semaphore raised to fire *other* probes:
/// CPython 3.11 fires `function__entry`/`return` for Python-to-Python calls
/// only while the `line` semaphore is non-zero, and `line` itself fires on
/// every line. A uprobe's `ref_ctr_offset` need not be its own probe's
/// semaphore, so each wanted semaphore is held by a silent uprobe at the
/// site of another probe of the same object whose own semaphore nobody
/// raised: that site sits behind `if (semaphore)` and is never reached, so
/// holding costs no trap. When no such site is free, the wanted site itself
/// is probed silently (a trap per hit, nothing recorded).
/// The kernel wants one `ref_ctr_offset` per (file, offset): while we hold a
/// host site, another tool attaching there with the host's own semaphore is
/// refused (EINVAL) until we detach.
/// `attached`: the sites probed for their records (never hosts); those
/// attached [`UsdtSite::wide`] raise no semaphore of their own.
pub fn semaphore_holders(
    wanted: &[UsdtSite],
    all: &[UsdtSite],
    attached: &[UsdtSite],
) -> Vec<UsdtSite> {
    let mut holders: Vec<UsdtSite> = Vec::new();
    let raised: Vec<(PathBuf, u64)> = attached
        .iter()
        .filter(|s| !s.wide)
        .chain(wanted)
        .filter(|s| s.semaphore_offset != 0)
        .map(|s| (s.object.clone(), s.semaphore_offset))
        .collect();
    for want in wanted {
        if want.semaphore_offset == 0
            || attached.iter().any(|a| {
                !a.wide && a.object == want.object && a.semaphore_offset == want.semaphore_offset
            })
            || holders
                .iter()
                .any(|h| h.object == want.object && h.semaphore_offset == want.semaphore_offset)
        {
            // No semaphore to hold, or an attached probe raises it already.
            continue;
        }
        let taken = |site: &UsdtSite| {
            attached
                .iter()
                .chain(&holders)
                .any(|a| a.object == site.object && a.file_offset == site.file_offset)
        };
        let host = all.iter().find(|h| {
            h.object == want.object
                && h.semaphore_offset != 0
                && !raised.contains(&(h.object.clone(), h.semaphore_offset))
                && !taken(h)
        });
        let at = host.unwrap_or(want);
        holders.push(UsdtSite {
            file_offset: at.file_offset,
            vaddr: at.vaddr,
            semaphore: want.semaphore,
            semaphore_offset: want.semaphore_offset,
            string_args: 0,
            silent: true,
            wide: false,
            ..want.clone()
        });
    }
    holders
}

/// The error for an object with no probes, for `list-usdt`.
pub fn no_probes(objects: &[PathBuf]) -> UsdtError {
    UsdtError::NoProbes {
        objects: objects
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        verb: if objects.len() == 1 { "has" } else { "have" },
        hint: NO_PROBES_HINT,
    }
}

/// Runtime address of a file offset of `object` in process `pid`, from
/// its maps (the mapping that holds that offset of the file).
pub fn runtime_address(
    pid: u32,
    object: &Path,
    file_offset: u64,
) -> Result<Option<u64>, UsdtError> {
    let text = procfs::maps_text(pid).map_err(UsdtError::Proc)?;
    let object = object.display().to_string();
    Ok(procfs::parse_maps(&text)
        .into_iter()
        .filter(|m| m.path == object)
        .find(|m| file_offset >= m.offset && file_offset < m.offset + (m.end - m.start))
        .map(|m| m.start + (file_offset - m.offset)))
}

/// Current value of the 2-byte semaphore at `addr` in process `pid`.
pub fn read_semaphore(pid: u32, addr: u64) -> Result<u16, UsdtError> {
    use std::os::unix::fs::FileExt as _;
    let path = PathBuf::from(format!("/proc/{pid}/mem"));
    let file = fs::File::open(&path).map_err(|source| UsdtError::Read {
        path: path.clone(),
        source,
    })?;
    let mut buf = [0u8; 2];
    file.read_exact_at(&mut buf, addr)
        .map_err(|source| UsdtError::Read { path, source })?;
    Ok(u16::from_le_bytes(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYTHON: &str = "/usr/bin/python3.11";

    #[test]
    fn parses_register_memory_and_constant_specs() {
        let args = parse_args("-8@%rax 8@8(%rbx) -4@$5 -4@%eax 1@-16(%rbp) 2@%r9w 8@$0x10")
            .expect("valid specs");
        assert_eq!(
            args,
            vec![
                UsdtArg {
                    size: 8,
                    signed: true,
                    location: ArgLocation::Reg { reg_off: 80 }
                },
                UsdtArg {
                    size: 8,
                    signed: false,
                    location: ArgLocation::Mem {
                        reg_off: 40,
                        offset: 8
                    }
                },
                UsdtArg {
                    size: 4,
                    signed: true,
                    location: ArgLocation::Const(5)
                },
                UsdtArg {
                    size: 4,
                    signed: true,
                    location: ArgLocation::Reg { reg_off: 80 }
                },
                UsdtArg {
                    size: 1,
                    signed: false,
                    location: ArgLocation::Mem {
                        reg_off: 32,
                        offset: -16
                    }
                },
                UsdtArg {
                    size: 2,
                    signed: false,
                    location: ArgLocation::Reg { reg_off: 64 }
                },
                UsdtArg {
                    size: 8,
                    signed: false,
                    location: ArgLocation::Const(16)
                },
            ]
        );
        let wire = args[1].wire();
        assert_eq!(
            (wire.kind, wire.size, wire.signed, wire.reg_off, wire.value),
            (usdt_arg::MEM, 8, 0, 40, 8)
        );
    }

    #[test]
    fn rejects_what_it_cannot_decode() {
        for spec in [
            "3@%rax",
            "8@%xmm0",
            "8@(%rax,%rbx,8)",
            "8@foo(%rip)",
            "x@%rax",
            "8@rax",
        ] {
            assert!(
                matches!(UsdtArg::parse(spec), Err(UsdtError::BadArg { .. })),
                "{spec}"
            );
        }
    }

    #[test]
    fn parses_note_bytes() {
        let mut desc = Vec::new();
        for w in [0x1000u64, 0x2000, 0x3000] {
            desc.extend_from_slice(&w.to_le_bytes());
        }
        desc.extend_from_slice(b"prov\0probe\0-4@%edi\0");
        let mut note = Vec::new();
        note.extend_from_slice(&8u32.to_le_bytes());
        note.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        note.extend_from_slice(&NT_STAPSDT.to_le_bytes());
        note.extend_from_slice(b"stapsdt\0");
        note.extend_from_slice(&desc);
        while note.len() % 4 != 0 {
            note.push(0);
        }
        let notes = parse_notes(&note).expect("valid note");
        assert_eq!(
            notes,
            vec![Note {
                pc: 0x1000,
                base: 0x2000,
                semaphore: 0x3000,
                provider: "prov".into(),
                name: "probe".into(),
                args: "-4@%edi".into(),
            }]
        );
        assert_eq!(parse_notes(&note[..note.len() - 8]), Err(0));
    }

    #[test]
    fn patterns_need_provider_and_name() {
        assert!(UsdtPattern::parse("python:function__entry").is_ok());
        assert!(UsdtPattern::parse("python:*").is_ok());
        assert!(UsdtPattern::parse("libpython3.11.so:python:line").is_ok());
        assert!(matches!(
            UsdtPattern::parse("function__entry"),
            Err(UsdtError::BadPattern { .. })
        ));
        assert!(matches!(
            UsdtPattern::parse("python:"),
            Err(UsdtError::BadPattern { .. })
        ));
    }

    /// Debian's interpreter: the probe sites readelf shows, placed in the file.
    #[test]
    fn reads_debian_python_probes() {
        let path = Path::new(PYTHON);
        if !path.exists() {
            eprintln!("skipped: {PYTHON} is not installed");
            return;
        }
        let sites = read_sites(path).expect("readable");
        let entry = sites
            .iter()
            .find(|s| s.full_name() == "python:function__entry")
            .expect("function__entry");
        let args = entry.args.as_ref().expect("parsable args");
        assert_eq!(args.len(), 3, "file, function, line: {}", entry.args_text);
        assert_eq!((args[0].size, args[2].size, args[2].signed), (8, 4, true));
        assert_ne!(entry.semaphore, 0);
        // The probe site is a nop in the text; the semaphore a zero u16 in .probes.
        let data = fs::read(path).expect("read");
        assert_eq!(data[entry.file_offset as usize], 0x90, "nop at the site");
        let sema = entry.semaphore_offset as usize;
        assert_eq!(&data[sema..sema + 2], &[0, 0]);
        for name in ["function__return", "line", "gc__start"] {
            assert!(sites.iter().any(|s| s.name == name), "{name}");
        }
        let chosen = select(
            &[UsdtPattern::parse("python:function__*").expect("pattern")],
            &sites,
            &[path.to_path_buf()],
        )
        .expect("matches");
        assert_eq!(chosen.len(), 2);
    }

    #[test]
    fn an_object_without_probes_is_a_clear_error() {
        let path = Path::new("/bin/true");
        let sites = read_sites(path).expect("readable ELF");
        assert!(sites.is_empty());
        let err = select(
            &[UsdtPattern::parse("python:function__entry").expect("pattern")],
            &sites,
            &[path.to_path_buf()],
        )
        .expect_err("no probes");
        assert!(matches!(err, UsdtError::NoProbes { .. }));
    }
}
