//! The monitor and liveness verbs of `engine.alerts()`: `heartbeat.ts start-check`,
//! `start-commit` (with its bounded wait for the first liveness peek), the skill's stop, the
//! health check, liveness peeks and reads, and the injection alert's record and check; with the
//! setup they compare the registration with, built from the arguments and the scope's settings.
//!
//! Decisions are `heartbeat.rs`'s; does not touch legacy files.

use std::time::{Duration, Instant};

use hookstate_schema::validate_scope;
use serde::Serialize;
use serde_json::{Map, Value};

use super::api::{read_file, read_object, Alerts};
use super::config::{scope_config, state_dir};
use super::heartbeat::{answer, check_setup, decide_check, decide_commit, done, removed, written};
use super::heartbeat::{INJECTION_FILE, LIVENESS_FILE, MONITOR_FILE};
use super::heartbeat_rules::{self as rules, Layout, MonitorSetup};
use super::heartbeat_rules::{INTERVAL_S_DEFAULT, LIVENESS_POLL_MS, LIVENESS_WAIT_MS_MAX};
use crate::kernel::call::{Call, Outcome};
use crate::kernel::compat::stamp::{stamp_ms, stamp_s};
use crate::kernel::error::{Error, Result};

/// What the monitor verbs are given: the interval, the plugin root and the boot id, each
/// defaulting to what the state directory says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorArgs {
    /// `--interval` [default: `config.heartbeat.every`, else 1800 s].
    pub interval_s: Option<u64>,
    /// The plugin root whose `scripts/heartbeat-monitor.sh` the command runs.
    pub plugin_root: String,
    /// `--boot-id` [default: `state/.boot-id`].
    pub boot_id: Option<String>,
}

/// What the monitor verbs compare the registration with, built from `args` and the scope's
/// settings (the command names the scope's directory).
///
/// # Errors
/// [`Error::OutOfRange`], [`Error::BadInput`] for a bad interval, command or boot id;
/// [`Error::LegacyFile`] for a bad config.
pub fn monitor_setup(scope: &str, args: &MonitorArgs) -> Result<MonitorSetup> {
    let config = scope_config(scope)?;
    let dir = state_dir(scope)?.to_string_lossy().into_owned();
    let interval_s = args.interval_s.or(config.every_s).unwrap_or(INTERVAL_S_DEFAULT).max(1);
    let setup = MonitorSetup {
        interval_s,
        command: rules::monitor_command(&args.plugin_root, interval_s, &dir),
        boot_id: args.boot_id.clone().or(config.boot_id),
        disabled: config.heartbeat_disabled,
    };
    check_setup(&setup)?;
    Ok(setup)
}

/// Checks start-commit's wait for the first liveness peek: at most [`LIVENESS_WAIT_MS_MAX`].
///
/// # Errors
/// [`Error::OutOfRange`].
pub fn check_liveness_wait(wait_ms: u64) -> Result<()> {
    if wait_ms > LIVENESS_WAIT_MS_MAX {
        let (what, value, max) = ("--liveness-wait-ms", wait_ms, LIVENESS_WAIT_MS_MAX);
        return Err(Error::OutOfRange { what, value, min: 0, max, unit: " ms" });
    }
    Ok(())
}

/// A stop's result.
#[derive(Serialize)]
struct Stopped {
    stopped: bool,
}

/// A peek's result: its stamp.
#[derive(Serialize)]
struct Peeked<'a> {
    last_peek_at: &'a str,
}

/// An injection record's result.
#[derive(Serialize)]
struct Announced<'a> {
    hash: &'a str,
    announced_at: &'a str,
}

/// `monitor status`: upstream's `heartbeatHealth`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MonitorStatus {
    /// Whether the registered monitor is healthy.
    pub healthy: bool,
    /// `fresh`, `runtime-missing`, `boot-mismatch`, `interval-drift`, …
    pub reason: String,
    /// `HEALTHY|<reason>` or `UNHEALTHY|<reason>`.
    pub verdict: String,
}

/// `liveness read`: `lib/liveness.ts` on the liveness record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LivenessRead {
    /// `alive` or `unknown` (a stale or absent record is unknown, never dead).
    pub state: &'static str,
    /// The last peek's age in seconds, when there is one.
    pub age_s: Option<u64>,
    /// `ALIVE|age=<s>`, `UNKNOWN|stale` or `UNKNOWN|absent`.
    pub verdict: String,
}

/// `injection check`: the precheck's damping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InjectionRead {
    /// Whether the hash is the announced one.
    pub announced: bool,
    /// The hash asked about.
    pub hash: String,
    /// The announced hash, when there is one.
    pub stored_hash: Option<String>,
    /// `SKIP|injection-suspect (announced)` or `NEW|<hash>`.
    pub verdict: String,
}

impl Alerts<'_> {
    /// `heartbeat.ts start-check`: FRESH, or REARM with its lines (deletes the liveness record and
    /// stamps `armed_at` into `{...previous}`).
    ///
    /// # Errors
    /// [`Error::OutOfRange`], [`Error::BadInput`] for a bad setup; store errors.
    pub fn monitor_check(&self, call: &Call, setup: &MonitorSetup) -> Result<Outcome> {
        check_setup(setup)?;
        self.heartbeat_write(call, |txn| {
            let runtime = read_object(txn, &call.scope, MONITOR_FILE)?;
            let liveness = read_object(txn, &call.scope, LIVENESS_FILE)?;
            Ok(decide_check(runtime.as_ref(), liveness.as_ref(), setup, call.now_ms))
        })
    }

    /// `heartbeat.ts start-commit`: waits (at most `wait_ms`, upstream's `waitForFirstTick`) for
    /// a liveness record, then writes the registration; `OK|registered|interval=N` when a
    /// liveness record exists, else `DEAD|liveness-absent` (the registration is written either
    /// way, as upstream does). The call's clock is moved on by the wait, so `started_at` is the
    /// time of the write.
    ///
    /// # Errors
    /// [`Error::BadInput`] for a bad task id, [`Error::OutOfRange`] for a long wait; store
    /// errors.
    pub fn monitor_commit(
        &self,
        call: &Call,
        setup: &MonitorSetup,
        task_id: &str,
        wait_ms: u64,
    ) -> Result<Outcome> {
        check_setup(setup)?;
        rules::check_stamp("task id", task_id)?;
        check_liveness_wait(wait_ms)?;
        validate_scope(&call.scope)?;
        let waited_ms = self.wait_for_liveness(&call.scope, wait_ms)?;
        let call = Call { now_ms: call.now_ms.saturating_add(waited_ms), ..call.clone() };
        self.heartbeat_write(&call, |txn| {
            let runtime = read_object(txn, &call.scope, MONITOR_FILE)?;
            let liveness = read_object(txn, &call.scope, LIVENESS_FILE)?;
            Ok(decide_commit(runtime.as_ref(), liveness.as_ref(), setup, task_id, call.now_ms))
        })
    }

    /// Polls the liveness record until it exists or `wait_ms` ran out; the ms waited.
    fn wait_for_liveness(&self, scope: &str, wait_ms: u64) -> Result<u64> {
        let start = Instant::now();
        let deadline = start + Duration::from_millis(wait_ms);
        while self.liveness(scope)?.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(LIVENESS_POLL_MS));
        }
        Ok(u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX).min(wait_ms))
    }

    /// The skill's stop: the runtime record becomes `{}` and the liveness record is deleted.
    ///
    /// # Errors
    /// Store errors.
    pub fn monitor_stop(&self, call: &Call) -> Result<Outcome> {
        self.heartbeat_write(call, |txn| {
            let mut events = vec![written(MONITOR_FILE, "{}\n".into(), "monitor stop")];
            if read_file(txn, &call.scope, LIVENESS_FILE)?.is_some() {
                events.push(removed(LIVENESS_FILE, "monitor stop"));
            }
            Ok(done(events, answer("OK|stopped", Stopped { stopped: true })))
        })
    }

    /// `heartbeatHealth` of the registered monitor (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn monitor_status(
        &self,
        scope: &str,
        setup: &MonitorSetup,
        now_ms: u64,
    ) -> Result<MonitorStatus> {
        validate_scope(scope)?;
        let txn = self.k.begin_read()?;
        let runtime = read_object(&*txn, scope, MONITOR_FILE)?;
        let liveness = read_object(&*txn, scope, LIVENESS_FILE)?;
        let (healthy, reason) =
            rules::monitor_health(runtime.as_ref(), liveness.as_ref(), setup, now_ms);
        let verdict = format!("{}|{reason}", if healthy { "HEALTHY" } else { "UNHEALTHY" });
        Ok(MonitorStatus { healthy, reason, verdict })
    }

    /// The liveness record (read-only), `None` when absent.
    ///
    /// # Errors
    /// Store errors.
    pub fn liveness(&self, scope: &str) -> Result<Option<Map<String, Value>>> {
        validate_scope(scope)?;
        read_object(&*self.k.begin_read()?, scope, LIVENESS_FILE)
    }

    /// `lib/liveness.ts` on the liveness record: alive when the last peek is at most
    /// `LIVENESS_FRESH_S` old; a stale or absent record is unknown, never dead.
    ///
    /// # Errors
    /// Store errors.
    pub fn liveness_read(&self, scope: &str, now_ms: u64) -> Result<LivenessRead> {
        let age = rules::peek_age_s(self.liveness(scope)?.as_ref(), now_ms);
        let alive = age.is_some_and(|a| a <= rules::LIVENESS_FRESH_S);
        let verdict = match (alive, age) {
            (true, Some(age)) => format!("ALIVE|age={age}"),
            (_, Some(_)) => "UNKNOWN|stale".to_owned(),
            (_, None) => "UNKNOWN|absent".to_owned(),
        };
        Ok(LivenessRead { state: if alive { "alive" } else { "unknown" }, age_s: age, verdict })
    }

    /// One `heartbeat-monitor.sh` poll: writes `{"last_peek_at":"<UTC, whole seconds>"}`.
    ///
    /// # Errors
    /// Store errors.
    pub fn liveness_peek(&self, call: &Call) -> Result<Outcome> {
        let stamp = stamp_s(call.now_ms);
        let mut map = Map::new();
        map.insert("last_peek_at".into(), stamp.clone().into());
        let text = rules::render_object(&map, Layout::Compact);
        self.heartbeat_write(call, |_| {
            let events = vec![written(LIVENESS_FILE, text.clone(), "liveness peek")];
            let result = Peeked { last_peek_at: &stamp };
            Ok(done(events, answer(&format!("OK|peek|{stamp}"), result)))
        })
    }

    /// The skill's ALERT branch: overwrites the injection alert with `{hash, announced_at}`
    /// (default: now, toISOString), in the stored file's layout (compact when new).
    ///
    /// # Errors
    /// [`Error::BadInput`] for a bad hash or stamp; store errors.
    pub fn injection_record(
        &self,
        call: &Call,
        hash: &str,
        announced_at: Option<&str>,
    ) -> Result<Outcome> {
        rules::check_hash(hash)?;
        rules::check_time(call.now_ms)?;
        let stamp = announced_at.map_or_else(|| stamp_ms(call.now_ms), str::to_owned);
        rules::check_stamp("announced_at", &stamp)?;
        let mut map = Map::new();
        map.insert("hash".into(), hash.into());
        map.insert("announced_at".into(), stamp.clone().into());
        self.heartbeat_write(call, |txn| {
            let layout = read_file(txn, &call.scope, INJECTION_FILE)?
                .map_or(Layout::Compact, |t| rules::layout_of(&t));
            let text = rules::render_object(&map, layout);
            let events = vec![written(INJECTION_FILE, text, "injection record")];
            let result = Announced { hash, announced_at: &stamp };
            Ok(done(events, answer(&format!("OK|recorded|{hash}"), result)))
        })
    }

    /// The precheck's damping (read-only): whether `hash` is the announced one.
    ///
    /// # Errors
    /// [`Error::BadInput`] for a bad hash; store errors.
    pub fn injection_check(&self, scope: &str, hash: &str) -> Result<InjectionRead> {
        rules::check_hash(hash)?;
        validate_scope(scope)?;
        let stored = read_object(&*self.k.begin_read()?, scope, INJECTION_FILE)?;
        let stored = stored.and_then(|m| m.get("hash").and_then(Value::as_str).map(str::to_owned));
        let announced = stored.as_deref() == Some(hash);
        let verdict = if announced {
            "SKIP|injection-suspect (announced)".to_owned()
        } else {
            format!("NEW|{hash}")
        };
        Ok(InjectionRead { announced, hash: hash.to_owned(), stored_hash: stored, verdict })
    }
}
