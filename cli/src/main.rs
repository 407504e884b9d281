//! The `hookstate` binary: parses arguments, runs one verb, prints one result, exits with the
//! documented code.
//!
//! Holds no business rules; the engine decides. Does not write anything but stdout, stderr and
//! the store (and the demo's own directory).

mod args;
mod args_session;
mod cmd;
#[cfg(feature = "bugdrill")]
mod drill;
mod dropin;
mod exit;
mod forward;
mod input;
mod output;
mod progress;
mod request;
mod served;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use crate::args::Cli;
use crate::exit::CliError;

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        // A verify running redb's page check beside its replay catches this one, and answers
        // the check's finding (or raises it again, and it comes back here).
        if hookstate_engine::panic_is_caught() {
            return;
        }
        let line = output::panic_line(info);
        let _ = writeln!(std::io::stderr(), "hookstate: {line}");
        std::process::exit(i32::from(exit::CORRUPT));
    }));
    if let Err(line) = empty_variables() {
        let _ = writeln!(std::io::stderr(), "hookstate: usage: {line}");
        return ExitCode::from(exit::USAGE);
    }
    // Upstream's word order for the drop-in verbs (hermit's scripts), before anything else.
    let (argv, script_usage) = match dropin::rewrite(std::env::args_os().collect()) {
        dropin::Dropin::Args(args, usage) => (args, usage),
        dropin::Dropin::Answer { stdout, stderr, code } => {
            let _ = write!(std::io::stdout(), "{stdout}");
            let _ = write!(std::io::stderr(), "{stderr}");
            return ExitCode::from(code);
        }
    };
    // A running server answers the call (docs/protocol.md); without one it runs here.
    let argv = match forward::forward(&argv) {
        forward::Forwarded::Done(code) => return ExitCode::from(code),
        forward::Forwarded::InProcess(argv) => argv,
    };
    ExitCode::from(run_process_argv(argv, script_usage))
}

/// The variables that stand for a flag taking a path or a number, and the flag.
const VALUE_VARIABLES: [(&str, &str); 4] = [
    ("HOOKSTATE_DB", "db"),
    ("HOOKSTATE_ANCHOR_DIR", "anchor-dir"),
    ("HOOKSTATE_MIRROR", "mirror"),
    ("HOOKSTATE_WAIT_MS", "wait-ms"),
];

/// A variable set to an empty string (`HOOKSTATE_DB=$UNSET_VAR` in a hook's command): beside its
/// flag it is dropped, as the flag wins; alone it is refused naming it. clap refused either way,
/// naming the flag the caller never gave (`a value is required for '--db <PATH>'`). Runs first,
/// while the process has one thread.
fn empty_variables() -> Result<(), String> {
    // The command line is read only when a variable is empty: a hook call pays four lookups.
    let mut argv: Option<Vec<String>> = None;
    for (variable, flag) in VALUE_VARIABLES {
        if std::env::var_os(variable).is_some_and(|value| value.is_empty()) {
            let argv = argv.get_or_insert_with(|| {
                std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect()
            });
            if !served::given(argv, flag) {
                return Err(format!("{variable} is set but empty: give it a value, or unset it"));
            }
            std::env::remove_var(variable);
        }
    }
    Ok(())
}

/// [`run_argv`] for this process's own call: parsed with only the named verb's tree given the
/// global options ([`args::command_for`]), and again with the whole tree when that parse fails,
/// so help, version and every usage error are clap's own. The command is left to the process's
/// exit, not dropped (a tree of every verb's name and about).
fn run_process_argv(argv: Vec<std::ffi::OsString>, script_usage: Option<&'static str>) -> u8 {
    if let Some(command) = args::command_for(&argv) {
        let command = Box::leak(Box::new(command));
        if let Ok(matches) = command.try_get_matches_from_mut(argv.iter()) {
            if let Ok(cli) = Cli::from_arg_matches(&matches) {
                request::record_args(command, &matches);
                return run_parsed(&cli);
            }
        }
    }
    run_argv(Box::leak(Box::new(Cli::command())), argv, script_usage)
}

/// Parses `argv` (program name first) with `command` and runs the verb: what `main` does, and
/// what a server does for each request (`served`). A drop-in call's parse error prints its
/// script's usage line (`script_usage`). Returns the exit code; everything printed went
/// through `output`.
pub(crate) fn run_argv(
    command: &mut clap::Command,
    argv: Vec<std::ffi::OsString>,
    script_usage: Option<&'static str>,
) -> u8 {
    let matches = match command.try_get_matches_from_mut(argv.clone()) {
        Ok(matches) => matches,
        Err(err) => {
            use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
            return match script_usage {
                Some(usage) if !matches!(err.kind(), DisplayHelp | DisplayVersion) => {
                    script_error(usage, &err)
                }
                // The line a server gives the same call (the same with no variable set).
                _ if !matches!(err.kind(), DisplayHelp | DisplayVersion) => {
                    match served::usage_as_served(&argv) {
                        Some(reply) => {
                            let _ = write!(output::stderr(), "{}", reply.stderr);
                            reply.exit
                        }
                        None => usage_error(&err),
                    }
                }
                _ => usage_error(&err),
            };
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    request::record_args(command, &matches);
    run_parsed(&cli)
}

/// Runs a parsed call and maps its end to the exit code, printing the error line.
pub(crate) fn run_parsed(cli: &Cli) -> u8 {
    match cmd::run(cli) {
        Ok(()) => exit::OK,
        Err(CliError::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            exit::OK
        }
        // The verb printed upstream's verdict (stderr included); only the code is left.
        Err(CliError::Quiet(code)) => code,
        Err(err) => {
            let _ = writeln!(output::stderr(), "hookstate: {}", output::error_line(&err));
            // Upstream's scripts exit 1 for every failure; a verdict caller relies on that. A
            // usage error is the caller's own mistake and exits 64 in every format.
            if cli.format == args::Format::Verdict && !matches!(err, CliError::Usage(_)) {
                return exit::CONFLICT;
            }
            exit::code_for(&err)
        }
    }
}

/// A drop-in spelling hookstate cannot parse: the script's usage line, the detail, exit 1.
fn script_error(usage: &str, err: &clap::Error) -> u8 {
    let detail = output::one_line(&usage_line(err));
    let _ = writeln!(output::stderr(), "{usage}\nhookstate: usage: {detail}");
    exit::CONFLICT
}

/// Help and version go to stdout with exit 0; a usage error is one line on stderr and exit 64.
pub(crate) fn usage_error(err: &clap::Error) -> u8 {
    use clap::error::ErrorKind;
    if matches!(err.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let mut out = output::stdout();
        // As for any output: a closed pipe is the reader's choice (exit 0), a full disk is not.
        return match write!(out, "{err}").and_then(|()| out.flush()) {
            Err(source) if source.kind() != std::io::ErrorKind::BrokenPipe => {
                let _ = writeln!(output::stderr(), "hookstate: write stdout: {source}");
                exit::IO
            }
            _ => exit::OK,
        };
    }
    let _ = writeln!(output::stderr(), "hookstate: usage: {}", output::one_line(&usage_line(err)));
    exit::USAGE
}

/// clap's message on one line, with what a person needs to fix the call: the error, its detail
/// (the missing arguments, the valid values, a suggestion) and the verb's usage line.
pub(crate) fn usage_line(err: &clap::Error) -> String {
    let rendered = err.to_string();
    let mut usage = None;
    let mut parts: Vec<String> = Vec::new();
    let mut verbs: Vec<&str> = Vec::new();
    let mut in_commands = false;
    for line in rendered.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            in_commands = false;
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("Usage: ") {
            usage = Some(rest.to_owned());
        } else if trimmed == "Commands:" {
            in_commands = true;
        } else if in_commands {
            verbs.extend(trimmed.split_whitespace().next().filter(|v| *v != "help"));
        } else if err.kind() != clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            && !trimmed.starts_with("For more information")
        {
            let part = trimmed.trim_start_matches("error: ");
            let part = part.strip_prefix('[').and_then(|p| p.strip_suffix(']')).unwrap_or(part);
            let part = match part.strip_prefix("subcommands: ") {
                // The verbs a bare `hookstate` lacks, without the hidden ones.
                Some(names) => format!(
                    "a verb is required: {}",
                    names
                        .split(", ")
                        .filter(|n| !n.starts_with("__") && *n != "help")
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => part.to_owned(),
            };
            match parts.last_mut() {
                Some(last) if last.ends_with(':') => {
                    last.push(' ');
                    last.push_str(&part);
                }
                _ => parts.push(part),
            }
        }
    }
    if !verbs.is_empty() {
        parts.push(format!("a verb is required: {}", verbs.join(", ")));
    }
    let mut line = if parts.is_empty() { "bad arguments".to_owned() } else { parts.join("; ") };
    if let Some(usage) = usage {
        let command: Vec<&str> =
            usage.split(' ').take_while(|w| !w.starts_with(['-', '<', '['])).collect();
        line.push_str(&format!(" (usage: {usage}; see {} --help)", command.join(" ")));
    }
    line
}
