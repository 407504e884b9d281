//! The steps of a crash-safe file replace and directory creation, written once over a small
//! trait of directory operations, so that `legacy::root::Root` runs them on the real file system
//! and the export crash simulator (RELIABILITY.md A4b, `tests/tests/exportcrash.rs`) runs the
//! very same steps on a model that loses what was not synced.
//!
//! A replace: a fresh temp file (O_EXCL; its mode is the `DirOps`'), write, fsync the file, rename it over the
//! target, fsync the directory. A new directory: mkdir, then fsync its parent. After a crash at
//! any step the target holds its old bytes or its new bytes, whole; once a replace returns, the
//! new bytes survive a crash. Does not pick names or check them; `Root` does.

// Public for the export crash simulator (`testing` feature), which replays these steps.
#![cfg_attr(not(feature = "testing"), allow(unreachable_pub))]

use crate::kernel::error::Result;

/// The directory operations a replace and a directory creation use, relative to one directory.
pub trait DirOps {
    /// An open file created by [`DirOps::create_new`].
    type File;
    /// Creates the file `name` exclusively (fails if it exists), with the mode the operations
    /// were set up with (the real root: the replaced file's, or the new file's upstream mode).
    ///
    /// # Errors
    /// The operation's error.
    fn create_new(&mut self, name: &str) -> Result<Self::File>;
    /// Writes all of `bytes` to `file` (a fresh, empty file).
    ///
    /// # Errors
    /// The operation's error.
    fn write_all(&mut self, file: &mut Self::File, bytes: &[u8]) -> Result<()>;
    /// Makes `file`'s data durable (`fsync`).
    ///
    /// # Errors
    /// The operation's error.
    fn sync_file(&mut self, file: &mut Self::File) -> Result<()>;
    /// Renames `from` over `to`, both in this directory.
    ///
    /// # Errors
    /// The operation's error.
    fn rename(&mut self, from: &str, to: &str) -> Result<()>;
    /// Removes the file `name`.
    ///
    /// # Errors
    /// The operation's error.
    fn remove(&mut self, name: &str) -> Result<()>;
    /// Makes this directory's entries durable (`fsync` on the directory).
    ///
    /// # Errors
    /// The operation's error.
    fn sync_dir(&mut self) -> Result<()>;
    /// Creates the subdirectory `name` (mode 0700); `false` when it already exists.
    ///
    /// # Errors
    /// The operation's error.
    fn make_dir(&mut self, name: &str) -> Result<bool>;
}

#[cfg(feature = "testing")]
/// [`replace_file_if`] with no check before the rename.
///
/// # Errors
/// The first failing operation's error.
pub fn replace_file<D: DirOps>(dir: &mut D, temp: &str, name: &str, bytes: &[u8]) -> Result<()> {
    replace_file_if(dir, temp, name, bytes, || Ok(true)).map(|_| ())
}

/// Replaces (or creates) `name` in `dir` with `bytes` through the temp file `temp` (on an error
/// the temp file is removed, best effort, and the target is untouched), asking `still` right
/// before the rename, once the temp file is durable, whether the target may still be replaced
/// (it holds what the caller last read): a change another writer makes to the target meanwhile
/// is overwritten only if it lands between that check and the rename. `false` removes the temp
/// file and leaves the target as it is.
///
/// # Errors
/// The first failing operation's error, or `still`'s.
pub fn replace_file_if<D: DirOps>(
    dir: &mut D,
    temp: &str,
    name: &str,
    bytes: &[u8],
    still: impl FnOnce() -> Result<bool>,
) -> Result<bool> {
    let mut file = dir.create_new(temp)?;
    let written = dir
        .write_all(&mut file, bytes)
        .and_then(|()| dir.sync_file(&mut file))
        .and_then(|()| still())
        .and_then(
            |replace| if replace { dir.rename(temp, name).map(|()| true) } else { Ok(false) },
        );
    drop(file);
    if !matches!(written, Ok(true)) {
        let _ = dir.remove(temp);
    }
    if !written? {
        return Ok(false);
    }
    #[cfg(feature = "bugdrill")]
    if crate::kernel::drill::is(crate::kernel::drill::Drill::ExportNoDirFsync) {
        return Ok(true);
    }
    dir.sync_dir().map(|()| true)
}

/// Creates the subdirectory `name` of `dir` when absent and makes its entry durable, so that
/// files later written (and synced) inside it cannot vanish with it in a crash.
///
/// # Errors
/// The first failing operation's error.
pub fn make_subdir<D: DirOps>(dir: &mut D, name: &str) -> Result<()> {
    if dir.make_dir(name)? {
        dir.sync_dir()?;
    }
    Ok(())
}
