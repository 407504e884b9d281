//! What a mirror adopts from a moonshine file that a writer outside hookstate changed (the web
//! dev server's create and dismiss, a legacy adapter's claim, a session writing its reply into
//! the comment file, the web's control and address requests, a legacy listener's heartbeat):
//! the three-way merge of one record by the inbox's rules, over documents already parsed.
//!
//! A comment's status only moves forward (pending → delivered → addressed; pending or delivered
//! → dismissed), so the merge adopts the move a file makes past the store's status, and of the
//! file's fields only those that move owns: a dismiss written from a read taken before a claim
//! is a dismiss, whatever `deliveredAt` its stale read held. A file behind the store is a stale
//! copy and never reverts it; a move the store's newer status forbids (a dismiss of a comment
//! the store holds addressed, a reply to a dismissed one) is a conflict, and the store's record
//! stays. The four other files are whole documents: the newer stamp wins. Does not read files or
//! the store.

use hookstate_schema::feedback::{CommentRow, FeedbackEvent, FileKind, FileRow, JsonDoc};

use super::input::check_text;
use super::rules::{status, Status, REPLY_BYTES_MAX, STALE_DELIVERED_MS_DEFAULT};
use crate::kernel::compat::stamp;
use crate::legacy::json::str_field;

/// The holder a claim made by a legacy adapter is recorded for.
pub(crate) const LEGACY_HOLDER: &str = "legacy-adapter";

/// The fields a status move may change; every other field of a comment stays as first written.
const LIFECYCLE: [&str; 4] = ["status", "deliveredAt", "addressedAt", "reply"];

/// What the merge of one record decided: the events that adopt it, and why (a part of) the
/// outside change was not adopted.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Merged {
    pub(crate) events: Vec<FeedbackEvent>,
    pub(crate) conflict: Option<String>,
}

impl Merged {
    fn adopt(events: Vec<FeedbackEvent>) -> Merged {
        Merged { events, conflict: None }
    }

    fn conflict(why: impl Into<String>) -> Merged {
        Merged { events: Vec::new(), conflict: Some(why.into()) }
    }
}

/// What an adoption hands out as it goes, per project: claim tokens and address request numbers
/// continue the store's, and adopted claims without a stamp take the call's time.
#[derive(Debug, Clone)]
pub(crate) struct Counters {
    pub(crate) epoch: u64,
    pub(crate) requests: u64,
    pub(crate) now_ms: u64,
}

fn name(status: Status) -> &'static str {
    match status {
        Status::Pending => "pending",
        Status::Delivered => "delivered",
        Status::Addressed => "addressed",
        Status::Dismissed => "dismissed",
    }
}

/// One comment file: `base` what the mirror last wrote or adopted (`None`: never seen, or
/// unreadable), `file` what the file holds (checked), `store` the store's row.
pub(crate) fn comment(
    id: &str,
    base: Option<&JsonDoc>,
    file: &JsonDoc,
    store: Option<&CommentRow>,
    counters: &mut Counters,
) -> Merged {
    let Some(row) = store else {
        return Merged::adopt(vec![FeedbackEvent::CommentAdded {
            id: id.into(),
            doc: file.clone(),
        }]);
    };
    if *file == row.doc {
        return Merged::default();
    }
    let (Some(theirs), Some(ours)) = (status(file), status(&row.doc)) else {
        return Merged::conflict("the status is not pending, delivered, addressed or dismissed");
    };
    let mut merged = moved(id, base.is_some(), file, row, (theirs, ours), counters);
    if merged.conflict.is_none() {
        if let Some(field) = kept_field_changed(file, &row.doc) {
            merged.conflict =
                Some(format!("{field} was changed outside; a comment keeps it as first written"));
        }
    }
    merged
}

/// The first field other than the lifecycle's whose text differs between two records.
fn kept_field_changed<'a>(file: &'a JsonDoc, store: &'a JsonDoc) -> Option<&'a str> {
    let keys = file.fields.iter().chain(&store.fields).map(|(k, _)| k.as_str());
    keys.filter(|k| !LIFECYCLE.contains(k)).find(|k| file.raw(k) != store.raw(k))
}

/// The status move the file makes past the store's (`theirs` against `ours`).
fn moved(
    id: &str,
    seen: bool,
    file: &JsonDoc,
    row: &CommentRow,
    (theirs, ours): (Status, Status),
    counters: &mut Counters,
) -> Merged {
    // A file behind the store: a stale copy. When the mirror had written a newer one, a writer
    // rewrote the file from an older read, which is reported; never adopted either way.
    let behind = || match seen {
        true => Merged::conflict(format!(
            "the file's {} came from a read older than the store's {}: a stale rewrite",
            name(theirs),
            name(ours)
        )),
        false => Merged::default(),
    };
    match (theirs, ours) {
        (Status::Dismissed, Status::Pending | Status::Delivered) => {
            Merged::adopt(vec![FeedbackEvent::CommentDismissed { id: id.into() }])
        }
        (Status::Dismissed, Status::Addressed) => {
            Merged::conflict("addressed in the store; a dismiss would lose its reply")
        }
        (Status::Addressed, Status::Pending | Status::Delivered) => {
            reply(id, file, row, ours, counters)
        }
        (Status::Addressed, Status::Addressed) => {
            let same = |key| str_field(file, key) == str_field(&row.doc, key);
            if same("reply") && same("addressedAt") {
                Merged::default()
            } else {
                Merged::conflict("the store recorded another reply; it is kept")
            }
        }
        (Status::Addressed, Status::Dismissed) => {
            Merged::conflict("dismissed in the store; the reply is not recorded")
        }
        (Status::Delivered, Status::Pending) => Merged::adopt(vec![claim(id, file, counters)]),
        (Status::Delivered, Status::Delivered) => reclaim(id, file, row, counters, behind),
        (Status::Pending, Status::Pending) | (Status::Dismissed, Status::Dismissed) => {
            Merged::default()
        }
        _ => behind(),
    }
}

/// A legacy adapter's claim: a new token, its `deliveredAt` (the call's time when it wrote none).
fn claim(id: &str, file: &JsonDoc, counters: &mut Counters) -> FeedbackEvent {
    counters.epoch += 1;
    let delivered_at =
        str_field(file, "deliveredAt").unwrap_or_else(|| stamp::stamp_s(counters.now_ms));
    FeedbackEvent::CommentClaimed {
        id: id.into(),
        token: counters.epoch,
        holder: LEGACY_HOLDER.into(),
        session: None,
        delivered_at,
    }
}

/// Both delivered: a legacy adapter re-claimed a comment whose delivery had gone stale (its
/// `deliveredAt` a whole re-delivery window after the store's); a later one within the window
/// came from a read older than the store's claim, which keeps its holder.
fn reclaim(
    id: &str,
    file: &JsonDoc,
    row: &CommentRow,
    counters: &mut Counters,
    behind: impl Fn() -> Merged,
) -> Merged {
    let at = |doc: &JsonDoc| str_field(doc, "deliveredAt");
    if at(file) == at(&row.doc) {
        return Merged::default();
    }
    let parsed = |doc: &JsonDoc| at(doc).and_then(|t| stamp::parse(&t));
    match (parsed(file), parsed(&row.doc)) {
        (Some(theirs), Some(ours)) if theirs >= ours.saturating_add(STALE_DELIVERED_MS_DEFAULT) => {
            Merged::adopt(vec![claim(id, file, counters)])
        }
        (Some(theirs), None) if theirs > 0 => Merged::adopt(vec![claim(id, file, counters)]),
        (Some(theirs), Some(ours)) if theirs > ours => Merged::conflict(format!(
            "claimed in the store with token {} held by {}; the file's claim came from an older \
             read",
            row.token,
            row.holder.as_deref().unwrap_or(LEGACY_HOLDER)
        )),
        _ => behind(),
    }
}

/// A reply written into the comment file: its one-line `reply` and its `addressedAt`, recorded
/// on the store's current claim (claimed for a legacy adapter first when the store still holds
/// the comment pending).
fn reply(
    id: &str,
    file: &JsonDoc,
    row: &CommentRow,
    ours: Status,
    counters: &mut Counters,
) -> Merged {
    let text = str_field(file, "reply").unwrap_or_default();
    if let Err(err) = check_text("reply", &text, REPLY_BYTES_MAX, true) {
        return Merged::conflict(format!("addressed without a valid reply: {err}"));
    }
    let Some(addressed_at) = str_field(file, "addressedAt") else {
        return Merged::conflict("addressed without an addressedAt");
    };
    let mut events = Vec::new();
    let mut token = row.token;
    if ours == Status::Pending {
        let mut delivered = file.clone();
        if str_field(file, "deliveredAt").is_none() {
            delivered.set("deliveredAt", crate::legacy::json::string(&addressed_at));
        }
        events.push(claim(id, &delivered, counters));
        token = counters.epoch;
    }
    events.push(FeedbackEvent::CommentReplied { id: id.into(), token, reply: text, addressed_at });
    Merged::adopt(events)
}

/// The stamp that orders versions of one of the four other files.
fn stamp_of(kind: FileKind, doc: &JsonDoc) -> Option<u64> {
    let field = match kind {
        FileKind::Control => "updatedAt",
        FileKind::Address => "requestedAt",
        FileKind::Heartbeat => "ts",
        FileKind::Adapter => "installedAt",
    };
    str_field(doc, field).and_then(|t| stamp::parse(&t))
}

/// `control.json`, `address.json`, `heartbeat.json` or `adapter.json` (checked): adopted when
/// the store holds none or the file's stamp is not older than the store's (an address request is
/// a new request); the adapter manifest is written only if absent, so the store's first one
/// stays.
pub(crate) fn file(
    kind: FileKind,
    seen: bool,
    file: &JsonDoc,
    store: Option<&FileRow>,
    counters: &mut Counters,
) -> Merged {
    let mut written = || {
        let request = if kind == FileKind::Address {
            counters.requests += 1;
            counters.requests
        } else {
            0
        };
        Merged::adopt(vec![FeedbackEvent::FileWritten { file: kind, doc: file.clone(), request }])
    };
    let Some(row) = store else { return written() };
    if row.doc == *file {
        return Merged::default();
    }
    if kind != FileKind::Adapter && stamp_of(kind, file) >= stamp_of(kind, &row.doc) {
        return written();
    }
    match (seen, kind) {
        (false, _) => Merged::default(),
        (true, FileKind::Adapter) => Merged::conflict("the store's manifest was written first"),
        (true, _) => Merged::conflict("older than the store's: a stale rewrite"),
    }
}

#[cfg(test)]
mod tests {
    use hookstate_schema::feedback::Style;

    use super::*;
    use crate::legacy::json::string;

    fn doc(status: &str, delivered: Option<&str>) -> JsonDoc {
        let at = delivered.map_or_else(|| "null".to_owned(), string);
        JsonDoc {
            fields: vec![
                ("id".into(), string("fb_a")),
                ("status".into(), string(status)),
                ("comment".into(), string("c")),
                ("reply".into(), "null".into()),
                ("deliveredAt".into(), at),
                ("addressedAt".into(), "null".into()),
            ],
            style: Style::Pretty,
        }
    }

    fn row(doc: JsonDoc) -> CommentRow {
        CommentRow { doc, token: 3, holder: Some("s1".into()), session: None, added_seq: 1 }
    }

    fn counters() -> Counters {
        Counters { epoch: 3, requests: 0, now_ms: 1_795_989_052_000 }
    }

    const T: &str = "2026-11-29T21:50:52Z";

    #[test]
    fn a_dismiss_from_a_read_before_a_claim_is_adopted_and_keeps_the_stores_fields() {
        let claimed = doc("delivered", Some(T));
        let stale_dismiss = doc("dismissed", None);
        let merged = comment(
            "fb_a",
            Some(&claimed),
            &stale_dismiss,
            Some(&row(claimed.clone())),
            &mut counters(),
        );
        assert_eq!(
            merged,
            Merged::adopt(vec![FeedbackEvent::CommentDismissed { id: "fb_a".into() }])
        );
    }

    #[test]
    fn a_stale_rewrite_never_reverts_an_acknowledged_status() {
        let mut addressed = doc("addressed", Some(T));
        addressed.set("reply", string("Done."));
        addressed.set("addressedAt", string(T));
        let store = row(addressed.clone());
        for stale in [doc("pending", None), doc("delivered", Some(T)), doc("dismissed", None)] {
            let merged = comment("fb_a", Some(&addressed), &stale, Some(&store), &mut counters());
            assert!(merged.events.is_empty(), "{stale:?} reverted {merged:?}");
            assert!(merged.conflict.is_some(), "{stale:?} is reported");
        }
        // Never seen: a file merely behind the store is silent.
        let behind = comment("fb_a", None, &doc("pending", None), Some(&store), &mut counters());
        assert_eq!(behind, Merged::default());
    }

    #[test]
    fn a_legacy_claim_and_a_reply_written_into_the_file_are_adopted_with_new_tokens() {
        let pending = doc("pending", None);
        let mut n = counters();
        let claimed = comment(
            "fb_a",
            Some(&pending),
            &doc("delivered", Some(T)),
            Some(&row(pending.clone())),
            &mut n,
        );
        assert!(matches!(&claimed.events[..], [FeedbackEvent::CommentClaimed { token: 4, .. }]));
        let mut replied = doc("addressed", Some(T));
        replied.set("reply", string("Done."));
        replied.set("addressedAt", string(T));
        let merged = comment("fb_a", Some(&pending), &replied, Some(&row(pending.clone())), &mut n);
        assert!(
            matches!(
                &merged.events[..],
                [
                    FeedbackEvent::CommentClaimed { token: 5, .. },
                    FeedbackEvent::CommentReplied { token: 5, .. }
                ]
            ),
            "{merged:?}"
        );
        replied.set("reply", string("two\nlines"));
        let bad = comment("fb_a", Some(&pending), &replied, Some(&row(pending.clone())), &mut n);
        assert!(bad.events.is_empty() && bad.conflict.is_some());
    }

    #[test]
    fn a_reclaim_within_the_window_keeps_the_stores_holder() {
        let ours = doc("delivered", Some(T));
        let soon = doc("delivered", Some("2026-11-29T21:51:52Z"));
        let late = doc("delivered", Some("2026-11-29T21:56:52Z"));
        let store = row(ours.clone());
        let merged = comment("fb_a", Some(&ours), &soon, Some(&store), &mut counters());
        assert!(merged.events.is_empty() && merged.conflict.is_some(), "{merged:?}");
        let merged = comment("fb_a", Some(&ours), &late, Some(&store), &mut counters());
        assert!(matches!(&merged.events[..], [FeedbackEvent::CommentClaimed { .. }]));
    }

    #[test]
    fn files_take_the_newer_stamp_and_the_first_manifest() {
        let control = |at: &str| JsonDoc {
            fields: vec![("mode".into(), string("listen")), ("updatedAt".into(), string(at))],
            style: Style::Pretty,
        };
        let store = FileRow { doc: control("2026-11-29T21:50:52.000Z"), request: 0 };
        let newer = file(
            FileKind::Control,
            true,
            &control("2026-11-29T21:50:53.000Z"),
            Some(&store),
            &mut counters(),
        );
        assert_eq!(newer.events.len(), 1);
        let older = file(
            FileKind::Control,
            true,
            &control("2026-11-29T21:50:51.000Z"),
            Some(&store),
            &mut counters(),
        );
        assert!(older.events.is_empty() && older.conflict.is_some());
        let mut n = counters();
        let address = file(FileKind::Address, false, &control("x"), None, &mut n);
        assert!(matches!(&address.events[..], [FeedbackEvent::FileWritten { request: 1, .. }]));
    }
}
