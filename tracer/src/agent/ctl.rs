//! The agent's control socket: a local Unix socket, root only (mode 0600 in
//! a 0700 directory, and the peer's uid is checked too), one JSON request
//! line and one JSON response line per connection. `tracer ctl` is the
//! client.

use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    os::unix::fs::{DirBuilderExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncBufReadExt as _, AsyncWriteExt as _},
    net::{UnixListener, UnixStream},
    sync::{mpsc, oneshot},
};

/// Version of the request and response format.
pub const CTL_VERSION: u32 = 1;

/// Errors of the control socket.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Another agent answers on the socket.
    #[error("another agent is already listening on {path}")]
    InUse {
        /// The socket.
        path: PathBuf,
    },
    /// The socket could not be created.
    #[error("cannot create the control socket {path}")]
    Bind {
        /// The socket.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No agent listens there.
    #[error(
        "no agent is listening on {path} (is `tracer agent` running? is this its `agent.socket`?)"
    )]
    NoAgent {
        /// The socket.
        path: PathBuf,
    },
    /// Not allowed.
    #[error("permission denied on {path}: the control socket is root's; run tracer ctl as root")]
    Denied {
        /// The socket.
        path: PathBuf,
    },
    /// Talking to the agent failed.
    #[error("talking to the agent on {path}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The agent's answer is not a response.
    #[error("the agent's answer is not a response: {0}")]
    BadResponse(String),
}

/// What a client asks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Request {
    /// Health, counters, files, shed load.
    Status,
    /// Freeze the recent past into a standalone capture file.
    Snapshot {
        /// How much of the past, seconds (default: the configured
        /// `analysis.snapshot_window`).
        window_s: Option<f64>,
        /// Why (goes into the file name and its end marker).
        reason: Option<String>,
    },
    /// Read the configuration file again; an invalid one is refused and the
    /// running one kept.
    Reload,
    /// The per-window features and verdicts of the last live evaluation.
    Features,
}

/// The agent's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// [`CTL_VERSION`].
    pub version: u32,
    /// Whether the request was carried out.
    pub ok: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The result.
    #[serde(default)]
    pub result: serde_json::Value,
}

impl Response {
    /// A success carrying `result`.
    pub fn ok(result: impl Serialize) -> Self {
        Self {
            version: CTL_VERSION,
            ok: true,
            error: None,
            result: serde_json::to_value(result).unwrap_or(serde_json::Value::Null),
        }
    }

    /// A failure saying why.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            version: CTL_VERSION,
            ok: false,
            error: Some(message.into()),
            result: serde_json::Value::Null,
        }
    }
}

/// A request waiting for the agent's answer.
pub type Pending = (Request, oneshot::Sender<Response>);

/// The listening socket.
pub struct CtlServer {
    listener: UnixListener,
    path: PathBuf,
}

impl CtlServer {
    /// Creates the socket at `path` (its directory mode 0700 when created
    /// here, the socket 0600), replacing a stale one.
    pub fn bind(path: &Path) -> Result<Self, CtlError> {
        let bind_err = |source| CtlError::Bind {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
            && !dir.exists()
        {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(bind_err)?;
        }
        if path.exists() {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(CtlError::InUse {
                    path: path.to_path_buf(),
                });
            }
            fs::remove_file(path).map_err(bind_err)?;
        }
        // Create it private: no moment where others could connect.
        // SAFETY: umask has no preconditions; restored right after.
        let old = unsafe { libc::umask(0o177) };
        let listener = UnixListener::bind(path);
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let listener = listener.map_err(bind_err)?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(bind_err)?;
        Ok(Self {
            listener,
            path: path.to_path_buf(),
        })
    }

    /// Accepts one connection and serves it on its own task: reads the
    /// request, hands it to the agent through `to_agent`, writes the answer.
    /// A peer that is not root gets a refusal and nothing else.
    pub async fn accept(&self, to_agent: mpsc::Sender<Pending>) -> std::io::Result<()> {
        let (stream, _) = self.listener.accept().await?;
        tokio::spawn(serve(stream, to_agent));
        Ok(())
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

async fn serve(stream: UnixStream, to_agent: mpsc::Sender<Pending>) {
    let uid = stream.peer_cred().map(|c| c.uid()).ok();
    let (read, mut write) = stream.into_split();
    let response = if uid != Some(0) {
        Response::error("only root may control the agent")
    } else {
        let mut line = String::new();
        let mut reader = tokio::io::BufReader::new(read);
        match tokio::time::timeout(Duration::from_secs(10), reader.read_line(&mut line)).await {
            Ok(Ok(_)) => match serde_json::from_str::<Request>(&line) {
                Ok(req) => {
                    let (tx, rx) = oneshot::channel();
                    if to_agent.send((req, tx)).await.is_err() {
                        Response::error("the agent is stopping")
                    } else {
                        rx.await
                            .unwrap_or_else(|_| Response::error("the agent is stopping"))
                    }
                }
                Err(e) => Response::error(format!("not a request: {e}")),
            },
            Ok(Err(e)) => Response::error(format!("reading the request: {e}")),
            Err(_) => Response::error("no request within 10 s"),
        }
    };
    let mut text = serde_json::to_string(&response).unwrap_or_default();
    text.push('\n');
    let _ = write.write_all(text.as_bytes()).await;
}

/// Sends `request` to the agent at `socket` and returns its answer
/// (blocking; `tracer ctl`).
pub fn request(socket: &Path, request: &Request, timeout: Duration) -> Result<Response, CtlError> {
    let path = socket.to_path_buf();
    let stream = std::os::unix::net::UnixStream::connect(socket).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => CtlError::Denied { path: path.clone() },
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            CtlError::NoAgent { path: path.clone() }
        }
        _ => CtlError::Io {
            path: path.clone(),
            source: e,
        },
    })?;
    let io = |source| CtlError::Io {
        path: path.clone(),
        source,
    };
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    let mut text =
        serde_json::to_string(request).map_err(|e| CtlError::BadResponse(e.to_string()))?;
    text.push('\n');
    // An agent that refuses the peer answers without reading the request
    // and closes: the write may fail (EPIPE) while its answer waits unread.
    let written = (&stream).write_all(text.as_bytes());
    let mut line = String::new();
    let read = BufReader::new(&stream).read_line(&mut line);
    if line.is_empty() {
        written.map_err(io)?;
        read.map_err(io)?;
    }
    serde_json::from_str(&line).map_err(|e| CtlError::BadResponse(format!("{e}: {line:?}")))
}
