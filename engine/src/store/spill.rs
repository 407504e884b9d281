//! The spill table of a replay (`kernel::storage::SpillRows`) as sorted runs appended to an
//! unnamed file: each write is one run (its rows in key order, cut into blocks of about
//! [`SPILL_BLOCK_BYTES`]), written with one positional write; a later run's row stands over an
//! earlier run's row of the same key, and a removal is a row marked removed.
//!
//! In memory each run keeps the first key of every block, its last key and a filter of its keys
//! ([`KeyFilter`], [`RUN_FILTER_BITS_PER_KEY`] bits a key): a lookup reads one block of each run
//! that may hold the key, newest first; a pass in key order merges the runs, reading each a block
//! at a time. Nothing is synced and nothing is ever rewritten: the file has no name and no reader
//! after this process, and a crash loses it with the replay that wrote it.
//!
//! Written by one thread while another reads it: reads see every run whose write returned.
//! Does not choose where the file lives (`store::dir` makes it) and does not know what the rows
//! are: bytes by bytes, in key order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::hash::BuildHasher;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::kernel::error::{Error, Result};
use crate::kernel::key_filter::{Hashing, KeyFilter};
use crate::kernel::limits::{
    RUN_FILTER_BITS_PER_KEY, SPILL_BLOCK_BYTES, SPILL_CHUNK_ROWS, SPILL_WRITE_BYTES,
};
use crate::kernel::storage::SpillRows;

/// What the messages name.
const WHAT: &str = "the replay's spill table (an unnamed file beside the store)";

/// A record's length word for a removed row.
const REMOVED: u32 = u32::MAX;
/// A record's two length words.
const RECORD_HEAD_BYTES: usize = 8;

fn io(op: &'static str, err: std::io::Error) -> Error {
    Error::io(op, WHAT, err)
}

/// The file holds something this module did not write there: a failing scratch file (exit 6),
/// never a damaged store.
fn damaged(why: &str) -> Error {
    io("read", std::io::Error::other(format!("a spilled run does not decode: {why}")))
}

/// One block of a run: where it is and its first key.
struct Block {
    first: Vec<u8>,
    offset: u64,
    len: usize,
}

/// One write's rows, in key order.
struct Run {
    blocks: Vec<Block>,
    last: Vec<u8>,
    filter: KeyFilter,
}

impl Run {
    /// The block that holds `key` if the run does.
    fn block_for(&self, key: &[u8]) -> Option<&Block> {
        let first = self.blocks.first()?;
        if key < first.first.as_slice() || key > self.last.as_slice() {
            return None;
        }
        let at = self.blocks.partition_point(|b| b.first.as_slice() <= key);
        self.blocks.get(at.checked_sub(1)?)
    }
}

/// A record decoded from a block: its key, its row (`None`: removed) and the next record's start.
type Record<'b> = (&'b [u8], Option<&'b [u8]>, usize);

/// A record as owned bytes: its key and its row (`None`: removed).
type OwnedRecord = (Vec<u8>, Option<Vec<u8>>);

/// Decodes the record at `at` of `block`.
fn record(block: &[u8], at: usize) -> Result<Record<'_>> {
    let word = |from: usize| -> Result<u32> {
        let bytes = block.get(from..from + 4).ok_or_else(|| damaged("a cut record"))?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    };
    let key_len = word(at)? as usize;
    let row_len = word(at + 4)?;
    let key_at = at + RECORD_HEAD_BYTES;
    let key = block.get(key_at..key_at + key_len).ok_or_else(|| damaged("a cut key"))?;
    let row_at = key_at + key_len;
    if row_len == REMOVED {
        return Ok((key, None, row_at));
    }
    let row_end = row_at + row_len as usize;
    let row = block.get(row_at..row_end).ok_or_else(|| damaged("a cut row"))?;
    Ok((key, Some(row), row_end))
}

/// Appends one record to `out`.
fn put_record(out: &mut Vec<u8>, key: &[u8], row: Option<&[u8]>) -> Result<()> {
    let too_long = || Error::Store("internal error: a spilled key or row of 4 GiB or more".into());
    let key_len = u32::try_from(key.len()).map_err(|_| too_long())?;
    let row_len = match row {
        Some(row) => u32::try_from(row.len()).ok().filter(|len| *len != REMOVED),
        None => Some(REMOVED),
    };
    out.extend_from_slice(&key_len.to_le_bytes());
    out.extend_from_slice(&row_len.ok_or_else(too_long)?.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(row.unwrap_or_default());
    Ok(())
}

/// The runs written so far and where the next one goes.
struct Runs {
    runs: Vec<Arc<Run>>,
    end: u64,
}

/// The spill table: its file, its runs, and the pass in key order under way.
pub(crate) struct RunSpill {
    file: File,
    hashing: Hashing,
    runs: Mutex<Runs>,
    /// One write at a time, so runs are listed in the order they were written.
    writing: Mutex<()>,
    pass: Mutex<Option<Pass>>,
}

fn poisoned<T>(_: T) -> Error {
    Error::Store("a replay's spill thread panicked".into())
}

impl RunSpill {
    /// A new, empty spill table in `file`, which must be empty.
    pub(crate) fn create(file: File) -> RunSpill {
        RunSpill {
            file,
            hashing: Hashing::default(),
            runs: Mutex::new(Runs { runs: Vec::new(), end: 0 }),
            writing: Mutex::new(()),
            pass: Mutex::new(None),
        }
    }

    fn runs(&self) -> Result<MutexGuard<'_, Runs>> {
        self.runs.lock().map_err(poisoned)
    }

    /// The runs written so far, oldest first.
    fn snapshot(&self) -> Result<Vec<Arc<Run>>> {
        Ok(self.runs()?.runs.clone())
    }

    /// Reads `block` into `buf`.
    fn read_block(&self, block: &Block, buf: &mut Vec<u8>) -> Result<()> {
        buf.resize(block.len, 0);
        self.file.read_exact_at(buf, block.offset).map_err(|e| io("read", e))
    }

    /// The row of `key` in `run`: `None` when the run has no record of it, `Some(None)` when it
    /// records the row removed.
    fn find(
        &self,
        run: &Run,
        key: &[u8],
        hash: u64,
        buf: &mut Vec<u8>,
    ) -> Result<Option<Option<Vec<u8>>>> {
        if !run.filter.may_hold(hash) {
            return Ok(None);
        }
        let Some(block) = run.block_for(key) else {
            return Ok(None);
        };
        self.read_block(block, buf)?;
        let mut at = 0;
        while at < buf.len() {
            let (found, row, next) = record(buf, at)?;
            match found.cmp(key) {
                std::cmp::Ordering::Less => at = next,
                std::cmp::Ordering::Equal => return Ok(Some(row.map(<[u8]>::to_vec))),
                std::cmp::Ordering::Greater => break,
            }
        }
        Ok(None)
    }
}

impl SpillRows for RunSpill {
    fn write(&self, rows: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        let Some((last, _)) = rows.last() else {
            return Ok(());
        };
        if rows.windows(2).any(|pair| pair[0].0 >= pair[1].0) {
            return Err(Error::Store("internal error: spilled rows not in key order".into()));
        }
        let mut filter = KeyFilter::with_bits(rows.len() * RUN_FILTER_BITS_PER_KEY);
        let _one_writer = self.writing.lock().map_err(poisoned)?;
        let offset = self.runs()?.end;
        // The run goes to the file [`SPILL_WRITE_BYTES`] at a time; blocks are offsets into it.
        let mut out = Vec::with_capacity(SPILL_WRITE_BYTES + SPILL_BLOCK_BYTES);
        let mut written = 0usize;
        let mut blocks: Vec<(Vec<u8>, usize)> = Vec::new();
        let mut block_start = 0;
        for (key, row) in rows {
            let at = written + out.len();
            if blocks.is_empty() || at - block_start >= SPILL_BLOCK_BYTES {
                block_start = at;
                blocks.push((key.clone(), at));
            }
            put_record(&mut out, key, row.as_deref())?;
            filter.insert(self.hashing.hash_one(key.as_slice()));
            if out.len() >= SPILL_WRITE_BYTES {
                self.file
                    .write_all_at(&out, offset + written as u64)
                    .map_err(|e| io("write", e))?;
                written += out.len();
                out.clear();
            }
        }
        self.file.write_all_at(&out, offset + written as u64).map_err(|e| io("write", e))?;
        let total = written + out.len();
        let ends = blocks.iter().skip(1).map(|(_, start)| *start).chain([total]);
        let blocks = blocks
            .iter()
            .zip(ends)
            .map(|((first, start), end)| Block {
                first: first.clone(),
                offset: offset + *start as u64,
                len: end - start,
            })
            .collect();
        let run = Run { blocks, last: last.clone(), filter };
        let mut runs = self.runs()?;
        runs.end = offset + total as u64;
        runs.runs.push(Arc::new(run));
        Ok(())
    }

    fn get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let runs = self.snapshot()?;
        let mut buf = Vec::new();
        let mut rows = Vec::with_capacity(keys.len());
        for key in keys {
            let hash = self.hashing.hash_one(key);
            let mut row = None;
            for run in runs.iter().rev() {
                if let Some(found) = self.find(run, key, hash, &mut buf)? {
                    row = found;
                    break;
                }
            }
            rows.push(row);
        }
        Ok(rows)
    }

    fn after(&self, after: Option<&[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let runs = self.snapshot()?;
        let mut pass = self.pass.lock().map_err(poisoned)?;
        let going_on = pass.as_ref().is_some_and(|p| {
            p.runs == runs.len() && p.handed.as_deref() == after && after.is_some()
        });
        if !going_on {
            *pass = Some(Pass::start(self, runs, after)?);
        }
        let Some(pass) = pass.as_mut() else {
            return Ok(Vec::new());
        };
        pass.next(self, limit)
    }
}

/// One run read in key order, a block at a time.
struct Cursor {
    run: Arc<Run>,
    /// The next block to read.
    block: usize,
    buf: Vec<u8>,
    at: usize,
    /// The row of the record at the head of the merge (`None`: removed).
    row: Option<Vec<u8>>,
}

impl Cursor {
    /// The next record, or `None` past the run's end.
    fn next(&mut self, spill: &RunSpill) -> Result<Option<OwnedRecord>> {
        if self.at >= self.buf.len() {
            let Some(block) = self.run.blocks.get(self.block) else {
                return Ok(None);
            };
            spill.read_block(block, &mut self.buf)?;
            self.block += 1;
            self.at = 0;
        }
        let (key, row, next) = record(&self.buf, self.at)?;
        self.at = next;
        Ok(Some((key.to_vec(), row.map(<[u8]>::to_vec))))
    }
}

/// A pass over the rows of every run in key order: the merge's heads, the newest run first
/// among equal keys.
struct Pass {
    cursors: Vec<Cursor>,
    /// Each cursor's head key and its rank (0: the newest run).
    heads: BinaryHeap<Reverse<(Vec<u8>, usize)>>,
    /// The runs the pass merges.
    runs: usize,
    /// The last key handed out.
    handed: Option<Vec<u8>>,
}

impl Pass {
    /// A pass from the first key after `after` over `runs` (oldest first).
    fn start(spill: &RunSpill, runs: Vec<Arc<Run>>, after: Option<&[u8]>) -> Result<Pass> {
        let count = runs.len();
        let mut pass = Pass {
            cursors: Vec::with_capacity(count),
            heads: BinaryHeap::new(),
            runs: count,
            handed: None,
        };
        for run in runs.into_iter().rev() {
            let block = match after {
                Some(key) => {
                    run.blocks.partition_point(|b| b.first.as_slice() <= key).saturating_sub(1)
                }
                None => 0,
            };
            pass.cursors.push(Cursor { run, block, buf: Vec::new(), at: 0, row: None });
            let rank = pass.cursors.len() - 1;
            loop {
                match pass.advance(spill, rank)? {
                    Some(key) if after.is_some_and(|after| key.as_slice() <= after) => continue,
                    Some(key) => {
                        pass.heads.push(Reverse((key, rank)));
                        break;
                    }
                    None => break,
                }
            }
        }
        Ok(pass)
    }

    /// Moves cursor `rank` to its next record, keeping its row; returns its key.
    fn advance(&mut self, spill: &RunSpill, rank: usize) -> Result<Option<Vec<u8>>> {
        let Some(cursor) = self.cursors.get_mut(rank) else {
            return Ok(None);
        };
        Ok(cursor.next(spill)?.map(|(key, row)| {
            cursor.row = row;
            key
        }))
    }

    /// Takes the head of the merge: its key, its rank and its row.
    fn pop(&mut self, spill: &RunSpill) -> Result<Option<OwnedRecord>> {
        let Some(Reverse((key, rank))) = self.heads.pop() else {
            return Ok(None);
        };
        let row = self.cursors.get_mut(rank).and_then(|c| c.row.take());
        if let Some(next) = self.advance(spill, rank)? {
            self.heads.push(Reverse((next, rank)));
        }
        Ok(Some((key, row)))
    }

    /// At most `limit` rows from where the pass is.
    fn next(&mut self, spill: &RunSpill, limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::with_capacity(limit.min(SPILL_CHUNK_ROWS));
        while out.len() < limit {
            let Some((key, row)) = self.pop(spill)? else {
                break;
            };
            // Older runs' records of the same key are stood over.
            while self.heads.peek().is_some_and(|Reverse((next, _))| *next == key) {
                self.pop(spill)?;
            }
            if let Some(row) = row {
                out.push((key, row));
            }
        }
        if let Some((key, _)) = out.last() {
            self.handed = Some(key.clone());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn spill() -> RunSpill {
        RunSpill::create(tempfile::tempfile().unwrap())
    }

    fn key(i: u32) -> Vec<u8> {
        format!("key-{i:06}").into_bytes()
    }

    /// Every row by a pass in chunks of `chunk`, as `verify` reads them.
    fn all(spill: &RunSpill, chunk: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut rows = Vec::new();
        loop {
            let after = rows.last().map(|(k, _): &(Vec<u8>, Vec<u8>)| k.clone());
            let next = spill.after(after.as_deref(), chunk).unwrap();
            if next.is_empty() {
                return rows;
            }
            rows.extend(next);
        }
    }

    #[test]
    fn a_later_run_stands_over_an_earlier_one_and_a_removal_hides_the_row() {
        let spill = spill();
        let first: Vec<_> = (0..3000).map(|i| (key(i), Some(vec![1u8; 500]))).collect();
        spill.write(&first).unwrap();
        let second = vec![
            (key(5), Some(b"five".to_vec())),
            (key(7), None),
            (key(4000), Some(b"new".to_vec())),
        ];
        spill.write(&second).unwrap();
        let got = spill.get(&[&key(5), &key(7), &key(6), &key(4000), &key(3500)]).unwrap();
        assert_eq!(
            got,
            vec![Some(b"five".to_vec()), None, Some(vec![1u8; 500]), Some(b"new".to_vec()), None]
        );
        let rows = all(&spill, 64);
        assert_eq!(rows.len(), 3000, "3000 rows, one removed, one added");
        assert!(rows.windows(2).all(|p| p[0].0 < p[1].0), "in key order, each key once");
        assert!(rows.iter().all(|(k, _)| *k != key(7)));
        assert_eq!(rows.iter().find(|(k, _)| *k == key(5)).unwrap().1, b"five");
        assert!(spill.runs().unwrap().runs[0].blocks.len() > 10, "the first run spans many blocks");
        assert!(spill.runs().unwrap().end > SPILL_WRITE_BYTES as u64, "written in pieces");
    }

    #[test]
    fn a_pass_starts_after_any_key_and_again_from_the_start() {
        let spill = spill();
        spill
            .write(&(0..500).map(|i| (key(i * 2), Some(vec![2u8; 300]))).collect::<Vec<_>>())
            .unwrap();
        spill
            .write(&(0..500).map(|i| (key(i * 2 + 1), Some(vec![3u8; 300]))).collect::<Vec<_>>())
            .unwrap();
        let from = spill.after(Some(&key(700)), 3).unwrap();
        assert_eq!(
            from.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            vec![key(701), key(702), key(703)]
        );
        assert_eq!(spill.after(None, 2).unwrap()[0].0, key(0), "a pass from the start again");
        assert_eq!(all(&spill, 7).len(), 1000);
        assert!(spill.after(Some(&key(999)), 5).unwrap().is_empty());
    }

    #[test]
    fn rows_out_of_key_order_are_refused() {
        let spill = spill();
        let err = spill.write(&[(key(2), None), (key(1), None)]).unwrap_err();
        assert!(format!("{err:?}").contains("not in key order"), "{err:?}");
        assert!(spill.get(&[&key(1)]).unwrap()[0].is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Any sequence of writes reads back, by key and in a pass, as a map that took them in turn.
        #[test]
        fn the_runs_read_back_as_the_writes_applied_in_turn(
            writes in prop::collection::vec(
                prop::collection::btree_map(0u32..400, prop::option::weighted(0.8, prop::collection::vec(any::<u8>(), 0..2000)), 0..120),
                1..8,
            ),
            chunk in 1usize..50,
        ) {
            let spill = spill();
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            for write in &writes {
                let rows: Vec<_> = write.iter().map(|(i, row)| (key(*i), row.clone())).collect();
                spill.write(&rows).unwrap();
                for (k, row) in rows {
                    match row {
                        Some(row) => { model.insert(k, row); }
                        None => { model.remove(&k); }
                    }
                }
            }
            let keys: Vec<Vec<u8>> = (0..400).map(key).collect();
            let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let got = spill.get(&refs).unwrap();
            for (k, row) in keys.iter().zip(got) {
                prop_assert_eq!(row.as_ref(), model.get(k));
            }
            let rows = all(&spill, chunk);
            prop_assert_eq!(rows, model.into_iter().collect::<Vec<_>>());
        }
    }
}
