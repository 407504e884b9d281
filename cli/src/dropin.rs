//! Upstream's argument order for claude-code-hermit's scripts, so a plugin's
//! `scripts/proposal.ts` and `heartbeat.ts` can be one-line shims:
//! `hookstate [options] hermit proposal <verb> <dir> …` and
//! `hookstate [options] hermit heartbeat alert-state <state-file>` become hookstate's own verbs
//! (`proposals --dir <dir> <verb> …`, `alerts --dir <dir> tick`, …), in the verdict format and
//! mirrored over the state directory unless the options say otherwise.
//!
//! Moves words only: every rule stays with the verb it names. What upstream answers before it
//! reads anything (a missing argument, an unknown verb) is answered here, with upstream's
//! stream and exit code.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use hookstate_engine::PinEnv;

/// What the command line becomes.
pub(crate) enum Dropin {
    /// hookstate's own command line (unchanged when it is not a drop-in spelling), and the
    /// script's usage line when it is one: a call hookstate cannot parse then exits 1 with that
    /// line first, as upstream's scripts answer a mis-invocation.
    Args(Vec<OsString>, Option<&'static str>),
    /// Upstream's answer without running a verb: stdout, stderr, exit code.
    Answer { stdout: &'static str, stderr: String, code: u8 },
}

/// The word after `hermit` that names an upstream script.
const PROPOSAL: &str = "proposal";
const HEARTBEAT: &str = "heartbeat";

/// `bun proposal.ts` without its verb or state directory (the fork's newest verb list).
const PROPOSAL_USAGE: &str = "Usage: bun proposal.ts <create|patch|shell-append|next-task|\
    routine|resolve-id|gate|queue-micro|micro|index|anchor|metrics|event|success-signal|\
    quality-gate> <hermit-state-dir> [args...]";
/// `bun heartbeat.ts alert-state` without its state file.
const ALERT_STATE_USAGE: &str =
    "Usage: bun heartbeat.ts alert-state <state-file-path>   # eval-json on stdin";

/// The alert state file's name, in its state directory's `state/`.
const ALERT_STATE_FILE: &str = "alert-state.json";

/// `proposal.ts` verbs upstream has and hookstate does not build (docs/decisions.md).
const PROPOSAL_NOT_BUILT: [&str; 4] = ["gate", "quality-gate", "routine", "anchor"];

/// Rewrites a drop-in spelling; any other command line is returned as it is.
pub(crate) fn rewrite(args: Vec<OsString>) -> Dropin {
    let env = PinEnv {
        agent_dir: std::env::var_os("AGENT_DIR").map(Into::into),
        project_dir: std::env::var_os("CLAUDE_PROJECT_DIR").map(Into::into),
        cwd: std::env::current_dir().unwrap_or_default(),
    };
    rewrite_in(args, &env)
}

/// [`rewrite`] with the state-directory pin resolved from `env`.
fn rewrite_in(args: Vec<OsString>, env: &PinEnv) -> Dropin {
    let at = args
        .windows(2)
        .position(|pair| pair[0] == "hermit" && (pair[1] == PROPOSAL || pair[1] == HEARTBEAT));
    let Some(at) = at else {
        return Dropin::Args(args, None);
    };
    let (options, words) = args.split_at(at);
    let script = words[1].clone();
    let words = &words[2..];
    if script == PROPOSAL {
        proposal(options, words, env)
    } else {
        heartbeat(options, words)
    }
}

fn has_option(options: &[OsString], name: &str) -> bool {
    let with_value = format!("{name}=");
    options.iter().any(|o| o == name || o.to_string_lossy().starts_with(&with_value))
}

/// The options, plus `--format verdict` and `--mirror <dir>` unless already given.
fn with_defaults(options: &[OsString], dir: &OsStr) -> Vec<OsString> {
    let mut out = options.to_vec();
    if !has_option(options, "--format") {
        out.extend(["--format".into(), "verdict".into()]);
    }
    if !has_option(options, "--mirror") {
        out.extend(["--mirror".into(), dir.to_owned()]);
    }
    out
}

/// The newer `proposal.ts`'s pin: a state directory that is not this project's (as
/// `hermitDir()` resolves it from `AGENT_DIR`, `CLAUDE_PROJECT_DIR` and the working directory)
/// is refused with upstream's stderr line and exit 1, before anything is read.
fn pinned(dir: &OsStr, env: &PinEnv) -> Option<Dropin> {
    let line = hookstate_engine::pin_refusal("proposal.ts", Path::new(dir), env)?;
    Some(Dropin::Answer { stdout: "", stderr: format!("{line}\n"), code: 1 })
}

fn usage(line: &str) -> Dropin {
    Dropin::Answer { stdout: "", stderr: format!("{line}\n"), code: 1 }
}

/// The default state directory of `metrics` (upstream's `.claude-code-hermit`).
const DEFAULT_DIR: &str = ".claude-code-hermit";

/// `metrics [<stateDir>] [--source=<key>]` and `success-signal <words>`: verbs whose state
/// directory is optional, so they are answered before the usage check.
fn optional_dir(
    options: &[OsString],
    verb: &str,
    tail: &[OsString],
    env: &PinEnv,
) -> Option<Dropin> {
    let text = |w: &OsString| w.to_string_lossy().into_owned();
    match verb {
        "metrics" => {
            let dir = tail.iter().find(|w| !text(w).starts_with("--"));
            if let Some(refused) = dir.and_then(|d| pinned(d, env)) {
                return Some(refused);
            }
            let dir = dir.cloned().unwrap_or_else(|| DEFAULT_DIR.into());
            let source =
                tail.iter().find_map(|w| text(w).strip_prefix("--source=").map(str::to_owned));
            let mut out = with_defaults(options, &dir);
            out.extend(["proposals".into(), "--dir".into(), dir, "metrics".into()]);
            if let Some(source) = source.filter(|s| !s.is_empty()) {
                out.extend(["--source".into(), source.into()]);
            }
            Some(Dropin::Args(out, Some(PROPOSAL_USAGE)))
        }
        "success-signal" => {
            let evaluates = tail.first().is_some_and(|w| w != "--validate") && tail.len() >= 4;
            if let Some(refused) = tail.first().filter(|_| evaluates).and_then(|d| pinned(d, env)) {
                return Some(refused);
            }
            let mut out = options.to_vec();
            if !has_option(options, "--format") {
                out.extend(["--format".into(), "verdict".into()]);
            }
            out.extend(["proposals".into(), "success-signal".into(), "--".into()]);
            out.extend_from_slice(tail);
            Some(Dropin::Args(out, Some(PROPOSAL_USAGE)))
        }
        _ => None,
    }
}

fn proposal(options: &[OsString], words: &[OsString], env: &PinEnv) -> Dropin {
    if let Some(verb) = words.first() {
        if let Some(out) = optional_dir(options, &verb.to_string_lossy(), &words[1..], env) {
            return out;
        }
    }
    let (Some(verb), Some(dir)) = (words.first(), words.get(1)) else {
        // `index` was a fail-open cache rebuild upstream before it joined proposal.ts, and
        // stays one there: no state dir is a verdict at exit 0, not a usage error.
        if words.first().is_some_and(|verb| verb == "index") {
            return answer("SKIP|no state dir\n");
        }
        return usage(PROPOSAL_USAGE);
    };
    if let Some(refused) = pinned(dir, env) {
        return refused;
    }
    let rest = &words[2..];
    let verb_text = verb.to_string_lossy();
    let mut out = with_defaults(options, dir);
    let domain = |out: &mut Vec<OsString>, name: &str| {
        out.extend([name.into(), "--dir".into(), dir.clone()]);
    };
    match verb_text.as_ref() {
        // Upstream refuses a create without its template, before it writes anything.
        "create" => {
            domain(&mut out, "proposals");
            out.extend([verb.clone(), "--require-template".into()]);
            out.extend_from_slice(rest);
        }
        "queue-micro" | "index" | "resolve-id" | "event" | "micro" => {
            domain(&mut out, "proposals");
            out.push(verb.clone());
            out.extend_from_slice(rest);
        }
        // Upstream looks the file up before anything else: none named is no such proposal.
        "patch" if rest.is_empty() => return answer("ERROR|no-such-proposal\n"),
        // Upstream reads stdin whenever it is not a terminal; so does `--stdin`.
        "patch" => {
            domain(&mut out, "proposals");
            out.push(verb.clone());
            out.extend_from_slice(rest);
            out.push("--stdin".into());
        }
        "next-task" => {
            domain(&mut out, "alerts");
            out.extend(["next-task".into(), "queue".into()]);
            out.extend_from_slice(rest);
        }
        "shell-append" => {
            out.extend(["hermit".into(), "shell-append".into(), dir.clone()]);
            out.extend_from_slice(rest);
        }
        other if PROPOSAL_NOT_BUILT.contains(&other) => {
            let stderr = format!(
                "hookstate: proposal.ts {other} is not built in hookstate (docs/decisions.md)\n"
            );
            return Dropin::Answer { stdout: "", stderr, code: crate::exit::INVALID };
        }
        _ => return answer("ERROR|unknown-verb\n"),
    }
    Dropin::Args(out, Some(PROPOSAL_USAGE))
}

/// Upstream's verdict line at exit 0, without running a verb.
fn answer(stdout: &'static str) -> Dropin {
    Dropin::Answer { stdout, stderr: String::new(), code: 0 }
}

fn heartbeat(options: &[OsString], words: &[OsString]) -> Dropin {
    match (words.first().map(|w| w.to_string_lossy()), words.get(1)) {
        (Some(verb), Some(file)) if verb == "alert-state" => {
            // Upstream writes the file it is given; the layout's file is
            // <stateDir>/state/alert-state.json, and any other name would have this write that
            // one instead (in a directory of the name's choosing), so it is refused.
            let path = Path::new(file);
            let named = |p: Option<&Path>, name: &str| {
                p.and_then(Path::file_name).is_some_and(|n| n == name)
            };
            if !named(Some(path), ALERT_STATE_FILE) || !named(path.parent(), "state") {
                let stderr = format!(
                    "hookstate: heartbeat.ts alert-state: {} is not \
                     <state-dir>/state/{ALERT_STATE_FILE}, the one alert state file hookstate \
                     keeps\n",
                    path.display()
                );
                return Dropin::Answer { stdout: "", stderr, code: 1 };
            }
            let dir = path.parent().and_then(Path::parent).unwrap_or(Path::new(""));
            let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
            let mut out = with_defaults(options, dir.as_os_str());
            out.extend(["alerts".into(), "--dir".into(), dir.as_os_str().to_owned()]);
            out.push("tick".into());
            out.extend_from_slice(&words[2..]);
            Dropin::Args(out, Some(ALERT_STATE_USAGE))
        }
        (Some(verb), None) if verb == "alert-state" => usage(ALERT_STATE_USAGE),
        (Some(verb), _) => {
            let stderr = format!(
                "hookstate: heartbeat.ts {verb} is not built in this spelling; see docs/verbs.md\n"
            );
            Dropin::Answer { stdout: "", stderr, code: crate::exit::USAGE }
        }
        (None, _) => usage(ALERT_STATE_USAGE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<OsString> {
        line.split(' ').map(OsString::from).collect()
    }

    /// The pin of a project at /x whose state directory the words call `D`.
    fn env() -> PinEnv {
        PinEnv { agent_dir: Some("/x/D".into()), project_dir: None, cwd: "/x".into() }
    }

    fn rewritten(line: &str) -> String {
        match rewrite_in(args(line), &env()) {
            Dropin::Args(out, _) => {
                out.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
            }
            Dropin::Answer { stdout, stderr, code } => {
                format!("answer {code} {stdout:?} {stderr:?}")
            }
        }
    }

    #[test]
    fn upstream_order_becomes_hookstates_verbs() {
        let cases = [
            (
                "hs hermit proposal create D",
                "hs --format verdict --mirror D proposals --dir D create --require-template",
            ),
            (
                "hs --db x hermit proposal micro D resolve MP-1 --action approved",
                "hs --db x --format verdict --mirror D proposals --dir D micro resolve MP-1 --action approved",
            ),
            (
                "hs hermit proposal patch D PROP-1 --set status=accepted",
                "hs --format verdict --mirror D proposals --dir D patch PROP-1 --set status=accepted --stdin",
            ),
            ("hs hermit proposal next-task D", "hs --format verdict --mirror D alerts --dir D next-task queue"),
            (
                "hs --format json --mirror M hermit proposal shell-append D --section findings",
                "hs --format json --mirror M hermit shell-append D --section findings",
            ),
            (
                "hs hermit heartbeat alert-state D/state/alert-state.json",
                "hs --format verdict --mirror D alerts --dir D tick",
            ),
            ("hs hermit proposal metrics", "hs --format verdict --mirror .claude-code-hermit proposals --dir .claude-code-hermit metrics"),
            (
                "hs hermit proposal metrics D --source=reflect --x",
                "hs --format verdict --mirror D proposals --dir D metrics --source reflect",
            ),
            (
                "hs hermit proposal success-signal --validate a < 1 over 2 sessions",
                "hs --format verdict proposals success-signal -- --validate a < 1 over 2 sessions",
            ),
            ("hs hermit task open D", "hs hermit task open D"),
            ("hs kv get hermit", "hs kv get hermit"),
        ];
        for (line, expected) in cases {
            assert_eq!(rewritten(line), expected, "{line}");
        }
    }

    #[test]
    fn what_upstream_answers_before_reading_anything() {
        assert_eq!(
            rewritten("hs hermit proposal frob D"),
            "answer 0 \"ERROR|unknown-verb\\n\" \"\""
        );
        assert!(rewritten("hs hermit proposal create")
            .starts_with("answer 1 \"\" \"Usage: bun proposal.ts"));
        assert!(rewritten("hs hermit heartbeat alert-state")
            .starts_with("answer 1 \"\" \"Usage: bun heartbeat.ts"));
        // `index` fails open without a state dir; `patch` without a file names no proposal.
        assert_eq!(rewritten("hs hermit proposal index"), "answer 0 \"SKIP|no state dir\\n\" \"\"");
        assert_eq!(
            rewritten("hs hermit proposal patch D"),
            "answer 0 \"ERROR|no-such-proposal\\n\" \"\""
        );
        // An alert state file other than <dir>/state/alert-state.json is refused: the verb
        // keeps that one file, and wrote it whatever the name (in the name's grandparent).
        for file in ["x/alerts.json", "D/other/alert-state.json", "alert-state.json", "é"] {
            let line = format!("hs hermit heartbeat alert-state {file}");
            let got = rewritten(&line);
            assert!(
                got.starts_with("answer 1 \"\" \"hookstate: heartbeat.ts alert-state"),
                "{got}"
            );
        }
        assert!(rewritten("hs hermit proposal gate D").starts_with("answer 3 \"\""));
        // Another project's directory is refused before anything runs (the fork's pin), also
        // for an unknown verb, a metrics positional and an evaluated success signal.
        let refused =
            "answer 1 \"\" \"proposal.ts: state dir must be this project's (/x/D); got E\\n\"";
        for line in [
            "hs hermit proposal create E",
            "hs hermit proposal frob E",
            "hs hermit proposal metrics E",
            "hs hermit proposal success-signal E 2026-09-01 null avg_session_cost_usd < 1 over 2 sessions",
        ] {
            assert_eq!(rewritten(line), refused, "{line}");
        }
        // The pin compares resolved paths.
        assert!(rewritten("hs hermit proposal create ../x/D/.").starts_with("hs --format verdict"));
    }
}
