//! Legacy JSON text: files read as ordered objects whose values keep their exact text, and
//! written back in the upstream layouts (`JSON.stringify(v, null, 2)` / jq pretty, or compact),
//! each followed by one newline.
//!
//! A file is adopted only if rendering what was parsed gives its bytes back, so every import
//! round-trips by construction. Does not read or write files; `root.rs` does.

use std::fmt;

use hookstate_schema::feedback::{JsonDoc, Style};
use hookstate_schema::signals::StoreStyle;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::kernel::error::{Error, Result};

/// Keys in one legacy object: far above any upstream record. A writer that adds fields a caller
/// names (`runtime set`) refuses to grow an object past it, so every file the store writes reads
/// back (it was 64, which `runtime set` passed, and every outside write of the file after that
/// was quarantined).
pub(crate) const OBJECT_KEYS_MAX: usize = 1024;

struct Ordered(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut fields: Vec<(String, Box<RawValue>)> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                while let Some((key, value)) = map.next_entry::<String, Box<RawValue>>()? {
                    if fields.len() >= OBJECT_KEYS_MAX {
                        return Err(serde::de::Error::custom("too many keys"));
                    }
                    if !seen.insert(key.clone()) {
                        return Err(serde::de::Error::custom(format!("duplicate key {key:?}")));
                    }
                    fields.push((key, value));
                }
                Ok(Ordered(fields))
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// Parses the bytes of a legacy file `name` into an ordered object, and checks that rendering it
/// gives the same bytes back.
///
/// # Errors
/// [`Error::Invalid`] for text that is not UTF-8, not one JSON object, or not in a layout this
/// module writes back byte for byte.
pub(crate) fn parse_doc(name: &str, bytes: &[u8]) -> Result<JsonDoc> {
    let (doc, exact) = parse_doc_any(name, bytes)?;
    if exact {
        return Ok(doc);
    }
    Err(Error::legacy(
        name,
        "is not pretty (2-space) or compact JSON ending in one newline, so it would not be \
         written back byte for byte",
    ))
}

/// Parses the bytes of a legacy file `name` into an ordered object in whatever layout it was
/// written, and says whether rendering it gives the same bytes back; a layout this module does
/// not write reads as pretty (a rendering then rewrites the file in that layout).
///
/// # Errors
/// [`Error::LegacyFile`] for text that is not UTF-8 or not one JSON object.
pub(crate) fn parse_doc_any(name: &str, bytes: &[u8]) -> Result<(JsonDoc, bool)> {
    let bad = |why: String| Error::legacy(name, why);
    let text = std::str::from_utf8(bytes).map_err(|_| bad("is not UTF-8".into()))?;
    let Ordered(fields) = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let fields: Vec<(String, String)> =
        fields.into_iter().map(|(k, v)| (k, compact(v.get()))).collect();
    for style in [Style::Pretty, Style::Compact] {
        let doc = JsonDoc { fields: fields.clone(), style };
        if render(&doc) == text {
            return Ok((doc, true));
        }
    }
    Ok((JsonDoc { fields, style: Style::Pretty }, false))
}

/// Removes the whitespace outside strings of valid JSON text.
pub(crate) fn compact(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in raw.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if !c.is_ascii_whitespace() {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

/// A JSONL line as the record upstream's line-by-line `JSON.parse` reads: its value with every
/// object's keys sorted, printed compact (so spacing, escapes, key order and a carriage return at
/// the end do not make another record); a line that does not parse is its text without a carriage
/// return at the end.
pub(crate) fn record_key(line: &str) -> String {
    let text = line.strip_suffix('\r').unwrap_or(line);
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => sorted(value).to_string(),
        Err(_) => text.to_owned(),
    }
}

fn sorted(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> =
                map.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// The JSON text of a string, escaped as `JSON.stringify` and jq escape it.
pub(crate) fn string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// The file bytes of a document: its layout plus one newline.
pub(crate) fn render(doc: &JsonDoc) -> String {
    let mut compact_text = String::from("{");
    for (i, (key, value)) in doc.fields.iter().enumerate() {
        if i > 0 {
            compact_text.push(',');
        }
        compact_text.push_str(&string(key));
        compact_text.push(':');
        compact_text.push_str(value);
    }
    compact_text.push('}');
    let mut out = match doc.style {
        Style::Compact => compact_text,
        Style::Pretty => pretty(&compact_text),
    };
    out.push('\n');
    out
}

fn newline(out: &mut String, depth: usize) {
    out.push('\n');
    for _ in 0..depth {
        out.push_str("  ");
    }
}

/// Two-space pretty printing of compact JSON text, with `{}` and `[]` kept on one line.
fn pretty(compact_text: &str) -> String {
    let mut out = String::with_capacity(compact_text.len() * 2);
    let chars: Vec<char> = compact_text.chars().collect();
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                if matches!(chars.get(i), Some('}' | ']')) {
                    out.push(chars[i]);
                    i += 1;
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(',');
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            other => out.push(other),
        }
    }
    out
}

/// A document as a JSON value, for printing.
pub(crate) fn to_value(doc: &JsonDoc) -> serde_json::Value {
    let text = render(&JsonDoc { fields: doc.fields.clone(), style: Style::Compact });
    serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
}

/// A string field's value; `None` when absent, null or not a string.
pub(crate) fn str_field(doc: &JsonDoc, key: &str) -> Option<String> {
    doc.raw(key).and_then(|raw| serde_json::from_str::<String>(raw).ok())
}

/// Serialises a value as `JSON.stringify` would in `style`: compact, or 2-space pretty, with or
/// without a final newline. Key order is the value's own.
pub(crate) fn render_styled<T: Serialize>(value: &T, style: StoreStyle) -> Result<String> {
    let text = if style.pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    }
    .map_err(|e| Error::Corrupt(format!("value does not serialise: {e}")))?;
    Ok(if style.trailing_newline { text + "\n" } else { text })
}

/// The style a file was written in: pretty when it opens `{\n`, and whether it ends in `\n`.
pub(crate) fn detect_style(text: &str) -> StoreStyle {
    StoreStyle { pretty: text.starts_with("{\n"), trailing_newline: text.ends_with('\n') }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, style: Style) {
        let doc = parse_doc("t.json", text.as_bytes()).unwrap();
        assert_eq!(doc.style, style);
        assert_eq!(render(&doc), text);
    }

    #[test]
    fn upstream_layouts_round_trip_byte_for_byte() {
        check("{\"harness\":\"claude-code\",\"n\":1.50,\"e\":[]}\n", Style::Compact);
        check(
            "{\n  \"b\": \"\\u00e9 \\\"q\\\"\",\n  \"a\": [\n    1,\n    {}\n  ],\n  \"z\": null\n}\n",
            Style::Pretty,
        );
    }

    #[test]
    fn other_layouts_duplicates_and_non_objects_are_refused() {
        for text in ["{\"a\":1}", "{ \"a\": 1 }\n", "{\"a\":1,\"a\":2}\n", "[1]\n", "{\"a\":\n"] {
            assert!(parse_doc("t.json", text.as_bytes()).is_err(), "{text:?}");
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<String>().prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                proptest::collection::btree_map(any::<String>(), inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = parse_doc("fuzz.json", &bytes);
        }

        #[test]
        fn pretty_and_compact_objects_round_trip(
            fields in proptest::collection::btree_map(proptest::prelude::any::<String>(), json_value(), 0..6)
        ) {
            let object = serde_json::Value::Object(fields.into_iter().collect());
            for text in [serde_json::to_string_pretty(&object).unwrap(), object.to_string()] {
                let text = format!("{text}\n");
                let doc = parse_doc("t.json", text.as_bytes()).unwrap();
                proptest::prop_assert_eq!(render(&doc), text);
            }
        }
    }

    #[test]
    fn set_keeps_position_and_appends_new_keys() {
        let mut doc = parse_doc("t.json", b"{\"a\":1,\"b\":2}\n").unwrap();
        doc.set("a", "3".into());
        doc.set("c", string("x"));
        assert_eq!(render(&doc), "{\"a\":3,\"b\":2,\"c\":\"x\"}\n");
        assert_eq!(str_field(&doc, "c").as_deref(), Some("x"));
    }
}
