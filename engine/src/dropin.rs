//! The drop-in's calls that span domains. Upstream's `proposal.ts create` appends the new PROP's
//! Findings line to `sessions/SHELL.md` (a session row), `patch --request-compact` writes
//! `state/compact-requested.json` (a session marker), and `heartbeat.ts alert-state` reads the
//! proposal files as its sources. Each is composed here, above the domains, from the domains'
//! own verbs, run one after the other inside the caller's call (one mirrored call, so the
//! directory's files change together), so no domain imports another.
//!
//! Decides nothing itself: every rule stays with the verb it calls; this file only orders the
//! calls and turns a tail step's refusal into upstream's stderr warning. It also holds the newer
//! `proposal.ts`'s state-directory pin, which the drop-in checks before any verb runs.

use std::path::{Path, PathBuf};

use crate::alerts::TickInput;
use crate::engine::{Engine, Layout};
use crate::kernel::call::{Call, Outcome};
use crate::kernel::error::Result;
use crate::proposals::{decision_sources_unreadable, CreateInput, PatchInput};
use crate::session::Answer;
use crate::signals::lexical_join;

/// A composed call's outcome (the first step's, with every step's appends counted) and the
/// warnings upstream prints on stderr for a best-effort tail step (`WARN: <warning>`), which
/// never change the verdict.
#[derive(Debug)]
pub struct Composed {
    /// The outcome of the verb the caller asked for.
    pub outcome: Outcome,
    /// Upstream's warnings, without the `WARN: ` prefix.
    pub warnings: Vec<String>,
}

/// A tail step's call: the caller's, under an idempotency key of its own, so that a step is
/// never taken for a replay of the first one and a retried request replays every step.
fn step(call: &Call, name: &str) -> Call {
    let mut next = call.clone();
    next.idem_key = call.idem_key.as_ref().map(|key| format!("{key}#{name}"));
    next
}

/// The id a step's outcome created or patched, when it was not refused.
fn acted_on(outcome: &Outcome) -> Option<String> {
    if outcome.refusal.is_some() {
        return None;
    }
    outcome.result.get("id").and_then(serde_json::Value::as_str).map(str::to_owned)
}

fn absorb(outcome: &mut Outcome, tail: &Outcome) {
    outcome.appended += tail.appended;
    outcome.head = tail.head;
}

/// `proposal.ts create`: the PROP (`engine.proposals().create`), then its Findings line
/// `- <id>: <Findings: or title>` under SHELL.md's `## Findings`
/// (`engine.session().shell_findings`). A Findings line that cannot land is upstream's warning
/// (`findings append: SHELL.md unreadable` when there is no SHELL.md); the PROP stays.
///
/// # Errors
/// As the two verbs.
pub fn hermit_create(engine: &Engine, call: &Call, input: &CreateInput) -> Result<Composed> {
    let mut outcome = engine.proposals().create(call, input)?;
    let mut warnings = Vec::new();
    if let Some(id) = acted_on(&outcome) {
        let findings = input.findings.as_deref().unwrap_or_default();
        let answer = engine.session().shell_findings(
            &step(call, "findings"),
            &id,
            findings,
            &input.title,
        )?;
        absorb(&mut outcome, &answer.outcome);
        if let Some(why) = shell_failure(&answer, "Findings") {
            warnings.push(format!("findings append: {why}"));
        }
    }
    Ok(Composed { outcome, warnings })
}

/// `proposal.ts create`'s last tail step, after the mirrored create landed: upstream's
/// `generate-summary.ts` `run(<dir>/state)`, which regenerates `state/state-summary.md` from the
/// directory's alert files, ledger, queue and `state/reflection-state.json` (`updated:` is
/// `now_ms`). Returns the stderr lines upstream prints; never fails the create. Not called for
/// a refused create.
#[must_use]
pub fn hermit_summary(dir: &Path, now_ms: u64) -> Vec<String> {
    crate::proposals::regenerate_summary(dir, now_ms)
}

/// appendShellLine's error for a refused shell append, as upstream words it.
fn shell_failure(answer: &Answer, heading: &str) -> Option<String> {
    match answer.verdict.lines.first().map(String::as_str) {
        Some("ERROR|shell-unreadable") => Some("SHELL.md unreadable".into()),
        Some(line) if line.starts_with("ERROR|") => {
            Some(format!("SHELL.md has no ## {heading} section: no ## {heading} section"))
        }
        _ => None,
    }
}

/// `proposal.ts patch … [--request-compact]`: the patch (`engine.proposals().patch`), then, when
/// asked and the patch landed, `state/compact-requested.json` (`engine.session()
/// .compact_request`: `{"requested_at":<zoned now>,"reason":"proposal-resolve"}`).
///
/// # Errors
/// As the two verbs.
pub fn hermit_patch(
    engine: &Engine,
    call: &Call,
    input: &PatchInput,
    request_compact: bool,
) -> Result<Composed> {
    let mut outcome = engine.proposals().patch(call, input)?;
    if request_compact && acted_on(&outcome).is_some() {
        let answer = engine.session().compact_request(&step(call, "compact"))?;
        absorb(&mut outcome, &answer.outcome);
    }
    Ok(Composed { outcome, warnings: Vec::new() })
}

/// `heartbeat.ts alert-state` over the state directory `dir`, mirrored: when
/// `state/micro-proposals.json` or a PROP file cannot be read, that source is unreadable for the
/// tick (its pending-decision alerts frozen, the once-a-day notice sent, the queue file's parse
/// detail in the monitoring line) and the call mirrors the directory without the proposal
/// files, which stay as they are; otherwise the whole directory, as every hermit verb does.
///
/// # Errors
/// As [`Engine::mirrored`] and the tick.
pub fn hermit_alert_state(
    engine: &Engine,
    call: &Call,
    dir: &Path,
    input: &TickInput,
) -> Result<Outcome> {
    let unreadable = decision_sources_unreadable(dir)?;
    let mut input = input.clone();
    let layout = if unreadable.any() {
        input.micro_unreadable |= unreadable.micro.is_some();
        input.proposals_unreadable |= unreadable.proposals;
        input.micro_error = unreadable.micro;
        Layout::HermitBesideProposals
    } else {
        Layout::Hermit
    };
    engine.mirrored(call, &layout, dir, |e| e.alerts().tick(call, &input))
}

/// What upstream's `hermitDir()` resolves the project's state directory from: the caller's
/// `AGENT_DIR` and `CLAUDE_PROJECT_DIR` and working directory.
#[derive(Debug, Clone, Default)]
pub struct PinEnv {
    /// `AGENT_DIR` (honoured only when absolute).
    pub agent_dir: Option<PathBuf>,
    /// `CLAUDE_PROJECT_DIR`.
    pub project_dir: Option<PathBuf>,
    /// The working directory.
    pub cwd: PathBuf,
}

/// The state directory's name under a project root.
const STATE_DIR_NAME: &str = ".claude-code-hermit";
/// `findHermitDir`'s walk: the working directory and at most this many levels in all.
const WALK_LEVELS_MAX: usize = 8;

fn exists(p: &Path) -> bool {
    std::fs::metadata(p).is_ok()
}

/// A worktree's projected state directory: a `config.json` and no `state/`.
fn is_projection(dir: &Path) -> bool {
    exists(&dir.join("config.json")) && !exists(&dir.join("state"))
}

/// Upstream's `hermitDir()`: an absolute `AGENT_DIR`; else `CLAUDE_PROJECT_DIR`'s state
/// directory when it exists and is no projection; else the nearest ancestor's (8 levels) that
/// holds a `config.json` and is no projection; else `./.claude-code-hermit`.
#[must_use]
pub fn hermit_state_dir(env: &PinEnv) -> PathBuf {
    if let Some(agent) = env.agent_dir.as_deref().filter(|a| a.is_absolute()) {
        return lexical_join(&env.cwd, agent);
    }
    if let Some(project) = env.project_dir.as_deref().filter(|p| !p.as_os_str().is_empty()) {
        let dir = lexical_join(&env.cwd, project.join(STATE_DIR_NAME));
        if exists(&dir) && !is_projection(&dir) {
            return dir;
        }
    }
    let mut at = lexical_join(&env.cwd, Path::new("."));
    for _ in 0..WALK_LEVELS_MAX {
        let dir = at.join(STATE_DIR_NAME);
        if exists(&dir.join("config.json")) && !is_projection(&dir) {
            return dir;
        }
        if !at.pop() {
            break;
        }
    }
    lexical_join(&env.cwd, Path::new(STATE_DIR_NAME))
}

/// The newer `proposal.ts`'s state-directory pin (`pinStateDirOrExit`): the directory a call
/// names must be this project's, resolved as [`hermit_state_dir`] does, so a pre-approved call
/// cannot act on another project's state. `None` when it is; else upstream's stderr line (the
/// call exits 1 and does nothing). The linked-worktree fallback (the main checkout's state
/// directory, asked of git) is not consulted.
#[must_use]
pub fn pin_refusal(script: &str, named: &Path, env: &PinEnv) -> Option<String> {
    let pinned = hermit_state_dir(env);
    (lexical_join(&env.cwd, named) != pinned).then(|| {
        format!(
            "{script}: state dir must be this project's ({}); got {}",
            pinned.display(),
            named.display()
        )
    })
}
