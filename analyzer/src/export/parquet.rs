//! Parquet tables of captures (events), of scored units and of peer
//! comparison windows, for DuckDB, pyarrow, pandas or Spark. The schemas
//! are in the module doc of [`super`].

use std::{io::Write, sync::Arc};

use parquet::{
    basic::Compression,
    data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type},
    file::{
        properties::WriterProperties,
        writer::{SerializedColumnWriter, SerializedFileWriter},
    },
    schema::parser::parse_message_type,
};
use rustc_hash::FxHashMap;
use serde_json::Value;
use tracer_common::record::SockAddr;

use super::ExportError;
use crate::{
    debuginfo::{AddressKind, SourceLines},
    decode::{
        Capture, Event, Symbolizer, addr_string, comm_string, format::Formatter, syscall_name,
    },
    peers::Scored,
    score::ScoreReport,
};

/// Rows per row group: bounds the memory a table takes while written.
const ROW_GROUP: usize = 1 << 16;

/// One column's values and, for a nullable column, definition levels.
enum Column {
    I32(Vec<i32>, Option<Vec<i16>>),
    I64(Vec<i64>, Option<Vec<i16>>),
    F64(Vec<f64>, Option<Vec<i16>>),
    Bool(Vec<bool>),
    Str(Vec<ByteArray>, Option<Vec<i16>>),
}

impl Column {
    fn clear(&mut self) {
        match self {
            Self::I32(v, d) => {
                v.clear();
                if let Some(d) = d {
                    d.clear();
                }
            }
            Self::I64(v, d) => {
                v.clear();
                if let Some(d) = d {
                    d.clear();
                }
            }
            Self::F64(v, d) => {
                v.clear();
                if let Some(d) = d {
                    d.clear();
                }
            }
            Self::Bool(v) => v.clear(),
            Self::Str(v, d) => {
                v.clear();
                if let Some(d) = d {
                    d.clear();
                }
            }
        }
    }

    fn write(&self, col: &mut SerializedColumnWriter<'_>) -> Result<(), ExportError> {
        match self {
            Self::I32(v, d) => {
                col.typed::<Int32Type>()
                    .write_batch(v, d.as_deref(), None)?;
            }
            Self::I64(v, d) => {
                col.typed::<Int64Type>()
                    .write_batch(v, d.as_deref(), None)?;
            }
            Self::F64(v, d) => {
                col.typed::<DoubleType>()
                    .write_batch(v, d.as_deref(), None)?;
            }
            Self::Bool(v) => {
                col.typed::<BoolType>().write_batch(v, None, None)?;
            }
            Self::Str(v, d) => {
                col.typed::<ByteArrayType>()
                    .write_batch(v, d.as_deref(), None)?;
            }
        }
        Ok(())
    }
}

/// A table being written: columns in schema order, flushed every
/// [`ROW_GROUP`] rows.
struct Table<W: Write + Send> {
    writer: SerializedFileWriter<W>,
    columns: Vec<Column>,
    rows: usize,
    total: u64,
}

impl<W: Write + Send> Table<W> {
    /// A table with `schema` (Parquet message syntax) and matching `columns`.
    fn new(schema: &str, columns: Vec<Column>, out: W) -> Result<Self, ExportError> {
        let schema = Arc::new(parse_message_type(schema)?);
        let props = Arc::new(
            WriterProperties::builder()
                .set_compression(Compression::SNAPPY)
                .set_created_by("eftrace analyzer export".into())
                .build(),
        );
        Ok(Self {
            writer: SerializedFileWriter::new(out, schema, props)?,
            columns,
            rows: 0,
            total: 0,
        })
    }

    fn i32(&mut self, c: usize, v: Option<i32>) {
        if let Column::I32(values, def) = &mut self.columns[c] {
            push(values, def, v);
        }
    }

    fn i64(&mut self, c: usize, v: Option<i64>) {
        if let Column::I64(values, def) = &mut self.columns[c] {
            push(values, def, v);
        }
    }

    fn f64(&mut self, c: usize, v: Option<f64>) {
        if let Column::F64(values, def) = &mut self.columns[c] {
            push(values, def, v);
        }
    }

    fn bool(&mut self, c: usize, v: bool) {
        if let Column::Bool(values) = &mut self.columns[c] {
            values.push(v);
        }
    }

    fn str(&mut self, c: usize, v: Option<&str>) {
        self.bytes(c, v.map(ByteArray::from));
    }

    fn bytes(&mut self, c: usize, v: Option<ByteArray>) {
        if let Column::Str(values, def) = &mut self.columns[c] {
            push(values, def, v);
        }
    }

    /// Ends a row; writes a row group when it is full.
    fn end_row(&mut self) -> Result<(), ExportError> {
        self.rows += 1;
        if self.rows >= ROW_GROUP {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ExportError> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut group = self.writer.next_row_group()?;
        let mut i = 0;
        while let Some(mut col) = group.next_column()? {
            self.columns[i].write(&mut col)?;
            col.close()?;
            i += 1;
        }
        group.close()?;
        for c in &mut self.columns {
            c.clear();
        }
        self.total += self.rows as u64;
        self.rows = 0;
        Ok(())
    }

    /// Writes the last row group and the footer; the number of rows.
    fn finish(mut self) -> Result<u64, ExportError> {
        self.flush()?;
        self.writer.close()?;
        Ok(self.total)
    }
}

/// Appends `v` to a column, with a definition level when it is nullable.
fn push<T>(values: &mut Vec<T>, def: &mut Option<Vec<i16>>, v: Option<T>) {
    match def {
        Some(levels) => {
            levels.push(i16::from(v.is_some()));
            if let Some(v) = v {
                values.push(v);
            }
        }
        None => {
            if let Some(v) = v {
                values.push(v);
            }
        }
    }
}

fn req_i32() -> Column {
    Column::I32(Vec::new(), None)
}
fn opt_i32() -> Column {
    Column::I32(Vec::new(), Some(Vec::new()))
}
fn req_i64() -> Column {
    Column::I64(Vec::new(), None)
}
fn opt_i64() -> Column {
    Column::I64(Vec::new(), Some(Vec::new()))
}
fn req_f64() -> Column {
    Column::F64(Vec::new(), None)
}
fn opt_f64() -> Column {
    Column::F64(Vec::new(), Some(Vec::new()))
}
fn req_str() -> Column {
    Column::Str(Vec::new(), None)
}
fn opt_str() -> Column {
    Column::Str(Vec::new(), Some(Vec::new()))
}

/// Schema of the events table.
pub const EVENTS_SCHEMA: &str = "message eftrace_events {
    REQUIRED BYTE_ARRAY capture (UTF8);
    REQUIRED BYTE_ARRAY host (UTF8);
    REQUIRED INT64 ts_ns;
    REQUIRED INT64 wall_ns;
    REQUIRED INT32 pid;
    REQUIRED INT32 tid;
    REQUIRED INT32 cpu;
    REQUIRED BYTE_ARRAY kind (UTF8);
    OPTIONAL BYTE_ARRAY name (UTF8);
    OPTIONAL INT64 duration_ns;
    OPTIONAL INT32 fd;
    OPTIONAL INT64 ret;
    OPTIONAL BYTE_ARRAY address (UTF8);
    OPTIONAL BYTE_ARRAY remote (UTF8);
    OPTIONAL BYTE_ARRAY location (UTF8);
    OPTIONAL BYTE_ARRAY source (UTF8);
    OPTIONAL BYTE_ARRAY kernel_location (UTF8);
    OPTIONAL BYTE_ARRAY args (UTF8);
}";

/// Writes one row per event of `captures` (named as given); the number of
/// rows.
pub fn write_events(
    captures: &[(&str, &Capture)],
    lines: &mut SourceLines,
    out: impl Write + Send,
) -> Result<u64, ExportError> {
    let columns = vec![
        req_str(),
        req_str(),
        req_i64(),
        req_i64(),
        req_i32(),
        req_i32(),
        req_i32(),
        req_str(),
        opt_str(),
        opt_i64(),
        opt_i32(),
        opt_i64(),
        opt_str(),
        opt_str(),
        opt_str(),
        opt_str(),
        opt_str(),
        opt_str(),
    ];
    let mut t = Table::new(EVENTS_SCHEMA, columns, out)?;
    // Names repeat from row to row: each distinct one is made once and
    // shared (a `ByteArray` clone is a reference count), not allocated per
    // cell.
    let text = |s: &str| ByteArray::from(s);
    let mut kinds: FxHashMap<&'static str, ByteArray> = FxHashMap::default();
    let mut syscalls: FxHashMap<u32, ByteArray> = FxHashMap::default();
    let mut comms: FxHashMap<[u8; 16], ByteArray> = FxHashMap::default();
    for (name, capture) in captures {
        let capture_name = text(name);
        let host = text(&capture.header.host);
        // USDT hits need the string arguments sent before them: the
        // formatter keeps those, in capture order.
        let fmt = Formatter::new(capture);
        let symbols = Symbolizer::new(capture);
        let clock = capture.header.clock;
        type Place = (Option<ByteArray>, Option<ByteArray>);
        let mut places: FxHashMap<(u32, u64, bool), Place> = FxHashMap::default();
        let mut place = |pid: u32, addr: u64, kind: AddressKind, lines: &mut SourceLines| {
            places
                .entry((pid, addr, kind == AddressKind::Return))
                .or_insert_with(|| {
                    // Unplaced addresses stay visible, as `analyzer events` shows them.
                    let location = symbols
                        .user(pid, addr)
                        .map_or_else(|| format!("{addr:#x}"), |l| l.to_string());
                    let source = lines
                        .frames_at(&symbols, pid, addr, kind)
                        .first()
                        .and_then(|f| f.file_line());
                    (Some(text(&location)), source.as_deref().map(text))
                })
                .clone()
        };
        let mut kernel_names: FxHashMap<u64, Option<ByteArray>> = FxHashMap::default();
        let mut functions: FxHashMap<u32, ByteArray> = FxHashMap::default();
        let mut function = |id: u32| {
            functions
                .entry(id)
                .or_insert_with(|| text(&capture.function_name(id)))
                .clone()
        };
        for event in capture.events() {
            let event = event?;
            let h = *event.header();
            t.bytes(0, Some(capture_name.clone()));
            t.bytes(1, Some(host.clone()));
            t.i64(2, Some(h.ts_ns as i64));
            t.i64(3, Some(clock.to_realtime(h.ts_ns) as i64));
            t.i32(4, Some(h.pid as i32));
            t.i32(5, Some(h.tid as i32));
            t.i32(6, Some(h.cpu as i32));
            let kind = event.kind_name();
            t.bytes(
                7,
                Some(kinds.entry(kind).or_insert_with(|| text(kind)).clone()),
            );
            let (mut name, mut duration, mut fd, mut ret) = (None, None, None, None);
            let (mut location, mut source, mut kernel) = (None, None, None);
            let (mut address, mut remote, mut args) = (None, None, None);
            match &event {
                Event::Entry {
                    rec,
                    args: regs,
                    stack,
                    ..
                } => {
                    name = Some(function(rec.func_id));
                    (location, source) = place(h.pid, rec.call_site, AddressKind::Return, lines);
                    // Registers first, then the stack-passed arguments.
                    args = regs.map(|a| {
                        let all: Vec<u64> =
                            a.iter().chain(stack.iter().flatten()).copied().collect();
                        serde_json::json!(all).to_string()
                    });
                }
                Event::Return(r) => {
                    name = Some(function(r.func_id));
                    ret = Some(r.ret as i64);
                }
                Event::Syscall(sc) => {
                    name = Some(
                        syscalls
                            .entry(sc.nr)
                            .or_insert_with(|| text(&syscall_name(sc.nr)))
                            .clone(),
                    );
                    duration = Some(h.ts_ns.saturating_sub(sc.enter_ns) as i64);
                    fd = Some(sc.fd);
                    ret = Some(sc.ret);
                    address = addr_string(&sc.addr);
                }
                Event::Sample(sm) => {
                    name = Some(
                        comms
                            .entry(sm.comm)
                            .or_insert_with(|| text(&comm_string(&sm.comm)))
                            .clone(),
                    );
                    if sm.user_ip != 0 {
                        (location, source) =
                            place(h.pid, sm.user_ip, AddressKind::Instruction, lines);
                    }
                    if sm.kernel_ip != 0 {
                        kernel = kernel_names
                            .entry(sm.kernel_ip)
                            .or_insert_with(|| {
                                symbols.kernel(sm.kernel_ip).map(|l| text(&l.to_string()))
                            })
                            .clone();
                    }
                }
                Event::Lifecycle(l) => name = Some(text(&comm_string(&l.comm))),
                Event::TcpRetransmit(r) => {
                    let end = |a: &[u8; 16], port: u16| {
                        addr_string(&SockAddr {
                            family: r.family,
                            port_be: port.to_be(),
                            _pad: 0,
                            addr: *a,
                        })
                    };
                    address = end(&r.saddr, r.sport);
                    remote = end(&r.daddr, r.dport);
                }
                Event::Usdt(_) => {
                    let json = fmt.json(&event);
                    name = json.get("probe").and_then(Value::as_str).map(text);
                    args = json.get("args").map(Value::to_string);
                }
                Event::UsdtString(_) => {
                    args = fmt.json(&event).get("text").map(Value::to_string);
                }
                Event::CpuTimes(c) => {
                    args = Some(
                        serde_json::json!({
                            "run_ns": c.run_ns,
                            "wait_ns": c.wait_ns,
                            "slices": c.slices,
                            "threads": c.threads,
                        })
                        .to_string(),
                    );
                }
                // The kernel's counters: their fields as the arguments.
                Event::FileIo(_)
                | Event::BlockIo(_)
                | Event::NetDev(_)
                | Event::NetSnmp(_)
                | Event::DeviceName(_)
                | Event::NetAddr(_) => args = Some(fmt.json(&event).to_string()),
                Event::Blocked(_) => {
                    let json = fmt.json(&event);
                    name = json.get("syscall").and_then(Value::as_str).map(text);
                    args = Some(json.to_string());
                }
                Event::Enroll(_) | Event::Unknown(_) => {}
            }
            t.bytes(8, name);
            t.i64(9, duration);
            t.i32(10, fd);
            t.i64(11, ret);
            t.str(12, address.as_deref());
            t.str(13, remote.as_deref());
            t.bytes(14, location);
            t.bytes(15, source);
            t.bytes(16, kernel);
            t.str(17, args.as_deref());
            t.end_row()?;
        }
    }
    t.finish()
}

/// Schema of the units table.
pub const UNITS_SCHEMA: &str = "message eftrace_units {
    REQUIRED INT32 rank;
    REQUIRED BYTE_ARRAY capture (UTF8);
    REQUIRED BYTE_ARRAY host (UTF8);
    REQUIRED INT32 pid;
    REQUIRED BYTE_ARRAY comm (UTF8);
    REQUIRED INT32 tid;
    REQUIRED BYTE_ARRAY kind (UTF8);
    REQUIRED BYTE_ARRAY role (UTF8);
    REQUIRED INT64 start_ns;
    REQUIRED INT64 end_ns;
    REQUIRED DOUBLE t_s;
    REQUIRED INT64 wall_ns;
    OPTIONAL BYTE_ARRAY connection (UTF8);
    OPTIONAL BYTE_ARRAY peer (UTF8);
    REQUIRED DOUBLE score;
    OPTIONAL DOUBLE normal;
    REQUIRED BOOLEAN anomalous;
    REQUIRED BOOLEAN earliest;
    OPTIONAL BYTE_ARRAY reason (UTF8);
    OPTIONAL BYTE_ARRAY top_difference (UTF8);
    REQUIRED BYTE_ARRAY differences (UTF8);
}";

/// Writes one row per unit of `report`, most suspect first; the number of
/// rows.
pub fn write_units(report: &ScoreReport, out: impl Write + Send) -> Result<u64, ExportError> {
    let columns = vec![
        req_i32(),
        req_str(),
        req_str(),
        req_i32(),
        req_str(),
        req_i32(),
        req_str(),
        req_str(),
        req_i64(),
        req_i64(),
        req_f64(),
        req_i64(),
        opt_str(),
        opt_str(),
        req_f64(),
        opt_f64(),
        Column::Bool(Vec::new()),
        Column::Bool(Vec::new()),
        opt_str(),
        opt_str(),
        req_str(),
    ];
    let mut t = Table::new(UNITS_SCHEMA, columns, out)?;
    for (i, u) in report.units.iter().enumerate() {
        t.i32(0, Some(i as i32 + 1));
        t.str(1, Some(&u.capture));
        t.str(2, Some(&u.host));
        t.i32(3, Some(u.pid as i32));
        t.str(4, Some(&u.comm));
        t.i32(5, Some(u.tid as i32));
        t.str(6, Some(u.kind.name()));
        t.str(7, Some(&u.role));
        t.i64(8, Some(u.start_ns as i64));
        t.i64(9, Some(u.end_ns as i64));
        t.f64(10, Some(u.t_s));
        t.i64(11, Some(u.wall_ns as i64));
        t.str(12, u.connection.as_deref());
        t.str(13, u.peer.as_deref());
        t.f64(14, Some(u.score));
        t.f64(15, u.normal);
        t.bool(16, u.anomalous);
        t.bool(17, report.earliest.iter().any(|e| e.unit == Some(i)));
        t.str(18, (!u.reason.is_empty()).then_some(u.reason.as_str()));
        let top = u
            .differences
            .first()
            .map(|d| format!("{:?} {} (p={:.2})", d.kind, d.path, d.p).to_lowercase());
        t.str(19, top.as_deref());
        t.str(20, Some(&serde_json::to_string(&u.differences)?));
        t.end_row()?;
    }
    t.finish()
}

/// Schema of the peer windows table.
pub const WINDOWS_SCHEMA: &str = "message eftrace_peer_windows {
    REQUIRED BYTE_ARRAY run (UTF8);
    REQUIRED INT32 window_index;
    REQUIRED INT64 start_ns;
    REQUIRED INT64 window_ns;
    REQUIRED BYTE_ARRAY server (UTF8);
    REQUIRED BYTE_ARRAY metric (UTF8);
    REQUIRED BYTE_ARRAY unit (UTF8);
    REQUIRED BYTE_ARRAY component (UTF8);
    REQUIRED DOUBLE value;
    REQUIRED DOUBLE score;
}";

/// Writes one row per (run, window, server, metric, component) of the
/// scored runs, `normalized` naming the metrics compared in shares; the
/// number of rows.
pub fn write_windows(
    runs: &[Scored],
    normalized: &[crate::peers::Metric],
    out: impl Write + Send,
) -> Result<u64, ExportError> {
    let columns = vec![
        req_str(),
        req_i32(),
        req_i64(),
        req_i64(),
        req_str(),
        req_str(),
        req_str(),
        req_str(),
        req_f64(),
        req_f64(),
    ];
    let mut t = Table::new(WINDOWS_SCHEMA, columns, out)?;
    for run in runs {
        let w = &run.windowed;
        for (m, metric) in w.metrics.iter().enumerate() {
            for (wi, start) in w.starts.iter().enumerate() {
                for (s, server) in run.servers.iter().enumerate() {
                    let score = run
                        .scores
                        .get(m)
                        .and_then(|x| x.get(wi))
                        .and_then(|x| x.get(s))
                        .copied()
                        .unwrap_or(f64::NAN);
                    let Some(vector) = metric.vectors.get(wi).and_then(|v| v.get(s)) else {
                        continue;
                    };
                    for (c, component) in metric.components.iter().enumerate() {
                        t.str(0, Some(&run.run));
                        t.i32(1, Some(wi as i32));
                        t.i64(2, Some(*start as i64));
                        t.i64(3, Some(w.window_ns as i64));
                        t.str(4, Some(&server.label));
                        t.str(5, Some(metric.metric.name()));
                        t.str(6, Some(metric.metric.unit_of(normalized)));
                        t.str(7, Some(component));
                        t.f64(8, Some(vector.get(c).copied().unwrap_or(0.0)));
                        t.f64(9, Some(score));
                        t.end_row()?;
                    }
                }
            }
        }
    }
    t.finish()
}
