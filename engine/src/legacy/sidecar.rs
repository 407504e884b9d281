//! TEMPORARY (removed once every layout runs on `mirror.rs`): the old sidecar mirror helpers.
//! Mirrors: legacy files kept current after every commit, for readers that still read them, and
//! changes made to those files by writers that still write them adopted as events on the next
//! call.
//!
//! A sidecar (`.hookstate-mirror.<name>`) beside the file records the hash of the bytes last
//! written and the head they showed. A file whose hash differs was changed by someone else; a
//! change to a key the store changed after that head is a conflict and is refused. Everything
//! happens under an exclusive lock on the mirror directory, so mirror writes never go backwards.
//! Does not know a layout's format; the layout modules do.

use serde::{Deserialize, Serialize};

use crate::kernel::error::{Error, Result};
use crate::legacy::root::Root;

/// Longest sidecar: one short JSON line.
const SIDECAR_BYTES_MAX: usize = 512;
const SIDECAR_PREFIX: &str = ".hookstate-mirror.";

/// What a mirror last wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Sidecar {
    /// blake3 of the bytes written, hex.
    pub(crate) hash: String,
    /// The head seq those bytes showed.
    pub(crate) head_seq: u64,
}

/// What one mirror sync did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MirrorReport {
    /// Keys (or whole states) adopted from an outside change.
    pub adopted: usize,
    /// Whether the file was rewritten.
    pub written: bool,
}

pub(crate) fn digest(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

fn sidecar_name(name: &str) -> String {
    format!("{SIDECAR_PREFIX}{name}")
}

/// The sidecar of `name`, if any. An unreadable sidecar reads as absent: the next write fixes it.
pub(crate) fn read_sidecar(root: &Root, name: &str) -> Result<Option<Sidecar>> {
    let Some(bytes) = root.read(&sidecar_name(name), SIDECAR_BYTES_MAX)? else {
        return Ok(None);
    };
    Ok(serde_json::from_slice(&bytes).ok())
}

/// Writes `bytes` as the mirrored file and records them in its sidecar.
pub(crate) fn write_mirror(root: &Root, name: &str, bytes: &[u8], head_seq: u64) -> Result<()> {
    root.write(name, bytes)?;
    write_sidecar(root, name, bytes, head_seq)
}

/// Records `bytes` (the file's content) in the sidecar of `name`.
pub(crate) fn write_sidecar(root: &Root, name: &str, bytes: &[u8], head_seq: u64) -> Result<()> {
    let sidecar = Sidecar { hash: digest(bytes), head_seq };
    let text = serde_json::to_string(&sidecar)
        .map_err(|e| Error::invalid(format!("sidecar does not serialise: {e}")))?;
    root.write(&sidecar_name(name), text.as_bytes())
}

/// Whether `name` still holds `expected` (`None`: no file), checked just before a mirror
/// replaces it: a file a lock-less writer changed since the mirror read it (or that cannot be
/// read) is kept, its sidecar left as it was, so the next call adopts it. The window between this
/// compare and the write's rename remains: only that writer taking the mirror lock closes it.
pub(crate) fn still_holds(root: &Root, name: &str, expected: Option<&[u8]>, max: usize) -> bool {
    root.read(name, max).is_ok_and(|now| now.as_deref() == expected)
}

/// Whether the file was changed by someone else since the mirror last wrote it.
pub(crate) fn changed_outside(file: Option<&[u8]>, sidecar: Option<&Sidecar>) -> bool {
    match (file, sidecar) {
        (Some(bytes), Some(sidecar)) => digest(bytes) != sidecar.hash,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_changes_are_seen_by_hash() {
        let sidecar = Sidecar { hash: digest(b"a"), head_seq: 3 };
        assert!(!changed_outside(Some(b"a"), Some(&sidecar)));
        assert!(changed_outside(Some(b"b"), Some(&sidecar)));
        assert!(changed_outside(Some(b"a"), None), "a file the mirror never wrote");
        assert!(!changed_outside(None, Some(&sidecar)), "a deleted file is rewritten, not adopted");
    }

    #[test]
    fn a_sidecar_round_trips_and_a_second_lock_waits_then_reports_busy() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path(), false).unwrap();
        write_mirror(&root, "f.json", b"{}", 9).unwrap();
        assert_eq!(read_sidecar(&root, "f.json").unwrap().map(|s| s.head_seq), Some(9));
        let _held = root.lock(std::time::Duration::from_millis(10)).unwrap();
        let other = Root::open(dir.path(), false).unwrap();
        let second = other.lock(std::time::Duration::from_millis(20));
        assert!(matches!(second, Err(Error::Busy { .. })));
    }
}
