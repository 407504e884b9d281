//! The `alerts` verbs of the heartbeat half: budget alerts, monitor runtime, liveness, injection
//! alert, runtime fields and the next-task ack.
//!
//! Parses arguments and stdin into one engine call per verb (the arguments checked by the
//! engine's checks before the store is opened); with `--mirror DIR` the call is mirrored over
//! the whole state directory. With `--format verdict` a call prints upstream's line (several for
//! `monitor start-check`); the engine writes every line and says which refusals upstream prints
//! with exit 0. Does not decide anything.

use hookstate_engine::{
    check_budget, check_hash, check_liveness_wait, check_next_task, check_stamp, check_time,
    monitor_setup, next_task_refused, parse_runtime_set, BudgetInput, MonitorArgs, MonitorSetup,
};
use hookstate_engine::{Call, Engine, Outcome};
use serde_json::{json, Value};

use crate::args::{
    AlertsArgs, AlertsVerb, BudgetVerb, Cli, Format, InjectionVerb, Layout, LivenessVerb,
    MonitorSetupArgs, MonitorVerb, NextTaskVerb, RuntimeVerb,
};
use crate::cmd::hermit::hermit_scope;
use crate::cmd::{call_in, finish_script, mutate, open, print_read, Access};
use crate::exit::CliError;
use crate::input::read_stdin_text;
use crate::output::{print, print_raw};

/// Whether a verb belongs to the heartbeat half (the alert-state ladder's run in `alerts.rs`).
pub(crate) fn handles(verb: &AlertsVerb) -> bool {
    !matches!(verb, AlertsVerb::Tick | AlertsVerb::CountTick | AlertsVerb::List)
}

pub(crate) fn run(cli: &Cli, args: &AlertsArgs) -> Result<(), CliError> {
    let scope = hermit_scope(cli, args.dir.as_deref())?;
    let read = || open(cli, Access::Read);
    match &args.verb {
        AlertsVerb::Budget(BudgetVerb::List) => {
            let alerts = read()?.alerts().budget_alerts(&scope)?;
            print(cli.format, &json!({ "ok": true, "alerts": alerts }))
        }
        AlertsVerb::Monitor(MonitorVerb::Status(args)) => {
            let setup = monitor_setup(&scope, &monitor_args(args)?)?;
            let now = call_in(cli, "alerts-monitor-status", &scope).now_ms;
            print_read(cli, &read()?.alerts().monitor_status(&scope, &setup, now)?)
        }
        AlertsVerb::Liveness(LivenessVerb::Read) => {
            let now = call_in(cli, "alerts-liveness-read", &scope).now_ms;
            print_read(cli, &read()?.alerts().liveness_read(&scope, now)?)
        }
        AlertsVerb::Injection(InjectionVerb::Check { hash }) => {
            check_hash(hash)?;
            print_read(cli, &read()?.alerts().injection_check(&scope, hash)?)
        }
        AlertsVerb::NextTask(NextTaskVerb::Token) => {
            print_read(cli, &read()?.alerts().next_task_token(&scope)?)
        }
        AlertsVerb::Runtime(RuntimeVerb::Get) => {
            let runtime = read()?.alerts().runtime(&scope)?;
            print(cli.format, &json!({ "ok": true, "runtime": runtime }))
        }
        verb => mutation(cli, verb, &scope),
    }
}

/// The monitor arguments, with the plugin root that every monitor verb needs.
fn monitor_args(args: &MonitorSetupArgs) -> Result<MonitorArgs, CliError> {
    let plugin_root = args.plugin_root.clone().ok_or_else(|| {
        CliError::Usage("monitor verbs need --plugin-root DIR or CLAUDE_PLUGIN_ROOT".into())
    })?;
    Ok(MonitorArgs { interval_s: args.interval, plugin_root, boot_id: args.boot_id.clone() })
}

/// Stdin and arguments checked before the store is opened, so bad input leaves it untouched.
enum Input {
    None,
    Budget(BudgetInput),
    Text(String),
    Runtime(Vec<(String, Value)>),
    Setup(MonitorSetup),
    /// Upstream's verdict line for input it refuses before writing (printed with exit 0).
    Refused(&'static str),
}

fn read_input(cli: &Cli, verb: &AlertsVerb, scope: &str) -> Result<Input, CliError> {
    Ok(match verb {
        AlertsVerb::Budget(BudgetVerb::Record { level, period, action, spend, cap }) => {
            let input = BudgetInput {
                level: level.clone(),
                period: period.clone(),
                action: action.clone(),
                spend: *spend,
                cap: *cap,
            };
            check_budget(&input)?;
            Input::Budget(input)
        }
        AlertsVerb::NextTask(NextTaskVerb::Queue { .. }) => {
            let text = read_stdin_text()?;
            if let Some(line) = next_task_refused(&text).filter(|_| cli.format == Format::Verdict) {
                return Ok(Input::Refused(line));
            }
            check_next_task(&text)?;
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
        AlertsVerb::Monitor(MonitorVerb::StartCheck(args)) => {
            Input::Setup(monitor_setup(scope, &monitor_args(args)?)?)
        }
        AlertsVerb::Monitor(MonitorVerb::StartCommit { setup, liveness_wait_ms, task_id }) => {
            check_stamp("task id", task_id)?;
            check_liveness_wait(*liveness_wait_ms)?;
            Input::Setup(monitor_setup(scope, &monitor_args(setup)?)?)
        }
        _ => Input::None,
    })
}

fn mutation(cli: &Cli, verb: &AlertsVerb, scope: &str) -> Result<(), CliError> {
    let input = read_input(cli, verb, scope)?;
    if let Input::Refused(line) = input {
        return print_raw(line);
    }
    let call = call_in(cli, hook_name(verb), scope);
    check_time(call.now_ms)?;
    let engine = open(cli, Access::Write)?;
    let outcome = mutate(cli, &engine, &call, Layout::HermitHeartbeat, |engine| {
        apply(engine, &call, verb, input)
    })?;
    finish_script(cli, &outcome)
}

fn hook_name(verb: &AlertsVerb) -> &'static str {
    match verb {
        AlertsVerb::Budget(BudgetVerb::Record { .. }) => "alerts-budget-record",
        AlertsVerb::Budget(BudgetVerb::MarkNotified { .. }) => "alerts-budget-mark-notified",
        AlertsVerb::Budget(_) => "alerts-budget-reap",
        AlertsVerb::Monitor(MonitorVerb::StartCheck(_)) => "alerts-monitor-start-check",
        AlertsVerb::Monitor(MonitorVerb::StartCommit { .. }) => "alerts-monitor-start-commit",
        AlertsVerb::Monitor(_) => "alerts-monitor-stop",
        AlertsVerb::Liveness(_) => "alerts-liveness-peek",
        AlertsVerb::Injection(_) => "alerts-injection-record",
        AlertsVerb::NextTask(NextTaskVerb::Queue { .. }) => "alerts-next-task-queue",
        AlertsVerb::NextTask(NextTaskVerb::Consume) => "alerts-next-task-consume",
        AlertsVerb::NextTask(_) => "alerts-next-task-ack",
        _ => "alerts-runtime-set",
    }
}

/// The one engine call of a mutation.
fn apply(
    engine: &Engine,
    call: &Call,
    verb: &AlertsVerb,
    input: Input,
) -> hookstate_engine::Result<Outcome> {
    let alerts = engine.alerts();
    match (verb, input) {
        (AlertsVerb::Budget(BudgetVerb::Record { .. }), Input::Budget(input)) => {
            alerts.budget_record(call, &input)
        }
        (AlertsVerb::Budget(BudgetVerb::MarkNotified { key }), _) => alerts.budget_mark(call, key),
        (AlertsVerb::Budget(BudgetVerb::Reap), _) => alerts.budget_reap(call),
        (AlertsVerb::Monitor(MonitorVerb::StartCheck(_)), Input::Setup(setup)) => {
            alerts.monitor_check(call, &setup)
        }
        (
            AlertsVerb::Monitor(MonitorVerb::StartCommit { task_id, liveness_wait_ms, .. }),
            Input::Setup(setup),
        ) => alerts.monitor_commit(call, &setup, task_id, *liveness_wait_ms),
        (AlertsVerb::Monitor(MonitorVerb::Stop), _) => alerts.monitor_stop(call),
        (AlertsVerb::Liveness(LivenessVerb::Peek), _) => alerts.liveness_peek(call),
        (AlertsVerb::Injection(InjectionVerb::Record { hash, announced_at }), _) => {
            alerts.injection_record(call, hash, announced_at.as_deref())
        }
        (AlertsVerb::NextTask(NextTaskVerb::Queue { replace }), Input::Text(text)) => {
            alerts.next_task_queue(call, &text, *replace)
        }
        (AlertsVerb::NextTask(NextTaskVerb::Consume), _) => alerts.next_task_consume(call),
        (AlertsVerb::NextTask(NextTaskVerb::Ack { token }), _) => alerts.next_task_ack(call, token),
        (AlertsVerb::Runtime(RuntimeVerb::Set { unset, .. }), Input::Runtime(sets)) => {
            alerts.runtime_set(call, &sets, unset)
        }
        _ => Err(hookstate_engine::Error::BadInput {
            what: "the verb".into(),
            why: "is not a mutation".into(),
        }),
    }
}
