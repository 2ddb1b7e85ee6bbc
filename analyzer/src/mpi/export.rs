//! Profiles as flat tables: JSON lines (one call per line) and Parquet, so
//! DuckDB, DataFusion or Spark can query them. Both carry the same columns:
//!
//! | column | type | meaning |
//! | --- | --- | --- |
//! | rank | int32 | MPI rank |
//! | host | string | host of the rank |
//! | pid, tid | int32 | process and thread |
//! | seq | int64 | index of the call in the rank's profile |
//! | function | string | `MPI_*` name |
//! | peer_kind | string | rank, any_source, proc_null, root, op, comm, none |
//! | peer | int64, nullable | rank, root or handle |
//! | compute_ns | int64 | computation time before the call |
//! | comm_ns | int64 | communication time inside the call |
//! | start_ns | int64 | entry time, CLOCK_MONOTONIC |
//! | cpu | int32 | CPU at entry |

use std::{io::Write, sync::Arc};

use parquet::{
    basic::Compression,
    data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type},
    file::{properties::WriterProperties, writer::SerializedFileWriter},
    schema::parser::parse_message_type,
};
use serde::Serialize;

use super::profile::Profiles;

/// Errors writing an export.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Writing failed.
    #[error("writing the export")]
    Io(#[from] std::io::Error),
    /// Serializing a row failed.
    #[error("serializing a row")]
    Json(#[from] serde_json::Error),
    /// The Parquet writer failed.
    #[error("writing Parquet")]
    Parquet(#[from] parquet::errors::ParquetError),
}

#[derive(Serialize)]
struct Row<'a> {
    rank: u32,
    host: &'a str,
    pid: u32,
    tid: u32,
    seq: usize,
    function: &'a str,
    peer_kind: &'static str,
    peer: Option<i64>,
    compute_ns: u64,
    comm_ns: u64,
    start_ns: u64,
    cpu: u32,
}

/// Writes one JSON object per call.
pub fn write_jsonl(profiles: &Profiles, mut out: impl Write) -> Result<(), ExportError> {
    for r in &profiles.ranks {
        for (seq, c) in r.calls.iter().enumerate() {
            let (peer_kind, peer) = c.peer.columns();
            serde_json::to_writer(
                &mut out,
                &Row {
                    rank: r.rank,
                    host: &r.host,
                    pid: r.pid,
                    tid: c.tid,
                    seq,
                    function: r.function_name(c),
                    peer_kind,
                    peer,
                    compute_ns: c.compute_ns,
                    comm_ns: c.comm_ns,
                    start_ns: c.start_ns,
                    cpu: c.cpu,
                },
            )?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    Ok(())
}

const SCHEMA: &str = "message mpi_profile {
    REQUIRED INT32 rank;
    REQUIRED BYTE_ARRAY host (UTF8);
    REQUIRED INT32 pid;
    REQUIRED INT32 tid;
    REQUIRED INT64 seq;
    REQUIRED BYTE_ARRAY function (UTF8);
    REQUIRED BYTE_ARRAY peer_kind (UTF8);
    OPTIONAL INT64 peer;
    REQUIRED INT64 compute_ns;
    REQUIRED INT64 comm_ns;
    REQUIRED INT64 start_ns;
    REQUIRED INT32 cpu;
}";

/// Writes a Parquet file (one row group per rank, Snappy pages).
pub fn write_parquet(profiles: &Profiles, out: impl Write + Send) -> Result<(), ExportError> {
    let schema = Arc::new(parse_message_type(SCHEMA)?);
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by("eftrace analyzer".into())
            .build(),
    );
    let mut writer = SerializedFileWriter::new(out, schema, props)?;
    for r in &profiles.ranks {
        let n = r.calls.len();
        let int32 = |f: &dyn Fn(usize) -> i32| (0..n).map(f).collect::<Vec<i32>>();
        let int64 = |f: &dyn Fn(usize) -> i64| (0..n).map(f).collect::<Vec<i64>>();
        let names: Vec<ByteArray> = r
            .functions
            .iter()
            .map(|f| ByteArray::from(f.as_str()))
            .collect();
        let host = ByteArray::from(r.host.as_str());
        let peers: Vec<(&'static str, Option<i64>)> =
            r.calls.iter().map(|c| c.peer.columns()).collect();
        let mut group = writer.next_row_group()?;
        let mut column = 0;
        while let Some(mut col) = group.next_column()? {
            match column {
                0 => write_i32(&mut col, &int32(&|_| r.rank as i32), None)?,
                1 => write_bytes(&mut col, &vec![host.clone(); n])?,
                2 => write_i32(&mut col, &int32(&|_| r.pid as i32), None)?,
                3 => write_i32(&mut col, &int32(&|i| r.calls[i].tid as i32), None)?,
                4 => write_i64(&mut col, &int64(&|i| i as i64), None)?,
                5 => write_bytes(
                    &mut col,
                    &r.calls
                        .iter()
                        .map(|c| names[c.function as usize].clone())
                        .collect::<Vec<_>>(),
                )?,
                6 => write_bytes(
                    &mut col,
                    &peers
                        .iter()
                        .map(|(k, _)| ByteArray::from(*k))
                        .collect::<Vec<_>>(),
                )?,
                7 => {
                    let values: Vec<i64> = peers.iter().filter_map(|(_, v)| *v).collect();
                    let def: Vec<i16> = peers.iter().map(|(_, v)| i16::from(v.is_some())).collect();
                    write_i64(&mut col, &values, Some(&def))?
                }
                8 => write_i64(&mut col, &int64(&|i| r.calls[i].compute_ns as i64), None)?,
                9 => write_i64(&mut col, &int64(&|i| r.calls[i].comm_ns as i64), None)?,
                10 => write_i64(&mut col, &int64(&|i| r.calls[i].start_ns as i64), None)?,
                _ => write_i32(&mut col, &int32(&|i| r.calls[i].cpu as i32), None)?,
            }
            col.close()?;
            column += 1;
        }
        group.close()?;
    }
    writer.close()?;
    Ok(())
}

fn write_i32(
    col: &mut parquet::file::writer::SerializedColumnWriter<'_>,
    values: &[i32],
    def: Option<&[i16]>,
) -> Result<(), ExportError> {
    col.typed::<Int32Type>().write_batch(values, def, None)?;
    Ok(())
}

fn write_i64(
    col: &mut parquet::file::writer::SerializedColumnWriter<'_>,
    values: &[i64],
    def: Option<&[i16]>,
) -> Result<(), ExportError> {
    col.typed::<Int64Type>().write_batch(values, def, None)?;
    Ok(())
}

fn write_bytes(
    col: &mut parquet::file::writer::SerializedColumnWriter<'_>,
    values: &[ByteArray],
) -> Result<(), ExportError> {
    col.typed::<ByteArrayType>()
        .write_batch(values, None, None)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpi::{profile::Peer, typical::tests::profile};

    fn profiles() -> Profiles {
        let calls = [
            ("MPI_Init", Peer::None, 0),
            ("MPI_Send", Peer::Rank(1), 5),
            ("MPI_Recv", Peer::AnySource, 7),
            ("MPI_Allreduce", Peer::Op(0x58000003), 9),
        ];
        Profiles {
            version: 1,
            ranks: vec![profile(0, &calls), profile(1, &calls[..2])],
        }
    }

    #[test]
    fn jsonl_has_one_line_per_call() {
        let mut out = Vec::new();
        write_jsonl(&profiles(), &mut out).expect("writes");
        let text = String::from_utf8(out).expect("utf8");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(lines.len(), 6);
        assert_eq!(lines[1]["function"], "MPI_Send");
        assert_eq!(lines[1]["peer_kind"], "rank");
        assert_eq!(lines[1]["peer"], 1);
        assert_eq!(lines[2]["peer_kind"], "any_source");
        assert!(lines[2]["peer"].is_null());
        assert_eq!(lines[3]["peer"], 0x58000003i64);
        assert_eq!(lines[5]["rank"], 1);
    }

    /// The Parquet file reads back with the parquet crate's own reader:
    /// every row, the nullable peer column included.
    #[test]
    fn parquet_reads_back() {
        use parquet::file::reader::{FileReader as _, SerializedFileReader};
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.parquet");
        let file = std::fs::File::create(&path).expect("create");
        write_parquet(&profiles(), file).expect("writes");
        let file = std::fs::File::open(&path).expect("open");
        let reader = SerializedFileReader::new(file).expect("reads");
        let meta = reader.metadata();
        assert_eq!(meta.file_metadata().num_rows(), 6);
        assert_eq!(meta.num_row_groups(), 2);
        let rows: Vec<String> = reader
            .get_row_iter(None)
            .expect("rows")
            .map(|r| r.expect("row").to_string())
            .collect();
        assert!(rows[2].contains("function: \"MPI_Recv\""), "{}", rows[2]);
        assert!(rows[2].contains("peer: null"), "{}", rows[2]);
        assert!(rows[3].contains("peer: 1476395011"), "{}", rows[3]);
    }
}
