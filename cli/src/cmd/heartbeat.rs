//! The `alerts` verbs of the heartbeat half: budget alerts, monitor runtime, liveness, injection
//! alert, runtime fields and the next-task ack.
//!
//! With `--format verdict` a call prints upstream's line (several for `monitor start-check`);
//! refusals that upstream reports as a verdict exit 0 there, and 1 in json mode. Does not decide
//! anything.

use std::path::Path;
use std::time::{Duration, Instant};

use hookstate_engine::alerts::heartbeat::{parse_runtime_set, FILE_BYTES_MAX};
use hookstate_engine::alerts::heartbeat_rules::{
    check_hash, check_stamp, monitor_command, INTERVAL_S_DEFAULT, LIVENESS_POLL_MS,
    LIVENESS_WAIT_MS_MAX,
};
use hookstate_engine::alerts::layout_heartbeat::{read_config, HeartbeatConfig};
use hookstate_engine::alerts::{BudgetInput, MonitorSetup};
use hookstate_engine::proposals::layout::Mirror;
use hookstate_engine::{Call, Engine, Outcome};
use serde_json::{json, Value};

use crate::args::{
    AlertsArgs, AlertsVerb, BudgetVerb, Cli, Format, InjectionVerb, LivenessVerb, MonitorSetupArgs,
    MonitorVerb, NextTaskVerb, RuntimeVerb,
};
use crate::cmd::proposals::hermit_target;
use crate::cmd::{call_in, open, Access};
use crate::exit::CliError;
use crate::input::read_stdin;
use crate::output::{one_line, print, print_raw};

/// Whether a verb belongs to the heartbeat half (the alert-state ladder's run in `alerts.rs`).
pub(crate) fn handles(verb: &AlertsVerb) -> bool {
    !matches!(verb, AlertsVerb::Tick | AlertsVerb::CountTick | AlertsVerb::List)
}

pub(crate) fn run(cli: &Cli, args: &AlertsArgs) -> Result<(), CliError> {
    let (scope, dir) = hermit_target(cli, args.dir.as_deref())?;
    let dir_text = dir.to_string_lossy().into_owned();
    let config = read_config(&dir)?;
    match &args.verb {
        AlertsVerb::Budget(BudgetVerb::List) => {
            let alerts = open(cli, Access::Read)?.alerts().budget_alerts(&scope)?;
            print(cli.format, &json!({ "ok": true, "alerts": alerts }))
        }
        AlertsVerb::Monitor(MonitorVerb::Status(setup)) => {
            let setup = monitor_setup(setup, &config, &dir_text)?;
            let now = call_in(cli, "alerts-monitor-status", &scope).now_ms;
            let (healthy, reason) =
                open(cli, Access::Read)?.alerts().monitor_status(&scope, &setup, now)?;
            let line = format!("{}|{reason}", if healthy { "HEALTHY" } else { "UNHEALTHY" });
            let value =
                json!({ "ok": true, "healthy": healthy, "reason": reason, "verdict": line });
            print(cli.format, &value)
        }
        AlertsVerb::Liveness(LivenessVerb::Read) => liveness_read(cli, &scope),
        AlertsVerb::Injection(InjectionVerb::Check { hash }) => {
            check_hash(hash)?;
            let (announced, stored) =
                open(cli, Access::Read)?.alerts().injection_check(&scope, hash)?;
            let line = if announced {
                "SKIP|injection-suspect (announced)".to_owned()
            } else {
                format!("NEW|{hash}")
            };
            let value = json!({ "ok": true, "announced": announced, "hash": hash,
                                "stored_hash": stored, "verdict": line });
            print(cli.format, &value)
        }
        AlertsVerb::NextTask(NextTaskVerb::Token) => {
            let engine = open(cli, Access::Read)?;
            let value = match engine.alerts().next_task_token(&scope, config.next_task_ack)? {
                Ok(token) => json!({ "ok": true, "token": token, "verdict": token }),
                Err(reason) => json!({ "ok": true, "token": null, "reason": reason,
                                       "verdict": format!("NONE|{reason}") }),
            };
            print(cli.format, &value)
        }
        AlertsVerb::Runtime(RuntimeVerb::Get) => {
            let runtime = open(cli, Access::Read)?.alerts().runtime(&scope)?;
            print(cli.format, &json!({ "ok": true, "runtime": runtime }))
        }
        verb => mutate(cli, verb, &scope, &dir_text, &config),
    }
}

fn liveness_read(cli: &Cli, scope: &str) -> Result<(), CliError> {
    let now = call_in(cli, "alerts-liveness-read", scope).now_ms;
    let (alive, age) = open(cli, Access::Read)?.alerts().liveness_read(scope, now)?;
    let line = match (alive, age) {
        (true, Some(age)) => format!("ALIVE|age={age}"),
        (_, Some(_)) => "UNKNOWN|stale".to_owned(),
        (_, None) => "UNKNOWN|absent".to_owned(),
    };
    let state = if alive { "alive" } else { "unknown" };
    print(cli.format, &json!({ "ok": true, "state": state, "age_s": age, "verdict": line }))
}

fn monitor_setup(
    args: &MonitorSetupArgs,
    config: &HeartbeatConfig,
    dir: &str,
) -> Result<MonitorSetup, CliError> {
    let root = args.plugin_root.as_deref().ok_or_else(|| {
        CliError::Usage("monitor verbs need --plugin-root DIR or CLAUDE_PLUGIN_ROOT".into())
    })?;
    let interval_s = args.interval.or(config.every_s).unwrap_or(INTERVAL_S_DEFAULT).max(1);
    let setup = MonitorSetup {
        interval_s,
        command: monitor_command(root, interval_s, dir),
        boot_id: args.boot_id.clone().or_else(|| config.boot_id.clone()),
        disabled: config.heartbeat_disabled,
    };
    hookstate_engine::alerts::heartbeat::check_setup(&setup)?;
    Ok(setup)
}

/// Stdin and arguments checked before the store is opened, so bad input leaves it untouched.
enum Input {
    None,
    Budget(BudgetInput),
    Text(String),
    Runtime(Vec<(String, Value)>),
    Setup(MonitorSetup),
}

fn read_input(verb: &AlertsVerb, config: &HeartbeatConfig, dir: &str) -> Result<Input, CliError> {
    Ok(match verb {
        AlertsVerb::Budget(BudgetVerb::Record { level, period, action, spend, cap }) => {
            let input = BudgetInput {
                level: level.clone(),
                period: period.clone(),
                action: action.clone(),
                spend: *spend,
                cap: *cap,
            };
            hookstate_engine::alerts::heartbeat_rules::check_budget(&input)?;
            Input::Budget(input)
        }
        AlertsVerb::NextTask(NextTaskVerb::Queue { .. }) => {
            let text = read_stdin()?;
            if text.is_empty() || text.len() > FILE_BYTES_MAX {
                return Err(CliError::Invalid(format!(
                    "the next task must be 1 to {FILE_BYTES_MAX} bytes"
                )));
            }
            Input::Text(text)
        }
        AlertsVerb::Runtime(RuntimeVerb::Set { fields, unset }) => {
            let sets =
                fields.iter().map(|f| parse_runtime_set(f)).collect::<Result<Vec<_>, _>>()?;
            for name in unset {
                check_stamp("runtime field name", name)?;
            }
            Input::Runtime(sets)
        }
        AlertsVerb::Injection(InjectionVerb::Record { hash, announced_at }) => {
            check_hash(hash)?;
            if let Some(stamp) = announced_at {
                check_stamp("announced_at", stamp)?;
            }
            Input::None
        }
        AlertsVerb::Budget(BudgetVerb::MarkNotified { key }) => {
            check_stamp("alert key", key)?;
            Input::None
        }
        AlertsVerb::NextTask(NextTaskVerb::Ack { token }) => {
            check_stamp("token", token)?;
            Input::None
        }
        AlertsVerb::Monitor(MonitorVerb::StartCheck(setup)) => {
            Input::Setup(monitor_setup(setup, config, dir)?)
        }
        AlertsVerb::Monitor(MonitorVerb::StartCommit { setup, liveness_wait_ms, task_id }) => {
            check_stamp("task id", task_id)?;
            if *liveness_wait_ms > LIVENESS_WAIT_MS_MAX {
                return Err(CliError::Invalid(format!(
                    "--liveness-wait-ms is at most {LIVENESS_WAIT_MS_MAX}"
                )));
            }
            Input::Setup(monitor_setup(setup, config, dir)?)
        }
        _ => Input::None,
    })
}

fn mutate(
    cli: &Cli,
    verb: &AlertsVerb,
    scope: &str,
    dir: &str,
    config: &HeartbeatConfig,
) -> Result<(), CliError> {
    let input = read_input(verb, config, dir)?;
    let call = call_in(cli, "alerts", scope);
    hookstate_engine::alerts::heartbeat_rules::check_time(call.now_ms)?;
    let engine = open(cli, Access::Write)?;
    let mirror = match &cli.mirror {
        Some(dir) => Some(mirror_begin(cli, &engine, &call, dir)?),
        None => None,
    };
    let outcome = apply(cli, &engine, verb, scope, config, input)?;
    if let Some(mirror) = mirror {
        engine.alerts().heartbeat_mirror_end(mirror, scope)?;
    }
    finish(cli, &outcome)
}

/// Takes the hermit mirror lock, adopts outside changes to the proposals files (the hermit
/// mirror machinery) and to the heartbeat files.
fn mirror_begin(cli: &Cli, engine: &Engine, call: &Call, dir: &Path) -> Result<Mirror, CliError> {
    let wait = Duration::from_millis(cli.wait_ms);
    let (mirror, _) = engine.proposals().mirror_begin(call, dir, wait)?;
    engine.alerts().heartbeat_mirror_adopt(call, &mirror)?;
    Ok(mirror)
}

fn apply(
    cli: &Cli,
    engine: &Engine,
    verb: &AlertsVerb,
    scope: &str,
    config: &HeartbeatConfig,
    input: Input,
) -> Result<Outcome, CliError> {
    let call = |hook: &str| call_in(cli, hook, scope);
    let tz = config.timezone.as_str();
    Ok(match (verb, input) {
        (AlertsVerb::Budget(BudgetVerb::Record { .. }), Input::Budget(input)) => {
            engine.alerts().budget_record(&call("alerts-budget-record"), tz, &input)?
        }
        (AlertsVerb::Budget(BudgetVerb::MarkNotified { key }), _) => {
            engine.alerts().budget_mark(&call("alerts-budget-mark-notified"), key)?
        }
        (AlertsVerb::Budget(BudgetVerb::Reap), _) => {
            engine.alerts().budget_reap(&call("alerts-budget-reap"), tz)?
        }
        (AlertsVerb::Monitor(MonitorVerb::StartCheck(_)), Input::Setup(setup)) => {
            engine.alerts().monitor_check(&call("alerts-monitor-start-check"), &setup)?
        }
        (
            AlertsVerb::Monitor(MonitorVerb::StartCommit { task_id, liveness_wait_ms, .. }),
            Input::Setup(setup),
        ) => {
            wait_for_liveness(engine, scope, *liveness_wait_ms)?;
            // The clock is read after the wait, so `started_at` is the time of the write.
            engine.alerts().monitor_commit(&call("alerts-monitor-start-commit"), &setup, task_id)?
        }
        (AlertsVerb::Monitor(MonitorVerb::Stop), _) => {
            engine.alerts().monitor_stop(&call("alerts-monitor-stop"))?
        }
        (AlertsVerb::Liveness(LivenessVerb::Peek), _) => {
            engine.alerts().liveness_peek(&call("alerts-liveness-peek"))?
        }
        (AlertsVerb::Injection(InjectionVerb::Record { hash, announced_at }), _) => engine
            .alerts()
            .injection_record(&call("alerts-injection-record"), hash, announced_at.as_deref())?,
        (AlertsVerb::NextTask(NextTaskVerb::Queue { replace }), Input::Text(text)) => {
            engine.alerts().next_task_queue(&call("alerts-next-task-queue"), &text, *replace)?
        }
        (AlertsVerb::NextTask(NextTaskVerb::Consume), _) => {
            engine.alerts().next_task_consume(&call("alerts-next-task-consume"))?
        }
        (AlertsVerb::NextTask(NextTaskVerb::Ack { token }), _) => engine.alerts().next_task_ack(
            &call("alerts-next-task-ack"),
            config.next_task_ack,
            tz,
            token,
        )?,
        (AlertsVerb::Runtime(RuntimeVerb::Set { unset, .. }), Input::Runtime(sets)) => {
            engine.alerts().runtime_set(&call("alerts-runtime-set"), tz, &sets, unset)?
        }
        _ => return Err(CliError::Usage("not a mutation".into())),
    })
}

/// Polls the liveness record until it exists or `wait_ms` ran out (upstream's
/// `waitForFirstTick`).
fn wait_for_liveness(engine: &Engine, scope: &str, wait_ms: u64) -> Result<(), CliError> {
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    while engine.alerts().liveness(scope)?.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(LIVENESS_POLL_MS));
    }
    Ok(())
}

/// Prints the outcome; a refusal exits 1, except in verdict mode, where upstream prints its
/// verdict line with exit 0.
fn finish(cli: &Cli, outcome: &Outcome) -> Result<(), CliError> {
    let value = outcome.to_json();
    if cli.format == Format::Verdict {
        let verdict = value["verdict"].as_str().unwrap_or("ERROR|unexpected");
        for line in verdict.lines() {
            print_raw(&one_line(line))?;
        }
        return Ok(());
    }
    print(cli.format, &value)?;
    match &outcome.refusal {
        Some(refusal) => Err(CliError::Refused(refusal.message.clone())),
        None => Ok(()),
    }
}
