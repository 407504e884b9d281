//! End-to-end tests of the `hookstate` binary on PostgreSQL only: every verb on a database store,
//! `copy` both ways with identical heads, the schema version (a newer one refused), TLS against
//! the server's self-signed certificate, the password kept out of every error and of `stats`,
//! and the several-host claim race ([`hosts`]).
//!
//! They need `HOOKSTATE_TEST_PG_URL` (scripts/test-pg.sh sets it, with the server's CA in
//! `HOOKSTATE_TEST_PG_CA`); without it each test says it was skipped, unless
//! `HOOKSTATE_TEST_PG_REQUIRED` is set, where it fails. Does not start a server itself, except
//! the race, which runs its own.
#![allow(clippy::unwrap_used, reason = "integration tests fail loudly on any unexpected error")]

mod hosts;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

/// The password of the test cluster's role (scripts/pg-cluster.sh).
const PASSWORD: &str = "hookstate-test-pw";

/// One run of the binary: its exit code, stdout and stderr.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }

    fn expect(self, code: i32) -> Run {
        assert_eq!(self.code, code, "{self:?}");
        self
    }
}

/// The test database's address, or `None` (with a message) when the run has none.
fn base() -> Option<String> {
    match hookstate_testkit::pg_url() {
        Some(url) => Some(url),
        None if std::env::var_os("HOOKSTATE_TEST_PG_REQUIRED").is_some() => {
            panic!("HOOKSTATE_TEST_PG_REQUIRED is set but HOOKSTATE_TEST_PG_URL is not")
        }
        None => {
            eprintln!("skipped: HOOKSTATE_TEST_PG_URL names no PostgreSQL database");
            None
        }
    }
}

/// A new, empty schema of the test database and its address.
fn fresh(base: &str, name: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let schema =
        format!("hs_{name}_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    hookstate_testkit::schema_address(base, &schema)
}

/// The binary with the environment that could change a call cleared, HOME (where a remote
/// store's per-host anchor lives by default) in `home`.
pub(crate) fn hookstate(home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hookstate"));
    command
        .env("HOME", home)
        .env_remove("HOOKSTATE_ANCHOR_DIR")
        .env_remove("HOOKSTATE_DB")
        .env_remove("HOOKSTATE_SESSION")
        .env_remove("HOOKSTATE_SCOPE")
        .env_remove("HOOKSTATE_NOW_MS");
    command
}

pub(crate) fn finish(command: &mut Command) -> Run {
    let out = command.output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn run(home: &Path, db: &str, args: &[&str]) -> Run {
    finish(hookstate(home).arg("--db").arg(db).args(args))
}

fn head(run: &Run) -> (u64, String) {
    let json = run.json();
    (json["seq"].as_u64().unwrap(), json["hash"].as_str().unwrap().to_owned())
}

/// Runs SQL on the database of `address` (a store's schema through its search_path).
fn sql(address: &str, statements: &str) {
    let mut client = postgres::Client::connect(address, postgres::NoTls).unwrap();
    client.batch_execute(statements).unwrap();
}

#[test]
fn every_kind_of_verb_works_on_a_database_store() {
    let Some(base) = base() else { return };
    let home = tempfile::tempdir().unwrap();
    let db = fresh(&base, "verbs");
    let init = run(home.path(), &db, &["init"]).expect(0).json();
    assert_eq!(init["seq"], 0, "{init}");
    run(home.path(), &db, &["kv", "put", "k", "{\"n\":1}"]).expect(0);
    let got = run(home.path(), &db, &["kv", "get", "k"]).expect(0).json();
    assert_eq!(got["value"]["n"], 1, "{got}");
    run(home.path(), &db, &["queue", "push", "q", "a", "{}"]).expect(0);
    let claim = run(home.path(), &db, &["queue", "claim", "q", "--holder", "h"]).expect(0).json();
    assert_eq!(claim["claimed"], true, "{claim}");
    let again = run(home.path(), &db, &["queue", "claim", "q", "--holder", "h2"]).expect(0).json();
    assert_eq!(again["claimed"], false, "a held item is not claimed twice: {again}");
    let token = claim["token"].to_string();
    let stale = run(home.path(), &db, &["queue", "ack", "q", "a", "--token", "99"]);
    assert_eq!(stale.code, 1, "a stale token is refused: {stale:?}");
    run(home.path(), &db, &["queue", "ack", "q", "a", "--token", &token]).expect(0);
    // The server's clock times the claim (no --now-ms): within a minute of this machine's.
    let now_ms = i64::try_from(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis(),
    )
    .unwrap();
    let lease_until = claim["lease_until_ms"].as_i64().unwrap();
    assert!((lease_until - 300_000 - now_ms).abs() < 60_000, "{claim}");
    // An idempotency key replays on PostgreSQL too.
    let first = run(home.path(), &db, &["--idem-key", "i1", "counter", "add", "c"]).expect(0);
    let replay = run(home.path(), &db, &["--idem-key", "i1", "counter", "add", "c"]).expect(0);
    assert_eq!(replay.json()["replayed"], true, "{replay:?}");
    assert_eq!(replay.json()["value"], first.json()["value"]);
    let verify = run(home.path(), &db, &["verify"]).expect(0).json();
    assert_eq!(verify["ok"], true, "{verify}");
    let rebuild = run(home.path(), &db, &["rebuild"]).expect(0).json();
    assert_eq!(rebuild["ok"], true, "{rebuild}");
    let stats = run(home.path(), &db, &["stats"]).expect(0);
    assert_eq!(stats.json()["events"], verify["events"], "{stats:?}");
    assert!(!stats.stdout.contains(PASSWORD), "stats shows the password: {}", stats.stdout);
    let log = run(home.path(), &db, &["log", "--kind", "item_acked"]).expect(0);
    assert_eq!(log.stdout.lines().count(), 1, "{log:?}");
}

#[test]
fn copy_round_trips_a_store_between_the_backends_with_identical_heads() {
    let Some(base) = base() else { return };
    let home = tempfile::tempdir().unwrap();
    let source = fresh(&base, "copysrc");
    for n in 0..20 {
        run(home.path(), &source, &["kv", "put", &format!("k{n}"), &n.to_string()]).expect(0);
    }
    run(home.path(), &source, &["queue", "push", "q", "a", "{}"]).expect(0);
    run(home.path(), &source, &["queue", "claim", "q"]).expect(0);
    let source_head = head(&run(home.path(), &source, &["verify"]).expect(0));

    let file = home.path().join("copy/state.redb");
    let to_file =
        run(home.path(), &source, &["copy", "--from", &source, "--to", file.to_str().unwrap()]);
    let to_file = to_file.expect(0).json();
    assert_eq!(
        (to_file["seq"].as_u64().unwrap(), to_file["hash"].as_str().unwrap()),
        (source_head.0, source_head.1.as_str())
    );
    let file_head = head(&finish(hookstate(home.path()).arg("--db").arg(&file).arg("verify")));
    assert_eq!(file_head, source_head, "the file copy verifies at the source's head");

    let back = fresh(&base, "copyback");
    let file_text = file.to_str().unwrap();
    run(home.path(), &back, &["copy", "--from", file_text, "--to", &back]).expect(0);
    let back_head = head(&run(home.path(), &back, &["verify"]).expect(0));
    assert_eq!(back_head, source_head, "the database copy of the copy verifies at the same head");
    let listed = run(home.path(), &back, &["queue", "list", "q"]).expect(0).json();
    assert_eq!(listed["claimed"], 1, "the views are rebuilt: {listed}");

    // A destination that holds events, or a file that exists, is refused and left as it was.
    let refused = run(home.path(), &back, &["copy", "--from", &source, "--to", &back]);
    assert_eq!(refused.code, 3, "{refused:?}");
    assert_eq!(head(&run(home.path(), &back, &["verify"]).expect(0)), back_head);
    let refused = run(home.path(), &source, &["copy", "--from", &source, "--to", file_text]);
    assert_eq!(refused.code, 3, "{refused:?}");

    // A compacted store is copied from its base, both ways: it failed with "chain broken"
    // (exit 5) for the events the compaction had dropped.
    run(home.path(), &back, &["checkpoint"]).expect(0);
    run(home.path(), &back, &["compact", "--keep", "0"]).expect(0);
    run(home.path(), &back, &["counter", "add", "c"]).expect(0);
    let compacted_head = head(&run(home.path(), &back, &["verify"]).expect(0));
    let file = home.path().join("compacted/state.redb");
    let file_text = file.to_str().unwrap();
    let copied = run(home.path(), &back, &["copy", "--from", &back, "--to", file_text]).expect(0);
    assert_eq!(copied.json()["events"], 2, "the checkpoint's record and the add: {copied:?}");
    let again = fresh(&base, "copyagain");
    run(home.path(), &again, &["copy", "--from", file_text, "--to", &again]).expect(0);
    let verified = run(home.path(), &again, &["verify"]).expect(0);
    assert_eq!(head(&verified), compacted_head);
    assert_eq!(verified.json()["from_checkpoint"], source_head.0, "{verified:?}");
    assert_eq!(run(home.path(), &again, &["counter", "get", "c"]).expect(0).json()["value"], 1);
    let listed = run(home.path(), &again, &["queue", "list", "q"]).expect(0).json();
    assert_eq!(listed["claimed"], 1, "the base's views came along: {listed}");
}

#[test]
fn a_schema_written_by_a_newer_build_is_refused_by_every_verb() {
    let Some(base) = base() else { return };
    let home = tempfile::tempdir().unwrap();
    let db = fresh(&base, "newer");
    run(home.path(), &db, &["init"]).expect(0);
    let init = run(home.path(), &db, &["init"]).expect(0).json();
    assert_eq!(init["seq"], 0, "init twice is init once: {init}");
    sql(&db, "UPDATE hookstate_version SET version = version + 1");
    for args in [&["init"][..], &["kv", "put", "k", "1"], &["kv", "get", "k"], &["verify"]] {
        let refused = run(home.path(), &db, args);
        assert_eq!(refused.code, 5, "{args:?}: {refused:?}");
        assert!(refused.stderr.contains("newer than this build"), "{refused:?}");
    }
}

#[test]
fn the_password_never_appears_in_errors_or_stats() {
    let Some(base) = base() else { return };
    let home = tempfile::tempdir().unwrap();
    assert!(base.contains(PASSWORD), "the test address carries the password");
    let wrong = base.replace(PASSWORD, "not-the-password-x1");
    let wrong_password = run(home.path(), &wrong, &["kv", "put", "k", "1"]);
    let no_database = base.rsplit_once('/').map(|(head, _)| format!("{head}/absent_db")).unwrap();
    let no_database = run(home.path(), &no_database, &["stats"]);
    let bad_option = format!("{base}?bogus_option=1");
    let bad_option = run(home.path(), &bad_option, &["init"]);
    let no_ca = format!("{base}?sslmode=require");
    let no_ca = run(home.path(), &no_ca, &["init"]);
    for (what, out) in [
        ("wrong password", &wrong_password),
        ("no such database", &no_database),
        ("bad option", &bad_option),
        ("TLS without a CA", &no_ca),
    ] {
        assert!(![0, 2].contains(&out.code), "{what}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{what}: one line: {out:?}");
        for secret in [PASSWORD, "not-the-password-x1"] {
            assert!(!out.stderr.contains(secret), "{what} shows the password: {out:?}");
            assert!(!out.stdout.contains(secret), "{what} shows the password: {out:?}");
        }
    }
    let db = fresh(&base, "pw");
    let stats = run(home.path(), &db, &["stats"]).expect(0);
    assert!(!stats.stdout.contains(PASSWORD), "{stats:?}");
    assert!(stats.stdout.contains("postgres://hookstate@"), "stats names the store: {stats:?}");
}

#[test]
fn tls_verifies_the_servers_self_signed_certificate() {
    let Some(base) = base() else { return };
    // scripts/test-pg.sh's own cluster always names its CA; a database given from outside may
    // have none.
    let Some(ca) = std::env::var_os("HOOKSTATE_TEST_PG_CA").map(PathBuf::from) else {
        eprintln!("skipped: HOOKSTATE_TEST_PG_CA names no CA certificate of the server");
        return;
    };
    let home = tempfile::tempdir().unwrap();
    // The cluster's database that refuses connections without TLS, by the certificate's name.
    let (server, _) = base.rsplit_once('/').unwrap();
    let db = format!("{}/hookstate_tls", server.replace("@127.0.0.1:", "@localhost:"));
    let tls = format!("{db}?sslmode=require&sslrootcert={}", ca.display());
    let item = format!("i{}", std::process::id());
    run(home.path(), &tls, &["queue", "push", "q", &item, "{}"]).expect(0);
    let claim = run(home.path(), &tls, &["queue", "claim", "q", "--item", &item]).expect(0);
    assert_eq!(claim.json()["claimed"], true, "{claim:?}");
    run(home.path(), &tls, &["verify"]).expect(0);
    let stats = run(home.path(), &tls, &["stats"]).expect(0);
    assert!(!stats.stdout.contains(PASSWORD), "{stats:?}");
    // The same database without TLS is refused: the calls above were encrypted.
    let plain = run(home.path(), &db, &["kv", "get", "k"]);
    assert_eq!(plain.code, 6, "{plain:?}");
    // A certificate that is not the server's is refused, naming no password.
    let other = home.path().join("other.pem");
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(home.path().join("other.key"))
        .arg("-out")
        .arg(&other)
        .output()
        .unwrap();
    assert!(made.status.success(), "openssl: {made:?}");
    let wrong = format!("{db}?sslmode=require&sslrootcert={}", other.display());
    let refused = run(home.path(), &wrong, &["kv", "get", "k"]);
    assert!(![0, 2].contains(&refused.code), "{refused:?}");
    assert!(!refused.stderr.contains(PASSWORD), "{refused:?}");
}

/// Every path under `dir`, sorted: what a refused verb must leave as it was.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(next) = todo.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path.clone());
            }
            out.push(path);
        }
    }
    out.sort();
    out
}

#[test]
fn metrics_checkpoint_compact_and_backup_work_on_a_database_store() {
    let Some(base) = base() else { return };
    let home = tempfile::tempdir().unwrap();
    let db = fresh(&base, "ops");
    for n in 0..5 {
        run(home.path(), &db, &["kv", "put", &format!("k{n}"), &n.to_string()]).expect(0);
    }
    run(home.path(), &db, &["queue", "push", "q", "a", "{}"]).expect(0);
    let metrics = run(home.path(), &db, &["metrics"]).expect(0).json();
    assert!(metrics["file_bytes"].as_u64().unwrap() > 0, "the tables' size: {metrics}");
    assert_eq!(metrics["events_per_domain"]["core"], 6, "{metrics}");
    assert_eq!(metrics["queues"][0]["ready"], 1, "{metrics}");
    let text = run(home.path(), &db, &["metrics", "--prometheus"]).expect(0).stdout;
    assert!(text.contains("hookstate_events_total{domain=\"core\"} 6"), "{text}");
    let checkpoint = run(home.path(), &db, &["checkpoint"]).expect(0).json();
    assert_eq!(checkpoint["at"]["seq"], 6, "{checkpoint}");
    let compact = run(home.path(), &db, &["compact", "--keep", "0"]).expect(0).json();
    assert_eq!(compact["dropped"], 6, "{compact}");
    let verify = run(home.path(), &db, &["verify"]).expect(0).json();
    assert_eq!(verify["from_checkpoint"], 6, "verify proves the chain from the checkpoint");
    let logged = run(home.path(), &db, &["log"]).expect(0).stdout;
    assert_eq!(logged.lines().count(), 1, "only the checkpoint's event is left: {logged}");
    assert_eq!(run(home.path(), &db, &["kv", "get", "k3"]).expect(0).json()["value"], 3);
    let at = run(home.path(), &db, &["--at-seq", "7", "kv", "get", "k4"]).expect(0).json();
    assert_eq!(at["value"], 4, "an as-of read from the checkpoint: {at}");
    let file = home.path().join("backup/state.redb");
    let backup = run(home.path(), &db, &["backup", "--to", file.to_str().unwrap()]).expect(0);
    let db_head = head(&run(home.path(), &db, &["verify"]).expect(0));
    let file_head = head(&finish(hookstate(home.path()).arg("--db").arg(&file).arg("verify")));
    assert_eq!(file_head, db_head, "the backup file verifies at the store's head: {backup:?}");
}

#[test]
fn doctor_and_serve_refuse_a_database_store_in_one_line_and_change_nothing() {
    let Some(base) = base() else { return };
    let home = tempfile::tempdir().unwrap();
    let db = fresh(&base, "fileonly");
    run(home.path(), &db, &["kv", "put", "k", "1"]).expect(0);
    let before = (tree(home.path()), head(&run(home.path(), &db, &["verify"]).expect(0)));
    for (args, says) in
        [(&["doctor"][..], "doctor checks a store file"), (&["serve"], "serve runs")]
    {
        let refused = run(home.path(), &db, args);
        assert_eq!(refused.code, 64, "{args:?}: {refused:?}");
        assert_eq!(refused.stderr.lines().count(), 1, "{refused:?}");
        assert!(refused.stderr.contains(says), "{refused:?}");
        assert!(!refused.stderr.contains(PASSWORD), "{refused:?}");
        assert!(refused.stdout.is_empty(), "{refused:?}");
        let after = (tree(home.path()), head(&run(home.path(), &db, &["verify"]).expect(0)));
        assert_eq!(after, before, "{args:?} wrote something");
    }
}

/// The server's clock is raised to the log's last event time when it is behind that by at most
/// `CLOCK_RAISE_MS_MAX` (a clock stepped back; here the last event pinned 50 s ahead), so event
/// times follow log order on PostgreSQL as on redb; a last event further ahead leaves it as it is.
#[test]
fn the_servers_clock_is_raised_to_the_last_event_within_a_bound() {
    let Some(base) = base() else { return };
    let home = tempfile::tempdir().unwrap();
    let db = fresh(&base, "clock");
    let at_ms = |run: Run| -> Vec<u64> {
        run.stdout
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap()["at_ms"].as_u64().unwrap())
            .collect()
    };
    let now = || {
        u64::try_from(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis(),
        )
        .unwrap()
    };
    let ahead = (now() + 50_000).to_string();
    run(home.path(), &db, &["--now-ms", &ahead, "kv", "put", "a", "1"]).expect(0);
    run(home.path(), &db, &["kv", "put", "b", "1"]).expect(0);
    let times = at_ms(run(home.path(), &db, &["log"]).expect(0));
    assert_eq!(times.len(), 2, "{times:?}");
    assert!(times[1] >= times[0], "the server's clock logged a time before the last: {times:?}");
    let far = (now() + 180_000).to_string();
    run(home.path(), &db, &["--now-ms", &far, "kv", "put", "c", "1"]).expect(0);
    let before = now();
    run(home.path(), &db, &["kv", "put", "d", "1"]).expect(0);
    let times = at_ms(run(home.path(), &db, &["log"]).expect(0));
    assert!(times[3].abs_diff(before) < 60_000, "held by a last event beyond the bound: {times:?}");
}

/// A server that takes the connection and never answers (a stuck proxy, a half-open link) held
/// every call until the peer went away, whatever `--wait-ms`: the client's connect timeout bounds
/// the TCP connect only. Now the connection is given the call's wait, then exit 6. Needs no
/// PostgreSQL: the listener is this test's.
#[test]
fn a_server_that_never_answers_ends_the_call_at_its_wait() {
    use std::time::{Duration, Instant};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        // Accept, hold, never write: as long as the calls run.
        let mut conns = Vec::new();
        for conn in listener.incoming().take(2) {
            conns.push(conn);
        }
        std::thread::sleep(Duration::from_secs(2));
        drop(conns);
    });
    let home = tempfile::tempdir().unwrap();
    let db = format!("postgres://u:{PASSWORD}@127.0.0.1:{port}/db");
    for args in [&["kv", "get", "k"][..], &["kv", "put", "k", "1"][..]] {
        let started = Instant::now();
        let mut all = vec!["--wait-ms", "500"];
        all.extend_from_slice(args);
        let run = run(home.path(), &db, &all);
        let took = started.elapsed();
        assert_eq!(run.code, 6, "{args:?}: {run:?}");
        assert!(run.stderr.contains("did not finish the connection within 500 ms"), "{run:?}");
        assert!(!run.stderr.contains(PASSWORD), "{run:?}");
        assert!(took < Duration::from_secs(3), "{args:?} took {took:?}");
    }
    held.join().unwrap();
}

/// A table lock another session holds (ALTER TABLE, VACUUM FULL, TRUNCATE take one) on the
/// tables every call reads first held reads and writes past `--wait-ms` until it ended: the
/// first probe ran without a lock timeout. Now every statement of a call's session has one.
#[test]
fn an_exclusive_table_lock_answers_busy_at_the_wait() {
    use std::time::{Duration, Instant};
    let Some(base) = base() else { return };
    let home = tempfile::tempdir().unwrap();
    let db = fresh(&base, "locked");
    run(home.path(), &db, &["kv", "put", "k", "1"]).expect(0);
    for table in ["hookstate_meta", "hookstate_version", "hookstate_views"] {
        let mut holder = postgres::Client::connect(&db, postgres::NoTls).unwrap();
        let mut txn = holder.transaction().unwrap();
        txn.batch_execute(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")).unwrap();
        for args in [&["kv", "get", "k"][..], &["kv", "put", "k", "2"][..]] {
            let started = Instant::now();
            let mut child = hookstate(home.path())
                .args(["--db", &db, "--wait-ms", "300"])
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            // A call that hangs is killed here, so the test fails instead of hanging with it.
            let code = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break status.code();
                }
                if started.elapsed() > Duration::from_secs(5) {
                    child.kill().unwrap();
                    child.wait().unwrap();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let took = started.elapsed();
            assert_eq!(code, Some(4), "{table} {args:?} after {took:?}");
            assert!(took < Duration::from_secs(3), "{table} {args:?} took {took:?}");
        }
        txn.rollback().unwrap();
    }
    assert_eq!(run(home.path(), &db, &["kv", "get", "k"]).expect(0).json()["value"], 1);
}

/// The command handed to the model names the address without its password, so a store behind a
/// password worked only with the password in the address: `PGPASSWORD` and `~/.pgpass` were not
/// read. Now they are, as libpq reads them; a password file others may read is passed over.
#[test]
fn an_address_without_its_password_finds_it_in_pgpassword_or_pgpass() {
    use std::os::unix::fs::PermissionsExt;
    let Some(base) = base() else { return };
    let home = tempfile::tempdir().unwrap();
    let db = fresh(&base, "pgpass");
    run(home.path(), &db, &["init"]).expect(0);
    let bare = db.replacen(&format!(":{PASSWORD}@"), "@", 1);
    assert_ne!(bare, db, "the test address carries the password");
    let call = |env: &[(&str, &str)]| {
        let mut command = hookstate(home.path());
        command.env_remove("PGPASSWORD").env_remove("PGPASSFILE");
        for (key, value) in env {
            command.env(key, value);
        }
        finish(command.args(["--db", &bare, "--wait-ms", "2000", "kv", "get", "k"]))
    };
    let refused = call(&[]);
    assert_eq!(refused.code, 6, "no password anywhere: {refused:?}");
    call(&[("PGPASSWORD", PASSWORD)]).expect(0);
    let pgpass = home.path().join(".pgpass");
    let url = url_parts(&base);
    let line = format!("# a comment\nother:1:x:y:z\n{}:{}:*:{}:{PASSWORD}\n", url.0, url.1, url.2);
    std::fs::write(&pgpass, line).unwrap();
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    call(&[]).expect(0);
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(call(&[]).code, 6, "a password file others may read is passed over");
    let elsewhere = home.path().join("pass");
    std::fs::rename(&pgpass, &elsewhere).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
    call(&[("PGPASSFILE", elsewhere.to_str().unwrap())]).expect(0);
}

/// The host, port and user of a `postgres://user:password@host:port/db` address.
fn url_parts(url: &str) -> (String, String, String) {
    let rest = url.split_once("://").unwrap().1;
    let (user_part, host_part) = rest.split_once('@').unwrap();
    let user = user_part.split(':').next().unwrap().to_owned();
    let host_port = host_part.split(['/', '?']).next().unwrap();
    let (host, port) = host_port.split_once(':').unwrap_or((host_port, "5432"));
    (host.to_owned(), port.to_owned(), user)
}

/// A damaged table answers exit 5 (stop; run verify), as a damaged redb file does: a log row
/// beyond the head and a dropped views table were exit 6 (IO), the code of a server that is down.
#[test]
fn a_damaged_table_is_exit_5_not_6() {
    let Some(base) = base() else { return };
    let home = tempfile::tempdir().unwrap();
    let db = fresh(&base, "damaged");
    run(home.path(), &db, &["kv", "put", "k", "1"]).expect(0);
    sql(
        &db,
        "INSERT INTO hookstate_log (seq, record) SELECT 2, record FROM hookstate_log WHERE seq = 1",
    );
    let put = run(home.path(), &db, &["kv", "put", "k", "2"]);
    assert_eq!(put.code, 5, "{put:?}");
    assert!(!put.stderr.contains(PASSWORD), "{put:?}");
    sql(&db, "DELETE FROM hookstate_log WHERE seq = 2; DROP TABLE hookstate_views");
    let get = run(home.path(), &db, &["kv", "get", "k"]);
    assert_eq!(get.code, 5, "{get:?}");
}

/// `sslrootcert` names a small regular file: `/dev/zero` was read whole (gigabytes of memory)
/// and a FIFO held the call. Needs no PostgreSQL: the file is refused before any connection.
#[test]
fn a_root_certificate_that_is_no_small_regular_file_is_refused_at_once() {
    use std::time::{Duration, Instant};
    let home = tempfile::tempdir().unwrap();
    let fifo = home.path().join("ca.pem");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for cert in ["/dev/zero", fifo.to_str().unwrap()] {
        let db = format!("postgres://u@127.0.0.1:1/db?sslmode=require&sslrootcert={cert}");
        let started = Instant::now();
        let run = run(home.path(), &db, &["kv", "get", "k"]);
        assert_eq!(run.code, 3, "{cert}: {run:?}");
        assert!(run.stderr.contains("is not a regular file"), "{run:?}");
        assert!(started.elapsed() < Duration::from_secs(3), "{cert}");
    }
}
