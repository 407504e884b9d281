//! A private, copy-on-write view of a store file for `verify`: redb reads the file through it
//! and everything redb writes (its integrity check's repair, its commit, its clean close) stays
//! in memory, so `verify` runs redb's full check of every page's checksum without changing a byte
//! of the file, and can check a copy it may only read (a 0400 file, a read-only directory).
//!
//! The header is the one read once, under redb's shared header lock, when the view is made; the
//! pages it names are pinned by a read transaction the caller holds on the real file. Does not
//! lock anything itself: redb's lock methods are left unsupported, which puts redb in its
//! single-process mode on this view.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

use redb::StorageBackend;

/// The unit the overlay keeps written bytes in.
const PAGE_BYTES: usize = 4096;
const PAGE: u64 = PAGE_BYTES as u64;
/// Pages the overlay may hold (512 MiB): far above what an integrity check writes (allocator
/// state, a header, a few tree pages), a bound against a runaway repair.
const OVERLAY_PAGES_MAX: usize = 128 * 1024;

type Io<T> = std::result::Result<T, std::io::Error>;

/// The overlay: written pages, the length redb set, and how far the file's own bytes are still
/// visible (a shrink hides the file beyond it, as a truncate would).
#[derive(Debug, Default)]
struct Overlay {
    pages: BTreeMap<u64, Vec<u8>>,
    len: u64,
    file_visible: u64,
}

/// A store file seen through an in-memory overlay.
#[derive(Debug)]
pub(crate) struct ScratchBackend {
    file: File,
    overlay: Mutex<Overlay>,
}

impl ScratchBackend {
    /// A view of `file` (opened read-only is enough) whose header bytes are `header`; an
    /// `InvalidData` error for a header that cannot be the file's
    /// ([`check_header_roots`](crate::store::bounded::check_header_roots)).
    pub(crate) fn new(file: File, header: &[u8]) -> Io<ScratchBackend> {
        let len = file.metadata()?.len();
        crate::store::bounded::check_header_roots(header, len)?;
        let overlay = Overlay { pages: BTreeMap::new(), len, file_visible: len };
        let backend = ScratchBackend { file, overlay: Mutex::new(overlay) };
        backend.write(0, header)?;
        Ok(backend)
    }

    fn lock(&self) -> Io<std::sync::MutexGuard<'_, Overlay>> {
        self.overlay.lock().map_err(|_| std::io::Error::other("scratch overlay poisoned"))
    }

    /// The bytes of page `page` as the file has them (zeros past what is visible).
    fn file_page(&self, page: u64, visible: u64) -> Io<Vec<u8>> {
        let mut out = vec![0u8; PAGE_BYTES];
        let start = page * PAGE;
        if start < visible {
            let n = usize::try_from((visible - start).min(PAGE)).unwrap_or(0);
            read_at_most(&self.file, &mut out[..n], start)?;
        }
        Ok(out)
    }
}

/// The page of byte `at` and its offset in the page.
fn split(at: u64) -> (u64, usize) {
    (at / PAGE, usize::try_from(at % PAGE).unwrap_or(0))
}

/// Reads what the file has of `out` at `offset`; bytes past its end stay as they are (zeros).
fn read_at_most(file: &File, out: &mut [u8], offset: u64) -> Io<()> {
    let mut done = 0;
    while done < out.len() {
        match file.read_at(&mut out[done..], offset + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(())
}

impl StorageBackend for ScratchBackend {
    fn len(&self) -> Io<u64> {
        Ok(self.lock()?.len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Io<()> {
        let overlay = self.lock()?;
        let mut done = 0usize;
        while done < out.len() {
            let at = offset + done as u64;
            let (page, in_page) = split(at);
            let n = (PAGE_BYTES - in_page).min(out.len() - done);
            let chunk = &mut out[done..done + n];
            match overlay.pages.get(&page) {
                Some(bytes) => chunk.copy_from_slice(&bytes[in_page..in_page + n]),
                None => {
                    chunk.fill(0);
                    let visible = overlay.file_visible.saturating_sub(at);
                    let take = usize::try_from(visible).unwrap_or(usize::MAX).min(n);
                    read_at_most(&self.file, &mut chunk[..take], at)?;
                }
            }
            done += n;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Io<()> {
        let mut overlay = self.lock()?;
        overlay.len = len;
        overlay.file_visible = overlay.file_visible.min(len);
        let first_gone = len.div_ceil(PAGE);
        overlay.pages.retain(|page, _| *page < first_gone);
        Ok(())
    }

    fn sync_data(&self) -> Io<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Io<()> {
        let mut overlay = self.lock()?;
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            let (page, in_page) = split(at);
            let n = (PAGE_BYTES - in_page).min(data.len() - done);
            if !overlay.pages.contains_key(&page) {
                if overlay.pages.len() >= OVERLAY_PAGES_MAX {
                    return Err(std::io::Error::other("verify's scratch overlay is full"));
                }
                let bytes = self.file_page(page, overlay.file_visible)?;
                overlay.pages.insert(page, bytes);
            }
            if let Some(bytes) = overlay.pages.get_mut(&page) {
                bytes[in_page..in_page + n].copy_from_slice(&data[done..done + n]);
            }
            done += n;
        }
        overlay.len = overlay.len.max(offset + data.len() as u64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_stay_in_memory_and_reads_see_them_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 10_000]).unwrap();
        // A header as redb 4.6.0 writes one (4 KiB pages, regions of 2^20 pages, no roots).
        let mut header = vec![0u8; crate::store::bounded::REDB_HEADER_BYTES];
        header[..3].copy_from_slice(&[1, 2, 3]);
        header[12..16].copy_from_slice(&4096u32.to_le_bytes());
        header[20..24].copy_from_slice(&(1u32 << 20).to_le_bytes());
        let mut foreign = header.clone();
        foreign[20..24].copy_from_slice(&18u32.to_le_bytes());
        let refused = ScratchBackend::new(File::open(&path).unwrap(), &foreign).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::InvalidData, "{refused}");
        let backend = ScratchBackend::new(File::open(&path).unwrap(), &header).unwrap();
        backend.write(4095, &[9, 9]).unwrap();
        let mut out = [0u8; 6];
        backend.read(0, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 0, 0, 0]);
        let mut out = [0u8; 4];
        backend.read(318, &mut out).unwrap();
        assert_eq!(out, [0, 0, 7, 7], "the file's bytes after the header");
        let mut out = [0u8; 4];
        backend.read(4094, &mut out).unwrap();
        assert_eq!(out, [7, 9, 9, 7]);
        backend.set_len(5_000).unwrap();
        backend.set_len(12_000).unwrap();
        let mut out = [1u8; 4];
        backend.read(9_000, &mut out).unwrap();
        assert_eq!(out, [0, 0, 0, 0], "a shrink hides the file beyond it");
        assert_eq!(backend.len().unwrap(), 12_000);
        assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 10_000], "the file is unchanged");
    }
}
