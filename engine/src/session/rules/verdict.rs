//! What a session decision answers: upstream's verdict lines and exit code ([`Verdict`]), the
//! refusal carrying upstream's error token ([`Refusal`]) with hookstate's class for it, and the
//! events of a decision that goes through ([`Decided`]).
//!
//! Plain values. Does not print or exit; the CLI does, from the handle's result.

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
    /// "block": the CLI maps that to the refusal's `Class`, never to 2.
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
        Verdict::line(crate::kernel::compat::js::compact(value))
    }
}

/// How hookstate classes a refusal for its own exit table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// A lost compare-and-swap, an illegal move, a held key, a stale revision (exit 1).
    Refused,
    /// Input the rules reject: a bad value, an empty text, an unknown id (exit 3).
    Invalid,
    /// A call upstream would not parse: an unknown verb or flag (exit 64).
    Usage,
}

/// A decision that appends nothing: upstream's error token, the line it prints, its class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// Upstream's token (`stale-result`, `already-bound`, `empty-pattern`, ...).
    pub(crate) token: String,
    /// What upstream prints for it.
    pub(crate) verdict: Verdict,
    /// hookstate's class.
    pub(crate) class: Class,
}

/// A decision that goes through: the events, in order, and the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decided {
    /// The events to append in one transaction (none for a read or a no-op).
    pub(crate) events: Vec<SessionEvent>,
    /// What upstream prints.
    pub(crate) verdict: Verdict,
}

/// A decision's outcome.
pub(crate) type Decision = std::result::Result<Decided, Refusal>;

/// A refusal printed as `task.ts` prints it: the token on stderr (upstream exits 2).
#[must_use]
pub(crate) fn task_error(token: impl Into<String>, class: Class) -> Refusal {
    let token = token.into();
    let verdict = Verdict { lines: vec![token.clone()], stream: Stream::Stderr, upstream_exit: 2 };
    Refusal { token, verdict, class }
}

/// A refusal printed on stdout as `ERROR|<token>` with upstream's exit code.
#[must_use]
pub(crate) fn error_line(token: impl Into<String>, class: Class, upstream_exit: u8) -> Refusal {
    let token = token.into();
    let verdict =
        Verdict { lines: vec![format!("ERROR|{token}")], stream: Stream::Stdout, upstream_exit };
    Refusal { token, verdict, class }
}

/// A refusal printed on stderr as a message with exit 1 (`later.ts`).
#[must_use]
pub(crate) fn stderr_message(message: impl Into<String>, class: Class) -> Refusal {
    let message = message.into();
    let verdict =
        Verdict { lines: vec![message.clone()], stream: Stream::Stderr, upstream_exit: 1 };
    Refusal { token: message, verdict, class }
}
