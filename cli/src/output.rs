//! Printing: one JSON object (or readable text) on stdout, one escaped line on stderr.
//!
//! Does not decide anything.

use std::cell::RefCell;
use std::error::Error as _;
use std::io::Write;

use serde_json::Value;

use crate::args::Format;
use crate::exit::CliError;

thread_local! {
    /// Why the store's anchors cannot be trusted, when this call found that they disagree with
    /// the log, and whether the warning was printed (per call: a server runs many).
    static ANCHOR_MISMATCH: RefCell<(Option<String>, bool)> = const { RefCell::new((None, false)) };
}

thread_local! {
    /// The store a write opened, whose anchors are checked when the call first prints, unless
    /// it committed by then ([`mark_anchor_later`]).
    static CHECK_ANCHOR: RefCell<Option<std::sync::Weak<hookstate_engine::Engine>>> =
        const { RefCell::new(None) };
}

/// Forgets the marks of an earlier call on this thread (a server runs one call after another).
pub(crate) fn start_call() {
    ANCHOR_MISMATCH.with(|mark| *mark.borrow_mut() = (None, false));
    CHECK_ANCHOR.with(|check| *check.borrow_mut() = None);
}

/// Checks the anchors of `engine`, a store this call opened to write, when the call first
/// prints a result and only if it has committed nothing: a commit passed the same check under
/// the write lock, so a write that wrote prints no mark, as when the check ran at open, without
/// reading the anchors and a snapshot a second time (issue 12).
pub(crate) fn mark_anchor_later(engine: &std::sync::Arc<hookstate_engine::Engine>) {
    CHECK_ANCHOR.with(|check| *check.borrow_mut() = Some(std::sync::Arc::downgrade(engine)));
}

/// Runs the check [`mark_anchor_later`] left, once.
fn check_anchor_now() -> Result<(), CliError> {
    let Some(engine) = CHECK_ANCHOR.with(|check| check.borrow_mut().take()) else {
        return Ok(());
    };
    let Some(engine) = engine.upgrade().filter(|engine| !engine.ops().has_committed()) else {
        return Ok(());
    };
    if let Some(problem) = engine.location()?.anchor_problem {
        mark_anchor(&problem.to_string());
    }
    Ok(())
}

/// Marks this call's results: every JSON object it prints carries an `anchor_mismatch` field,
/// and the first one printed is preceded by one warning line on stderr (a write that is refused
/// prints only its error). The first reason is kept.
pub(crate) fn mark_anchor(why: &str) {
    ANCHOR_MISMATCH.with(|mark| {
        mark.borrow_mut().0.get_or_insert_with(|| why.to_owned());
    });
}

/// Where this call's stdout goes: the process's, or the answer a server is building (`served`).
pub(crate) fn stdout() -> crate::served::Out {
    crate::served::Out::stdout()
}

/// Where this call's stderr goes.
pub(crate) fn stderr() -> crate::served::Out {
    crate::served::Out::stderr()
}

/// The one line a panic prints (then the process exits 5, or a server answers exit 5).
pub(crate) fn panic_line(info: &std::panic::PanicHookInfo<'_>) -> String {
    let message = info
        .payload()
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| info.payload().downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    let location = info
        .location()
        .map(|l| format!(" at {}:{}:{}", crate_relative(l.file()), l.line(), l.column()))
        .unwrap_or_default();
    one_line(&format!(
        "internal error: {message}{location}; the store may be damaged, run `hookstate verify`"
    ))
}

/// A dependency's source path from its crate's directory on (`redb-4.6.0/src/…`), not from the
/// build machine's registry (`/root/.cargo/registry/src/index…/redb-4.6.0/src/…`).
fn crate_relative(file: &str) -> &str {
    const REGISTRY: &str = "/registry/src/";
    match file.find(REGISTRY) {
        Some(at) => {
            let index_and_crate = &file[at + REGISTRY.len()..];
            index_and_crate.split_once('/').map_or(index_and_crate, |(_, from_crate)| from_crate)
        }
        None => file,
    }
}

/// Prints a result in the chosen format, followed by a newline.
pub(crate) fn print(format: Format, value: &Value) -> Result<(), CliError> {
    check_anchor_now()?;
    let marked;
    let why = warn_once_if_marked();
    let value = match (why, value) {
        (Some(why), Value::Object(map)) => {
            let mut map = map.clone();
            map.insert("anchor_mismatch".into(), Value::String(why));
            marked = Value::Object(map);
            &marked
        }
        _ => value,
    };
    let stripped;
    let value = match value {
        // A replay of the call this process forwarded under a key it made up itself: the first
        // answer was lost, and this one is printed as that one would have been.
        Value::Object(map) if crate::forward::generated_key() && map.contains_key("replayed") => {
            let mut map = map.clone();
            map.remove("replayed");
            stripped = Value::Object(map);
            &stripped
        }
        _ => value,
    };
    let text = match format {
        Format::Json => value.to_string(),
        Format::Text => to_text(value),
        Format::Verdict => match value.get("verdict").and_then(Value::as_str) {
            Some(verdict) => one_line(verdict),
            None => value.to_string(),
        },
    };
    let mut out = stdout();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|source| CliError::Io { op: "write stdout".into(), source })
}

/// For output that is not one JSON object (the lines of `log` and `dump`, which keep their
/// shape): when the store's anchors disagree, the one warning line goes to stderr.
pub(crate) fn warn_if_marked() -> Result<(), CliError> {
    check_anchor_now()?;
    let _ = warn_once_if_marked();
    Ok(())
}

/// The reason this call's answers are marked, if they are; the first time, its one warning line
/// goes to stderr.
fn warn_once_if_marked() -> Option<String> {
    let (why, warn) = ANCHOR_MISMATCH.with(|mark| {
        let mut mark = mark.borrow_mut();
        let warn = mark.0.is_some() && !mark.1;
        mark.1 |= warn;
        (mark.0.clone(), warn)
    });
    if let (Some(why), true) = (&why, warn) {
        let line = format!("warning: this answer is not vouched for by the anchor: {why}");
        let _ = writeln!(stderr(), "hookstate: {}", one_line(&line));
    }
    why
}

/// Prints one line as it is (its control characters were already replaced), after the
/// anchor's warning ([`warn_if_marked`]).
pub(crate) fn print_raw(line: &str) -> Result<(), CliError> {
    warn_if_marked()?;
    let mut out = stdout();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|source| CliError::Io { op: "write stdout".into(), source })
}

/// Epoch milliseconds from here on are read as a time (2001-09-09); smaller `_ms` values are
/// durations.
const EPOCH_MS_MIN: u64 = 1_000_000_000_000;
/// Widest cell of a text table before it is cut (with an ellipsis), so that one long payload
/// does not push every other column off the screen.
const CELL_CHARS_MAX: usize = 60;

/// A result as text: `key: value` lines for its fields (nested objects as dotted keys), each
/// array of objects as an aligned table under its name, times in local time, sizes and
/// durations with units.
pub(crate) fn to_text(value: &Value) -> String {
    let Value::Object(map) = value else {
        return scalar("", value);
    };
    let mut lines = Vec::new();
    let mut tables = Vec::new();
    flatten("", map, &mut lines, &mut tables);
    let width = lines.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    let mut out: Vec<String> = lines
        .iter()
        .map(|(k, v)| format!("{k}:{} {v}", " ".repeat(width - k.chars().count())))
        .collect();
    for (name, rows) in tables {
        out.push(String::new());
        out.push(format!("{name}:"));
        out.push(table(rows));
    }
    out.join("\n")
}

type Tables<'a> = Vec<(String, &'a [Value])>;

fn flatten<'a>(
    prefix: &str,
    map: &'a serde_json::Map<String, Value>,
    lines: &mut Vec<(String, String)>,
    tables: &mut Tables<'a>,
) {
    for (key, value) in map {
        let name = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match value {
            Value::Object(inner) if !inner.is_empty() => flatten(&name, inner, lines, tables),
            Value::Array(rows) if !rows.is_empty() && rows.iter().all(Value::is_object) => {
                tables.push((name, rows));
            }
            other => lines.push((name.clone(), scalar(key, other))),
        }
    }
}

/// An aligned table: one column per key (in first-seen order), one line per row.
fn table(rows: &[Value]) -> String {
    let mut columns: Vec<&str> = Vec::new();
    for row in rows.iter().filter_map(Value::as_object) {
        for key in row.keys() {
            if !columns.contains(&key.as_str()) {
                columns.push(key);
            }
        }
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| columns.iter().map(|c| cell(scalar(c, &row[*c]))).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            cells.iter().map(|r| r[i].chars().count()).chain([c.chars().count()]).max().unwrap_or(0)
        })
        .collect();
    let line = |texts: Vec<&str>| {
        let padded: Vec<String> = texts
            .iter()
            .zip(&widths)
            .map(|(t, w)| format!("{t}{}", " ".repeat(w - t.chars().count())))
            .collect();
        format!("  {}", padded.join("  ").trim_end())
    };
    let mut out = vec![line(
        columns
            .iter()
            .map(|c| c.to_uppercase())
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect(),
    )];
    out.extend(cells.iter().map(|r| line(r.iter().map(String::as_str).collect())));
    out.join("\n")
}

fn cell(text: String) -> String {
    if text.chars().count() <= CELL_CHARS_MAX {
        return text;
    }
    let cut: String = text.chars().take(CELL_CHARS_MAX - 1).collect();
    format!("{cut}\u{2026}")
}

/// One value as text, read by its key: `…_ms` epoch values as local times, other `…_ms` and
/// `…_s` values with their unit, `…bytes` as a size; strings bare, `null` as `-`.
fn scalar(key: &str, value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => one_line(s),
        Value::Number(n) => match n.as_u64() {
            Some(ms) if key.ends_with("_ms") && ms >= EPOCH_MS_MIN => local_time(ms),
            // A time field at 0 is "never" (a ready item's lease, for instance).
            Some(0) if key.ends_with("until_ms") || key.ends_with("at_ms") => "-".into(),
            Some(ms) if key.ends_with("_ms") => format!("{ms} ms"),
            Some(s) if key.ends_with("_s") => format!("{s} s"),
            Some(b) if key.ends_with("bytes") => size(b),
            _ => n.to_string(),
        },
        Value::Array(items) if items.is_empty() => "-".into(),
        Value::Array(items) if items.iter().all(|v| !v.is_object() && !v.is_array()) => {
            items.iter().map(|v| scalar(key, v)).collect::<Vec<_>>().join(", ")
        }
        other => one_line(&other.to_string()),
    }
}

fn local_time(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M:%S%.3f %:z").to_string())
        .unwrap_or_else(|| format!("{ms} ms"))
}

fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} B"),
        _ => format!("{value:.1} {}", UNITS[unit]),
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
        // An error that prints its cause already (`{op}: {source}`) is not told twice.
        let text = cause.to_string();
        if !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    one_line(&line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dependencys_source_path_starts_at_its_crate() {
        let file = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/redb-4.6.0/src/a.rs";
        assert_eq!(crate_relative(file), "redb-4.6.0/src/a.rs");
        assert_eq!(crate_relative("engine/src/store/redb.rs"), "engine/src/store/redb.rs");
    }

    #[test]
    fn an_error_that_prints_its_cause_is_not_followed_by_it_again() {
        let source = std::io::Error::from_raw_os_error(21);
        let err = CliError::Io { op: "read stdin".into(), source };
        assert_eq!(error_line(&err), "read stdin: Is a directory (os error 21)");
    }
    use hookstate_engine::{Call, Command, Engine, OpenOptions};

    fn count(engine: &Engine) {
        let call = Call::at("s", 1_700_000_000_000);
        engine.execute(&call, &Command::CounterAdd { name: "c".into(), delta: 1 }).unwrap();
    }

    fn mark() -> Option<String> {
        ANCHOR_MISMATCH.with(|mark| mark.borrow().0.clone())
    }

    fn options() -> OpenOptions {
        OpenOptions { create: true, ..OpenOptions::default() }
    }

    /// A store at `db` rolled back under its anchor (its file one commit older): a write would
    /// be refused, a read is marked.
    fn rolled_back(db: &std::path::Path) {
        count(&Engine::open(db, options()).unwrap());
        let older = std::fs::read(db).unwrap();
        count(&Engine::open(db, options()).unwrap());
        std::fs::write(db, older).unwrap();
    }

    #[test]
    fn a_write_is_marked_at_its_first_print_only_when_it_committed_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.redb");
        rolled_back(&db);
        let engine = std::sync::Arc::new(Engine::open(&db, options()).unwrap());
        start_call();
        mark_anchor_later(&engine);
        assert_eq!(mark(), None, "nothing is read before the call prints");
        check_anchor_now().unwrap();
        assert!(mark().is_some_and(|why| why.contains("anchor")), "{:?}", mark());

        // A call that committed passed the check under the write lock: no second look.
        let fresh = dir.path().join("t.redb");
        let engine = std::sync::Arc::new(Engine::open(&fresh, options()).unwrap());
        start_call();
        mark_anchor_later(&engine);
        count(&engine);
        assert!(engine.ops().has_committed());
        std::fs::write(dir.path().join("t.redb.head"), b"not an anchor").unwrap();
        check_anchor_now().unwrap();
        assert_eq!(mark(), None);
        // A check an earlier call left (a server runs one call after another) is forgotten.
        let engine = std::sync::Arc::new(Engine::open(&db, options()).unwrap());
        start_call();
        mark_anchor_later(&engine);
        start_call();
        check_anchor_now().unwrap();
        assert_eq!(mark(), None, "start_call forgets a check left by an earlier call");
    }

    /// `cmd::open` leaves a write's check to its first print and checks a read at once.
    #[test]
    fn a_write_opens_without_looking_at_the_anchors_and_a_read_looks_at_once() {
        use clap::Parser;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.redb");
        rolled_back(&db);
        let cli = |verb: &[&str]| {
            let db = db.to_str().unwrap();
            crate::args::Cli::try_parse_from(["hookstate", "--db", db].iter().chain(verb)).unwrap()
        };
        let pending = || CHECK_ANCHOR.with(|check| check.borrow().is_some());

        start_call();
        let write = crate::cmd::open(&cli(&["counter", "add", "c"]), crate::cmd::Access::Write);
        let write = write.unwrap();
        assert_eq!(mark(), None, "a write does not look at open");
        assert!(pending(), "it looks when it prints");
        drop(write);

        start_call();
        let read = crate::cmd::open(&cli(&["counter", "get", "c"]), crate::cmd::Access::Read);
        let _read = read.unwrap();
        assert!(mark().is_some(), "a read looks at once");
        assert!(!pending());
    }
}
