//! Command-line arguments: the global options and every verb, as clap derives.
//!
//! Does not validate ids or values; the engine does, before anything is written.
//!
//! Every verb enum is `defer = true`: a call builds only the verbs on its own path (the names and
//! one-line abouts of the others stay eager, for the parent's help), which was a fifth of a short
//! call's time (docs/decisions.md). Hence two rules: the doc comment of an `Args` struct or of a
//! verb enum is a plain comment (clap would apply it over the verb's about when the verb is built),
//! and no verb's argument shares an id with a global option (clap propagates globals before it
//! builds a deferred verb). Code that walks the whole tree takes [`full_command`].

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use hookstate_engine::limits::{DELIVERIES_DEFAULT, LEASE_MS_DEFAULT, WAIT_MS_DEFAULT};
use hookstate_engine::{HEARTBEAT_INTERVAL_S_DEFAULT, STALE_DELIVERED_MS_DEFAULT};

/// The heading of the options every verb takes: `--help` lists them under it, `-h` leaves them out.
const GLOBAL: &str = "Global options";

const ABOUT: &str = "\
A transactional state store for agent hooks: every mutation is an append-only, hash-chained event
in one redb file, projected into views in the same transaction. Claims are exclusive leases with
fencing tokens. Results go to stdout as one JSON object; errors are one line on stderr.";

/// The whole command tree, every deferred verb built: for code that walks it (the server's table
/// of environment variables, the reference page, completions, tests).
///
/// clap copies the verbs into its `help` verb's tree when it builds the top level, before a
/// deferred verb has its verbs, so that copy is made again here from the built tree, as clap makes
/// it (names, abouts and hidden flags; no arguments): completions of `hookstate help kv put`
/// stay whole.
pub(crate) fn full_command() -> clap::Command {
    let mut command = <Cli as clap::CommandFactory>::command();
    command.build();
    let bin = format!("{} help", command.get_bin_name().unwrap_or("hookstate"));
    let verbs: Vec<clap::Command> = command
        .get_subcommands()
        .filter(|s| s.get_name() != "help")
        .map(|verb| help_copy(verb, &bin))
        .collect();
    let help = |help: clap::Command| {
        let about = help.get_about().cloned().unwrap_or_default();
        let own = clap::Command::new("help").about(about.clone()).bin_name(format!("{bin} help"));
        let own = own.disable_help_flag(true).disable_version_flag(true);
        clap::Command::new("help")
            .about(about)
            .bin_name(bin.clone())
            .disable_help_flag(true)
            .disable_version_flag(true)
            .disable_help_subcommand(true)
            .subcommands(verbs)
            .subcommand(own)
    };
    command.mut_subcommand("help", help)
}

/// The command a process parses `argv` with when `argv` names its verb plainly (global options,
/// then the verb's name): the global options are the named verb's alone, so clap copies them into
/// one verb instead of every verb (37), three quarters of clap's time (docs/decisions.md).
/// They stay global below that verb, so they are accepted before it, after it and after its own
/// verbs, with the values a parse of the whole tree gives. `None` when `argv` names no verb
/// (help, version, an unknown word, `help`): the caller parses with the whole tree. A parse with
/// this command that fails proves nothing (its message would name the wrong places); the caller
/// parses again with the whole tree, which gives clap's own message.
pub(crate) fn command_for(argv: &[std::ffi::OsString]) -> Option<clap::Command> {
    let command = <Cli as clap::CommandFactory>::command();
    let verb = named_verb(&command, argv)?;
    // Without their help text, which the verb's copies never print (help parses again), so
    // clap's copies into the verb's own verbs are cheaper too.
    let globals: Vec<clap::Arg> = command
        .get_arguments()
        .filter(|arg| arg.is_global_set())
        .map(|arg| arg.clone().help(None).long_help(None))
        .collect();
    let mut command = command;
    for arg in &globals {
        command = command.mut_arg(arg.get_id().clone(), |arg| arg.global(false));
    }
    Some(command.mut_subcommand(verb, |verb| verb.args(globals)))
}

/// The name of the verb `argv` names after nothing but global options (with their values), if
/// it names one of `command`'s verbs other than `help`.
fn named_verb(command: &clap::Command, argv: &[std::ffi::OsString]) -> Option<String> {
    let mut words = argv.iter().skip(1);
    while let Some(word) = words.next() {
        let word = word.to_str()?;
        let Some(option) = word.strip_prefix("--") else {
            if word.starts_with('-') {
                return None;
            }
            let verb = command.find_subcommand(word)?.get_name();
            return (verb != "help").then(|| verb.to_owned());
        };
        let (name, inline) = match option.split_once('=') {
            Some((name, _)) => (name, true),
            None => (option, false),
        };
        let global = command
            .get_arguments()
            .find(|arg| arg.is_global_set() && arg.get_long() == Some(name))?;
        if global.get_action().takes_values() && !inline {
            words.next()?;
        }
    }
    None
}

/// A verb as clap's `help` verb lists it under `parent`: its name, about and hidden flag, and its
/// verbs.
fn help_copy(verb: &clap::Command, parent: &str) -> clap::Command {
    let bin = format!("{parent} {}", verb.get_name());
    let verbs: Vec<clap::Command> = verb
        .get_subcommands()
        .filter(|s| s.get_name() != "help")
        .map(|sub| help_copy(sub, &bin))
        .collect();
    clap::Command::new(verb.get_name().to_owned())
        .bin_name(bin)
        .hide(verb.is_hide_set())
        .about(verb.get_about().cloned().unwrap_or_default())
        .disable_help_flag(true)
        .disable_version_flag(true)
        .disable_help_subcommand(true)
        .subcommands(verbs)
}

/// Top-level arguments.
#[derive(Debug, Clone, Parser)]
#[command(name = "hookstate", version, about = ABOUT, after_help = crate::exit::TABLE)]
pub(crate) struct Cli {
    /// Store file, or a PostgreSQL address (postgres://user:password@host/db) [default:
    /// ~/.agent/hookstate/state.redb].
    #[arg(long, global = true, help_heading = GLOBAL, hide_short_help = true, hide_env_values = true, env = "HOOKSTATE_DB", value_name = "PATH")]
    pub(crate) db: Option<PathBuf>,
    /// Scope the verb acts in (a project, a state directory, a bundle).
    #[arg(long, global = true, help_heading = GLOBAL, hide_short_help = true, hide_env_values = true, env = "HOOKSTATE_SCOPE", default_value = "default")]
    pub(crate) scope: String,
    /// Longest wait for the store's write lock before exiting 4 (busy).
    #[arg(long, global = true, help_heading = GLOBAL, hide_short_help = true, hide_env_values = true, env = "HOOKSTATE_WAIT_MS", default_value_t = WAIT_MS_DEFAULT)]
    pub(crate) wait_ms: u64,
    /// Output format.
    #[arg(long, global = true, help_heading = GLOBAL, hide_short_help = true, value_enum, default_value_t = Format::Json)]
    pub(crate) format: Format,
    /// The caller's Claude Code session id (recorded in the event; addresses session items).
    #[arg(long, global = true, help_heading = GLOBAL, hide_short_help = true, hide_env_values = true, env = "HOOKSTATE_SESSION")]
    pub(crate) session: Option<String>,
    /// The hook or agent name recorded in the event.
    #[arg(long, global = true, help_heading = GLOBAL, hide_short_help = true, hide_env_values = true, env = "HOOKSTATE_AGENT")]
    pub(crate) agent: Option<String>,
    /// Idempotency key, per scope: a repeated call in the scope with this key and the same verb,
    /// arguments and stdin returns the first result and appends nothing; the same key with
    /// another request exits 3. A key is bound for 24 hours.
    #[arg(long, global = true, help_heading = GLOBAL, hide_short_help = true)]
    pub(crate) idem_key: Option<String>,
    /// Keep the legacy files of the verb's layout in DIR current after every commit, adopting
    /// changes other writers made to them first (feedback: a moonshine home; loopd and observer:
    /// the directory of the file; proposals and alerts: the hermit state directory). The
    /// proposals reads adopt them too before they answer.
    #[arg(long, global = true, help_heading = GLOBAL, hide_short_help = true, hide_env_values = true, env = "HOOKSTATE_MIRROR", value_name = "DIR")]
    pub(crate) mirror: Option<PathBuf>,
    /// The mirrored file's name [default: the layout's default name].
    #[arg(long, global = true, help_heading = GLOBAL, hide_short_help = true, hide_env_values = true, env = "HOOKSTATE_MIRROR_NAME", value_name = "FILE")]
    pub(crate) mirror_name: Option<String>,
    /// A directory for a second anchor of the store's head: an append-only file per store
    /// (make it `chattr +a`), checked and appended to like the anchor beside the store, so a copy
    /// of an old store with its old anchor is still caught. The directory must exist.
    #[arg(long, global = true, help_heading = GLOBAL, hide_short_help = true, hide_env_values = true, env = "HOOKSTATE_ANCHOR_DIR", value_name = "DIR")]
    pub(crate) anchor_dir: Option<PathBuf>,
    /// Answer a read (or an export) from the store as it was when its head was seq N, replayed
    /// from the log; a verb that writes refuses it.
    #[arg(long, global = true, help_heading = GLOBAL, hide_short_help = true, value_name = "N", conflicts_with = "as_of")]
    pub(crate) at_seq: Option<u64>,
    /// Answer a read (or an export) from the store as it was at TIME (RFC 3339): after the last
    /// event appended at or before it.
    #[arg(long, global = true, help_heading = GLOBAL, hide_short_help = true, value_name = "TIME")]
    pub(crate) as_of: Option<String>,
    /// Tests only: the clock, in UTC ms, that mutations record instead of the real time.
    #[arg(long, global = true, help_heading = GLOBAL, hide_short_help = true, hide_env_values = true, env = "HOOKSTATE_NOW_MS", hide = true)]
    pub(crate) now_ms: Option<u64>,
    /// The verb.
    #[command(subcommand)]
    pub(crate) command: Verb,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// One JSON object (log: one JSON object per line).
    Json,
    /// Readable text: `key: value` lines, aligned tables for lists, local times, units.
    Text,
    /// The upstream script's one-line verdict (`QUEUED|MP-…`, `NONE|no-match`, …) and its exit
    /// codes (every error but a usage error exits 1); verbs without a verdict print JSON.
    Verdict,
}

// Every verb.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum Verb {
    /// Create the store (atomically) if it does not exist, and print its head; on PostgreSQL,
    /// create or upgrade the tables in one transaction.
    Init,
    /// Records with a revision.
    #[command(subcommand)]
    Kv(KvVerb),
    /// Claim queues: leases, fencing tokens, parking, session-addressed items.
    #[command(subcommand)]
    Queue(QueueVerb),
    /// Counters (commutative add).
    #[command(subcommand)]
    Counter(CounterVerb),
    /// Dedup sets (add-if-absent).
    #[command(subcommand)]
    Set(SetVerb),
    /// Capped lists (keep the last N rows).
    #[command(subcommand)]
    List(ListVerb),
    /// loopd turn signals and PM registrations (scope: loopd:<bundle>).
    #[command(subcommand)]
    Signals(SignalsVerb),
    /// The claude-management observer state (scope: observer:<session or project>).
    #[command(subcommand)]
    Observer(ObserverVerb),
    /// claude-code-hermit micro-proposals, PROP proposals, their ledger and index
    /// (scope: hermit:<abs state dir>).
    Proposals(ProposalsArgs),
    /// claude-code-hermit heartbeat state: the alert ladder of state/alert-state.json and
    /// precheck's tick count; budget alerts, the heartbeat monitor's runtime record and
    /// liveness, the injection alert, the next-task ack (scope: hermit:<abs state dir>).
    Alerts(AlertsArgs),
    /// claude-code-hermit session state: drop-ins for task.ts, conversation.ts,
    /// observations.ts, prune-observations, later.ts, session-archive.ts,
    /// record-operator-action.ts and proposal.ts shell-append, and the runtime.json and marker
    /// writers (scope: hermit:<abs state dir>).
    ///
    /// `hermit proposal <verb> <dir> …` and `hermit heartbeat alert-state
    /// <dir>/state/alert-state.json` (any other file name is refused, exit 1: it is the one
    /// alert state file hookstate keeps) take proposal.ts's and heartbeat.ts's words in their
    /// order and
    /// run the matching proposals, alerts or hermit verb, with --format verdict and --mirror
    /// <dir> unless given: create (--require-template), patch (stdin read, --request-compact),
    /// shell-append, next-task, queue-micro, micro, index, event, resolve-id, metrics,
    /// success-signal; a state dir that is not this project's (AGENT_DIR, CLAUDE_PROJECT_DIR,
    /// the walk up from the working directory) is refused on stderr (exit 1), an unknown verb
    /// prints ERROR|unknown-verb (exit 0), a missing verb or dir upstream's Usage line (exit 1)
    /// but `index` SKIP|no state dir and `patch <dir>` ERROR|no-such-proposal (exit 0); gate,
    /// quality-gate, routine and anchor are not built (exit 3).
    Hermit(crate::args_session::HermitArgs),
    /// Print events as JSON lines, filtered.
    Log(LogArgs),
    /// Check the chain from genesis, the head anchors, that views equal a rebuild and that every
    /// row is found by its key. Opens the store read-only and never writes it, so it can check a
    /// read-only copy (a backup). A large store's rebuilt rows go to a file with no name in the
    /// store's directory (gone when it ends), or stay in memory where it may not write there.
    Verify {
        /// Accept a missing anchor on a store that holds events (you vouch for the store) and
        /// write it at the head; without this a missing anchor fails.
        #[arg(long)]
        accept_missing_anchor: bool,
    },
    /// Recompute every view from the log and write the rows that differ from it (all of them on a
    /// damaged table); also upgrades a store of an older format, and removes temporary files
    /// killed writers left.
    Rebuild,
    /// Events, scopes, queue depths, file size, head.
    Stats,
    /// Hold the store open and answer calls on a Unix socket beside it (`<db>.sock`), committing
    /// the writes of concurrent calls together: every `hookstate` call on this store finds the
    /// server by itself and forwards to it, or runs in-process when there is none. One server per
    /// store; SIGTERM or SIGINT stop it after the calls in flight (docs/protocol.md). Store
    /// files only: a PostgreSQL store is already shared by its server.
    Serve(ServeArgs),
    /// Copy a store into a new one, on either backend: the same events at the same seqs with the
    /// same hashes, the views rebuilt, in one transaction; then verify the copy.
    Copy(CopyArgs),
    /// Write the log as JSON lines (a header with the store id, format and genesis; each event
    /// with its seq, hash, exact record and rendering) to stdout or --to FILE; progress goes to
    /// stderr when it is a terminal.
    Dump(DumpArgs),
    /// Build a new store at --db from a dump, re-verifying every hash and link: a dump that is
    /// truncated, reordered or edited is refused, naming its first bad line, and nothing is made.
    /// With --anchor-dir the store's second anchor is moved to the restored head; a dump older
    /// than that anchor has seen is refused (exit 5).
    Restore(RestoreArgs),
    /// Copy the store, as of one consistent snapshot, into a new store at --to while writers go
    /// on (same id, events, views and head; check it with `hookstate --db PATH verify`).
    Backup(BackupArgs),
    /// Record a checkpoint: the views and the head, kept in the store, with their digest in a
    /// record event of the chain (scope hookstate:checkpoint), so `compact` can drop the events
    /// before it and `verify` still prove the chain from it.
    Checkpoint,
    /// Drop every event up to the latest checkpoint and give the file's space back; refused
    /// when it would keep fewer than --keep events, or drop an event an idempotency key is
    /// still bound to (24 hours after its first use; 10 minutes for the `fwd-` key a call
    /// forwarded to `hookstate serve` carries).
    Compact {
        /// Keep at least this many of the last events.
        #[arg(long, value_name = "N", default_value_t = 0)]
        keep: u64,
    },
    /// Examine the store: permissions, a full verify, the anchor, stale temporary files, the
    /// --mirror directory, processes that have it open, size and growth; a hint per finding.
    /// Exits 5 when a finding is a problem. Store files only (on PostgreSQL: verify, metrics).
    Doctor,
    /// Events per domain, queue depths, the oldest ready item's age, parked items, file size and
    /// head, as JSON or (--prometheus) Prometheus text.
    Metrics {
        /// Print Prometheus text exposition format instead of JSON.
        #[arg(long)]
        prometheus: bool,
    },
    /// Run the end-to-end demo: concurrent hookstate processes claim from one queue.
    Demo(DemoArgs),
    /// The moonshine authorship-feedback inbox of a project (scope moonshine:<project>).
    Feedback(FeedbackArgs),
    /// Claude Code hooks as verbs: read the hook's JSON payload on stdin and do its job.
    #[command(subcommand)]
    Hook(HookVerb),
    /// Adopt a legacy layout's files as events (every file checked before anything is written).
    ///
    /// moonshine: projects go in name order, several whole projects per transaction, at most
    /// 4096 events and 8 MiB of files each (a project is never split: a larger one is a
    /// transaction of its own; with --idem-key, one project per transaction). A project that
    /// already has state refuses the import (exit 1): the projects before it stay imported, it
    /// and the projects after it are not touched. A claim held by a live legacy process refuses
    /// before anything is written. A failed or killed import leaves the projects of the
    /// transactions it committed: the first ones in name order, each complete, and nothing of
    /// the rest; import those with --project. When stderr is a terminal, one line there shows
    /// the progress (projects, events, commits, events/s); stdout and a piped stderr are as
    /// without it.
    Import(ImportArgs),
    /// Write a legacy layout's files, byte for byte, through the safe writer.
    Export(ExportArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout.
    Man,
    /// Print docs/cli.md, the CLI reference generated from these definitions.
    #[command(name = "__cli-reference", hide = true)]
    CliReference,
    /// Panics on purpose, to test that a panic becomes one line and exit 5.
    #[command(name = "__panic", hide = true)]
    Panic,
}

// `copy` arguments.
#[derive(Debug, Clone, Args)]
pub(crate) struct CopyArgs {
    /// The store to copy (a file or a postgres:// address); it is only read.
    #[arg(long, value_name = "STORE")]
    pub(crate) from: PathBuf,
    /// The new store: a file that does not exist, or a PostgreSQL database without events.
    #[arg(long, value_name = "STORE")]
    pub(crate) to: PathBuf,
}

// Where a JSON value comes from.
#[derive(Debug, Clone, Args)]
pub(crate) struct ValueSource {
    /// Read the JSON value from stdin instead of the argument.
    #[arg(long)]
    pub(crate) stdin: bool,
}

// `kv` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum KvVerb {
    /// Print a record's value and revision.
    Get {
        /// Record key.
        key: String,
    },
    /// Write a record; with --expect-rev or --create only if the revision matches.
    Put {
        /// Record key.
        key: String,
        /// The JSON value (or --stdin).
        value: Option<String>,
        /// Write only if the record is at this revision (0 = absent).
        #[arg(long, conflicts_with = "create")]
        expect_rev: Option<u64>,
        /// Write only if the record does not exist.
        #[arg(long)]
        create: bool,
        #[command(flatten)]
        source: ValueSource,
    },
}

// `queue` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum QueueVerb {
    /// Add an item.
    Push {
        /// Queue name.
        queue: String,
        /// Item id (unique among the queue's live items).
        item: String,
        /// JSON payload (or --stdin) [default: null].
        payload: Option<String>,
        /// Only a claimer with this --session may claim the item.
        #[arg(long)]
        for_session: Option<String>,
        /// Deliveries before the item is parked.
        #[arg(long, default_value_t = DELIVERIES_DEFAULT)]
        max_deliveries: u32,
        #[command(flatten)]
        source: ValueSource,
    },
    /// Claim the next eligible item (or --item); prints the item, its payload and a token.
    Claim {
        /// Queue name.
        queue: String,
        /// Claim this item rather than the next eligible one.
        #[arg(long)]
        item: Option<String>,
        /// Holder name [default: the --session, else pid-<pid>].
        #[arg(long)]
        holder: Option<String>,
        /// Lease length in ms.
        #[arg(long, default_value_t = LEASE_MS_DEFAULT)]
        lease_ms: u64,
    },
    /// Finish a claimed item (it leaves the queue).
    Ack(HolderArgs),
    /// Extend a lease.
    Extend {
        #[command(flatten)]
        holder: HolderArgs,
        /// New lease length from now, in ms.
        #[arg(long, default_value_t = LEASE_MS_DEFAULT)]
        lease_ms: u64,
    },
    /// Give a claimed item back to the queue.
    Release(HolderArgs),
    /// Print a queue's live items and counts.
    List {
        /// Queue name.
        queue: String,
    },
    /// Put parked items (or one --item) back in the queue.
    Redrive {
        /// Queue name.
        queue: String,
        /// Only this item.
        #[arg(long)]
        item: Option<String>,
    },
}

// An item and the token of its claim.
#[derive(Debug, Clone, Args)]
pub(crate) struct HolderArgs {
    /// Queue name.
    pub(crate) queue: String,
    /// Item id.
    pub(crate) item: String,
    /// The fencing token the claim returned.
    #[arg(long)]
    pub(crate) token: u64,
}

// `counter` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum CounterVerb {
    /// Add DELTA (default 1; may be negative) and print the new value.
    Add {
        /// Counter name.
        name: String,
        /// The change.
        #[arg(default_value_t = 1, allow_negative_numbers = true)]
        delta: i64,
    },
    /// Print a counter's value (0 when never added to).
    Get {
        /// Counter name.
        name: String,
    },
}

// `set` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum SetVerb {
    /// Add a member; prints "added": true only the first time.
    Add {
        /// Set name.
        set: String,
        /// Member.
        member: String,
    },
    /// Print whether a member is present.
    Has {
        /// Set name.
        set: String,
        /// Member.
        member: String,
    },
}

// `list` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum ListVerb {
    /// Append a JSON row, keeping the last --cap rows.
    Append {
        /// List name.
        list: String,
        /// The JSON row (or --stdin).
        row: Option<String>,
        /// Rows kept.
        #[arg(long)]
        cap: u32,
        #[command(flatten)]
        source: ValueSource,
    },
    /// Print a list's rows, oldest first.
    Get {
        /// List name.
        list: String,
    },
}

// `log` filters.
#[derive(Debug, Clone, Args)]
pub(crate) struct LogArgs {
    /// Only events of the --scope given (otherwise every scope).
    #[arg(long)]
    pub(crate) this_scope: bool,
    /// Only this domain (core, ...).
    #[arg(long)]
    pub(crate) domain: Option<String>,
    /// Only this event kind (item_claimed, record_put, ...).
    #[arg(long)]
    pub(crate) kind: Option<String>,
    /// Only events whose actor is this session.
    #[arg(long = "of-session")]
    pub(crate) of_session: Option<String>,
    /// First seq.
    #[arg(long)]
    pub(crate) from_seq: Option<u64>,
    /// Last seq.
    #[arg(long)]
    pub(crate) to_seq: Option<u64>,
    /// Earliest time (RFC 3339, e.g. 2026-11-29T10:00:00Z).
    #[arg(long)]
    pub(crate) since: Option<String>,
    /// Latest time (RFC 3339).
    #[arg(long)]
    pub(crate) until: Option<String>,
    /// At most this many events.
    #[arg(long)]
    pub(crate) limit: Option<usize>,
    /// The last N matching events.
    #[arg(long, value_name = "N", conflicts_with = "limit")]
    pub(crate) tail: Option<usize>,
    /// Cut every string of an event's `data` longer than N bytes, marked
    /// `{"$truncated":{"bytes":<length>,"kept":<first N bytes>}}` [default: 1 MiB, so nothing
    /// that came in is cut].
    #[arg(long, value_name = "N")]
    pub(crate) field_bytes_max: Option<usize>,
    /// After the matching events, keep printing new ones as they commit, until interrupted
    /// (SIGINT or SIGTERM) or the reader closes the pipe; exits 0 then.
    #[arg(long, conflicts_with_all = ["tail", "limit", "to_seq", "until"])]
    pub(crate) follow: bool,
}

// `dump` options.
#[derive(Debug, Clone, Args)]
pub(crate) struct DumpArgs {
    /// Write the dump to this new file (0600; refused if it exists) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub(crate) to: Option<PathBuf>,
}

// `restore` options.
#[derive(Debug, Clone, Args)]
pub(crate) struct RestoreArgs {
    /// The dump to read (`-` for stdin).
    #[arg(long, value_name = "FILE")]
    pub(crate) from: PathBuf,
}

// `backup` options.
#[derive(Debug, Clone, Args)]
pub(crate) struct BackupArgs {
    /// The new store file to write (refused if it exists); its anchor goes beside it.
    #[arg(long, value_name = "PATH")]
    pub(crate) to: PathBuf,
}

// `serve` options.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServeArgs {
    /// The socket [default: the store's path with `.sock` appended]; clients find it through
    /// HOOKSTATE_SOCKET.
    #[arg(long, value_name = "PATH")]
    pub(crate) socket: Option<PathBuf>,
    /// Stop after this many seconds without a request (a SessionStart hook can start the server
    /// and forget it). The server also stops, as on SIGTERM, when its executable is replaced (an
    /// upgrade), within a second.
    #[arg(long, value_name = "N")]
    pub(crate) idle_exit_s: Option<u64>,
}

// `demo` options.
#[derive(Debug, Clone, Args)]
pub(crate) struct DemoArgs {
    /// Directory for the demo store [default: a new temporary directory, removed afterwards].
    #[arg(long)]
    pub(crate) dir: Option<PathBuf>,
    /// Concurrent claimer processes.
    #[arg(long, default_value_t = 4)]
    pub(crate) workers: u32,
    /// Items pushed to the queue.
    #[arg(long, default_value_t = 40)]
    pub(crate) items: u32,
}

// `signals` verbs. The bundle names the scope `loopd:<bundle>`.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum SignalsVerb {
    /// The bundle's current PM and the registrations before it.
    Pm {
        /// Bundle root (absolute path).
        #[arg(long)]
        bundle: String,
    },
    /// The latest signal record of every role session of the bundle.
    List {
        /// Bundle root.
        #[arg(long)]
        bundle: String,
    },
    /// A session's latest record and its turn history from the log.
    Show {
        /// The role session.
        #[arg(id = "role_session", value_name = "SESSION")]
        session: String,
        /// Bundle root.
        #[arg(long)]
        bundle: String,
        /// Turns of history to show.
        #[arg(long, default_value_t = 20)]
        history: usize,
    },
    /// Record whether the line of a turn reached the PM.
    Delivered {
        /// The role session.
        #[arg(id = "role_session", value_name = "SESSION")]
        session: String,
        /// Bundle root.
        #[arg(long)]
        bundle: String,
        /// The seq `hook turn-complete` printed for the turn.
        #[arg(long)]
        turn_seq: u64,
        /// The send failed (default: it succeeded).
        #[arg(long)]
        failed: bool,
    },
}

// `observer` verbs (scope from --scope, e.g. observer:<session>).
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum ObserverVerb {
    /// Observe rows: a JSON object or array of {kind, text} / {kind: "tool_use", name, input}
    /// on stdin.
    Append,
    /// Count a completed main-loop turn (skipped for a subagent's turn).
    Turn {
        /// The subagent id, when the turn was a subagent's: nothing is counted.
        #[arg(long)]
        agent_id: Option<String>,
    },
    /// Start a sweep: prints what it reads and whether it is due.
    SweepBegin {
        /// The inbox file's current length (a shrink resets the offset).
        #[arg(long, default_value_t = 0)]
        inbox_len: u64,
    },
    /// Commit an answered sweep: findings (a JSON array) on stdin.
    SweepCommit {
        /// turnsSinceSweep that sweep-begin printed.
        #[arg(long)]
        read_turns: u64,
        /// userFollowUps that sweep-begin printed.
        #[arg(long)]
        read_follow_ups: u64,
        /// The inbox length consumed.
        #[arg(long)]
        inbox_offset: u64,
    },
    /// The pending findings text.
    #[command(subcommand)]
    Pending(PendingVerb),
    /// The observer state in its legacy shape.
    State,
}

// `observer pending` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum PendingVerb {
    /// Print the pending text and its version (inject it, then clear with that version).
    Take,
    /// Clear pending only if it is still at this version (exit 1 if a sweep changed it).
    Clear {
        /// The version `pending take` printed.
        #[arg(long)]
        version: u64,
    },
}

// `import` options.
#[derive(Debug, Clone, Args)]
pub(crate) struct ImportArgs {
    /// The layout of the files.
    #[arg(long, value_enum)]
    pub(crate) layout: Layout,
    /// The layout's root (moonshine: the home holding `<project>/.feedback/`).
    #[arg(long)]
    pub(crate) from: PathBuf,
    /// Only this project.
    #[arg(long)]
    pub(crate) project: Option<String>,
    /// The file name in that directory (loopd, observer) [default: loopd.json,
    /// claude-management.json].
    #[arg(long)]
    pub(crate) name: Option<String>,
}

// `export` options.
#[derive(Debug, Clone, Args)]
pub(crate) struct ExportArgs {
    /// The layout to write.
    #[arg(long, value_enum)]
    pub(crate) layout: Layout,
    /// The root to write under (created 0700 when absent).
    #[arg(long)]
    pub(crate) to: PathBuf,
    /// Only this project.
    #[arg(long)]
    pub(crate) project: Option<String>,
    /// The file name in that directory (loopd, observer) [default: loopd.json,
    /// claude-management.json].
    #[arg(long)]
    pub(crate) name: Option<String>,
}

// `feedback` options and verb.
#[derive(Debug, Clone, Args)]
pub(crate) struct FeedbackArgs {
    /// The moonshine project: sets the scope to moonshine:<project>.
    #[arg(long, global = true)]
    pub(crate) project: Option<String>,
    /// The verb.
    #[command(subcommand)]
    pub(crate) verb: FeedbackVerb,
}

// The re-delivery window and listener interval shared by claim, tick and the Stop hook.
#[derive(Debug, Clone, Args)]
pub(crate) struct DrainArgs {
    /// A delivered comment may be claimed again once its deliveredAt is this old.
    #[arg(long, default_value_t = STALE_DELIVERED_MS_DEFAULT / 1000)]
    pub(crate) stale_after_s: u64,
    /// Holder name [default: the session, else pid-<pid>].
    #[arg(long)]
    pub(crate) holder: Option<String>,
}

// `feedback` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum FeedbackVerb {
    /// Add a pending comment (the web's format); prints its id.
    Add {
        /// The target as JSON: {"kind":"block","path":"part-1/a.md","range":[0,10],...}.
        #[arg(long)]
        target: String,
        /// The comment text (or --stdin).
        comment: Option<String>,
        #[command(flatten)]
        source: ValueSource,
    },
    /// Claim the next eligible comment (pending, or delivered long enough ago) with a token.
    Claim {
        /// Claim this comment only.
        #[arg(long)]
        id: Option<String>,
        /// Claim every eligible comment.
        #[arg(long, conflicts_with = "id")]
        all: bool,
        #[command(flatten)]
        drain: DrainArgs,
    },
    /// Record the reply of the current claim: addressed. A stale token exits 1.
    Reply {
        /// Comment id.
        id: String,
        /// The token the claim returned.
        #[arg(long)]
        token: u64,
        /// One line saying what changed.
        reply: String,
    },
    /// Dismiss a pending or delivered comment (an addressed one keeps its reply: exit 1).
    Dismiss {
        /// Comment id.
        id: String,
    },
    /// Print the project's comments, control, address request, heartbeat and adapter.
    List,
    /// Print one comment with its lease.
    Show {
        /// Comment id.
        id: String,
    },
    /// Set the control mode: accumulate, listen, paused or stopped.
    Control {
        /// The mode.
        #[arg(value_parser = ["accumulate", "listen", "paused", "stopped"])]
        mode: String,
        /// Only this session drains in listen mode.
        #[arg(long)]
        for_session: Option<String>,
    },
    /// Ask for one drain now (overrides paused and stopped once).
    Address {
        /// Only this session may drain it.
        #[arg(long)]
        for_session: Option<String>,
    },
    /// Write the listener heartbeat.
    Heartbeat {
        /// The mode to report [default: the control mode].
        #[arg(long, value_parser = ["accumulate", "listen", "paused", "stopped"])]
        mode: Option<String>,
        /// The listener's interval.
        #[arg(long, default_value_t = HEARTBEAT_INTERVAL_S_DEFAULT)]
        interval_s: u64,
    },
    /// One listener tick (moonshine-listen) for --project, or every project: manifest, control,
    /// routing, heartbeat, drain when asked; prints the claimed comments and "continue".
    Tick {
        #[command(flatten)]
        drain: DrainArgs,
        /// The listener's interval, written into the heartbeat.
        #[arg(long, default_value_t = HEARTBEAT_INTERVAL_S_DEFAULT)]
        interval_s: u64,
        /// The moonshine home, to check each claimed comment's excerpt against its source file.
        #[arg(long, hide_env_values = true, env = "MOONSHINE_HOME")]
        moonshine_home: Option<PathBuf>,
    },
}

/// How the Stop hook tells the session to record a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ReplyVia {
    /// `hookstate feedback reply ID --token T`, refused when the claim went stale.
    Hookstate,
    /// Upstream's words: edit the comment file (with a --mirror that adopts the edit).
    Files,
}

// `hook` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum HookVerb {
    /// SessionStart: register the session as the bundle's PM when cwd is a bundle root.
    SessionStart,
    /// A finished main-loop turn: record the loopd signal and print the line for the PM.
    TurnComplete,
    /// The moonshine Stop hook: claim every deliverable comment of every project and print
    /// {"decision":"block","reason":...}, or nothing (also when the payload's stop_hook_active is
    /// set: any value but false, null, 0 or ""). Never exits 2 (which would block the stop).
    Stop {
        #[command(flatten)]
        drain: DrainArgs,
        /// The moonshine home named in the reason [default: $HOME/.agent/moonshine].
        #[arg(long, hide_env_values = true, env = "MOONSHINE_HOME")]
        moonshine_home: Option<PathBuf>,
        /// How the session records its reply.
        #[arg(long, value_enum, default_value_t = ReplyVia::Hookstate)]
        reply_via: ReplyVia,
    },
    /// A Stop hook for any plugin: claim the next item of QUEUE for the payload's session and
    /// block the stop with it ({"decision":"block","reason":...} naming the ack and release
    /// commands, with --db and --scope when they are not the defaults). Prints nothing when the
    /// queue has nothing eligible, the store does not exist, or stop_hook_active is set (any
    /// value but false, null, 0 or ""). Never exits 2.
    Claim {
        /// Queue name.
        queue: String,
        /// Lease length in ms: the session has this long before the item is handed out again.
        #[arg(long, default_value_t = LEASE_MS_DEFAULT)]
        lease_ms: u64,
    },
    /// A dedup for any hook (SessionStart fires again on resume, clear and compact): add the
    /// payload's session_id to SET and print --say's text only the first time (SessionStart's
    /// stdout becomes context for the session). Never exits 2.
    Once {
        /// Set name.
        set: String,
        /// What to print the first time.
        #[arg(long)]
        say: Option<String>,
    },
}

/// Legacy layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Layout {
    /// The loopd plugin-store file.
    Loopd,
    /// The claude-management observer state.
    Observer,
    /// moonshine `<home>/<project>/.feedback/` inboxes.
    Moonshine,
    /// claude-code-hermit's state/micro-proposals.json, state/proposal-metrics.jsonl,
    /// state/proposals-index.json and proposals/PROP-*.md under the state directory (--from /
    /// --to is the .claude-code-hermit directory).
    HermitProposals,
    /// claude-code-hermit's state/alert-state.json under the state directory (--from / --to is
    /// the .claude-code-hermit directory). A corrupt file is renamed to
    /// alert-state.json.corrupt-<ms> beside it and the import exits 3, the store unchanged.
    HermitAlerts,
    /// claude-code-hermit's heartbeat files: state/budget-alerts.json, telemetry-alert.json,
    /// doctor-alerts.json, heartbeat-monitor.runtime.json, heartbeat-liveness.json,
    /// injection-alert.json, runtime.json and sessions/NEXT-TASK.md (--from / --to is the
    /// .claude-code-hermit directory; a corrupt JSON file is quarantined as
    /// <file>.corrupt-<ms> and rebuilt from the log).
    HermitHeartbeat,
    /// claude-code-hermit's session state under the state directory: state/runtime.json,
    /// conversations.json, observations.jsonl, hypotheses.jsonl, the markers, tasks/**/T-*.md,
    /// sessions/SHELL.md, sessions/S-NNN-REPORT.md and templates/SHELL.md.template (--from /
    /// --to is the .claude-code-hermit directory; import refuses a bad file, store unchanged).
    HermitSession,
}

impl Layout {
    /// Whether it keeps (part of) a claude-code-hermit state directory, which its scope names.
    pub(crate) fn is_hermit(self) -> bool {
        !matches!(self, Layout::Loopd | Layout::Observer | Layout::Moonshine)
    }
}

// `alerts` options and verbs, drop-ins for `bun heartbeat.ts alert-state <state-file>` and
// precheck's tick count.
#[derive(Debug, Clone, Args)]
pub(crate) struct AlertsArgs {
    /// The hermit state directory (.claude-code-hermit): the scope becomes hermit:<abs dir> and
    /// its config.json's timezone dates first_seen, last_seen, the digest and monitoring lines
    /// (and budget period keys); always_on, escalation and heartbeat.every / .enabled drive the
    /// next-task and monitor verbs [default: the dir of --scope hermit:<dir>].
    #[arg(long, global = true)]
    pub(crate) dir: Option<PathBuf>,
    /// The verb.
    #[command(subcommand)]
    pub(crate) verb: AlertsVerb,
}

// `alerts` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum AlertsVerb {
    /// One heartbeat evaluation tick (heartbeat.ts alert-state): the eval JSON on stdin.
    ///
    /// The payload is {"firing":[{"key"?,"item"?,"text"}]} plus
    /// the optional "checklist" (HEARTBEAT.md items), "session_id", "stale_session" (its text
    /// when the session is stale), "micro"/"proposals" (structured items replacing the ones
    /// derived from this scope's proposals) and "unreadable" (sources to freeze:
    /// "micro-proposals.json", "proposals/", "sessions/SHELL.md"), and "self_eval_updates" (an
    /// object laid over self_eval). Prints {"ok","appended":0,"notifications",
    /// "self_eval_proposals","heartbeat_result","monitoring_lines",…}, with --format verdict
    /// upstream's {"monitoring_lines","notifications","heartbeat_result"}; the caller appends
    /// monitoring_lines to SHELL.md. A rejected payload exits 3 (json) or, with --format
    /// verdict, prints nothing and writes nothing (exit 1 only for unparseable JSON, as
    /// upstream).
    Tick,
    /// precheck's tick count: total_ticks plus one. Prints {"total_ticks": n}.
    CountTick,
    /// The alert state, as state/alert-state.json holds it (one JSON object).
    List,
    /// Budget alerts in state/budget-alerts.json (create-only per period key).
    #[command(subcommand)]
    Budget(BudgetVerb),
    /// The heartbeat monitor's registration, state/heartbeat-monitor.runtime.json.
    #[command(subcommand)]
    Monitor(MonitorVerb),
    /// The monitor's liveness record, state/heartbeat-liveness.json.
    #[command(subcommand)]
    Liveness(LivenessVerb),
    /// The announced injection hash, state/injection-alert.json.
    #[command(subcommand)]
    Injection(InjectionVerb),
    /// The queued next task (sessions/NEXT-TASK.md) and its conservative-pickup ack.
    #[command(subcommand)]
    NextTask(NextTaskVerb),
    /// state/runtime.json fields (per-field merge; updated_at re-stamped).
    #[command(subcommand)]
    Runtime(RuntimeVerb),
}

// `proposals` options and verbs, drop-ins for `bun proposal.ts <verb> <dir>`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ProposalsArgs {
    /// The hermit state directory (.claude-code-hermit): the scope becomes hermit:<abs dir> and
    /// its config.json's timezone dates MP ids [default: the dir of --scope hermit:<dir>].
    #[arg(long, global = true)]
    pub(crate) dir: Option<PathBuf>,
    /// The verb.
    #[command(subcommand)]
    pub(crate) verb: ProposalsVerb,
}

// `proposals` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum ProposalsVerb {
    /// Queue a micro-proposal: JSON {"tier", "question", "options"?, "on_resolve"?} on stdin.
    /// Verdict: QUEUED|<MP-id> or DUPLICATE|<id> (a pending entry asks the same question).
    QueueMicro,
    /// Resolve, nudge or age queued micro-proposals.
    #[command(subcommand)]
    Micro(MicroVerb),
    /// Everything at once: the pending micro-proposals and every PROP with its status (the
    /// index), as one JSON object.
    List,
    /// The queue as state/micro-proposals.json holds it.
    Queue,
    /// The ledger (state/proposal-metrics.jsonl lines), rendered from the log.
    Ledger,
    /// Create a PROP: stdin holds `Title:` (required), `Source:`, `Session:` (default:
    /// state/runtime.json's session_id), `Category:`,
    /// `Tags:` (JSON), `Related-Sessions:` (JSON), `Self-Eval-Key:`, `Findings:` lines, a `---`
    /// line, the body. With --mirror, the `- <id>: <Findings: or title>` line is appended under
    /// SHELL.md's `## Findings` too (a warning on stderr when it cannot be), then
    /// state/state-summary.md is regenerated as upstream's generate-summary.ts writes it.
    /// Verdict: the PROP-NNN-<slug>-<HHMMSS> id, or ERROR|<token>.
    Create {
        /// Refuse as upstream does when the state directory or its
        /// templates/PROPOSAL.md.template is missing or malformed (ERROR|state-dir-not-found,
        /// ERROR|template-missing, ERROR|template-malformed), nothing written.
        #[arg(long)]
        require_template: bool,
    },
    /// Accept a PROP (proposed or deferred -> accepted). Verdict: OK|<id> or ERROR|<reason>.
    Accept(MoveArgs),
    /// Defer a PROP (proposed -> deferred).
    Defer(MoveArgs),
    /// Dismiss a PROP (proposed or deferred -> dismissed).
    Dismiss(MoveArgs),
    /// Resolve a PROP (accepted -> resolved).
    Resolve(MoveArgs),
    /// The index, as state/proposals-index.json holds it. Verdict: OK|<n> proposals.
    Index,
    /// Triage survival and acceptance per autonomous proposal source, from the ledger
    /// (`proposal.ts metrics`). Verdict: upstream's markdown table, or with --source one line
    /// (`<key>: triage-survival …, acceptance …, sample N — OK|KILL (…)|INSUFFICIENT (…)`).
    Metrics {
        /// One source: reflect, capability-brainstorm, procedure-capture or scheduled-check.
        #[arg(long)]
        source: Option<String>,
    },
    /// `proposal.ts success-signal` with upstream's arguments: `--validate "<predicate>"`
    /// (prints OK, exit 0, or the reason, exit 1), or `<state dir> <accepted_date>
    /// <accepted_in_session|null> <predicate>`: one JSON line
    /// {"verdict":"MET|UNMET|INSUFFICIENT_DATA",…} over the session reports since acceptance.
    /// Grammar: avg_session_cost_usd <OP> <NUMBER> over <N> sessions.
    SuccessSignal {
        /// Upstream's words.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Patch a PROP's frontmatter line by line (`--set key=value`, `@now` expands) and append
    /// an Operator Decision line once; a status change must be a legal move. With --stdin,
    /// `Decision: <line>` and `Set: key=value` lines are read from stdin too.
    /// Verdict: OK|<id> or ERROR|no-such-proposal|invalid-set|invalid-key:<k>|illegal-move:…
    Patch {
        /// The PROP file name (with or without .md).
        file: String,
        /// key=value (repeatable).
        #[arg(long = "set")]
        sets: Vec<String>,
        /// Compare-and-swap: patch only if the status is still this one.
        #[arg(long)]
        expect: Option<String>,
        /// Read `Decision:` and `Set:` lines from stdin.
        #[arg(long)]
        stdin: bool,
        /// After the patch lands, write state/compact-requested.json
        /// (`{"requested_at":<now>,"reason":"proposal-resolve"}`), as upstream's flag does.
        #[arg(long)]
        request_compact: bool,
    },
    /// Record a ledger event: `responded --id PROP-… --action accept|defer|dismiss` (once per
    /// proposal; a repeat records nothing) or `resolved --id PROP-…`.
    /// Verdict: OK or ERROR|<token>.
    Event {
        /// responded or resolved.
        kind: String,
        /// The full PROP id.
        #[arg(long)]
        id: Option<String>,
        /// accept, defer or dismiss (responded only).
        #[arg(long)]
        action: Option<String>,
    },
    /// Find a PROP from operator text: MATCH|<file>, AMBIGUOUS|[{"file","title"}],
    /// NONE|not-a-prop-id or NONE|no-match.
    ResolveId {
        /// The operator's text (a full id, a file name, or PROP-<n>).
        input: String,
    },
}

// A PROP status move.
#[derive(Debug, Clone, Args)]
pub(crate) struct MoveArgs {
    /// The full PROP id (or its file name).
    pub(crate) id: String,
    /// Compare-and-swap: move only if the status is still this one.
    #[arg(long)]
    pub(crate) expect: Option<String>,
    /// A line to append to the Operator Decision section (`@now` expands), once.
    #[arg(long)]
    pub(crate) decision: Option<String>,
    /// accepted_in_session for an accept.
    #[arg(long)]
    pub(crate) in_session: Option<String>,
}

// `proposals micro` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum MicroVerb {
    /// Remove an entry and record its micro-resolved line; with --answer, resolve the answer
    /// against the entry's options and render its on_resolve.
    /// Verdict: RESOLVED|<id>|<action> or NONE|no-match.
    Resolve {
        /// The MP id.
        #[arg(allow_hyphen_values = true)]
        id: Option<String>,
        /// approved, rejected, answered or expired.
        #[arg(long)]
        action: Option<String>,
        /// The operator's answer: a label, a unique prefix of one, or its number; without
        /// options, the operator's text as given (a leading `-` included: `--answer "-1"`).
        #[arg(long, allow_hyphen_values = true)]
        answer: Option<String>,
        /// The channel the answer came from (recorded in the event).
        #[arg(long)]
        channel: Option<String>,
    },
    /// Add one to an entry's follow_up_count. Verdict: NUDGED|<id>|<n> or NONE|no-match.
    Nudge {
        /// The MP id.
        #[arg(allow_hyphen_values = true)]
        id: Option<String>,
    },
    /// One pass: drop non-pending entries, expire at count >= 2, bump 1 -> 2 and 0 -> 1.
    /// Verdict: the JSON line {"new","renudged","expired","dropped"}.
    BriefCycle,
}

// `alerts budget` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum BudgetVerb {
    /// Create the alert of the current period (config timezone) unless its key exists (never
    /// reset), and reap past periods. Verdict: OK|created|<key> or OK|exists|<key>.
    Record {
        /// warn (>= 80 % of the cap) or breach (>= 100 %).
        #[arg(long)]
        level: String,
        /// daily, weekly or monthly.
        #[arg(long)]
        period: String,
        /// alert or pause.
        #[arg(long, default_value = "alert")]
        action: String,
        /// Spend in the period, USD (stored to 4 places).
        #[arg(long)]
        spend: f64,
        /// The period's cap, USD.
        #[arg(long)]
        cap: f64,
    },
    /// Set notified:true after a confirmed send; the first mark wins. Verdict: OK|notified|<key>,
    /// NOOP|already-notified|<key> or NONE|no-match (json mode: exit 1 for the last two).
    MarkNotified {
        /// The alert key (`budget-<level>:<period>:<period key>`).
        key: String,
    },
    /// Remove the alerts of past periods. Verdict: OK|reaped=<n>.
    Reap,
    /// The merged alerts of budget-alerts.json, telemetry-alert.json and doctor-alerts.json.
    List,
}

// What the monitor verbs compare the registration with.
#[derive(Debug, Clone, Args)]
pub(crate) struct MonitorSetupArgs {
    /// Poll interval in seconds [default: config heartbeat.every, else 1800].
    #[arg(long)]
    pub(crate) interval: Option<u64>,
    /// The plugin root whose scripts/heartbeat-monitor.sh the command runs.
    #[arg(long, hide_env_values = true, env = "CLAUDE_PLUGIN_ROOT")]
    pub(crate) plugin_root: Option<String>,
    /// The current boot id [default: state/.boot-id, as upstream reads it]; when neither is
    /// given it is not compared and stored as null.
    #[arg(long, hide_env_values = true, env = "HOOKSTATE_BOOT_ID")]
    pub(crate) boot_id: Option<String>,
}

// `alerts monitor` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum MonitorVerb {
    /// FRESH|interval=<s>, or REARM|<reason> with OLD_TASK:, FIRST_START:1, INTERVAL:, CMD:
    /// lines (deletes the liveness record and stamps armed_at).
    StartCheck(MonitorSetupArgs),
    /// Wait (bounded) for a liveness record, then write the registration.
    /// Verdict: OK|registered|interval=<s> or DEAD|liveness-absent.
    StartCommit {
        /// The Monitor task id.
        task_id: String,
        /// Longest wait for the first liveness peek, in ms (at most 10000).
        #[arg(long, default_value_t = hookstate_engine::LIVENESS_WAIT_MS_MAX)]
        liveness_wait_ms: u64,
        /// What the registration is made of.
        #[command(flatten)]
        setup: MonitorSetupArgs,
    },
    /// The skill's stop: the registration becomes {} and the liveness record is deleted.
    Stop,
    /// heartbeatHealth: HEALTHY|<reason> or UNHEALTHY|<reason> (runtime-missing, boot-mismatch,
    /// interval-drift, command-drift, liveness-*).
    Status(MonitorSetupArgs),
}

// `alerts liveness` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum LivenessVerb {
    /// Record one monitor poll: {"last_peek_at":"<UTC now, whole seconds>"}.
    Peek,
    /// ALIVE|age=<s> (last peek at most 600 s old) or UNKNOWN|stale / UNKNOWN|absent.
    Read,
}

// `alerts injection` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum InjectionVerb {
    /// Record the announced hash (overwrites). Verdict: OK|recorded|<hash>.
    Record {
        /// First 8 hex digits of sha256(HEARTBEAT.md).
        hash: String,
        /// When it was announced [default: now, toISOString].
        #[arg(long)]
        announced_at: Option<String>,
    },
    /// SKIP|injection-suspect (announced) when HASH is the announced one, else NEW|<hash>.
    Check {
        /// The current hash.
        hash: String,
    },
}

// `alerts next-task` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum NextTaskVerb {
    /// Queue sessions/NEXT-TASK.md from stdin, exclusively unless --replace.
    /// Verdict: OK, ERROR|empty-content (empty or blank content, exit 0) or
    /// ERROR|next-task-exists.
    Queue {
        /// Replace a queued task.
        #[arg(long)]
        replace: bool,
    },
    /// Consume (delete) the queued task, as session-start does. Verdict: OK|consumed or
    /// NONE|no-queue.
    Consume,
    /// The ack token for the current queue and idle runtime, or why none is issued
    /// (disabled, not-idle, queue-missing).
    Token,
    /// Park the idle session only if queue and runtime are unchanged since TOKEN was issued:
    /// {"parked":true} or {"parked":false,"reason":"disabled|not-idle|queue-missing|changed"}.
    Ack {
        /// The token `next-task token` issued.
        token: String,
    },
}

// `alerts runtime` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum RuntimeVerb {
    /// Merge FIELD=JSON pairs (a value that is not JSON is a string) into runtime.json.
    Set {
        /// FIELD=VALUE pairs.
        fields: Vec<String>,
        /// Fields to delete.
        #[arg(long)]
        unset: Vec<String>,
    },
    /// Print runtime.json.
    Get,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own checks of every verb (unique ids, valid defaults and conflicts), which a
    /// deferred verb only meets when it is built: a verb argument named like a global option
    /// fails here.
    #[test]
    fn every_verb_passes_claps_checks() {
        full_command().debug_assert();
    }

    /// The `help` verb's tree reaches every verb's verbs (completions of `hookstate help queue
    /// claim`), as it did before the verbs were deferred, and lists each once.
    #[test]
    fn the_help_tree_reaches_nested_verbs() {
        let command = full_command();
        let help = command.find_subcommand("help").expect("a help verb");
        let queue = help.find_subcommand("queue").expect("help queue");
        assert!(queue.find_subcommand("claim").is_some());
        assert!(queue.find_subcommand("help").is_none());
        let mut names: Vec<&str> = help.get_subcommands().map(clap::Command::get_name).collect();
        let all = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all);
        assert_eq!(queue.get_bin_name(), Some("hookstate help queue"));
    }

    /// Calls a process parses with [`command_for`]: global options before the verb, after it,
    /// after its own verbs, with `=`, twice, and a verb's own global (`--project`).
    const NAMED_VERBS: [&[&str]; 10] = [
        &["hookstate", "kv", "get", "k"],
        &["hookstate", "--scope", "s", "--db=/d", "queue", "claim", "q", "--lease-ms", "5"],
        &["hookstate", "queue", "--session", "x", "claim", "q", "--idem-key", "i"],
        &["hookstate", "kv", "put", "k", "1", "--scope=t", "--expect-rev", "0", "--format", "text"],
        &["hookstate", "--scope", "a", "kv", "get", "k", "--scope", "b"],
        &["hookstate", "feedback", "--project", "p", "claim", "--all", "--agent", "h"],
        &["hookstate", "proposals", "--dir", "/d", "micro", "nudge", "MP-1", "--at-seq", "3"],
        &["hookstate", "hermit", "task", "open", "/d", "--db", "x"],
        &["hookstate", "verify", "--accept-missing-anchor", "--wait-ms", "7"],
        &["hookstate", "counter", "add", "c", "-5", "--now-ms", "9"],
    ];

    fn parsed(command: &mut clap::Command, argv: &[&str]) -> Result<String, clap::Error> {
        let matches = command.try_get_matches_from_mut(argv)?;
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).map(|cli| format!("{cli:?}"))
    }

    /// An operator's free-text answer may start with `-` (`-1`, `- yes`): it was a usage error.
    #[test]
    fn a_micro_answer_may_start_with_a_hyphen() {
        for answer in ["-1", "- yes", "-5 days"] {
            let argv = ["hookstate", "proposals", "--dir", "/d", "micro", "resolve", "MP-1"];
            let argv = [&argv[..], &["--action", "answered", "--answer", answer]].concat();
            let got = parsed(&mut <Cli as clap::CommandFactory>::command(), &argv)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(got.contains(&format!("answer: Some({answer:?})")), "{got}");
        }
    }

    /// A call parsed with only its verb given the global options is the call the whole tree
    /// parses, every value where it was given (a global after the verb reaches the top level).
    #[test]
    fn a_named_verb_parses_as_the_whole_tree_does() {
        for argv in NAMED_VERBS {
            let argv_os: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            let mut fast = command_for(&argv_os).unwrap_or_else(|| panic!("{argv:?} names a verb"));
            // The point of it: no global option at the top level, none copied into other verbs.
            assert!(fast.get_arguments().all(|arg| !arg.is_global_set()), "{argv:?}");
            let with_db: Vec<&str> = fast
                .get_subcommands()
                .filter(|verb| verb.get_arguments().any(|arg| arg.get_id() == "db"))
                .map(clap::Command::get_name)
                .collect();
            assert_eq!(
                with_db,
                [argv
                    .iter()
                    .find(|w| [
                        "kv",
                        "queue",
                        "feedback",
                        "proposals",
                        "hermit",
                        "verify",
                        "counter"
                    ]
                    .contains(w))
                    .copied()
                    .unwrap_or_default()]
            );
            let whole = parsed(&mut <Cli as clap::CommandFactory>::command(), argv).unwrap();
            assert_eq!(parsed(&mut fast, argv).unwrap(), whole, "{argv:?}");
            let global_after_verb = argv.iter().skip(2).any(|w| w.starts_with("--scope"));
            assert_eq!(
                whole.contains("scope: \"default\""),
                !global_after_verb && !argv.contains(&"--scope")
            );
        }
    }

    /// Help, version, a misspelt verb or option and `help` are left to the whole tree, and a call
    /// the whole tree refuses is refused here too (the caller then parses again for clap's
    /// message).
    #[test]
    fn only_a_plainly_named_verb_gets_the_short_tree() {
        let unnamed: [&[&str]; 7] = [
            &["hookstate"],
            &["hookstate", "--help"],
            &["hookstate", "-V"],
            &["hookstate", "kvv", "get", "k"],
            &["hookstate", "--dbb", "x", "kv", "get", "k"],
            &["hookstate", "help", "kv"],
            &["hookstate", "--db"],
        ];
        for argv in unnamed {
            let argv: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            assert!(command_for(&argv).is_none(), "{argv:?}");
        }
        let refused: [&[&str]; 4] = [
            &["hookstate", "kv", "get"],
            &["hookstate", "kv", "get", "k", "--help"],
            &["hookstate", "kv", "get", "k", "--scope"],
            &["hookstate", "queue", "claim", "q", "--format", "yaml"],
        ];
        for argv in refused {
            let argv_os: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            let mut fast = command_for(&argv_os).expect("names a verb");
            assert!(parsed(&mut fast, argv).is_err(), "{argv:?}");
            assert!(parsed(&mut <Cli as clap::CommandFactory>::command(), argv).is_err());
        }
    }

    /// A deferred verb keeps the about of its variant, not its `Args` struct's doc comment.
    #[test]
    fn a_built_verb_keeps_its_about() {
        let command = full_command();
        let about = |name: &str| {
            let sub = command.find_subcommand(name).and_then(|s| s.get_about());
            sub.map(|a| a.to_string()).unwrap_or_default()
        };
        assert!(
            about("hermit").starts_with("claude-code-hermit session state"),
            "{}",
            about("hermit")
        );
        assert!(about("proposals").starts_with("claude-code-hermit micro-proposals"));
        let kv = command.find_subcommand("kv").and_then(|kv| kv.find_subcommand("put"));
        let put = kv.and_then(|put| put.get_about()).map(|a| a.to_string()).unwrap_or_default();
        assert!(put.starts_with("Write a record"), "{put}");
    }
}
