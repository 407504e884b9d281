//! Validation of JSON values that callers hand in (record values, payloads, list rows).
//!
//! Values are kept as the caller's exact JSON text, so numbers above u64 or with many digits
//! survive unchanged. Does not interpret values.

use serde_json::Value;

use crate::kernel::error::{Error, Result};
use crate::kernel::limits::{JSON_DEPTH_MAX, VALUE_BYTES_MAX};

/// Checks that `text` is one JSON value within the size and depth limits and returns it with
/// surrounding white space removed.
///
/// # Errors
/// [`Error::Invalid`] naming what is wrong.
pub fn validate_json(what: &str, text: &str) -> Result<String> {
    let trimmed = text.trim_matches(|c: char| c.is_ascii_whitespace());
    if trimmed.is_empty() {
        return Err(Error::Empty { what: format!("{what}, expected one JSON value,") });
    }
    if trimmed.len() > VALUE_BYTES_MAX {
        let (what, len, max) = (what.to_owned(), trimmed.len(), VALUE_BYTES_MAX);
        return Err(Error::TooLarge { what, len, max });
    }
    let value: Value = serde_json::from_str(trimmed)
        .map_err(|e| Error::bad(what, format!("is not valid JSON: {e}")))?;
    let depth = depth(&value);
    if depth > JSON_DEPTH_MAX {
        let why = format!("nests {depth} levels deep, limit is {JSON_DEPTH_MAX}");
        return Err(Error::bad(what, why));
    }
    Ok(trimmed.to_owned())
}

fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_exact_text_and_refuses_bad_values() {
        assert_eq!(validate_json("v", " 18446744073709551616 \n").unwrap(), "18446744073709551616");
        assert_eq!(validate_json("v", r#"{"a":1.50}"#).unwrap(), r#"{"a":1.50}"#);
        for bad in ["", "  ", "{", "NaN", "Infinity", "{} {}", "\u{feff}{}", "[1,]"] {
            assert!(validate_json("v", bad).is_err(), "{bad:?}");
        }
        let deep = format!("{}{}", "[".repeat(JSON_DEPTH_MAX + 1), "]".repeat(JSON_DEPTH_MAX + 1));
        assert!(validate_json("v", &deep).unwrap_err().to_string().contains("levels deep"));
        let big = format!("\"{}\"", "x".repeat(VALUE_BYTES_MAX));
        assert!(validate_json("v", &big).unwrap_err().to_string().contains("limit"));
    }
}
