//! The pipe between `tracer agent` (root) and its live analysis process
//! (`analyzer live`, started by the agent as an unprivileged user): the
//! agent writes requests on the process's standard input, the process
//! answers each with one line on its standard output.
//!
//! ```text
//! request := JSON line (a [`Request`]) payload*
//! answer  := JSON line (an [`Answer`])
//! ```
//! A request's payloads are raw bytes whose lengths the request gives, in
//! order: the model and thresholds files for [`Request::Setup`], a window
//! capture for [`Request::Window`]. Both sides bound what they read
//! ([`MAX_LINE`], and the payload limit the reader is given): the process
//! is there to parse input an attacker may have shaped, as nobody, and the
//! agent must not trust what that process says either.

use std::io::{self, BufRead, Read, Write};

use serde::{Deserialize, Serialize};

/// Version of the requests and answers.
pub const LIVE_VERSION: u32 = 1;

/// Longest request or answer line, bytes (an answer carries a peers report
/// of at most a few windows).
pub const MAX_LINE: usize = 16 << 20;

/// Errors reading the pipe.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The pipe failed.
    #[error("live analysis pipe")]
    Io(#[from] io::Error),
    /// A line is longer than [`MAX_LINE`].
    #[error("a line of more than {MAX_LINE} bytes")]
    LineTooLong,
    /// A line is not a request or answer of this version.
    #[error("not a live analysis message: {0}")]
    Parse(#[from] serde_json::Error),
    /// Another version.
    #[error("live analysis message version {found}, this build speaks version {LIVE_VERSION}")]
    Version {
        /// The version found.
        found: u32,
    },
    /// A payload is larger than the reader accepts.
    #[error("a payload of {bytes} bytes is larger than the {limit} bytes allowed")]
    TooLarge {
        /// Its announced size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The pipe ended inside a payload.
    #[error("the pipe ended inside a payload")]
    Truncated,
}

/// How units are scored (papers 000 and 001).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scoring {
    /// Node scores (000, eq. 1–2).
    #[default]
    Nodes,
    /// Edge scores (001).
    Edges,
}

/// A file handed over as a payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// Its path on the agent's side, for messages.
    pub name: String,
    /// Its length: the payload's.
    pub bytes: u64,
}

/// What the agent asks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// Load what to evaluate with; the model's then the thresholds'
    /// payloads follow. Answered with no findings, or an error.
    Setup {
        /// [`LIVE_VERSION`].
        version: u32,
        /// A model learned with `analyzer model learn`.
        model: Option<FileRef>,
        /// How its units are scored.
        scoring: Scoring,
        /// Units scoring at least this are findings.
        alert_score: f64,
        /// Thresholds trained with `analyzer peers train`.
        thresholds: Option<FileRef>,
    },
    /// Evaluate the window capture of `bytes` bytes that follows, joined
    /// from `since_ns` to `now_ns` (`CLOCK_MONOTONIC`).
    Window {
        /// [`LIVE_VERSION`].
        version: u32,
        /// Start of the window.
        since_ns: u64,
        /// End of the window.
        now_ns: u64,
        /// The host, for findings.
        host: String,
        /// The capture's length.
        bytes: u64,
    },
}

impl Request {
    /// The lengths of the payloads that follow, in order.
    pub fn payloads(&self) -> Vec<u64> {
        match self {
            Self::Setup {
                model, thresholds, ..
            } => [model, thresholds]
                .into_iter()
                .flatten()
                .map(|f| f.bytes)
                .collect(),
            Self::Window { bytes, .. } => vec![*bytes],
        }
    }

    fn version(&self) -> u32 {
        match self {
            Self::Setup { version, .. } | Self::Window { version, .. } => *version,
        }
    }
}

/// Something the analysis found, for the agent to raise as an alert.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// `unit`, `process` or `server` (see the agent's alerts).
    pub kind: String,
    /// One line for people.
    pub summary: String,
    /// The evidence.
    pub detail: serde_json::Value,
}

/// The process's answer to one request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// [`LIVE_VERSION`].
    pub version: u32,
    /// Why the request failed (a window that does not decode, a model that
    /// does not load).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What to raise, most important first.
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// Units scored in this window.
    #[serde(default)]
    pub units_scored: u64,
    /// The highest unit score of this window.
    #[serde(default)]
    pub max_score: Option<f64>,
    /// Peer windows compared in this window.
    #[serde(default)]
    pub peer_windows: u64,
    /// Time the evaluation took (decode and evaluate), ms.
    #[serde(default)]
    pub ms: f64,
    /// The peers report of this window, when thresholds are loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers: Option<serde_json::Value>,
}

/// Writes `request` and its payloads (whose lengths it gives).
pub fn write_request(
    out: &mut impl Write,
    request: &Request,
    payloads: &[&[u8]],
) -> io::Result<()> {
    let mut line = serde_json::to_vec(request).map_err(io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    for p in payloads {
        out.write_all(p)?;
    }
    out.flush()
}

/// A request and its payloads.
pub type Received = (Request, Vec<Vec<u8>>);

/// Reads one request and its payloads, each at most `max_payload` bytes;
/// `Ok(None)` when the pipe is closed between requests.
pub fn read_request(
    input: &mut impl BufRead,
    max_payload: u64,
) -> Result<Option<Received>, LiveError> {
    let Some(line) = read_line(input)? else {
        return Ok(None);
    };
    let request: Request = serde_json::from_slice(&line)?;
    if request.version() != LIVE_VERSION {
        return Err(LiveError::Version {
            found: request.version(),
        });
    }
    let mut payloads = Vec::new();
    for bytes in request.payloads() {
        if bytes > max_payload {
            return Err(LiveError::TooLarge {
                bytes,
                limit: max_payload,
            });
        }
        // Grown with the bytes that arrive, not reserved from the size.
        let mut payload = Vec::with_capacity(bytes.min(1 << 20) as usize);
        input.take(bytes).read_to_end(&mut payload)?;
        if (payload.len() as u64) < bytes {
            return Err(LiveError::Truncated);
        }
        payloads.push(payload);
    }
    Ok(Some((request, payloads)))
}

/// Writes one answer line.
pub fn write_answer(out: &mut impl Write, answer: &Answer) -> io::Result<()> {
    let mut line = serde_json::to_vec(answer).map_err(io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

/// Parses one answer line (without its newline).
pub fn parse_answer(line: &[u8]) -> Result<Answer, LiveError> {
    if line.len() > MAX_LINE {
        return Err(LiveError::LineTooLong);
    }
    let answer: Answer = serde_json::from_slice(line)?;
    if answer.version != LIVE_VERSION {
        return Err(LiveError::Version {
            found: answer.version,
        });
    }
    Ok(answer)
}

/// One line without its newline, at most [`MAX_LINE`] bytes; `None` at
/// the end of the input before any byte.
fn read_line(input: &mut impl BufRead) -> Result<Option<Vec<u8>>, LiveError> {
    let mut line = Vec::new();
    let n = input
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
    } else if line.len() > MAX_LINE {
        return Err(LiveError::LineTooLong);
    } else {
        return Err(LiveError::Truncated);
    }
    Ok(Some(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(bytes: u64) -> Request {
        Request::Window {
            version: LIVE_VERSION,
            since_ns: 1,
            now_ns: 2,
            host: "h".into(),
            bytes,
        }
    }

    #[test]
    fn requests_and_payloads_round_trip() {
        let setup = Request::Setup {
            version: LIVE_VERSION,
            model: Some(FileRef {
                name: "m.json".into(),
                bytes: 3,
            }),
            scoring: Scoring::Edges,
            alert_score: 0.9,
            thresholds: Some(FileRef {
                name: "t.json".into(),
                bytes: 2,
            }),
        };
        let mut pipe = Vec::new();
        write_request(&mut pipe, &setup, &[b"abc", b"de"]).expect("write");
        write_request(&mut pipe, &window(4), &[b"wxyz"]).expect("write");
        let mut input = pipe.as_slice();
        let (r, p) = read_request(&mut input, 10).expect("read").expect("one");
        assert_eq!((r, p), (setup, vec![b"abc".to_vec(), b"de".to_vec()]));
        let (r, p) = read_request(&mut input, 10).expect("read").expect("two");
        assert_eq!((r, p), (window(4), vec![b"wxyz".to_vec()]));
        assert!(read_request(&mut input, 10).expect("end").is_none());
    }

    #[test]
    fn sizes_and_versions_are_checked_before_reading() {
        let mut pipe = Vec::new();
        write_request(&mut pipe, &window(1 << 40), &[]).expect("write");
        assert!(matches!(
            read_request(&mut pipe.as_slice(), 1 << 20),
            Err(LiveError::TooLarge { .. })
        ));
        let mut pipe = Vec::new();
        write_request(&mut pipe, &window(10), &[b"short"]).expect("write");
        assert!(matches!(
            read_request(&mut pipe.as_slice(), 1 << 20),
            Err(LiveError::Truncated)
        ));
        let line =
            br#"{"request":"window","version":7,"since_ns":0,"now_ns":0,"host":"","bytes":0}"#;
        let mut pipe = line.to_vec();
        pipe.push(b'\n');
        assert!(matches!(
            read_request(&mut pipe.as_slice(), 1 << 20),
            Err(LiveError::Version { found: 7 })
        ));
        let long = vec![b'x'; MAX_LINE + 10];
        assert!(matches!(
            read_request(&mut long.as_slice(), 1 << 20),
            Err(LiveError::LineTooLong)
        ));
        assert!(matches!(
            parse_answer(br#"{"version":2}"#),
            Err(LiveError::Version { found: 2 })
        ));
    }
}
