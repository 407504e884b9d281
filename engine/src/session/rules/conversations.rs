//! `conversation.ts` (Hn `@5b1fcd2`) over `lib/conversations.ts` (Hn `@4ef3185`): the keyed
//! verbs `lookup`, `bind` (a claim: it fails `already-bound`), `update` (a merge, `generation`+1,
//! `last_activity`), `unbind`, and the keyless `list` and `prune` (from `claude agents --json`);
//! and [`apply`], the one function that turns their events into the file's next content.
//!
//! Upstream rewrites the whole store with `JSON.stringify(store, null, 2)` on every write, so an
//! applied event re-serialises every record as JavaScript would. Does not read files or the store.

use hookstate_schema::session::{JsonDoc, SessionEvent, Style};
use serde_json::{json, Map, Value};

use super::task_doc::is_conversation_key;
use super::verdict::{error_line, Class, Decided, Decision, Refusal, Verdict};
use crate::kernel::compat::stamp;
use crate::kernel::compat::text as js;
use crate::legacy::json as legacy_json;

/// Bindings `bind` makes, hookstate's bound (upstream has none; a hermit has a handful of
/// chats). Bindings an outside writer adds are adopted up to the legacy codec's
/// `OBJECT_KEYS_MAX`.
pub(crate) const BINDINGS_MAX: usize = 64;
/// `update --status` values.
pub(crate) const STATUSES: [&str; 4] = ["running", "idle", "parked", "unknown"];
/// The options `bind` takes (after `-` became `_`).
pub(crate) const BIND_OPTIONS: [&str; 3] = ["session_name", "session_id", "worktree"];

fn refuse(token: &str, class: Class) -> Refusal {
    error_line(token, class, 1)
}

/// The words upstream refuses before it reads the store: `list` and `prune` take no key and
/// nothing after it, the other verbs need a key (`missing-key`), and `lookup` and `unbind` take
/// nothing after it.
///
/// # Errors
/// `invalid-options`, `missing-key`.
pub(crate) fn check_words(verb: &str, args: &[String]) -> Result<(), Refusal> {
    match (verb, args) {
        ("list" | "prune", [_, ..]) | ("lookup" | "unbind", [_, _, ..]) => {
            Err(refuse("invalid-options", Class::Usage))
        }
        ("lookup" | "bind" | "update" | "unbind", []) => Err(refuse("missing-key", Class::Usage)),
        _ => Ok(()),
    }
}

/// `options()`: `--name value` pairs, `-` in names read as `_`; a bare value, a missing value or
/// a repeated name is `invalid-options`.
///
/// # Errors
/// `invalid-options`.
pub(crate) fn parse_options(args: &[String]) -> Result<Vec<(String, String)>, Refusal> {
    let mut out: Vec<(String, String)> = Vec::new();
    for pair in args.chunks(2) {
        let name = pair[0].strip_prefix("--").map(|n| n.replace('-', "_"));
        match (name, pair.get(1)) {
            (Some(name), Some(value)) if !out.iter().any(|(k, _)| *k == name) => {
                out.push((name, value.clone()));
            }
            _ => return Err(refuse("invalid-options", Class::Usage)),
        }
    }
    Ok(out)
}

fn check_key(key: &str) -> Result<(), Refusal> {
    if is_conversation_key(key) {
        Ok(())
    } else {
        Err(refuse("invalid-key", Class::Invalid))
    }
}

fn record(store: &JsonDoc, key: &str) -> Option<Value> {
    store.raw(key).and_then(|raw| serde_json::from_str(raw).ok())
}

fn truthy(value: Option<&Value>) -> bool {
    value.is_some_and(crate::kernel::compat::js::truthy)
}

/// `lookup <key>`: the record as JSON.
///
/// # Errors
/// `invalid-key`, `not-found`.
pub(crate) fn lookup(store: &JsonDoc, key: &str) -> Decision {
    check_key(key)?;
    match record(store, key).filter(|r| !r.is_null()) {
        Some(r) => Ok(Decided { events: Vec::new(), verdict: Verdict::json(&js::object_order(r)) }),
        None => Err(refuse("not-found", Class::Invalid)),
    }
}

/// `list`: the whole store as compact JSON.
#[must_use]
pub(crate) fn list(store: &JsonDoc) -> Decided {
    let value = js::object_order(legacy_json::to_value(store));
    Decided { events: Vec::new(), verdict: Verdict::json(&value) }
}

/// `bind <key> --session-name --session-id --worktree`: a new record (generation 1, no card,
/// unmuted, running, `created` = `last_activity` = now), only while the key is free.
///
/// # Errors
/// `invalid-options`, `invalid-key`, `invalid-binding`, `already-bound`, `too-many-bindings`.
pub(crate) fn decide_bind(
    store: &JsonDoc,
    key: &str,
    options: &[(String, String)],
    now_ms: u64,
) -> Decision {
    if options.iter().any(|(k, _)| !BIND_OPTIONS.contains(&k.as_str())) {
        return Err(refuse("invalid-options", Class::Usage));
    }
    check_key(key)?;
    let get = |name: &str| options.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v.as_str());
    let (name, id, worktree) = (get("session_name"), get("session_id"), get("worktree"));
    if name.is_empty() || id.is_empty() || !worktree.starts_with('/') {
        return Err(refuse("invalid-binding", Class::Invalid));
    }
    if truthy(record(store, key).as_ref()) {
        return Err(refuse("already-bound", Class::Refused));
    }
    // Our bound, not upstream's (its file has none): refused by the store's state, named so
    // (it read as `invalid-store`, the token of an unreadable file).
    if store.fields.len() >= BINDINGS_MAX && store.raw(key).is_none() {
        return Err(refuse("too-many-bindings", Class::Refused));
    }
    let now = stamp::stamp_ms(now_ms);
    let value = json!({ "session_name": name, "session_id": id, "worktree": worktree,
        "generation": 1, "card": null, "muted": false, "created": now, "last_activity": now,
        "status": "running" });
    let record = crate::kernel::compat::js::compact(&value);
    let event = SessionEvent::ConversationBound { key: key.to_owned(), record };
    Ok(Decided { events: vec![event], verdict: Verdict::line(format!("OK|{key}")) })
}

/// The fields of an `update`, checked as upstream checks each option in turn.
///
/// # Errors
/// `invalid-status`, `invalid-muted`, `invalid-generation`, `invalid-binding`, `invalid-card`,
/// `operation-failed` (a `--card` that is not JSON), `invalid-options`.
pub(crate) fn update_fields(
    options: &[(String, String)],
) -> Result<(Vec<(String, String)>, u64), Refusal> {
    let mut sets = Vec::new();
    let mut delta = 0;
    for (name, value) in options {
        let raw = match name.as_str() {
            "status" if STATUSES.contains(&value.as_str()) => legacy_json::string(value),
            "status" => return Err(refuse("invalid-status", Class::Invalid)),
            "muted" if value == "true" || value == "false" => value.clone(),
            "muted" => return Err(refuse("invalid-muted", Class::Invalid)),
            "generation" if value == "+1" => {
                delta = 1;
                continue;
            }
            "generation" => return Err(refuse("invalid-generation", Class::Invalid)),
            "session_name" | "session_id" | "worktree" if !value.is_empty() => {
                legacy_json::string(value)
            }
            "session_name" | "session_id" | "worktree" => {
                return Err(refuse("invalid-binding", Class::Invalid))
            }
            "card" => card(value)?,
            _ => return Err(refuse("invalid-options", Class::Usage)),
        };
        sets.push((name.clone(), raw));
    }
    Ok((sets, delta))
}

fn card(value: &str) -> Result<String, Refusal> {
    let card: Value =
        serde_json::from_str(value).map_err(|_| refuse("operation-failed", Class::Invalid))?;
    let ok = match &card {
        Value::Null => true,
        Value::Object(m) => {
            m.len() == 2
                && m.get("chat_id").is_some_and(Value::is_string)
                && m.get("message_id").is_some_and(Value::is_string)
        }
        _ => false,
    };
    if ok {
        Ok(crate::kernel::compat::js::compact(&js::object_order(card)))
    } else {
        Err(refuse("invalid-card", Class::Invalid))
    }
}

/// `update <key> [--status] [--muted] [--generation +1] [--session-name|--session-id|--worktree]
/// [--card]`: merges the fields into the record, adds the generation step, refreshes
/// `last_activity`.
///
/// # Errors
/// Those of [`update_fields`], then `invalid-key`, `not-found`, `invalid-store` (a record that
/// is not an object, or whose `generation` is not an integer).
pub(crate) fn decide_update(
    store: &JsonDoc,
    key: &str,
    options: &[(String, String)],
    now_ms: u64,
) -> Decision {
    let (sets, generation_delta) = update_fields(options)?;
    check_key(key)?;
    let Some(current) = record(store, key).filter(crate::kernel::compat::js::truthy) else {
        return Err(refuse("not-found", Class::Invalid));
    };
    let integral = current.get("generation").is_some_and(|g| g.as_u64().is_some());
    if !current.is_object() || !integral {
        return Err(refuse("invalid-store", Class::Invalid));
    }
    let event = SessionEvent::ConversationUpdated {
        key: key.to_owned(),
        sets,
        generation_delta,
        last_activity: stamp::stamp_ms(now_ms),
    };
    Ok(Decided { events: vec![event], verdict: Verdict::line(format!("OK|{key}")) })
}

/// `unbind <key>`: the key is removed; a missing key is no error (the file is rewritten anyway).
///
/// # Errors
/// `invalid-key`.
pub(crate) fn decide_unbind(key: &str) -> Decision {
    check_key(key)?;
    let event = SessionEvent::ConversationUnbound { key: key.to_owned() };
    Ok(Decided { events: vec![event], verdict: Verdict::line(format!("OK|{key}")) })
}

/// `prune` (stdin: `claude agents --json`): running or idle bindings whose `session_id` no agent
/// has become `unknown`. A list that is not JSON, not an array or empty changes nothing.
///
/// # Errors
/// `operation-failed` for a null record (upstream throws reading its `status`).
pub(crate) fn decide_prune(store: &JsonDoc, agents: &str) -> Decision {
    let done = |events| Ok(Decided { events, verdict: Verdict::line("OK|prune") });
    let Ok(Value::Array(agents)) = serde_json::from_str::<Value>(agents) else {
        return done(Vec::new());
    };
    if agents.is_empty() {
        return done(Vec::new());
    }
    let ids: Vec<&str> = agents.iter().filter_map(|a| a.get("sessionId")?.as_str()).collect();
    let mut keys = Vec::new();
    for (key, raw) in &store.fields {
        let value: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
        if value.is_null() {
            return Err(refuse("operation-failed", Class::Invalid));
        }
        let live = matches!(value.get("status").and_then(Value::as_str), Some("running" | "idle"));
        let seen =
            value.get("session_id").and_then(Value::as_str).is_some_and(|s| ids.contains(&s));
        if live && !seen {
            keys.push(key.clone());
        }
    }
    done(if keys.is_empty() {
        Vec::new()
    } else {
        vec![SessionEvent::ConversationsPruned { keys }]
    })
}

fn set_field(map: &mut Map<String, Value>, key: &str, raw: &str) {
    map.insert(key.to_owned(), serde_json::from_str(raw).unwrap_or(Value::Null));
}

/// The store after `event`: every record re-serialised as `JSON.stringify` writes it, the
/// change applied, the file pretty. Events of other kinds leave it as it is.
pub(crate) fn apply(store: &mut JsonDoc, event: &SessionEvent) {
    let normalise = |store: &mut JsonDoc| {
        store.style = Style::Pretty;
        for (_, raw) in &mut store.fields {
            if let Some(text) = js::reparse(raw) {
                *raw = text;
            }
        }
    };
    match event {
        SessionEvent::ConversationBound { key, record } => {
            normalise(store);
            store.set(key, record.clone());
        }
        SessionEvent::ConversationUpdated { key, sets, generation_delta, last_activity } => {
            normalise(store);
            let Some(Value::Object(mut map)) = record(store, key) else { return };
            for (name, raw) in sets {
                set_field(&mut map, name, raw);
            }
            let generation = map.get("generation").and_then(Value::as_u64).unwrap_or(0);
            map.insert("generation".into(), json!(generation.saturating_add(*generation_delta)));
            map.insert("last_activity".into(), json!(last_activity));
            store.set(key, crate::kernel::compat::js::compact(&Value::Object(map)));
        }
        SessionEvent::ConversationUnbound { key } => {
            normalise(store);
            store.fields.retain(|(k, _)| k != key);
        }
        SessionEvent::ConversationsPruned { keys } => {
            normalise(store);
            for key in keys {
                if let Some(Value::Object(mut map)) = record(store, key) {
                    map.insert("status".into(), json!("unknown"));
                    store.set(key, crate::kernel::compat::js::compact(&Value::Object(map)));
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_789_373_702_118;

    fn options(list: &[&str]) -> Vec<(String, String)> {
        let args: Vec<String> = list.iter().map(|s| (*s).to_owned()).collect();
        parse_options(&args).unwrap()
    }

    fn run(store: &mut JsonDoc, decide: impl Fn(&JsonDoc) -> Decision) -> Result<String, String> {
        let decided = decide(store).map_err(|r| r.verdict.lines[0].clone())?;
        for event in &decided.events {
            apply(store, event);
        }
        Ok(decided.verdict.lines[0].clone())
    }

    #[test]
    fn bind_is_a_claim_and_update_merges() {
        let mut store = JsonDoc { fields: Vec::new(), style: Style::Pretty };
        let bind = options(&["--session-name", "n", "--session-id", "s1", "--worktree", "/w"]);
        let key = "discord:1187734401122";
        assert_eq!(run(&mut store, |s| decide_bind(s, key, &bind, NOW)), Ok(format!("OK|{key}")));
        assert_eq!(
            run(&mut store, |s| decide_bind(s, key, &bind, NOW)),
            Err("ERROR|already-bound".into())
        );
        let upd = options(&["--status", "idle", "--generation", "+1", "--card", "null"]);
        assert!(run(&mut store, |s| decide_update(s, key, &upd, NOW + 1)).is_ok());
        let rec = record(&store, key).unwrap();
        assert_eq!(rec["generation"], 2);
        assert_eq!(rec["status"], "idle");
        assert_eq!(rec["last_activity"], "2026-09-14T08:15:02.119Z");
        assert_eq!(rec["created"], "2026-09-14T08:15:02.118Z");
        assert_eq!(
            run(&mut store, |s| decide_prune(s, "[{\"sessionId\":\"s1\"}]")),
            Ok("OK|prune".into())
        );
        assert_eq!(record(&store, key).unwrap()["status"], "idle");
        assert!(run(&mut store, |s| decide_prune(s, "[{\"sessionId\":\"x\"}]")).is_ok());
        assert_eq!(record(&store, key).unwrap()["status"], "unknown");
        assert!(run(&mut store, |_| decide_unbind(key)).is_ok());
        assert_eq!(crate::legacy::json::render(&store), "{}\n");
    }

    /// Upstream's checks of the words before anything is read: a key where none is taken, none
    /// where one is needed (it printed `invalid-key`, and `list extra` listed, `prune extra`
    /// pruned).
    #[test]
    fn words_upstream_refuses_before_reading() {
        let words = |list: &[&str]| list.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
        let token = |verb: &str, list: &[&str]| {
            check_words(verb, &words(list)).err().map(|r| r.verdict.lines[0].clone())
        };
        assert_eq!(token("list", &["extra"]).as_deref(), Some("ERROR|invalid-options"));
        assert_eq!(token("prune", &["extra"]).as_deref(), Some("ERROR|invalid-options"));
        assert_eq!(token("lookup", &["k", "--x", "y"]).as_deref(), Some("ERROR|invalid-options"));
        for verb in ["lookup", "bind", "update", "unbind"] {
            assert_eq!(token(verb, &[]).as_deref(), Some("ERROR|missing-key"), "{verb}");
        }
        assert_eq!(token("list", &[]), None);
        assert_eq!(token("bind", &["k", "--session-name", "n"]), None);
    }

    /// Past the bound a bind is refused by the store's state, with a token that says so (it was
    /// `invalid-store`, the token of an unreadable file, on a healthy store).
    #[test]
    fn a_bind_past_the_bound_names_the_bound() {
        let mut store = JsonDoc { fields: Vec::new(), style: Style::Pretty };
        let bind = options(&["--session-name", "n", "--session-id", "s1", "--worktree", "/w"]);
        for n in 0..BINDINGS_MAX {
            let key = format!("chat:{n}");
            assert!(run(&mut store, |s| decide_bind(s, &key, &bind, NOW)).is_ok(), "{n}");
        }
        let refused = decide_bind(&store, "chat:last", &bind, NOW).unwrap_err();
        assert_eq!(refused.verdict.lines[0], "ERROR|too-many-bindings");
        assert_eq!(refused.class, Class::Refused);
    }

    #[test]
    fn bad_calls_get_upstreams_tokens() {
        let store = JsonDoc { fields: Vec::new(), style: Style::Pretty };
        let token = |d: Decision| d.err().map(|r| r.token);
        let args = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            parse_options(&args(&["--a"])).err().map(|r| r.token).as_deref(),
            Some("invalid-options")
        );
        assert_eq!(
            parse_options(&args(&["--a-b", "1", "--a_b", "2"])).err().map(|r| r.token).as_deref(),
            Some("invalid-options")
        );
        let bind = options(&["--session-name", "n", "--session-id", "s", "--worktree", "rel"]);
        assert_eq!(
            token(decide_bind(&store, "k:1", &bind, NOW)).as_deref(),
            Some("invalid-binding")
        );
        assert_eq!(token(decide_bind(&store, "bad", &bind, NOW)).as_deref(), Some("invalid-key"));
        for (opts, expected) in [
            (&["--status", "busy"][..], "invalid-status"),
            (&["--muted", "yes"], "invalid-muted"),
            (&["--generation", "+2"], "invalid-generation"),
            (&["--worktree", ""], "invalid-binding"),
            (&["--card", "{nope"], "operation-failed"),
            (&["--card", "{\"chat_id\":1,\"message_id\":\"m\"}"], "invalid-card"),
            (&["--color", "red"], "invalid-options"),
        ] {
            assert_eq!(
                token(decide_update(&store, "k:1", &options(opts), NOW)).as_deref(),
                Some(expected)
            );
        }
        assert_eq!(token(decide_update(&store, "k:1", &[], NOW)).as_deref(), Some("not-found"));
    }
}
