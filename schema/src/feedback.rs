//! The feedback domain's events and rows: the moonshine authorship-feedback inbox (comments,
//! control mode, address requests, heartbeat, adapter manifest) of one project per scope.
//!
//! Legacy files are kept as ordered JSON objects ([`JsonDoc`]) so that an export reproduces the
//! exact key order, value text and layout the upstream writers produced. Does not parse or
//! render JSON text; the engine does.

use serde::{Deserialize, Serialize};

/// How a legacy JSON file was laid out: both styles end with one newline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Style {
    /// `JSON.stringify(v, null, 2)` and jq's default output: two-space indent.
    Pretty,
    /// `printf '{"a":1}'`: no whitespace.
    Compact,
}

/// One JSON object with its keys in file order and each value as compact JSON text (string
/// escapes and number spellings kept as written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonDoc {
    /// `(key, compact JSON text of the value)` in file order.
    pub fields: Vec<(String, String)>,
    /// The file's layout.
    pub style: Style,
}

impl JsonDoc {
    /// The raw JSON text of a field.
    #[must_use]
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Sets a field in place (keeping its position), or appends it, as jq's `.key = v` does.
    pub fn set(&mut self, key: &str, raw: String) {
        match self.fields.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = raw,
            None => self.fields.push((key.to_owned(), raw)),
        }
    }
}

/// The four legacy files of an inbox besides the comments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FileKind {
    /// `control.json`: the author's mode request.
    Control,
    /// `address.json`: a one-shot "deliver now" request.
    Address,
    /// `heartbeat.json`: listener liveness.
    Heartbeat,
    /// `adapter.json`: the installed-adapter manifest.
    Adapter,
}

impl FileKind {
    /// Every kind, in file-name order.
    pub const ALL: [FileKind; 4] =
        [FileKind::Adapter, FileKind::Address, FileKind::Control, FileKind::Heartbeat];

    /// The row id and file stem (`control`, ...).
    #[must_use]
    pub fn stem(self) -> &'static str {
        match self {
            FileKind::Control => "control",
            FileKind::Address => "address",
            FileKind::Heartbeat => "heartbeat",
            FileKind::Adapter => "adapter",
        }
    }
}

/// What happened in one project's inbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FeedbackEvent {
    /// A comment record was created (by `feedback add`) or adopted from a legacy file, whatever
    /// its status.
    CommentAdded {
        /// The comment id (`fb_...`).
        id: String,
        /// The whole record.
        doc: JsonDoc,
    },
    /// A comment was claimed: `status` became `delivered` with a new `deliveredAt`.
    CommentClaimed {
        /// The comment id.
        id: String,
        /// The fencing token: the project's claim epoch, which rises on every claim.
        token: u64,
        /// Who holds it.
        holder: String,
        /// The holder's session, when known.
        session: Option<String>,
        /// The `deliveredAt` stamp written (`YYYY-MM-DDTHH:MM:SSZ`).
        delivered_at: String,
    },
    /// The holder of the current token recorded its reply: `status` became `addressed`.
    CommentReplied {
        /// The comment id.
        id: String,
        /// The token presented.
        token: u64,
        /// The one-line reply.
        reply: String,
        /// The `addressedAt` stamp written.
        addressed_at: String,
    },
    /// The author dismissed a pending or delivered comment.
    CommentDismissed {
        /// The comment id.
        id: String,
    },
    /// A whole legacy file was written: control mode, heartbeat, adapter manifest, or an address
    /// request (which then counts as request number `request`).
    FileWritten {
        /// Which file.
        file: FileKind,
        /// Its content.
        doc: JsonDoc,
        /// For an address request: its number, rising per project; 0 otherwise.
        request: u64,
    },
    /// A drain pass consumed address request number `request` (a newer request stays).
    AddressConsumed {
        /// The request the drain saw.
        request: u64,
    },
}

impl FeedbackEvent {
    /// The kind name, as `hookstate log --kind` matches it.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            FeedbackEvent::CommentAdded { .. } => "comment_added",
            FeedbackEvent::CommentClaimed { .. } => "comment_claimed",
            FeedbackEvent::CommentReplied { .. } => "comment_replied",
            FeedbackEvent::CommentDismissed { .. } => "comment_dismissed",
            FeedbackEvent::FileWritten { .. } => "file_written",
            FeedbackEvent::AddressConsumed { .. } => "address_consumed",
        }
    }
}

/// The view row of one comment: its record and its current lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommentRow {
    /// The record, as the legacy file holds it.
    pub doc: JsonDoc,
    /// The token of the current or last claim (0: never claimed through hookstate).
    pub token: u64,
    /// The current or last holder.
    pub holder: Option<String>,
    /// The current or last holder's session.
    pub session: Option<String>,
    /// The seq that added it: claim order.
    pub added_seq: u64,
}

/// The view row of one of the four other files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRow {
    /// The file's content.
    pub doc: JsonDoc,
    /// For `address.json`: the request number.
    pub request: u64,
}

/// A project's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectMeta {
    /// The last fencing token handed out.
    pub epoch: u64,
    /// The last address request number.
    pub requests: u64,
}
