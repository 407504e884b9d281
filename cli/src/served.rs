//! A call run by `hookstate serve` for a client: the same parse and the same dispatch as a
//! process runs (`run_argv`, `cmd::run`), with what the process would take from its own
//! surroundings taken from the request instead (stdout and stderr captured into the answer,
//! stdin, the environment, the working directory, the pid) and the store the server holds.
//!
//! A request runs first on its connection's thread: a read is answered there. When the verb
//! opens the store for writing, that run stops (nothing was written) and the call becomes a
//! [`Job`] for the writer thread, which runs it again from the start inside its batch. Does not
//! hold the socket; the engine's `serve` does.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::FromArgMatches;
use hookstate_engine::{Engine, Handler, Job, Prepared, Reply, Run, StdinSource};

use crate::args::{full_command, Cli, FeedbackVerb, HookVerb, Verb};
use crate::cmd::Access;
use crate::exit::CliError;
use crate::request::Args;

/// Where a served call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// On its connection's thread: reads only; a write stops the run.
    Connection,
    /// On the writer thread, inside its batch.
    Writer,
}

/// Why a run on the connection thread stopped before it was done.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stopped {
    /// The verb opened the store for writing: the writer runs it.
    Writes,
    /// The verb reads stdin, and the request carried none.
    NeedsStdin,
    /// The verb opens the store in a way a server does not serve.
    NotServed(String),
}

/// What a served call takes from its request instead of from the process.
struct Served {
    role: Role,
    engine: Arc<Engine>,
    env: BTreeMap<String, String>,
    pid: Option<u32>,
    stdin: Option<String>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stopped: Option<Stopped>,
    panicked: Option<String>,
}

thread_local! {
    static SERVED: RefCell<Option<Served>> = const { RefCell::new(None) };
}

/// Keeps the line of a panic inside a served call for its answer; `false` when this thread runs
/// no served call.
pub(crate) fn note_panic(line: &str) -> bool {
    with(|s| s.panicked = Some(line.to_owned())).is_some()
}

/// The text that ends a run a server stops (never shown: the run's output is dropped).
const STOPPED: &str = "stopped: the server runs this call elsewhere";

fn with<T>(f: impl FnOnce(&mut Served) -> T) -> Option<T> {
    SERVED.with(|served| served.borrow_mut().as_mut().map(f))
}

/// Whether this call is served (runs in a server, for a client).
pub(crate) fn active() -> bool {
    with(|_| ()).is_some()
}

/// An environment variable as this call sees it: the request's when served, else the process's.
pub(crate) fn env_var(name: &str) -> Option<OsString> {
    with(|s| s.env.get(name).map(OsString::from)).unwrap_or_else(|| std::env::var_os(name))
}

/// The caller's pid: the client's when served.
pub(crate) fn pid() -> u32 {
    with(|s| s.pid).flatten().unwrap_or_else(std::process::id)
}

/// The stdin of a served call: `None` when not served; the deferral when the request carried
/// none (the connection thread asks the client for it and runs the call again).
pub(crate) fn stdin() -> Option<Result<Vec<u8>, CliError>> {
    with(|s| match (&s.stdin, s.role) {
        (Some(text), _) => Ok(text.clone().into_bytes()),
        (None, Role::Connection) => {
            s.stopped.get_or_insert(Stopped::NeedsStdin);
            Err(CliError::Failed(STOPPED.into()))
        }
        // Every verb reads its stdin before it opens the store for writing (a test holds them
        // to it), so the connection thread fetched it: this is a bug, answered as one.
        (None, Role::Writer) => Err(CliError::Failed(
            "internal error: the verb read stdin after it opened the store for writing".into(),
        )),
    })
}

/// The server's store for a served call opening it with `access`; `None` when not served.
pub(crate) fn engine(access: Access) -> Option<Result<Arc<Engine>, CliError>> {
    with(|s| match (access, s.role) {
        (Access::Read, _) | (Access::Write, Role::Writer) => Ok(Arc::clone(&s.engine)),
        (Access::Write, Role::Connection) => {
            s.stopped.get_or_insert(Stopped::Writes);
            Err(CliError::Failed(STOPPED.into()))
        }
        (
            Access::Export
            | Access::CheckedExport
            | Access::Rebuild
            | Access::Verify
            | Access::CopySource
            | Access::Init,
            _,
        ) => {
            let why = "init, export, verify, copy and rebuild open the store themselves";
            s.stopped.get_or_insert(Stopped::NotServed(why.into()));
            Err(CliError::Failed(STOPPED.into()))
        }
    })
}

/// This call's stdout or stderr: the process's, or the served call's answer.
pub(crate) enum Out {
    Stdout(std::io::Stdout),
    Stderr(std::io::Stderr),
    Captured { stderr: bool },
}

impl Out {
    pub(crate) fn stdout() -> Out {
        match with(|_| ()) {
            Some(()) => Out::Captured { stderr: false },
            None => Out::Stdout(std::io::stdout()),
        }
    }

    pub(crate) fn stderr() -> Out {
        match with(|_| ()) {
            Some(()) => Out::Captured { stderr: true },
            None => Out::Stderr(std::io::stderr()),
        }
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Out::Stdout(out) => out.lock().write(buf),
            Out::Stderr(err) => err.lock().write(buf),
            Out::Captured { stderr } => {
                let stderr = *stderr;
                with(|s| if stderr { &mut s.stderr } else { &mut s.stdout }.extend_from_slice(buf));
                Ok(buf.len())
            }
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Out::Stdout(out) => out.lock().write_all(buf),
            Out::Stderr(err) => err.lock().write_all(buf),
            Out::Captured { .. } => self.write(buf).map(|_| ()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Out::Stdout(out) => out.flush(),
            Out::Stderr(err) => err.flush(),
            Out::Captured { .. } => Ok(()),
        }
    }
}

/// A parsed request, ready to run (on the connection thread, then maybe on the writer).
struct Call {
    cli: Cli,
    args: crate::request::Args,
    env: BTreeMap<String, String>,
    pid: Option<u32>,
    stdin: Option<String>,
}

/// The end of one run of a call.
struct Ran {
    exit: u8,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    stopped: Option<Stopped>,
}

impl Call {
    /// Runs the call once on this thread, as `role`, capturing what it prints. A panic is
    /// answered as a process answers it: one line, exit 5.
    fn run(&self, role: Role, engine: &Arc<Engine>) -> Ran {
        let served = Served {
            role,
            engine: Arc::clone(engine),
            env: self.env.clone(),
            pid: self.pid,
            stdin: self.stdin.clone(),
            stdout: Vec::new(),
            stderr: Vec::new(),
            stopped: None,
            panicked: None,
        };
        SERVED.with(|s| *s.borrow_mut() = Some(served));
        crate::output::start_call();
        crate::request::start_call(Some(self.args.clone()));
        let exit =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::run_parsed(&self.cli)))
                .unwrap_or_else(|panic| {
                    let line = with(|s| s.panicked.take())
                        .flatten()
                        .unwrap_or_else(|| panic_text(&*panic));
                    let _ = writeln!(crate::output::stderr(), "hookstate: {line}");
                    crate::exit::CORRUPT
                });
        let served = SERVED.with(|s| s.borrow_mut().take());
        let Some(served) = served else {
            return Ran { exit, stdout: Vec::new(), stderr: Vec::new(), stopped: None };
        };
        Ran { exit, stdout: served.stdout, stderr: served.stderr, stopped: served.stopped }
    }
}

/// The line a caught panic prints, as the process's panic hook would.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    crate::output::one_line(&format!(
        "internal error: {message}; the store may be damaged, run `hookstate verify`"
    ))
}

fn reply(ran: Ran) -> Reply {
    Reply {
        id: 0,
        exit: ran.exit,
        stdout: String::from_utf8_lossy(&ran.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&ran.stderr).into_owned(),
    }
}

/// A write the writer thread runs.
struct WriteJob {
    call: Call,
    solo: bool,
    bytes: usize,
    /// When the request was received, and then when its `--wait-ms` ends.
    bound: (Instant, Instant),
}

impl Job for WriteJob {
    fn run(&mut self, engine: &Arc<Engine>) -> Reply {
        reply(self.call.run(Role::Writer, engine))
    }

    fn solo(&self) -> bool {
        self.solo
    }

    fn bytes(&self) -> usize {
        self.bytes
    }

    fn bound(&self) -> Option<(Instant, Instant)> {
        Some(self.bound)
    }
}

/// The CLI as a server's handler: parses each request with a built command taken from a pool
/// (building clap's command tree costs more than a call), then runs it.
pub(crate) struct ServedCli {
    store: PathBuf,
    /// The second anchor directory the server's engine keeps (`--anchor-dir`), absolute.
    anchor_dir: Option<PathBuf>,
    commands: Mutex<Vec<clap::Command>>,
    table: EnvTable,
    cache: ParseCache,
}

/// Command lines parsed before, by their shape (the argv with the value of its one
/// `--idem-key=` token before any `--` replaced by a placeholder, as every forwarded write
/// carries a fresh key there)
/// and the request's environment: the parsed call and its recorded arguments. clap's parse was a
/// quarter of a server's CPU at 8 clients (docs/decisions.md); the parse is a function of these
/// two alone (the served command reads no environment), and what depends on the request's
/// working directory or the filesystem (`own_store`, `rebase`) runs after it, on every call.
/// A shape is cached only when the placeholder landed in the key. Cleared when full.
/// A usage error is not cached: it is answered by clap every time.
struct ParseCache {
    entries: Mutex<HashMap<ShapeKey, (Cli, Args)>>,
}

type ShapeKey = (Vec<String>, BTreeMap<String, String>);

/// Shapes a server keeps parsed: a hook's verbs with their few argument spellings.
const PARSE_CACHE_ENTRIES_MAX: usize = 512;
/// What stands for the key in a cached shape.
const PLACEHOLDER: &str = "idem-key-placeholder";
/// The spelling of the key a shape takes out (the one the forwarding client writes).
const KEY_FLAG: &str = "--idem-key=";

impl ParseCache {
    fn new() -> ParseCache {
        ParseCache { entries: Mutex::new(HashMap::new()) }
    }

    /// `argv`'s shape, and the key it took out: only a `--idem-key=` token before any `--`, and
    /// only when there is exactly one.
    fn shape(argv: &[String]) -> (Vec<String>, Option<String>) {
        let options = argv.iter().take_while(|a| *a != "--");
        let keyed: Vec<usize> =
            options.enumerate().filter(|(_, a)| a.starts_with(KEY_FLAG)).map(|(i, _)| i).collect();
        let [at] = keyed.as_slice() else {
            return (argv.to_vec(), None);
        };
        let mut shape = argv.to_vec();
        let key = shape.get(*at).and_then(|token| token.strip_prefix(KEY_FLAG));
        let key = key.map(str::to_owned);
        if let Some(token) = shape.get_mut(*at) {
            *token = format!("{}{}", KEY_FLAG, PLACEHOLDER);
        }
        (shape, key)
    }

    fn get(&self, key: &ShapeKey) -> Option<(Cli, Args)> {
        self.entries.lock().ok()?.get(key).cloned()
    }

    fn put(&self, key: ShapeKey, parsed: &(Cli, Args)) {
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= PARSE_CACHE_ENTRIES_MAX {
                entries.clear();
            }
            entries.insert(key, parsed.clone());
        }
    }
}

impl ServedCli {
    /// A handler for the store at `store` (its path as the server opened it), whose engine keeps
    /// its second anchor in `anchor_dir`.
    pub(crate) fn new(store: PathBuf, anchor_dir: Option<PathBuf>) -> ServedCli {
        let store = std::fs::canonicalize(&store).unwrap_or(store);
        let anchor_dir = anchor_dir.map(|dir| canonical(&dir));
        let table = EnvTable::of(&full_command());
        let commands = Mutex::new(Vec::new());
        ServedCli { store, anchor_dir, commands, table, cache: ParseCache::new() }
    }

    fn command(&self) -> clap::Command {
        let pooled = self.commands.lock().ok().and_then(|mut pool| pool.pop());
        pooled.unwrap_or_else(|| without_env(full_command()))
    }

    fn give_back(&self, command: clap::Command) {
        if let Ok(mut pool) = self.commands.lock() {
            pool.push(command);
        }
    }
}

/// What a parse gave.
enum Parsed {
    Call(Box<Call>),
    Answer(Reply),
    NotServed(String),
}

impl Handler for ServedCli {
    fn prepare(&self, run: Run, engine: &Arc<Engine>, stdin: &mut dyn StdinSource) -> Prepared {
        let received = Instant::now();
        let parsed = self.parse(run);
        let mut call = match parsed {
            Parsed::Call(call) => call,
            Parsed::Answer(reply) => return Prepared::Answer(reply),
            Parsed::NotServed(why) => return Prepared::NotServed(why),
        };
        loop {
            let ran = call.run(Role::Connection, engine);
            match ran.stopped {
                None => return Prepared::Answer(reply(ran)),
                Some(Stopped::NotServed(why)) => return Prepared::NotServed(why),
                Some(Stopped::NeedsStdin) if call.stdin.is_none() => match stdin.fetch() {
                    Some(text) => call.stdin = Some(text),
                    None => return Prepared::Abandon,
                },
                Some(Stopped::NeedsStdin) => return Prepared::Answer(reply(ran)),
                Some(Stopped::Writes) => {
                    let solo = call.cli.mirror.is_some();
                    let bytes = call.stdin.as_ref().map_or(0, String::len)
                        + call.args.1.iter().map(Vec::len).sum::<usize>();
                    let wait = call.cli.wait_ms.min(hookstate_engine::limits::WAIT_MS_MAX);
                    let deadline = received + Duration::from_millis(wait);
                    let bound = (received, deadline);
                    return Prepared::Write(Box::new(WriteJob { call: *call, solo, bytes, bound }));
                }
            }
        }
    }
}

impl ServedCli {
    /// Parses a request as the process would parse its command line with the request's
    /// environment: values of variables the CLI reads become the flags they stand for, unless
    /// the command line gives the flag. A command line parsed before (up to its idempotency key)
    /// is taken from the cache instead of clap ([`ParseCache`]).
    fn parse(&self, run: Run) -> Parsed {
        let (shape, key) = ParseCache::shape(&run.argv);
        // A shape that took a key out gets it back; any other keeps the key it parsed.
        let keyed = |(mut cli, args): (Cli, Args)| {
            if key.is_some() {
                cli.idem_key.clone_from(&key);
            }
            (cli, args)
        };
        let shape_key = (shape, run.env.clone());
        let parsed = match self.cache.get(&shape_key) {
            Some(parsed) => Ok(keyed(parsed)),
            None if key.is_none() => self.clap_parse(&run.argv, &run.env).inspect(|parsed| {
                self.cache.put(shape_key, parsed);
            }),
            None => match self.clap_parse(&shape_key.0, &run.env) {
                Ok(parsed) if parsed.0.idem_key.as_deref() == Some(PLACEHOLDER) => {
                    self.cache.put(shape_key, &parsed);
                    Ok(keyed(parsed))
                }
                // The placeholder did not land in the key (the token was another option's
                // value), or the line does not parse (its error must name what was sent): it
                // is parsed as it is, and not cached.
                _ => self.clap_parse(&run.argv, &run.env),
            },
        };
        let (mut cli, args) = match parsed {
            Ok(parsed) => parsed,
            Err(answer) => return answer,
        };
        if let Some(why) = not_served(&cli.command) {
            return Parsed::NotServed(why.into());
        }
        let cwd = run.cwd.as_deref().map(Path::new);
        if let Err(why) = self.own_store(&mut cli, &run.env, cwd) {
            return Parsed::NotServed(why);
        }
        if let Some(cwd) = cwd {
            rebase(&mut cli, cwd);
        }
        // The engine keeps the server's second anchor: a call that names another directory
        // (or none, or one the server has none of) runs where it is checked and moved.
        let wanted = cli.anchor_dir.as_deref().map(canonical);
        if wanted != self.anchor_dir {
            let shown = |dir: Option<&PathBuf>| {
                dir.map_or_else(|| "none".to_owned(), |d| d.display().to_string())
            };
            return Parsed::NotServed(format!(
                "the call's second anchor directory is {}, this server's {}",
                shown(wanted.as_ref()),
                shown(self.anchor_dir.as_ref())
            ));
        }
        Parsed::Call(Box::new(Call { cli, args, env: run.env, pid: run.pid, stdin: run.stdin }))
    }

    /// clap's parse of `argv` with `env` (a built command from the pool): the call and its
    /// recorded arguments, or the usage answer.
    fn clap_parse(
        &self,
        argv: &[String],
        env: &BTreeMap<String, String>,
    ) -> Result<(Cli, Args), Parsed> {
        let mut command = self.command();
        let parsed = self.parse_with(&mut command, argv, env);
        self.give_back(command);
        parsed
    }

    fn parse_with(
        &self,
        command: &mut clap::Command,
        run_argv: &[String],
        env: &BTreeMap<String, String>,
    ) -> Result<(Cli, Args), Parsed> {
        let mut argv = vec![OsString::from("hookstate")];
        argv.extend(self.table.globals_for(run_argv, env));
        argv.extend(run_argv.iter().map(OsString::from));
        let matches = command.try_get_matches_from_mut(&argv).map_err(|e| usage(&e))?;
        let leaf = self.table.leaf_flags(&matches, run_argv, env);
        let matches = if leaf.is_empty() {
            matches
        } else {
            let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
            argv.splice(at..at, leaf);
            command.try_get_matches_from_mut(&argv).map_err(|e| usage(&e))?
        };
        let cli = Cli::from_arg_matches(&matches).map_err(|e| usage(&e))?;
        Ok((cli, crate::request::args_of(command, &matches)))
    }

    /// Checks that the request names this server's store (a request naming none is for it).
    fn own_store(
        &self,
        cli: &mut Cli,
        env: &BTreeMap<String, String>,
        cwd: Option<&Path>,
    ) -> Result<(), String> {
        let named = match &cli.db {
            Some(db) => Some(db.clone()),
            None => crate::cmd::home_dir(env.get("HOME").map(std::ffi::OsString::from))
                .map(|home| home.join(crate::cmd::DEFAULT_DB)),
        };
        let Some(named) = named else {
            cli.db = Some(self.store.clone());
            return Ok(());
        };
        let absolute = match (named.is_absolute(), cwd) {
            (true, _) => named.clone(),
            (false, Some(cwd)) => cwd.join(&named),
            (false, None) => return Err("a relative --db needs the request's cwd".into()),
        };
        let same = std::fs::canonicalize(&absolute).is_ok_and(|path| path == self.store);
        if !same {
            return Err(format!(
                "this server serves {}, not {}",
                self.store.display(),
                absolute.display()
            ));
        }
        Ok(())
    }
}

/// The usage answer a server gives `argv` (program name first) under this process's
/// environment, for a call whose own parse failed: a process prints it, so a usage line does not
/// depend on whether a server took the call. clap counts a flag its variable set as given, which
/// changes the line (`usage: hookstate kv put --session <SESSION> <KEY>` with
/// `HOOKSTATE_SESSION` set); a server parses the variable's value as that flag. `None` for help,
/// version, a line this parse takes, or arguments that are not UTF-8.
pub(crate) fn usage_as_served(argv: &[OsString]) -> Option<Reply> {
    let args: Option<Vec<String>> =
        argv.iter().skip(1).map(|a| a.to_str().map(str::to_owned)).collect();
    let env: BTreeMap<String, String> = crate::forward::FORWARDED_ENV
        .iter()
        .filter_map(|var| Some(((*var).to_owned(), std::env::var(var).ok()?)))
        .collect();
    let handler = ServedCli::new(PathBuf::new(), None);
    let mut command = handler.command();
    match handler.parse_with(&mut command, &args?, &env) {
        Err(Parsed::Answer(reply)) => Some(reply),
        _ => None,
    }
}

/// `path` with its links resolved when it exists, else as it is (absolute: callers rebase it).
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| std::path::absolute(path).unwrap_or_default())
}

fn usage(err: &clap::Error) -> Parsed {
    use clap::error::ErrorKind;
    if matches!(err.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        // Help shows the environment variables of the process that prints it.
        return Parsed::NotServed("help and version are printed by the client".into());
    }
    let mut stderr = Vec::new();
    let _ =
        writeln!(stderr, "hookstate: usage: {}", crate::output::one_line(&crate::usage_line(err)));
    let stderr = String::from_utf8_lossy(&stderr).into_owned();
    Parsed::Answer(Reply { id: 0, exit: crate::exit::USAGE, stdout: String::new(), stderr })
}

/// Verbs a server does not run: they start processes, print the build's documents, or open the
/// store in a mode of their own (and run rarely).
fn not_served(verb: &Verb) -> Option<&'static str> {
    match verb {
        Verb::Demo(_) => Some("demo starts processes of its own"),
        Verb::Completions { .. } | Verb::Man | Verb::CliReference => {
            Some("documents are printed by the client")
        }
        Verb::Serve(_) => Some("serve is not a request"),
        Verb::Hermit(_) => Some("the hermit verbs resolve the paths in their words in-process"),
        Verb::Import(_) | Verb::Export(_) | Verb::Verify { .. } | Verb::Rebuild => {
            Some("import, export, verify and rebuild run in-process")
        }
        _ => None,
    }
}

/// The ids of every path argument a served verb takes, made absolute against the request's
/// working directory by [`rebase`] (a test holds this list to the command tree).
#[cfg(test)]
const PATH_ARGS: [&str; 8] =
    ["db", "mirror", "anchor_dir", "dir", "moonshine_home", "from", "to", "socket"];

/// Makes every relative path of a served call absolute against the client's working directory
/// (the server's own is another).
fn rebase(cli: &mut Cli, cwd: &Path) {
    let fix = |path: &mut PathBuf| {
        if path.is_relative() {
            *path = cwd.join(&*path);
        }
    };
    for path in [&mut cli.db, &mut cli.mirror, &mut cli.anchor_dir].into_iter().flatten() {
        fix(path);
    }
    match &mut cli.command {
        Verb::Proposals(args) => args.dir.iter_mut().for_each(fix),
        Verb::Alerts(args) => args.dir.iter_mut().for_each(fix),
        Verb::Feedback(args) => {
            if let FeedbackVerb::Tick { moonshine_home, .. } = &mut args.verb {
                moonshine_home.iter_mut().for_each(fix);
            }
        }
        Verb::Hook(HookVerb::Stop { moonshine_home, .. }) => {
            moonshine_home.iter_mut().for_each(fix);
        }
        Verb::Import(args) => fix(&mut args.from),
        Verb::Export(args) => fix(&mut args.to),
        Verb::Demo(args) => args.dir.iter_mut().for_each(fix),
        _ => {}
    }
}

/// The environment variables clap reads for the CLI's arguments, and the flags they stand for.
struct EnvTable {
    /// Global arguments: (long flag, variable).
    globals: Vec<(String, String)>,
    /// Arguments of one verb: (its subcommand path, id, long flag, variable).
    leaves: Vec<(Vec<String>, String, String, String)>,
}

impl EnvTable {
    fn of(command: &clap::Command) -> EnvTable {
        let mut table = EnvTable { globals: Vec::new(), leaves: Vec::new() };
        table.walk(command, &mut Vec::new(), true);
        table
    }

    fn walk(&mut self, command: &clap::Command, path: &mut Vec<String>, root: bool) {
        for arg in command.get_arguments() {
            let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) else {
                continue;
            };
            let env = env.to_string_lossy().into_owned();
            if root && arg.is_global_set() {
                self.globals.push((long.to_owned(), env));
            } else if arg.is_global_set() {
                // A root global the build propagated into this verb: listed once, above.
                continue;
            } else {
                let id = arg.get_id().to_string();
                self.leaves.push((path.clone(), id, long.to_owned(), env));
            }
        }
        for sub in command.get_subcommands() {
            path.push(sub.get_name().to_owned());
            self.walk(sub, path, false);
            path.pop();
        }
    }

    /// `--flag=value` for each global variable the request sets whose flag its command line
    /// does not give.
    fn globals_for(&self, argv: &[String], env: &BTreeMap<String, String>) -> Vec<OsString> {
        self.globals
            .iter()
            .filter(|(long, _)| !given(argv, long))
            .filter_map(|(long, var)| env.get(var).map(|v| (long, v)))
            .map(|(long, value)| OsString::from(format!("--{long}={value}")))
            .collect()
    }

    /// The same for the matched verb's own arguments that read a variable.
    fn leaf_flags(
        &self,
        matches: &clap::ArgMatches,
        argv: &[String],
        env: &BTreeMap<String, String>,
    ) -> Vec<OsString> {
        let mut path = Vec::new();
        let mut at = matches;
        while let Some((name, sub)) = at.subcommand() {
            path.push(name.to_owned());
            at = sub;
        }
        self.leaves
            .iter()
            .filter(|(p, _, long, _)| *p == path && !given(argv, long))
            .filter_map(|(_, _, long, var)| env.get(var).map(|v| (long, v)))
            .map(|(long, value)| OsString::from(format!("--{long}={value}")))
            .collect()
    }
}

/// Whether the command line gives `--long` before a `--`.
pub(crate) fn given(argv: &[String], long: &str) -> bool {
    let flag = format!("--{long}");
    argv.iter()
        .take_while(|a| *a != "--")
        .any(|a| *a == flag || a.strip_prefix(&flag).is_some_and(|rest| rest.starts_with('=')))
}

/// The command with every argument's environment variable removed: a server never reads its
/// own environment for a request.
fn without_env(command: clap::Command) -> clap::Command {
    let command = command.mut_args(|arg| arg.env(None::<&'static str>));
    let names: Vec<String> = command.get_subcommands().map(|s| s.get_name().to_owned()).collect();
    names.into_iter().fold(command, |command, name| command.mut_subcommand(name, without_env))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a parse gave, comparable: the call's arguments and recorded parts, or the answer.
    fn outcome(parsed: Parsed) -> String {
        match parsed {
            Parsed::Call(call) => format!("call {:?} {:?}", call.cli, call.args),
            Parsed::Answer(reply) => format!("answer {} {}", reply.exit, reply.stderr),
            Parsed::NotServed(why) => format!("not served {why}"),
        }
    }

    /// A cached parse (the shape parsed once, then taken from the cache with another key) gives
    /// exactly what clap gives the same command line with no cache: for keys clap takes, for
    /// `--idem-key=` tokens that are positionals or another argument's value, for the space
    /// spelling, for environments, and for usage errors.
    #[test]
    fn a_cached_parse_is_the_parse_clap_gives() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("s.redb");
        let cached = ServedCli::new(store.clone(), None);
        let lines: [&[&str]; 12] = [
            &["queue", "claim", "q", "--holder", "w1"],
            &["--idem-key=fwd-aaa", "queue", "claim", "q", "--lease-ms", "5"],
            &["--idem-key=fwd-bbb", "queue", "claim", "q", "--lease-ms", "5"],
            &["--idem-key", "k1", "kv", "put", "a", "1"],
            &["--idem-key", "k2", "kv", "put", "a", "1"],
            &["kv", "put", "a", "--", "--idem-key=x"],
            &["kv", "put", "a", "--", "--idem-key=y"],
            &["proposals", "--dir", "/d", "micro", "nudge", "--idem-key=MP-1"],
            &["proposals", "--dir", "/d", "micro", "nudge", "--idem-key=MP-2"],
            &["--idem-key=a", "--idem-key=b", "kv", "get", "k"],
            &["--idem-key=zz", "queue", "nope"],
            &["--idem-key=zz", "queue", "claim"],
        ];
        let envs =
            [BTreeMap::new(), BTreeMap::from([("HOOKSTATE_SCOPE".to_owned(), "s2".to_owned())])];
        let mut calls = 0;
        for _round in 0..2 {
            for env in &envs {
                for line in lines {
                    let run = Run {
                        id: 1,
                        argv: line.iter().map(|a| (*a).to_owned()).collect(),
                        env: env.clone(),
                        cwd: None,
                        pid: None,
                        stdin: None,
                    };
                    let fresh = ServedCli::new(store.clone(), None);
                    let want = outcome(fresh.parse(run.clone()));
                    let got = outcome(cached.parse(run));
                    assert_eq!(got, want, "{line:?} {env:?}");
                    calls += usize::from(want.starts_with("call"));
                }
            }
        }
        // Three lines are usage errors: a key given twice, an unknown verb, a missing queue.
        assert_eq!(calls, 2 * 2 * 9, "usage errors are the only answers");
        let entries = cached.cache.entries.lock().unwrap().len();
        assert!(entries > 0 && entries < 2 * 9, "{entries} shapes cached");
        // A new forwarded key finds the shape its line was cached under: the cache is used.
        let line = ["--idem-key=fwd-new", "queue", "claim", "q", "--lease-ms", "5"];
        let (shape, key) = ParseCache::shape(&line.map(String::from));
        assert_eq!(key.as_deref(), Some("fwd-new"));
        assert!(cached.cache.get(&(shape, BTreeMap::new())).is_some(), "the shape was not cached");
    }

    /// Every path argument of the command tree is in [`PATH_ARGS`], so [`rebase`] knows it.
    #[test]
    fn every_path_argument_is_rebased() {
        fn walk(command: &clap::Command, out: &mut Vec<String>) {
            let path = clap::builder::ValueParser::path_buf().type_id();
            for arg in command.get_arguments() {
                if arg.get_value_parser().type_id() == path {
                    out.push(arg.get_id().to_string());
                }
            }
            // The hermit verbs are not served: they resolve their paths in-process.
            command
                .get_subcommands()
                .filter(|s| s.get_name() != "hermit")
                .for_each(|sub| walk(sub, out));
        }
        let mut ids = Vec::new();
        walk(&full_command(), &mut ids);
        assert!(ids.len() >= PATH_ARGS.len(), "found {ids:?}");
        for id in &ids {
            assert!(PATH_ARGS.contains(&id.as_str()), "path argument {id} is not rebased");
        }
    }

    #[test]
    fn environment_values_become_flags_unless_given() {
        let table = EnvTable::of(&full_command());
        let env = BTreeMap::from([
            ("HOOKSTATE_SCOPE".to_owned(), "s1".to_owned()),
            ("HOOKSTATE_SESSION".to_owned(), "abc".to_owned()),
            ("UNRELATED".to_owned(), "x".to_owned()),
        ]);
        let argv: Vec<String> = ["--scope", "given", "kv", "get", "k"].map(String::from).into();
        let flags = table.globals_for(&argv, &env);
        assert_eq!(flags, [OsString::from("--session=abc")]);
        let argv: Vec<String> = ["kv", "get", "--", "--scope"].map(String::from).into();
        assert_eq!(table.globals_for(&argv, &env).len(), 2);
        assert!(table.leaves.iter().any(|(_, _, _, var)| var == "MOONSHINE_HOME"));
    }

    #[test]
    fn the_served_command_reads_no_environment() {
        fn walk(command: &clap::Command) -> usize {
            command.get_arguments().filter(|a| a.get_env().is_some()).count()
                + command.get_subcommands().map(walk).sum::<usize>()
        }
        assert!(walk(&full_command()) > 5);
        assert_eq!(walk(&without_env(full_command())), 0);
    }
}
