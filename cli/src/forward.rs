//! The client side of `hookstate serve` in the CLI: before anything else, a call looks for a
//! server on its store's socket, sends it the call at once and, when it says hello within
//! [`HELLO_WAIT_MS`], prints its answer; otherwise the call runs in-process as ever (under its
//! idempotency key once the call was sent, since the server may yet run it).
//!
//! Kept to what a call needs before clap's command tree is built (that costs more than a served
//! call): a scan of the command line for the verb and `--db`. A forwarded write carries an
//! idempotency key (one is made up when the caller gave none), so a call whose answer was lost
//! (the server killed mid-batch) runs again in-process without being applied twice. Does not
//! parse or run verbs.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

// A forwarded call waits `ANSWER_MARGIN_MS` longer than its `--wait-ms` for its answer, then runs
// in-process under its key: the server starts none of the call's writes past its wait and a
// grace, and commits none past a later bound (`CALL_START_GRACE_MS`, `CALL_COMMIT_LATE_MS`).
use hookstate_engine::limits::{ANSWER_MARGIN_MS, STDIN_BYTES_MAX, WAIT_MS_DEFAULT};
use hookstate_engine::{socket_path, Answer, Client, ClientFrame, ErrorCode, Run, HELLO_WAIT_MS};

/// Set to `0` or `off`, calls never look for a server.
pub(crate) const SERVE_ENV: &str = "HOOKSTATE_SERVE";
/// The socket to look for, when the server was started with `--socket`.
pub(crate) const SOCKET_ENV: &str = "HOOKSTATE_SOCKET";
/// Random bytes of a made-up idempotency key: unique among every call of a day.
const KEY_RANDOM_BYTES: usize = 12;

/// The environment variables a call reads (clap's `env` arguments and the few the verbs read
/// themselves); a test holds this list to the command tree.
pub(crate) const FORWARDED_ENV: [&str; 15] = [
    "HOOKSTATE_DB",
    "HOOKSTATE_SCOPE",
    "HOOKSTATE_WAIT_MS",
    "HOOKSTATE_SESSION",
    "HOOKSTATE_AGENT",
    "HOOKSTATE_MIRROR",
    "HOOKSTATE_MIRROR_NAME",
    "HOOKSTATE_ANCHOR_DIR",
    "HOOKSTATE_NOW_MS",
    "HOOKSTATE_BOOT_ID",
    "HOOKSTATE_PROGRAM",
    "MOONSHINE_HOME",
    "MOONSHINE_FEEDBACK",
    "CLAUDE_PLUGIN_ROOT",
    "HOME",
];

/// Global options that take a value (so the scan can step over it to find the verb).
const GLOBAL_VALUED: [&str; 11] = [
    "--db",
    "--scope",
    "--wait-ms",
    "--format",
    "--session",
    "--agent",
    "--idem-key",
    "--mirror",
    "--mirror-name",
    "--anchor-dir",
    "--now-ms",
];

/// Verbs a server never runs (they start processes, print documents, open the store in a mode
/// of their own, or are the server; the hermit verbs take paths inside their words, which only
/// the caller's working directory resolves).
const LOCAL_VERBS: [&str; 20] = [
    "serve",
    "copy",
    "dump",
    "restore",
    "backup",
    "checkpoint",
    "compact",
    "doctor",
    "metrics",
    "hermit",
    "demo",
    "completions",
    "man",
    "help",
    "__cli-reference",
    "init",
    "verify",
    "rebuild",
    "import",
    "export",
];

static GENERATED: AtomicBool = AtomicBool::new(false);

/// Whether this call runs under an idempotency key it made up itself (its forwarded answer was
/// lost): a replay is then printed as the first answer would have been.
pub(crate) fn generated_key() -> bool {
    GENERATED.load(Ordering::SeqCst)
}

/// What became of a call.
pub(crate) enum Forwarded {
    /// A server answered: exit with this code (its output was printed).
    Done(u8),
    /// Run it in-process with these arguments (the original ones, or with the made-up key of a
    /// forward whose answer was lost).
    InProcess(Vec<OsString>),
}

/// What the scan of the command line found.
struct Scan<'a> {
    verb: &'a str,
    db: Option<&'a str>,
    idem_key: bool,
    wait_ms: Option<&'a str>,
}

/// Finds the verb and the few global options a forward needs; `None` for a command line the
/// scan does not understand (help, an option missing its value, a repeated `--db`).
fn scan<'a>(args: &[&'a str]) -> Option<Scan<'a>> {
    let mut found = Scan { verb: "", db: None, idem_key: false, wait_ms: None };
    let mut at = 0;
    let mut dbs = 0;
    while at < args.len() {
        let arg = args[at];
        if arg == "--" {
            break;
        }
        // Help, and the options a server cannot answer (a past store, an endless follow).
        if matches!(arg, "-h" | "--help" | "-V" | "--version" | "--follow")
            || arg.starts_with("--at-seq")
            || arg.starts_with("--as-of")
        {
            return None;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value)),
            _ => (arg, None),
        };
        if GLOBAL_VALUED.contains(&name) {
            let value = match inline {
                Some(value) => value,
                None => {
                    at += 1;
                    *args.get(at)?
                }
            };
            match name {
                "--db" => {
                    dbs += 1;
                    found.db = Some(value);
                }
                "--idem-key" => found.idem_key = true,
                "--wait-ms" => found.wait_ms = Some(value),
                _ => {}
            }
        } else if found.verb.is_empty() && !arg.starts_with('-') {
            found.verb = arg;
        }
        at += 1;
    }
    (dbs <= 1 && !found.verb.is_empty()).then_some(found)
}

/// Forwards the call to a server on its store when one answers; see the module documentation.
pub(crate) fn forward(argv: &[OsString]) -> Forwarded {
    let in_process = || Forwarded::InProcess(argv.to_vec());
    if std::env::var(SERVE_ENV).is_ok_and(|v| v == "0" || v == "off") {
        return in_process();
    }
    let Some(args) = argv.iter().skip(1).map(|a| a.to_str()).collect::<Option<Vec<&str>>>() else {
        return in_process();
    };
    let Some(found) = scan(&args) else {
        return in_process();
    };
    if LOCAL_VERBS.contains(&found.verb) {
        return in_process();
    }
    let Some(socket) = socket_of(found.db) else {
        return in_process();
    };
    // One stat: with no server, this is all a call pays.
    if !std::fs::symlink_metadata(&socket).is_ok_and(|m| m.file_type().is_socket()) {
        return in_process();
    }
    let mut keyed: Vec<String> = Vec::with_capacity(args.len() + 1);
    if !found.idem_key {
        match made_up_key() {
            Some(key) => keyed.push(format!("--idem-key={key}")),
            // No randomness, no key: a lost answer could not be told from a refusal.
            None => return in_process(),
        }
    }
    keyed.extend(args.iter().map(|a| (*a).to_owned()));
    let run = Run {
        id: 1,
        argv: keyed.clone(),
        env: forwarded_env(),
        cwd: std::env::current_dir().ok().and_then(|d| d.to_str().map(str::to_owned)),
        pid: Some(std::process::id()),
        stdin: None,
    };
    // The call's wait as the server reads it: --wait-ms, else HOOKSTATE_WAIT_MS (forwarded).
    let env_wait = std::env::var("HOOKSTATE_WAIT_MS").ok();
    // A variable that is no wait is a usage error in-process even beside --wait-ms (clap reads
    // a global option's variable on every level): the process gives it.
    if env_wait.as_deref().is_some_and(|w| w.parse::<u64>().is_err()) {
        return in_process();
    }
    let wait = found.wait_ms.or(env_wait.as_deref());
    let wait_ms = wait.and_then(|w| w.parse().ok()).unwrap_or(WAIT_MS_DEFAULT);
    let retry = || {
        GENERATED.store(!found.idem_key, Ordering::SeqCst);
        let mut again = vec![argv[0].clone()];
        again.extend(keyed.iter().map(OsString::from));
        Forwarded::InProcess(again)
    };
    let Ok(mut client) = Client::open(&socket) else {
        return in_process();
    };
    // The request goes before the hello arrives: from the send on, a server may run it (a
    // stopped one once it resumes), so a call that runs here after a failure runs under its key.
    if client.send(&ClientFrame::Run(run.clone())).is_err()
        || client.hello(Duration::from_millis(HELLO_WAIT_MS)).is_err()
    {
        return retry();
    }
    let deadline = Instant::now() + Duration::from_millis(wait_ms.saturating_add(ANSWER_MARGIN_MS));
    let answer = client.answer(&run, &mut stdin_text, deadline);
    match answer {
        // An exit code hookstate never gives (2 above all, which Claude Code reads as "block"):
        // the answer is not printed.
        Ok(Answer::Reply(reply)) if !crate::exit::is_documented(reply.exit) => {
            let line = format!(
                "hookstate: the server answered exit {}, which hookstate never gives; its output \
                 is not printed",
                reply.exit
            );
            let _ = writeln!(std::io::stderr(), "{line}");
            Forwarded::Done(crate::exit::CORRUPT)
        }
        Ok(Answer::Reply(reply)) => {
            let _ = std::io::stdout().write_all(reply.stdout.as_bytes());
            let _ = std::io::stdout().flush();
            let _ = std::io::stderr().write_all(reply.stderr.as_bytes());
            Forwarded::Done(reply.exit)
        }
        // Nothing ran: run it here as it is.
        Ok(Answer::Error { error, .. }) if error != ErrorCode::CommitFailed => in_process(),
        // Its effect is unknown: run it here under its key, which replays it if it took effect.
        Ok(Answer::Error { .. }) | Err(_) => retry(),
    }
}

/// The socket of the store the call names: HOOKSTATE_SOCKET, else `<db>.sock` for `--db`,
/// HOOKSTATE_DB or the default store.
fn socket_of(db: Option<&str>) -> Option<PathBuf> {
    if let Some(socket) = std::env::var_os(SOCKET_ENV).filter(|s| !s.is_empty()) {
        return Some(PathBuf::from(socket));
    }
    let db = match db {
        Some(db) => PathBuf::from(db),
        None => match std::env::var_os("HOOKSTATE_DB") {
            Some(db) => PathBuf::from(db),
            None => crate::cmd::home_dir(std::env::var_os("HOME"))?.join(crate::cmd::DEFAULT_DB),
        },
    };
    let db = if db.is_relative() { std::env::current_dir().ok()?.join(db) } else { db };
    Some(socket_path(&db))
}

/// The variables forwarded, and `HOOKSTATE_PROGRAM` made from this process's own path when it
/// is unset: the commands a served call hands the model name the program the caller ran.
fn forwarded_env() -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = FORWARDED_ENV
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|v| ((*name).to_owned(), v)))
        .collect();
    if !env.contains_key(crate::cmd::PROGRAM_ENV) {
        if let Some(path) = own_path() {
            env.insert(crate::cmd::PROGRAM_ENV.to_owned(), path);
        }
    }
    env
}

/// This process's own path when it was run by one (an `argv[0]` holding a `/`, as a hook runs
/// `${CLAUDE_PLUGIN_ROOT}/bin/hookstate`), made absolute; `None` when it was found on PATH by
/// its name.
pub(crate) fn own_path() -> Option<String> {
    let arg0 = std::env::args_os().next()?.into_string().ok()?;
    if !arg0.contains('/') {
        return None;
    }
    std::path::absolute(&arg0).ok()?.into_os_string().into_string().ok()
}

/// A fresh idempotency key: `fwd-` ([`hookstate_engine::limits::FORWARD_KEY_PREFIX`]) and 24 hex
/// digits.
fn made_up_key() -> Option<String> {
    let mut bytes = [0u8; KEY_RANDOM_BYTES];
    getrandom::fill(&mut bytes).ok()?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("{}{hex}", hookstate_engine::limits::FORWARD_KEY_PREFIX))
}

/// The stdin a server asked for, when it can be sent: read once (an in-process run after a
/// failed forward reads the same bytes), at most the stdin bound, UTF-8. Anything else is left to
/// the in-process run, which gives the same error a process gives.
fn stdin_text() -> Option<String> {
    use std::io::IsTerminal;
    // A terminal reads as empty, as in-process (`input::read_stdin_text`).
    if std::io::stdin().is_terminal() {
        return Some(String::new());
    }
    let bytes = crate::input::read_stdin_bytes().ok()?;
    if bytes.len() > STDIN_BYTES_MAX {
        return None;
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_finds_the_verb_past_global_options() {
        let found = scan(&["--db", "/s.redb", "--scope=x", "queue", "claim", "q"]).unwrap();
        assert_eq!((found.verb, found.db, found.idem_key), ("queue", Some("/s.redb"), false));
        let found = scan(&["--idem-key", "k", "--wait-ms=5", "kv", "get", "--db=/a"]).unwrap();
        assert_eq!((found.verb, found.db, found.wait_ms), ("kv", Some("/a"), Some("5")));
        assert!(found.idem_key);
        assert!(scan(&["kv", "get", "k", "--help"]).is_none());
        assert!(scan(&["--db", "/a", "--db", "/b", "kv"]).is_none());
        assert!(scan(&["--db"]).is_none());
        assert!(scan(&["--format", "json"]).is_none());
    }

    /// Every environment variable clap reads for an argument is forwarded.
    #[test]
    fn every_variable_the_cli_reads_is_forwarded() {
        fn walk(command: &clap::Command, out: &mut Vec<String>) {
            for arg in command.get_arguments() {
                if let Some(env) = arg.get_env() {
                    out.push(env.to_string_lossy().into_owned());
                }
            }
            command.get_subcommands().for_each(|sub| walk(sub, out));
        }
        let mut vars = Vec::new();
        walk(&crate::args::full_command(), &mut vars);
        assert!(vars.len() > 8, "{vars:?}");
        for var in vars {
            assert!(FORWARDED_ENV.contains(&var.as_str()), "{var} is not forwarded");
        }
        for global in GLOBAL_VALUED {
            let id = global.trim_start_matches("--").replace('-', "_");
            let command = <crate::args::Cli as clap::CommandFactory>::command();
            let arg = command.get_arguments().find(|a| a.get_id() == id.as_str());
            assert!(arg.is_some_and(|a| a.is_global_set()), "{global} is not a global option");
        }
    }
}
