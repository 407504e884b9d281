//! `hookstate serve`: opens the store for writing, hands it to the engine's server with the
//! CLI's own dispatch as the handler (`served`), and prints one line when it listens and one when
//! it stops.
//!
//! Does not answer requests itself; the engine's `serve` and `served` do.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use hookstate_engine::{serve, ServeOptions};
use serde_json::json;

use crate::args::{Cli, ServeArgs};
use crate::cmd::{db_path, open, Access};
use crate::exit::CliError;
use crate::output::print;

/// Longest `--idle-exit-s`: a day.
const IDLE_EXIT_S_MAX: u64 = 24 * 60 * 60;

pub(crate) fn run(cli: &Cli, args: &ServeArgs) -> Result<(), CliError> {
    let idle_exit = match args.idle_exit_s {
        Some(s) if s == 0 || s > IDLE_EXIT_S_MAX => {
            return Err(CliError::Invalid(format!(
                "--idle-exit-s {s} is outside 1..={IDLE_EXIT_S_MAX}"
            )))
        }
        other => other.map(Duration::from_secs),
    };
    if let Some(address) = hookstate_engine::remote_address(&db_path(cli)?) {
        // The socket and its lock live beside a store file; a database is already shared by its
        // server, so every host calls it directly.
        return Err(CliError::Usage(format!(
            "serve runs beside a store file, not the PostgreSQL store {address}: call it \
             directly, its server already shares it"
        )));
    }
    let engine = open(cli, Access::Write)?;
    let handler = Arc::new(crate::served::ServedCli::new(db_path(cli)?, cli.anchor_dir.clone()));
    // A panic inside a served call is that call's answer (exit 5 and its line), not the
    // server's end; anywhere else it ends the server as it ends any process.
    std::panic::set_hook(Box::new(|info| {
        let line = crate::output::panic_line(info);
        if !crate::served::note_panic(&line) {
            let _ = writeln!(std::io::stderr(), "hookstate: {line}");
            std::process::exit(i32::from(crate::exit::CORRUPT));
        }
    }));
    // An upgrade replaces the binary: the server stops rather than answer with the old build.
    let watch_exe = std::env::current_exe().ok();
    let options = ServeOptions { socket: args.socket.clone(), idle_exit, watch_exe };
    let format = cli.format;
    let report = serve(engine, &options, handler, &mut |serving| {
        let line = json!({
            "ok": true, "serving": serving.db, "socket": serving.socket, "pid": serving.pid,
        });
        let _ = print(format, &line);
    })?;
    let stats = serde_json::to_value(&report.stats).unwrap_or_default();
    print(format, &json!({ "ok": true, "stopped": report.stopped, "stats": stats }))?;
    if report.stopped == "commit_failed" {
        return Err(CliError::Failed("a commit failed; the server stopped".into()));
    }
    Ok(())
}
