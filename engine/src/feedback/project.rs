//! The feedback domain's projection: which rows each event touches, how it changes them, and
//! the result fields it stands for.
//!
//! Total and pure, like every projection: validation happened before the event was appended;
//! and the reader of a project's rows for the decisions. Does not write outside a projection.

use std::collections::BTreeMap;

use hookstate_schema::feedback::{CommentRow, FeedbackEvent, FileKind, FileRow, ProjectMeta};
use hookstate_schema::{Body, Event, ViewKey};
use serde_json::{json, Map, Value};

use super::rules::Inbox;
use crate::kernel::doc::{doc_key, get_doc, put_doc, read_doc, read_docs};
use crate::kernel::error::Result;
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
/// The scope that lists every project with feedback state.
pub(crate) const INDEX_SCOPE: &str = "moonshine";
/// A feedback scope is this prefix and the project name.
pub(crate) const SCOPE_PREFIX: &str = "moonshine:";

fn index_key(scope: &str) -> Option<ViewKey> {
    scope.strip_prefix(SCOPE_PREFIX).map(|project| doc_key(INDEX_SCOPE, PROJECT, project))
}

fn meta_key(scope: &str) -> ViewKey {
    doc_key(scope, META, META_ID)
}

/// Every row `apply` may read or write for this event.
fn touched_keys(scope: &str, event: &FeedbackEvent) -> Vec<ViewKey> {
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

fn update_comment(views: &mut dyn ViewAccess, key: ViewKey, change: impl FnOnce(&mut CommentRow)) {
    if let Some(mut row) = get_doc::<CommentRow>(views, &key) {
        change(&mut row);
        put_doc(views, key, &row);
    }
}

/// Applies one feedback event.
fn apply(views: &mut dyn ViewAccess, scope: &str, seq: u64, event: &FeedbackEvent) {
    match event {
        FeedbackEvent::CommentAdded { id, doc } => {
            let row = CommentRow {
                doc: doc.clone(),
                token: 0,
                holder: None,
                session: None,
                added_seq: seq,
            };
            put_doc(views, doc_key(scope, COMMENT, id), &row);
        }
        FeedbackEvent::CommentClaimed { id, token, holder, session, delivered_at } => {
            update_comment(views, doc_key(scope, COMMENT, id), |row| {
                row.doc.set("status", string("delivered"));
                row.doc.set("deliveredAt", string(delivered_at));
                row.token = *token;
                row.holder = Some(holder.clone());
                row.session.clone_from(session);
            });
            let key = meta_key(scope);
            let mut meta: ProjectMeta = get_doc(views, &key).unwrap_or_default();
            meta.epoch = meta.epoch.max(*token);
            put_doc(views, key, &meta);
        }
        FeedbackEvent::CommentReplied { id, reply, addressed_at, .. } => {
            update_comment(views, doc_key(scope, COMMENT, id), |row| {
                row.doc.set("status", string("addressed"));
                row.doc.set("addressedAt", string(addressed_at));
                row.doc.set("reply", string(reply));
            });
        }
        FeedbackEvent::CommentDismissed { id } => {
            update_comment(views, doc_key(scope, COMMENT, id), |row| {
                row.doc.set("status", string("dismissed"));
            });
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
}
