//! The values of the write path every domain shares: who calls ([`Call`]), what a decision wants
//! done ([`Plan`]), a definite "no" ([`Refusal`]) and the answer ([`Outcome`]).
//!
//! Plain data with no IO. Does not decide anything; the domains do, and the kernel's write path
//! runs their plans.

use hookstate_schema::format::{self, Head};
use hookstate_schema::{Actor, Body};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::kernel::limits::CLOCK_RAISE_MS_MAX;
use crate::kernel::storage::ReadTxn;

/// Who calls, for which scope, at what time, with which idempotency key.
///
/// Built with [`Call::new`] (timed by the store) or [`Call::at`] (a pinned time), then
/// [`Call::by`], [`Call::with_idem_key`] and [`Call::with_fingerprint`]. The fields are public to
/// read and to set; outside this crate the struct cannot be written literally
/// (`#[non_exhaustive]`), so a field added later does not break a caller.
///
/// # Examples
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use hookstate_engine::{Call, Command, Engine, Expect, OpenOptions};
/// let dir = tempfile::tempdir()?;
/// let engine = Engine::open(&dir.path().join("state.redb"), OpenOptions::default())?;
/// let put = Command::KvPut { key: "k".into(), value: "1".into(), expect: Expect::Any };
/// // Timed by the store; a retry under the same key answers the first call's result.
/// let call = Call::new("my-plugin").with_idem_key("turn-7");
/// let first = engine.execute(&call, &put)?;
/// let again = engine.execute(&call, &put)?;
/// assert!(again.replayed && again.head == first.head);
/// // A test clock: the call's own time, whatever the store's clock says.
/// let pinned = Call::at("my-plugin", 1_700_000_000_000);
/// assert!(pinned.now_pinned && !call.now_pinned);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Call {
    /// The scope the command acts in.
    pub scope: String,
    /// Who is calling.
    pub actor: Actor,
    /// A repeated call with the same key returns the first call's result and appends nothing.
    pub idem_key: Option<String>,
    /// What the call asks, for an idempotency key to be bound to: the same key with another
    /// fingerprint is refused. `None` binds nothing (an engine caller without a request to show).
    pub fingerprint: Option<Fingerprint>,
    /// Now, in UTC ms (injected so tests control time).
    pub now_ms: u64,
    /// `now_ms` is the call's time whatever the store: a test clock (`HOOKSTATE_NOW_MS`, a
    /// served call that carries one). `false` lets the writer time the call by the store's
    /// clock, read once its transaction holds the write lock (the database server's clock for
    /// PostgreSQL, the host's for redb), so event times follow log order; `now_ms` then only
    /// times what is answered without a write.
    pub now_pinned: bool,
}

/// The host's clock in UTC ms (0 before 1970): what a call is timed by when nothing pins its
/// time, read by the CLI for a call and by a redb writer once it holds the write lock.
#[must_use]
pub fn now_ms() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0)
}

/// The time a store's writer times its calls by: the clock `clock_ms` it read once it held the
/// write lock, raised to the time of the log's last event (`last_ms`) when the clock is behind it
/// by at most [`CLOCK_RAISE_MS_MAX`] (a clock stepped back), so event times follow log order.
pub(crate) fn store_clock(clock_ms: u64, last_ms: Option<u64>) -> u64 {
    match last_ms {
        Some(last) if last > clock_ms && last - clock_ms <= CLOCK_RAISE_MS_MAX => last,
        _ => clock_ms,
    }
}

/// The fingerprint of a request: its verb and a digest of the verb, its arguments (without the
/// flags that do not change what it does) and its stdin (`format::request_digest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// The verb, for messages (`kv put`, `hook claim`).
    pub verb: String,
    /// The digest.
    pub digest: [u8; 32],
}

impl Call {
    /// A call in `scope` by nobody in particular ([`Actor::default`]), without an idempotency
    /// key, timed by the store: the writer reads its clock once it holds the write lock, so
    /// event times follow log order. `now_ms` is the host's clock now, for what is answered
    /// without a write.
    #[must_use]
    pub fn new(scope: impl Into<String>) -> Call {
        Call {
            scope: scope.into(),
            actor: Actor::default(),
            idem_key: None,
            fingerprint: None,
            now_ms: now_ms(),
            now_pinned: false,
        }
    }

    /// [`Call::new`] at a time of the caller's (a test clock, a replayed request): `now_ms` is
    /// the call's time whatever the store's clock says.
    #[must_use]
    pub fn at(scope: impl Into<String>, now_ms: u64) -> Call {
        Call { now_ms, now_pinned: true, ..Call::new(scope) }
    }

    /// The same call made by `actor`.
    #[must_use]
    pub fn by(self, actor: Actor) -> Call {
        Call { actor, ..self }
    }

    /// The same call under an idempotency key: a repeat with the key returns the first answer.
    #[must_use]
    pub fn with_idem_key(self, key: impl Into<String>) -> Call {
        Call { idem_key: Some(key.into()), ..self }
    }

    /// The same call bound to what it asks (see [`Call::fingerprint`]).
    #[must_use]
    pub fn with_fingerprint(self, fingerprint: Fingerprint) -> Call {
        Call { fingerprint: Some(fingerprint), ..self }
    }

    /// The call's time in `txn`: its own when pinned or when the transaction has no clock, else
    /// the transaction's (see [`Call::now_pinned`]).
    pub(crate) fn now_in(&self, txn: &dyn ReadTxn) -> u64 {
        match txn.clock_ms() {
            Some(clock_ms) if !self.now_pinned => clock_ms,
            _ => self.now_ms,
        }
    }

    /// The same call in another scope (a bundle's, a project's).
    #[must_use]
    pub fn in_scope(&self, scope: &str) -> Call {
        Call { scope: scope.to_owned(), ..self.clone() }
    }

    /// The same call without its idempotency key: what a mirror's adoption of outside writes
    /// runs as. The key names the verb's own write; an adoption carrying it would leave the key's
    /// replay row behind, so the verb itself would be skipped as a repeat.
    #[must_use]
    pub fn without_idem_key(&self) -> Call {
        Call { idem_key: None, fingerprint: None, ..self.clone() }
    }
}

/// A definite "no": the answer to a call whose compare failed or whose move is illegal. A value,
/// not an error: nothing was appended and the caller may retry later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// A stable machine-readable reason (`held`, `stale_token`, `rev_mismatch`, ...).
    pub reason: &'static str,
    /// One printable line for stderr.
    pub message: String,
    /// Details for the JSON result.
    pub details: Map<String, Value>,
    /// The refusal is an answer the upstream script prints as its verdict with exit 0
    /// (`DUPLICATE|…`, `NONE|no-match`): with `--format verdict` the call succeeds.
    pub verdict_ok: bool,
}

impl Refusal {
    /// A refusal with its details given as a JSON object (anything else means no details).
    #[must_use]
    pub fn new(reason: &'static str, message: String, details: Value) -> Refusal {
        Refusal { reason, message, details: fields(details), verdict_ok: false }
    }

    /// The same refusal, marked as an answer upstream prints with exit 0.
    #[must_use]
    pub fn verdict_ok(self) -> Refusal {
        Refusal { verdict_ok: true, ..self }
    }
}

/// The fields of a JSON object; nothing for any other value.
pub(crate) fn fields(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// What one mutation wants done: the events to append (in order), the caller's result fields, and
/// a refusal when the answer is "no". A domain's decision becomes a plan.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Plan {
    /// Events in the call's scope.
    pub(crate) events: Vec<Body>,
    /// Events in other scopes (an import spans several), appended after `events`.
    pub(crate) scoped_events: Vec<(String, Body)>,
    pub(crate) result: Map<String, Value>,
    pub(crate) refusal: Option<Refusal>,
}

impl Plan {
    /// A plan of one event in the call's scope with its result fields.
    pub(crate) fn one(body: Body, result: Value) -> Plan {
        Plan { events: vec![body], result: fields(result), ..Plan::default() }
    }

    /// A plan that appends nothing and answers `result`.
    pub(crate) fn answer(result: Value) -> Plan {
        Plan { result: fields(result), ..Plan::default() }
    }

    /// A refusal: nothing appended.
    pub(crate) fn refuse(reason: &'static str, message: String, details: Value) -> Plan {
        Plan { refusal: Some(Refusal::new(reason, message, details)), ..Plan::default() }
    }
}

/// A record whose outside change could not be adopted: the store's version stays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// The file, relative to the mirror directory.
    pub file: String,
    /// The record in it (an entry id, a key, a field).
    pub record: String,
    /// Why the outside version was not adopted.
    pub why: String,
}

/// What one mirrored call did to its directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MirrorReport {
    /// Events appended to adopt outside changes.
    pub adopted: u64,
    /// Files written.
    pub written: Vec<String>,
    /// Files removed because the store consumed what they asked for (a one-shot request).
    pub removed: Vec<String>,
    /// Files another writer changed during the call, left for the next call to adopt.
    pub kept: Vec<String>,
    /// Corrupt files renamed aside.
    pub quarantined: Vec<String>,
    /// Records whose outside change was not adopted (at most `CONFLICTS_SHOWN_MAX`).
    pub conflicts: Vec<Conflict>,
}

/// The answer to a command.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Result fields.
    pub result: Map<String, Value>,
    /// Set when the answer is a definite "no".
    pub refusal: Option<Refusal>,
    /// The head after the call.
    pub head: Head,
    /// Events this call appended (0 for a refusal or a no-op).
    pub appended: u64,
    /// Whether this is the replayed result of an earlier call with the same idempotency key.
    pub replayed: bool,
    /// What the mirror did, for a mirrored call.
    pub mirror: Option<MirrorReport>,
}

impl Outcome {
    /// The one JSON object the CLI prints: `ok`, the result fields, and `seq`/`hash` of the last
    /// event when the call appended or replayed events.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("ok".into(), Value::Bool(self.refusal.is_none()));
        if let Some(refusal) = &self.refusal {
            out.insert("refused".into(), Value::String(refusal.reason.into()));
            out.extend(refusal.details.clone());
        }
        out.extend(self.result.clone());
        if self.appended > 0 || self.replayed {
            out.insert("seq".into(), Value::from(self.head.seq));
            out.insert("hash".into(), Value::String(format::to_hex(&self.head.hash)));
        }
        if self.replayed {
            out.insert("replayed".into(), Value::Bool(true));
        }
        if let Some(report) = self.mirror.as_ref().filter(|r| !r.conflicts.is_empty()) {
            let conflicts = serde_json::to_value(&report.conflicts).unwrap_or(Value::Null);
            out.insert("mirror_conflicts".into(), conflicts);
        }
        Value::Object(out)
    }
}
