//! dump, restore and backup: the log out as JSON lines, a new store in from them, and a
//! consistent copy of a live store.
//!
//! Does not check a dump itself; the engine re-verifies every line.

use std::io::{BufReader, IsTerminal, Write};
use std::os::unix::fs::OpenOptionsExt;

use hookstate_engine::schema::format::to_hex;
use hookstate_engine::RestoreReport;
use serde_json::json;

use crate::args::{BackupArgs, Cli, DumpArgs, RestoreArgs};
use crate::cmd::{db_path, open, Access};
use crate::exit::CliError;
use crate::output::print;

/// Mode of a dump file: it holds every value the store holds, like the store (0600).
const DUMP_FILE_MODE: u32 = 0o600;

pub(crate) fn dump(cli: &Cli, args: &DumpArgs) -> Result<(), CliError> {
    let engine = open(cli, Access::Export)?;
    crate::output::warn_if_marked()?;
    let target = args.to.as_deref().map(DumpFile::create).transpose()?;
    let mut out: Box<dyn Write> = match &target {
        Some(target) => {
            Box::new(std::io::BufWriter::new(target.file.try_clone().map_err(|source| {
                CliError::Io { op: format!("open {}", target.path.display()), source }
            })?))
        }
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let mut failed = None;
    let mut sink = |line: &str| match writeln!(out, "{line}") {
        Ok(()) => true,
        Err(err) => {
            failed = Some(err);
            false
        }
    };
    let terminal = std::io::stderr().is_terminal();
    let mut progress = |done: u64, all: u64| {
        if terminal {
            let _ = write!(std::io::stderr(), "\rhookstate: dumped {done} of {all} events");
        }
    };
    let report = engine.ops().dump(&mut sink, &mut progress)?;
    if terminal {
        let _ = writeln!(std::io::stderr());
    }
    let flushed = match failed {
        Some(err) => Err(err),
        None => out.flush(),
    };
    flushed.map_err(|source| CliError::Io { op: "write the dump".into(), source })?;
    drop(out);
    if let Some(target) = target {
        target.publish()?;
    }
    if let Some(path) = &args.to {
        let head = json!({ "seq": report.head.seq, "hash": to_hex(&report.head.hash) });
        print(
            cli.format,
            &json!({ "ok": true, "to": path, "events": report.events, "head": head }),
        )?;
    }
    Ok(())
}

/// The file `dump --to` writes: made with no name in the target's directory (`O_TMPFILE`) and
/// linked at its name once the dump is whole and synced, so a killed dump leaves nothing there;
/// where the filesystem makes no unnamed files, the named file itself (created new).
struct DumpFile {
    file: std::fs::File,
    path: std::path::PathBuf,
    /// The target's directory, while the file has no name yet.
    unnamed_in: Option<std::os::fd::OwnedFd>,
}

impl DumpFile {
    fn create(path: &std::path::Path) -> Result<DumpFile, CliError> {
        use rustix::fs::{Mode, OFlags};
        let failed =
            |op: &str, source| CliError::Io { op: format!("{op} {}", path.display()), source };
        let parent = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => std::path::Path::new("."),
        };
        // The name is taken now as it is at the link: a dump never replaces a file.
        if std::fs::symlink_metadata(path).is_ok() {
            return Err(failed("create", std::io::ErrorKind::AlreadyExists.into()));
        }
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = rustix::fs::open(parent, dir_flags, Mode::empty());
        let unnamed = dir
            .as_ref()
            .ok()
            .and_then(|dir| hookstate_engine::create_unnamed(dir, OFlags::WRONLY, DUMP_FILE_MODE));
        match (unnamed, dir) {
            (Some(fd), Ok(dir)) => {
                Ok(DumpFile { file: fd.into(), path: path.to_path_buf(), unnamed_in: Some(dir) })
            }
            _ => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(DUMP_FILE_MODE)
                    .open(path)
                    .map_err(|source| failed("create", source))?;
                Ok(DumpFile { file, path: path.to_path_buf(), unnamed_in: None })
            }
        }
    }

    /// Syncs the whole dump and gives it its name (never over a file made meanwhile).
    fn publish(self) -> Result<(), CliError> {
        let failed =
            |op: &str, source| CliError::Io { op: format!("{op} {}", self.path.display()), source };
        self.file.sync_all().map_err(|source| failed("fsync", source))?;
        let Some(dir) = &self.unnamed_in else {
            return Ok(());
        };
        let name = self.path.file_name().unwrap_or(self.path.as_os_str());
        hookstate_engine::link_unnamed(&self.file, dir, name)
            .map_err(|errno| failed("create", errno.into()))?;
        rustix::fs::fsync(dir).map_err(|errno| failed("fsync the directory of", errno.into()))
    }
}

pub(crate) fn restore(cli: &Cli, args: &RestoreArgs) -> Result<(), CliError> {
    // A restore makes the store the dump holds, whole (it opens no store to read as of a seq).
    if cli.at_seq.is_some() || cli.as_of.is_some() {
        let why =
            "restore makes the whole dump's store; --at-seq and --as-of are for reads and dump";
        return Err(CliError::Usage(why.into()));
    }
    let target = db_path(cli)?;
    let anchor_dir = cli.anchor_dir.as_deref();
    let report = if args.from.as_os_str() == "-" {
        let stdin = std::io::stdin();
        hookstate_engine::restore(&target, &args.from, anchor_dir, &mut stdin.lock())?
    } else {
        let file = std::fs::File::open(&args.from).map_err(|source| CliError::Io {
            op: format!("open {}", args.from.display()),
            source,
        })?;
        hookstate_engine::restore(&target, &args.from, anchor_dir, &mut BufReader::new(file))?
    };
    built(cli, &target, &report)
}

pub(crate) fn backup(cli: &Cli, args: &BackupArgs) -> Result<(), CliError> {
    // A backup is the store as it is, under its own id: one of an older seq would be a rollback
    // waiting to be put back (`dump` and the read verbs answer as of a seq).
    if cli.at_seq.is_some() || cli.as_of.is_some() {
        let why = "backup copies the store as it is; --at-seq and --as-of are for reads and dump";
        return Err(CliError::Usage(why.into()));
    }
    let engine = open(cli, Access::Export)?;
    let report = engine.ops().backup(&args.to)?;
    built(cli, &args.to, &report)
}

/// Refuses an operator verb on a store that does not exist (exit 6), which a writer's open would
/// otherwise create only to find nothing to checkpoint or compact.
fn existing_store(cli: &Cli) -> Result<std::path::PathBuf, CliError> {
    let db = crate::cmd::db_path(cli)?;
    if !crate::cmd::store_exists(cli, &db)? {
        return Err(hookstate_engine::Error::NoStore { path: db }.into());
    }
    Ok(db)
}

pub(crate) fn checkpoint(cli: &Cli) -> Result<(), CliError> {
    existing_store(cli)?;
    let engine = open(cli, Access::Write)?;
    let report = engine.ops().checkpoint(&crate::cmd::call(cli, "checkpoint"))?;
    print(
        cli.format,
        &json!({
            "ok": true, "at": { "seq": report.at.seq, "hash": to_hex(&report.at.hash) },
            "seq": report.event_seq, "view_rows": report.view_rows,
            "view_bytes": report.view_bytes,
        }),
    )
}

pub(crate) fn compact(cli: &Cli, keep: u64) -> Result<(), CliError> {
    let mut engine = crate::cmd::open_at(cli, Access::Write, &existing_store(cli)?)?;
    let report = hookstate_engine::compact(
        &mut engine,
        keep,
        cli.now_ms.unwrap_or_else(crate::cmd::now_ms),
    )?;
    print(
        cli.format,
        &json!({
            "ok": true, "dropped": report.dropped, "log_starts_after": report.after_seq,
            "file_bytes_before": report.file_bytes_before,
            "file_bytes_after": report.file_bytes_after,
        }),
    )
}

fn built(cli: &Cli, path: &std::path::Path, report: &RestoreReport) -> Result<(), CliError> {
    print(
        cli.format,
        &json!({
            "ok": true, "path": path, "events": report.events, "views": report.views,
            "head": { "seq": report.head.seq, "hash": to_hex(&report.head.hash) },
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A killed or failed dump left the lines it had written under the file's name, which the
    /// next `dump --to` refused as existing.
    #[test]
    fn a_dump_file_has_its_name_only_once_it_is_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl");
        let mut target = DumpFile::create(&path).unwrap();
        assert!(target.unnamed_in.is_some(), "this filesystem makes unnamed files");
        target.file.write_all(b"line\n").unwrap();
        assert!(!path.exists(), "the name exists before the dump is whole");
        target.publish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"line\n");
        // A dump dropped before it is whole leaves nothing; a taken name is never replaced.
        let other = dir.path().join("e.jsonl");
        drop(DumpFile::create(&other).unwrap());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(DumpFile::create(&path).is_err());
        let late = DumpFile::create(&other).unwrap();
        std::fs::write(&other, b"made meanwhile").unwrap();
        assert!(late.publish().is_err());
        assert_eq!(std::fs::read(&other).unwrap(), b"made meanwhile");
    }
}
