//! The inputs of the feedback verbs and their checks, run before any store is opened, and the
//! defaults a caller leaves out: the holder, the moonshine home, the scope, the kill switch.
//!
//! Pure: no store, no files, no clock. Does not decide inbox rules; `rules.rs` does.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use hookstate_schema::feedback::{JsonDoc, Style};
use hookstate_schema::validate_id;

use super::project::SCOPE_PREFIX;
use super::rules::{
    Pass, COMMENT_BYTES_MAX, INTERVAL_S_MAX, MODES, REPLY_BYTES_MAX, STALE_MS_MAX, TARGET_KINDS,
};
use crate::kernel::call::Call;
use crate::kernel::error::{Error, Result};
use crate::kernel::write::validate_call;
use crate::legacy::json::{self as legacy_json, str_field};

/// The values of `MOONSHINE_FEEDBACK` that switch the adapters off (the upstream kill switch).
pub const KILL_SWITCH_OFF: [&str; 7] = ["0", "off", "OFF", "false", "FALSE", "no", "NO"];
/// Where moonshine keeps its projects, under `$HOME`, when no home is given.
pub const MOONSHINE_HOME_DEFAULT: &str = ".agent/moonshine";

/// What a `feedback claim` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimAsk {
    /// Who claims (default: the call's session, else `pid-<pid>`).
    pub holder: Option<String>,
    /// Only this comment.
    pub id: Option<String>,
    /// Every eligible comment rather than the next one.
    pub all: bool,
    /// Re-delivery window for `delivered` comments.
    pub stale_ms: u64,
}

/// What a drain pass (Stop hook or listener tick) asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainAsk {
    /// Which drainer.
    pub pass: Pass,
    /// Who claims (default: the call's session, else `pid-<pid>`).
    pub holder: Option<String>,
    /// Re-delivery window for `delivered` comments.
    pub stale_ms: u64,
    /// The listener interval written into the heartbeat.
    pub interval_s: u64,
}

/// The holder a claim is recorded for: the one given, else the session, else `pid-<pid>`.
pub(crate) fn holder_of(given: Option<&str>, call: &Call, pid: u32) -> String {
    given.or(call.actor.session.as_deref()).map_or_else(|| format!("pid-{pid}"), str::to_owned)
}

/// Whether the adapters run: `false` when `MOONSHINE_FEEDBACK` holds one of [`KILL_SWITCH_OFF`].
#[must_use]
pub fn enabled(kill_switch: Option<&str>) -> bool {
    !kill_switch.is_some_and(|value| KILL_SWITCH_OFF.contains(&value))
}

/// The moonshine home: the one given, else `$HOME/`[`MOONSHINE_HOME_DEFAULT`].
#[must_use]
pub fn moonshine_home(given: Option<&Path>, home: Option<&OsStr>) -> PathBuf {
    given.map_or_else(
        || Path::new(home.unwrap_or_default()).join(MOONSHINE_HOME_DEFAULT),
        Path::to_path_buf,
    )
}

/// The feedback scope a verb acts in: `moonshine:<project>` for a project given, else the
/// call's scope when it is a feedback scope; `None` when neither names a project.
#[must_use]
pub fn scope_for(project: Option<&str>, scope: &str) -> Option<String> {
    match project {
        Some(project) => Some(format!("{SCOPE_PREFIX}{project}")),
        None => scope.starts_with(SCOPE_PREFIX).then(|| scope.to_owned()),
    }
}

/// The project a feedback scope names.
///
/// # Errors
/// [`Error::BadInput`] when the scope is not `moonshine:<project>`; [`Error::BadId`] for a bad
/// project id.
pub fn project_of(scope: &str) -> Result<&str> {
    let project = scope.strip_prefix(SCOPE_PREFIX).ok_or_else(|| {
        Error::bad(format!("scope {scope:?}"), "is not a feedback scope (moonshine:<project>)")
    })?;
    validate_id("project", project)?;
    Ok(project)
}

/// Checks a comment id: `fb_` and word characters, as the web's dismiss endpoint requires.
///
/// # Errors
/// [`Error::BadInput`] naming the id.
pub fn check_comment_id(id: &str) -> Result<()> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let ok = id.len() > 3 && id.starts_with("fb_") && id[3..].chars().all(word);
    if !ok || id.len() > hookstate_schema::id::ID_BYTES_MAX {
        return Err(Error::bad(format!("comment id {id:?}"), "is not fb_ and word characters"));
    }
    Ok(())
}

pub(crate) fn check_text(what: &str, text: &str, max: usize, one_line: bool) -> Result<()> {
    if text.trim().is_empty() {
        return Err(Error::Empty { what: what.into() });
    }
    if text.len() > max {
        return Err(Error::TooLarge { what: what.into(), len: text.len(), max });
    }
    if one_line && text.chars().any(char::is_control) {
        return Err(Error::bad(what, "must be one line without control characters"));
    }
    Ok(())
}

/// Checks a comment target: an object with a known `kind` and a relative `path`; returns it as
/// the compact document a comment records.
pub(crate) fn check_target(target: &str) -> Result<JsonDoc> {
    let text = crate::kernel::value::validate_json("target", target)?;
    let compact = format!("{}\n", legacy_json::compact(&text));
    let mut doc = legacy_json::parse_doc("target", compact.as_bytes())?;
    doc.style = Style::Compact;
    let kind = str_field(&doc, "kind").unwrap_or_default();
    if !TARGET_KINDS.contains(&kind.as_str()) {
        return Err(Error::NotOneOf { what: "target kind", value: kind, allowed: &TARGET_KINDS });
    }
    let path = str_field(&doc, "path").unwrap_or_default();
    if !is_relative_target_path(&path) {
        return Err(Error::bad(format!("target path {path:?}"), "is not a relative path"));
    }
    Ok(doc)
}

/// Whether a comment target's `path` stays inside the project's content: relative, no empty or
/// `..` part, no control character. `feedback add` and every comment file read from outside
/// (an import, a mirror) are held to it, so no way in hands the Stop hook a path outside.
pub(crate) fn is_relative_target_path(path: &str) -> bool {
    let escapes = path.split('/').any(|part| part == ".." || part.is_empty());
    !(path.is_empty() || path.starts_with('/') || escapes || path.chars().any(char::is_control))
}

fn check_stale(stale_ms: u64) -> Result<()> {
    if stale_ms > STALE_MS_MAX {
        let (what, unit) = ("stale window", " ms");
        return Err(Error::OutOfRange { what, value: stale_ms, min: 0, max: STALE_MS_MAX, unit });
    }
    Ok(())
}

fn check_interval(interval_s: u64) -> Result<()> {
    if interval_s == 0 || interval_s > INTERVAL_S_MAX {
        let (what, unit, max) = ("interval", " s", INTERVAL_S_MAX);
        return Err(Error::OutOfRange { what, value: interval_s, min: 1, max, unit });
    }
    Ok(())
}

fn check_mode(mode: &str) -> Result<()> {
    if MODES.contains(&mode) {
        Ok(())
    } else {
        Err(Error::NotOneOf { what: "mode", value: mode.into(), allowed: &MODES })
    }
}

fn check_holder(holder: Option<&str>) -> Result<()> {
    holder.map_or(Ok(()), |h| validate_id("holder", h).map_err(Error::from))
}

fn check_session(session: Option<&str>) -> Result<()> {
    session.map_or(Ok(()), |s| validate_id("session", s).map_err(Error::from))
}

/// A feedback mutation's input, checked by [`check`] before any store is opened.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// `feedback add`.
    Add {
        /// The target JSON.
        target: &'a str,
        /// The comment text.
        comment: &'a str,
    },
    /// `feedback claim`.
    Claim(&'a ClaimAsk),
    /// `feedback reply`.
    Reply {
        /// Comment id.
        id: &'a str,
        /// The reply line.
        reply: &'a str,
    },
    /// `feedback dismiss`.
    Dismiss {
        /// Comment id.
        id: &'a str,
    },
    /// `feedback control`.
    Control {
        /// The mode.
        mode: &'a str,
        /// The session named.
        session: Option<&'a str>,
    },
    /// `feedback address`.
    Address {
        /// The session named.
        session: Option<&'a str>,
    },
    /// `feedback heartbeat`.
    Heartbeat {
        /// The mode reported.
        mode: Option<&'a str>,
        /// The interval.
        interval_s: u64,
    },
    /// A drain pass (Stop hook, tick): of one project, or of every project when the call's
    /// scope names none.
    Drain(&'a DrainAsk),
}

/// Checks a call and a feedback input against every id rule and limit without touching a store,
/// so that bad input is refused before anything is opened. Every input but a drain needs a
/// feedback scope.
///
/// # Errors
/// The typed variant of the first broken rule ([`Error::is_invalid`] holds for each).
pub fn check(call: &Call, input: &Input<'_>) -> Result<()> {
    validate_call(call)?;
    if !matches!(input, Input::Drain(_)) || call.scope.starts_with(SCOPE_PREFIX) {
        project_of(&call.scope)?;
    }
    match *input {
        Input::Add { target, comment } => {
            check_text("comment", comment, COMMENT_BYTES_MAX, false)?;
            check_target(target).map(|_| ())
        }
        Input::Claim(ask) => {
            check_holder(ask.holder.as_deref())?;
            ask.id.as_deref().map_or(Ok(()), check_comment_id)?;
            check_stale(ask.stale_ms)
        }
        Input::Reply { id, reply } => {
            check_comment_id(id)?;
            check_text("reply", reply, REPLY_BYTES_MAX, true)
        }
        Input::Dismiss { id } => check_comment_id(id),
        Input::Control { mode, session } => {
            check_session(session)?;
            check_mode(mode)
        }
        Input::Address { session } => check_session(session),
        Input::Heartbeat { mode, interval_s } => {
            mode.map_or(Ok(()), check_mode)?;
            check_interval(interval_s)
        }
        Input::Drain(ask) => {
            check_holder(ask.holder.as_deref())?;
            check_interval(ask.interval_s)?;
            check_stale(ask.stale_ms)
        }
    }
}
