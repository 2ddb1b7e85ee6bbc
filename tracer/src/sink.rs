//! Writes records and metadata to a capture file: records are batched into
//! chunks of about `chunk_bytes`, and every chunk goes to the kernel as soon
//! as it is complete, so a killed recorder loses at most the open batch.

use std::{
    fs::{File, OpenOptions},
    io::BufWriter,
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

use tracer_common::{
    capture::{CaptureError, CaptureHeader, CaptureWriter, Meta},
    record::Header,
};

/// Errors writing a capture.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The file is there already.
    #[error("capture file {path} exists (give --force to replace it)")]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// The file could not be created.
    #[error("cannot create capture file {path}")]
    Create {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Writing failed.
    #[error("writing capture file {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: CaptureError,
    },
}

/// Number of record kinds counted (index = kind): room for kinds not yet
/// defined, so the count of records stays right when a kind is added
/// (kinds up to 63; `Sink::push` counts any larger one in the last slot).
pub const KINDS: usize = 64;

/// A capture file being written.
#[derive(Debug)]
pub struct Sink {
    path: PathBuf,
    writer: CaptureWriter<BufWriter<File>>,
    pending: Vec<u8>,
    chunk_bytes: usize,
    first_ns: u64,
    last_ns: u64,
    /// Records written, by kind.
    pub counts: [u64; KINDS],
    /// Bytes of metadata chunks written.
    meta_bytes: u64,
}

/// A new, empty output file (see [`Sink::reserve`]).
#[derive(Debug)]
pub struct Reserved {
    path: PathBuf,
    file: File,
}

impl Sink {
    /// Creates `path` (a new file, mode 0600) and writes the header. An
    /// existing file, or a symbolic link, at `path` is an error, unless
    /// `overwrite`: then it is removed first (a link itself, never what it
    /// points to) and a new file created in its place. Truncating the old
    /// file instead kept its mode and followed a link planted there.
    pub fn create(
        path: &Path,
        header: &CaptureHeader,
        chunk_bytes: usize,
        overwrite: bool,
    ) -> Result<Self, SinkError> {
        Self::start(Self::reserve(path, overwrite)?, header, chunk_bytes)
    }

    /// Creates `path` as [`Sink::create`] does, without writing to it: a
    /// session checks its output before attaching, and writes the header
    /// (which says what the kernel let it record) once attached.
    pub fn reserve(path: &Path, overwrite: bool) -> Result<Reserved, SinkError> {
        let create_err = |source| SinkError::Create {
            path: path.to_path_buf(),
            source,
        };
        if overwrite
            && let Ok(meta) = std::fs::symlink_metadata(path)
            && !meta.is_dir()
        {
            std::fs::remove_file(path).map_err(create_err)?;
        }
        // O_EXCL: fails on anything at the path, a dangling link included;
        // O_NOFOLLOW says the same for the last component again.
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|source| {
                if source.kind() == std::io::ErrorKind::AlreadyExists {
                    SinkError::Exists {
                        path: path.to_path_buf(),
                    }
                } else {
                    create_err(source)
                }
            })?;
        Ok(Reserved {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Writes the header into a file [`Sink::reserve`] created.
    pub fn start(
        reserved: Reserved,
        header: &CaptureHeader,
        chunk_bytes: usize,
    ) -> Result<Self, SinkError> {
        let Reserved { path, file } = reserved;
        let path = path.as_path();
        let writer = CaptureWriter::new(BufWriter::with_capacity(1 << 20, file), header).map_err(
            |source| SinkError::Write {
                path: path.to_path_buf(),
                source,
            },
        )?;
        let mut sink = Self {
            path: path.to_path_buf(),
            writer,
            pending: Vec::with_capacity(chunk_bytes + 4096),
            chunk_bytes,
            first_ns: 0,
            last_ns: 0,
            counts: [0; KINDS],
            meta_bytes: 0,
        };
        sink.flush()?;
        Ok(sink)
    }

    fn err(&self) -> impl FnOnce(CaptureError) -> SinkError + use<> {
        let path = self.path.clone();
        move |source| SinkError::Write { path, source }
    }

    /// Appends one raw record (as delivered by the ring buffer).
    #[inline]
    pub fn push(&mut self, record: &[u8], header: &Header) -> Result<(), SinkError> {
        self.pending.extend_from_slice(record);
        if let Some(count) = self.counts.get_mut(usize::from(header.kind).min(KINDS - 1)) {
            *count += 1;
        }
        if self.first_ns == 0 {
            self.first_ns = header.ts_ns;
        }
        self.last_ns = self.last_ns.max(header.ts_ns);
        if self.pending.len() >= self.chunk_bytes {
            self.write_pending()?;
        }
        Ok(())
    }

    /// Appends whole records kept from earlier (not counted again).
    pub fn push_block(&mut self, records: &[u8]) -> Result<(), SinkError> {
        self.pending.extend_from_slice(records);
        if self.pending.len() >= self.chunk_bytes {
            self.write_pending()?;
        }
        Ok(())
    }

    fn write_pending(&mut self) -> Result<(), SinkError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let err = self.err();
        self.writer.write_records(&self.pending).map_err(err)?;
        self.pending.clear();
        Ok(())
    }

    /// Writes a metadata item (after the records pushed before it).
    pub fn meta(&mut self, meta: &Meta) -> Result<(), SinkError> {
        self.write_pending()?;
        let err = self.err();
        let before = self.writer.bytes_written();
        self.writer.write_meta(meta).map_err(err)?;
        self.meta_bytes += self.writer.bytes_written() - before;
        Ok(())
    }

    /// Bytes of metadata (process snapshots, symbol tables, counters)
    /// written into this file.
    pub fn meta_bytes(&self) -> u64 {
        self.meta_bytes
    }

    /// Writes the open batch and hands everything to the kernel.
    pub fn flush(&mut self) -> Result<(), SinkError> {
        self.write_pending()?;
        let err = self.err();
        self.writer.flush().map_err(err)
    }

    /// Records written so far (all kinds).
    pub fn records(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.writer.bytes_written() + self.pending.len() as u64
    }

    /// Time of the first record pushed, `CLOCK_MONOTONIC` ns (0: none yet).
    pub fn first_ns(&self) -> u64 {
        self.first_ns
    }

    /// Time of the latest record pushed, `CLOCK_MONOTONIC` ns.
    pub fn last_ns(&self) -> u64 {
        self.last_ns
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
