//! Dump, restore and backup: the log as JSON lines, a new store built from such a dump with
//! every hash re-verified, and a consistent copy of a live store.
//!
//! A dump is a header line (`{"hookstate_dump":1,"store_id",...,"genesis","head"}`) and one line
//! per event: its seq, prev, hash, the exact stored record (hex) and the event rendered whole.
//! A restore refuses the first line that is out of order, edited (a record whose hash fails, a
//! rendering that is not its record's) or missing (a dump that ends before its header's head),
//! naming the line, and leaves nothing behind. Does not print; callers hand in the sink.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use hookstate_schema::format::{
    self, encode_head, encode_view_key, encode_view_row, from_hex, genesis_hash, to_hex, Head,
    FORMAT_VERSION, META_ANCHOR_WRITE_FAILURES, META_CHECKPOINT, META_CHECKPOINT_VIEWS,
    META_DOMAIN_EVENTS, META_HEAD, META_LOG_BASE, META_LOG_BASE_VIEWS, STORE_ID_BYTES,
};
use hookstate_schema::{ViewKey, ViewRow, BODY_VARIANTS};
use serde_json::{json, Value};

use crate::engine::{render_event, PROJECTIONS};
use crate::kernel::counts;
use crate::kernel::error::{Error, Result};
use crate::kernel::project;
use crate::kernel::storage::WriteTxn;
use crate::kernel::view::read_head;
use crate::ops::api::Ops;
use crate::ops::{
    DUMP_LINE_BYTES_MAX, DUMP_PROGRESS_EVENTS, DUMP_VERSION, LOG_FIELD_BYTES_DEFAULT,
};
use crate::store::create_filled;

/// What a dump wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpReport {
    /// Events written.
    pub events: u64,
    /// The head the dump ends at.
    pub head: Head,
}

/// What a restore or a backup built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// Events in the new store.
    pub events: u64,
    /// View rows in the new store.
    pub views: u64,
    /// The new store's head: the source's, hash for hash.
    pub head: Head,
}

impl Ops<'_> {
    /// Writes the log as JSON lines from one read snapshot: the header, then every event.
    /// `sink` takes each line (without its newline) and returns `false` to stop (a closed
    /// output); `progress` is told `(events written, events in all)` every
    /// `DUMP_PROGRESS_EVENTS` events and at the end.
    ///
    /// # Errors
    /// [`Error::Refused`] for a compacted log; [`Error::ChainBroken`] for a record that does not
    /// decode or fails its hash; store errors.
    pub fn dump(
        &self,
        sink: &mut dyn FnMut(&str) -> bool,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<DumpReport> {
        let kernel = self.kernel();
        let identity = kernel.identity();
        let txn = kernel.begin_read()?;
        let head = read_head(&*txn)?;
        if let Some(base) = txn.meta(META_LOG_BASE)? {
            let seq = crate::ops::snapshot::Mark::parse(&base)?.head.seq;
            let why = format!(
                "cannot hold this log: its events up to seq {seq} were compacted (a dump replays \
                 from genesis); copy the store with hookstate backup"
            );
            return Err(Error::refused("dump", why));
        }
        let header = json!({
            "hookstate_dump": DUMP_VERSION, "store_id": to_hex(identity.store_id),
            "format": FORMAT_VERSION, "genesis": to_hex(&identity.genesis),
            "head": { "seq": head.seq, "hash": to_hex(&head.hash) },
        });
        if !sink(&header.to_string()) {
            return Ok(DumpReport { events: 0, head });
        }
        let mut written = 0u64;
        crate::ops::snapshot::events_whole(&*txn, 1, head.seq, &mut |seq, record| {
            let event = format::decode_event(record)
                .map_err(|e| Error::ChainBroken { seq, why: e.to_string() })?;
            let line = json!({
                "seq": seq, "prev": to_hex(&event.prev), "hash": to_hex(&event.hash),
                "record": to_hex(record), "event": render_event(&event, LOG_FIELD_BYTES_DEFAULT),
            });
            if !sink(&line.to_string()) {
                return Ok(false);
            }
            written += 1;
            if written.is_multiple_of(DUMP_PROGRESS_EVENTS) {
                progress(written, head.seq);
            }
            Ok(true)
        })?;
        progress(written, head.seq);
        Ok(DumpReport { events: written, head })
    }

    /// Copies this store, as of one read snapshot, into a new store at `target` while writers
    /// go on: the same id, events, views and head (a verified copy, compact: only live pages).
    ///
    /// # Errors
    /// [`Error::BadInput`] when `target` exists; IO and store errors.
    pub fn backup(&self, target: &Path) -> Result<RestoreReport> {
        let kernel = self.kernel();
        let store_id = *kernel.identity().store_id;
        let snapshot = kernel.begin_read()?;
        let head = read_head(&*snapshot)?;
        let failures = snapshot.meta(META_ANCHOR_WRITE_FAILURES)?;
        let mut kept = Vec::new();
        for key in [META_CHECKPOINT, META_CHECKPOINT_VIEWS, META_LOG_BASE, META_LOG_BASE_VIEWS] {
            if let Some(value) = snapshot.meta(key)? {
                kept.push((key, value));
            }
        }
        let (mut events, mut views) = (0u64, 0u64);
        // Counted from the log (after the base it was compacted to, if it was).
        let mut counts = crate::ops::snapshot::log_start(&*snapshot, kernel.genesis())?.counts;
        // A backup is set aside, not used in the store's place: the live store keeps its
        // second anchor (a restore of the backup checks and moves it).
        create_filled(target, &store_id, None, &mut |txn| {
            crate::ops::snapshot::events_whole(&*snapshot, 1, head.seq, &mut |seq, record| {
                let event = format::decode_event(record)
                    .map_err(|e| Error::ChainBroken { seq, why: e.to_string() })?;
                counts[event.content.body.variant_index()] += 1;
                txn.append_event(seq, record)?;
                events += 1;
                Ok(true)
            })?;
            snapshot.views_with_prefix(&[], &mut |key, row| {
                txn.put_view(key, row)?;
                views += 1;
                Ok(true)
            })?;
            txn.put_meta(META_DOMAIN_EVENTS, &counts::encode(&counts))?;
            for (key, value) in &kept {
                txn.put_meta(key, value)?;
            }
            if let Some(failures) = &failures {
                txn.put_meta(META_ANCHOR_WRITE_FAILURES, failures)?;
            }
            txn.put_meta(META_HEAD, &encode_head(&head))?;
            Ok(head)
        })?;
        Ok(RestoreReport { events, views, head })
    }
}

/// `hookstate restore`: builds a new store at `target` from the dump read from `input` (named `source` in
/// errors): every record re-verified, the chain re-linked from the header's genesis, the
/// views projected, all in one transaction; the new store has the dumped store's id and
/// head hash. With `anchor_dir` (`HOOKSTATE_ANCHOR_DIR`) the store's second anchor there is moved
/// to the restored head (created when absent), so the store takes writes at once.
///
/// # Errors
/// [`Error::BadInput`] naming the first bad line of the dump (nothing is left at `target`);
/// [`Error::BadInput`] when `target` exists; [`Error::AnchorMismatch`] when the second anchor
/// is ahead of the dump's head (an older dump: nothing is left at `target`); IO and store errors.
pub fn restore(
    target: &Path,
    source: &Path,
    anchor_dir: Option<&Path>,
    input: &mut dyn BufRead,
) -> Result<RestoreReport> {
    let mut reader = Lines { input, source, number: 0 };
    let header = reader.next_line()?.ok_or_else(|| reader.bad("the dump is empty"))?;
    let (store_id, want_head) = parse_header(&header).map_err(|why| reader.bad(&why))?;
    let mut views = BTreeMap::<ViewKey, ViewRow>::new();
    let mut counts = [0u64; BODY_VARIANTS];
    let mut events = 0u64;
    let head = create_filled(target, &store_id, anchor_dir, &mut |txn| {
        let mut head = Head { seq: 0, hash: genesis_hash(&store_id) };
        while let Some(line) = reader.next_line()? {
            let event = check_line(&line, &head).map_err(|why| reader.bad(&why))?;
            txn.append_event(event.seq, &record_of(&line))?;
            project::apply(&PROJECTIONS, &mut views, &event);
            counts[event.content.body.variant_index()] += 1;
            head = Head { seq: event.seq, hash: event.hash };
            events += 1;
        }
        if head != want_head {
            let why = if head.seq == want_head.seq {
                format!(
                    "the dump's last event (seq {}) is not the head its header names (the same \
                     seq with another hash: the header was edited?)",
                    head.seq
                )
            } else {
                format!(
                    "the dump ends at seq {} but its header's head is seq {} (truncated?)",
                    head.seq, want_head.seq
                )
            };
            return Err(reader.bad_next(&why));
        }
        write_views(txn, &views)?;
        txn.put_meta(META_DOMAIN_EVENTS, &counts::encode(&counts))?;
        txn.put_meta(META_HEAD, &encode_head(&head))?;
        Ok(head)
    })?;
    Ok(RestoreReport { events, views: views.len() as u64, head })
}

fn write_views(txn: &mut dyn WriteTxn, views: &BTreeMap<ViewKey, ViewRow>) -> Result<()> {
    for (key, row) in views {
        let key_bytes = encode_view_key(key);
        txn.put_view(&key_bytes, &encode_view_row(&key_bytes, row))?;
    }
    Ok(())
}

/// The dump's lines, each bounded, counted from 1 for messages.
struct Lines<'a> {
    input: &'a mut dyn BufRead,
    source: &'a Path,
    number: u64,
}

impl Lines<'_> {
    fn next_line(&mut self) -> Result<Option<Value>> {
        let mut bytes = Vec::new();
        let limit = u64::try_from(DUMP_LINE_BYTES_MAX).unwrap_or(u64::MAX) + 1;
        let read = std::io::Read::take(&mut *self.input, limit)
            .read_until(b'\n', &mut bytes)
            .map_err(|e| Error::io("read", self.source, e))?;
        if read == 0 {
            return Ok(None);
        }
        self.number += 1;
        if bytes.last() != Some(&b'\n') {
            let why = match bytes.len() > DUMP_LINE_BYTES_MAX {
                true => format!("is over {DUMP_LINE_BYTES_MAX} bytes"),
                false => "has no newline at its end (a truncated dump)".to_owned(),
            };
            return Err(self.bad(&why));
        }
        serde_json::from_slice(&bytes).map(Some).map_err(|e| self.bad(&format!("is not JSON: {e}")))
    }

    fn bad(&self, why: &str) -> Error {
        Error::bad(format!("dump {} line {}:", self.source.display(), self.number), why)
    }

    fn bad_next(&self, why: &str) -> Error {
        Error::bad(format!("dump {} line {}:", self.source.display(), self.number + 1), why)
    }
}

fn hex_field<const N: usize>(line: &Value, name: &str) -> std::result::Result<[u8; N], String> {
    line[name].as_str().and_then(from_hex::<N>).ok_or_else(|| format!("has no valid {name:?}"))
}

fn parse_header(line: &Value) -> std::result::Result<([u8; STORE_ID_BYTES], Head), String> {
    if line["hookstate_dump"] != json!(DUMP_VERSION) {
        return Err(format!("is not a hookstate dump header (version {DUMP_VERSION})"));
    }
    let format = line["format"].as_u64().ok_or("has no \"format\"")?;
    if format > u64::from(FORMAT_VERSION) {
        return Err(format!("is of format {format}, newer than this build ({FORMAT_VERSION})"));
    }
    let store_id = hex_field::<STORE_ID_BYTES>(line, "store_id")?;
    if hex_field::<32>(line, "genesis")? != genesis_hash(&store_id) {
        return Err("has a genesis that is not its store id's".into());
    }
    let seq = line["head"]["seq"].as_u64().ok_or("has no head seq")?;
    let hash = hex_field::<32>(&line["head"], "hash")?;
    Ok((store_id, Head { seq, hash }))
}

/// The record bytes of a line already checked by [`check_line`].
fn record_of(line: &Value) -> Vec<u8> {
    line["record"].as_str().and_then(format::bytes_from_hex).unwrap_or_default()
}

/// Checks one event line against the chain so far: its record decodes and its hash holds, it
/// is the next seq after `head`, links to `head`'s hash, and its other fields are its record's.
fn check_line(line: &Value, head: &Head) -> std::result::Result<hookstate_schema::Event, String> {
    let record = line["record"]
        .as_str()
        .and_then(format::bytes_from_hex)
        .ok_or("has no valid \"record\"")?;
    if record.len() > DUMP_LINE_BYTES_MAX {
        return Err("has a record over the line bound".into());
    }
    let event = format::decode_event(&record).map_err(|e| format!("has a bad record: {e}"))?;
    let next = head.seq + 1;
    if event.seq != next {
        return Err(format!("holds seq {} where seq {next} comes next (reordered?)", event.seq));
    }
    if event.prev != head.hash {
        return Err(format!("does not link to seq {}'s hash", head.seq));
    }
    if line["seq"].as_u64() != Some(event.seq) {
        return Err("has a \"seq\" that is not its record's".into());
    }
    if hex_field::<32>(line, "prev")? != event.prev || hex_field::<32>(line, "hash")? != event.hash
    {
        return Err("has a \"prev\" or \"hash\" that is not its record's".into());
    }
    let mut rendered = render_event(&event, LOG_FIELD_BYTES_DEFAULT);
    let mut dumped = line["event"].clone();
    // A dump by a build from before the kind's shape changed renders the stored (older) shape's
    // fields; this build renders the upcast ones. The record decides either way; the rest of
    // the rendering must still be the record's.
    let stored =
        format::stored_shape_version(&record).map_err(|e| format!("has a bad record: {e}"))?;
    if stored < event.content.body.shape_version() {
        for value in [&mut rendered, &mut dumped] {
            if let Some(object) = value.as_object_mut() {
                object.remove("data");
            }
        }
    }
    if dumped != rendered {
        return Err("has an \"event\" that is not its record's (edited?)".into());
    }
    Ok(event)
}
