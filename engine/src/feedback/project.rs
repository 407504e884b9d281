//! The feedback domain's projection: which rows each event touches, how it changes them, and
//! the result fields it stands for.
//!
//! Total and pure, like every projection: validation happened before the event was appended;
//! and the reader of a project's rows for the decisions. Does not write outside a projection.

use std::collections::BTreeMap;

use hookstate_schema::feedback::{CommentRow, FeedbackEvent, FileKind, FileRow, ProjectMeta};
use hookstate_schema::{Body, Event, ViewKey};
use serde_json::{json, Map, Value};

use super::index;
use super::rules::Inbox;
use crate::kernel::doc::{doc_key, get_doc, put_doc, read_doc, read_docs};
use crate::kernel::error::{Error, Result};
use crate::kernel::project::Projection;
use crate::kernel::storage::ReadTxn;
use crate::kernel::view::ViewAccess;
use crate::legacy::json::string;

/// The feedback domain's projection.
pub(crate) struct FeedbackProjection;

impl Projection for FeedbackProjection {
    fn touched_keys(&self, event: &Event) -> Vec<ViewKey> {
        match &event.content.body {
            Body::Feedback(body) => touched_keys(&event.content.scope, body),
            _ => Vec::new(),
        }
    }

    fn derived_keys(&self, event: &Event, views: &dyn ViewAccess) -> Vec<ViewKey> {
        match &event.content.body {
            Body::Feedback(body) => {
                let scope = &event.content.scope;
                let mut keys = comment_index_keys(views, scope, event.seq, body);
                if matches!(body, FeedbackEvent::CommentAdded { .. }) && makes_project(views, scope)
                {
                    keys.extend(drain_keys(scope));
                }
                keys
            }
            _ => Vec::new(),
        }
    }

    fn apply(&self, views: &mut dyn ViewAccess, event: &Event) {
        if let Body::Feedback(body) = &event.content.body {
            apply(views, &event.content.scope, event.seq, body);
        }
    }

    fn render(&self, body: &Body) -> Map<String, Value> {
        match body {
            Body::Feedback(event) => render(event),
            _ => Map::new(),
        }
    }
}

/// Row kind of a comment (id: the comment id).
pub(crate) const COMMENT: &str = "feedback.comment";
/// Row kind of control, address, heartbeat and adapter (id: the file stem).
pub(crate) const FILE: &str = "feedback.file";
/// Row kind of the project's counters (id: [`META_ID`]).
pub(crate) const META: &str = "feedback.meta";
pub(crate) const META_ID: &str = "meta";
/// Row kind of the project index, kept in [`INDEX_SCOPE`] (id: the project).
pub(crate) const PROJECT: &str = "feedback.project";
/// Row kind of the drainable index, kept in [`INDEX_SCOPE`] (id: the project): the projects
/// a Stop pass may append or report for ([`super::rules::drainable`]).
pub(crate) const DRAINABLE: &str = "feedback.drainable";
/// The files whose rows decide whether a project is drainable.
const DRAIN_FILES: [FileKind; 3] = [FileKind::Control, FileKind::Address, FileKind::Adapter];
/// The scope that lists every project with feedback state.
pub(crate) const INDEX_SCOPE: &str = "moonshine";
/// A feedback scope is this prefix and the project name.
pub(crate) const SCOPE_PREFIX: &str = "moonshine:";

fn index_key(scope: &str) -> Option<ViewKey> {
    scope.strip_prefix(SCOPE_PREFIX).map(|project| doc_key(INDEX_SCOPE, PROJECT, project))
}

fn drainable_key(scope: &str) -> Option<ViewKey> {
    scope.strip_prefix(SCOPE_PREFIX).map(|project| doc_key(INDEX_SCOPE, DRAINABLE, project))
}

/// The rows that decide a project's drainable row, and that row.
fn drain_keys(scope: &str) -> Vec<ViewKey> {
    let mut keys: Vec<ViewKey> =
        DRAIN_FILES.iter().map(|kind| doc_key(scope, FILE, kind.stem())).collect();
    keys.extend(drainable_key(scope));
    keys
}

/// Lists the project in the drainable index, or takes it out, by its files now.
fn update_drainable(views: &mut dyn ViewAccess, scope: &str) {
    let Some(key) = drainable_key(scope) else {
        return;
    };
    let mut files = BTreeMap::new();
    for kind in DRAIN_FILES {
        if let Some(row) = get_doc::<FileRow>(views, &doc_key(scope, FILE, kind.stem())) {
            files.insert(kind, row);
        }
    }
    match super::rules::drainable(&files) {
        true => put_doc(views, key, &true),
        false => {
            if views.get(&key).is_some() {
                views.delete(&key);
            }
        }
    }
}

fn meta_key(scope: &str) -> ViewKey {
    doc_key(scope, META, META_ID)
}

/// Every row `apply` may read or write for this event, but the drain rows of a comment that
/// makes its project (`derived_keys` names those, from the project index row).
fn touched_keys(scope: &str, event: &FeedbackEvent) -> Vec<ViewKey> {
    let mut keys = event_keys(scope, event);
    if moves_files(event) {
        keys.extend(drain_keys(scope));
    }
    keys
}

/// Whether the event changes the project's files, which decide its drainable row.
fn moves_files(event: &FeedbackEvent) -> bool {
    matches!(event, FeedbackEvent::FileWritten { .. } | FeedbackEvent::AddressConsumed { .. })
}

/// Whether a comment added now makes its project: the project index row is absent (a comment
/// or a file makes it, and nothing removes it). Only then can a comment move the drainable row.
/// Files decide that row, and every event that changes the files ([`moves_files`]) moves it
/// after, so once the project exists the row is already what the files say: reading the three
/// file rows again for each comment (what a replay of a large inbox spent a tenth of its
/// projecting on) would only write it again as it is.
fn makes_project(views: &dyn ViewAccess, scope: &str) -> bool {
    index_key(scope).is_some_and(|key| views.get(&key).is_none())
}

fn event_keys(scope: &str, event: &FeedbackEvent) -> Vec<ViewKey> {
    match event {
        FeedbackEvent::CommentAdded { id, .. } => {
            let mut keys = vec![doc_key(scope, COMMENT, id)];
            keys.extend(index_key(scope));
            keys
        }
        FeedbackEvent::CommentClaimed { id, .. } => {
            vec![doc_key(scope, COMMENT, id), meta_key(scope)]
        }
        FeedbackEvent::CommentReplied { id, .. } | FeedbackEvent::CommentDismissed { id } => {
            vec![doc_key(scope, COMMENT, id)]
        }
        FeedbackEvent::FileWritten { file, .. } => {
            let mut keys = vec![doc_key(scope, FILE, file.stem()), meta_key(scope)];
            keys.extend(index_key(scope));
            keys
        }
        FeedbackEvent::AddressConsumed { .. } => {
            vec![doc_key(scope, FILE, FileKind::Address.stem())]
        }
    }
}

/// The comment an event names, if it names one.
fn comment_id(event: &FeedbackEvent) -> Option<&str> {
    match event {
        FeedbackEvent::CommentAdded { id, .. }
        | FeedbackEvent::CommentClaimed { id, .. }
        | FeedbackEvent::CommentReplied { id, .. }
        | FeedbackEvent::CommentDismissed { id } => Some(id),
        FeedbackEvent::FileWritten { .. } | FeedbackEvent::AddressConsumed { .. } => None,
    }
}

/// The comment row after `event`, from the row before it (`None`: no such comment).
fn next_comment(before: Option<CommentRow>, seq: u64, event: &FeedbackEvent) -> Option<CommentRow> {
    if let FeedbackEvent::CommentAdded { doc, .. } = event {
        return Some(CommentRow {
            doc: doc.clone(),
            token: 0,
            holder: None,
            session: None,
            added_seq: seq,
        });
    }
    let mut row = before?;
    match event {
        FeedbackEvent::CommentClaimed { token, holder, session, delivered_at, .. } => {
            row.doc.set("status", string("delivered"));
            row.doc.set("deliveredAt", string(delivered_at));
            row.token = *token;
            row.holder = Some(holder.clone());
            row.session.clone_from(session);
        }
        FeedbackEvent::CommentReplied { reply, addressed_at, .. } => {
            row.doc.set("status", string("addressed"));
            row.doc.set("addressedAt", string(addressed_at));
            row.doc.set("reply", string(reply));
        }
        FeedbackEvent::CommentDismissed { .. } => row.doc.set("status", string("dismissed")),
        _ => {}
    }
    Some(row)
}

/// The comment index rows a comment event moves: the comment's row before and after it.
fn comment_index_keys(
    views: &dyn ViewAccess,
    scope: &str,
    seq: u64,
    event: &FeedbackEvent,
) -> Vec<ViewKey> {
    let Some(id) = comment_id(event) else {
        return Vec::new();
    };
    let before = get_doc::<CommentRow>(views, &doc_key(scope, COMMENT, id));
    let old = before.as_ref().and_then(|row| index::comment_index_key(scope, row));
    let new =
        next_comment(before, seq, event).and_then(|row| index::comment_index_key(scope, &row));
    old.into_iter().chain(new).collect()
}

/// Moves one comment and its index row.
fn apply_comment(
    views: &mut dyn ViewAccess,
    scope: &str,
    seq: u64,
    id: &str,
    event: &FeedbackEvent,
) {
    let key = doc_key(scope, COMMENT, id);
    let before = get_doc::<CommentRow>(views, &key);
    let old = before.as_ref().and_then(|row| index::comment_index_key(scope, row));
    let Some(after) = next_comment(before, seq, event) else {
        return;
    };
    let new = index::comment_index_key(scope, &after);
    if let Some(old) = old.filter(|old| new.as_ref() != Some(old)) {
        views.delete(&old);
    }
    if let Some(new) = new {
        put_doc(views, new, &id);
    }
    put_doc(views, key, &after);
}

/// Applies one feedback event.
fn apply(views: &mut dyn ViewAccess, scope: &str, seq: u64, event: &FeedbackEvent) {
    let moves_drainable = match event {
        FeedbackEvent::CommentAdded { .. } => makes_project(views, scope),
        other => moves_files(other),
    };
    match event {
        FeedbackEvent::CommentAdded { id, .. }
        | FeedbackEvent::CommentReplied { id, .. }
        | FeedbackEvent::CommentDismissed { id } => apply_comment(views, scope, seq, id, event),
        FeedbackEvent::CommentClaimed { id, token, .. } => {
            apply_comment(views, scope, seq, id, event);
            let key = meta_key(scope);
            let mut meta: ProjectMeta = get_doc(views, &key).unwrap_or_default();
            meta.epoch = meta.epoch.max(*token);
            put_doc(views, key, &meta);
        }
        FeedbackEvent::FileWritten { file, doc, request } => {
            put_doc(
                views,
                doc_key(scope, FILE, file.stem()),
                &FileRow { doc: doc.clone(), request: *request },
            );
            let key = meta_key(scope);
            let mut meta: ProjectMeta = get_doc(views, &key).unwrap_or_default();
            meta.requests = meta.requests.max(*request);
            put_doc(views, key, &meta);
        }
        FeedbackEvent::AddressConsumed { request } => {
            let key = doc_key(scope, FILE, FileKind::Address.stem());
            if get_doc::<FileRow>(views, &key).is_some_and(|row| row.request == *request) {
                views.delete(&key);
            }
        }
    }
    if let Some(key) = index_key(scope) {
        if matches!(event, FeedbackEvent::CommentAdded { .. } | FeedbackEvent::FileWritten { .. }) {
            put_doc(views, key, &true);
        }
    }
    if moves_drainable {
        update_drainable(views, scope);
    }
}

/// The result fields an event stands for (a replayed call's result, `hookstate log`'s body).
fn render(event: &FeedbackEvent) -> Map<String, Value> {
    let value = match event {
        FeedbackEvent::CommentAdded { id, .. } => json!({ "id": id, "status": "added" }),
        FeedbackEvent::CommentClaimed { id, token, holder, session, delivered_at } => json!({
            "id": id, "token": token, "holder": holder, "session": session,
            "deliveredAt": delivered_at,
        }),
        FeedbackEvent::CommentReplied { id, token, reply, addressed_at } => json!({
            "id": id, "status": "addressed", "token": token, "reply": reply,
            "addressedAt": addressed_at,
        }),
        FeedbackEvent::CommentDismissed { id } => json!({ "id": id, "status": "dismissed" }),
        FeedbackEvent::FileWritten { file, doc, request } => json!({
            "file": format!("{}.json", file.stem()), "doc": crate::legacy::json::to_value(doc),
            "request": request,
        }),
        FeedbackEvent::AddressConsumed { request } => json!({ "consumed": request }),
    };
    crate::kernel::call::fields(value)
}

/// One project's rows, read in a decision's transaction.
pub(crate) fn read_inbox(txn: &dyn ReadTxn, scope: &str) -> Result<Inbox> {
    let comments = read_docs::<CommentRow>(txn, scope, COMMENT)?;
    let mut files = BTreeMap::new();
    for kind in FileKind::ALL {
        if let Some(row) = read_doc::<FileRow>(txn, scope, FILE, kind.stem())? {
            files.insert(kind, row);
        }
    }
    let meta = read_doc(txn, scope, META, META_ID)?.unwrap_or_default();
    Ok(Inbox { comments, files, meta })
}

/// The rows a drain pass decides on: the project's files and counters, and only the comments a
/// claim at `now_ms` may take (the comment indexes). `rules::decide_drain` reads no other
/// comment: its claims take eligible ones and its heartbeat counts pending ones.
///
/// # Errors
/// [`Error::Corrupt`] for an index row naming no comment; store errors.
pub(crate) fn read_drain_inbox(
    txn: &dyn ReadTxn,
    scope: &str,
    now_ms: u64,
    stale_ms: u64,
) -> Result<Inbox> {
    let mut comments = Vec::new();
    for id in index::drain_comment_ids(txn, scope, now_ms, stale_ms)? {
        let Some(row) = read_doc::<CommentRow>(txn, scope, COMMENT, &id)? else {
            return Err(Error::Corrupt(format!(
                "a comment index of {scope} names comment {id}, which is not in it"
            )));
        };
        comments.push((id, row));
    }
    comments.sort_by_key(|(_, row)| row.added_seq);
    let mut files = BTreeMap::new();
    for kind in FileKind::ALL {
        if let Some(row) = read_doc::<FileRow>(txn, scope, FILE, kind.stem())? {
            files.insert(kind, row);
        }
    }
    let meta = read_doc(txn, scope, META, META_ID)?.unwrap_or_default();
    Ok(Inbox { comments, files, meta })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hookstate_schema::feedback::{JsonDoc, Style};
    use hookstate_schema::ViewRow;

    use super::*;

    fn address(views: &mut BTreeMap<ViewKey, ViewRow>, request: u64) {
        let doc =
            JsonDoc { fields: vec![("requestedAt".into(), "\"t\"".into())], style: Style::Pretty };
        apply(
            views,
            "moonshine:p",
            request,
            &FeedbackEvent::FileWritten { file: FileKind::Address, doc, request },
        );
    }

    #[test]
    fn a_drain_consumes_only_the_address_request_it_saw() {
        let mut views = BTreeMap::new();
        address(&mut views, 1);
        address(&mut views, 2);
        apply(&mut views, "moonshine:p", 3, &FeedbackEvent::AddressConsumed { request: 1 });
        let key = doc_key("moonshine:p", FILE, "address");
        assert_eq!(get_doc::<FileRow>(&views, &key).map(|r| r.request), Some(2));
        apply(&mut views, "moonshine:p", 4, &FeedbackEvent::AddressConsumed { request: 2 });
        assert!(get_doc::<FileRow>(&views, &key).is_none());
        assert!(get_doc::<bool>(&views, &doc_key(INDEX_SCOPE, PROJECT, "p")).is_some());
    }

    /// A comment added to a project that exists names none of the rows that decide the
    /// drainable row (no file row is read for it); the project's first comment does.
    #[test]
    fn only_a_projects_first_comment_names_its_drain_rows() {
        let scope = "moonshine:p";
        let comment = |id: &str| FeedbackEvent::CommentAdded {
            id: id.into(),
            doc: JsonDoc { fields: vec![], style: Style::Pretty },
        };
        let drain = drain_keys(scope);
        let named = |views: &BTreeMap<ViewKey, ViewRow>, id: &str| {
            let mut keys = touched_keys(scope, &comment(id));
            let event = Event {
                seq: 1,
                prev: [0; 32],
                hash: [0; 32],
                content: hookstate_schema::EventContent {
                    at_ms: 0,
                    actor: Default::default(),
                    scope: scope.into(),
                    idem_key: None,
                    body: Body::Feedback(comment(id)),
                    request: None,
                },
            };
            keys.extend(FeedbackProjection.derived_keys(&event, views));
            keys
        };
        let mut views = BTreeMap::new();
        let first = named(&views, "c1");
        assert!(drain.iter().all(|key| first.contains(key)), "{first:?}");
        apply(&mut views, scope, 1, &comment("c1"));
        let later = named(&views, "c2");
        assert!(drain.iter().all(|key| !later.contains(key)), "{later:?}");
    }

    /// One step of a project's history, as the property test draws it.
    #[derive(Debug, Clone)]
    enum Step {
        Comment,
        File(FileKind, &'static str),
        Consume(u64),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            3 => Just(Step::Comment),
            1 => Just(Step::File(FileKind::Adapter, "adapter")),
            1 => Just(Step::File(FileKind::Control, "listen")),
            1 => Just(Step::File(FileKind::Control, "accumulate")),
            1 => Just(Step::File(FileKind::Address, "")),
            1 => (1u64..4).prop_map(Step::Consume),
        ]
    }

    proptest::proptest! {
        /// The drainable row is what the files say after every event that adds a comment or
        /// moves a file (what recomputing it after each of them, as before 2026-12-04, gave):
        /// also when a comment that does not make its project leaves the row alone.
        #[test]
        fn the_drainable_row_follows_the_files_of_every_project_after_every_event(
            steps in proptest::collection::vec(step(), 1..40)
        ) {
            let mut views = BTreeMap::new();
            let scope = "moonshine:p";
            for (n, step) in steps.iter().enumerate() {
                let seq = n as u64 + 1;
                let event = match step {
                    Step::Comment => FeedbackEvent::CommentAdded {
                        id: format!("c{seq}"),
                        doc: JsonDoc { fields: vec![], style: Style::Pretty },
                    },
                    Step::File(file, mode) => FeedbackEvent::FileWritten {
                        file: *file,
                        doc: JsonDoc {
                            fields: vec![("mode".into(), format!("\"{mode}\""))],
                            style: Style::Pretty,
                        },
                        request: seq,
                    },
                    Step::Consume(back) => {
                        FeedbackEvent::AddressConsumed { request: seq.saturating_sub(*back) }
                    }
                };
                apply(&mut views, scope, seq, &event);
                let mut files = BTreeMap::new();
                for kind in DRAIN_FILES {
                    if let Some(row) = get_doc::<FileRow>(&views, &doc_key(scope, FILE, kind.stem())) {
                        files.insert(kind, row);
                    }
                }
                let listed = get_doc::<bool>(&views, &doc_key(INDEX_SCOPE, DRAINABLE, "p")).is_some();
                let expected = crate::feedback::rules::drainable(&files);
                proptest::prop_assert_eq!(listed, expected, "after step {} {:?}", n, step);
            }
        }
    }
}
