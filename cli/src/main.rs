//! The `hookstate` binary: parses arguments, runs one verb, prints one result, exits with the
//! documented code.
//!
//! Holds no business rules; the engine decides. Does not write anything but stdout, stderr and
//! the store (and the demo's own directory).

mod args;
mod cmd;
#[cfg(feature = "bugdrill")]
mod drill;
mod exit;
mod input;
mod output;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::args::Cli;
use crate::exit::CliError;

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let location = info.location().map(|l| format!(" at {l}")).unwrap_or_default();
        let line = output::one_line(&format!(
            "internal error: {message}{location}; the store may be damaged, run `hookstate verify`"
        ));
        let _ = writeln!(std::io::stderr(), "hookstate: {line}");
        std::process::exit(i32::from(exit::CORRUPT));
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    match cmd::run(&cli) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(CliError::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::from(exit::OK)
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "hookstate: {}", output::error_line(&err));
            // Upstream's scripts exit 1 for every failure; a verdict caller relies on that.
            if cli.format == args::Format::Verdict {
                return ExitCode::from(exit::CONFLICT);
            }
            ExitCode::from(exit::code_for(&err))
        }
    }
}

/// Help and version go to stdout with exit 0; a usage error is one line on stderr and exit 2.
fn usage_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(err.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = write!(std::io::stdout(), "{err}");
        return ExitCode::from(exit::OK);
    }
    let rendered = err.to_string();
    let first = rendered.lines().next().unwrap_or("usage error").trim_start_matches("error: ");
    let _ = writeln!(
        std::io::stderr(),
        "hookstate: usage: {} (see hookstate --help)",
        output::one_line(first)
    );
    ExitCode::from(exit::USAGE)
}
