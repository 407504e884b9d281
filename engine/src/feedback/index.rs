//! A project's comment indexes, kept by the feedback projection in the transaction that moves a
//! comment: pending comments by the order they were added, delivered ones by `deliveredAt`, then
//! that order. A drain pass reads the pending comments and the delivered ones whose delivery
//! went stale, never the addressed or dismissed history.
//!
//! Both are document rows in the project's scope whose value is the comment id; `rebuild`
//! recomputes them and `verify` compares them with its rebuild. Decides nothing.

use hookstate_schema::feedback::CommentRow;
use hookstate_schema::ViewKey;

use super::rules::{status, Status};
use crate::kernel::compat::stamp;
use crate::kernel::doc::{doc_key, read_docs_while};
use crate::kernel::error::Result;
use crate::kernel::storage::ReadTxn;
use crate::legacy::json::str_field;

/// Row kind of the pending index (id: the comment's added seq, 20 digits).
pub(crate) const PENDING: &str = "feedback.pending";
/// Row kind of the delivered index (id: `deliveredAt` in UTC ms, 20 digits, `.`, added seq).
pub(crate) const DELIVERED: &str = "feedback.delivered";
/// Digits of a zero-padded `u64`, so ids sort as the numbers do.
const U64_DIGITS: usize = 20;

fn delivered_id(at_ms: u64, added_seq: u64) -> String {
    format!("{at_ms:0w$}.{added_seq:0w$}", w = U64_DIGITS)
}

/// The index row a comment in this state is listed under: a pending one in the pending index, a
/// delivered one whose `deliveredAt` parses in the delivered index (one that does not parse is
/// never re-surfaced), any other in neither.
pub(crate) fn comment_index_key(scope: &str, row: &CommentRow) -> Option<ViewKey> {
    match status(&row.doc)? {
        Status::Pending => {
            Some(doc_key(scope, PENDING, &format!("{:0w$}", row.added_seq, w = U64_DIGITS)))
        }
        Status::Delivered => {
            let at = str_field(&row.doc, "deliveredAt").and_then(|at| stamp::parse(&at))?;
            Some(doc_key(scope, DELIVERED, &delivered_id(at, row.added_seq)))
        }
        Status::Addressed | Status::Dismissed => None,
    }
}

/// The comments a claim at `now_ms` may take, by id: every pending one, and each delivered one
/// delivered at least `stale_ms` ago (`rules::eligible`).
///
/// # Errors
/// Store errors.
pub(crate) fn drain_comment_ids(
    txn: &dyn ReadTxn,
    scope: &str,
    now_ms: u64,
    stale_ms: u64,
) -> Result<Vec<String>> {
    let mut ids = Vec::new();
    read_docs_while::<String>(txn, scope, PENDING, &mut |_, id| {
        ids.push(id);
        true
    })?;
    if let Some(stale_before) = now_ms.checked_sub(stale_ms) {
        let last = delivered_id(stale_before, u64::MAX);
        read_docs_while::<String>(txn, scope, DELIVERED, &mut |key, id| {
            let stale = key.as_str() <= last.as_str();
            if stale {
                ids.push(id);
            }
            stale
        })?;
    }
    Ok(ids)
}
