//! Upstream compatibility, each spelling written once: numbers as JavaScript prints them
//! ([`js`]), the timestamp spellings and zones ([`stamp`]), `String.prototype.trim`
//! ([`js_trim`]) and the other string semantics the scripts rely on ([`text`]), so files and
//! stdin read and write exactly as the upstream scripts do.
//!
//! Pure: no IO, no clock.

pub(crate) mod js;
pub(crate) mod stamp;
pub(crate) mod text;

/// Whether `c` is whitespace to JavaScript's `String.prototype.trim` (WhiteSpace and
/// LineTerminator: tab, vertical tab, form feed, space, no-break space, the byte-order mark,
/// every space separator, line feed, carriage return, and the line and paragraph separators).
/// Rust's `char::is_whitespace` differs on two: it takes U+0085 and not U+FEFF.
#[must_use]
pub(crate) fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\t' | '\u{b}' | '\u{c}' | ' ' | '\u{a0}' | '\u{feff}' | '\u{1680}' | '\u{2000}'
            ..='\u{200a}'
                | '\u{202f}'
                | '\u{205f}'
                | '\u{3000}'
                | '\n'
                | '\r'
                | '\u{2028}'
                | '\u{2029}'
    )
}

/// `text.trim()` as JavaScript does it: upstream scripts trim stdin before `JSON.parse`, so a
/// payload wrapped in a form feed or a byte-order mark is accepted there and must be here.
#[must_use]
pub fn js_trim(text: &str) -> &str {
    text.trim_matches(is_js_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn js_trim_takes_what_javascript_takes_and_not_more() {
        assert_eq!(js_trim("\u{feff}\u{c}\u{b} {}\u{2028}\u{a0}\n"), "{}");
        // NEL is whitespace to Rust, not to JavaScript.
        assert_eq!(js_trim("\u{85}{}"), "\u{85}{}");
        assert_eq!(js_trim("  "), "");
    }
}
