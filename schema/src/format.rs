//! The one home of the on-disk format: version, table names, key encoding, the record envelope,
//! the hash chain and the head anchor's text.
//!
//! Any change here bumps [`FORMAT_VERSION`], updates the golden-bytes test and adds a line to
//! `docs/format.md`. Does not do IO: the engine's store hands bytes in and out.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_bytes::{ByteArray, ByteBuf};

use crate::event::{Event, EventContent};
use crate::view::{ViewKey, ViewRow};

/// The format this build writes and the newest it reads. Version 2 added the view row checksum,
/// the request of a keyed call and the time of an idempotency row; version 3 the index rows the
/// hot verbs read (docs/decisions.md, "Costs that grow with the work"); version 4 records that
/// keep the first [`RECORD_CHECK_BYTES`] of their hash instead of all of it (record versions 4
/// and 5); version 5 a checkpoint's view rows in their own table ([`BLOBS_TABLE`]). An older
/// store is upgraded by `hookstate rebuild`, except one of [`FORMAT_VERSION_IN_PLACE`] or later.
pub const FORMAT_VERSION: u16 = 5;
/// The oldest format this build writes without a `rebuild`: a format 3 or 4 store has format 5's
/// views and tables but for [`BLOBS_TABLE`], and its first commit by this build moves its
/// checkpoint rows there and its version to 5 (so that a build that cannot read the shorter
/// records, or finds no checkpoint rows among the meta rows, refuses the store as too new instead
/// of misreading it).
pub const FORMAT_VERSION_IN_PLACE: u16 = 3;
/// The newest record envelope version this build writes and reads: a record whose body is at a
/// shape version above 1 (`upcast.rs`), keeping the first [`RECORD_CHECK_BYTES`] of its hash.
/// Every other record is written with [`RECORD_VERSION_SHAPE_1`].
pub const RECORD_VERSION: u16 = 5;
/// The envelope version of a record whose body is at shape 1 (every kind's first shape).
pub const RECORD_VERSION_SHAPE_1: u16 = 4;
/// The newest envelope version that stores the whole hash (32 bytes): versions 1 to 3 did
/// (3 for a body at a shape above 1); 4 and 5 keep its first [`RECORD_CHECK_BYTES`].
pub const RECORD_VERSION_FULL_HASH: u16 = 3;
/// Bytes of its hash a record of version 4 or 5 keeps. The whole hash follows from the record
/// itself (`prev`, `seq`, content), so the stored part is only a check of the record's bytes on
/// every read (a flipped byte passes it with odds of 2^-64); the chain's strength is the next
/// record's `prev` and the anchored head, which `verify` checks, as before.
pub const RECORD_CHECK_BYTES: usize = 8;
/// The oldest format `rebuild` upgrades; every other verb refuses an older store.
pub const FORMAT_VERSION_UPGRADABLE: u16 = 1;
/// Table of events: `u64 seq -> envelope bytes`.
pub const LOG_TABLE: &str = "log";
/// Table of view rows: `encoded ViewKey -> encoded ViewRow`.
pub const VIEWS_TABLE: &str = "views";
/// Table of store metadata: `&str -> bytes`.
pub const META_TABLE: &str = "meta";
/// Meta key of the format version (`u16`, big-endian).
pub const META_FORMAT: &str = "format";
/// Meta key of the store id (16 random bytes drawn at creation).
pub const META_STORE_ID: &str = "store_id";
/// Meta key of the head (seq big-endian ‖ hash).
pub const META_HEAD: &str = "head";
/// Meta key of the count of anchor writes that failed after a commit (`u64`, big-endian).
pub const META_ANCHOR_WRITE_FAILURES: &str = "anchor_write_failures";
/// Meta key of the events appended per domain since genesis (`u64` big-endian each, in
/// `Body::variant_index` order); absent on a store made before it was kept, until `rebuild`.
pub const META_DOMAIN_EVENTS: &str = "domain_events";
/// Meta key of the latest checkpoint: JSON `{"seq","hash","views_digest","view_rows",
/// "events_per_domain"}`, the same text as the value of the checkpoint's record event.
pub const META_CHECKPOINT: &str = "checkpoint";
/// Meta key of the latest checkpoint's view rows ([`encode_snapshot`]).
pub const META_CHECKPOINT_VIEWS: &str = "checkpoint_views";
/// Meta key of the checkpoint the log starts after once compacted (the same JSON); absent: the
/// log starts at genesis.
pub const META_LOG_BASE: &str = "log_base";
/// Meta key of that checkpoint's view rows.
pub const META_LOG_BASE_VIEWS: &str = "log_base_views";
/// Table of the large values a checkpoint keeps ([`BLOB_KEYS`]): `&str -> bytes`, away from the
/// meta rows every call reads (format 5). In the meta table, a checkpoint's view rows (megabytes
/// on a big store) shared a B-tree leaf with the head, so every call read them whole.
pub const BLOBS_TABLE: &str = "blobs";
/// The meta keys whose values live in [`BLOBS_TABLE`] from format 5; a store of an older format
/// keeps them among its meta rows until its first write by a format 5 build moves them.
pub const BLOB_KEYS: [&str; 2] = [META_CHECKPOINT_VIEWS, META_LOG_BASE_VIEWS];
/// Meta key of the head a restore, backup or copy built the store at (as [`META_HEAD`]): while
/// the head is still this one, a missing head anchor is the build's own, cut between naming the
/// store and anchoring it, and the next write (or `verify`) writes it.
pub const META_BUILT_HEAD: &str = "built_head";
/// Length of a store id.
pub const STORE_ID_BYTES: usize = 16;

const EVENT_HASH_CONTEXT: &str = "hookstate event v1";
const ROW_CHECK_CONTEXT: &str = "hookstate view row v2";
const REQUEST_DIGEST_CONTEXT: &str = "hookstate request v1";
/// Bytes of the checksum in front of every view row.
pub const ROW_CHECK_BYTES: usize = 8;
const GENESIS_HASH_CONTEXT: &str = "hookstate genesis v1";
const SNAPSHOT_DIGEST_CONTEXT: &str = "hookstate checkpoint views v1";
const ANCHOR_MAGIC: &str = "hookstate-anchor";

/// Bytes that cannot be read back as what they claim to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The envelope or content did not decode.
    #[error("undecodable {what}: {detail}")]
    Undecodable {
        /// What was being decoded.
        what: &'static str,
        /// The decoder's message.
        detail: String,
    },
    /// The record was written by a newer format.
    #[error("record format {found} is newer than this build ({supported})")]
    TooNew {
        /// Version found.
        found: u16,
        /// Version this build understands.
        supported: u16,
    },
    /// The record's stored hash does not match its content.
    #[error("event {seq} hash does not match its content")]
    HashMismatch {
        /// The event's seq.
        seq: u64,
    },
    /// A view row's checksum does not match its key and bytes.
    #[error("view row fails its checksum")]
    RowChecksum,
}

/// The chain head: the last event's seq and hash (seq 0 and the genesis hash when empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Last seq, 0 for an empty log.
    pub seq: u64,
    /// Last hash, the genesis hash for an empty log.
    pub hash: [u8; 32],
}

/// The stored record. `hash` is the whole hash in a record of version up to
/// [`RECORD_VERSION_FULL_HASH`], its first [`RECORD_CHECK_BYTES`] after.
#[derive(Serialize, Deserialize)]
struct Envelope {
    v: u16,
    seq: u64,
    prev: ByteArray<32>,
    hash: ByteBuf,
    content: ByteBuf,
}

/// Bytes of a whole hash, as records of version up to [`RECORD_VERSION_FULL_HASH`] store it.
const WHOLE_HASH_BYTES: usize = 32;

/// Whether a record of envelope version `v` holds a body at a shape above 1.
fn shaped_version(v: u16) -> bool {
    v == RECORD_VERSION || v == RECORD_VERSION_FULL_HASH
}

/// The bytes of its hash a record of envelope version `v` stores.
fn stored_hash_bytes(v: u16) -> usize {
    if v <= RECORD_VERSION_FULL_HASH {
        WHOLE_HASH_BYTES
    } else {
        RECORD_CHECK_BYTES
    }
}

/// A fresh hasher of [`event_hash`]: a copy of the one made the first time. Deriving a
/// context's key is a compression of its own, which every event hash paid before.
fn event_hasher() -> blake3::Hasher {
    static MADE: OnceLock<blake3::Hasher> = OnceLock::new();
    MADE.get_or_init(|| blake3::Hasher::new_derive_key(EVENT_HASH_CONTEXT)).clone()
}

/// A fresh hasher of a view row's check, made as [`event_hasher`]'s is.
fn row_check_hasher() -> blake3::Hasher {
    static MADE: OnceLock<blake3::Hasher> = OnceLock::new();
    MADE.get_or_init(|| blake3::Hasher::new_derive_key(ROW_CHECK_CONTEXT)).clone()
}

/// The hash of the link `prev → seq` over the exact content bytes.
#[must_use]
pub fn event_hash(prev: &[u8; 32], seq: u64, content_bytes: &[u8]) -> [u8; 32] {
    let mut hasher = event_hasher();
    hasher.update(prev);
    hasher.update(&seq.to_be_bytes());
    hasher.update(content_bytes);
    *hasher.finalize().as_bytes()
}

/// The `prev` of the first event of the store with this id.
#[must_use]
pub fn genesis_hash(store_id: &[u8; STORE_ID_BYTES]) -> [u8; 32] {
    blake3::derive_key(GENESIS_HASH_CONTEXT, store_id)
}

/// Encodes the content the way it is hashed and stored: positionally, every struct as an array
/// of its fields in declaration order (no field names), enum variants by name. Every build reads
/// both this and the named maps records were written as before 2026-12-02: a derived struct
/// decodes from either, so the stored bytes of old records, and their hashes, stay as they are.
/// Hence the rule for every type a record holds: a field is only ever added at the end, with
/// `#[serde(default)]`, and never removed or reordered; a change beyond that is a new shape
/// (`upcast.rs`).
///
/// # Panics
/// Never in practice: encoding our own plain structs into a `Vec` cannot fail.
#[must_use]
pub fn encode_content(content: &EventContent) -> Vec<u8> {
    rmp_serde::to_vec(content).expect("encoding a plain struct into a Vec cannot fail")
}

/// Builds the stored record of the event at `seq` after `prev`, returning it and its (whole)
/// hash. The envelope is positional too: `[v, seq, prev, hash, content]`, `hash` its first
/// [`RECORD_CHECK_BYTES`].
///
/// # Panics
/// Never in practice: encoding our own plain structs into a `Vec` cannot fail.
#[must_use]
pub fn encode_event(seq: u64, prev: &[u8; 32], content: &EventContent) -> (Vec<u8>, [u8; 32]) {
    let content_bytes = encode_content(content);
    let hash = event_hash(prev, seq, &content_bytes);
    let v = match content.body.shape_version() {
        1 => RECORD_VERSION_SHAPE_1,
        _ => RECORD_VERSION,
    };
    let envelope = Envelope {
        v,
        seq,
        prev: ByteArray::new(*prev),
        hash: ByteBuf::from(&hash[..RECORD_CHECK_BYTES]),
        content: ByteBuf::from(content_bytes),
    };
    let bytes =
        rmp_serde::to_vec(&envelope).expect("encoding a plain struct into a Vec cannot fail");
    (bytes, hash)
}

/// Decodes exactly one MessagePack value from `bytes`; bytes left over are refused, since the
/// hash would not cover them.
fn decode_whole<T: serde::de::DeserializeOwned>(
    what: &'static str,
    bytes: &[u8],
) -> Result<T, FormatError> {
    let mut de = rmp_serde::Deserializer::new(std::io::Cursor::new(bytes));
    let value = serde::Deserialize::deserialize(&mut de)
        .map_err(|e| FormatError::Undecodable { what, detail: e.to_string() })?;
    let used = usize::try_from(de.position()).unwrap_or(usize::MAX);
    if used != bytes.len() {
        let detail = format!("{} trailing bytes", bytes.len().saturating_sub(used));
        return Err(FormatError::Undecodable { what, detail });
    }
    Ok(value)
}

/// Decodes a stored record and checks that its hash matches its content bytes. A body stored
/// at an older shape is upcast to the current one (`upcast.rs`): every reader sees current
/// shapes, and the hash is checked over the stored bytes, never re-encoded ones.
///
/// # Errors
/// [`FormatError::Undecodable`], [`FormatError::TooNew`] or [`FormatError::HashMismatch`].
pub fn decode_event(bytes: &[u8]) -> Result<Event, FormatError> {
    let envelope: Envelope = decode_whole("event envelope", bytes)?;
    if envelope.v > RECORD_VERSION {
        return Err(FormatError::TooNew { found: envelope.v, supported: RECORD_VERSION });
    }
    if envelope.v == 0 {
        return Err(FormatError::Undecodable {
            what: "event envelope",
            detail: "version 0".into(),
        });
    }
    let prev = envelope.prev.into_array();
    let stored = stored_hash_bytes(envelope.v);
    if envelope.hash.len() != stored {
        let detail = format!(
            "record version {} holds {} bytes of its hash, not {stored}",
            envelope.v,
            envelope.hash.len()
        );
        return Err(FormatError::Undecodable { what: "event envelope", detail });
    }
    let hash = event_hash(&prev, envelope.seq, &envelope.content);
    if hash[..stored] != envelope.hash[..] {
        return Err(FormatError::HashMismatch { seq: envelope.seq });
    }
    let content: EventContent = decode_whole("event content", &envelope.content)?;
    check_record_version(envelope.v, &content, &envelope.content)?;
    Ok(Event { seq: envelope.seq, prev, hash, content })
}

/// The envelope version is not hashed, so it must agree with the (hashed) body: versions 3 and 5
/// hold exactly the bodies stored at a shape above 1. The stored shape is read again only for a
/// kind that has shapes above 1.
fn check_record_version(v: u16, content: &EventContent, bytes: &[u8]) -> Result<(), FormatError> {
    let stored = match content.body.shape_version() {
        1 => 1,
        _ => crate::upcast::stored_version(bytes)
            .map_err(|detail| FormatError::Undecodable { what: "event content", detail })?,
    };
    if shaped_version(v) != (stored > 1) {
        let detail = format!("record version {v} holds a body stored at shape {stored}");
        return Err(FormatError::Undecodable { what: "event content", detail });
    }
    Ok(())
}

/// The shape version a stored record's body is at (1 when its kind has none), as stored: below
/// [`crate::Body::shape_version`] of the decoded event when [`decode_event`] upcast it.
///
/// # Errors
/// [`FormatError::Undecodable`].
pub fn stored_shape_version(bytes: &[u8]) -> Result<u16, FormatError> {
    let envelope: Envelope = decode_whole("event envelope", bytes)?;
    crate::upcast::stored_version(&envelope.content)
        .map_err(|detail| FormatError::Undecodable { what: "event content", detail })
}

const KEY_RECORD: u8 = b'r';
const KEY_ITEM: u8 = b'i';
const KEY_QUEUE_META: u8 = b'q';
const KEY_COUNTER: u8 = b'c';
const KEY_SET_MEMBER: u8 = b's';
const KEY_LIST: u8 = b'l';
const KEY_IDEM: u8 = b'k';
const KEY_DOC: u8 = b'd';
const KEY_SEPARATOR: u8 = 0;

fn join_key(tag: u8, parts: &[&str]) -> Vec<u8> {
    // Sized once: a key is encoded for every row an event touches, and growing it part by part
    // reallocated it up to three times.
    let mut out = Vec::with_capacity(1 + parts.iter().map(|part| part.len() + 1).sum::<usize>());
    out.push(tag);
    for part in parts {
        out.extend_from_slice(part.as_bytes());
        out.push(KEY_SEPARATOR);
    }
    out
}

/// Encodes a view key: a tag byte, then each part followed by a NUL. Parts never hold a NUL
/// (ids and scopes are validated), so the encoding is injective and prefixes are ranges.
#[must_use]
pub fn encode_view_key(key: &ViewKey) -> Vec<u8> {
    match key {
        ViewKey::Record { scope, key } => join_key(KEY_RECORD, &[scope, key]),
        ViewKey::Item { scope, queue, item } => join_key(KEY_ITEM, &[scope, queue, item]),
        ViewKey::QueueMeta { scope, queue } => join_key(KEY_QUEUE_META, &[scope, queue]),
        ViewKey::Counter { scope, name } => join_key(KEY_COUNTER, &[scope, name]),
        ViewKey::SetMember { scope, set, member } => {
            join_key(KEY_SET_MEMBER, &[scope, set, member])
        }
        ViewKey::List { scope, name } => join_key(KEY_LIST, &[scope, name]),
        ViewKey::Idem { scope, key } => join_key(KEY_IDEM, &[scope, key]),
        ViewKey::Doc { scope, kind, id } => join_key(KEY_DOC, &[scope, kind, id]),
    }
}

/// The key prefix under which every item of one queue is stored.
#[must_use]
pub fn item_prefix(scope: &str, queue: &str) -> Vec<u8> {
    join_key(KEY_ITEM, &[scope, queue])
}

/// The key prefix under which every document of one kind in one scope is stored.
#[must_use]
pub fn doc_prefix(scope: &str, kind: &str) -> Vec<u8> {
    join_key(KEY_DOC, &[scope, kind])
}

/// The key prefix of every document in every scope.
#[must_use]
pub fn doc_prefix_all() -> Vec<u8> {
    vec![KEY_DOC]
}

/// The key prefix of every queue-meta row.
#[must_use]
pub fn queue_meta_prefix() -> Vec<u8> {
    vec![KEY_QUEUE_META]
}

/// Decodes a view key.
///
/// # Errors
/// [`FormatError::Undecodable`] for an unknown tag, a wrong part count or non-UTF-8 parts.
pub fn decode_view_key(bytes: &[u8]) -> Result<ViewKey, FormatError> {
    let bad = |detail: &str| FormatError::Undecodable { what: "view key", detail: detail.into() };
    let (&tag, rest) = bytes.split_first().ok_or_else(|| bad("empty"))?;
    let body = rest.strip_suffix(&[KEY_SEPARATOR]).ok_or_else(|| bad("no terminator"))?;
    let parts = body
        .split(|b| *b == KEY_SEPARATOR)
        .map(|p| String::from_utf8(p.to_vec()).map_err(|_| bad("not UTF-8")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut parts = parts.into_iter();
    let mut next = || parts.next().ok_or_else(|| bad("too few parts"));
    let key = match tag {
        KEY_RECORD => ViewKey::Record { scope: next()?, key: next()? },
        KEY_ITEM => ViewKey::Item { scope: next()?, queue: next()?, item: next()? },
        KEY_QUEUE_META => ViewKey::QueueMeta { scope: next()?, queue: next()? },
        KEY_COUNTER => ViewKey::Counter { scope: next()?, name: next()? },
        KEY_SET_MEMBER => ViewKey::SetMember { scope: next()?, set: next()?, member: next()? },
        KEY_LIST => ViewKey::List { scope: next()?, name: next()? },
        KEY_IDEM => ViewKey::Idem { scope: next()?, key: next()? },
        KEY_DOC => ViewKey::Doc { scope: next()?, kind: next()?, id: next()? },
        _ => return Err(bad("unknown tag")),
    };
    if parts.next().is_some() {
        return Err(bad("too many parts"));
    }
    Ok(key)
}

fn row_check(key: &[u8], payload: &[u8]) -> [u8; ROW_CHECK_BYTES] {
    let mut hasher = row_check_hasher();
    hasher.update(&(key.len() as u64).to_be_bytes());
    hasher.update(key);
    hasher.update(payload);
    let mut out = [0u8; ROW_CHECK_BYTES];
    out.copy_from_slice(&hasher.finalize().as_bytes()[..ROW_CHECK_BYTES]);
    out
}

/// Encodes the view row stored at the encoded key `key`: a checksum of the key and the payload,
/// then the payload (MessagePack, named fields). The key is in the checksum, so a row copied under
/// another key fails it too.
///
/// # Panics
/// Never in practice: encoding our own plain enums into a `Vec` cannot fail.
#[must_use]
pub fn encode_view_row(key: &[u8], row: &ViewRow) -> Vec<u8> {
    // The payload is written after room for its check, which is filled in last: one buffer.
    let mut out = vec![0u8; ROW_CHECK_BYTES];
    rmp_serde::encode::write_named(&mut out, row)
        .expect("encoding a plain enum into a Vec cannot fail");
    let check = row_check(key, &out[ROW_CHECK_BYTES..]);
    out[..ROW_CHECK_BYTES].copy_from_slice(&check);
    out
}

/// Decodes the view row stored at the encoded key `key`, checking its checksum first.
///
/// # Errors
/// [`FormatError::RowChecksum`] for a row whose bytes or key changed; [`FormatError::Undecodable`].
pub fn decode_view_row(key: &[u8], bytes: &[u8]) -> Result<ViewRow, FormatError> {
    let (check, payload) =
        bytes.split_at_checked(ROW_CHECK_BYTES).ok_or(FormatError::RowChecksum)?;
    if check != row_check(key, payload) {
        return Err(FormatError::RowChecksum);
    }
    decode_whole("view row", payload)
}

/// The digest that binds an idempotency key to its request: the verb, then each argument (its
/// name and values, in a fixed order) and stdin, each length-prefixed so that no two different
/// requests give the same input.
#[must_use]
pub fn request_digest<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key(REQUEST_DIGEST_CONTEXT);
    for part in parts {
        hasher.update(&(part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    *hasher.finalize().as_bytes()
}

/// Encodes the head as 8 bytes of big-endian seq followed by the 32-byte hash.
#[must_use]
pub fn encode_head(head: &Head) -> [u8; 40] {
    let mut out = [0u8; 40];
    out[..8].copy_from_slice(&head.seq.to_be_bytes());
    out[8..].copy_from_slice(&head.hash);
    out
}

/// Decodes the head.
///
/// # Errors
/// [`FormatError::Undecodable`] when the length is not 40.
pub fn decode_head(bytes: &[u8]) -> Result<Head, FormatError> {
    let bad =
        || FormatError::Undecodable { what: "head", detail: format!("{} bytes", bytes.len()) };
    let seq: [u8; 8] = bytes.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
    let hash: [u8; 32] = bytes.get(8..).and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
    Ok(Head { seq: u64::from_be_bytes(seq), hash })
}

/// The anchor file's single line: magic, version, store id, seq and hash.
#[must_use]
pub fn format_anchor(store_id: &[u8; STORE_ID_BYTES], head: &Head) -> String {
    format!("{ANCHOR_MAGIC} v1 {} {} {}\n", to_hex(store_id), head.seq, to_hex(&head.hash))
}

/// Parses an anchor line into the store id and head.
///
/// # Errors
/// [`FormatError::Undecodable`] for anything but one well-formed line.
pub fn parse_anchor(text: &str) -> Result<([u8; STORE_ID_BYTES], Head), FormatError> {
    let bad = |d: &str| FormatError::Undecodable { what: "anchor", detail: d.into() };
    let line = text.strip_suffix('\n').ok_or_else(|| bad("no final newline"))?;
    let fields: Vec<&str> = line.split(' ').collect();
    let [magic, version, id, seq, hash] = fields.as_slice() else {
        return Err(bad("wrong field count"));
    };
    if *magic != ANCHOR_MAGIC || *version != "v1" {
        return Err(bad("unknown magic or version"));
    }
    let store_id = from_hex::<STORE_ID_BYTES>(id).ok_or_else(|| bad("bad store id"))?;
    let canonical_seq = !seq.is_empty()
        && seq.bytes().all(|b| b.is_ascii_digit())
        && (seq.len() == 1 || !seq.starts_with('0'));
    if !canonical_seq {
        return Err(bad("bad seq"));
    }
    let seq = seq.parse::<u64>().map_err(|_| bad("bad seq"))?;
    let hash = from_hex::<32>(hash).ok_or_else(|| bad("bad hash"))?;
    Ok((store_id, Head { seq, hash }))
}

/// View rows as a checkpoint keeps them: each key's bytes and its stored row's bytes.
pub type SnapshotRows = Vec<(Vec<u8>, Vec<u8>)>;

/// Encodes view rows (key and stored row bytes, in key order) as a checkpoint keeps them: each
/// as a u32 big-endian length and the key, then a u32 length and the row.
///
/// # Panics
/// When a key or row is over 4 GiB, which the event and value limits rule out.
#[must_use]
pub fn encode_snapshot(rows: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, row) in rows {
        for part in [key, row] {
            let len = u32::try_from(part.len()).expect("a view row is far below 4 GiB");
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(part);
        }
    }
    out
}

/// Decodes [`encode_snapshot`]'s bytes.
///
/// # Errors
/// [`FormatError::Undecodable`] for bytes cut short.
pub fn decode_snapshot(bytes: &[u8]) -> Result<SnapshotRows, FormatError> {
    let bad = || FormatError::Undecodable { what: "checkpoint views", detail: "cut short".into() };
    let mut rows = Vec::new();
    let mut at = 0usize;
    let part = |at: &mut usize| -> Result<Vec<u8>, FormatError> {
        let len: [u8; 4] =
            bytes.get(*at..*at + 4).and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
        let len = usize::try_from(u32::from_be_bytes(len)).map_err(|_| bad())?;
        let value = bytes.get(*at + 4..*at + 4 + len).ok_or_else(bad)?.to_vec();
        *at += 4 + len;
        Ok(value)
    };
    while at < bytes.len() {
        let key = part(&mut at)?;
        let row = part(&mut at)?;
        rows.push((key, row));
    }
    Ok(rows)
}

/// The digest a checkpoint records of its encoded view rows.
#[must_use]
pub fn snapshot_digest(encoded: &[u8]) -> [u8; 32] {
    blake3::derive_key(SNAPSHOT_DIGEST_CONTEXT, encoded)
}

/// The prefix of every idempotency row's key.
#[must_use]
pub fn idem_prefix() -> Vec<u8> {
    vec![KEY_IDEM]
}

/// Lower-case hex of some bytes.
#[must_use]
pub fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Parses exactly `N` bytes of lower-case hex (the only spelling [`to_hex`] writes).
#[must_use]
pub fn from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let lower_hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if text.len() != N * 2 || !text.bytes().all(lower_hex) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Parses lower-case hex of any even length ([`to_hex`]'s spelling) into its bytes.
#[must_use]
pub fn bytes_from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len() / 2).map(|i| from_hex::<1>(text.get(i * 2..i * 2 + 2)?).map(|b| b[0])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Actor, Body, CoreEvent, Request};
    use crate::proposals::{MicroQueued, ProposalsEvent};

    fn sample_content() -> EventContent {
        EventContent {
            at_ms: 1_764_460_800_000,
            actor: Actor {
                session: Some("s1".into()),
                hook: Some("queue claim".into()),
                pid: Some(42),
                agent: None,
            },
            scope: "default".into(),
            idem_key: None,
            request: None,
            body: Body::Core(CoreEvent::ItemClaimed {
                queue: "q".into(),
                item: "a".into(),
                holder: "h".into(),
                session: Some("s1".into()),
                token: 7,
                lease_until_ms: 1_764_460_830_000,
                delivery: 1,
            }),
        }
    }

    /// Pins the record format: if this changes, log it in docs/format.md, and bump
    /// FORMAT_VERSION unless every earlier build decodes the new bytes (as it did the positional
    /// encoding of 2026-12-02, see [`a_named_record_of_before_2026_12_02_still_decodes`]).
    #[test]
    fn golden_bytes_of_an_event_record() {
        let (bytes, hash) = encode_event(3, &[9u8; 32], &sample_content());
        let golden = concat!(
            "950403c4200909090909090909090909090909090909090909090909090909090909090909c408",
            "0424210c80beeb9cc44d95cf0000019a",
            "d20f280094a27331ab717565756520636c61696d2ac0a764656661756c74c081a4436f726581ab49",
            "74656d436c61696d656497a171a161a168a2733107cf0000019ad20f9d3001",
        );
        assert_eq!(to_hex(&bytes), golden);
        assert_eq!(
            to_hex(&hash),
            "0424210c80beeb9c390d8d8e9a035250fb7638c925e5a891f0a7d1e1ee5e63e7"
        );
        assert_eq!(bytes.len(), 126, "with the whole hash 150 bytes, named 285");
    }

    /// The record of [`golden_bytes_of_an_event_record`] as builds wrote it from 2026-12-02 until
    /// format 4: positional, record version 2, the whole hash.
    const WHOLE_HASH_RECORD: &str = concat!(
        "950203c4200909090909090909090909090909090909090909090909090909090909090909c420",
        "0424210c80beeb9c390d8d8e9a035250fb7638c925e5a891f0a7d1e1ee5e63e7c44d95cf0000019a",
        "d20f280094a27331ab717565756520636c61696d2ac0a764656661756c74c081a4436f726581ab49",
        "74656d436c61696d656497a171a161a168a2733107cf0000019ad20f9d3001",
    );

    /// Stores keep the records of format 3: one with the whole hash decodes to the same event,
    /// any flipped byte of it is refused, and a record whose version and hash length disagree
    /// is undecodable (either way round).
    #[test]
    fn a_record_with_the_whole_hash_still_decodes() {
        let bytes = hex_bytes(WHOLE_HASH_RECORD);
        let (short, hash) = encode_event(3, &[9u8; 32], &sample_content());
        let event = decode_event(&bytes).unwrap();
        assert_eq!(event, decode_event(&short).unwrap());
        assert_eq!(event.hash, hash);
        for index in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[index] ^= 0x01;
            assert!(decode_event(&damaged).is_err(), "flip at {index} went unseen");
        }
        let mut mislabelled = bytes.clone();
        mislabelled[1] = u8::try_from(RECORD_VERSION_SHAPE_1).unwrap();
        let decoded = decode_event(&mislabelled);
        let Err(FormatError::Undecodable { detail, .. }) = decoded else { panic!("{decoded:?}") };
        assert!(detail.contains("32 bytes of its hash, not 8"), "{detail}");
        let mut mislabelled = short.clone();
        mislabelled[1] = 2;
        let decoded = decode_event(&mislabelled);
        let Err(FormatError::Undecodable { detail, .. }) = decoded else { panic!("{decoded:?}") };
        assert!(detail.contains("8 bytes of its hash, not 32"), "{detail}");
    }

    /// The record of [`golden_bytes_of_an_event_record`] as every build wrote it before
    /// 2026-12-02: a named envelope around named content.
    const NAMED_RECORD: &str = concat!(
        "85a17602a373657103a470726576c420090909090909090909090909090909090909090909090909",
        "0909090909090909a468617368c42003c55f140faf20a894b7a81ac740ee2ac777af622a1fac3d1bca",
        "987051aad376a7636f6e74656e74c4bc85a561745f6d73cf0000019ad20f2800a56163746f7284a773",
        "657373696f6ea27331a4686f6f6bab717565756520636c61696da37069642aa56167656e74c0a57363",
        "6f7065a764656661756c74a86964656d5f6b6579c0a4626f647981a4436f726581ab4974656d436c61",
        "696d656487a57175657565a171a46974656da161a6686f6c646572a168a773657373696f6ea27331a5",
        "746f6b656e07ae6c656173655f756e74696c5f6d73cf0000019ad20f9d30a864656c697665727901",
    );

    /// Stores keep their old records: a named record decodes to the same event under its own
    /// hash, and any flipped byte of it is still refused.
    #[test]
    fn a_named_record_of_before_2026_12_02_still_decodes() {
        let bytes = hex_bytes(NAMED_RECORD);
        let event = decode_event(&bytes).unwrap();
        assert_eq!(event.content, sample_content());
        assert_eq!((event.seq, event.prev), (3, [9u8; 32]));
        assert_eq!(
            to_hex(&event.hash),
            "03c55f140faf20a894b7a81ac740ee2ac777af622a1fac3d1bca987051aad376"
        );
        for index in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[index] ^= 0x01;
            assert!(decode_event(&damaged).is_err(), "flip at {index} went unseen");
        }
    }

    /// The positional content holds the body at [`crate::upcast::CONTENT_BODY_INDEX`], where the
    /// shape skim looks for it.
    #[test]
    fn the_body_is_where_the_shape_skim_looks_for_it() {
        let content = sample_content();
        let bytes = encode_content(&content);
        let crate::upcast::Wire::Array(fields) = rmp_serde::from_slice(&bytes).unwrap() else {
            panic!("positional content is an array");
        };
        let body: crate::upcast::Wire =
            rmp_serde::from_slice(&rmp_serde::to_vec(&content.body).unwrap()).unwrap();
        assert_eq!(fields[crate::upcast::CONTENT_BODY_INDEX], body);
    }

    fn hex_bytes(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&text[at..at + 2], 16).unwrap())
            .collect()
    }

    /// Pins the view row format (format 2): an 8-byte checksum of key and payload, then the
    /// payload.
    #[test]
    fn golden_bytes_of_a_view_row() {
        let key = encode_view_key(&ViewKey::Counter { scope: "s".into(), name: "c".into() });
        let bytes = encode_view_row(&key, &ViewRow::Counter { value: 5 });
        assert_eq!(to_hex(&bytes), "ac94e17d2e98e32981a7436f756e74657281a576616c756505");
        assert_eq!(decode_view_row(&key, &bytes).unwrap(), ViewRow::Counter { value: 5 });
    }

    #[test]
    fn a_view_row_with_any_flipped_bit_or_under_another_key_is_refused() {
        let key = encode_view_key(&ViewKey::Record { scope: "s".into(), key: "k".into() });
        let row = ViewRow::Record { value: "\"hello\"".into(), rev: 3 };
        let bytes = encode_view_row(&key, &row);
        for index in 0..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[index] ^= 1 << bit;
                let decoded = decode_view_row(&key, &damaged);
                assert!(decoded.is_err(), "flip of bit {bit} at {index} went unseen");
            }
        }
        let other = encode_view_key(&ViewKey::Record { scope: "s".into(), key: "j".into() });
        assert_eq!(decode_view_row(&other, &bytes), Err(FormatError::RowChecksum));
        assert_eq!(decode_view_row(&key, &bytes[..4]), Err(FormatError::RowChecksum));
    }

    #[test]
    fn a_request_rides_on_the_event_and_an_event_without_one_keeps_its_format_1_content() {
        let plain = sample_content();
        let mut keyed = sample_content();
        keyed.idem_key = Some("k1".into());
        keyed.request = Some(Request::new("kv put".into(), [4; 32], Some("{}".into())));
        let (bytes, _) = encode_event(3, &[9u8; 32], &keyed);
        assert_eq!(decode_event(&bytes).unwrap().content, keyed);
        // Format 1 content had no `request` field: absent, the content holds one field less.
        let fields = |content: &EventContent| match rmp_serde::from_slice(&encode_content(content))
        {
            Ok(crate::upcast::Wire::Array(fields)) => fields.len(),
            other => panic!("positional content is an array: {other:?}"),
        };
        assert_eq!(fields(&plain) + 1, fields(&keyed));
        let digests = [
            request_digest([&b"ab"[..], b"c"]),
            request_digest([&b"a"[..], b"bc"]),
            request_digest([&b"abc"[..]]),
        ];
        assert_ne!(digests[0], digests[1], "parts are length-prefixed");
        assert_ne!(digests[1], digests[2]);
    }

    #[test]
    fn decode_returns_what_was_encoded() {
        let content = sample_content();
        let (bytes, hash) = encode_event(3, &[9u8; 32], &content);
        let event = decode_event(&bytes).unwrap();
        assert_eq!(event, Event { seq: 3, prev: [9u8; 32], hash, content });
    }

    #[test]
    fn any_flipped_byte_is_refused() {
        let (bytes, _) = encode_event(3, &[9u8; 32], &sample_content());
        for index in 0..bytes.len() {
            for bit in [0x01u8, 0x80] {
                let mut damaged = bytes.clone();
                damaged[index] ^= bit;
                let decoded = decode_event(&damaged);
                assert!(decoded.is_err(), "flip of bit {bit:#x} at {index} went unseen");
            }
        }
    }

    #[test]
    fn trailing_bytes_after_a_record_are_refused() {
        let (mut bytes, _) = encode_event(3, &[9u8; 32], &sample_content());
        bytes.push(0xc0);
        let decoded = decode_event(&bytes);
        assert!(matches!(decoded, Err(FormatError::Undecodable { .. })), "{decoded:?}");
    }

    #[test]
    fn newer_record_version_is_refused() {
        let content_bytes = encode_content(&sample_content());
        let envelope = Envelope {
            v: RECORD_VERSION + 1,
            seq: 1,
            prev: ByteArray::new([0; 32]),
            hash: ByteBuf::from(&event_hash(&[0; 32], 1, &content_bytes)[..RECORD_CHECK_BYTES]),
            content: ByteBuf::from(content_bytes),
        };
        let bytes = rmp_serde::to_vec_named(&envelope).unwrap();
        let decoded = decode_event(&bytes);
        assert!(
            matches!(decoded, Err(FormatError::TooNew { found, .. }) if found == RECORD_VERSION + 1),
            "{decoded:?}"
        );
    }

    /// Three `micro_queued` records of one chain, written at shape 1 by the build before shape
    /// versions (an ask with an empty `on_resolve`, an ask with a skill, a plain entry).
    const MICRO_QUEUED_V1: &str = include_str!("../fixtures/micro_queued_v1.hex");
    const MICRO_QUEUED_V1_STORE_ID: [u8; STORE_ID_BYTES] = [0x5a; STORE_ID_BYTES];

    fn v1_records() -> Vec<Vec<u8>> {
        MICRO_QUEUED_V1.lines().map(|line| bytes_from_hex(line).unwrap()).collect()
    }

    fn queued(id: &str, tier: i64, question: &str, options: Option<&[&str]>) -> MicroQueued {
        MicroQueued {
            id: id.into(),
            tier,
            question: question.into(),
            options: options.map(|o| o.iter().map(|&l| l.to_owned()).collect()),
            on_resolve: None,
            ts: String::new(),
        }
    }

    #[test]
    fn golden_shape_1_micro_queued_records_decode_into_shape_2_and_keep_their_chain() {
        let mut ask_empty =
            queued("MP-20261201-1", 1, "Ship the release today?", Some(&["yes", "no"]));
        ask_empty.on_resolve = Some(String::new());
        ask_empty.ts = "2026-12-01T09:00:00Z".into();
        let mut ask_skill = queued("MP-20261201-2", 1, "Which Node line?", Some(&["20.x", "22.x"]));
        ask_skill.on_resolve = Some("/hermit:pin-node {answer}".into());
        ask_skill.ts = "2026-12-01T09:01:00Z".into();
        let mut plain = queued("MP-20261201-3", 2, "Archive the old logs?", None);
        plain.ts = "2026-12-01T09:02:00Z".into();
        let want = [ask_empty, ask_skill, plain];
        let mut prev = genesis_hash(&MICRO_QUEUED_V1_STORE_ID);
        let records = v1_records();
        assert_eq!(records.len(), want.len());
        for (index, (record, want)) in records.iter().zip(want).enumerate() {
            assert_eq!(stored_shape_version(record).unwrap(), 1, "record {index} is shape 1");
            let event = decode_event(record).unwrap();
            assert_eq!(event.seq, index as u64 + 1);
            assert_eq!(event.prev, prev, "record {index} links to the one before");
            assert_eq!(event.content.body, Body::Proposals(ProposalsEvent::MicroQueued(want)));
            assert_eq!(event.content.body.shape_version(), 2);
            prev = event.hash;
        }
        let first = decode_event(&records[0]).unwrap();
        let ProposalsEvent::MicroQueued(ref q) = first_queued(&first.content.body) else {
            unreachable!()
        };
        assert!(q.is_ask(), "an empty on_resolve still made an ask");
        assert_eq!(q.skill(), None);
    }

    fn first_queued(body: &Body) -> ProposalsEvent {
        match body {
            Body::Proposals(event) => event.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn shape_1_fields_are_not_shape_2_without_the_upcaster() {
        // What decoding would do with no upcaster: shape 2 refuses shape 1's `ask` field, and
        // the registry has the step that removes it.
        let event = decode_event(&v1_records()[0]).unwrap();
        let mut fields = crate::upcast::Fields::encode(&first_queued(&event.content.body)).unwrap();
        let Some(crate::upcast::Wire::Map(mut inner)) = fields.take("MicroQueued") else {
            panic!("{fields:?}")
        };
        inner.push((crate::upcast::Wire::Str("ask".into()), crate::upcast::Wire::Bool(true)));
        let as_v1 = crate::upcast::Fields(
            inner
                .into_iter()
                .filter_map(|(k, v)| match k {
                    crate::upcast::Wire::Str(k) if k != "v" => Some((k, v)),
                    _ => None,
                })
                .collect(),
        );
        assert!(as_v1.decode::<MicroQueued>().is_err(), "shape 2 would read shape 1 silently");
        for (kind, version) in [("micro_queued", <MicroQueued as crate::upcast::Shaped>::VERSION)] {
            for from in 1..version {
                assert!(
                    crate::upcast::upcaster("proposals", kind, from).is_some(),
                    "{kind} {from}"
                );
            }
        }
    }

    /// Pins shape 2 of `micro_queued`: record version 3, the fields led by `v: 2`.
    #[test]
    fn golden_bytes_of_a_shape_2_record() {
        let mut content = sample_content();
        let mut q = queued("MP-20261201-1", 1, "Ship?", None);
        q.on_resolve = Some(String::new());
        q.ts = "2026-12-01T09:00:00Z".into();
        content.body = Body::Proposals(ProposalsEvent::MicroQueued(q));
        let (bytes, _) = encode_event(1, &[0u8; 32], &content);
        let envelope: Envelope = decode_whole("event envelope", &bytes).unwrap();
        assert_eq!(envelope.v, RECORD_VERSION);
        let body_bytes = to_hex(&envelope.content);
        let shape_2 = concat!(
            "81a950726f706f73616c7381ab4d6963726f517565756564",
            "87a17602a26964ad4d502d32303236313230312d31",
        );
        assert!(body_bytes.contains(shape_2), "{body_bytes}");
        assert_eq!(stored_shape_version(&bytes).unwrap(), 2);
        assert_eq!(decode_event(&bytes).unwrap().content, content);
        let unshaped = encode_event(1, &[0u8; 32], &sample_content()).0;
        let envelope: Envelope = decode_whole("event envelope", &unshaped).unwrap();
        assert_eq!(envelope.v, RECORD_VERSION_SHAPE_1, "a shape-1 kind keeps its old bytes");
    }

    #[test]
    fn a_shape_newer_than_this_build_is_refused() {
        let mut content = sample_content();
        content.body = Body::Proposals(ProposalsEvent::MicroQueued(queued("MP-1", 1, "q", None)));
        let plain = encode_content(&content);
        // `v` is the first field of the kind: its value is the byte after `a1 76`.
        let at = plain.windows(3).position(|w| w == [0xa1, 0x76, 0x02]).unwrap();
        let mut newer = plain.clone();
        newer[at + 2] = 0x03;
        let envelope = Envelope {
            v: RECORD_VERSION,
            seq: 1,
            prev: ByteArray::new([0; 32]),
            hash: ByteBuf::from(&event_hash(&[0; 32], 1, &newer)[..RECORD_CHECK_BYTES]),
            content: ByteBuf::from(newer),
        };
        let decoded = decode_event(&rmp_serde::to_vec_named(&envelope).unwrap());
        let Err(FormatError::Undecodable { detail, .. }) = decoded else { panic!("{decoded:?}") };
        assert!(detail.contains("shape 3 is newer than this build (2)"), "{detail}");
    }

    #[test]
    fn view_keys_round_trip_and_prefixes_hold() {
        let keys = [
            ViewKey::Record { scope: "s".into(), key: "k".into() },
            ViewKey::Item { scope: "s".into(), queue: "q".into(), item: "i".into() },
            ViewKey::QueueMeta { scope: "s".into(), queue: "q".into() },
            ViewKey::Counter { scope: "s".into(), name: "n".into() },
            ViewKey::SetMember { scope: "s".into(), set: "t".into(), member: "m".into() },
            ViewKey::List { scope: "s".into(), name: "l".into() },
            ViewKey::Idem { scope: "s".into(), key: "k".into() },
            ViewKey::Doc { scope: "s".into(), kind: "d.k".into(), id: "i".into() },
        ];
        for key in keys {
            assert_eq!(decode_view_key(&encode_view_key(&key)).unwrap(), key);
        }
        let item = ViewKey::Item { scope: "s".into(), queue: "q".into(), item: "i".into() };
        assert!(encode_view_key(&item).starts_with(&item_prefix("s", "q")));
        assert!(!encode_view_key(&item).starts_with(&item_prefix("s", "q2")));
        assert!(decode_view_key(b"zs\0").is_err());
        assert!(decode_view_key(b"rs\0k\0x\0").is_err());
    }

    #[test]
    fn anchor_and_head_round_trip() {
        let head = Head { seq: 12, hash: [0xab; 32] };
        assert_eq!(decode_head(&encode_head(&head)).unwrap(), head);
        let text = format_anchor(&[1; STORE_ID_BYTES], &head);
        assert_eq!(parse_anchor(&text).unwrap(), ([1; STORE_ID_BYTES], head));
        assert!(parse_anchor("hookstate-anchor v1 zz 1 00\n").is_err());
        for lenient in
            [text.replace(" 12 ", " +12 "), text.replace(" 12 ", " 012 "), text.to_uppercase()]
        {
            assert!(parse_anchor(&lenient).is_err(), "{lenient:?}");
        }
        assert!(parse_anchor(text.trim_end()).is_err());
    }
}
