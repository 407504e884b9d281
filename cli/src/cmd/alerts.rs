//! The `alerts` verbs: drop-ins for `heartbeat.ts alert-state` (`tick`), precheck's tick count
//! (`count-tick`), and a read of the alert state (`list`).
//!
//! With `--format verdict`, `tick` prints upstream's one JSON line, and a rejected payload its
//! INDETERMINATE line (exit 1 only for unparseable JSON). Does not decide anything.

use hookstate_engine::alerts::ladder::{indeterminate, parse_tick_input, TickClock};
use hookstate_engine::proposals::layout::read_timezone;
use serde_json::Value;

use crate::args::{AlertsArgs, AlertsVerb, Cli, Format};
use crate::cmd::proposals::{hermit_target, writer};
use crate::cmd::{call_in, now_ms, open, Access};
use crate::exit::CliError;
use crate::input::read_stdin;
use crate::output::{print, print_raw};

/// The fields of upstream's stdout line, in its order (the rest of the result is hookstate's).
const VERDICT_FIELDS: [&str; 5] =
    ["appended", "notifications", "self_eval_proposals", "heartbeat_result", "monitoring_lines"];

pub(crate) fn run(cli: &Cli, args: &AlertsArgs) -> Result<(), CliError> {
    let (scope, dir) = hermit_target(cli, args.dir.as_deref())?;
    match args.verb {
        AlertsVerb::List => {
            let state = open(cli, Access::Read)?.alerts().state(&scope)?;
            print(Format::Json, &Value::Object(state))
        }
        AlertsVerb::CountTick => {
            let writer = writer(cli, &scope)?;
            let outcome =
                writer.engine.alerts().count_tick(&call_in(cli, "alerts-count-tick", &scope))?;
            if let Some(mirror) = writer.mirror {
                writer.engine.proposals().alerts_mirror_end(mirror, &scope)?;
            }
            print(Format::Json, &outcome.to_json())
        }
        AlertsVerb::Tick => tick(cli, &scope, &dir),
        // The heartbeat half's verbs run in `heartbeat.rs`; `cmd::run` sends them there.
        _ => Err(CliError::Usage("not an alert-state verb".into())),
    }
}

fn tick(cli: &Cli, scope: &str, dir: &std::path::Path) -> Result<(), CliError> {
    let timezone = read_timezone(dir)?;
    let now = cli.now_ms.unwrap_or_else(now_ms);
    // Stdin is read and checked before the store is opened, so bad input leaves it untouched.
    let parsed = match read_stdin() {
        Ok(text) => parse_tick_input(&text),
        Err(CliError::Invalid(_)) if cli.format == Format::Verdict => {
            Err(hookstate_engine::alerts::ladder::Rejection {
                reason: "invalid-json".into(),
                unparseable: true,
            })
        }
        Err(err) => return Err(err),
    };
    let input = match parsed {
        Ok(input) => input,
        Err(rejection) if cli.format == Format::Verdict => {
            let clock = TickClock::at(now, &timezone)?;
            print_raw(&indeterminate(&rejection.reason, &clock).to_string())?;
            if rejection.unparseable {
                return Err(CliError::Invalid("alerts tick: invalid payload JSON".into()));
            }
            return Ok(());
        }
        Err(rejection) => {
            return Err(CliError::Invalid(format!(
                "alerts tick: payload rejected ({})",
                rejection.reason
            )))
        }
    };
    hookstate_engine::alerts::heartbeat_rules::check_time(now)?;
    let writer = writer(cli, scope)?;
    let outcome =
        writer.engine.alerts().tick(&call_in(cli, "alerts-tick", scope), &timezone, &input)?;
    if let Some(mirror) = writer.mirror {
        writer.engine.proposals().alerts_mirror_end(mirror, scope)?;
    }
    if cli.format == Format::Verdict {
        let mut line = serde_json::Map::new();
        for field in VERDICT_FIELDS {
            if let Some(value) = outcome.result.get(field) {
                line.insert(field.into(), value.clone());
            }
        }
        return print_raw(&Value::Object(line).to_string());
    }
    print(cli.format, &outcome.to_json())
}
