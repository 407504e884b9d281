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
    merge_fields(base, file, store, kinds)
}

/// [`merge_object`] from the version the outside writer read ([`read_version`] among `base`
/// and the baselines before it, newest first), so that a stale read never reverts a field.
pub(crate) fn merge_object_from(
    base: Option<&Map<String, Value>>,
    history: &[Map<String, Value>],
    file: &Map<String, Value>,
    store: &Map<String, Value>,
    kinds: Fields,
) -> (Map<String, Value>, Vec<String>) {
    let versions: Vec<&Map<String, Value>> = base.into_iter().chain(history).collect();
    let read = read_version(&versions, file, kinds.counters);
    merge_fields(read, file, store, kinds)
}

fn merge_fields(
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
/// A counter only grows, so the outside writer's increments are the file's value less the value
/// it read, added to the store's (two writers that each added one from the same read both
/// count, even when their files agree); a file at the value it read adds nothing, and one below
/// it went back: adopted while the store still holds the baseline, a conflict once it moved. A
/// counter the mirror never saw is adopted when the store has none, else a conflict.
fn merge_counter(
    base: Option<&Value>,
    file: Option<&Value>,
    store: Option<&Value>,
) -> std::result::Result<Option<Value>, ()> {
    let int = |v: Option<&Value>| v.and_then(Value::as_f64).filter(|x| x.fract() == 0.0);
    match (int(base), int(file), int(store)) {
        (Some(b), Some(f), Some(s)) if f >= b => {
            Ok((f > b).then(|| Value::from(as_count(s + (f - b)))))
        }
        _ => match merge(base, file, store) {
            Merge::Outside(value) => Ok(Some(value.clone())),
            Merge::Both { .. } => Err(()),
            Merge::Same | Merge::Dropped(_) => Ok(None),
        },
    }
}

#[expect(clippy::cast_possible_truncation, reason = "integral, as JSON.parse reads it")]
fn as_count(x: f64) -> i64 {
    x as i64
}

/// The version a lock-less writer read, among the baseline and the ones before it (newest
/// first): the one its file differs from least (a counter below a version's cannot come from
/// it; a counter's step weighs half another field's change), the newest of equals. A writer
/// that read before the mirror's last writes wrote back that older version plus its own change,
/// so merging from it adopts only that change and never reverts what the mirror wrote since.
/// A version the file equals is not the one it read: a writer writes to change something, and
/// a counting writer's one tick on an older version reproduces the next version the mirror
/// wrote (precheck's tick and a mirrored count are the same bytes).
pub(crate) fn read_version<'a>(
    versions: &[&'a Map<String, Value>],
    file: &Map<String, Value>,
    counters: &[&str],
) -> Option<&'a Map<String, Value>> {
    // A counting writer's tick is the change a counter field is expected to show; any other
    // field the writer would have to have rewritten weighs twice.
    let distance = |v: &Map<String, Value>| -> Option<usize> {
        let mut differ = 0;
        for key in v.keys().chain(file.keys().filter(|k| !v.contains_key(*k))) {
            let (old, new) = (v.get(key), file.get(key));
            if old == new {
                continue;
            }
            if counters.contains(&key.as_str()) {
                let num = |x: Option<&Value>| x.and_then(Value::as_f64);
                if let (Some(o), Some(n)) = (num(old), num(new)) {
                    if n < o {
                        return None;
                    }
                }
                differ += 1;
            } else {
                differ += 2;
            }
        }
        Some(differ)
    };
    let mut best: Option<(usize, &Map<String, Value>)> = None;
    for version in versions {
        if let Some(d) = distance(version).filter(|d| *d > 0) {
            if best.is_none_or(|(b, _)| d < b) {
                best = Some((d, version));
            }
        }
    }
    best.map(|(_, v)| v).or_else(|| versions.first().copied())
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
