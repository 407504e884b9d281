//! The fingerprint of this process's request, which an idempotency key is bound to: the verb, every
//! argument as clap matched it (its name and raw values, defaults included, so `--lease-ms 300000`
//! and no `--lease-ms` are one request) and the stdin the verb read.
//!
//! Flags that do not change what a verb does are left out, so a retry may change them: where the
//! store is (`--db`), how long to wait, the output format, the key itself, the mirror, the clock
//! of the tests and the second anchor. Does not decide anything; the engine compares.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;

use clap::{ArgMatches, Command};
use hookstate_engine::schema::format::request_digest;
use hookstate_engine::Fingerprint;

/// Argument ids that are not part of the request.
const VOLATILE: [&str; 8] =
    ["db", "wait_ms", "format", "idem_key", "mirror", "mirror_name", "now_ms", "anchor_dir"];

/// The verb and the parts of the matched arguments.
pub(crate) type Args = (String, Vec<Vec<u8>>);

thread_local! {
    /// This call's arguments and the stdin its verb read (a process runs one call; a server's
    /// thread one at a time, `served`).
    static CALL: RefCell<(Option<Args>, Option<Vec<u8>>)> = const { RefCell::new((None, None)) };
}

/// Records the arguments of this call, as `command` defines them.
pub(crate) fn record_args(command: &Command, matches: &ArgMatches) {
    let args = args_of(command, matches);
    CALL.with(|call| call.borrow_mut().0 = Some(args));
}

/// The arguments of a call, as `command` (built by a parse or not) defines them.
pub(crate) fn args_of(command: &Command, matches: &ArgMatches) -> Args {
    let (mut verb, mut parts) = (Vec::new(), Vec::new());
    walk(command, matches, &BTreeSet::new(), &mut verb, &mut parts);
    (verb.join(" "), parts)
}

/// Starts a call on this thread with its arguments recorded and no stdin read yet.
pub(crate) fn start_call(args: Option<Args>) {
    CALL.with(|call| *call.borrow_mut() = (args, None));
}

/// Records the stdin the verb read (the first read is kept).
pub(crate) fn record_stdin(bytes: &[u8]) {
    CALL.with(|call| {
        call.borrow_mut().1.get_or_insert_with(|| bytes.to_vec());
    });
}

/// The parts of one level of the command line (the arguments `command` defines, by id, in a
/// fixed order; groups are not arguments), then of its subcommand. An argument with the id of one
/// a level above defines is that level's, not this one's (`inherited`): a global a parse
/// propagated, or one [`crate::args::command_for`] gave the verb. So a command built by a parse
/// gives the parts an unbuilt one gives, and a process's command the parts a server's gives.
fn walk(
    command: &Command,
    matches: &ArgMatches,
    inherited: &BTreeSet<String>,
    verb: &mut Vec<String>,
    parts: &mut Vec<Vec<u8>>,
) {
    let own = command.get_arguments().filter(|arg| !inherited.contains(arg.get_id().as_str()));
    let mut ids: Vec<&str> = own.map(|arg| arg.get_id().as_str()).collect();
    ids.retain(|id| !VOLATILE.contains(id));
    ids.sort_unstable();
    ids.dedup();
    let mut globals = inherited.clone();
    globals.extend(command.get_arguments().map(|a| a.get_id().to_string()));
    for id in ids {
        let Ok(Some(values)) = matches.try_get_raw(id) else {
            continue;
        };
        let values: Vec<&[u8]> = values.map(OsStrExt::as_bytes).collect();
        parts.push(format!("arg {id} {}", values.len()).into_bytes());
        parts.extend(values.into_iter().map(<[u8]>::to_vec));
    }
    if let Some((name, sub)) = matches.subcommand() {
        verb.push(name.to_owned());
        parts.push(format!("verb {name}").into_bytes());
        if let Some(sub_command) = command.find_subcommand(name) {
            walk(sub_command, sub, &globals, verb, parts);
        }
    }
}

/// The fingerprint of this process's request as far as it is known: arguments, and stdin once it
/// was read (every verb that reads stdin reads it before it makes its call).
pub(crate) fn fingerprint() -> Option<Fingerprint> {
    CALL.with(|call| {
        let call = call.borrow();
        let (verb, args) = call.0.as_ref()?;
        let stdin = call.1.as_ref();
        let marker: &[u8] = if stdin.is_some() { b"stdin" } else { b"no stdin" };
        let parts = args
            .iter()
            .map(Vec::as_slice)
            .chain(std::iter::once(marker))
            .chain(stdin.map(Vec::as_slice));
        Some(Fingerprint { verb: verb.clone(), digest: request_digest(parts) })
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// A process's command, built by its parse along the verb's path only (the verbs are
    /// deferred), gives the parts a server's gives (the whole tree built, kept across calls): a
    /// key recorded by one is the same request for the other.
    #[test]
    fn a_built_command_records_what_an_unbuilt_one_does() {
        let argvs: [&[&str]; 5] = [
            &["hookstate", "--scope", "s", "queue", "claim", "q", "--lease-ms", "5"],
            &["hookstate", "proposals", "--dir", "/d", "micro", "nudge", "MP-1"],
            &["hookstate", "kv", "put", "k", "1", "--session", "x", "--expect-rev", "0"],
            &["hookstate", "kv", "--agent", "a", "get", "k", "--scope", "s", "--as-of", "t"],
            &["hookstate", "feedback", "--project", "p", "claim", "--all"],
        ];
        let mut built = crate::args::full_command();
        for argv in argvs {
            let mut process = crate::args::Cli::command();
            let matches = process.try_get_matches_from_mut(argv).unwrap();
            let fresh = args_of(&process, &matches);
            assert!(fresh.1.len() > 4, "{argv:?}: {fresh:?}");
            let matches = built.try_get_matches_from_mut(argv).unwrap();
            assert_eq!(args_of(&built, &matches), fresh, "{argv:?}");
            let argv_os: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            let mut named = crate::args::command_for(&argv_os).unwrap();
            let matches = named.try_get_matches_from_mut(argv).unwrap();
            assert_eq!(args_of(&named, &matches), fresh, "{argv:?}");
        }
    }
}
