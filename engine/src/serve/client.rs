//! The client side of the protocol: connect (bounded by the hello), send a request, read frames
//! until its answer, handing over stdin when the server asks for it. The CLI forwards through it;
//! the benches and tests use it as a persistent client.
//!
//! Does not fall back to anything: the caller decides what to do without a server.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::protocol::{
    encode, read_frame, write_frame, ClientFrame, ErrorCode, FrameError, Reply, Run, ServerFrame,
    PROTOCOL_VERSION, REPLY_BYTES_MAX,
};

/// The socket of the store at `db` when `serve` is not given `--socket`: `<db>.sock`.
#[must_use]
pub fn socket_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".sock");
    PathBuf::from(name)
}

/// A connection to a server that said hello in a protocol version this build speaks.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
    /// The server's pid.
    pub pid: u32,
    /// The store it serves.
    pub db: String,
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The verb ran: print this and exit with its code.
    Reply(Reply),
    /// The server did not run it, or cannot say whether it took effect.
    Error {
        /// What happened.
        error: ErrorCode,
        /// One line.
        message: String,
    },
}

fn io_error(message: impl Into<String>) -> std::io::Error {
    std::io::Error::other(message.into())
}

impl Client {
    /// Connects to the socket and waits at most `hello_wait` for the server's hello.
    ///
    /// # Errors
    /// No server (the socket is missing or refuses), a listener that runs as another user, a
    /// server that did not say hello in time, answered with an error (at its connection bound,
    /// another uid) or speaks another protocol.
    pub fn connect(socket: &Path, hello_wait: Duration) -> std::io::Result<Client> {
        let mut client = Client::open(socket)?;
        client.hello(hello_wait)?;
        Ok(client)
    }

    /// Connects without waiting for the hello, so a hook's one request can go before it arrives
    /// (the round trip saved); read it with [`Client::hello`] before the answer. A request sent
    /// so may be run by the server whatever follows, even later (a stopped server once resumed):
    /// a caller that runs the call elsewhere after a failure past the send does so under the
    /// call's idempotency key.
    ///
    /// # Errors
    /// No server (the socket is missing or refuses), or a listener that runs as another user.
    pub fn open(socket: &Path) -> std::io::Result<Client> {
        let stream = UnixStream::connect(socket)?;
        // Nothing goes to a listener of another user: the request carries the caller's
        // arguments, stdin and environment, and its answer is printed and exited with.
        let me = rustix::process::geteuid().as_raw();
        let peer = rustix::net::sockopt::socket_peercred(&stream)?;
        if peer.uid.as_raw() != me {
            let why = format!("the socket's listener runs as uid {}, not {me}", peer.uid.as_raw());
            return Err(io_error(why));
        }
        Ok(Client { stream, pid: 0, db: String::new() })
    }

    /// Reads the hello, waiting at most `hello_wait`.
    ///
    /// # Errors
    /// A server that did not say hello in time, answered with an error (at its connection bound,
    /// another uid) or speaks another protocol.
    pub fn hello(&mut self, hello_wait: Duration) -> std::io::Result<()> {
        match self.receive(Instant::now() + hello_wait)? {
            ServerFrame::Hello { protocol, pid, db, .. } if protocol == PROTOCOL_VERSION => {
                self.pid = pid;
                self.db = db;
                Ok(())
            }
            ServerFrame::Hello { protocol, .. } => {
                Err(io_error(format!("the server speaks protocol {protocol}")))
            }
            ServerFrame::Error { message, .. } => Err(io_error(message)),
            other => Err(io_error(format!("not a hello: {other:?}"))),
        }
    }

    /// Sends one frame.
    ///
    /// # Errors
    /// IO errors.
    pub fn send(&mut self, frame: &ClientFrame) -> std::io::Result<()> {
        write_frame(&mut self.stream, &encode(frame))
    }

    /// Reads one frame, waiting at most until `deadline`.
    ///
    /// # Errors
    /// `TimedOut` past the deadline, `UnexpectedEof` when the server closed, a frame that does
    /// not decode, IO errors.
    pub fn receive(&mut self, deadline: Instant) -> std::io::Result<ServerFrame> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        let payload = match read_frame(&mut self.stream, REPLY_BYTES_MAX) {
            Ok(payload) => payload,
            Err(FrameError::Closed) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Err(FrameError::Io(e)) => return Err(e),
            Err(e @ FrameError::TooLarge { .. }) => return Err(io_error(e.to_string())),
        };
        serde_json::from_slice(&payload).map_err(|e| io_error(format!("bad frame: {e}")))
    }

    /// Runs `run` and waits for its answer until `deadline`; when the server asks for stdin,
    /// `stdin` is called once (`None`: give up, the connection is closed and nothing was run).
    ///
    /// # Errors
    /// Timeouts, a closed connection (the answer is then unknown), IO errors.
    pub fn run(
        &mut self,
        run: &Run,
        stdin: &mut dyn FnMut() -> Option<String>,
        deadline: Instant,
    ) -> std::io::Result<Answer> {
        self.send(&ClientFrame::Run(run.clone()))?;
        self.answer(run, stdin, deadline)
    }

    /// Waits for the answer to `run`, already sent (after [`Client::open`]), as [`Client::run`]
    /// does.
    ///
    /// # Errors
    /// Timeouts, a closed connection (the answer is then unknown), IO errors.
    pub fn answer(
        &mut self,
        run: &Run,
        stdin: &mut dyn FnMut() -> Option<String>,
        deadline: Instant,
    ) -> std::io::Result<Answer> {
        loop {
            match self.receive(deadline)? {
                ServerFrame::Reply(reply) if reply.id == run.id => return Ok(Answer::Reply(reply)),
                ServerFrame::Error { id, error, message } if id.is_none_or(|i| i == run.id) => {
                    return Ok(Answer::Error { error, message })
                }
                ServerFrame::NeedStdin { id, .. } if id == run.id => match stdin() {
                    Some(text) => self.send(&ClientFrame::Stdin { id, stdin: text })?,
                    None => return Err(io_error("no stdin to give")),
                },
                other => return Err(io_error(format!("unexpected frame: {other:?}"))),
            }
        }
    }
}
