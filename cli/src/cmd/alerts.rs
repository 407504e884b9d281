//! The `alerts` verbs of the ladder: drop-ins for `heartbeat.ts alert-state` (`tick`),
//! precheck's tick count (`count-tick`), and a read of the alert state (`list`).
//!
//! With `--format verdict`, `tick` prints upstream's one JSON line; a rejected payload prints
//! nothing and writes nothing, as upstream's fail-safe contract says (exit 1 with a stderr line
//! only for unparseable JSON). The engine writes the line. Does not decide anything.

use std::io::Write;

use hookstate_engine::{
    alert_state_read_failure, check_time, hermit_alert_state, parse_tick_input, tick_line,
    Rejection,
};
use serde_json::Value;

use crate::args::{AlertsArgs, AlertsVerb, Cli, Format, Layout};
use crate::cmd::hermit::hermit_scope;
use crate::cmd::{call_in, mutate, open, warn_conflicts, Access};
use crate::exit::CliError;
use crate::input::read_stdin;
use crate::output::{print, print_raw};

pub(crate) fn run(cli: &Cli, args: &AlertsArgs) -> Result<(), CliError> {
    let scope = hermit_scope(cli, args.dir.as_deref())?;
    match args.verb {
        AlertsVerb::List => {
            let state = open(cli, Access::Read)?.alerts().state(&scope)?;
            print(Format::Json, &Value::Object(state))
        }
        AlertsVerb::CountTick => {
            let call = call_in(cli, "alerts-count-tick", &scope);
            let engine = open(cli, Access::Write)?;
            let outcome = mutate(cli, &engine, &call, Layout::HermitAlerts, |engine| {
                engine.alerts().count_tick(&call)
            })?;
            warn_conflicts(&outcome);
            print(Format::Json, &outcome.to_json())
        }
        AlertsVerb::Tick => tick(cli, &scope),
        // The heartbeat half's verbs run in `heartbeat.rs`; `cmd::run` sends them there.
        _ => Err(CliError::Usage("not an alert-state verb".into())),
    }
}

fn tick(cli: &Cli, scope: &str) -> Result<(), CliError> {
    let call = call_in(cli, "alerts-tick", scope);
    let verdict = cli.format == Format::Verdict;
    // Stdin is read and checked before the store is opened, so bad input leaves it untouched.
    let parsed = match read_stdin() {
        Ok(text) => parse_tick_input(&text),
        Err(CliError::Invalid(_)) if verdict => Err(Rejection::unreadable()),
        Err(err) => return Err(err),
    };
    let input = match parsed {
        Ok(input) => input,
        Err(rejection) if verdict && !rejection.unparseable => return Ok(()),
        Err(rejection) => return Err(rejection.error().into()),
    };
    check_time(call.now_ms)?;
    // Upstream skips a tick whose state file it cannot read (exit 0, one stderr line).
    if let Some(line) = cli.mirror.as_deref().filter(|_| verdict).and_then(alert_state_read_failure)
    {
        let _ = writeln!(std::io::stderr(), "{line}");
        return Ok(());
    }
    let engine = open(cli, Access::Write)?;
    // Mirrored, the decision sources are the directory's files, as upstream reads them.
    let outcome = match cli.mirror.as_deref() {
        Some(dir) => hermit_alert_state(&engine, &call, dir, &input)?,
        None => mutate(cli, &engine, &call, Layout::HermitAlerts, |engine| {
            engine.alerts().tick(&call, &input)
        })?,
    };
    warn_conflicts(&outcome);
    if verdict {
        return print_raw(&tick_line(&outcome));
    }
    print(cli.format, &outcome.to_json())
}
