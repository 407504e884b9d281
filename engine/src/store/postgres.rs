//! The PostgreSQL backend (DESIGN.md §9): the log, the views and the metadata of one store in
//! four tables of a database (or of one schema of it, through `search_path`), reached by a
//! `postgres://` or `postgresql://` address, with the same transactions as the redb file.
//!
//! A writer's transaction takes the head row (`SELECT … FOR UPDATE`) before it reads anything,
//! so writers run one at a time, the log order is the commit order and seqs have no gaps; the
//! server's clock is read right after, under that lock. Readers run in one repeatable-read
//! snapshot. Aborts for a serialization failure or a deadlock come back as
//! `Error::TxnConflict`, which the kernel's write path retries. The SQL is what YugabyteDB and
//! CockroachDB also run: no advisory locks, no LISTEN/NOTIFY, no triggers. The tables are
//! created and upgraded in one transaction (`hookstate init`), with the schema version in a
//! table of its own. Does not know any domain; the password of an address never leaves
//! [`Address`].

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use hookstate_schema::format::{META_HEAD, META_STORE_ID, STORE_ID_BYTES};
use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use postgres::{Client, Config, NoTls, SimpleQueryMessage};

use crate::kernel::call::store_clock;
use crate::kernel::error::{Error, Result};
use crate::kernel::fsio::read_small_file;
use crate::kernel::limits::TXN_ATTEMPTS_MAX;
use crate::kernel::storage::{EventVisitor, ReadTxn, RowVisitor, Storage, WriteTxn};
use crate::kernel::write::initial_meta;
use crate::store::second_anchor::SecondAnchor;
use crate::store::OpenOptions;

/// The version of the tables this build creates and reads. Each version past the first has a
/// migration in [`MIGRATIONS`]; `hookstate init` runs the missing ones in one transaction.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// The statements that bring the tables from version `i` to `i + 1`. Version 1 makes the three
/// tables of a store: its metadata (format, id, head), its log and its views; keys are compared
/// as bytes, which is redb's order too, so a scan visits rows in the same order on both.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = ["\
    CREATE TABLE hookstate_meta (key text PRIMARY KEY, value bytea NOT NULL); \
    CREATE TABLE hookstate_log (seq bigint PRIMARY KEY CHECK (seq > 0), record bytea NOT NULL); \
    CREATE TABLE hookstate_views (key bytea PRIMARY KEY, value bytea NOT NULL);"];

/// The address prefixes that name a PostgreSQL store.
const SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

/// Rows one scan query fetches: a page of events (each at most `EVENT_BYTES_MAX`) stays a few
/// MiB, and a scan that stops early reads at most one page past what it used.
const PAGE_ROWS: i64 = 256;

/// Attempts to connect while the server refuses for a passing reason (starting up, shutting
/// down, too many connections, not yet listening), bounded also by the call's wait.
const CONNECT_ATTEMPTS_MAX: u32 = 40;
/// Longest pause between connection attempts: a restarting server is back within a second or
/// two, and a waiting hook should see it soon after.
const CONNECT_BACKOFF_MS_MAX: u64 = 250;

/// The query of the server's clock in UTC ms, as a literal for [`CLOCK_SQL`] and
/// [`WRITER_CLOCK_SQL`]. `clock_timestamp()` is the time when the statement runs (not when the
/// transaction began), so a writer reads it after taking the head row.
macro_rules! clock_select {
    () => {
        "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::int8"
    };
}

/// The server's clock, as a reader reads it.
const CLOCK_SQL: &str = clock_select!();

/// A writer's [`CLOCK_SQL`], with the record of the log's last event beside it (hex), whose time
/// the clock is raised to after a step back (`store_clock`): in the same round trip.
const WRITER_CLOCK_SQL: &str = concat!(
    clock_select!(),
    ", (SELECT encode(record, 'hex') FROM hookstate_log ORDER BY seq DESC LIMIT 1)"
);

/// Whether `path` is a PostgreSQL address rather than a file path.
pub(crate) fn is_address(path: &Path) -> bool {
    path.to_str().is_some_and(|text| SCHEMES.iter().any(|scheme| text.starts_with(scheme)))
}

/// A PostgreSQL address: the client's configuration, the address as it may be shown (without
/// its password) and the CA certificate to verify the server with, when TLS is asked for.
pub(crate) struct Address {
    config: Config,
    shown: String,
    root_cert: Option<PathBuf>,
}

impl Address {
    /// Parses `text`; `sslmode=require` (or `verify-ca`, `verify-full`) asks for TLS, which
    /// needs `sslrootcert=<PEM file>`: the server's certificate is always verified, against
    /// that CA and for the host name of the address.
    ///
    /// # Errors
    /// [`Error::BadInput`] naming what is wrong, with the address shown without its password.
    pub(crate) fn parse(text: &str) -> Result<Address> {
        let shown = redact(text);
        let bad = |why: String| Error::bad(format!("store address {shown}"), why);
        let (base, query) = text.split_once('?').unwrap_or((text, ""));
        let mut kept = Vec::new();
        let (mut root_cert, mut tls) = (None, false);
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "sslrootcert" => root_cert = Some(PathBuf::from(percent_decode(value))),
                "sslmode" if matches!(value, "require" | "verify-ca" | "verify-full") => {
                    tls = true;
                    kept.push("sslmode=require".to_owned());
                }
                _ => kept.push(pair.to_owned()),
            }
        }
        let client_text = match kept.is_empty() {
            true => base.to_owned(),
            false => format!("{base}?{}", kept.join("&")),
        };
        let mut config: Config = client_text.parse().map_err(|e| bad(format!("{e}")))?;
        if config.get_hosts().is_empty() {
            return Err(bad("names no host".into()));
        }
        if config.get_dbname().is_none() {
            return Err(bad("names no database".into()));
        }
        if config.get_application_name().is_none() {
            config.application_name("hookstate");
        }
        let root_cert = match (tls, root_cert) {
            (true, None) => {
                return Err(bad("asks for TLS but names no sslrootcert=<PEM file of the \
                                server's CA>: hookstate always verifies the server"
                    .into()))
            }
            (true, root) => root,
            (false, _) => None,
        };
        if config.get_password().is_none() {
            if let Some(password) = password_from_environment(&config) {
                config.password(password);
            }
        }
        Ok(Address { config, shown, root_cert })
    }

    /// The address without its password.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }
}

/// Largest password file read (`~/.pgpass`): far above any list of a user's databases.
const PASSFILE_BYTES_MAX: u64 = 64 * 1024;
/// Mode bits that make libpq pass over a password file: readable or writable by group or others.
const PASSFILE_SHARED_BITS: u32 = 0o077;
/// The port an address without one names.
const PORT_DEFAULT: u16 = 5432;

/// The password of an address that names none, as libpq finds it: `PGPASSWORD`, else the first
/// matching line of `PGPASSFILE` (default `~/.pgpass`; a regular file no one else may read or
/// write, at most [`PASSFILE_BYTES_MAX`]) in `host:port:database:user:password` form, `*`
/// matching anything and `\` escaping `:` and `\`. The command handed to the model names the
/// address without its password, so a store behind a password works only this way.
fn password_from_environment(config: &Config) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    if let Some(password) = std::env::var_os("PGPASSWORD").filter(|p| !p.is_empty()) {
        return Some(password.as_bytes().to_vec());
    }
    let file = match std::env::var_os("PGPASSFILE").filter(|p| !p.is_empty()) {
        Some(file) => PathBuf::from(file),
        None => PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty())?).join(".pgpass"),
    };
    let text = read_passfile(&file)?;
    let host = match config.get_hosts().first()? {
        postgres::config::Host::Tcp(name) => name.clone(),
        // libpq names a Unix socket's host `localhost` in the file.
        postgres::config::Host::Unix(_) => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(PORT_DEFAULT).to_string();
    let wanted = [host.as_str(), port.as_str(), config.get_dbname()?, config.get_user()?];
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let fields = passfile_fields(line)?;
        let matches = fields.iter().zip(wanted).all(|(field, want)| field == "*" || field == want);
        matches.then(|| fields[4].clone().into_bytes())
    })
}

/// The password file's text, or `None` when it is missing, not a regular file, open to others
/// or over its bound.
fn read_passfile(file: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let private = std::fs::metadata(file)
        .is_ok_and(|meta| meta.permissions().mode() & PASSFILE_SHARED_BITS == 0);
    let bytes = read_small_file(file, PASSFILE_BYTES_MAX).ok().filter(|_| private)?;
    String::from_utf8(bytes).ok()
}

/// Largest CA file read for `sslrootcert` (a bundle of a few hundred certificates).
const ROOT_CERT_BYTES_MAX: u64 = 1024 * 1024;

/// The five fields of a password file line, unescaped; `None` for a line of another shape.
fn passfile_fields(line: &str) -> Option<[String; 5]> {
    let mut fields: Vec<String> = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut()?.push(chars.next().unwrap_or('\\')),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut()?.push(c),
        }
    }
    fields.try_into().ok()
}

/// `text` without the password of its user part or of a `password=` parameter.
pub(crate) fn redact(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => format!("{}@{host}", user.split(':').next().unwrap_or_default()),
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let kept: Vec<&str> =
                query.split('&').filter(|pair| !pair.starts_with("password=")).collect();
            match kept.is_empty() {
                true => path.to_owned(),
                false => format!("{path}?{}", kept.join("&")),
            }
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// `%XX` escapes decoded (a path given in a query parameter).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = bytes.get(index + 1..index + 3).and_then(|pair| {
            std::str::from_utf8(pair).ok().and_then(|pair| u8::from_str_radix(pair, 16).ok())
        });
        match (bytes[index], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                index += 3;
            }
            (byte, _) => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The TLS connector for an address with a CA certificate: rustls with the ring provider.
fn tls_connector(root_cert: &Path) -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let bad = |why: String| Error::bad(format!("sslrootcert {}", root_cert.display()), why);
    let mut roots = rustls::RootCertStore::empty();
    let pem = read_small_file(root_cert, ROOT_CERT_BYTES_MAX).map_err(bad)?;
    let certs = CertificateDer::pem_slice_iter(&pem);
    for cert in certs {
        roots.add(cert.map_err(|e| bad(e.to_string()))?).map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("holds no certificate".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// What an open is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Intent {
    /// Any verb: create the tables when absent and `create` is set; refuse older ones.
    Open,
    /// `hookstate init`: create the tables, or upgrade older ones, in one transaction.
    Init,
}

/// A PostgreSQL store: its address, idle connections, and the per-host anchor when kept.
pub(crate) struct PgStore {
    address: Address,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    idle: Mutex<Vec<Client>>,
    wait: Duration,
    read_only: bool,
    server_clock: bool,
    store_id: [u8; STORE_ID_BYTES],
    anchor: Option<SecondAnchor>,
}

/// What a probe of the database found.
enum Found {
    /// No hookstate tables.
    Absent,
    /// Tables of this schema version, and the store id when the metadata holds one.
    Tables(u32, Option<[u8; STORE_ID_BYTES]>),
}

/// Opens the store at `text`, creating (or, for `Intent::Init`, upgrading) its tables first.
/// `Ok(None)`: the store is absent and the caller may answer from an empty stand-in.
///
/// # Errors
/// [`Error::NoStore`], [`Error::SchemaTooNew`], [`Error::SchemaUpgradeRequired`],
/// [`Error::NotAStore`], [`Error::BadInput`] for a bad address, connection and store errors.
pub(crate) fn open(
    text: &str,
    options: &OpenOptions,
    intent: Intent,
) -> Result<Option<Box<dyn Storage>>> {
    let wait = options.wait()?;
    let address = Address::parse(text)?;
    let tls = address.root_cert.as_deref().map(tls_connector).transpose()?;
    let anchor = options.anchor_dir.as_deref().map(SecondAnchor::open).transpose()?;
    let mut store = PgStore {
        address,
        tls,
        idle: Mutex::new(Vec::new()),
        wait,
        read_only: options.read_only,
        server_clock: options.server_clock,
        store_id: [0; STORE_ID_BYTES],
        anchor,
    };
    let mut client = store.connect()?;
    let found = probe(&mut client, &store)?;
    let id = match (found, intent) {
        (Found::Tables(found, _), _) if found > SCHEMA_VERSION => {
            return Err(Error::SchemaTooNew { found, supported: SCHEMA_VERSION })
        }
        (Found::Tables(found, _), Intent::Open) if found < SCHEMA_VERSION => {
            return Err(Error::SchemaUpgradeRequired { found, supported: SCHEMA_VERSION })
        }
        (Found::Tables(found, id), _) if found == SCHEMA_VERSION => id,
        (Found::Absent, Intent::Open) if !options.create => return Ok(None),
        (_, _) if options.read_only => return Ok(None),
        (Found::Absent | Found::Tables(..), _) => {
            migrate(&mut client, &store)?;
            match probe(&mut client, &store)? {
                Found::Tables(_, id) => id,
                Found::Absent => None,
            }
        }
    };
    store.store_id = id.ok_or_else(|| store.not_a_store("the metadata holds no store id"))?;
    store.give(client);
    Ok(Some(Box::new(store)))
}

/// Opens the store at `text` to receive a copy of the store `store_id`: the tables are created
/// when absent, and a store without events takes on that identity (its head moves to the
/// genesis of `store_id`); a store with events is refused.
///
/// # Errors
/// [`Error::Invalid`] for a store that holds events; as [`open`].
pub(crate) fn open_for_copy(
    text: &str,
    options: &OpenOptions,
    store_id: &[u8; STORE_ID_BYTES],
) -> Result<Box<dyn Storage>> {
    let mut store = match open(text, options, Intent::Open)? {
        Some(store) => store,
        None => return Err(Error::NoStore { path: PathBuf::from(redact(text)) }),
    };
    let head = {
        let txn = store.begin_read()?;
        crate::kernel::view::read_head(&*txn)?
    };
    if head.seq > 0 {
        return Err(Error::Invalid(format!(
            "the destination {} already holds {} events: copy into an empty store",
            redact(text),
            head.seq
        )));
    }
    let mut txn = store.begin_write(Instant::now() + options.wait()?)?;
    for (key, value) in initial_meta(store_id) {
        txn.put_meta(key, &value)?;
    }
    txn.clear_views()?;
    txn.commit()?;
    drop(store);
    store = open(text, options, Intent::Open)?
        .ok_or_else(|| Error::NoStore { path: PathBuf::from(redact(text)) })?;
    Ok(store)
}

/// What the database holds: hookstate's tables (their version and the store id), or none.
fn probe(client: &mut Client, store: &PgStore) -> Result<Found> {
    let sql = "SELECT v.version, m.value FROM hookstate_version v \
               LEFT JOIN hookstate_meta m ON m.key = $1 WHERE v.id = 1";
    match client.query_typed(sql, &[(&META_STORE_ID, Type::TEXT)]) {
        Ok(rows) => {
            let Some(row) = rows.first() else {
                return Ok(Found::Absent);
            };
            let version: i32 = row.try_get(0).map_err(|e| store.not_a_store(&e.to_string()))?;
            let version = u32::try_from(version).map_err(|_| store.not_a_store("bad version"))?;
            let id: Option<Vec<u8>> =
                row.try_get(1).map_err(|e| store.not_a_store(&e.to_string()))?;
            let id = id.and_then(|bytes| <[u8; STORE_ID_BYTES]>::try_from(bytes).ok());
            Ok(Found::Tables(version, id))
        }
        Err(err) if err.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(Found::Absent),
        Err(err) => Err(convert(err, Instant::now())),
    }
}

/// Creates or upgrades the tables in one transaction, taking the version row first so that
/// concurrent inits run one after the other; a new store gets its metadata (a random store id,
/// the genesis head) in the same transaction. Two inits racing to create the version table
/// collide in the catalog; the loser runs again.
fn migrate(client: &mut Client, store: &PgStore) -> Result<()> {
    let start = Instant::now();
    let mut attempt = 0;
    loop {
        attempt += 1;
        match migrate_once(client, store) {
            Err(err) if attempt < TXN_ATTEMPTS_MAX && catalog_race(&err) => {
                let _ = client.batch_execute("ROLLBACK");
                thread::sleep(Duration::from_millis(u64::from(attempt) * 10));
            }
            Err(err) => {
                let _ = client.batch_execute("ROLLBACK");
                return Err(match err {
                    Migration::Db(err) => convert(err, start),
                    Migration::Engine(err) => err,
                });
            }
            Ok(()) => return Ok(()),
        }
    }
}

enum Migration {
    Db(postgres::Error),
    Engine(Error),
}

impl From<postgres::Error> for Migration {
    fn from(err: postgres::Error) -> Self {
        Migration::Db(err)
    }
}

fn catalog_race(err: &Migration) -> bool {
    let Migration::Db(err) = err else {
        return false;
    };
    // `CREATE TABLE IF NOT EXISTS` is not atomic against a concurrent create: the loser gets
    // "relation already exists" (42P07) or a unique violation on the catalog's type names.
    [
        SqlState::UNIQUE_VIOLATION,
        SqlState::DUPLICATE_OBJECT,
        SqlState::DUPLICATE_TABLE,
        SqlState::T_R_SERIALIZATION_FAILURE,
    ]
    .iter()
    .any(|code| err.code() == Some(code))
}

fn migrate_once(client: &mut Client, store: &PgStore) -> std::result::Result<(), Migration> {
    client.batch_execute(&format!(
        "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = {}; \
         CREATE TABLE IF NOT EXISTS hookstate_version \
             (id integer PRIMARY KEY CHECK (id = 1), version integer NOT NULL); \
         INSERT INTO hookstate_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
        lock_timeout_ms(store.wait)
    ))?;
    let row =
        client.query_one("SELECT version FROM hookstate_version WHERE id = 1 FOR UPDATE", &[])?;
    let found: i32 = row.try_get(0)?;
    let found = u32::try_from(found)
        .map_err(|_| Migration::Engine(store.not_a_store("the schema version is negative")))?;
    if found > SCHEMA_VERSION {
        return Err(Migration::Engine(Error::SchemaTooNew { found, supported: SCHEMA_VERSION }));
    }
    for migration in &MIGRATIONS[found as usize..] {
        client.batch_execute(migration).map_err(|err| match err.code() {
            Some(&SqlState::DUPLICATE_TABLE) => Migration::Engine(
                store.not_a_store("tables named hookstate_* exist without hookstate's version"),
            ),
            _ => Migration::Db(err),
        })?;
    }
    if found == 0 {
        let id =
            crate::kernel::fsio::random_bytes::<STORE_ID_BYTES>().map_err(Migration::Engine)?;
        for (key, value) in initial_meta(&id) {
            client.query_typed(
                "INSERT INTO hookstate_meta (key, value) VALUES ($1, $2)",
                &[(&key, Type::TEXT), (&value, Type::BYTEA)],
            )?;
        }
    }
    let version = i32::try_from(SCHEMA_VERSION).unwrap_or(i32::MAX);
    client.query_typed(
        "UPDATE hookstate_version SET version = $1 WHERE id = 1",
        &[(&version, Type::INT4)],
    )?;
    client.batch_execute("COMMIT")?;
    Ok(())
}

/// The `lock_timeout` for a wait: in ms, at least 1 (0 would mean no timeout).
fn lock_timeout_ms(wait: Duration) -> u64 {
    u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Converts a client error, keeping it as the cause: conflicts the write path retries, lock
/// waits past the deadline, lost connections, a full disk and damaged pages each to their
/// class. No message carries the address, so none carries its password.
fn convert(err: postgres::Error, started: Instant) -> Error {
    let waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let class = err.code().map(|code| code.code().get(..2).unwrap_or_default().to_owned());
    match (err.code(), class.as_deref()) {
        (Some(&SqlState::T_R_SERIALIZATION_FAILURE | &SqlState::T_R_DEADLOCK_DETECTED), _) => {
            Error::TxnConflict(Box::new(err))
        }
        (Some(&SqlState::LOCK_NOT_AVAILABLE | &SqlState::QUERY_CANCELED), _) => {
            Error::Busy { waited_ms }
        }
        // A table of hookstate's gone, or a log row where none may be (beyond the head every
        // writer serializes on): the store is damaged, as a lost redb table is.
        (
            Some(
                &SqlState::DATA_CORRUPTED
                | &SqlState::INDEX_CORRUPTED
                | &SqlState::UNDEFINED_TABLE
                | &SqlState::UNIQUE_VIOLATION,
            ),
            _,
        ) => Error::StoreCorrupt(Box::new(err)),
        // Connection exceptions, insufficient resources (a full disk), operator intervention (a
        // server shut down or restarted), system errors.
        (_, Some("08" | "53" | "57" | "58")) => Error::StoreIo(Box::new(err)),
        (None, _) if err.is_closed() || std::error::Error::source(&err).is_some() => {
            Error::StoreIo(Box::new(err))
        }
        _ => Error::Store(Box::new(err)),
    }
}

/// Whether a failed connection attempt is worth another one: the server is not listening yet,
/// is starting up or shutting down, or has no free connection.
fn connect_again(err: &postgres::Error) -> bool {
    match err.code() {
        Some(code) => [SqlState::CANNOT_CONNECT_NOW, SqlState::TOO_MANY_CONNECTIONS].contains(code),
        None => std::error::Error::source(err)
            .and_then(|source| source.downcast_ref::<std::io::Error>())
            .is_some_and(|io| {
                matches!(
                    io.kind(),
                    std::io::ErrorKind::ConnectionRefused
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                )
            }),
    }
}

/// Least time a connection attempt is given (a wait of 0 still tries once).
const CONNECT_WAIT_MIN: Duration = Duration::from_millis(100);

/// Connects on a thread of its own and waits at most `wait` (at least [`CONNECT_WAIT_MIN`]) for
/// it: the client's connect timeout bounds the TCP connect only, and a server (or a proxy) that
/// takes the connection and never answers would hold the call. `None` when the time ran out; the
/// attempt's thread ends when its connection does.
fn connect_within(
    config: &postgres::Config,
    tls: Option<&tokio_postgres_rustls::MakeRustlsConnect>,
    wait: Duration,
) -> Option<std::result::Result<Client, postgres::Error>> {
    let (config, tls) = (config.clone(), tls.cloned());
    let (tx, rx) = std::sync::mpsc::channel();
    thread::Builder::new()
        .name("hookstate-pg-connect".into())
        .spawn(move || {
            let connected = match tls {
                Some(tls) => config.connect(tls),
                None => config.connect(NoTls),
            };
            let _ = tx.send(connected);
        })
        .ok()?;
    rx.recv_timeout(wait.max(CONNECT_WAIT_MIN)).ok()
}

impl PgStore {
    fn not_a_store(&self, why: &str) -> Error {
        Error::NotAStore { path: PathBuf::from(self.address.shown()), why: why.into() }
    }

    /// A new connection, attempted again while the server refuses for a passing reason, at most
    /// [`CONNECT_ATTEMPTS_MAX`] times and within the wait.
    fn connect(&self) -> Result<Client> {
        let start = Instant::now();
        let mut config = self.address.config.clone();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(self.wait.max(Duration::from_millis(1)));
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let remaining = self.wait.saturating_sub(start.elapsed());
            let connected = match connect_within(&config, self.tls.as_ref(), remaining) {
                Some(connected) => connected,
                None => {
                    let why = format!(
                        "the server did not finish the connection within {} ms",
                        lock_timeout_ms(self.wait)
                    );
                    let source = std::io::Error::new(std::io::ErrorKind::TimedOut, why);
                    return Err(Error::io("connect to", self.address.shown(), source));
                }
            };
            match connected {
                // Every statement of the session, the first probe of the tables included, waits
                // for a table lock (an ALTER TABLE, a VACUUM FULL) at most the call's wait, then
                // answers busy; a transaction's own `SET LOCAL` still counts from its start.
                Ok(mut client) => {
                    let set = format!("SET lock_timeout = {}", lock_timeout_ms(self.wait));
                    client.batch_execute(&set).map_err(|err| convert(err, start))?;
                    return Ok(client);
                }
                Err(err)
                    if connect_again(&err)
                        && attempt < CONNECT_ATTEMPTS_MAX
                        && start.elapsed() < self.wait =>
                {
                    let ms = (5u64 << attempt.min(8)).min(CONNECT_BACKOFF_MS_MAX);
                    thread::sleep(Duration::from_millis(ms));
                }
                Err(err) if connect_again(&err) && err.code().is_some() => {
                    let waited_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
                    return Err(Error::Busy { waited_ms });
                }
                Err(err) => return Err(convert(err, start)),
            }
        }
    }

    /// An idle connection, or a new one.
    fn take(&self) -> Result<Client> {
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        match idle {
            Some(client) if !client.is_closed() => Ok(client),
            _ => self.connect(),
        }
    }

    /// Keeps a connection for the next transaction, unless it is closed.
    fn give(&self, client: Client) {
        if !client.is_closed() {
            if let Ok(mut idle) = self.idle.lock() {
                idle.push(client);
            }
        }
    }

    /// Starts a transaction with `begin` (one round trip, ending with the clock's query) and
    /// returns it with the server's clock.
    fn start(&self, begin: &str) -> Result<PgTxn<'_>> {
        let started = Instant::now();
        let mut client = self.take()?;
        let clock = match client.simple_query(begin) {
            Ok(messages) => {
                last_integer(&messages).map(|clock| store_clock(clock, last_at(&messages)))
            }
            Err(err) => {
                let _ = client.batch_execute("ROLLBACK");
                self.give(client);
                return Err(convert(err, started));
            }
        };
        let clock_ms = clock.filter(|_| self.server_clock);
        Ok(PgTxn {
            store: self,
            client: RefCell::new(Some(client)),
            started,
            clock_ms,
            failed: Cell::new(false),
        })
    }
}

/// The time of the event whose record (hex) is the second column of the last row of `messages`
/// ([`WRITER_CLOCK_SQL`]); `None` without one (an empty log, a reader's clock query) or when it
/// does not decode (the write path and `verify` report that record).
fn last_at(messages: &[SimpleQueryMessage]) -> Option<u64> {
    let hex = messages.iter().rev().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => Some(row.try_get(1).ok().flatten()),
        _ => None,
    })??;
    let record = hookstate_schema::format::bytes_from_hex(hex)?;
    hookstate_schema::format::decode_event(&record).ok().map(|event| event.content.at_ms)
}

/// The integer in the last row of a simple query's answer.
fn last_integer(messages: &[SimpleQueryMessage]) -> Option<u64> {
    messages.iter().rev().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0).and_then(|text| text.parse().ok()),
        _ => None,
    })
}

impl Storage for PgStore {
    fn path(&self) -> PathBuf {
        PathBuf::from(self.address.shown())
    }
    fn anchor_path(&self) -> PathBuf {
        match &self.anchor {
            Some(anchor) => anchor.path(&self.store_id),
            None => PathBuf::from("(none: set HOOKSTATE_ANCHOR_DIR to keep a per-host anchor)"),
        }
    }
    fn read_anchor(&self) -> Result<Option<String>> {
        self.anchor.as_ref().map_or(Ok(None), |anchor| anchor.read_last(&self.store_id))
    }
    fn check_anchor_history(&self, store_id: &[u8; STORE_ID_BYTES]) -> Result<()> {
        self.anchor.as_ref().map_or(Ok(()), |anchor| anchor.check_history(store_id))
    }
    fn anchor_required(&self) -> bool {
        false
    }
    fn update_anchors(
        &self,
        store_id: &[u8; STORE_ID_BYTES],
        next: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> Result<bool> {
        let Some(anchor) = &self.anchor else {
            return Ok(true);
        };
        let Some(_lock) = anchor.try_lock()? else {
            return Ok(false);
        };
        let current = anchor.read_last(store_id)?;
        match next(current.as_deref()) {
            Some(text) => anchor.append(store_id, &text).map(|()| true),
            None => Ok(true),
        }
    }
    fn remove_stale_temps(&self) -> Result<u32> {
        Ok(0)
    }
    /// The store's three tables with their indexes and TOAST data, as the server counts them;
    /// 0 from a server without `pg_total_relation_size` (a distributed SQL engine) or on any
    /// error, since a size is a figure for an operator, never a decision.
    fn stored_bytes(&self) -> u64 {
        let sql = "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c \
                   WHERE c.relnamespace = to_regnamespace(current_schema()) \
                   AND c.relname IN ('hookstate_meta', 'hookstate_log', 'hookstate_views')";
        let Ok(mut client) = self.take() else {
            return 0;
        };
        let bytes = client.query_one(sql, &[]).ok().and_then(|row| row.try_get::<_, i64>(0).ok());
        self.give(client);
        bytes.and_then(|b| u64::try_from(b).ok()).unwrap_or(0)
    }
    fn begin_write(&self, deadline: Instant) -> Result<Box<dyn WriteTxn + '_>> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let begin = format!(
            "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = {}; \
             SELECT 1 FROM hookstate_meta WHERE key = '{META_HEAD}' FOR UPDATE; {WRITER_CLOCK_SQL}",
            lock_timeout_ms(remaining)
        );
        Ok(Box::new(self.start(&begin)?))
    }
    fn begin_read(&self) -> Result<Box<dyn ReadTxn + '_>> {
        let begin = format!("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; {CLOCK_SQL}");
        Ok(Box::new(self.start(&begin)?))
    }
}

/// One transaction on one connection, rolled back when dropped without a commit.
struct PgTxn<'a> {
    store: &'a PgStore,
    client: RefCell<Option<Client>>,
    started: Instant,
    clock_ms: Option<u64>,
    failed: Cell<bool>,
}

impl Drop for PgTxn<'_> {
    fn drop(&mut self) {
        if let Some(mut client) = self.client.get_mut().take() {
            // A connection whose rollback failed is dropped, not reused.
            if client.batch_execute("ROLLBACK").is_ok() {
                self.store.give(client);
            }
        }
    }
}

/// A seq as the database's bigint.
fn to_bigint(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// The smallest byte string above every string that starts with `prefix`, when there is one.
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

impl PgTxn<'_> {
    /// Runs one query on this transaction's connection; a failure marks the transaction failed.
    fn query(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<postgres::Row>> {
        let mut client = self.client.borrow_mut();
        let Some(client) = client.as_mut() else {
            return Err(Error::Corrupt("the transaction has ended".into()));
        };
        if self.failed.get() {
            return Err(Error::Corrupt("the transaction failed earlier".into()));
        }
        client.query_typed(sql, params).map_err(|err| {
            self.failed.set(true);
            convert(err, self.started)
        })
    }

    fn bytes(&self, sql: &str, param: &(dyn ToSql + Sync), ty: Type) -> Result<Option<Vec<u8>>> {
        let rows = self.query(sql, &[(param, ty)])?;
        match rows.first() {
            Some(row) => row.try_get(0).map(Some).map_err(|e| Error::Corrupt(e.to_string())),
            None => Ok(None),
        }
    }

    fn execute(&self, sql: &str, params: &[(&(dyn ToSql + Sync), Type)]) -> Result<()> {
        self.query(sql, params).map(|_| ())
    }
}

impl ReadTxn for PgTxn<'_> {
    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.bytes("SELECT value FROM hookstate_meta WHERE key = $1", &key, Type::TEXT)
    }

    fn event(&self, seq: u64) -> Result<Option<Vec<u8>>> {
        let sql = "SELECT record FROM hookstate_log WHERE seq = $1";
        self.bytes(sql, &to_bigint(seq), Type::INT8)
    }

    fn events(&self, from: u64, to: u64, visit: &mut EventVisitor<'_>) -> Result<()> {
        let sql = "SELECT seq, record FROM hookstate_log WHERE seq >= $1 AND seq <= $2 \
                   ORDER BY seq LIMIT $3";
        let (mut next, last) = (to_bigint(from), to_bigint(to));
        while next <= last {
            let rows = self.query(
                sql,
                &[(&next, Type::INT8), (&last, Type::INT8), (&PAGE_ROWS, Type::INT8)],
            )?;
            for row in &rows {
                let seq: i64 = row.try_get(0).map_err(|e| Error::Corrupt(e.to_string()))?;
                let record: &[u8] = row.try_get(1).map_err(|e| Error::Corrupt(e.to_string()))?;
                let seq_u64 = u64::try_from(seq)
                    .map_err(|_| Error::ChainBroken { seq: 0, why: "a negative seq".into() })?;
                if !visit(seq_u64, record)? {
                    return Ok(());
                }
                next = seq.saturating_add(1);
            }
            if rows.len() < usize::try_from(PAGE_ROWS).unwrap_or(usize::MAX) || next == i64::MAX {
                break;
            }
        }
        Ok(())
    }

    fn view(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.bytes("SELECT value FROM hookstate_views WHERE key = $1", &key, Type::BYTEA)
    }

    fn views_with_prefix(&self, prefix: &[u8], visit: &mut RowVisitor<'_>) -> Result<()> {
        let end = prefix_end(prefix);
        let mut from = prefix.to_vec();
        loop {
            let rows = match &end {
                Some(end) => self.query(
                    "SELECT key, value FROM hookstate_views WHERE key >= $1 AND key < $2 \
                     ORDER BY key LIMIT $3",
                    &[(&from, Type::BYTEA), (end, Type::BYTEA), (&PAGE_ROWS, Type::INT8)],
                )?,
                None => self.query(
                    "SELECT key, value FROM hookstate_views WHERE key >= $1 ORDER BY key LIMIT $2",
                    &[(&from, Type::BYTEA), (&PAGE_ROWS, Type::INT8)],
                )?,
            };
            for row in &rows {
                let key: &[u8] = row.try_get(0).map_err(|e| Error::Corrupt(e.to_string()))?;
                let value: &[u8] = row.try_get(1).map_err(|e| Error::Corrupt(e.to_string()))?;
                if !visit(key, value)? {
                    return Ok(());
                }
                // The next page starts at the smallest key after this one.
                from.clear();
                from.extend_from_slice(key);
                from.push(0);
            }
            if rows.len() < usize::try_from(PAGE_ROWS).unwrap_or(usize::MAX) {
                return Ok(());
            }
        }
    }

    fn clock_ms(&self) -> Option<u64> {
        self.clock_ms
    }
}

impl WriteTxn for PgTxn<'_> {
    /// A statement per operation either way: `body` runs on the transaction itself.
    fn with_tables(&mut self, body: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<()>) -> Result<()> {
        body(self)
    }

    fn put_meta(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.execute(
            "INSERT INTO hookstate_meta (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[(&key, Type::TEXT), (&value, Type::BYTEA)],
        )
    }

    fn append_event(&mut self, seq: u64, record: &[u8]) -> Result<()> {
        if i64::try_from(seq).is_err() {
            return Err(Error::Corrupt(format!("seq {seq} is beyond the database's bigint")));
        }
        self.execute(
            "INSERT INTO hookstate_log (seq, record) VALUES ($1, $2)",
            &[(&to_bigint(seq), Type::INT8), (&record, Type::BYTEA)],
        )
    }

    fn put_view(&mut self, key: &[u8], row: &[u8]) -> Result<()> {
        self.execute(
            "INSERT INTO hookstate_views (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[(&key, Type::BYTEA), (&row, Type::BYTEA)],
        )
    }

    fn delete_view(&mut self, key: &[u8]) -> Result<()> {
        self.execute("DELETE FROM hookstate_views WHERE key = $1", &[(&key, Type::BYTEA)])
    }

    fn drop_events_through(&mut self, seq: u64) -> Result<u64> {
        let sql = "WITH dropped AS (DELETE FROM hookstate_log WHERE seq <= $1 RETURNING seq) \
                   SELECT count(*) FROM dropped";
        let rows = self.query(sql, &[(&to_bigint(seq), Type::INT8)])?;
        let count: i64 = match rows.first() {
            Some(row) => row.try_get(0).map_err(|e| Error::Corrupt(e.to_string()))?,
            None => 0,
        };
        Ok(u64::try_from(count).unwrap_or(0))
    }

    fn clear_views(&mut self) -> Result<()> {
        self.execute("DELETE FROM hookstate_views", &[])
    }

    fn commit(self: Box<Self>) -> Result<()> {
        if self.failed.get() {
            return Err(Error::Corrupt("a statement of the transaction failed".into()));
        }
        let Some(mut client) = self.client.borrow_mut().take() else {
            return Err(Error::Corrupt("the transaction has ended".into()));
        };
        match client.batch_execute("COMMIT") {
            Ok(()) => {
                self.store.give(client);
                Ok(())
            }
            // The answer to a COMMIT may be lost with the connection: the caller must not
            // acknowledge, and the connection is not reused.
            Err(err) => Err(convert(err, self.started)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_file_lines_split_on_unescaped_colons() {
        let fields = |line: &str| passfile_fields(line).map(|f| f.to_vec());
        let owned = |list: [&str; 5]| Some(list.iter().map(|s| (*s).to_owned()).collect());
        assert_eq!(fields("h:5432:db:u:pw"), owned(["h", "5432", "db", "u", "pw"]));
        assert_eq!(fields(r"h:*:db:u:p\:w\\x"), owned(["h", "*", "db", "u", r"p:w\x"]));
        assert_eq!(
            fields("h:5432:db:u:pw:with:colons"),
            owned(["h", "5432", "db", "u", "pw:with:colons"])
        );
        assert_eq!(fields("h:5432:db"), None);
    }

    #[test]
    fn addresses_are_shown_without_their_password() {
        let cases = [
            ("postgresql://u:secret@h:5432/db", "postgresql://u@h:5432/db"),
            ("postgres://u:secret@h/db?sslmode=require", "postgres://u@h/db?sslmode=require"),
            ("postgres://h/db?password=secret&x=1", "postgres://h/db?x=1"),
            ("postgres://h/db?password=secret", "postgres://h/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("postgres://u:p%40ss@h/db", "postgres://u@h/db"),
        ];
        for (text, shown) in cases {
            assert_eq!(redact(text), shown, "{text}");
        }
    }

    #[test]
    fn tls_needs_a_ca_and_bad_addresses_are_refused_without_the_password() {
        let refused = |text: &str| match Address::parse(text) {
            Err(err) => err.to_string(),
            Ok(_) => panic!("{text} was accepted"),
        };
        assert!(refused("postgres://u:hunter2@h/db?sslmode=require").contains("sslrootcert"));
        assert!(!refused("postgres://u:hunter2@h/db?sslmode=require").contains("hunter2"));
        assert!(!refused("postgres://u:hunter2@h/db?bogus=1").contains("hunter2"));
        assert!(refused("postgres://u:hunter2@h").contains("no database"));
        let ok =
            Address::parse("postgres://u:pw@h/db?sslmode=verify-full&sslrootcert=%2Fx%2Fca.pem")
                .unwrap();
        assert_eq!(ok.root_cert.as_deref(), Some(Path::new("/x/ca.pem")));
        assert_eq!(ok.shown(), "postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fx%2Fca.pem");
    }

    #[test]
    fn a_prefix_scan_ends_before_the_next_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
        assert_eq!(prefix_end(b""), None);
    }
}
