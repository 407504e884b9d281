//! Validation of every name that comes from outside: ids, queue names, keys and scopes.
//!
//! An id is checked before anything is written, so that a hostile id can never become a path, an
//! option, or a terminal escape in a log. Does not map ids to paths; that is the engine's job.

/// Longest id in bytes: far above any real id, and far below `NAME_MAX` (255) on every file system.
pub const ID_BYTES_MAX: usize = 128;
/// Longest scope in bytes: scopes may carry an absolute directory (`hermit:/home/u/p/.x`).
pub const SCOPE_BYTES_MAX: usize = 512;

/// Why an id or scope was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The id is the empty string.
    #[error("{what} is empty")]
    Empty {
        /// What kind of name was checked ("id", "queue", "scope", ...).
        what: &'static str,
    },
    /// The id is longer than the limit.
    #[error("{what} is {len} bytes, limit is {max}")]
    TooLong {
        /// What kind of name was checked.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The id starts with `-`, so it could be read as an option by a script.
    #[error("{what} starts with '-'")]
    LeadingDash {
        /// What kind of name was checked.
        what: &'static str,
    },
    /// The id is `.` or `..`, or ends with `.`.
    #[error("{what} is '.' or '..', or starts or ends with '.'")]
    Dots {
        /// What kind of name was checked.
        what: &'static str,
    },
    /// The id holds a byte outside the allowlist.
    #[error("{what} contains {found}, allowed are A-Z a-z 0-9 . _ - : @ +")]
    BadChar {
        /// What kind of name was checked.
        what: &'static str,
        /// The refused character, escaped for printing.
        found: String,
    },
    /// A scope holds a control character or a bidirectional text control.
    #[error("{what} contains {found}: a scope may hold any printable text but control characters")]
    ControlChar {
        /// What kind of name was checked.
        what: &'static str,
        /// The refused character, escaped for printing.
        found: String,
    },
}

/// Whether `c` is a control character, or one that reorders text on a terminal (the bidi
/// embeddings, overrides and isolates), so that a scope could print as another.
fn is_control_or_bidi(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Checks an id (item, key, queue, set, counter, list or session name) against the allowlist.
///
/// Allowed: ASCII letters, digits and `. _ - : @ +`; at most [`ID_BYTES_MAX`] bytes; not `.` or
/// `..`; no trailing `.`; no leading `-` or `.`.
///
/// # Errors
/// Returns the [`IdError`] naming the first rule the id breaks.
pub fn validate_id(what: &'static str, id: &str) -> Result<(), IdError> {
    check_len(what, id, ID_BYTES_MAX)?;
    if id.starts_with('-') {
        return Err(IdError::LeadingDash { what });
    }
    if id.starts_with('.') || id.ends_with('.') {
        return Err(IdError::Dots { what });
    }
    match id.chars().find(|c| !is_id_char(*c)) {
        Some(bad) => Err(IdError::BadChar { what, found: escape_char(bad) }),
        None => Ok(()),
    }
}

/// Checks a scope. Scopes are wider than ids: they may hold `/` and spaces (an absolute state
/// directory), but never control characters (a NUL included), bidirectional text controls, or
/// a leading `-`.
///
/// # Errors
/// Returns the [`IdError`] naming the first rule the scope breaks.
pub fn validate_scope(scope: &str) -> Result<(), IdError> {
    let what = "scope";
    check_len(what, scope, SCOPE_BYTES_MAX)?;
    if scope.starts_with('-') {
        return Err(IdError::LeadingDash { what });
    }
    match scope.chars().find(|c| is_control_or_bidi(*c)) {
        Some(bad) => Err(IdError::ControlChar { what, found: escape_char(bad) }),
        None => Ok(()),
    }
}

fn check_len(what: &'static str, id: &str, max: usize) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty { what });
    }
    if id.len() > max {
        return Err(IdError::TooLong { what, len: id.len(), max });
    }
    Ok(())
}

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '@' | '+')
}

/// Renders one character so that it can be printed safely in a one-line error message.
fn escape_char(c: char) -> String {
    if c.is_ascii_graphic() || c == ' ' {
        format!("'{c}'")
    } else {
        format!("'{}'", c.escape_unicode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(id: &str, ok: bool) {
        assert_eq!(validate_id("id", id).is_ok(), ok, "id {id:?}");
    }

    #[test]
    fn id_allowlist_table() {
        for good in ["a", "fb_mii0k1q2_4x8c2d", "MP-20261129-3", "x.json", "s:1@h+2", "a..b"] {
            check(good, true);
        }
        let long = "a".repeat(ID_BYTES_MAX + 1);
        let bad = [
            "",
            ".",
            "..",
            "../x",
            "a/../../x",
            "/etc/passwd",
            "C:\\x",
            "\\\\server\\share",
            "a\0b",
            "a\nb",
            "a\tb",
            "\u{1b}[31m",
            "-x",
            "--force",
            "x.",
            "x ",
            "a\u{301}",
            &long,
        ];
        for id in bad {
            check(id, false);
        }
        check(&"a".repeat(ID_BYTES_MAX), true);
    }

    #[test]
    fn errors_escape_control_characters() {
        let err = validate_id("id", "a\u{1b}b").unwrap_err().to_string();
        assert!(!err.contains('\u{1b}'), "{err}");
        assert!(err.contains("\\u{1b}"), "{err}");
    }

    #[test]
    fn scope_allows_paths_but_not_control_characters() {
        assert!(validate_scope("hermit:/home/u/my project/.claude-code-hermit").is_ok());
        assert!(validate_scope("").is_err());
        assert!(validate_scope("a\nb").is_err());
        assert!(validate_scope("-x").is_err());
        assert!(validate_scope(&"s".repeat(SCOPE_BYTES_MAX + 1)).is_err());
        // A right-to-left override would print the scope as another one on a terminal.
        let err = validate_scope("hermit:/a\u{202e}b").unwrap_err().to_string();
        assert!(err.contains("\\u{202e}") && err.contains("printable text"), "{err}");
        assert!(validate_scope("hermit:/höme/ユーザー").is_ok());
    }
}
