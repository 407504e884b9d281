//! The `hermit` verbs' arguments: drop-ins for claude-code-hermit's session scripts, each taking
//! the words the script takes, in its order, after the verb (`hookstate hermit task open <dir>
//! --title …` for `bun task.ts open <dir> --title …`).
//!
//! Does not validate; the engine's session rules parse the words as upstream does. hookstate's
//! own options (`--db`, `--format`, `--mirror`, …) go before `hermit`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

// `hermit` options and verbs.
#[derive(Debug, Clone, Args)]
pub(crate) struct HermitArgs {
    /// The hermit state directory (.claude-code-hermit) of the verbs that take none in their
    /// words: the scope becomes hermit:<abs dir> and its config.json's timezone stamps local
    /// times [default: the dir of --scope hermit:<dir>, else ./.claude-code-hermit].
    #[arg(long, global = true)]
    pub(crate) dir: Option<PathBuf>,
    /// The verb.
    #[command(subcommand)]
    pub(crate) verb: HermitVerb,
}

// `hermit` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum HermitVerb {
    /// task.ts: `<open|note|block|close|cancel|list> <dir> [id] [--flags]`. Verdict: the JSON
    /// line, or the error token on stderr (exit 1; 64 for a bad verb or flag).
    Task {
        /// The script's words.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        words: Vec<String>,
    },
    /// conversation.ts: `<dir> <lookup|bind|update|unbind|list|prune> [key] [--options]`
    /// (prune: `claude agents --json` on stdin). Verdict: OK|<key>, the record, or ERROR|<token>
    /// (exit 1).
    Conversation {
        /// The script's words.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        words: Vec<String>,
    },
    /// observations.ts: `observe <dir> <source> [--origin=own-work|external-content]`, the label
    /// on stdin. Verdict: OK or ERROR|<token> (exit 0).
    Observations {
        /// The script's words.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        words: Vec<String>,
    },
    /// prune-observations: `<dir>`. Verdict: pruned N, kept M.
    PruneObservations {
        /// The state directory.
        #[arg(id = "state_dir", value_name = "DIR")]
        dir: PathBuf,
    },
    /// later.ts: `<add|list|due|cancel|check|verdict> <dir> …`. hookstate does not run a
    /// check's command: `check <id>` takes its result (--exit N, --timed-out, or --injection
    /// CLASS, the output on stdin); `add --next-fire ISO` and `check|verdict --second-fire ISO`
    /// give the later-check schedule's fires.
    Later {
        /// The script's words.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        words: Vec<String>,
    },
    /// session-archive.ts: `<archive|open|recover|auto-close-decision> [--state-dir=DIR]
    /// [--mode=idle|close|auto]` (archive: the payload on stdin; open: `Task: …`). Verdict: one
    /// JSON line, exit 0.
    SessionArchive {
        /// The script's words.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        words: Vec<String>,
    },
    /// record-operator-action.ts: the UserPromptSubmit or SessionStart payload on stdin, or
    /// --force. Prints nothing under --format verdict.
    RecordOperatorAction {
        /// Record unconditionally.
        #[arg(long)]
        force: bool,
    },
    /// proposal.ts shell-append: `<dir> --section findings|progress|monitoring|blockers`, the
    /// line on stdin. Verdict: OK or ERROR|<token> (exit 0).
    ShellAppend {
        /// The script's words.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        words: Vec<String>,
    },
    /// The Monitoring lines an alerts tick printed: its JSON ({"monitoring_lines":[…]}) on
    /// stdin, appended to SHELL.md in order. Prints {"appended":N,"append_error":…}.
    ShellMonitoring,
    /// The Findings line proposal.ts create appends for a new PROP: `- <id>: <findings or
    /// title>`.
    ShellFindings {
        /// The PROP id.
        #[arg(long)]
        id: String,
        /// The PROP's title.
        #[arg(long)]
        title: String,
        /// The PROP's findings summary (preferred over the title).
        #[arg(long, default_value = "")]
        findings: String,
    },
    /// state/runtime.json: field merges and the lifecycle moves of its transition table.
    #[command(subcommand)]
    Runtime(RuntimeVerb),
    /// The small markers: the Stop's turn close, their readers, the pauses, the close drain.
    #[command(subcommand)]
    Marker(MarkerVerb),
}

// `hermit runtime` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum RuntimeVerb {
    /// Merge fields (FIELD=JSON, a bare word is a string) and delete --unset ones, keeping every
    /// other writer's field; the lifecycle fields are refused. Verdict: OK|runtime.
    Set {
        /// FIELD=VALUE pairs.
        fields: Vec<String>,
        /// A field to delete (repeatable).
        #[arg(long)]
        unset: Vec<String>,
        /// Write only if updated_at is still this (a compare-and-swap).
        #[arg(long)]
        expect_updated_at: Option<String>,
    },
    /// The stored runtime.json as one JSON object.
    Get,
    /// A lifecycle move: seed, wait, wait-timeout, resume, halt, shutdown-requested,
    /// shutdown-completed. Verdict: OK|<move>, or {"ok":false,"reason":…} (exit 0, as
    /// session-archive prints its refusals; exit 1 in the JSON format).
    Move {
        /// The move.
        name: String,
        /// seed: tmux, docker or interactive.
        #[arg(long, default_value = "interactive")]
        runtime_mode: String,
        /// seed: the tmux session.
        #[arg(long)]
        tmux_session: Option<String>,
        /// wait-timeout: heartbeat.waiting_timeout (<n> s|m|h).
        #[arg(long)]
        timeout: Option<String>,
    },
}

// `hermit marker` verbs.
#[derive(Debug, Clone, Subcommand)]
#[command(defer = true)]
pub(crate) enum MarkerVerb {
    /// The Stop pipeline: the operator turn ends (operator-turn-open.json removed).
    TurnClose,
    /// The readers: the open turn (60-minute TTL), the pause in force, whether the queued close
    /// should be drained, and whether the drain cooldown expired (the routine poll's 30 minutes,
    /// and the heartbeat precheck's by heartbeat.every).
    Status,
    /// setPause: operator writes operator-pause.json; watchdog and budget auto-pause.json (a
    /// budget pause never replaces an active watchdog pause).
    Pause {
        /// operator, watchdog or budget.
        #[arg(long)]
        reason: String,
        /// Who pauses.
        #[arg(long)]
        by: String,
        /// Until an ISO time, or for a snooze (<n>[.<d>] s|m|h|d).
        #[arg(long)]
        until: Option<String>,
    },
    /// clearPause: operator or auto.
    Unpause {
        /// operator or auto.
        which: String,
    },
    /// stampDrainCooldown: a pending-close drain nudge was emitted.
    DrainStamp,
    /// proposal.ts patch --request-compact: compact-requested.json (proposal-resolve).
    CompactRequest,
}
