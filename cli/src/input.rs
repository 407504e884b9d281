//! Stdin, read with a size cap and a deadline, so a hook never hangs on an open pipe and a flood
//! is cut off at the cap instead of read whole.
//!
//! Does not parse; callers validate what they get.

use std::io::Read;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use hookstate_engine::limits::STDIN_BYTES_MAX;

use crate::exit::CliError;

/// How long a call waits for stdin to reach end of file: hook payloads arrive at once.
pub(crate) const STDIN_DEADLINE_MS: u64 = 5_000;

/// Reads all of stdin as UTF-8, at most [`STDIN_BYTES_MAX`] bytes, within [`STDIN_DEADLINE_MS`];
/// an empty stdin is an error.
pub(crate) fn read_stdin() -> Result<String, CliError> {
    let text = read_stdin_text()?;
    if text.is_empty() {
        return Err(CliError::Invalid("stdin is empty, expected one JSON value".into()));
    }
    Ok(text)
}

/// Reads stdin as [`read_stdin`] does, empty allowed (upstream's scripts read a line or a
/// payload that may be empty); a terminal reads as empty rather than waiting for one. A served
/// call reads the stdin its client sent.
pub(crate) fn read_stdin_text() -> Result<String, CliError> {
    let bytes = match crate::served::stdin() {
        Some(given) => given?,
        None => {
            use std::io::IsTerminal;
            if std::io::stdin().is_terminal() {
                return Ok(String::new());
            }
            read_stdin_bytes()?
        }
    };
    if bytes.len() > STDIN_BYTES_MAX {
        return Err(CliError::Invalid(format!(
            "stdin is over the limit of {STDIN_BYTES_MAX} bytes"
        )));
    }
    crate::request::record_stdin(&bytes);
    String::from_utf8(bytes).map_err(|_| CliError::Invalid("stdin is not valid UTF-8".into()))
}

/// What reading this process's stdin gave (kept: a call forwarded to a server may have read it
/// before the call ran here).
enum StdinRead {
    Bytes(Vec<u8>),
    Failed(String),
    TimedOut,
}

static STDIN: std::sync::OnceLock<StdinRead> = std::sync::OnceLock::new();

/// This process's stdin, at most one byte over [`STDIN_BYTES_MAX`], within
/// [`STDIN_DEADLINE_MS`]; read once, then the same answer every time.
pub(crate) fn read_stdin_bytes() -> Result<Vec<u8>, CliError> {
    let read = STDIN.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut bytes = Vec::new();
            let limit = STDIN_BYTES_MAX as u64 + 1;
            let result = std::io::stdin().lock().take(limit).read_to_end(&mut bytes).map(|_| bytes);
            let _ = tx.send(result);
        });
        match rx.recv_timeout(Duration::from_millis(STDIN_DEADLINE_MS)) {
            Ok(Ok(bytes)) => StdinRead::Bytes(bytes),
            Ok(Err(err)) => StdinRead::Failed(err.to_string()),
            Err(_) => StdinRead::TimedOut,
        }
    });
    match read {
        StdinRead::Bytes(bytes) => Ok(bytes.clone()),
        // The caller's stdin (a directory, a closed descriptor): bad input, exit 3.
        StdinRead::Failed(text) => Err(CliError::Invalid(format!("stdin cannot be read: {text}"))),
        StdinRead::TimedOut => {
            Err(CliError::Invalid(format!("stdin was not closed within {STDIN_DEADLINE_MS} ms")))
        }
    }
}
