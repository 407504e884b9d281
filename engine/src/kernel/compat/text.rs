//! JavaScript string semantics the upstream scripts rely on, each written once: `trim`,
//! `trimStart`, `trimEnd`, `length` and `slice` in UTF-16 code units, `\w`, and the property
//! order and text a `JSON.stringify(JSON.parse(raw))` rewrite gives a value.
//!
//! Pure: no IO. `trim` and the whitespace set are the module's parent's ([`super::js_trim`]).

pub(crate) use super::{is_js_whitespace, js_trim as trim};

/// `text.trimEnd()`.
#[must_use]
pub(crate) fn trim_end(text: &str) -> &str {
    text.trim_end_matches(is_js_whitespace)
}

/// `text.trimStart()`.
#[must_use]
pub(crate) fn trim_start(text: &str) -> &str {
    text.trim_start_matches(is_js_whitespace)
}

/// `text.length`: UTF-16 code units.
#[must_use]
pub(crate) fn length(text: &str) -> usize {
    text.encode_utf16().count()
}

/// `text.slice(0, units)` in UTF-16 code units. A cut through a surrogate pair leaves a lone
/// surrogate in JavaScript, which a UTF-8 file write turns into U+FFFD; so does this.
#[must_use]
pub(crate) fn slice_units(text: &str, units: usize) -> String {
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
pub(crate) fn reparse(raw: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(raw).ok()?;
    Some(super::js::compact(&object_order(value)))
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
pub(crate) fn object_order(value: serde_json::Value) -> serde_json::Value {
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
pub(crate) fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn javascript_lengths_and_slices_count_utf16_units() {
        assert_eq!(length("a😀"), 3);
        assert_eq!(slice_units("a😀b", 2), "a\u{fffd}");
        assert_eq!(slice_units("a😀b", 3), "a😀");
        assert_eq!(slice_units("abc", 10), "abc");
        assert_eq!(trim_end("x \u{feff}\n"), "x");
        assert_eq!(trim_start("\u{2028} x"), "x");
        assert_eq!(
            reparse("{\"b\":1.0,\"10\":2,\"2\":3,\"b\":4}").as_deref(),
            Some("{\"2\":3,\"10\":2,\"b\":4}")
        );
    }
}
