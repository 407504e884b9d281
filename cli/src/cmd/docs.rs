//! What the CLI says about itself, generated from the clap definitions: shell completions, the
//! man page, and `docs/cli.md` (the hidden `__cli-reference` verb; a test compares the file).
//!
//! Does not open a store.

use std::fmt::Write as _;
use std::io::Write;

use clap::Command;

use crate::args::full_command;
use crate::exit::CliError;

fn stdout_error(source: std::io::Error) -> CliError {
    CliError::Io { op: "write stdout".into(), source }
}

/// Prints the completion script of `shell`.
pub(crate) fn completions(shell: clap_complete::Shell) -> Result<(), CliError> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut full_command(), "hookstate", &mut out);
    write_all(&out)
}

/// Prints the man page.
pub(crate) fn man() -> Result<(), CliError> {
    let mut out = Vec::new();
    clap_mangen::Man::new(full_command()).render(&mut out).map_err(stdout_error)?;
    write_all(&out)
}

/// Prints the markdown CLI reference.
pub(crate) fn reference() -> Result<(), CliError> {
    write_all(reference_text().as_bytes())
}

fn write_all(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = crate::output::stdout();
    out.write_all(bytes).and_then(|()| out.flush()).map_err(stdout_error)
}

/// The whole of `docs/cli.md`.
pub(crate) fn reference_text() -> String {
    let command = full_command();
    let mut out = String::from(
        "# hookstate CLI reference\n\n\
         Generated from the clap definitions (`cli/src/args.rs`) by `hookstate __cli-reference`; \
         do not edit by hand.\n\
         A test fails when this file differs from the definitions: regenerate it with\n\
         `cargo run -q -p hookstate -- __cli-reference > docs/cli.md`.\n\n",
    );
    let _ = writeln!(out, "```text\n{}\n```\n", help_text(&mut command.clone()).trim_end());
    // The top's global options are listed once, above; a group's own (`hermit --dir`,
    // `feedback --project`) in the group's section.
    let top: Vec<String> = command
        .get_arguments()
        .filter(|a| a.is_global_set())
        .map(|a| a.get_id().to_string())
        .collect();
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        section(&mut out, "hookstate", sub, 2, &top);
    }
    out
}

fn help_text(command: &mut Command) -> String {
    command.render_long_help().to_string()
}

/// One verb's section: its usage, its about text and its own options (not the global ones of
/// the commands above it, `top`, which their sections list).
fn section(out: &mut String, parent: &str, command: &Command, depth: usize, top: &[String]) {
    let path = format!("{parent} {}", command.get_name());
    let _ = writeln!(out, "{} `{path}`\n", "#".repeat(depth.min(4)));
    if let Some(about) = command.get_long_about().or_else(|| command.get_about()) {
        let _ = writeln!(out, "{}\n", about.to_string().trim());
    }
    let usage = command.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ").trim();
    let _ = writeln!(out, "```text\n{usage}\n```\n");
    let inherited = |a: &&clap::Arg| top.iter().any(|id| id == a.get_id().as_str());
    let args: Vec<_> = command
        .get_arguments()
        .filter(|a| !a.is_hide_set() && a.get_id() != "help" && !inherited(a))
        .collect();
    // This command's own global options are listed here, not again under each verb of it.
    let mut top = top.to_vec();
    top.extend(args.iter().filter(|a| a.is_global_set()).map(|a| a.get_id().to_string()));
    if !args.is_empty() {
        out.push_str("| argument | meaning |\n|---|---|\n");
        for arg in args {
            let _ = writeln!(out, "| {} | {} |", arg_name(arg), arg_help(arg));
        }
        out.push('\n');
    }
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        section(out, &path, sub, depth + 1, &top);
    }
}

fn arg_name(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map_or_else(|| arg.get_id().as_str().to_uppercase(), ToString::to_string);
    let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
    match (arg.get_long(), takes_value) {
        (Some(long), true) => format!("`--{long} <{value}>`"),
        (Some(long), false) => format!("`--{long}`"),
        (None, _) => format!("`<{value}>`"),
    }
}

fn arg_help(arg: &clap::Arg) -> String {
    let mut help = arg
        .get_long_help()
        .or_else(|| arg.get_help())
        .map(|h| h.to_string().split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    if !help.is_empty() && !help.ends_with(['.', ')', ']']) {
        help.push('.');
    }
    let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !values.is_empty() {
        let _ = write!(help, " One of {}.", values.join(", "));
    }
    let defaults: Vec<String> =
        arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
    if !defaults.is_empty() && takes_value {
        let _ = write!(help, " Default: `{}`.", defaults.join(" "));
    }
    if let Some(env) = arg.get_env() {
        let _ = write!(help, " Env: `{}`.", env.to_string_lossy());
    }
    help.trim().replace('|', "\\|")
}
