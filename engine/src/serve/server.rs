//! The server's life and its socket: the lock (one server per store), the socket beside the
//! store (mode 0600), the accept loop with its bounds (peers of another uid refused, at most
//! [`CONNECTIONS_MAX`] connections, a deadline on every frame), one thread per connection (kept
//! for the next connection for [`THREAD_IDLE_MS`] once its own closed), and the stop: SIGTERM,
//! SIGINT or `--idle-exit-s` end the accept loop, every request in flight is answered, then the
//! writer drains and the server returns.
//!
//! A connection thread runs the [`Handler`] on each request: a read is answered there from a
//! snapshot, a write goes to the writer thread (`serve::writer`). Does not decide what a request
//! means.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rustix::event::{poll, PollFd, PollFlags, Timespec};

use super::lock;
use super::protocol::{
    decode_request, encode, read_frame, write_frame, ClientFrame, ErrorCode, FrameError, Reply,
    ServerFrame, Stats, PROTOCOL_VERSION, REQUEST_BYTES_MAX,
};
use super::shared::{answer_slot, Engagement, Handler, Prepared, Shared, StdinSource, Stop};
use super::writer::{self, Pending};
use crate::engine::Engine;
use crate::Error;

/// Open connections at most: each is a thread; hooks hold one for a call, a plugin one for its
/// life. One past the bound gets a `busy` answer instead of the hello and is closed.
pub const CONNECTIONS_MAX: usize = 64;
/// How long a connection may stay silent between requests before it is closed: a plugin's
/// persistent client reconnects on its next call.
pub const CONNECTION_IDLE_MS: u64 = 60_000;
/// How long one request frame may take to arrive once its first byte did (a slow or silent
/// client is cut off here): the CLI's own stdin deadline.
pub const REQUEST_READ_MS: u64 = 5_000;
/// How long the server waits for the stdin it asked for: the client reads its own stdin within
/// the CLI's 5 s deadline first.
pub const STDIN_WAIT_MS: u64 = 6_000;
/// How long a reply may take to be written before the connection is dropped.
pub(crate) const REPLY_WRITE_MS: u64 = 5_000;
/// How long a client waits for the hello before it runs the call in-process: a live server
/// answers within a few ms; a stopped one (SIGSTOP) must not hold a hook.
pub const HELLO_WAIT_MS: u64 = 200;
/// How often the accept loop and idle connections look at the stop flag.
const TICK_MS: u64 = 50;
/// How long a connection thread whose connection closed waits for another before it ends: a
/// hook's call is one connection, and a thread kept between calls spares each the start and end
/// of a thread (about a fifth of the server's CPU for a served read, measured).
const THREAD_IDLE_MS: u64 = 10_000;
/// How often the accept loop looks whether the watched executable was replaced.
const EXE_CHECK_MS: u64 = 1_000;
/// The poll timeout of one tick.
fn tick() -> Timespec {
    Timespec { tv_sec: 0, tv_nsec: i64::try_from(TICK_MS * 1_000_000).unwrap_or(0) }
}

/// Pending writes the channel holds: one per connection at most (a connection waits for its
/// answer before it reads the next request).
const QUEUE_MAX: usize = CONNECTIONS_MAX;

/// How to serve.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// The socket (default: `<db>.sock`).
    pub socket: Option<PathBuf>,
    /// Stop after this long without a request.
    pub idle_exit: Option<Duration>,
    /// Stop, as on SIGTERM, once the file at this path is no longer the one it was when the
    /// server started (another inode, size or modification time): a server started by a hook
    /// then does not go on answering with an old build after an upgrade.
    pub watch_exe: Option<PathBuf>,
}

/// Where a started server listens (handed to the caller once it accepts connections).
#[derive(Debug, Clone)]
pub struct Serving {
    /// The store.
    pub db: PathBuf,
    /// The socket.
    pub socket: PathBuf,
    /// This process.
    pub pid: u32,
}

/// Why and how a server stopped.
#[derive(Debug, Clone)]
pub struct ServeReport {
    /// `signal`, `idle`, `replaced` or `commit_failed`.
    pub stopped: &'static str,
    /// The counters.
    pub stats: Stats,
}

/// Serves `engine` on its socket until a signal, the idle bound or a failed commit stops it.
/// `ready` is called once the socket accepts connections.
///
/// # Errors
/// [`Error::ServerRunning`] when another server holds the store; [`Error::Invalid`] for a socket
/// path that is too long or names something that is not a socket; IO errors.
pub fn serve(
    engine: Arc<Engine>,
    options: &ServeOptions,
    handler: Arc<dyn Handler>,
    ready: &mut dyn FnMut(&Serving),
) -> Result<ServeReport, Error> {
    let db = engine.location()?.path;
    let _lock = lock::take(&db)?;
    let socket = options.socket.clone().unwrap_or_else(|| super::socket_path(&db));
    let listener = bind(&socket)?;
    let signalled = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&signalled))
            .map_err(|e| Error::io("take the signal", &socket, e))?;
    }
    let pid = std::process::id();
    let hello = encode(&ServerFrame::Hello {
        hookstate: "serve".into(),
        protocol: PROTOCOL_VERSION,
        pid,
        db: db.display().to_string(),
    });
    let shared = Arc::new(Shared::new(engine, handler, signalled, hello));
    let (jobs, queue) = crossbeam_channel::bounded::<Pending>(QUEUE_MAX);
    let writer = {
        let shared = Arc::clone(&shared);
        thread::Builder::new()
            .name("hookstate-writer".into())
            .spawn(move || writer::run(&shared, &queue))
            .map_err(|e| Error::io("start the writer thread", &socket, e))?
    };
    ready(&Serving { db: db.clone(), socket: socket.clone(), pid });
    let watch = options.watch_exe.as_deref().map(Watched::new);
    let idle = Arc::new(Idle::new());
    let connections = accept_loop(&shared, &listener, &jobs, &idle, options.idle_exit, watch);
    // New clients find no socket and run in-process; the ones connected finish their request.
    let _ = std::fs::remove_file(&socket);
    drop(listener);
    for connection in connections {
        let _ = connection.join();
    }
    drop(jobs);
    let _ = writer.join();
    let stopped = match shared.stop.load(Ordering::SeqCst) {
        x if x == Stop::CommitFailed as usize => "commit_failed",
        x if x == Stop::Idle as usize => "idle",
        x if x == Stop::Replaced as usize => "replaced",
        _ => "signal",
    };
    let stats = shared.stats.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(ServeReport { stopped, stats })
}

/// Binds the socket at `path` with mode 0600, replacing a stale socket (we hold the lock, so no
/// live server owns it) but nothing else.
fn bind(path: &Path) -> Result<UnixListener, Error> {
    const SUN_PATH_BYTES_MAX: usize = 107;
    let len = path.as_os_str().len();
    if len > SUN_PATH_BYTES_MAX {
        return Err(Error::Invalid(format!(
            "socket path {} is {len} bytes, the limit is {SUN_PATH_BYTES_MAX}: pass --socket",
            path.display()
        )));
    }
    check_socket_dir(path)?;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            std::fs::remove_file(path)
                .map_err(|e| Error::io("remove the stale socket", path, e))?;
        }
        Ok(_) => {
            return Err(Error::Invalid(format!(
                "{} exists and is not a socket: remove it or pass --socket",
                path.display()
            )))
        }
        Err(_) => {}
    }
    // Only this thread runs yet: the mask covers the socket's creation alone.
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let bound = UnixListener::bind(path);
    rustix::process::umask(old);
    let listener = bound.map_err(|e| Error::io("bind the socket", path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("chmod the socket", path, e))?;
    listener.set_nonblocking(true).map_err(|e| Error::io("set up the socket", path, e))?;
    Ok(listener)
}

/// The socket's directory must be ours and writable by nobody else, or another user could put
/// their own socket in its place.
fn check_socket_dir(path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let meta =
        std::fs::metadata(dir).map_err(|e| Error::io("stat the socket directory", dir, e))?;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(Error::UnsafePath {
            path: dir.to_path_buf(),
            why: "the socket's directory must be owned by this user and writable by no one else"
                .into(),
        });
    }
    Ok(())
}

/// A file's identity as the watch compares it.
type FileId = (u64, u64, u64, Option<std::time::SystemTime>);

fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.dev(), meta.ino(), meta.len(), meta.modified().ok()))
}

/// The executable a server watches: its path, and its identity when the server started.
struct Watched {
    path: PathBuf,
    at_start: Option<FileId>,
    checked: Instant,
}

impl Watched {
    fn new(path: &Path) -> Watched {
        Watched { path: path.to_owned(), at_start: file_id(path), checked: Instant::now() }
    }

    /// Whether the file was replaced, looked at once per [`EXE_CHECK_MS`]. A file that could
    /// not be read at the start is not watched.
    fn replaced(&mut self) -> bool {
        if self.at_start.is_none() || self.checked.elapsed() < Duration::from_millis(EXE_CHECK_MS) {
            return false;
        }
        self.checked = Instant::now();
        file_id(&self.path) != self.at_start
    }
}

/// Connection threads whose connection closed, waiting for another. The accept loop promises a
/// new connection to one of them and starts a thread only when none waits. A thread counts as
/// waiting before its connection stops counting as open, so the threads never outnumber the
/// open connections and the waiting places: at most [`CONNECTIONS_MAX`] (a thread that waited
/// [`THREAD_IDLE_MS`] ends).
struct Idle {
    give: Sender<UnixStream>,
    take: Receiver<UnixStream>,
    /// Waiting places no connection was promised to: each promise and each thread that ends
    /// takes one away, so the threads still waiting are never fewer than the connections
    /// promised and not yet taken.
    waiting: AtomicUsize,
}

impl Idle {
    fn new() -> Idle {
        let (give, take) = crossbeam_channel::unbounded();
        Idle { give, take, waiting: AtomicUsize::new(0) }
    }

    /// Promises one connection to a waiting thread; `false` when none waits.
    fn promise(&self) -> bool {
        self.waiting.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }

    /// Hands `stream` to a waiting thread, or gives it back when none waits.
    fn hand(&self, stream: UnixStream) -> Option<UnixStream> {
        if !self.promise() {
            return Some(stream);
        }
        match self.give.send(stream) {
            Ok(()) => None,
            // Not while `self` holds the receiver; the promise is taken back.
            Err(unsent) => {
                self.waiting.fetch_add(1, Ordering::SeqCst);
                Some(unsent.into_inner())
            }
        }
    }

    /// Counts a thread whose connection closed as waiting: [`Idle::next`] follows.
    fn enter(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
    }

    /// The next connection for a thread that entered, looking at `stopping` once per `tick`;
    /// `None` when the thread ends: the server stops, or none came within `idle_for`, and none
    /// was promised to it.
    fn next(
        &self,
        stopping: &dyn Fn() -> bool,
        idle_for: Duration,
        tick: Duration,
    ) -> Option<UnixStream> {
        let start = Instant::now();
        loop {
            match self.take.recv_timeout(tick) {
                Ok(stream) => return Some(stream),
                Err(RecvTimeoutError::Timeout) => {
                    let done = stopping() || start.elapsed() >= idle_for;
                    // Ends only by taking back its own place: when every waiting place was
                    // promised, a connection is on its way to this thread or another still here.
                    if done && self.promise() {
                        return None;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }
}

/// Accepts connections until the server stops; returns the connection threads to join.
fn accept_loop(
    shared: &Arc<Shared>,
    listener: &UnixListener,
    jobs: &Sender<Pending>,
    idle: &Arc<Idle>,
    idle_exit: Option<Duration>,
    mut watch: Option<Watched>,
) -> Vec<thread::JoinHandle<()>> {
    let mut threads: Vec<thread::JoinHandle<()>> = Vec::new();
    while !shared.stopping() {
        threads.retain(|t| !t.is_finished());
        if watch.as_mut().is_some_and(Watched::replaced) {
            shared.stop(Stop::Replaced);
            break;
        }
        if let Some(idle) = idle_exit {
            let quiet_us =
                shared.now_us().saturating_sub(shared.last_request_us.load(Ordering::SeqCst));
            if shared.in_flight.load(Ordering::SeqCst) == 0
                && Duration::from_micros(quiet_us) >= idle
            {
                shared.stop(Stop::Idle);
                break;
            }
        }
        let mut fds = [PollFd::new(listener, PollFlags::IN)];
        let tick = tick();
        if !matches!(poll(&mut fds, Some(&tick)), Ok(n) if n > 0) {
            continue;
        }
        let Ok((stream, _)) = listener.accept() else {
            continue;
        };
        if let Some(thread) = admit(shared, stream, jobs, idle) {
            threads.push(thread);
        }
    }
    threads
}

/// Checks a new connection (its peer's uid, the connection bound) and hands it to a waiting
/// connection thread, or starts one (returned, to be joined).
fn admit(
    shared: &Arc<Shared>,
    stream: UnixStream,
    jobs: &Sender<Pending>,
    idle: &Arc<Idle>,
) -> Option<thread::JoinHandle<()>> {
    let refuse = |mut stream: &UnixStream, error, message: String| {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_write_timeout(Some(Duration::from_millis(REPLY_WRITE_MS)));
        let frame = ServerFrame::Error { id: None, error, message };
        let _ = write_frame(&mut stream, &encode(&frame));
    };
    let me = rustix::process::geteuid().as_raw();
    match rustix::net::sockopt::socket_peercred(&stream) {
        Ok(peer) if peer.uid.as_raw() == me => {}
        Ok(peer) => {
            shared.count(|s| s.refused += 1);
            let why = format!("peer uid {} is not this server's uid {me}", peer.uid.as_raw());
            refuse(&stream, ErrorCode::Refused, why);
            return None;
        }
        Err(e) => {
            shared.count(|s| s.refused += 1);
            refuse(&stream, ErrorCode::Refused, format!("peer credentials unreadable: {e}"));
            return None;
        }
    }
    if shared.open.load(Ordering::SeqCst) >= CONNECTIONS_MAX {
        shared.count(|s| s.refused += 1);
        let why = format!("{CONNECTIONS_MAX} connections are open");
        refuse(&stream, ErrorCode::Busy, why);
        return None;
    }
    shared.open.fetch_add(1, Ordering::SeqCst);
    shared.count(|s| s.connections += 1);
    let stream = idle.hand(stream)?;
    let (serving, jobs, idle) = (Arc::clone(shared), jobs.clone(), Arc::clone(idle));
    let spawned = thread::Builder::new().name("hookstate-conn".into()).spawn(move || {
        let shared = serving;
        let (idle_for, tick) =
            (Duration::from_millis(THREAD_IDLE_MS), Duration::from_millis(TICK_MS));
        let mut next = Some(stream);
        while let Some(stream) = next {
            let engagement = Arc::new(Engagement::default());
            if let Ok(mut list) = shared.engaged.lock() {
                list.push(Arc::clone(&engagement));
            }
            connection(&shared, stream, &jobs, &engagement);
            if let Ok(mut list) = shared.engaged.lock() {
                list.retain(|e| !Arc::ptr_eq(e, &engagement));
            }
            idle.enter();
            shared.open.fetch_sub(1, Ordering::SeqCst);
            next = idle.next(&|| shared.stopping(), idle_for, tick);
        }
    });
    match spawned {
        Ok(thread) => {
            shared.count(|s| s.threads += 1);
            Some(thread)
        }
        Err(_) => {
            // The connection closes unanswered: the client runs its call in-process.
            shared.open.fetch_sub(1, Ordering::SeqCst);
            None
        }
    }
}

/// One connection: the hello, then requests until the client closes, goes silent past
/// [`CONNECTION_IDLE_MS`], breaks a bound that loses the frame boundary, or the server stops.
fn connection(
    shared: &Arc<Shared>,
    stream: UnixStream,
    jobs: &Sender<Pending>,
    engagement: &Engagement,
) {
    let mut stream = Conn { stream };
    if stream.stream.set_nonblocking(false).is_err()
        || stream.stream.set_write_timeout(Some(Duration::from_millis(REPLY_WRITE_MS))).is_err()
        || write_frame(&mut stream.stream, &shared.hello).is_err()
    {
        return;
    }
    loop {
        if !wait_readable(shared, &stream.stream) {
            return;
        }
        let deadline = Instant::now() + Duration::from_millis(REQUEST_READ_MS);
        let payload = match stream.read(deadline) {
            Ok(payload) => payload,
            Err(FrameError::TooLarge { len, max }) => {
                let message = format!("a request of {len} bytes is over the limit of {max}");
                let _ = stream.send(&ServerFrame::Error {
                    id: None,
                    error: ErrorCode::TooLarge,
                    message,
                });
                return;
            }
            Err(_) => return,
        };
        engagement.busy.store(true, Ordering::SeqCst);
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        shared.last_request_us.store(shared.now_us(), Ordering::SeqCst);
        let keep = request(shared, &mut stream, &payload, jobs);
        shared.last_request_us.store(shared.now_us(), Ordering::SeqCst);
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        engagement.answered_us.store(shared.now_us(), Ordering::SeqCst);
        engagement.busy.store(false, Ordering::SeqCst);
        if !keep || shared.stopping() {
            return;
        }
    }
}

/// Waits until the next request's first byte can be read; `false` when the client closed, went
/// silent past [`CONNECTION_IDLE_MS`], or the server is stopping while the connection is idle.
fn wait_readable(shared: &Shared, stream: &UnixStream) -> bool {
    let start = Instant::now();
    let tick = tick();
    loop {
        if shared.stopping() || start.elapsed() >= Duration::from_millis(CONNECTION_IDLE_MS) {
            return false;
        }
        let mut fds = [PollFd::new(stream, PollFlags::IN)];
        match poll(&mut fds, Some(&tick)) {
            Ok(n) if n > 0 => return true,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
}

/// Handles one request frame; `false` when the connection must close.
fn request(
    shared: &Arc<Shared>,
    stream: &mut Conn,
    payload: &[u8],
    jobs: &Sender<Pending>,
) -> bool {
    let run = match decode_request(payload) {
        Ok(ClientFrame::Run(run)) => run,
        Ok(ClientFrame::Stats { id }) => {
            let stats = shared.stats.lock().map(|s| s.clone()).unwrap_or_default();
            return stream.send(&ServerFrame::Stats { id, stats }).is_ok();
        }
        Ok(ClientFrame::Stdin { id, .. }) => {
            let message = "stdin was sent but not asked for".to_owned();
            let frame = ServerFrame::Error { id: Some(id), error: ErrorCode::BadRequest, message };
            return stream.send(&frame).is_ok();
        }
        Err(message) => {
            let frame = ServerFrame::Error { id: None, error: ErrorCode::BadRequest, message };
            return stream.send(&frame).is_ok();
        }
    };
    let id = run.id;
    // A store file moved over or removed since the server opened it: nothing is answered from
    // the old file; the server stops and the caller runs the call on the file at the path.
    if shared.engine.check_in_place().is_err() {
        shared.stop(Stop::Replaced);
        let message = "the server's store file was replaced; run the call in-process".to_owned();
        let frame = ServerFrame::Error { id: Some(id), error: ErrorCode::NotServed, message };
        return stream.send(&frame).is_ok();
    }
    let mut source = Fetch { stream, id };
    let prepared = shared.handler.prepare(run, &shared.engine, &mut source);
    let frame = match prepared {
        Prepared::Answer(reply) => ServerFrame::Reply(Reply { id, ..reply }),
        Prepared::NotServed(message) => {
            ServerFrame::Error { id: Some(id), error: ErrorCode::NotServed, message }
        }
        Prepared::Abandon => return false,
        Prepared::Write(job) => {
            let (answer, answered) = answer_slot();
            let bytes = job.bytes();
            if jobs.send(Pending { job, answer, bytes }).is_err() {
                let message = "the server is stopping".to_owned();
                ServerFrame::Error { id: Some(id), error: ErrorCode::Busy, message }
            } else {
                match answered.recv() {
                    Some(Ok(reply)) => ServerFrame::Reply(Reply { id, ..reply }),
                    Some(Err((error, message))) => {
                        ServerFrame::Error { id: Some(id), error, message }
                    }
                    None => {
                        let message = "the writer stopped before it answered".to_owned();
                        ServerFrame::Error { id: Some(id), error: ErrorCode::CommitFailed, message }
                    }
                }
            }
        }
    };
    shared.count(|s| s.requests += 1);
    stream.send(&frame).is_ok()
}

/// A connection's stream, with frame reads bounded by a deadline.
struct Conn {
    stream: UnixStream,
}

impl Conn {
    fn read(&mut self, deadline: Instant) -> Result<Vec<u8>, FrameError> {
        let mut reader = DeadlineReader { stream: &self.stream, deadline };
        read_frame(&mut reader, REQUEST_BYTES_MAX)
    }

    fn send(&mut self, frame: &ServerFrame) -> std::io::Result<()> {
        write_frame(&mut self.stream, &encode(frame))
    }
}

/// Reads from a stream, failing with `TimedOut` once `deadline` passed, however the bytes trickle.
struct DeadlineReader<'a> {
    stream: &'a UnixStream,
    deadline: Instant,
}

impl std::io::Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut stream = self.stream;
        std::io::Read::read(&mut stream, buf)
    }
}

/// Fetches the client's stdin: asks for it, reads the answer within [`STDIN_WAIT_MS`].
struct Fetch<'a> {
    stream: &'a mut Conn,
    id: u64,
}

impl StdinSource for Fetch<'_> {
    fn fetch(&mut self) -> Option<String> {
        let need = ServerFrame::NeedStdin { id: self.id, need: "stdin".into() };
        self.stream.send(&need).ok()?;
        let deadline = Instant::now() + Duration::from_millis(STDIN_WAIT_MS);
        let payload = self.stream.read(deadline).ok()?;
        match decode_request(&payload) {
            Ok(ClientFrame::Stdin { id, stdin }) if id == self.id => Some(stdin),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connections handed while waiting threads end at once (no idle time, no tick) are each
    /// taken by a thread: a thread never ends while a connection promised to the waiting ones
    /// has no other thread left to take it.
    #[test]
    fn no_connection_handed_to_the_waiting_threads_is_left_untaken() {
        const CONNECTIONS: usize = 4_000;
        let idle = Arc::new(Idle::new());
        let taken = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for _ in 0..CONNECTIONS {
            // Its peer closes at once: a few descriptors are open at a time.
            let (stream, _) = UnixStream::pair().unwrap();
            let Some(stream) = idle.hand(stream) else {
                continue;
            };
            let (idle, taken) = (Arc::clone(&idle), Arc::clone(&taken));
            threads.push(thread::spawn(move || {
                let mut next = Some(stream);
                while next.take().is_some() {
                    taken.fetch_add(1, Ordering::SeqCst);
                    idle.enter();
                    next = idle.next(&|| false, Duration::ZERO, Duration::ZERO);
                }
            }));
        }
        for thread in threads {
            thread.join().unwrap();
        }
        let left = idle.take.try_iter().count();
        assert_eq!((taken.load(Ordering::SeqCst), left), (CONNECTIONS, 0));
        assert_eq!(idle.waiting.load(Ordering::SeqCst), 0, "every thread took back its place");
    }
}
