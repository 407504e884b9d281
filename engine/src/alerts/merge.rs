//! Pure rules of the alerts mirror: the three-way merge (baseline, file, store) of one legacy
//! JSON object field by field, as the alert-state file and the heartbeat files need it.
//!
//! - A field only the outside writer changed is adopted; one changed on both sides keeps the
//!   store's value and is reported.
//! - Alert maps (`alerts`, `self_eval`) merge per key, and a key the file dropped is kept: a
//!   stale rewrite must not lose an alert the store acknowledged (a recreated budget alert would
//!   be announced twice); the ladder resolves what no longer fires.
//! - Counters (`total_ticks`) add the outside writer's increments to the store's.
//! - Any other field the file dropped is dropped when the store still holds the baseline's value.
//!
//! No IO, no store: the layouts read the three versions and turn the answer into events.

use serde_json::{Map, Value};

use crate::legacy::mirror::{merge, Merge};

/// How the fields of one kind of file merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fields {
    /// Fields that are maps of records, merged per key.
    pub(crate) maps: &'static [&'static str],
    /// Fields that are counters.
    pub(crate) counters: &'static [&'static str],
}

/// The merged object and the fields (or `field.key`s) left at the store's value.
pub(crate) fn merge_object(
    base: Option<&Map<String, Value>>,
    file: &Map<String, Value>,
    store: &Map<String, Value>,
    kinds: Fields,
) -> (Map<String, Value>, Vec<String>) {
    let mut merged = store.clone();
    let mut conflicts = Vec::new();
    let mut keys: Vec<&String> = store.keys().collect();
    keys.extend(file.keys().filter(|k| !store.contains_key(*k)));
    if let Some(base) = base {
        keys.extend(base.keys().filter(|k| !store.contains_key(*k) && !file.contains_key(*k)));
    }
    for key in keys {
        let (b, f, s) = (base.and_then(|m| m.get(key)), file.get(key), store.get(key));
        if kinds.maps.contains(&key.as_str()) {
            let (map, lost) = merge_map(b, f, s);
            conflicts.extend(lost.into_iter().map(|k| format!("{key}.{k}")));
            if let Some(map) = map {
                merged.insert(key.clone(), Value::Object(map));
            }
            continue;
        }
        if kinds.counters.contains(&key.as_str()) {
            match merge_counter(b, f, s) {
                Ok(Some(value)) => {
                    merged.insert(key.clone(), value);
                }
                Ok(None) => {}
                Err(()) => conflicts.push(key.clone()),
            }
            continue;
        }
        match merge(b, f, s) {
            Merge::Outside(value) => {
                merged.insert(key.clone(), value.clone());
            }
            Merge::Dropped(value) if b == Some(value) => {
                merged.shift_remove(key);
            }
            Merge::Both { .. } => conflicts.push(key.clone()),
            Merge::Same | Merge::Dropped(_) => {}
        }
    }
    (merged, conflicts)
}

/// A map of records merged per key: the new map when it changes, and the keys in conflict.
fn merge_map(
    base: Option<&Value>,
    file: Option<&Value>,
    store: Option<&Value>,
) -> (Option<Map<String, Value>>, Vec<String>) {
    let empty = Map::new();
    let (b, f) = (base.and_then(Value::as_object), file.and_then(Value::as_object));
    let Some(s) = store.and_then(Value::as_object) else {
        // The store holds no such map (or another value): the file's map is adopted whole.
        return (f.cloned(), Vec::new());
    };
    let f = f.unwrap_or(&empty);
    let mut merged = s.clone();
    let mut conflicts = Vec::new();
    for (key, value) in f {
        match merge(b.and_then(|m| m.get(key)), Some(value), s.get(key)) {
            Merge::Outside(value) => {
                merged.insert(key.clone(), value.clone());
            }
            Merge::Both { .. } => conflicts.push(key.clone()),
            Merge::Same | Merge::Dropped(_) => {}
        }
    }
    ((merged != *s).then_some(merged), conflicts)
}

/// A counter merged: the outside writer's increments since the baseline added to the store's;
/// `Ok(None)` keeps the store's, `Err` is a conflict (the file went back while the store moved).
fn merge_counter(
    base: Option<&Value>,
    file: Option<&Value>,
    store: Option<&Value>,
) -> std::result::Result<Option<Value>, ()> {
    let int = |v: Option<&Value>| v.and_then(Value::as_f64).filter(|x| x.fract() == 0.0);
    match merge(base, file, store) {
        Merge::Same | Merge::Dropped(_) => Ok(None),
        Merge::Outside(value) => Ok(Some(value.clone())),
        Merge::Both { .. } => match (int(base), int(file), int(store)) {
            (Some(b), Some(f), Some(s)) if f > b => {
                #[expect(
                    clippy::cast_possible_truncation,
                    reason = "integral, as JSON.parse reads it"
                )]
                let sum = (s + (f - b)) as i64;
                Ok(Some(Value::from(sum)))
            }
            _ => Err(()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const STATE: Fields = Fields { maps: &["alerts"], counters: &["total_ticks"] };

    fn obj(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn fields_merge_by_who_changed_them() {
        let base = obj(json!({ "alerts": { "a": 1, "b": 1 }, "total_ticks": 10, "x": 1, "y": 1 }));
        let store =
            obj(json!({ "alerts": { "a": 2, "b": 1, "c": 1 }, "total_ticks": 12, "x": 1, "y": 1 }));
        let file = obj(json!({ "alerts": { "a": 1, "d": 1 }, "total_ticks": 11, "x": 2 }));
        let (merged, conflicts) = merge_object(Some(&base), &file, &store, STATE);
        assert_eq!(
            Value::Object(merged),
            json!({ "alerts": { "a": 2, "b": 1, "c": 1, "d": 1 }, "total_ticks": 13, "x": 2 }),
            "b kept though the file dropped it; y dropped outside; one outside tick added"
        );
        assert!(conflicts.is_empty(), "{conflicts:?}");
        let clash = obj(json!({ "alerts": { "a": 3 }, "total_ticks": 9, "x": 1, "y": 1 }));
        let (merged, conflicts) = merge_object(Some(&base), &clash, &store, STATE);
        assert_eq!(conflicts, ["alerts.a", "total_ticks"]);
        assert_eq!(merged["alerts"]["a"], 2, "the store's value kept");
    }

    #[test]
    fn a_first_sight_adopts_what_only_the_file_holds() {
        let store = obj(json!({ "a": 1 }));
        let file = obj(json!({ "a": 1, "b": 2 }));
        let (merged, conflicts) = merge_object(None, &file, &store, STATE);
        assert_eq!(Value::Object(merged), json!({ "a": 1, "b": 2 }));
        assert!(conflicts.is_empty());
    }
}
