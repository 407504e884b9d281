//! Dispatch of verbs to their handlers, and what they share: the store path, the call context.
//!
//! Does not hold business rules.

mod alerts;
mod core;
mod demo;
mod docs;
mod doctor;
mod dump;
mod feedback;
mod follow;
mod heartbeat;
mod hermit;
mod hook;
mod hookkit;
mod legacy;
mod observer;
mod ops;
mod proposals;
mod serve;
mod session;
mod signals;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::io::Write;

use hookstate_engine::schema::Actor;
use hookstate_engine::{Call, Engine, OpenOptions, Outcome};

/// The host's clock, as a call reads it (the engine's, which a redb writer reads too).
pub(crate) use hookstate_engine::now_ms;

use crate::args::{Cli, Format, HookVerb, Layout, Verb};
use crate::exit::CliError;
use crate::output::{one_line, print, print_raw};

/// Where the store lives when neither --db nor HOOKSTATE_DB says.
pub(crate) const DEFAULT_DB: &str = ".agent/hookstate/state.redb";

pub(crate) fn run(cli: &Cli) -> Result<(), CliError> {
    if cli.session.as_deref() == Some("") {
        return Err(CliError::Invalid(
            "--session is empty: give the session id, or unset HOOKSTATE_SESSION if it is set to \
             an empty string"
                .into(),
        ));
    }
    check_caller(cli)?;
    check_mirror(cli)?;
    match &cli.command {
        Verb::Kv(verb) => core::kv(cli, verb),
        Verb::Queue(verb) => core::queue(cli, verb),
        Verb::Counter(verb) => core::counter(cli, verb),
        Verb::Set(verb) => core::set(cli, verb),
        Verb::List(verb) => core::list(cli, verb),
        Verb::Signals(verb) => signals::run(cli, verb),
        Verb::Observer(verb) => observer::run(cli, verb),
        Verb::Hook(verb @ HookVerb::Stop { .. }) => feedback::hook(cli, verb),
        Verb::Hook(verb @ (HookVerb::Claim { .. } | HookVerb::Once { .. })) => {
            hookkit::run(cli, verb)
        }
        Verb::Proposals(args) => proposals::run(cli, args),
        Verb::Alerts(args) if heartbeat::handles(&args.verb) => heartbeat::run(cli, args),
        Verb::Alerts(args) => alerts::run(cli, args),
        Verb::Hook(verb) => hook::run(cli, verb),
        Verb::Hermit(args) => session::run(cli, args),
        Verb::Import(args) if args.layout == Layout::HermitSession => session::import(cli, args),
        Verb::Export(args) if !is_export_root(cli, &args.to)? => Err(CliError::Invalid(format!(
            "--to {} is the store's own directory or its anchor directory, whose files an \
             export could overwrite: name another",
            args.to.display()
        ))),
        Verb::Export(args) if args.layout == Layout::HermitSession => session::export(cli, args),
        Verb::Import(args) if args.layout == Layout::Moonshine => feedback::import(cli, args),
        Verb::Import(args) => legacy::import(cli, args),
        Verb::Export(args) if args.layout == Layout::Moonshine => feedback::export(cli, args),
        Verb::Export(args) => legacy::export(cli, args),
        Verb::Init => ops::init(cli),
        Verb::Log(args) => ops::log(cli, args),
        Verb::Verify { accept_missing_anchor } => ops::verify(cli, *accept_missing_anchor),
        Verb::Rebuild => ops::rebuild(cli),
        Verb::Stats => ops::stats(cli),
        Verb::Serve(args) => serve::run(cli, args),
        Verb::Copy(args) => ops::copy(cli, args),
        Verb::Dump(args) => dump::dump(cli, args),
        Verb::Restore(args) => dump::restore(cli, args),
        Verb::Backup(args) => dump::backup(cli, args),
        Verb::Doctor => doctor::doctor(cli),
        Verb::Checkpoint => dump::checkpoint(cli),
        Verb::Compact { keep } => dump::compact(cli, *keep),
        Verb::Metrics { prometheus } => doctor::metrics(cli, *prometheus),
        Verb::Demo(args) => demo::run(args),
        Verb::Feedback(args) => feedback::run(cli, args),
        Verb::Completions { shell } => docs::completions(*shell),
        Verb::Man => docs::man(),
        Verb::CliReference => docs::reference(),
        Verb::Panic => panic!("panic requested by the hidden __panic verb"),
    }
}

pub(crate) fn db_path(cli: &Cli) -> Result<PathBuf, CliError> {
    if let Some(path) = &cli.db {
        // A relative file path is made absolute here, as a server does against the caller's
        // directory, so a call prints the same path (stats, init, errors) served or not.
        if path.is_relative() && hookstate_engine::remote_address(path).is_none() {
            if let Ok(cwd) = std::env::current_dir() {
                return Ok(cwd.join(path));
            }
        }
        return Ok(path.clone());
    }
    let home = home_dir(crate::served::env_var("HOME")).ok_or_else(|| {
        CliError::Usage(
            "HOME is not set or not an absolute path; pass --db or set HOOKSTATE_DB".into(),
        )
    })?;
    Ok(home.join(DEFAULT_DB))
}

/// HOME as the base of the default store, the moonshine home and a remote store's anchors: set
/// and absolute. A relative HOME would put the store under whatever directory each hook runs in,
/// every hook its own store; it counts as unset.
pub(crate) fn home_dir(home: Option<std::ffi::OsString>) -> Option<PathBuf> {
    home.map(PathBuf::from).filter(|home| home.is_absolute())
}

/// Whether the store at `db` exists, for the hooks that do nothing without one (and must not
/// create one): a file that is there, or a database whose tables hold a store (asked of the
/// server, reading only).
pub(crate) fn store_exists(cli: &Cli, db: &Path) -> Result<bool, CliError> {
    if hookstate_engine::remote_address(db).is_none() {
        return Ok(db.exists());
    }
    Ok(open_at(cli, Access::Read, db)?.location()?.exists)
}

/// The program named in commands handed to the model: the plugin launcher sets it to its own
/// path, since the model's shell may not find `hookstate` on PATH. Unset, a process run by its
/// path names that path ([`crate::forward::own_path`]; a forwarded call sends it here).
pub(crate) const PROGRAM_ENV: &str = "HOOKSTATE_PROGRAM";

/// The start of a command handed to the model (a reply, an ack): the program, and `--db PATH`
/// when the store is not the default one, so the command reaches the store it was made for even
/// where HOOKSTATE_DB is set only for the hooks.
pub(crate) fn command_for_model(cli: &Cli) -> String {
    let program = crate::served::env_var(PROGRAM_ENV).and_then(|p| p.into_string().ok());
    let program = program.filter(|p| !p.is_empty());
    // Served, the client's own path came as the variable: the server's is not the caller's.
    let program = program.or_else(|| (!crate::served::active()).then(crate::forward::own_path)?);
    let mut command = shell_quote(program.as_deref().unwrap_or("hookstate"));
    let default = home_dir(crate::served::env_var("HOME")).map(|h| h.join(DEFAULT_DB));
    if let Some(db) = cli.db.as_ref().filter(|db| default.as_ref() != Some(*db)) {
        // A remote address goes without its password, which must never reach the model: its
        // shell then needs HOOKSTATE_DB, or an address that needs no password.
        let db = match hookstate_engine::remote_address(db) {
            Some(shown) => shown,
            // Absolute, since the model's shell may run in another directory than the hook.
            None => std::path::absolute(db).unwrap_or_else(|_| db.clone()).display().to_string(),
        };
        command.push_str(" --db ");
        command.push_str(&shell_quote(&db));
    }
    command
}

/// `text` as one POSIX shell word: bare when it holds only safe characters, else single-quoted.
pub(crate) fn shell_quote(text: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+:@%=,".contains(c);
    if !text.is_empty() && text.chars().all(safe) {
        return text.to_owned();
    }
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// Checks the ids every event of the call would carry (--session, --agent, --idem-key) before
/// any verb reads input or opens the store, so that a bad one is refused (exit 3) by every verb
/// alike and nothing is written.
fn check_caller(cli: &Cli) -> Result<(), CliError> {
    let ids =
        [("session", &cli.session), ("agent", &cli.agent), ("idempotency key", &cli.idem_key)];
    for (what, value) in ids {
        if let Some(value) = value {
            hookstate_engine::schema::validate_id(what, value)
                .map_err(|e| CliError::Invalid(e.to_string()))?;
        }
    }
    Ok(())
}

/// Refuses a --mirror that names something other than a directory (a file, an unsafe link)
/// before the store is opened, so a first write does not create the store and then fail. A
/// directory that does not exist yet is the mirror's to create.
fn check_mirror(cli: &Cli) -> Result<(), CliError> {
    let Some(mirror) = &cli.mirror else {
        return Ok(());
    };
    // Every mirrored call passes here: one lstat for the usual case (a directory, or none yet);
    // anything else gets the walk's own error, as the mirror's open would give it.
    match std::fs::symlink_metadata(mirror) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        _ => {}
    }
    match hookstate_engine::check_source_dir(mirror) {
        Ok(()) | Err(hookstate_engine::Error::NoDirectory { .. }) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// How a verb opens the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Mutations: create the store (atomically) when absent.
    Write,
    /// Reads: never create, never write a byte; an absent store reads as an empty one (the first
    /// use of a read-only hook).
    Read,
    /// Reads that write outside the store (an export): read-only, and an absent store is an error.
    Export,
    /// The legacy `export`: as `Export`, with redb's full integrity check on open (on a view of
    /// the file, which is never written).
    CheckedExport,
    /// rebuild: a writer, with redb's full integrity check on a view of its own beside the
    /// rebuild's replay.
    Rebuild,
    /// verify: read-only, the file never written; the verify runs redb's full integrity check
    /// on a view of its own beside its replay.
    Verify,
    /// copy's source: as `Verify`, with redb's full integrity check on open.
    CopySource,
    /// init: as `Write`, and a PostgreSQL store's older tables are upgraded.
    Init,
}

/// Opens the store for `access`. Warnings of its writes go to stderr as they happen; when the
/// anchors disagree with the log, one line says so on stderr and every JSON result is marked
/// (`anchor_mismatch`): a read is still answered, a write is refused by the engine (a write's
/// mark is decided when it first prints, and only if it committed nothing).
pub(crate) fn open(cli: &Cli, access: Access) -> Result<Arc<Engine>, CliError> {
    if let Some(served) = crate::served::engine(access) {
        // The wait is checked as an open checks it in-process: the server's store is open.
        let wait = hookstate_engine::OpenOptions { wait_ms: cli.wait_ms, ..Default::default() };
        wait.wait()?;
        let engine = served?;
        if let Some(problem) = engine.location()?.anchor_problem {
            crate::output::mark_anchor(&problem.to_string());
        }
        return Ok(engine);
    }
    // A write is marked when it first prints, and only if it wrote nothing: each commit passed
    // the anchor check under the write lock, so checking at open would read the anchors and a
    // snapshot a second time for a mark it would never print.
    let later = access == Access::Write;
    let engine = Arc::new(opened(cli, access, &db_path(cli)?, !later)?);
    if later {
        crate::output::mark_anchor_later(&engine);
    }
    Ok(engine)
}

/// [`open`] for the store at `db` rather than --db's.
pub(crate) fn open_at(cli: &Cli, access: Access, db: &Path) -> Result<Engine, CliError> {
    opened(cli, access, db, true)
}

/// [`open_at`], checking the anchors at once (`check_now`) or leaving that to the caller.
fn opened(cli: &Cli, access: Access, db: &Path, check_now: bool) -> Result<Engine, CliError> {
    let as_of = cli.at_seq.is_some() || cli.as_of.is_some();
    if as_of && !matches!(access, Access::Read | Access::Export) {
        return Err(CliError::Usage("--at-seq and --as-of are for reads and exports only".into()));
    }
    let options = options(cli, access, db)?;
    let engine = Engine::open(db, options)?;
    let checked = matches!(
        access,
        Access::Read | Access::Export | Access::CheckedExport | Access::CopySource | Access::Write
    );
    // The store's anchors vouch for its log, and so for an as-of read of it: they are checked
    // on the store, not on the as-of engine in memory, which has none of its own.
    if check_now && checked {
        if let Some(problem) = engine.location()?.anchor_problem {
            crate::output::mark_anchor(&problem.to_string());
        }
    }
    let engine = if as_of { ops::as_of(cli, &engine)? } else { engine };
    engine.set_warning_sink(Box::new(|line| {
        let _ = writeln!(crate::output::stderr(), "hookstate: {}", one_line(line));
    }));
    Ok(engine)
}

/// How `access` opens the store at `db`.
pub(crate) fn options(cli: &Cli, access: Access, db: &Path) -> Result<OpenOptions, CliError> {
    Ok(OpenOptions {
        wait_ms: cli.wait_ms,
        create: matches!(access, Access::Write | Access::Init),
        check_integrity: matches!(
            access,
            Access::CheckedExport | Access::Rebuild | Access::CopySource
        ),
        check_beside_replay: access == Access::Rebuild,
        read_only: matches!(
            access,
            Access::Read
                | Access::Export
                | Access::CheckedExport
                | Access::Verify
                | Access::CopySource
        ),
        absent_is_empty: access == Access::Read,
        anchor_dir: anchor_dir(cli, access, db)?,
        // A test clock (HOOKSTATE_NOW_MS) pins the time; else a database server's clock rules.
        server_clock: cli.now_ms.is_none(),
        // `init` upgrades an older PostgreSQL schema; every other verb refuses one.
        upgrade_schema: access == Access::Init,
    })
}

/// Whether `to` may take an export: not the store's own directory, nor its second anchor
/// directory (`export --to <store's dir> --name state.redb` wrote the layout's JSON over the
/// store, exit 0). A directory that does not exist yet is neither.
fn is_export_root(cli: &Cli, to: &Path) -> Result<bool, CliError> {
    use std::os::unix::fs::MetadataExt;
    let Ok(target) = std::fs::metadata(to) else {
        return Ok(true);
    };
    let same = |dir: &Path| {
        std::fs::metadata(dir).is_ok_and(|d| (d.dev(), d.ino()) == (target.dev(), target.ino()))
    };
    let db = db_path(cli)?;
    let store_dir = match db.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let store_own = hookstate_engine::remote_address(&db).is_none() && same(&store_dir);
    Ok(!store_own && !cli.anchor_dir.as_deref().is_some_and(same))
}

/// Where a remote store's per-host anchor lives when --anchor-dir does not say.
const REMOTE_ANCHOR_DIR: &str = ".agent/hookstate/anchors";

/// The anchor directory: --anchor-dir; for a remote store without it, the per-host default
/// under HOME, made (0700) by a call that writes and skipped by a read while it does not exist.
fn anchor_dir(cli: &Cli, access: Access, db: &Path) -> Result<Option<PathBuf>, CliError> {
    if cli.anchor_dir.is_some() || hookstate_engine::remote_address(db).is_none() {
        return Ok(cli.anchor_dir.clone());
    }
    let Some(home) = home_dir(std::env::var_os("HOME")) else {
        return Ok(None);
    };
    let dir = home.join(REMOTE_ANCHOR_DIR);
    if !dir.is_dir() && matches!(access, Access::Write | Access::Init | Access::Rebuild) {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).map_err(|source| {
            CliError::Io { op: format!("create the anchor directory {}", dir.display()), source }
        })?;
    }
    Ok(dir.is_dir().then_some(dir))
}

/// The engine's layout for a CLI layout, with `--mirror-name` for the one-file layouts.
pub(crate) fn layout(cli: &Cli, layout: Layout) -> Option<hookstate_engine::Layout> {
    let file = |default: &str| cli.mirror_name.clone().unwrap_or_else(|| default.to_owned());
    match layout {
        Layout::Loopd => Some(hookstate_engine::Layout::Loopd {
            file: file(hookstate_engine::LOOPD_FILE_DEFAULT),
        }),
        Layout::Observer => Some(hookstate_engine::Layout::Observer {
            file: file(hookstate_engine::OBSERVER_FILE_DEFAULT),
        }),
        Layout::Moonshine => Some(hookstate_engine::Layout::Moonshine),
        // Every hermit verb keeps the whole state directory: its files share one scope.
        Layout::HermitProposals
        | Layout::HermitAlerts
        | Layout::HermitHeartbeat
        | Layout::HermitSession => Some(hookstate_engine::Layout::Hermit),
    }
}

/// Runs a mutation on `engine`, as a mirrored call of `layout` when `--mirror DIR` is set.
pub(crate) fn mutate(
    cli: &Cli,
    engine: &Engine,
    call: &Call,
    layout: Layout,
    verb: impl FnOnce(&Engine) -> hookstate_engine::Result<Outcome>,
) -> Result<Outcome, CliError> {
    match (&cli.mirror, self::layout(cli, layout)) {
        (Some(dir), Some(engine_layout)) => {
            if layout.is_hermit() {
                check_hermit_mirror(call, dir)?;
            }
            Ok(engine.mirrored(call, &engine_layout, dir, verb)?)
        }
        _ => Ok(verb(engine)?),
    }
}

/// A hermit mirror directory must be the state directory of the call's scope: another scope's
/// state rendered there read as every marker removed, which the files lost and the next call
/// adopted (`session-archive` without `--state-dir=` takes the working directory's scope).
pub(crate) fn check_hermit_mirror(call: &Call, dir: &Path) -> Result<(), CliError> {
    let (scope, _) = hookstate_engine::hermit_scope(dir)?;
    if scope == call.scope {
        return Ok(());
    }
    Err(CliError::Invalid(format!(
        "mirror directory {} is not the state directory of the call's scope {} (name that \
         directory, or mirror the call's own)",
        dir.display(),
        call.scope
    )))
}

/// Prints an outcome (its verdict line, or lines, with `--format verdict`, when it has one),
/// warns on stderr of each mirror conflict, and turns a refusal into exit 1, except with
/// `--format verdict` for a refusal upstream prints as its verdict with exit 0.
pub(crate) fn finish(cli: &Cli, outcome: &Outcome) -> Result<(), CliError> {
    let value = outcome.to_json();
    match (cli.format, value.get("verdict").and_then(serde_json::Value::as_str)) {
        (Format::Verdict, Some(line)) if line.contains('\n') => {
            for line in line.lines() {
                print_raw(&one_line(line))?;
            }
        }
        (Format::Verdict, Some(line)) => print_raw(&one_line(line))?,
        _ => print(cli.format, &value)?,
    }
    refused(cli, outcome)
}

/// [`finish`] for a verb of an upstream script: with `--format verdict`, a result without a
/// verdict line (the replay of a verb whose events do not carry it) prints upstream's
/// `ERROR|unexpected`.
pub(crate) fn finish_script(cli: &Cli, outcome: &Outcome) -> Result<(), CliError> {
    if cli.format == Format::Verdict
        && !outcome.to_json().get("verdict").is_some_and(|v| v.is_string())
    {
        print_raw("ERROR|unexpected")?;
        return refused(cli, outcome);
    }
    finish(cli, outcome)
}

/// Warns of the mirror's conflicts, and turns a refusal into exit 1 (but one upstream prints
/// with exit 0, under `--format verdict`).
fn refused(cli: &Cli, outcome: &Outcome) -> Result<(), CliError> {
    warn_conflicts(outcome);
    match &outcome.refusal {
        Some(refusal) if !(cli.format == Format::Verdict && refusal.verdict_ok) => {
            Err(CliError::Refused(refusal.message.clone()))
        }
        _ => Ok(()),
    }
}

/// Prints a read's result: `{"ok": true, ...its fields}`, or its verdict line with `--format
/// verdict` when it has one.
pub(crate) fn print_read(cli: &Cli, read: &impl serde::Serialize) -> Result<(), CliError> {
    let mut out = serde_json::Map::new();
    out.insert("ok".into(), true.into());
    if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(read) {
        out.extend(fields);
    }
    print(cli.format, &serde_json::Value::Object(out))
}

/// One stderr line per record a mirrored call could not adopt.
pub(crate) fn warn_conflicts(outcome: &Outcome) {
    if let Some(report) = &outcome.mirror {
        warn_report(report);
    }
}

/// One stderr line per record a mirror could not adopt, and per file it set aside as corrupt.
pub(crate) fn warn_report(report: &hookstate_engine::MirrorReport) {
    for conflict in &report.conflicts {
        let line = format!(
            "hookstate: mirror kept the store's {} in {}: {}",
            conflict.record, conflict.file, conflict.why
        );
        let _ = writeln!(crate::output::stderr(), "{}", one_line(&line));
    }
    for file in &report.quarantined {
        let line = format!(
            "hookstate: mirror renamed {file} aside (a .corrupt- copy beside it): it does not \
             parse as its kind; the store's version is written in its place"
        );
        let _ = writeln!(crate::output::stderr(), "{}", one_line(&line));
    }
}

pub(crate) fn call(cli: &Cli, hook: &str) -> Call {
    call_in(cli, hook, &cli.scope)
}

/// A call in another scope than --scope (a bundle's, for instance).
pub(crate) fn call_in(cli: &Cli, hook: &str, scope: &str) -> Call {
    // A test clock pins the time; else the store times the call under its write lock.
    let call = match cli.now_ms {
        Some(now_ms) => Call::at(scope, now_ms),
        None => Call::new(scope),
    };
    let mut call = call.by(Actor {
        session: cli.session.clone(),
        hook: Some(hook.into()),
        pid: Some(crate::served::pid()),
        agent: cli.agent.clone(),
    });
    if let Some(key) = &cli.idem_key {
        call = call.with_idem_key(key.clone());
        if let Some(fingerprint) = crate::request::fingerprint() {
            call = call.with_fingerprint(fingerprint);
        }
    }
    call
}
