//! The fingerprint of this process's request, which an idempotency key is bound to: the verb, every
//! argument as clap matched it (its name and raw values, defaults included, so `--lease-ms 300000`
//! and no `--lease-ms` are one request) and the stdin the verb read.
//!
//! Flags that do not change what a verb does are left out, so a retry may change them: where the
//! store is (`--db`), how long to wait, the output format, the key itself, the mirror, the clock
//! of the tests and the second anchor. Does not decide anything; the engine compares.

use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

use clap::{ArgMatches, Command};
use hookstate_engine::schema::format::request_digest;
use hookstate_engine::Fingerprint;

/// Argument ids that are not part of the request.
const VOLATILE: [&str; 8] =
    ["db", "wait_ms", "format", "idem_key", "mirror", "mirror_name", "now_ms", "anchor_dir"];

/// The verb and the parts of the matched arguments.
static ARGS: OnceLock<(String, Vec<Vec<u8>>)> = OnceLock::new();
/// The stdin the verb read, once it read it.
static STDIN: OnceLock<Vec<u8>> = OnceLock::new();

/// Records the arguments of this process (once, at start), as `command` defines them.
pub(crate) fn record_args(command: &Command, matches: &ArgMatches) {
    let (mut verb, mut parts) = (Vec::new(), Vec::new());
    walk(command, matches, &mut verb, &mut parts);
    let _ = ARGS.set((verb.join(" "), parts));
}

/// Records the stdin the verb read (once).
pub(crate) fn record_stdin(bytes: &[u8]) {
    let _ = STDIN.set(bytes.to_vec());
}

/// The parts of one level of the command line (the arguments `command` defines, by id, in a
/// fixed order; groups are not arguments), then of its subcommand.
fn walk(command: &Command, matches: &ArgMatches, verb: &mut Vec<String>, parts: &mut Vec<Vec<u8>>) {
    let mut ids: Vec<&str> = command.get_arguments().map(|arg| arg.get_id().as_str()).collect();
    ids.retain(|id| !VOLATILE.contains(id));
    ids.sort_unstable();
    ids.dedup();
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
            walk(sub_command, sub, verb, parts);
        }
    }
}

/// The fingerprint of this process's request as far as it is known: arguments, and stdin once it
/// was read (every verb that reads stdin reads it before it makes its call).
pub(crate) fn fingerprint() -> Option<Fingerprint> {
    let (verb, args) = ARGS.get()?;
    let stdin = STDIN.get();
    let marker: &[u8] = if stdin.is_some() { b"stdin" } else { b"no stdin" };
    let parts = args
        .iter()
        .map(Vec::as_slice)
        .chain(std::iter::once(marker))
        .chain(stdin.map(Vec::as_slice));
    Some(Fingerprint { verb: verb.clone(), digest: request_digest(parts) })
}
