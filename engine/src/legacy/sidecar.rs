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

/// Whether the file was changed by someone else since the mirror last wrote it.
pub(crate) fn changed_outside(file: Option<&[u8]>, sidecar: Option<&Sidecar>) -> bool {
    match (file, sidecar) {
        (Some(bytes), Some(sidecar)) => digest(bytes) != sidecar.hash,
        (Some(_), None) => true,
        (None, _) => false,
    }
}
