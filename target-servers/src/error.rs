use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Errors returned by the target servers and their helpers.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// Binding a listening TCP or UDP socket failed.
    #[error("cannot bind {addr}")]
    Bind {
        /// The address that was asked for.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Binding a Unix socket failed.
    #[error("cannot bind unix socket {path}")]
    BindUnix {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The local address of a listener could not be read.
    #[error("cannot read the listener's local address")]
    LocalAddr(#[source] io::Error),
    /// The access log file could not be opened.
    #[error("cannot open access log {path}")]
    AccessLog {
        /// The log file path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The login users file could not be read.
    #[error("cannot read users file {path}")]
    UsersFile {
        /// The users file path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The login users file is not valid JSON of the expected shape.
    #[error("invalid users file {path}")]
    UsersParse {
        /// The users file path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A configuration value is out of range or inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Registering a Prometheus metric failed (a duplicate name: a bug).
    #[error("cannot register metrics")]
    Metrics(#[from] prometheus::Error),
    /// The gRPC server failed (its listener or a connection's setup).
    #[error("grpc server")]
    Grpc(#[from] tonic::transport::Error),
    /// Installing a signal handler failed.
    #[error("cannot install signal handler")]
    Signal(#[source] io::Error),
    /// A socket error on the client side of a helper client.
    #[error("client i/o error")]
    ClientIo(#[source] io::Error),
    /// A helper client received a frame it could not decode.
    #[error("bad frame from server")]
    Frame(#[from] crate::frame::FrameError),
    /// A helper client received a payload it could not deserialize.
    #[error("bad payload from server")]
    Payload(#[source] serde_json::Error),
    /// The server closed the connection before answering.
    #[error("connection closed by server")]
    Closed,
}
