//! Pure rules of the proposals mirror: the three-way merge (baseline, file, store) of the queue
//! per entry, of the ledger per line, and of a PROP file by its status, by the domain's own
//! order.
//!
//! - A queue entry leaves only by a resolve or an expiry, which upstream records in the ledger,
//!   or by a brief-cycle's drop of a non-pending entry: an entry a file dropped otherwise is a
//!   stale rewrite, and is kept. `follow_up_count` only grows, so a file whose entry counts less
//!   than the store's is stale too. An entry resolved in the ledger never comes back.
//! - The ledger only grows: lines appended outside are adopted; a baseline line the file lost is
//!   a rewrite, which is refused, never guessed at.
//! - A PROP's status moves one way: a file whose status the store's cannot reach is stale.
//!
//! No IO, no store: `layout.rs` reads the three versions and turns the answers into events.

use std::collections::{HashMap, HashSet};

use hookstate_schema::proposals::QueueDoc;
use hookstate_schema::signals::StoreStyle;
use serde_json::Value;

use super::micro::{entry_map, entry_str, follow_ups, is_pending};
use super::moves::reachable;
use crate::legacy::mirror::{merge, Merge};

/// One record the merge left at the store's version, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kept {
    /// The record (an entry id, a key).
    pub(crate) record: String,
    /// Why the file's version was not adopted.
    pub(crate) why: &'static str,
}

fn kept(record: &str, why: &'static str) -> Kept {
    Kept { record: record.to_owned(), why }
}

/// The entries of a queue by id (the first entry of an id; ids are unique in every queue
/// hookstate or upstream writes).
fn by_id(queue: &QueueDoc) -> HashMap<String, &String> {
    let mut map = HashMap::new();
    for text in &queue.entries {
        let id = entry_str(&entry_map(text), "id").unwrap_or_default().to_owned();
        map.entry(id).or_insert(text);
    }
    map
}

fn entry_id(text: &str) -> String {
    entry_str(&entry_map(text), "id").unwrap_or_default().to_owned()
}

/// Whether the file's version of an entry is not older than the store's: its
/// `follow_up_count` is at least the store's.
fn not_older(file: &str, store: &str) -> bool {
    follow_ups(&entry_map(file)) >= follow_ups(&entry_map(store))
}

/// What the ledger says about queue entries: the ids it records as resolved (in the store, and
/// in the lines this adoption adopts).
#[derive(Debug, Default)]
pub(crate) struct Resolved {
    /// Resolved in the store's ledger.
    pub(crate) stored: HashSet<String>,
    /// Resolved by lines adopted now: the entries leave the store's queue.
    pub(crate) outside: HashSet<String>,
}

impl Resolved {
    fn any(&self, id: &str) -> bool {
        self.stored.contains(id) || self.outside.contains(id)
    }
}

/// The queue after merging a changed file: `None` when the store keeps its queue as it is.
#[derive(Debug, Default)]
pub(crate) struct QueueMerge {
    /// The new queue, when it differs from the store's.
    pub(crate) queue: Option<QueueDoc>,
    /// Entries left at the store's version.
    pub(crate) kept: Vec<Kept>,
}

/// Merges a changed queue file (`file`, with its `style`) into the store's queue per entry.
pub(crate) fn merge_queue(
    base: Option<&QueueDoc>,
    file: &QueueDoc,
    store: &QueueDoc,
    resolved: &Resolved,
) -> QueueMerge {
    let (base_ids, file_ids) = (base.map(by_id).unwrap_or_default(), by_id(file));
    let mut out = QueueMerge::default();
    let mut entries = Vec::with_capacity(store.entries.len() + file.entries.len());
    let mut seen = HashSet::new();
    for text in &store.entries {
        let id = entry_id(text);
        seen.insert(id.clone());
        if resolved.outside.contains(&id) {
            continue;
        }
        let (b, f) = (base_ids.get(&id).copied(), file_ids.get(&id).copied());
        match merge(b, f, Some(text)) {
            Merge::Outside(f) if not_older(f, text) => entries.push(f.clone()),
            Merge::Outside(_) => {
                out.kept
                    .push(kept(&id, "counts fewer follow-ups than the store's: a stale rewrite"));
                entries.push(text.clone());
            }
            // A brief-cycle drops a non-pending entry without a ledger line.
            Merge::Dropped(_) if !is_pending(&entry_map(text)) => {}
            Merge::Both { .. } => {
                out.kept.push(kept(&id, "changed in the file and in the store"));
                entries.push(text.clone());
            }
            Merge::Same | Merge::Dropped(_) => entries.push(text.clone()),
        }
    }
    for text in &file.entries {
        let id = entry_id(text);
        if !seen.insert(id.clone()) {
            continue;
        }
        match merge(base_ids.get(&id).copied(), Some(text), None) {
            Merge::Outside(_) if resolved.any(&id) => {
                out.kept.push(kept(&id, "resolved in the ledger: it never comes back"));
            }
            Merge::Outside(f) => entries.push(f.clone()),
            _ => {}
        }
    }
    let top = match merge(base.map(|b| &b.top), Some(&file.top), Some(&store.top)) {
        Merge::Outside(top) => top.clone(),
        Merge::Both { .. } => {
            out.kept.push(kept("(top-level keys)", "changed in the file and in the store"));
            store.top.clone()
        }
        Merge::Same | Merge::Dropped(_) => store.top.clone(),
    };
    let merged = QueueDoc { top, entries, style: file.style, verbatim: None };
    let same_as_file = merged.top == file.top && merged.entries == file.entries;
    let merged = QueueDoc { verbatim: file.verbatim.clone().filter(|_| same_as_file), ..merged };
    if merged != *store {
        out.queue = Some(merged);
    }
    out
}

/// Why a ledger file cannot be merged: it lost lines the mirror wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rewritten;

fn counts(lines: &[String]) -> HashMap<String, usize> {
    let mut map = HashMap::new();
    for line in lines {
        *map.entry(crate::legacy::json::record_key(line)).or_insert(0) += 1;
    }
    map
}

/// The ledger lines to adopt from a changed ledger file, in file order: every line the store
/// holds none of yet (as many times as the file holds it beyond the baseline and the store).
///
/// # Errors
/// [`Rewritten`] when the file lost a line of the baseline: the ledger only grows.
pub(crate) fn merge_ledger(
    base: Option<&[String]>,
    file: &[String],
    store: &[String],
) -> std::result::Result<Vec<String>, Rewritten> {
    if store.is_empty() {
        // Nothing in the store yet: every line is adopted, as an import would.
        return Ok(file.to_vec());
    }
    let in_file = counts(file);
    let in_base = base.map(counts).unwrap_or_default();
    if in_base.iter().any(|(line, n)| in_file.get(line).copied().unwrap_or(0) < *n) {
        return Err(Rewritten);
    }
    let in_store = counts(store);
    // The surplus of each line is adopted from its last occurrences.
    let mut surplus: HashMap<&str, usize> = in_file
        .iter()
        .map(|(record, n)| {
            let known = in_base
                .get(record)
                .copied()
                .unwrap_or(0)
                .max(in_store.get(record).copied().unwrap_or(0));
            (record.as_str(), n.saturating_sub(known))
        })
        .collect();
    let mut adopted: Vec<String> = Vec::new();
    for line in file.iter().rev() {
        let record = crate::legacy::json::record_key(line);
        if let Some(n) = surplus.get_mut(record.as_str()).filter(|n| **n > 0) {
            *n -= 1;
            adopted.push(line.strip_suffix('\r').unwrap_or(line).to_owned());
        }
    }
    adopted.reverse();
    Ok(adopted)
}

/// What to do with a changed PROP file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PropMerge {
    /// The store keeps its text.
    Keep,
    /// The file's text is adopted.
    Adopt,
    /// The store's text is kept: the file is stale or both changed.
    Conflict(&'static str),
}

/// Merges a changed PROP file (its text and status) with the store's, by the status order.
pub(crate) fn merge_prop(
    base: Option<&str>,
    file: (&str, Option<&str>),
    store: Option<(&str, Option<&str>)>,
) -> PropMerge {
    let Some((store_text, store_status)) = store else {
        return PropMerge::Adopt;
    };
    match merge(base.as_ref(), Some(&file.0), Some(&store_text)) {
        Merge::Outside(_) if reachable(store_status, file.1) => PropMerge::Adopt,
        Merge::Outside(_) => {
            PropMerge::Conflict("its status is behind the store's: a stale rewrite")
        }
        Merge::Both { .. } => PropMerge::Conflict("changed in the file and in the store"),
        Merge::Same | Merge::Dropped(_) => PropMerge::Keep,
    }
}

/// The style a queue file was written in, `None` for upstream's (pretty, with a newline).
pub(crate) fn queue_style(text: &str) -> Option<StoreStyle> {
    let style =
        StoreStyle { pretty: text.starts_with("{\n"), trailing_newline: text.ends_with('\n') };
    (style != StoreStyle { pretty: true, trailing_newline: true }).then_some(style)
}

/// The `micro_id` a `micro-resolved` ledger line resolves.
pub(crate) fn resolved_id(line: &str) -> Option<String> {
    let value: Value = serde_json::from_str(line).ok()?;
    if value.get("type")?.as_str()? != "micro-resolved" {
        return None;
    }
    value.get("micro_id")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, count: i64, status: &str) -> String {
        serde_json::json!({ "id": id, "status": status, "follow_up_count": count }).to_string()
    }

    fn queue(entries: &[String]) -> QueueDoc {
        QueueDoc { entries: entries.to_vec(), ..QueueDoc::default() }
    }

    fn ids(queue: &QueueDoc) -> Vec<String> {
        queue.entries.iter().map(|e| entry_id(e)).collect()
    }

    #[test]
    fn a_stale_rewrite_keeps_the_acknowledged_entry_and_adopts_the_outside_one() {
        let (a, x, y) =
            (entry("A", 0, "pending"), entry("X", 0, "pending"), entry("Y", 0, "pending"));
        // The mirror wrote A and X (X acknowledged); the outside writer read A only.
        let base = queue(&[a.clone(), x.clone()]);
        let file = queue(&[a.clone(), y.clone()]);
        let store = queue(&[a.clone(), x.clone()]);
        let merged = merge_queue(Some(&base), &file, &store, &Resolved::default());
        assert_eq!(ids(&merged.queue.unwrap()), ["A", "X", "Y"]);
    }

    #[test]
    fn entries_leave_only_by_the_ledger_or_a_brief_cycle_drop() {
        let (a, done) = (entry("A", 0, "pending"), entry("D", 0, "approved"));
        let base = queue(&[a.clone(), done.clone()]);
        let store = base.clone();
        let file = queue(&[]);
        let merged = merge_queue(Some(&base), &file, &store, &Resolved::default());
        assert_eq!(ids(&merged.queue.unwrap()), ["A"], "the non-pending entry is dropped");
        let resolved = Resolved { outside: HashSet::from(["A".to_owned()]), ..Resolved::default() };
        let merged = merge_queue(Some(&base), &file, &store, &resolved);
        assert!(ids(&merged.queue.unwrap()).is_empty(), "resolved in the adopted ledger");
    }

    #[test]
    fn follow_ups_never_go_back_and_resolved_entries_never_come_back() {
        let base = queue(&[entry("A", 1, "pending")]);
        let stale = queue(&[entry("A", 0, "pending"), entry("R", 0, "pending")]);
        let resolved = Resolved { stored: HashSet::from(["R".to_owned()]), ..Resolved::default() };
        let merged = merge_queue(Some(&base), &stale, &base, &resolved);
        assert!(merged.queue.is_none(), "nothing adopted: {merged:?}");
        assert_eq!(merged.kept.len(), 2);
        // A nudge written by another JSON library as `2.0` is 2 follow-ups, as to JavaScript.
        let float = entry("A", 2, "pending").replace(":2", ":2.0");
        assert!(float.contains("\"follow_up_count\":2.0"), "{float}");
        let merged = merge_queue(
            Some(&base),
            &queue(std::slice::from_ref(&float)),
            &base,
            &Resolved::default(),
        );
        assert_eq!(merged.queue.unwrap().entries, [float], "adopted: {:?}", merged.kept);
        let nudged = queue(&[entry("A", 2, "pending")]);
        let merged = merge_queue(Some(&base), &nudged, &base, &Resolved::default());
        assert_eq!(merged.queue.unwrap().entries, nudged.entries, "an outside nudge is adopted");
    }

    fn lines(list: &[&str]) -> Vec<String> {
        list.iter().map(|l| (*l).to_owned()).collect()
    }

    #[test]
    fn the_ledger_adopts_appended_lines_and_refuses_a_rewrite() {
        let base = lines(&["a", "b"]);
        let store = lines(&["a", "b", "ours"]);
        let file = lines(&["a", "b", "theirs"]);
        assert_eq!(merge_ledger(Some(&base), &file, &store), Ok(lines(&["theirs"])));
        let file = lines(&["a", "b", "ours", "theirs"]);
        assert_eq!(merge_ledger(Some(&base), &file, &store), Ok(lines(&["theirs"])));
        assert_eq!(merge_ledger(None, &file, &store), Ok(lines(&["theirs"])));
        assert_eq!(merge_ledger(Some(&base), &lines(&["a"]), &store), Err(Rewritten));
        assert_eq!(merge_ledger(Some(&base), &lines(&["x"]), &[]), Ok(lines(&["x"])));
        let twice = lines(&["a", "b", "a"]);
        assert_eq!(merge_ledger(Some(&base), &twice, &store), Ok(lines(&["a"])));
    }

    /// A line rewritten with the same record (CRLF, spacing, escapes, key order) is the same
    /// line: no line is lost, none adopted twice; one appended with a CR is adopted without it.
    #[test]
    fn the_ledger_compares_records_not_bytes() {
        let base = lines(&["{\"type\":\"micro-queued\",\"q\":\"caf\u{e9}\"}", "plain"]);
        let store = base.clone();
        let file = lines(&[
            "{\"q\": \"caf\\u00e9\", \"type\": \"micro-queued\"}\r",
            "plain\r",
            "{\"type\":\"x\"}\r",
        ]);
        assert_eq!(merge_ledger(Some(&base), &file, &store), Ok(lines(&["{\"type\":\"x\"}"])));
    }

    #[test]
    fn a_prop_file_behind_the_store_is_stale() {
        let store = Some(("s", Some("accepted")));
        assert_eq!(
            merge_prop(Some("s"), ("f", Some("proposed")), store),
            PropMerge::Conflict("its status is behind the store's: a stale rewrite")
        );
        assert_eq!(merge_prop(Some("s"), ("f", Some("resolved")), store), PropMerge::Adopt);
        assert_eq!(
            merge_prop(Some("b"), ("f", Some("accepted")), store),
            PropMerge::Conflict("changed in the file and in the store")
        );
        assert_eq!(merge_prop(None, ("f", None), None), PropMerge::Adopt);
    }
}
