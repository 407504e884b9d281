//! The socket protocol of `hookstate serve` (docs/protocol.md): length-prefixed JSON frames, the
//! request a client sends (a verb as the CLI would run it: argv, the environment values the verbs
//! read, the working directory, stdin), and every frame the server answers with.
//!
//! Pure data and byte framing: no socket, no engine. The request decoder is what the fuzz target
//! `serve_request` feeds arbitrary bytes to; it never panics and bounds everything it accepts.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::kernel::limits::STDIN_BYTES_MAX;

/// The protocol version a server speaks, sent in its hello; a client that needs another refuses
/// to use the server (and runs in-process).
pub const PROTOCOL_VERSION: u32 = 1;
/// Bytes of the frame header: the payload's length, big-endian.
pub(crate) const FRAME_HEADER_BYTES: usize = 4;
/// Largest request frame: stdin at its cap, JSON-escaped (a control byte takes six), plus
/// arguments and environment. A larger frame is refused and the connection closed.
pub const REQUEST_BYTES_MAX: usize = 6 * STDIN_BYTES_MAX + ARGS_BYTES_MAX;
/// Bytes of all arguments and environment values of one request: a JSON value argument is at
/// most 64 KiB (`VALUE_BYTES_MAX`); a few of them and the names fit.
pub const ARGS_BYTES_MAX: usize = 256 * 1024;
/// Arguments of one request: far more than any verb takes.
pub const ARGS_COUNT_MAX: usize = 256;
/// Environment entries of one request: the verbs read about fifteen.
pub const ENV_COUNT_MAX: usize = 64;
/// Largest reply frame a client accepts: `log` prints at most `LOG_EVENTS_MAX` events of at most
/// a few KiB each.
pub const REPLY_BYTES_MAX: usize = 1 << 30;

/// What a client sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ClientFrame {
    /// Run a verb.
    Run(Run),
    /// The stdin the server asked for ([`ServerFrame::NeedStdin`]).
    Stdin {
        /// The request it belongs to.
        id: u64,
        /// The bytes, as UTF-8 text.
        stdin: String,
    },
    /// The server's counters (requests, batches, the batch-size distribution).
    Stats {
        /// Echoed in the answer.
        id: u64,
    },
}

/// A verb as the CLI would run it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// Echoed in the answer; the client's to choose.
    pub id: u64,
    /// The arguments after the program name, as the CLI takes them (`["queue", "claim", "q"]`).
    pub argv: Vec<String>,
    /// The environment values the verbs read (`HOOKSTATE_SCOPE`, `HOOKSTATE_SESSION`, `HOME`,
    /// …); absent ones are unset. The server's own environment is never read for a request.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The directory relative paths in the arguments are relative to (absolute).
    #[serde(default)]
    pub cwd: Option<String>,
    /// The caller's process id, recorded in events as the CLI records its own.
    #[serde(default)]
    pub pid: Option<u32>,
    /// The verb's stdin; when absent and the verb reads stdin, the server asks for it.
    #[serde(default)]
    pub stdin: Option<String>,
}

/// What the server sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ServerFrame {
    /// First frame on every connection.
    Hello {
        /// Always `"serve"`.
        hookstate: String,
        /// [`PROTOCOL_VERSION`].
        protocol: u32,
        /// The server's process id.
        pid: u32,
        /// The store it serves.
        db: String,
    },
    /// The verb reads stdin and the request carried none: answer with [`ClientFrame::Stdin`].
    NeedStdin {
        /// The request.
        id: u64,
        /// Always `"stdin"`.
        need: String,
    },
    /// The verb's answer, exactly as the CLI would have printed it and exited.
    Reply(Reply),
    /// The request was not run (or its outcome is unknown): see [`ErrorCode`].
    Error {
        /// The request, when the frame could be read.
        id: Option<u64>,
        /// What happened.
        error: ErrorCode,
        /// One line for a person.
        message: String,
    },
    /// The counters ([`ClientFrame::Stats`]).
    Stats {
        /// The request.
        id: u64,
        /// The counters.
        stats: Stats,
    },
}

/// A verb's answer: stdout, stderr and the exit code, as the CLI prints and exits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// The request.
    pub id: u64,
    /// The exit code.
    pub exit: u8,
    /// What the CLI prints on stdout.
    pub stdout: String,
    /// What the CLI prints on stderr.
    pub stderr: String,
}

/// Why a request got no [`Reply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The frame is not a request (bad JSON, missing fields, a bound broken): nothing was run;
    /// the connection stays usable.
    BadRequest,
    /// The frame is larger than [`REQUEST_BYTES_MAX`]: nothing was run; the connection closes.
    TooLarge,
    /// The verb is not served (help, version, `verify`, `rebuild`, `export`, a store other than
    /// the server's): nothing was run; run it in-process.
    NotServed,
    /// The server is at its connection bound or stopping: nothing was run.
    Busy,
    /// The batch holding the request failed to commit: its effect is unknown (retry with the
    /// same idempotency key); the server stops.
    CommitFailed,
    /// The peer runs as another user: refused before anything was read.
    Refused,
}

/// The server's counters, for `stats` and the bench.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Requests answered.
    pub requests: u64,
    /// Requests run by the writer.
    pub writes: u64,
    /// Batches committed (durable commits with `Durability::Immediate`).
    pub commits: u64,
    /// Batches aborted and run again call by call.
    pub aborted: u64,
    /// Calls run alone, outside a batch (mirrored calls, aborted batches' calls).
    pub solo: u64,
    /// Batches by size: `[1, 2-3, 4-7, 8-15, 16-31, 32-63, 64+]`.
    pub batch_sizes: [u64; 7],
    /// Largest batch.
    pub batch_max: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Connections refused (other uid, at the connection bound).
    pub refused: u64,
    /// Connection threads started: a connection that finds a thread waiting (one whose
    /// connection closed) starts none.
    #[serde(default)]
    pub threads: u64,
}

impl Stats {
    /// Counts one batch of `size` calls.
    pub fn count_batch(&mut self, size: usize) {
        let bucket = match size {
            0 | 1 => 0,
            2..=3 => 1,
            4..=7 => 2,
            8..=15 => 3,
            16..=31 => 4,
            32..=63 => 5,
            _ => 6,
        };
        self.batch_sizes[bucket] += 1;
        self.batch_max = self.batch_max.max(size as u64);
    }
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the connection before a frame began.
    #[error("the connection closed")]
    Closed,
    /// The frame's length is over the bound.
    #[error("a frame of {len} bytes is over the limit of {max} bytes")]
    TooLarge {
        /// The announced length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// Reading failed (a deadline, a reset, a frame cut short).
    #[error("reading a frame failed")]
    Io(#[source] std::io::Error),
}

/// Reads one frame of at most `max` bytes.
///
/// # Errors
/// [`FrameError::Closed`] at a clean end of stream before the header, [`FrameError::TooLarge`]
/// (nothing of the payload read), [`FrameError::Io`].
pub fn read_frame(reader: &mut impl Read, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    let mut got = 0;
    while got < header.len() {
        match reader.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    let len = usize::try_from(u32::from_be_bytes(header)).unwrap_or(usize::MAX);
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let mut payload = vec![0u8; len];
    reader.read_exact(&mut payload).map_err(FrameError::Io)?;
    Ok(payload)
}

/// Writes `payload` as one frame.
///
/// # Errors
/// IO errors; [`std::io::ErrorKind::InvalidInput`] for a payload over 4 GiB.
pub fn write_frame(writer: &mut impl Write, payload: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(payload);
    writer.write_all(&frame)?;
    writer.flush()
}

/// Encodes a frame's payload.
#[must_use]
pub fn encode<T: Serialize>(frame: &T) -> Vec<u8> {
    // Our frames are plain structs of strings, numbers and maps with string keys: serialising
    // them cannot fail.
    serde_json::to_vec(frame).unwrap_or_default()
}

/// Decodes and checks a request frame's payload: JSON of a [`ClientFrame`] within the bounds
/// of arguments and environment.
///
/// # Errors
/// One line saying what is wrong (the text of a [`ErrorCode::BadRequest`] answer).
pub fn decode_request(payload: &[u8]) -> Result<ClientFrame, String> {
    if payload.len() > REQUEST_BYTES_MAX {
        return Err(format!("a request of {} bytes is over the limit", payload.len()));
    }
    let frame: ClientFrame =
        serde_json::from_slice(payload).map_err(|e| format!("not a request: {e}"))?;
    if let ClientFrame::Run(run) = &frame {
        check_run(run)?;
    }
    Ok(frame)
}

fn check_run(run: &Run) -> Result<(), String> {
    if run.argv.len() > ARGS_COUNT_MAX {
        return Err(format!("{} arguments, the limit is {ARGS_COUNT_MAX}", run.argv.len()));
    }
    if run.env.len() > ENV_COUNT_MAX {
        return Err(format!("{} environment entries, the limit is {ENV_COUNT_MAX}", run.env.len()));
    }
    let bytes: usize = run.argv.iter().map(String::len).sum::<usize>()
        + run.env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
        + run.cwd.as_ref().map_or(0, String::len);
    if bytes > ARGS_BYTES_MAX {
        return Err(format!("arguments of {bytes} bytes, the limit is {ARGS_BYTES_MAX}"));
    }
    if run.argv.iter().chain(run.env.values()).any(|a| a.contains('\0')) {
        return Err("an argument or environment value holds a NUL byte".into());
    }
    if run.env.keys().any(|k| k.is_empty() || k.contains(['=', '\0'])) {
        return Err("an environment name is empty or holds '=' or NUL".into());
    }
    match &run.cwd {
        Some(cwd) if !cwd.starts_with('/') || cwd.contains('\0') => {
            Err("cwd must be an absolute path".into())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_request_round_trips() {
        let run = Run {
            id: 7,
            argv: vec!["queue".into(), "claim".into(), "q".into()],
            env: BTreeMap::from([("HOOKSTATE_SCOPE".into(), "s".into())]),
            cwd: Some("/tmp".into()),
            pid: Some(42),
            stdin: None,
        };
        let bytes = encode(&ClientFrame::Run(run.clone()));
        assert_eq!(decode_request(&bytes).unwrap(), ClientFrame::Run(run));
    }

    #[test]
    fn requests_over_a_bound_are_refused() {
        let many = serde_json::json!({"op": "run", "id": 1, "argv": vec!["x"; ARGS_COUNT_MAX + 1]});
        assert!(decode_request(many.to_string().as_bytes()).unwrap_err().contains("arguments"));
        let relative = serde_json::json!({"op": "run", "id": 1, "argv": [], "cwd": "here"});
        assert!(decode_request(relative.to_string().as_bytes()).unwrap_err().contains("cwd"));
        let nul = serde_json::json!({"op": "run", "id": 1, "argv": ["a\u{0}b"]});
        assert!(decode_request(nul.to_string().as_bytes()).unwrap_err().contains("NUL"));
        assert!(decode_request(b"{\"op\":\"fly\"}").unwrap_err().starts_with("not a request"));
        assert!(decode_request(b"\xff").unwrap_err().starts_with("not a request"));
    }

    #[test]
    fn frames_are_length_prefixed_and_bounded() {
        let mut wire = Vec::new();
        write_frame(&mut wire, b"{}").unwrap();
        assert_eq!(wire, b"\0\0\0\x02{}");
        assert_eq!(read_frame(&mut wire.as_slice(), 16).unwrap(), b"{}");
        assert!(matches!(read_frame(&mut wire.as_slice(), 1), Err(FrameError::TooLarge { .. })));
        assert!(matches!(read_frame(&mut &b""[..], 16), Err(FrameError::Closed)));
        assert!(matches!(read_frame(&mut &b"\0\0"[..], 16), Err(FrameError::Io(_))));
        assert!(matches!(read_frame(&mut &b"\0\0\0\x05{}"[..], 16), Err(FrameError::Io(_))));
    }

    #[test]
    fn server_frames_decode_by_shape() {
        let hello = ServerFrame::Hello {
            hookstate: "serve".into(),
            protocol: PROTOCOL_VERSION,
            pid: 1,
            db: "/s.redb".into(),
        };
        let reply =
            ServerFrame::Reply(Reply { id: 3, exit: 1, stdout: "x\n".into(), ..Reply::default() });
        let need = ServerFrame::NeedStdin { id: 3, need: "stdin".into() };
        let error =
            ServerFrame::Error { id: None, error: ErrorCode::BadRequest, message: "m".into() };
        for frame in [hello, reply, need, error] {
            let back: ServerFrame = serde_json::from_slice(&encode(&frame)).unwrap();
            assert_eq!(back, frame);
        }
    }
}
