//! [pprof](https://github.com/google/pprof/blob/main/proto/profile.proto)'s
//! `profile.proto`, gzipped, as `go tool pprof` and other profilers read it.
//!
//! The messages are written out here with prost's derive (no protoc at build
//! time); field numbers follow `profile.proto`. Every stack is one sample;
//! its process goes in labels (`host`, `pid`, `comm`) so `-tagfocus` splits
//! them. Locations are per (object, object address) with one line per
//! inlined function, innermost first; traced frames without an address get
//! a location of their own. Mappings name each object with its build id and
//! say which frames are symbolized already (all of them: pprof does not
//! symbolize again).

use std::{collections::HashMap, io::Write};

use flate2::{Compression, write::GzEncoder};
use prost::Message;

use super::{
    ExportError,
    stacks::{StackFrame, StackProfile},
};

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    /// What each sample value is.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Mapped objects.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Code locations.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Strings; index 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Frames to drop (regex, string index).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Frames to keep (regex, string index).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// Start of the profile, ns since the epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// Its length, ns.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What the period is.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// Between samples, in `period_type` units.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Comments (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type shown by default (string index of its type).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `ValueType`.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// String index of the type (`cpu`).
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// String index of the unit (`nanoseconds`).
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// `Label`.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// String index of the key.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String index of a text value.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// A numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// String index of the numeric value's unit.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// `Mapping`.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    /// Id, from 1.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// First address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// Past the last address.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// String index of the object's path.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// String index of its build id.
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Locations are symbolized.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Locations have file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Locations have line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// Locations have inlined frames.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// `Location`.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Id, from 1.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its mapping, 0 for none.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// Address (here: the object address as its ELF file numbers it).
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Lines, innermost inlined function first, the function the code was
    /// compiled into last.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Several functions folded into one.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// `Line`.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// Function id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Line number, 0 when unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// Column, 0 when unknown.
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Id, from 1.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// String index of its name.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// String index of its raw (e.g. mangled) name.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// String index of its source file.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// First line, 0 when unknown.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// The string table.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    ids: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Self::default();
        s.id("");
        s
    }

    fn id(&mut self, text: &str) -> i64 {
        if let Some(id) = self.ids.get(text) {
            return *id;
        }
        let id = self.table.len() as i64;
        self.table.push(text.to_string());
        self.ids.insert(text.to_string(), id);
        id
    }
}

/// Builds the `Profile` message of `profile`. `main`, when given, is the
/// first mapping (pprof names a profile after it: `File: …`).
pub fn profile(
    profile: &StackProfile,
    build_ids: &HashMap<String, String>,
    main: Option<&str>,
) -> Profile {
    let mut strings = Strings::new();
    let types = profile.kind.value_types();
    let sample_type: Vec<ValueType> = types
        .iter()
        .map(|(t, u)| ValueType {
            r#type: strings.id(t),
            unit: strings.id(u),
        })
        .collect();

    let mut functions: Vec<Function> = Vec::new();
    let mut function_ids: HashMap<(String, Option<String>), u64> = HashMap::new();
    let mut function_id = |f: &StackFrame, strings: &mut Strings| -> u64 {
        let key = (f.function.clone(), f.file.clone());
        if let Some(id) = function_ids.get(&key) {
            return *id;
        }
        let id = functions.len() as u64 + 1;
        let name = strings.id(&f.function);
        functions.push(Function {
            id,
            name,
            system_name: name,
            filename: f.file.as_deref().map_or(0, |p| strings.id(p)),
            start_line: 0,
        });
        function_ids.insert(key, id);
        id
    };

    let mut mappings: Vec<Mapping> = Vec::new();
    let mut mapping_ids: HashMap<&str, usize> = HashMap::new();
    let add_mapping = |object: &str, strings: &mut Strings, mappings: &mut Vec<Mapping>| {
        let filename = strings.id(object);
        let build_id = build_ids.get(object).map_or(0, |b| strings.id(b));
        mappings.push(Mapping {
            id: mappings.len() as u64 + 1,
            memory_start: 0,
            memory_limit: u64::MAX,
            file_offset: 0,
            filename,
            build_id,
            has_functions: true,
            ..Default::default()
        });
        mappings.len() - 1
    };
    if let Some(main) = main {
        let m = add_mapping(main, &mut strings, &mut mappings);
        mapping_ids.insert(main, m);
    }
    let mut locations: Vec<Location> = Vec::new();
    let mut location_ids: HashMap<Vec<u32>, u64> = HashMap::new();
    let mut samples: Vec<Sample> = Vec::with_capacity(profile.stacks.len());
    let with_host = profile.captures > 1;
    let (host_key, pid_key, comm_key, process_key) = (
        strings.id("host"),
        strings.id("pid"),
        strings.id("comm"),
        strings.id("process"),
    );
    for (stack, process, values) in &profile.stacks {
        // Leaf first; frames at one address (inlined) form one location.
        let mut groups: Vec<Vec<u32>> = Vec::new();
        for id in stack.iter().rev() {
            let f = &profile.frames[*id as usize];
            let joins = groups.last().is_some_and(|g| {
                let prev = &profile.frames[g[0] as usize];
                f.address.is_some() && prev.address == f.address
            });
            match groups.last_mut() {
                Some(g) if joins => g.push(*id),
                _ => groups.push(vec![*id]),
            }
        }
        let mut location_id = Vec::with_capacity(groups.len());
        for group in groups {
            if let Some(id) = location_ids.get(&group) {
                location_id.push(*id);
                continue;
            }
            let first = &profile.frames[group[0] as usize];
            let (mapping_id, address) = match &first.address {
                Some((object, addr)) => {
                    let m = *mapping_ids
                        .entry(object)
                        .or_insert_with(|| add_mapping(object, &mut strings, &mut mappings));
                    let mapping = &mut mappings[m];
                    let lines = group
                        .iter()
                        .any(|id| profile.frames[*id as usize].line.is_some());
                    mapping.has_filenames |= lines;
                    mapping.has_line_numbers |= lines;
                    mapping.has_inline_frames |= group.len() > 1;
                    (mapping.id, *addr)
                }
                None => (0, 0),
            };
            let line = group
                .iter()
                .map(|id| {
                    let f = &profile.frames[*id as usize];
                    Line {
                        function_id: function_id(f, &mut strings),
                        line: f.line.map_or(0, i64::from),
                        column: 0,
                    }
                })
                .collect();
            let id = locations.len() as u64 + 1;
            locations.push(Location {
                id,
                mapping_id,
                address,
                line,
                is_folded: false,
            });
            location_ids.insert(group, id);
            location_id.push(id);
        }
        let p = &profile.processes[*process as usize];
        let mut label = vec![
            Label {
                key: pid_key,
                num: i64::from(p.pid),
                ..Default::default()
            },
            Label {
                key: comm_key,
                str: strings.id(&p.comm),
                ..Default::default()
            },
            Label {
                key: process_key,
                str: strings.id(&p.label(with_host)),
                ..Default::default()
            },
        ];
        if with_host {
            label.push(Label {
                key: host_key,
                str: strings.id(&p.host),
                ..Default::default()
            });
        }
        samples.push(Sample {
            location_id,
            value: values.iter().map(|v| *v as i64).collect(),
            label,
        });
    }
    let comment = profile
        .notes
        .iter()
        .map(|n| strings.id(n))
        .collect::<Vec<_>>();
    let period_type = Some(ValueType {
        r#type: sample_type[1].r#type,
        unit: sample_type[1].unit,
    });
    Profile {
        default_sample_type: sample_type[1].r#type,
        sample_type,
        sample: samples,
        mapping: mappings,
        location: locations,
        function: functions,
        string_table: strings.table,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: profile.start_wall_ns as i64,
        duration_nanos: profile.duration_ns as i64,
        period_type,
        period: profile.period_ns as i64,
        comment,
    }
}

/// Writes `profile` gzipped, as pprof files are.
pub fn write(
    profile: &StackProfile,
    build_ids: &HashMap<String, String>,
    main: Option<&str>,
    out: impl Write,
) -> Result<(), ExportError> {
    let message = self::profile(profile, build_ids, main);
    let mut gz = GzEncoder::new(out, Compression::default());
    gz.write_all(&message.encode_to_vec())?;
    gz.finish()?.flush()?;
    Ok(())
}
