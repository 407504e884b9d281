//! `import` and `export` of legacy layouts.
//!
//! Does not know file formats; the engine's legacy module does.

use hookstate_engine::legacy::{hermit, loopd, observer};
use serde_json::json;

use crate::args::{Cli, Layout, LegacyArgs};
use crate::cmd::proposals::hermit_target;
use crate::cmd::{call, call_in, open, Access};
use crate::exit::CliError;
use crate::output::print;

fn name(args: &LegacyArgs) -> &str {
    args.name.as_deref().unwrap_or(match args.layout {
        Layout::Loopd => loopd::STORE_FILE_DEFAULT,
        Layout::Observer => observer::STATE_FILE_DEFAULT,
        Layout::HermitProposals => hermit::QUEUE_FILE,
    })
}

/// The hermit scope of an import or export: `--scope hermit:<dir>` when given, else the
/// import's own directory.
fn hermit_scope(
    cli: &Cli,
    dir: &std::path::Path,
) -> Result<(String, std::path::PathBuf), CliError> {
    if cli.scope.starts_with(hookstate_engine::proposals::SCOPE_PREFIX) {
        hermit_target(cli, None)
    } else {
        hermit_target(cli, Some(dir))
    }
}

pub(crate) fn import(cli: &Cli, args: &LegacyArgs) -> Result<(), CliError> {
    let from =
        args.from.as_ref().ok_or_else(|| CliError::Usage("import needs --from DIR".into()))?;
    // Legacy files are read and checked before the store is opened, so a bad file leaves the
    // store byte-identical.
    let hermit = match args.layout {
        Layout::HermitProposals => Some(hermit::read_hermit_files(from)?),
        _ => None,
    };
    let engine = open(cli, Access::Write)?;
    let call = call(cli, "import");
    let outcome = match args.layout {
        Layout::Loopd => engine.import_loopd(&call, from, name(args))?,
        Layout::Observer => engine.import_observer(&call, from, name(args))?,
        Layout::HermitProposals => {
            let (scope, _) = hermit_scope(cli, from)?;
            let files = hermit.ok_or_else(|| CliError::Usage("no hermit files read".into()))?;
            engine.import_hermit_proposals(&call_in(cli, "import", &scope), files)?
        }
    };
    print(cli.format, &outcome.to_json())?;
    match outcome.refusal {
        Some(refusal) => Err(CliError::Refused(refusal.message)),
        None => Ok(()),
    }
}

pub(crate) fn export(cli: &Cli, args: &LegacyArgs) -> Result<(), CliError> {
    let to = args.to.as_ref().ok_or_else(|| CliError::Usage("export needs --to DIR".into()))?;
    let engine = open(cli, Access::Audit)?;
    let file = to.join(name(args));
    match args.layout {
        Layout::Loopd => {
            let keys = engine.export_loopd(to, name(args))?;
            print(cli.format, &json!({ "ok": true, "layout": "loopd", "file": file, "keys": keys }))
        }
        Layout::Observer => {
            let mut out = engine.export_observer(&cli.scope, to, name(args))?;
            out.insert("ok".into(), true.into());
            out.insert("layout".into(), "observer".into());
            out.insert("file".into(), json!(file));
            print(cli.format, &serde_json::Value::Object(out))
        }
        Layout::HermitProposals => {
            let (scope, _) = hermit_target(cli, None)?;
            let mut out = engine.export_hermit_proposals(&scope, to)?;
            out.insert("ok".into(), true.into());
            out.insert("layout".into(), "hermit-proposals".into());
            out.insert("scope".into(), json!(scope));
            print(cli.format, &serde_json::Value::Object(out))
        }
    }
}
