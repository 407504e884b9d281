//! `import` and `export` of the loopd and observer layouts (moonshine's are in `feedback.rs`).
//!
//! Does not know file formats; the engine's legacy module does.

use std::path::Path;

use hookstate_engine::legacy::{loopd, observer};
use serde_json::json;

use crate::args::{Cli, ExportArgs, ImportArgs, Layout};
use crate::cmd::{call, open, Access};
use crate::exit::CliError;
use crate::output::print;

fn file_name(layout: Layout, name: Option<&String>) -> &str {
    match (name, layout) {
        (Some(name), _) => name,
        (None, Layout::Loopd) => loopd::STORE_FILE_DEFAULT,
        (None, Layout::Observer | Layout::Moonshine) => observer::STATE_FILE_DEFAULT,
    }
}

pub(crate) fn import(cli: &Cli, args: &ImportArgs) -> Result<(), CliError> {
    let name = file_name(args.layout, args.name.as_ref());
    let engine = open(cli, Access::Write)?;
    let call = call(cli, "import");
    let outcome = match args.layout {
        Layout::Loopd => engine.import_loopd(&call, &args.from, name)?,
        Layout::Observer | Layout::Moonshine => engine.import_observer(&call, &args.from, name)?,
    };
    print(cli.format, &outcome.to_json())?;
    match outcome.refusal {
        Some(refusal) => Err(CliError::Refused(refusal.message)),
        None => Ok(()),
    }
}

pub(crate) fn export(cli: &Cli, args: &ExportArgs) -> Result<(), CliError> {
    let name = file_name(args.layout, args.name.as_ref());
    let to: &Path = &args.to;
    let engine = open(cli, Access::Audit)?;
    let file = to.join(name);
    match args.layout {
        Layout::Loopd => {
            let keys = engine.export_loopd(to, name)?;
            print(cli.format, &json!({ "ok": true, "layout": "loopd", "file": file, "keys": keys }))
        }
        Layout::Observer | Layout::Moonshine => {
            let mut out = engine.export_observer(&cli.scope, to, name)?;
            out.insert("ok".into(), true.into());
            out.insert("layout".into(), "observer".into());
            out.insert("file".into(), json!(file));
            print(cli.format, &serde_json::Value::Object(out))
        }
    }
}
