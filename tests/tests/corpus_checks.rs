//! The fuzz targets' checks as plain functions: each takes one input's bytes and panics when a
//! property breaks, so libFuzzer (`fuzz/fuzz_targets/*.rs`) and the corpus replay test
//! (`corpus.rs`) run the very same code.
//!
//! Included by `#[path]` from both crates, so it may use only what both depend on:
//! `hookstate-schema`, `hookstate-engine`, `serde_json` and `tempfile`. Does not hold tests
//! itself.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use hookstate_engine::limits::{STDIN_BYTES_MAX, VALUE_BYTES_MAX};
use hookstate_engine::parse_patch_stdin;
use hookstate_engine::{check_feedback, FeedbackInput as Input, COMMENT_BYTES_MAX};
use hookstate_engine::{parse_findings, parse_rows};
use hookstate_engine::{parse_hook_payload, parse_stop_payload};
use hookstate_engine::{parse_legacy, LegacyFile};
use hookstate_engine::{validate_json, Call, Command, Engine, OpenOptions};
use hookstate_schema::anchor_file;
use hookstate_schema::format::{self, FormatError, RECORD_CHECK_BYTES, RECORD_VERSION_SHAPE_1};
use hookstate_schema::id::{ID_BYTES_MAX, SCOPE_BYTES_MAX};
use hookstate_schema::{validate_id, validate_scope, Actor, Event, ViewKey};
use serde_json::value::RawValue;

/// `decode_event` never panics, on the input as a whole record and on the input as the content
/// bytes of a well-formed record whose hash matches (built here, so that the content decoder is
/// reached at all: the fuzzer cannot forge a blake3 hash).
///
/// A decoded event's canonical re-encoding must decode to the same event under the hash of its
/// canonical content bytes, and must reproduce the stored hash when it reproduces the content
/// bytes. The stored hash is NOT asserted equal to `event_hash(prev, seq,
/// encode_content(content))`: it covers the stored content bytes, and the decoder also accepts
/// non-canonical MessagePack for them (a struct as an array, an int in a wider encoding), which
/// re-encodes to other bytes.
pub(crate) fn check_event_decode(data: &[u8]) {
    if let Ok(event) = format::decode_event(data) {
        check_canonical_event(&event, None);
    }
    let prev = [0x5a; 32];
    let seq = 1;
    let Some(record) = wrap_content(seq, &prev, data) else {
        return;
    };
    match format::decode_event(&record) {
        Ok(event) => {
            assert_eq!(
                (event.seq, event.prev, event.hash),
                (seq, prev, format::event_hash(&prev, seq, data)),
                "a wrapped record decodes to other chain fields"
            );
            check_canonical_event(&event, Some(data));
        }
        Err(FormatError::Undecodable { what, .. }) => {
            assert_eq!(what, "event content", "a well-formed envelope is refused as {what}")
        }
        Err(err) => panic!("a well-formed envelope with a matching hash is refused: {err}"),
    }
}

/// Re-encodes a decoded event canonically and checks what must hold; `content_bytes` are the
/// stored content bytes when known.
fn check_canonical_event(event: &Event, content_bytes: Option<&[u8]>) {
    let canonical = format::encode_content(&event.content);
    let (bytes, hash) = format::encode_event(event.seq, &event.prev, &event.content);
    assert_eq!(
        hash,
        format::event_hash(&event.prev, event.seq, &canonical),
        "encode_event hashes the canonical content bytes"
    );
    match format::decode_event(&bytes) {
        Ok(again) => assert_eq!(
            again,
            Event { hash, ..event.clone() },
            "the canonical re-encoding decodes to another event"
        ),
        Err(err) => panic!("the canonical re-encoding of a decoded event is refused: {err}"),
    }
    if content_bytes == Some(canonical.as_slice()) {
        assert_eq!(hash, event.hash, "identical content bytes, different hash");
    }
}

/// A record envelope in MessagePack, written by hand (the schema keeps its envelope type
/// private): a map of `v` (the version of a body at shape 1; a body stored at a later shape is
/// refused as undecodable content), `seq`, `prev`, `hash` (its first [`RECORD_CHECK_BYTES`], as
/// that version keeps) and `content`, with the hash computed over `content` so that it matches. `None` when the content is too long for a bin32.
fn wrap_content(seq: u64, prev: &[u8; 32], content: &[u8]) -> Option<Vec<u8>> {
    let len = u32::try_from(content.len()).ok()?;
    let hash = format::event_hash(prev, seq, content);
    let mut out = vec![0x85];
    out.extend_from_slice(b"\xa1v\xcd");
    out.extend_from_slice(&RECORD_VERSION_SHAPE_1.to_be_bytes());
    out.extend_from_slice(b"\xa3seq\xcf");
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(b"\xa4prev\xc4\x20");
    out.extend_from_slice(prev);
    out.extend_from_slice(b"\xa4hash\xc4");
    out.push(u8::try_from(RECORD_CHECK_BYTES).ok()?);
    out.extend_from_slice(&hash[..RECORD_CHECK_BYTES]);
    out.extend_from_slice(b"\xa7content\xc6");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(content);
    Some(out)
}

/// `decode_view_key` never panics, and a key it accepts encodes back to the very same bytes.
pub(crate) fn check_view_key_decode(data: &[u8]) {
    if let Ok(key) = format::decode_view_key(data) {
        assert_eq!(format::encode_view_key(&key), data, "view key {key:?} does not round-trip");
    }
}

/// `validate_json` never panics on UTF-8 text, and what it accepts is a fixed point: the
/// returned text is a trimmed slice of the input and validates to itself.
pub(crate) fn check_stdin_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(value) = validate_json("stdin", text) else {
        return;
    };
    assert!(text.contains(value.as_str()), "output is not part of the input");
    assert_eq!(
        value.trim_matches(|c: char| c.is_ascii_whitespace()),
        value,
        "output is not trimmed"
    );
    match validate_json("stdin", &value) {
        Ok(again) => assert_eq!(again, value, "validation is not idempotent"),
        Err(err) => panic!("accepted JSON {value:?} is refused the second time: {err}"),
    }
}

/// `validate_id` and `validate_scope` never panic; what they accept can be neither a path, an
/// option nor a terminal escape, and encodes into a view key that decodes back.
pub(crate) fn check_id_validate(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();
    let id_ok = validate_id("id", text).is_ok();
    let scope_ok = validate_scope(text).is_ok();
    if id_ok {
        assert!(!text.is_empty() && text.len() <= ID_BYTES_MAX, "id length");
        assert!(text.is_ascii(), "id {text:?} is not ASCII");
        assert!(!text.contains(['/', '\\', '\0']), "id {text:?} holds a path separator or NUL");
        assert!(!text.chars().any(char::is_control), "id {text:?} holds a control character");
        assert!(text != "." && text != "..", "id {text:?} is a dot entry");
        assert!(
            !text.starts_with(['-', '.']) && !text.ends_with('.'),
            "id {text:?} has a leading '-' or '.', or a trailing '.'"
        );
        assert!(scope_ok, "id {text:?} is not a valid scope");
    }
    if scope_ok {
        assert!(!text.is_empty() && text.len() <= SCOPE_BYTES_MAX, "scope length");
        assert!(!text.chars().any(char::is_control), "scope {text:?} holds a control character");
        assert!(!text.starts_with('-'), "scope {text:?} starts with '-'");
        let key = ViewKey::Record {
            scope: text.to_owned(),
            key: if id_ok { text.to_owned() } else { "k".into() },
        };
        assert_eq!(
            format::decode_view_key(&format::encode_view_key(&key)).ok(),
            Some(key),
            "a valid scope breaks the view key encoding"
        );
    }
}

/// `parse_anchor` never panics, and what it accepts formats back to the input up to the
/// spellings the parser tolerates (see [`canonical_anchor`]), and parses again to the same.
pub(crate) fn check_anchor_parse(data: &[u8]) {
    // The anchor file's slot reader, on any bytes: a slot it accepts encodes back to itself.
    if let Some(line) = anchor_file::decode_slot(data) {
        let encoded = anchor_file::encode_slot(&line);
        assert_eq!(encoded.as_deref(), Some(data), "accepted slot {data:?} does not encode back");
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok((store_id, head)) = format::parse_anchor(text) else {
        return;
    };
    let formatted = format::format_anchor(&store_id, &head);
    assert_eq!(
        Some(formatted.as_str()),
        canonical_anchor(text).as_deref(),
        "accepted anchor {text:?} does not format back to itself"
    );
    assert_eq!(
        format::parse_anchor(&formatted).ok(),
        Some((store_id, head)),
        "a formatted anchor does not parse back"
    );
}

/// The canonical spelling of an anchor line that `parse_anchor` accepted: `parse_anchor` is
/// strict, so an accepted line is exactly what `format_anchor` writes.
fn canonical_anchor(text: &str) -> Option<String> {
    Some(text.to_owned())
}

/// Opening arbitrary bytes as a store (with redb's integrity check) and verifying it never
/// panics; any error is fine. The file sits alone in a fresh private (0700) directory.
///
/// # Panics
/// Only when the temporary directory cannot be set up, which is not a finding.
/// The store opens' wait in `check_db_file_bytes`: no other process holds the file, so a wait
/// could only sleep — a recovery-flagged input (most mutated store files) made the read-only open
/// retry for the whole wait before its copy-on-write repair, 100 ms a run at the old 100.
const DB_FILE_WAIT_MS: u64 = 0;

pub(crate) fn check_db_file_bytes(data: &[u8]) {
    let dir = tempfile::Builder::new()
        .prefix("hookstate-fuzz-")
        .tempdir()
        .expect("create a temporary directory");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))
        .expect("make the temporary directory private");
    let path = dir.path().join("state.redb");
    fs::write(&path, data).expect("write the store file");
    // `verify`'s own open (read-only, redb's check on a copy-on-write view), then `rebuild`'s
    // (a writer with redb's check); a missing anchor is accepted so every check runs.
    let accept = hookstate_engine::VerifyOptions { accept_missing_anchor: true };
    for read_only in [true, false] {
        let options = OpenOptions {
            wait_ms: DB_FILE_WAIT_MS,
            create: false,
            check_integrity: true,
            check_beside_replay: false,
            read_only,
            absent_is_empty: false,
            anchor_dir: None,
            server_clock: true,
            upgrade_schema: false,
        };
        if let Ok(engine) = Engine::open(&path, options) {
            let _ = engine.ops().verify(accept);
        }
    }
}

/// The verbs whose stdin `check_verb_stdin` feeds, picked by the input's first byte (modulo the
/// count); the rest of the input is the stdin text.
pub(crate) const STDIN_VERBS: [&str; 13] = [
    "hook-payload",
    "hook-stop",
    "observer-append",
    "observer-sweep-commit",
    "proposals-patch",
    "kv-put",
    "queue-push",
    "list-append",
    "feedback-add-comment",
    "feedback-add-target",
    "proposals-queue-micro",
    "proposals-create",
    "alerts-tick",
];

/// The cap of the list the `list-append` case appends to.
const LIST_CAP: u32 = 100;

/// A call as the CLI builds one, in `scope`.
fn stdin_call(scope: &str) -> Call {
    Call::at(scope, 1_700_000_000_000).by(Actor {
        session: Some("s1".into()),
        hook: Some("fuzz".into()),
        pid: Some(1),
        agent: None,
    })
}

/// The stdin parser and check of every verb that reads stdin never panic on any text the CLI's
/// reader lets through (non-empty UTF-8 within the cap); what they accept is consistent: JSON
/// parsers accept only JSON, `Set:`/`Decision:` lines come from the text, checked values are
/// within the value cap and validate as JSON on their own.
pub(crate) fn check_verb_stdin(data: &[u8]) {
    let _ = verb_stdin_verdict(data);
}

/// Runs [`check_verb_stdin`]'s checks and tells which verb the input went to (its index in
/// [`STDIN_VERBS`]) and whether that verb accepted it; `None` for input the CLI's reader refuses.
pub(crate) fn verb_stdin_verdict(data: &[u8]) -> Option<(usize, bool)> {
    let (&selector, rest) = data.split_first()?;
    let text = std::str::from_utf8(rest).ok()?;
    if text.is_empty() || text.len() > STDIN_BYTES_MAX {
        return None;
    }
    let index = usize::from(selector) % STDIN_VERBS.len();
    let verb = STDIN_VERBS[index];
    // Syntax only: a struct parser skips unknown fields without converting their numbers, so it
    // accepts `1e999` there, which `Value` refuses as out of f64 range (found by fuzzing).
    let is_json = || serde_json::from_str::<&RawValue>(text).is_ok();
    // What upstream's `JSON.parse(stdin.trim())` would parse.
    let is_trimmed_json =
        || serde_json::from_str::<&RawValue>(hookstate_engine::js_trim(text)).is_ok();
    let accepted = match verb {
        "hook-payload" => {
            let ok = parse_hook_payload(text).is_ok();
            assert!(!ok || is_json(), "a hook payload that is not JSON was accepted");
            ok
        }
        "hook-stop" => match parse_stop_payload(text) {
            Ok(payload) => {
                assert!(is_json(), "a Stop payload that is not JSON was accepted");
                if let Some(session) = payload.session_id {
                    assert!(text.contains("session_id"), "session {session:?} from nowhere");
                }
                true
            }
            Err(_) => false,
        },
        "observer-append" => match parse_rows(text) {
            Ok(rows) => {
                assert!(is_json(), "rows accepted from text that is not JSON");
                let expected = serde_json::from_str::<Vec<&RawValue>>(text).map_or(1, |a| a.len());
                assert_eq!(rows.len(), expected, "row count");
                true
            }
            Err(_) => false,
        },
        "observer-sweep-commit" => match parse_findings(text) {
            Ok(findings) => {
                let items = serde_json::from_str::<Vec<&RawValue>>(text).map(|a| a.len());
                assert_eq!(items.ok(), Some(findings.len()), "findings are not one JSON array");
                true
            }
            Err(_) => false,
        },
        "proposals-patch" => {
            let (sets, decision) = parse_patch_stdin(text);
            for set in &sets {
                assert!(
                    text.lines().any(|l| l
                        .strip_prefix("Set:")
                        .is_some_and(|r| r.trim_start_matches([' ', '\t']) == set)),
                    "set {set:?} is not from a Set: line"
                );
            }
            if let Some(decision) = &decision {
                assert!(
                    !decision.is_empty() && decision.trim() == decision,
                    "decision {decision:?}"
                );
                assert!(!decision.contains('\n'), "decision spans lines");
            }
            !sets.is_empty() || decision.is_some()
        }
        "kv-put" | "queue-push" | "list-append" => check_value_command(verb, text),
        "feedback-add-comment" | "feedback-add-target" => {
            let call = stdin_call("moonshine:fuzz");
            let (target, comment) = if verb == "feedback-add-comment" {
                (r#"{"kind":"block","path":"docs/a.md"}"#, text)
            } else {
                (text, "a comment")
            };
            let ok = check_feedback(&call, &Input::Add { target, comment }).is_ok();
            if ok {
                assert!(comment.len() <= COMMENT_BYTES_MAX, "comment cap");
                assert!(validate_json("target", target).is_ok(), "target is not valid JSON");
            }
            ok
        }
        "proposals-queue-micro" => {
            let ok = hookstate_engine::parse_micro_input(text).is_ok();
            if ok {
                assert!(is_trimmed_json(), "a micro payload that is not JSON was accepted");
            }
            ok
        }
        "alerts-tick" => match hookstate_engine::parse_tick_input(text) {
            Ok(_) => {
                assert!(is_trimmed_json(), "a tick payload that is not JSON was accepted");
                true
            }
            Err(rejection) => {
                let reason = &rejection.reason;
                assert!(
                    !reason.is_empty() && reason.bytes().all(|b| b.is_ascii_graphic()),
                    "a rejection reason that is not one token: {reason:?}"
                );
                assert!(!rejection.unparseable || reason == "invalid-json", "{reason}");
                false
            }
        },
        _ => match hookstate_engine::parse_create(text) {
            Ok(input) => {
                assert!(!input.title.is_empty() && !input.body.is_empty(), "empty title or body");
                assert!(text.contains(input.title.as_str()), "title from nowhere");
                true
            }
            Err(_) => false,
        },
    };
    Some((index, accepted))
}

/// `Engine::check` of a command carrying the stdin text as its JSON value: what it accepts
/// validates as JSON on its own, within the value cap.
fn check_value_command(verb: &str, text: &str) -> bool {
    let call = stdin_call("fuzz");
    let command = match verb {
        "kv-put" => Command::KvPut {
            key: "k".into(),
            value: text.to_owned(),
            expect: hookstate_engine::Expect::Any,
        },
        "queue-push" => Command::QueuePush {
            queue: "q".into(),
            item: "i".into(),
            payload: text.to_owned(),
            for_session: None,
            max_deliveries: hookstate_engine::limits::DELIVERIES_DEFAULT,
        },
        _ => Command::ListAppend { list: "l".into(), row: text.to_owned(), cap: LIST_CAP },
    };
    let ok = hookstate_engine::check(&call, &command).is_ok();
    if ok {
        match validate_json("value", text) {
            Ok(value) => assert!(value.len() <= VALUE_BYTES_MAX, "value over the cap"),
            Err(err) => panic!("{verb} accepted a value validate_json refuses: {err}"),
        }
    }
    ok
}

/// Every legacy file parser never panics; what it accepts is written back as bytes that parse
/// again to the same records and are written back unchanged (an export re-imports as itself).
/// The first byte picks the kind (modulo the count), the rest is the file.
pub(crate) fn check_legacy_import(data: &[u8]) {
    let Some((&selector, file)) = data.split_first() else {
        return;
    };
    let kind = LegacyFile::ALL[usize::from(selector) % LegacyFile::ALL.len()];
    let Ok(parsed) = parse_legacy(kind, file) else {
        return;
    };
    let Some(written) = parsed.written_back else {
        return;
    };
    match parse_legacy(kind, &written) {
        Ok(again) => {
            assert_eq!(
                again.records, parsed.records,
                "{kind:?}: the write-back parses to other records"
            );
            assert_eq!(
                again.written_back.as_deref(),
                Some(written.as_slice()),
                "{kind:?}: the write-back is not a fixed point"
            );
        }
        Err(err) => panic!("{kind:?}: the write-back of an accepted file is refused: {err}"),
    }
}

/// The request decoder of `hookstate serve` (`decode_request`) never panics; a request it
/// accepts keeps every bound, and its canonical encoding decodes to the same request. The input
/// is also read as a stream of length-prefixed frames, each decoded in turn, as a connection
/// reads them: framing never panics either, and a frame over the bound is refused unread.
pub(crate) fn check_serve_request(data: &[u8]) {
    use hookstate_engine::{
        decode_request, encode_frame, read_frame, ClientFrame, FrameError, ARGS_BYTES_MAX,
        ARGS_COUNT_MAX, ENV_COUNT_MAX, REQUEST_BYTES_MAX,
    };
    let check = |payload: &[u8]| {
        let Ok(frame) = decode_request(payload) else {
            return;
        };
        if let ClientFrame::Run(run) = &frame {
            assert!(run.argv.len() <= ARGS_COUNT_MAX, "{} arguments accepted", run.argv.len());
            assert!(run.env.len() <= ENV_COUNT_MAX, "{} env entries accepted", run.env.len());
            let bytes: usize = run.argv.iter().map(String::len).sum::<usize>()
                + run.env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
            assert!(bytes <= ARGS_BYTES_MAX, "arguments of {bytes} bytes accepted");
            assert!(run.argv.iter().all(|a| !a.contains('\0')), "a NUL argument accepted");
            assert!(run.cwd.as_ref().is_none_or(|c| c.starts_with('/')), "a relative cwd accepted");
        }
        let again = decode_request(&encode_frame(&frame));
        assert_eq!(again.as_ref(), Ok(&frame), "an accepted request does not round-trip");
    };
    check(data);
    let mut stream = data;
    loop {
        match read_frame(&mut stream, REQUEST_BYTES_MAX) {
            Ok(payload) => check(&payload),
            Err(FrameError::TooLarge { len, max }) => {
                assert!(len > max, "a frame of {len} bytes refused under {max}");
                break;
            }
            Err(_) => break,
        }
    }
}
