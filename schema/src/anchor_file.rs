//! The head anchor file's bytes: two checked slots in separate 4 KiB blocks, so a commit can
//! move the anchor with one write in place and no sync.
//!
//! Each slot holds one anchor line ([`crate::format::format_anchor`]) followed by a check of it
//! and zero padding. A writer writes the slot that does not hold the newest anchor, so the
//! newest one is never what a write is changing: a cut (or a reader racing the write) finds the
//! slot being written whole or torn, and a torn slot fails its check and is passed over. The
//! file then says an older head, which an anchor may (it may lag the log, never lead it). The
//! one assumption is the one every in-place format makes: a device does not tear a 4 KiB block
//! it was not writing, so of two slots in two blocks at most the one in flight is torn.
//!
//! A file that is not exactly [`ANCHOR_FILE_BYTES`] long is read as the single line earlier
//! releases wrote (and tests and operators may still write); the first commit replaces it with a
//! slotted file. Does not do IO.

use crate::format::{parse_anchor, to_hex};

/// Bytes of one slot: an anchor line (at most 139 bytes), a space, its check, zero padding.
pub const ANCHOR_SLOT_BYTES: usize = 256;
/// Where the second slot starts: a 4 KiB block of its own.
pub const ANCHOR_SLOT_STRIDE: usize = 4096;
/// Slots in a file.
pub const ANCHOR_SLOTS: usize = 2;
/// The length of a slotted anchor file.
pub const ANCHOR_FILE_BYTES: usize = ANCHOR_SLOT_STRIDE + ANCHOR_SLOT_BYTES;
/// Bytes of a slot's check (a keyed blake3 of its line), written as hex.
const CHECK_BYTES: usize = 8;
const CHECK_CONTEXT: &str = "hookstate anchor slot v1";

/// Where slot `index` starts in the file.
#[must_use]
pub fn slot_offset(index: usize) -> usize {
    index * ANCHOR_SLOT_STRIDE
}

fn check(line: &str) -> String {
    to_hex(&blake3::derive_key(CHECK_CONTEXT, line.as_bytes())[..CHECK_BYTES])
}

/// Encodes `line` (an anchor line, newline included) as one slot; `None` when it does not fit.
#[must_use]
pub fn encode_slot(line: &str) -> Option<Vec<u8>> {
    let body = line.strip_suffix('\n')?;
    let text = format!("{body} {}\n", check(line));
    (text.len() <= ANCHOR_SLOT_BYTES).then(|| {
        let mut slot = text.into_bytes();
        slot.resize(ANCHOR_SLOT_BYTES, 0);
        slot
    })
}

/// The anchor line a slot ([`ANCHOR_SLOT_BYTES`] bytes) holds, newline included; `None` for a
/// torn, empty or edited slot, or bytes of another length.
#[must_use]
pub fn decode_slot(slot: &[u8]) -> Option<String> {
    if slot.len() != ANCHOR_SLOT_BYTES {
        return None;
    }
    let end = slot.iter().position(|&b| b == b'\n')?;
    if slot.get(end + 1..)?.iter().any(|&b| b != 0) {
        return None;
    }
    let text = std::str::from_utf8(slot.get(..end)?).ok()?;
    let (body, found) = text.rsplit_once(' ')?;
    let line = format!("{body}\n");
    (found == check(&line)).then_some(line)
}

/// A whole slotted file holding `line` in every slot: what a writer creates (or replaces a file
/// of another shape with) when there is no slotted file to write in place; `None` when the line
/// does not fit a slot.
#[must_use]
pub fn encode_file(line: &str) -> Option<Vec<u8>> {
    let slot = encode_slot(line)?;
    let mut file = vec![0; ANCHOR_FILE_BYTES];
    for index in 0..ANCHOR_SLOTS {
        file.get_mut(slot_offset(index)..slot_offset(index) + ANCHOR_SLOT_BYTES)?
            .copy_from_slice(&slot);
    }
    Some(file)
}

/// A write into an anchor file: its offset and bytes.
pub type SlotWrite = (usize, Vec<u8>);

/// What a slotted file's bytes say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slotted {
    /// The newest anchor.
    Newest {
        /// Its line, newline included.
        line: String,
        /// The slot that holds it: the one a writer leaves alone.
        slot: usize,
    },
    /// Why the file says no anchor: no slot is intact, or intact slots disagree on the store or
    /// hold a line that does not parse (neither is anything a writer leaves).
    Unusable(&'static str),
}

/// Reads the slots of a file of [`ANCHOR_FILE_BYTES`] bytes (`file` is the whole file).
#[must_use]
pub fn read_slots(file: &[u8]) -> Slotted {
    let mut newest: Option<(String, usize, u64)> = None;
    let mut store = None;
    for index in 0..ANCHOR_SLOTS {
        let start = slot_offset(index);
        let Some(line) = file.get(start..start + ANCHOR_SLOT_BYTES).and_then(decode_slot) else {
            continue;
        };
        let Ok((id, head)) = parse_anchor(&line) else {
            return Slotted::Unusable("an intact slot holds a line that does not parse");
        };
        if store.is_some_and(|seen| seen != id) {
            return Slotted::Unusable("its slots name two stores");
        }
        store = Some(id);
        if newest.as_ref().is_none_or(|(_, _, seq)| head.seq > *seq) {
            newest = Some((line, index, head.seq));
        }
    }
    match newest {
        Some((line, slot, _)) => Slotted::Newest { line, slot },
        None => Slotted::Unusable("no slot is intact"),
    }
}

/// The write that moves a slotted file (`file`, whole) to `line`: the offset and the slot's
/// bytes, into the slot that does not hold the newest anchor. `None` when the file is not a
/// usable slotted file or the line does not fit; the caller then replaces the file whole.
#[must_use]
pub fn next_write(file: &[u8], line: &str) -> Option<SlotWrite> {
    if file.len() != ANCHOR_FILE_BYTES {
        return None;
    }
    let Slotted::Newest { slot, .. } = read_slots(file) else {
        return None;
    };
    let target = (slot + 1) % ANCHOR_SLOTS;
    Some((slot_offset(target), encode_slot(line)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{format_anchor, Head, STORE_ID_BYTES};

    fn line(seq: u64) -> String {
        let hash = blake3::hash(&seq.to_be_bytes());
        format_anchor(&[7; STORE_ID_BYTES], &Head { seq, hash: *hash.as_bytes() })
    }

    fn newest(file: &[u8]) -> Option<String> {
        match read_slots(file) {
            Slotted::Newest { line, .. } => Some(line),
            Slotted::Unusable(_) => None,
        }
    }

    fn apply(file: &mut [u8], at: usize, bytes: &[u8]) {
        file[at..at + bytes.len()].copy_from_slice(bytes);
    }

    #[test]
    fn a_slot_round_trips_and_no_torn_prefix_reads_as_a_third_line() {
        let text = line(u64::MAX);
        let slot = encode_slot(&text).unwrap();
        assert_eq!(decode_slot(&slot), Some(text.clone()));
        let old = encode_slot(&line(41)).unwrap();
        for cut in 1..ANCHOR_SLOT_BYTES {
            let mut torn = old.clone();
            torn[..cut].copy_from_slice(&slot[..cut]);
            let decoded = decode_slot(&torn);
            let whole =
                decoded.is_none() || decoded == Some(line(41)) || decoded == Some(text.clone());
            assert!(whole, "cut {cut}: {decoded:?}");
        }
        assert_eq!(decode_slot(&vec![0; ANCHOR_SLOT_BYTES]), None);
        let mut flipped = slot.clone();
        flipped[30] ^= 1;
        assert_eq!(decode_slot(&flipped), None);
    }

    #[test]
    fn the_newest_intact_slot_wins_and_writes_go_to_the_other() {
        let mut file = encode_file(&line(1)).unwrap();
        let mut at = Vec::new();
        for seq in 2..6 {
            let (offset, bytes) = next_write(&file, &line(seq)).unwrap();
            apply(&mut file, offset, &bytes);
            at.push(offset);
            assert_eq!(newest(&file), Some(line(seq)));
        }
        assert_eq!(at, [slot_offset(1), 0, slot_offset(1), 0]);
        // Slots of two stores, or an intact line that does not parse, are nothing a writer left.
        let other = format_anchor(&[8; STORE_ID_BYTES], &Head { seq: 9, hash: [0; 32] });
        apply(&mut file, slot_offset(1), &encode_slot(&other).unwrap());
        assert_eq!(read_slots(&file), Slotted::Unusable("its slots name two stores"));
        assert_eq!(next_write(&file, &line(9)), None);
        apply(&mut file, slot_offset(1), &encode_slot("not an anchor\n").unwrap());
        assert!(matches!(read_slots(&file), Slotted::Unusable(_)));
        assert_eq!(next_write(&[0; 10], &line(9)), None);
    }

    /// How a writer lays out the file: the file it creates at seq 0, and the write that moves
    /// a file to a line.
    struct Plan {
        first: fn() -> Vec<u8>,
        next: fn(&[u8], &str) -> Option<SlotWrite>,
    }

    const PENDING_MAX: usize = 3;
    const TEAR_STEP: usize = 7;

    /// Writes `commits` anchors with `plan` and no sync, cutting the power after each write: of
    /// the last few writes any subset is on the device (older ones are), and the last one kept
    /// was in flight, so any prefix or any suffix of it landed. Every image must read as one of
    /// the lines written, never as nothing: `Err` names the first image that does not.
    fn cut_every_write(plan: &Plan, commits: u64) -> Result<u64, String> {
        let first = (plan.first)();
        let mut written: Vec<SlotWrite> = Vec::new();
        let mut file = first.clone();
        let mut images = 0;
        for seq in 1..=commits {
            let (offset, bytes) = (plan.next)(&file, &line(seq)).ok_or("no write planned")?;
            apply(&mut file, offset, &bytes);
            written.push((offset, bytes));
            let pending = written.len().min(PENDING_MAX);
            let (landed, tail) = written.split_at(written.len() - pending);
            for mask in 1u32..(1 << pending) {
                let torn = (0..pending).rev().find(|k| mask & (1 << k) != 0).unwrap_or(0);
                for tear in (0..=ANCHOR_SLOT_BYTES).step_by(TEAR_STEP) {
                    for suffix in [false, true] {
                        let mut image = first.clone();
                        for (offset, bytes) in landed {
                            apply(&mut image, *offset, bytes);
                        }
                        for (k, (offset, bytes)) in tail.iter().enumerate() {
                            let range = match (mask & (1 << k) != 0, k == torn, suffix) {
                                (false, _, _) => continue,
                                (true, false, _) => 0..bytes.len(),
                                (true, true, false) => 0..tear.min(bytes.len()),
                                (true, true, true) => tear.min(bytes.len())..bytes.len(),
                            };
                            apply(&mut image, offset + range.start, &bytes[range]);
                        }
                        images += 1;
                        let read = newest(&image);
                        let known = read.as_ref().is_some_and(|l| (0..=seq).any(|s| *l == line(s)));
                        if !known {
                            let how = if suffix { "suffix" } else { "prefix" };
                            return Err(format!(
                                "commit {seq}, writes kept {mask:b}, last torn at {tear} ({how}): \
                                 {read:?}"
                            ));
                        }
                    }
                }
            }
        }
        Ok(images)
    }

    const COMMITS: u64 = 12;

    #[test]
    fn no_cut_of_unsynced_slot_writes_leaves_a_file_without_an_anchor() {
        let plan = Plan { first: || encode_file(&line(0)).unwrap(), next: next_write };
        let images = cut_every_write(&plan, COMMITS).unwrap();
        assert!(images > 5_000, "{images} images");
    }

    /// The planted bug: one slot, written in place (what an in-place rewrite of the old single
    /// line does). A torn write leaves no anchor, and the harness says so.
    #[test]
    fn the_cut_harness_catches_one_slot_written_in_place() {
        let plan = Plan {
            first: || {
                let mut file = vec![0; ANCHOR_FILE_BYTES];
                apply(&mut file, 0, &encode_slot(&line(0)).unwrap());
                file
            },
            next: |_, line| Some((0, encode_slot(line)?)),
        };
        let found = cut_every_write(&plan, COMMITS).unwrap_err();
        assert!(found.contains("None"), "{found}");
    }
}
