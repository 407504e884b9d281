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
/// payload that may be empty); a terminal reads as empty rather than waiting for one.
pub(crate) fn read_stdin_text() -> Result<String, CliError> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        return Ok(String::new());
    }
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let limit = STDIN_BYTES_MAX as u64 + 1;
        let result = std::io::stdin().lock().take(limit).read_to_end(&mut bytes).map(|_| bytes);
        let _ = tx.send(result);
    });
    let bytes = match rx.recv_timeout(Duration::from_millis(STDIN_DEADLINE_MS)) {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(err)) => return Err(CliError::Io { op: "read stdin".into(), source: err }),
        Err(_) => {
            return Err(CliError::Invalid(format!(
                "stdin was not closed within {STDIN_DEADLINE_MS} ms"
            )))
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
