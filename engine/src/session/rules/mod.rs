//! The session domain's rules as pure decisions over documents already read: each returns the
//! events to append and the verdict line upstream's script prints, or a [`Refusal`] carrying
//! upstream's error token.
//!
//! Time comes in as UTC milliseconds and the zone as `config.timezone`; randomness (a UUID) comes
//! in as an argument. Does not read or write the store or files, nor read a clock.

pub mod archive;
pub mod conversations;
pub mod hypotheses;
pub mod markers;
pub mod observations;
pub mod report;
pub mod runtime;
pub mod shell;
pub mod task_doc;
pub mod task_verbs;
pub mod tasks;

use hookstate_schema::session::SessionEvent;
use serde_json::Value;

/// Where upstream prints a verdict line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// What upstream's script prints and the exit code it ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The lines, each printed with a newline.
    pub lines: Vec<String>,
    /// Where.
    pub stream: Stream,
    /// Upstream's exit code. `task.ts` exits 2 on every error, which Claude Code reads as
    /// "block": the CLI maps that to the refusal's [`Class`], never to 2.
    pub upstream_exit: u8,
}

impl Verdict {
    /// One stdout line, exit 0.
    #[must_use]
    pub fn line(line: impl Into<String>) -> Verdict {
        Verdict { lines: vec![line.into()], stream: Stream::Stdout, upstream_exit: 0 }
    }

    /// One stdout line: a JSON value as `JSON.stringify` prints it, exit 0.
    #[must_use]
    pub fn json(value: &Value) -> Verdict {
        Verdict::line(crate::session::compat::js::compact(value))
    }
}

/// How hookstate classes a refusal for its own exit table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A lost compare-and-swap, an illegal move, a held key, a stale revision (exit 1).
    Refused,
    /// Input the rules reject: a bad value, an empty text, an unknown id (exit 3).
    Invalid,
    /// A call upstream would not parse: an unknown verb or flag (exit 64).
    Usage,
}

/// A decision that appends nothing: upstream's error token, the line it prints, its class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Upstream's token (`stale-result`, `already-bound`, `empty-pattern`, ...).
    pub token: String,
    /// What upstream prints for it.
    pub verdict: Verdict,
    /// hookstate's class.
    pub class: Class,
}

/// A decision that goes through: the events, in order, and the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The events to append in one transaction (none for a read or a no-op).
    pub events: Vec<SessionEvent>,
    /// What upstream prints.
    pub verdict: Verdict,
}

/// A decision's outcome.
pub type Decision = std::result::Result<Decided, Refusal>;

/// A refusal printed as `task.ts` prints it: the token on stderr (upstream exits 2).
#[must_use]
pub fn task_error(token: impl Into<String>, class: Class) -> Refusal {
    let token = token.into();
    let verdict = Verdict { lines: vec![token.clone()], stream: Stream::Stderr, upstream_exit: 2 };
    Refusal { token, verdict, class }
}

/// A refusal printed on stdout as `ERROR|<token>` with upstream's exit code.
#[must_use]
pub fn error_line(token: impl Into<String>, class: Class, upstream_exit: u8) -> Refusal {
    let token = token.into();
    let verdict =
        Verdict { lines: vec![format!("ERROR|{token}")], stream: Stream::Stdout, upstream_exit };
    Refusal { token, verdict, class }
}

/// A refusal printed on stderr as a message with exit 1 (`later.ts`).
#[must_use]
pub fn stderr_message(message: impl Into<String>, class: Class) -> Refusal {
    let message = message.into();
    let verdict =
        Verdict { lines: vec![message.clone()], stream: Stream::Stderr, upstream_exit: 1 };
    Refusal { token: message, verdict, class }
}

/// JavaScript string semantics the rules reproduce.
pub mod js {
    /// JavaScript's whitespace (`String.prototype.trim`'s set).
    #[must_use]
    pub fn is_js_whitespace(c: char) -> bool {
        crate::session::compat::is_js_whitespace(c)
    }

    /// `text.trim()`.
    #[must_use]
    pub fn trim(text: &str) -> &str {
        crate::session::compat::js_trim(text)
    }

    /// `text.trimEnd()`.
    #[must_use]
    pub fn trim_end(text: &str) -> &str {
        text.trim_end_matches(is_js_whitespace)
    }

    /// `Math.round`: the nearest integer, halves toward +∞ (not `floor(x + 0.5)`, whose addition
    /// rounds).
    #[must_use]
    pub fn round(x: f64) -> f64 {
        let floor = x.floor();
        if x - floor >= 0.5 {
            floor + 1.0
        } else {
            floor
        }
    }

    /// `text.trimStart()`.
    #[must_use]
    pub fn trim_start(text: &str) -> &str {
        text.trim_start_matches(is_js_whitespace)
    }

    /// `text.length`: UTF-16 code units.
    #[must_use]
    pub fn length(text: &str) -> usize {
        text.encode_utf16().count()
    }

    /// `text.slice(0, units)` in UTF-16 code units. A cut through a surrogate pair leaves a lone
    /// surrogate in JavaScript, which a UTF-8 file write turns into U+FFFD; so does this.
    #[must_use]
    pub fn slice_units(text: &str, units: usize) -> String {
        let mut out = String::new();
        let mut taken = 0;
        for c in text.chars() {
            let width = c.len_utf16();
            if taken + width > units {
                if taken < units {
                    out.push('\u{fffd}');
                }
                break;
            }
            taken += width;
            out.push(c);
        }
        out
    }

    /// `JSON.stringify(JSON.parse(raw))`: the text a whole-file rewrite gives a value (duplicate
    /// keys keep their first place and last value; array-index keys move first, ascending).
    #[must_use]
    pub fn reparse(raw: &str) -> Option<String> {
        let value: serde_json::Value = serde_json::from_str(raw).ok()?;
        Some(crate::session::compat::js::compact(&object_order(value)))
    }

    fn is_array_index(key: &str) -> bool {
        key == "0"
            || (!key.starts_with('0')
                && key.bytes().all(|b| b.is_ascii_digit())
                && key.parse::<u32>().is_ok_and(|n| n < u32::MAX))
    }

    /// Object keys in JavaScript's property order: array indices first, ascending, then the rest
    /// in insertion order.
    #[must_use]
    pub fn object_order(value: serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::Array(items) => Value::Array(items.into_iter().map(object_order).collect()),
            Value::Object(map) => {
                let (mut indices, rest): (Vec<_>, Vec<_>) =
                    map.into_iter().partition(|(k, _)| is_array_index(k));
                indices.sort_by_key(|(k, _)| k.parse::<u32>().unwrap_or(0));
                let ordered = indices.into_iter().chain(rest);
                Value::Object(ordered.map(|(k, v)| (k, object_order(v))).collect())
            }
            other => other,
        }
    }

    /// JavaScript's `\w` (no `u` flag): ASCII letters, digits and `_`.
    #[must_use]
    pub fn is_word(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '_'
    }
}

#[cfg(test)]
mod tests {
    use super::js;

    #[test]
    fn javascript_lengths_and_slices_count_utf16_units() {
        assert_eq!(js::length("a😀"), 3);
        assert_eq!(js::slice_units("a😀b", 2), "a\u{fffd}");
        assert_eq!(js::slice_units("a😀b", 3), "a😀");
        assert_eq!(js::slice_units("abc", 10), "abc");
        assert_eq!(js::trim_end("x \u{feff}\n"), "x");
        assert_eq!(
            js::reparse("{\"b\":1.0,\"10\":2,\"2\":3,\"b\":4}").as_deref(),
            Some("{\"2\":3,\"10\":2,\"b\":4}")
        );
    }
}
