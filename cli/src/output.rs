//! Printing: one JSON object (or `key=value` text) on stdout, one escaped line on stderr.
//!
//! Does not decide anything.

use std::error::Error as _;
use std::io::Write;

use serde_json::Value;

use crate::args::Format;
use crate::exit::CliError;

/// Prints a result in the chosen format, followed by a newline.
pub(crate) fn print(format: Format, value: &Value) -> Result<(), CliError> {
    let text = match format {
        Format::Json => value.to_string(),
        Format::Text => to_text(value),
        Format::Verdict => match value.get("verdict").and_then(Value::as_str) {
            Some(verdict) => one_line(verdict),
            None => value.to_string(),
        },
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|source| CliError::Io { op: "write stdout".into(), source })
}

/// Prints one line as it is (its control characters were already replaced).
pub(crate) fn print_raw(line: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|source| CliError::Io { op: "write stdout".into(), source })
}

/// Top-level fields as `key=value`, strings bare, everything else as compact JSON.
pub(crate) fn to_text(value: &Value) -> String {
    match value {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={}", one_line(s)),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// Escapes control characters so that a message stays on one line and cannot drive a terminal.
pub(crate) fn one_line(text: &str) -> String {
    text.chars()
        .flat_map(|c| if c.is_control() { c.escape_default().collect::<Vec<_>>() } else { vec![c] })
        .collect()
}

/// The error and its causes on one line.
pub(crate) fn error_line(err: &CliError) -> String {
    let mut line = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        line.push_str(": ");
        line.push_str(&cause.to_string());
        source = cause.source();
    }
    one_line(&line)
}
