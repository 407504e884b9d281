//! `import` and `export` of the loopd, observer, hermit-proposals, hermit-alerts and
//! hermit-heartbeat layouts (moonshine's are in `feedback.rs`).
//!
//! Does not know file formats; the engine's legacy module does.

use std::path::Path;

use hookstate_engine::read_hermit_files;
use hookstate_engine::schema::hermit::SCOPE_PREFIX;
use hookstate_engine::{read_heartbeat_files, read_hermit_alerts, AlertFile};
use serde_json::json;

use crate::args::{Cli, ExportArgs, ImportArgs, Layout};
use crate::cmd::hermit::hermit_scope as hermit_target;
use crate::cmd::{call, call_in, open, Access};
use crate::exit::CliError;
use crate::output::print;

/// Refuses a --name that is no plain file name (empty, `.`, `..`, a separator), before the store
/// is opened.
fn check_file_name(name: Option<&String>) -> Result<(), CliError> {
    match name {
        Some(name) => Ok(hookstate_engine::check_legacy_file_name(name)?),
        None => Ok(()),
    }
}

fn file_name(layout: Layout, name: Option<&String>) -> &str {
    match (name, layout) {
        (Some(name), _) => name,
        (None, Layout::Loopd) => hookstate_engine::LOOPD_FILE_DEFAULT,
        (None, Layout::Observer | Layout::Moonshine) => hookstate_engine::OBSERVER_FILE_DEFAULT,
        // The hermit layouts name no one file: a directory's files are theirs.
        (
            None,
            Layout::HermitProposals
            | Layout::HermitAlerts
            | Layout::HermitHeartbeat
            | Layout::HermitSession,
        ) => "",
    }
}

/// The hermit scope of an import: `--scope hermit:<dir>` when given, else the import's own
/// directory.
fn hermit_scope(cli: &Cli, dir: &Path) -> Result<String, CliError> {
    if cli.scope.starts_with(SCOPE_PREFIX) {
        hermit_target(cli, None)
    } else {
        hermit_target(cli, Some(dir))
    }
}

/// Imports `state/alert-state.json`: a corrupt file is quarantined beside itself and refused
/// (exit 3) before the store is opened.
fn import_alerts(cli: &Cli, args: &ImportArgs) -> Result<(), CliError> {
    let scope = hermit_scope(cli, &args.from)?;
    let call = call_in(cli, "import", &scope);
    let (state, round_trip) = match read_hermit_alerts(&args.from, call.now_ms)? {
        AlertFile::Found { state, round_trip } => (state, round_trip),
        AlertFile::Missing => {
            return Err(CliError::Invalid(format!(
                "{}/state/alert-state.json does not exist",
                args.from.display(),
            )))
        }
        AlertFile::Quarantined { to, why } => {
            return Err(CliError::Invalid(format!(
                "alert-state.json is corrupt ({why}); quarantined as state/{to}, store unchanged"
            )))
        }
    };
    let outcome = open(cli, Access::Write)?.alerts().import_alerts(&call, &state, round_trip)?;
    print(cli.format, &outcome.to_json())?;
    match outcome.refusal {
        Some(refusal) => Err(CliError::Refused(refusal.message)),
        None => Ok(()),
    }
}

pub(crate) fn import(cli: &Cli, args: &ImportArgs) -> Result<(), CliError> {
    if args.layout == Layout::HermitAlerts {
        return import_alerts(cli, args);
    }
    let from = &args.from;
    let name = file_name(args.layout, args.name.as_ref());
    // The source, its file name and the legacy files are checked before the store is opened, so
    // bad input leaves the store byte-identical (or not made).
    check_file_name(args.name.as_ref())?;
    hookstate_engine::check_source_dir(from)?;
    let hermit = match args.layout {
        Layout::HermitProposals => Some(read_hermit_files(from)?),
        _ => None,
    };
    let beat = match args.layout {
        Layout::HermitHeartbeat => Some(read_heartbeat_files(from)?),
        _ => None,
    };
    let engine = open(cli, Access::Write)?;
    let call = call(cli, "import");
    let outcome = match args.layout {
        Layout::Loopd => engine.signals().import(&call, from, name)?,
        Layout::Observer | Layout::Moonshine => engine.observer().import(&call, from, name)?,
        Layout::HermitAlerts => return Err(CliError::Usage("imported above".into())),
        Layout::HermitSession => return Err(CliError::Usage("the session layout's own".into())),
        Layout::HermitProposals => {
            let scope = hermit_scope(cli, from)?;
            let files = hermit.ok_or_else(|| CliError::Usage("no hermit files read".into()))?;
            engine.proposals().import(&call_in(cli, "import", &scope), files)?
        }
        Layout::HermitHeartbeat => {
            let scope = hermit_scope(cli, from)?;
            let files = beat.ok_or_else(|| CliError::Usage("no heartbeat files read".into()))?;
            engine.alerts().import_heartbeat(&call_in(cli, "import", &scope), from, files)?
        }
    };
    print(cli.format, &outcome.to_json())?;
    match outcome.refusal {
        Some(refusal) => Err(CliError::Refused(refusal.message)),
        None => Ok(()),
    }
}

pub(crate) fn export(cli: &Cli, args: &ExportArgs) -> Result<(), CliError> {
    let to: &Path = &args.to;
    let name = file_name(args.layout, args.name.as_ref());
    check_file_name(args.name.as_ref())?;
    let engine = open(cli, Access::CheckedExport)?;
    let file = to.join(name);
    let mut out = match args.layout {
        Layout::Loopd => {
            let keys = engine.signals().export(to, name)?;
            let value = json!({ "layout": "loopd", "file": file, "keys": keys });
            value.as_object().cloned().unwrap_or_default()
        }
        Layout::Observer | Layout::Moonshine => {
            let mut out = engine.observer().export(&cli.scope, to, name)?;
            out.insert("layout".into(), "observer".into());
            out.insert("file".into(), json!(file));
            out
        }
        Layout::HermitProposals => {
            let scope = hermit_target(cli, None)?;
            let mut out = engine.proposals().export(&scope, to)?;
            out.insert("layout".into(), "hermit-proposals".into());
            out.insert("scope".into(), json!(scope));
            out
        }
        Layout::HermitAlerts => {
            let scope = hermit_target(cli, None)?;
            let mut out = engine.alerts().export_alerts(&scope, to)?;
            out.insert("layout".into(), "hermit-alerts".into());
            out.insert("scope".into(), json!(scope));
            out
        }
        Layout::HermitSession => return Err(CliError::Usage("the session layout's own".into())),
        Layout::HermitHeartbeat => {
            let scope = hermit_target(cli, None)?;
            let mut out = engine.alerts().export_heartbeat(&scope, to)?;
            out.insert("layout".into(), "hermit-heartbeat".into());
            out.insert("scope".into(), json!(scope));
            out
        }
    };
    out.insert("ok".into(), true.into());
    print(cli.format, &serde_json::Value::Object(out))
}
