//! The `hermit` verbs: claude-code-hermit's session scripts as one engine call each. Takes the
//! state directory from the script's words (or `--dir`, `--scope hermit:<dir>`,
//! `./.claude-code-hermit`), reads stdin when the verb reads it, prints the answer (upstream's
//! lines with `--format verdict`, JSON otherwise) and exits with the answer's class.
//!
//! Does not decide anything; `engine.session()` does.

use std::path::{Path, PathBuf};

use hookstate_engine::{
    conversation_reads_stdin, hermit_dir, hermit_scope, task_reads_stdin, CheckResult, PauseInput,
    RuntimeWrite, SessionAnswer as Answer, SessionExit as Exit, VerdictStream as Stream,
};
use hookstate_engine::{Call, Engine};
use serde_json::Value;

use crate::args::{Cli, ExportArgs, Format, ImportArgs};
use crate::args_session::{HermitArgs, HermitVerb, MarkerVerb, RuntimeVerb};
use crate::cmd::{call_in, open, warn_conflicts, Access};
use crate::exit::{CliError, CONFLICT, INVALID, OK, USAGE};
use crate::input::read_stdin_text;
use crate::output::print;

/// Where upstream's scripts look when no directory is given (`hermitDir()`).
const DEFAULT_DIR: &str = ".claude-code-hermit";

/// The scope of the state directory `dir`, else of `--dir`, `--scope hermit:<dir>` or
/// [`DEFAULT_DIR`].
fn scope(cli: &Cli, args: &HermitArgs, dir: Option<&Path>) -> Result<String, CliError> {
    let dir = match (dir, args.dir.as_deref()) {
        (Some(dir), _) | (None, Some(dir)) => dir.to_path_buf(),
        (None, None) if hermit_dir(&cli.scope).is_ok() => return Ok(cli.scope.clone()),
        (None, None) => PathBuf::from(DEFAULT_DIR),
    };
    Ok(hermit_scope(&dir)?.0)
}

fn word(words: &[String], at: usize) -> Option<&Path> {
    words.get(at).map(Path::new)
}

fn stdin_if(read: bool) -> Result<String, CliError> {
    if read {
        read_stdin_text()
    } else {
        Ok(String::new())
    }
}

fn code(exit: Exit) -> u8 {
    match exit {
        Exit::Ok => OK,
        Exit::Refused => CONFLICT,
        Exit::Invalid => INVALID,
        Exit::Usage => USAGE,
    }
}

/// Prints an answer and ends the call with its exit.
fn finish(cli: &Cli, answer: &Answer) -> Result<(), CliError> {
    warn_conflicts(&answer.outcome);
    if cli.format == Format::Verdict {
        let text: String = answer.verdict.lines.iter().map(|l| format!("{l}\n")).collect();
        let written = match answer.verdict.stream {
            Stream::Stdout => {
                std::io::Write::write_all(&mut crate::output::stdout(), text.as_bytes())
            }
            Stream::Stderr => {
                std::io::Write::write_all(&mut crate::output::stderr(), text.as_bytes())
            }
        };
        written.map_err(|source| CliError::Io { op: "write the verdict".into(), source })?;
        return match code(answer.verdict_exit) {
            OK => Ok(()),
            other => Err(CliError::Quiet(other)),
        };
    }
    print(cli.format, &answer.outcome.to_json())?;
    let message =
        || answer.outcome.refusal.as_ref().map_or_else(String::new, |r| r.message.clone());
    match answer.exit {
        Exit::Ok => Ok(()),
        Exit::Refused => Err(CliError::Refused(message())),
        Exit::Invalid => Err(CliError::Invalid(message())),
        Exit::Usage => Err(CliError::Usage(message())),
    }
}

/// Runs one verb: as a mirrored call with `--mirror DIR`, and with a store opened for writing
/// unless it only reads.
fn call_verb(
    cli: &Cli,
    call: &Call,
    reads: bool,
    verb: impl FnOnce(&Engine) -> hookstate_engine::Result<Answer>,
) -> Result<(), CliError> {
    let Some(dir) = &cli.mirror else {
        let engine = open(cli, if reads { Access::Read } else { Access::Write })?;
        return finish(cli, &verb(&engine)?);
    };
    crate::cmd::check_hermit_mirror(call, dir)?;
    let engine = open(cli, Access::Write)?;
    // Every hermit verb keeps the whole state directory: its files share one scope.
    let layout = crate::cmd::layout(cli, crate::args::Layout::HermitSession)
        .unwrap_or(hookstate_engine::Layout::Hermit);
    let mut kept = None;
    let outcome = engine.mirrored(call, &layout, dir, |e| {
        let answer = verb(e)?;
        let outcome = answer.outcome.clone();
        kept = Some(answer);
        Ok(outcome)
    })?;
    let mut answer = kept.ok_or_else(|| CliError::Usage("the mirrored verb did not run".into()))?;
    answer.outcome.mirror = outcome.mirror;
    finish(cli, &answer)
}

/// `later check`'s result options, taken out of the words.
fn check_result(words: &mut Vec<String>, output: &str) -> Result<Option<CheckResult>, CliError> {
    let mut result = CheckResult { output: output.to_owned(), ..CheckResult::default() };
    let mut given = false;
    let mut rest = Vec::new();
    let mut iter = std::mem::take(words).into_iter();
    while let Some(w) = iter.next() {
        match w.as_str() {
            "--timed-out" => (result.timed_out, given) = (true, true),
            "--exit" | "--injection" => {
                let value =
                    iter.next().ok_or_else(|| CliError::Usage(format!("{w} needs a value")))?;
                if w == "--exit" {
                    let exit =
                        value.parse().map_err(|_| CliError::Usage(format!("--exit {value:?}")))?;
                    result.exit = Some(exit);
                } else {
                    result.injection = Some(value);
                }
                given = true;
            }
            _ => rest.push(w),
        }
    }
    *words = rest;
    Ok(given.then_some(result))
}

fn runtime_write(verb: &RuntimeVerb) -> Result<RuntimeWrite, CliError> {
    Ok(match verb {
        RuntimeVerb::Set { fields, unset, expect_updated_at } => {
            let mut sets = Vec::new();
            for field in fields {
                let (name, value) = field
                    .split_once('=')
                    .ok_or_else(|| CliError::Usage(format!("{field:?} is not FIELD=VALUE")))?;
                let value = serde_json::from_str::<Value>(value)
                    .unwrap_or_else(|_| Value::String(value.to_owned()));
                sets.push((name.to_owned(), value.to_string()));
            }
            let (unset, expect_updated_at) = (unset.clone(), expect_updated_at.clone());
            RuntimeWrite::Merge { sets, unset, expect_updated_at }
        }
        RuntimeVerb::Move { name, runtime_mode, tmux_session, timeout } => match name.as_str() {
            "seed" => RuntimeWrite::Seed {
                runtime_mode: runtime_mode.clone(),
                tmux_session: tmux_session.clone(),
            },
            "wait" => RuntimeWrite::Wait,
            "wait-timeout" => RuntimeWrite::WaitTimeout {
                timeout: timeout
                    .clone()
                    .ok_or_else(|| CliError::Usage("--timeout is needed".into()))?,
            },
            "resume" => RuntimeWrite::Resume,
            "halt" => RuntimeWrite::Halt,
            "shutdown-requested" => RuntimeWrite::ShutdownRequested,
            "shutdown-completed" => RuntimeWrite::ShutdownCompleted,
            other => return Err(CliError::Usage(format!("no runtime move {other:?}"))),
        },
        RuntimeVerb::Get => return Err(CliError::Usage("get is a read".into())),
    })
}

pub(crate) fn run(cli: &Cli, args: &HermitArgs) -> Result<(), CliError> {
    match &args.verb {
        HermitVerb::Task { words } => {
            let (verb, rest) = words.split_first().ok_or_else(|| usage("task <verb> <dir>"))?;
            let dir = word(words, 1).ok_or_else(|| usage("task <verb> <dir>"))?;
            let call = call_in(cli, "hermit-task", &scope(cli, args, Some(dir))?);
            let rest = rest.get(1..).unwrap_or_default().to_vec();
            let stdin = stdin_if(task_reads_stdin(verb, &rest))?;
            call_verb(cli, &call, verb == "list", |e| e.session().task(&call, verb, &rest, &stdin))
        }
        HermitVerb::Conversation { words } => {
            let dir = word(words, 0).ok_or_else(|| usage("conversation <dir> <verb>"))?;
            let verb = words.get(1).ok_or_else(|| usage("conversation <dir> <verb>"))?;
            let call = call_in(cli, "hermit-conversation", &scope(cli, args, Some(dir))?);
            let rest = words.get(2..).unwrap_or_default().to_vec();
            let stdin = stdin_if(conversation_reads_stdin(verb))?;
            let reads = verb == "lookup" || verb == "list";
            call_verb(cli, &call, reads, |e| e.session().conversation(&call, verb, &rest, &stdin))
        }
        HermitVerb::Observations { words } => {
            if words.first().map(String::as_str) != Some("observe") || words.len() < 2 {
                return Err(usage("observations observe <dir> <source> [--origin=…]"));
            }
            let call = call_in(cli, "hermit-observe", &scope(cli, args, word(words, 1))?);
            let rest = words.get(2..).unwrap_or_default().to_vec();
            let label = read_stdin_text()?;
            call_verb(cli, &call, false, |e| e.session().observe(&call, &rest, &label))
        }
        HermitVerb::PruneObservations { dir } => {
            let call = call_in(cli, "hermit-prune-observations", &scope(cli, args, Some(dir))?);
            call_verb(cli, &call, false, |e| e.session().prune_observations(&call))
        }
        HermitVerb::Later { words } => later(cli, args, words),
        verb => run_more(cli, args, verb),
    }
}

fn usage(what: &str) -> CliError {
    CliError::Usage(format!("hermit {what}: the script's words are missing"))
}

fn later(cli: &Cli, args: &HermitArgs, words: &[String]) -> Result<(), CliError> {
    let (verb, _) = words.split_first().ok_or_else(|| usage("later <verb> <dir>"))?;
    let dir = word(words, 1).ok_or_else(|| usage("later <verb> <dir>"))?;
    let call = call_in(cli, "hermit-later", &scope(cli, args, Some(dir))?);
    let mut rest = words.get(2..).unwrap_or_default().to_vec();
    let reads_stdin = verb == "check" || rest.iter().any(|w| w == "--reason-stdin");
    let stdin = stdin_if(reads_stdin)?;
    let result = if verb == "check" { check_result(&mut rest, &stdin)? } else { None };
    let reads = verb == "list" || verb == "due";
    call_verb(cli, &call, reads, |e| e.session().later(&call, verb, &rest, &stdin, result.as_ref()))
}

fn run_more(cli: &Cli, args: &HermitArgs, verb: &HermitVerb) -> Result<(), CliError> {
    match verb {
        HermitVerb::SessionArchive { words } => {
            let flag = words.iter().find_map(|w| w.strip_prefix("--state-dir=")).map(Path::new);
            let call = call_in(cli, "hermit-session-archive", &scope(cli, args, flag)?);
            let reads_stdin = matches!(words.first().map(String::as_str), Some("archive" | "open"));
            let stdin = stdin_if(reads_stdin)?;
            call_verb(cli, &call, false, |e| e.session().session_archive(&call, words, &stdin))
        }
        HermitVerb::RecordOperatorAction { force } => {
            let call = call_in(cli, "hermit-record-operator-action", &scope(cli, args, None)?);
            let stdin = stdin_if(!force)?;
            call_verb(cli, &call, false, |e| {
                e.session().record_operator_action(&call, *force, &stdin)
            })
        }
        HermitVerb::ShellAppend { words } => {
            let dir = word(words, 0).ok_or_else(|| usage("shell-append <dir> --section <s>"))?;
            let call = call_in(cli, "hermit-shell-append", &scope(cli, args, Some(dir))?);
            let at = words.iter().position(|w| w == "--section");
            let section = at.and_then(|i| words.get(i + 1)).map(String::as_str);
            let line = read_stdin_text()?;
            call_verb(cli, &call, false, |e| e.session().shell_append(&call, section, &line))
        }
        HermitVerb::ShellMonitoring => {
            let call = call_in(cli, "hermit-shell-monitoring", &scope(cli, args, None)?);
            let tick: Value = serde_json::from_str(&read_stdin_text()?)
                .map_err(|e| CliError::Invalid(format!("stdin is not the tick's JSON: {e}")))?;
            let lines: Vec<String> = tick["monitoring_lines"]
                .as_array()
                .map(|a| a.iter().filter_map(|l| l.as_str().map(str::to_owned)).collect())
                .unwrap_or_default();
            call_verb(cli, &call, false, |e| e.session().shell_monitoring(&call, &lines))
        }
        HermitVerb::ShellFindings { id, title, findings } => {
            let call = call_in(cli, "hermit-shell-findings", &scope(cli, args, None)?);
            call_verb(cli, &call, false, |e| e.session().shell_findings(&call, id, findings, title))
        }
        HermitVerb::Runtime(verb) => {
            let call = call_in(cli, "hermit-runtime", &scope(cli, args, None)?);
            if matches!(verb, RuntimeVerb::Get) {
                return call_verb(cli, &call, true, |e| e.session().runtime_get(&call.scope));
            }
            let write = runtime_write(verb)?;
            call_verb(cli, &call, false, |e| e.session().runtime(&call, &write))
        }
        HermitVerb::Marker(verb) => marker(cli, args, verb),
        _ => Err(CliError::Usage("not a hermit verb".into())),
    }
}

fn marker(cli: &Cli, args: &HermitArgs, verb: &MarkerVerb) -> Result<(), CliError> {
    let call = call_in(cli, "hermit-marker", &scope(cli, args, None)?);
    match verb {
        MarkerVerb::TurnClose => call_verb(cli, &call, false, |e| e.session().close_turn(&call)),
        MarkerVerb::Status => {
            call_verb(cli, &call, true, |e| e.session().markers(&call.scope, call.now_ms))
        }
        MarkerVerb::Pause { reason, by, until } => {
            let input = PauseInput { reason: reason.clone(), by: by.clone(), until: until.clone() };
            call_verb(cli, &call, false, |e| e.session().pause(&call, &input))
        }
        MarkerVerb::Unpause { which } => {
            call_verb(cli, &call, false, |e| e.session().unpause(&call, which))
        }
        MarkerVerb::DrainStamp => call_verb(cli, &call, false, |e| e.session().stamp_drain(&call)),
        MarkerVerb::CompactRequest => {
            call_verb(cli, &call, false, |e| e.session().compact_request(&call))
        }
    }
}

/// `import --layout hermit-session --from <state dir>`.
pub(crate) fn import(cli: &Cli, args: &ImportArgs) -> Result<(), CliError> {
    let scope = if hermit_dir(&cli.scope).is_ok() {
        cli.scope.clone()
    } else {
        hermit_scope(&args.from)?.0
    };
    let call = call_in(cli, "import", &scope);
    let outcome = open(cli, Access::Write)?.session().import(&call, &args.from)?;
    print(cli.format, &outcome.to_json())
}

/// `export --layout hermit-session --to <dir>` of `--scope hermit:<dir>`.
pub(crate) fn export(cli: &Cli, args: &ExportArgs) -> Result<(), CliError> {
    hermit_dir(&cli.scope)?;
    let mut out = open(cli, Access::Export)?.session().export(&cli.scope, &args.to)?;
    out.insert("ok".into(), true.into());
    out.insert("scope".into(), cli.scope.clone().into());
    print(cli.format, &Value::Object(out))
}
