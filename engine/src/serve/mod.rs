//! `hookstate serve`: one long-lived process holds the store and answers requests on a Unix
//! socket beside it, committing the writes of many calls in one durable commit (group commit).
//!
//! [`protocol`] is the wire format (docs/protocol.md), [`server`] the socket, its safety bounds
//! and the server's life (one per store, stop on SIGTERM/SIGINT or when idle), [`writer`] the one
//! writer thread fed through a crossbeam channel, [`client`] the client side the CLI and the
//! benches use. What a request means is not decided here: the server runs a [`Handler`] (the
//! CLI's own dispatch) for each request, on the connection's thread for a read and on the writer
//! thread, inside a batch, for a write. Does not parse arguments or print.

mod client;
mod lock;
mod protocol;
mod server;
mod shared;
mod writer;

pub use self::client::{socket_path, Answer, Client};
pub use self::protocol::{
    decode_request, encode, read_frame, write_frame, ClientFrame, ErrorCode, FrameError, Reply,
    Run, ServerFrame, Stats, ARGS_BYTES_MAX, ARGS_COUNT_MAX, ENV_COUNT_MAX, PROTOCOL_VERSION,
    REPLY_BYTES_MAX, REQUEST_BYTES_MAX,
};
pub use self::server::{
    serve, ServeOptions, ServeReport, Serving, CONNECTIONS_MAX, CONNECTION_IDLE_MS, HELLO_WAIT_MS,
    REQUEST_READ_MS, STDIN_WAIT_MS,
};
pub use self::shared::{Handler, Job, Prepared, StdinSource};
pub use self::writer::{BATCH_BYTES_MAX, BATCH_CALLS_MAX, LINGER_US_MAX};
