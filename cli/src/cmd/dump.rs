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
    let mut out: Box<dyn Write> = match &args.to {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(DUMP_FILE_MODE)
                .open(path)
                .map_err(|source| CliError::Io {
                    op: format!("create {}", path.display()),
                    source,
                })?;
            Box::new(std::io::BufWriter::new(file))
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
    if let Some(path) = &args.to {
        let head = json!({ "seq": report.head.seq, "hash": to_hex(&report.head.hash) });
        print(
            cli.format,
            &json!({ "ok": true, "to": path, "events": report.events, "head": head }),
        )?;
    }
    Ok(())
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
