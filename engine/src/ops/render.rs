//! An event's body whole, as JSON: every field the event carries (a record's value, an item's
//! payload, a list row, a comment's text), for `log` and `dump`, each string bounded with an
//! explicit truncation marker.
//!
//! The fields are the schema's own (serde's), so nothing an event holds is left out. JSON
//! values the core primitives keep as text are printed as JSON. Does not read a store.

use hookstate_schema::event::Request;
use hookstate_schema::format::to_hex;
use hookstate_schema::{Body, CoreEvent};
use serde_json::{json, Map, Value};

/// The key of the object that stands for a string cut at the bound: `{"$truncated": {"bytes":
/// <its full length>, "kept": <its first bytes>}}`.
pub(crate) const TRUNCATED_KEY: &str = "$truncated";

/// The body's fields, whole: `{"key": "k", "value": {...}, "rev": 3}` for a `record_put`.
/// Strings (and JSON values kept as text) over `field_bytes_max` bytes are cut, marked.
pub(crate) fn whole_body(body: &Body, field_bytes_max: usize) -> Value {
    let mut fields = variant_fields(body);
    if let Body::Core(event) = body {
        for name in json_text_fields(event) {
            if let Some(Value::String(text)) = fields.get(*name) {
                if text.len() <= field_bytes_max {
                    if let Ok(parsed) = serde_json::from_str::<Value>(text) {
                        fields.insert((*name).to_owned(), parsed);
                    }
                }
            }
        }
    }
    let mut value = Value::Object(fields);
    bound_strings(&mut value, field_bytes_max);
    value
}

/// The request a keyed call's first event records: its verb, digest and kept result.
pub(crate) fn request(request: &Request, field_bytes_max: usize) -> Value {
    let result = request.result.as_ref().map(|text| {
        match serde_json::from_str::<Value>(text).ok().filter(|_| text.len() <= field_bytes_max) {
            Some(parsed) => parsed,
            None => Value::String(text.clone()),
        }
    });
    let mut value =
        json!({ "verb": request.verb, "digest": to_hex(&request.digest()), "result": result });
    bound_strings(&mut value, field_bytes_max);
    value
}

/// The fields of the body's variant: serde writes `{"Core": {"RecordPut": {...}}}`, or a bare
/// variant name for a variant without fields.
fn variant_fields(body: &Body) -> Map<String, Value> {
    let Ok(Value::Object(outer)) = serde_json::to_value(body) else {
        return Map::new();
    };
    match outer.into_iter().next() {
        Some((_, Value::Object(inner))) => match inner.into_iter().next() {
            Some((_, Value::Object(fields))) => fields,
            Some((_, other)) => Map::from_iter([("value".to_owned(), other)]),
            None => Map::new(),
        },
        _ => Map::new(),
    }
}

/// The fields of a core event that hold JSON as text.
fn json_text_fields(event: &CoreEvent) -> &'static [&'static str] {
    match event {
        CoreEvent::RecordPut { .. } => &["value"],
        CoreEvent::ItemPushed { .. } => &["payload"],
        CoreEvent::ListAppended { .. } => &["row"],
        _ => &[],
    }
}

/// Replaces every string over `max` bytes (object keys aside) by a truncation marker.
fn bound_strings(value: &mut Value, max: usize) {
    match value {
        Value::String(text) if text.len() > max => *value = truncated(text, max),
        Value::Array(items) => items.iter_mut().for_each(|v| bound_strings(v, max)),
        Value::Object(map) => map.values_mut().for_each(|v| bound_strings(v, max)),
        _ => {}
    }
}

fn truncated(text: &str, max: usize) -> Value {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    json!({ TRUNCATED_KEY: { "bytes": text.len(), "kept": &text[..end] } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookstate_schema::observer::ObserverEvent;

    #[test]
    fn a_record_put_shows_its_value_as_json() {
        let body = Body::Core(CoreEvent::RecordPut {
            key: "k".into(),
            value: r#"{"a":[1,2]}"#.into(),
            rev: 3,
        });
        assert_eq!(whole_body(&body, 1024), json!({"key": "k", "value": {"a": [1, 2]}, "rev": 3}));
    }

    #[test]
    fn a_variant_without_fields_is_an_empty_object() {
        assert_eq!(whole_body(&Body::Observer(ObserverEvent::TurnCompleted), 1024), json!({}));
    }

    #[test]
    fn long_strings_are_cut_with_a_marker_on_a_char_boundary() {
        let body = Body::Core(CoreEvent::SetAdded { set: "s".into(), member: "ééé".into() });
        let value = whole_body(&body, 3);
        assert_eq!(value["member"][TRUNCATED_KEY], json!({"bytes": 6, "kept": "é"}));
        assert_eq!(value["set"], "s");
        let put =
            Body::Core(CoreEvent::RecordPut { key: "k".into(), value: "[1,2,3]".into(), rev: 1 });
        assert_eq!(whole_body(&put, 4)["value"][TRUNCATED_KEY]["kept"], "[1,2");
    }
}
