//! A raw-TCP login service: request/response over length-delimited JSON frames.
//!
//! ## Wire format
//! Every message, in both directions, is one frame: a 4-byte **big-endian** unsigned length `N`
//! followed by `N` bytes of UTF-8 JSON. The server refuses `N` above
//! [`LoginConfig::max_frame_bytes`] (default 4096) by closing the connection.
//!
//! * request: `{"username":"alice","password":"wonderland"}` ([`LoginRequest`]; other fields are
//!   ignored)
//! * answer ([`LoginAction`]): `{"action":"granted","role":"admin"}` or
//!   `{"action":"denied","reason":"unknown_user" | "wrong_password" | "account_locked"}`
//!
//! Any number of requests may be sent on one connection, pipelined or not; answers come back in
//! order. A frame that is not a valid request closes the connection and counts a `malformed`
//! error. Metrics (prefix `stampede_target_login_`) are those of [`crate::echo`] plus
//! `logins_total{result}`.
//!
//! ## Users
//! [`UserTable::builtin`] knows `alice`/`wonderland` (role `admin`), `bob`/`builder` (role `user`),
//! `mallory`/`mallory` (locked), and the synthetic users `user0` … `user999999` whose password is
//! `pass<N>` (role `user`), so a load test can log in as many distinct users. A users file is a
//! JSON array: `[{"username":"u","password":"p","role":"r","locked":false}]` (`locked` optional).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use prometheus::IntCounterVec;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::frame::{self as codec, Decoder, Framing};
pub use crate::framed::FramedStats;
use crate::framed::{self, Core, Handler, Limits};
use crate::TargetError;

/// Number of synthetic users (`user<N>` / `pass<N>`) in the built-in table.
pub const SYNTHETIC_USERS: u64 = 1_000_000;

/// A login attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoginRequest {
    /// The user name.
    pub username: String,
    /// The password, in clear (this is a test target).
    pub password: String,
}

/// The server's answer to a [`LoginRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum LoginAction {
    /// Access granted, with the user's role.
    Granted {
        /// The user's role.
        role: String,
    },
    /// Access denied, with the reason.
    Denied {
        /// Why.
        reason: DenyReason,
    },
}

/// Why a login was denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenyReason {
    /// No such user.
    UnknownUser,
    /// The password does not match.
    WrongPassword,
    /// The account is locked.
    AccountLocked,
}

/// One entry of a users file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
    /// The role returned on success.
    pub role: String,
    /// A locked account is always denied with [`DenyReason::AccountLocked`].
    #[serde(default)]
    pub locked: bool,
}

/// The users the login server knows.
#[derive(Clone, Debug, Default)]
pub struct UserTable {
    users: HashMap<String, User>,
    synthetic: bool,
}

impl UserTable {
    /// The built-in table (see the module docs), including the synthetic users.
    pub fn builtin() -> Self {
        let users = [
            ("alice", "wonderland", "admin", false),
            ("bob", "builder", "user", false),
            ("mallory", "mallory", "user", true),
        ]
        .into_iter()
        .map(|(u, p, r, locked)| User {
            username: u.into(),
            password: p.into(),
            role: r.into(),
            locked,
        });
        let mut t = Self::from_users(users);
        t.synthetic = true;
        t
    }

    /// Exactly these users (a later duplicate name replaces an earlier one).
    pub fn from_users(users: impl IntoIterator<Item = User>) -> Self {
        Self {
            users: users.into_iter().map(|u| (u.username.clone(), u)).collect(),
            synthetic: false,
        }
    }

    /// Reads a users file (a JSON array of [`User`]).
    pub fn from_file(path: &Path) -> Result<Self, TargetError> {
        let text = std::fs::read_to_string(path).map_err(|source| TargetError::UsersFile {
            path: path.to_owned(),
            source,
        })?;
        let users: Vec<User> =
            serde_json::from_str(&text).map_err(|source| TargetError::UsersParse {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self::from_users(users))
    }

    /// Decides a login attempt.
    pub fn check(&self, req: &LoginRequest) -> LoginAction {
        let denied = |reason| LoginAction::Denied { reason };
        if let Some(u) = self.users.get(&req.username) {
            return if u.locked {
                denied(DenyReason::AccountLocked)
            } else if u.password != req.password {
                denied(DenyReason::WrongPassword)
            } else {
                LoginAction::Granted {
                    role: u.role.clone(),
                }
            };
        }
        match self.synthetic_index(&req.username) {
            Some(n) => {
                if req.password.strip_prefix("pass") == Some(n) {
                    LoginAction::Granted {
                        role: "user".into(),
                    }
                } else {
                    denied(DenyReason::WrongPassword)
                }
            }
            None => denied(DenyReason::UnknownUser),
        }
    }

    /// `Some("42")` for `user42` if synthetic users are on and 42 is in range (no leading zeros).
    fn synthetic_index<'a>(&self, username: &'a str) -> Option<&'a str> {
        if !self.synthetic {
            return None;
        }
        let digits = username.strip_prefix("user")?;
        let n: u64 = digits.parse().ok()?;
        (n < SYNTHETIC_USERS && n.to_string() == digits).then_some(digits)
    }
}

/// Configuration of the login server.
#[derive(Clone, Debug)]
pub struct LoginConfig {
    /// The users.
    pub users: UserTable,
    /// Largest request frame payload; a longer one closes the connection.
    pub max_frame_bytes: usize,
    /// Connections held open at once.
    pub max_connections: usize,
    /// Each request must be fully received within this time of the previous one (also the
    /// idle timeout); writes that block longer close the connection.
    pub read_timeout: Duration,
    /// After shutdown is asked for, how long open connections get to finish.
    pub shutdown_grace: Duration,
}

impl Default for LoginConfig {
    fn default() -> Self {
        Self {
            users: UserTable::builtin(),
            max_frame_bytes: 4096,
            max_connections: 10_000,
            read_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// The login server and a handle on its counters. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct LoginServer {
    core: Arc<Core>,
    handler: Arc<Login>,
}

struct Login {
    users: UserTable,
    results: IntCounterVec,
}

impl Handler for Login {
    fn handle(&self, frame: Bytes, out: &mut BytesMut) -> Result<(), &'static str> {
        let req = decode_request(&frame).map_err(|_| "malformed")?;
        let action = self.users.check(&req);
        let result = match &action {
            LoginAction::Granted { .. } => "granted",
            LoginAction::Denied { reason } => match reason {
                DenyReason::UnknownUser => "unknown_user",
                DenyReason::WrongPassword => "wrong_password",
                DenyReason::AccountLocked => "account_locked",
            },
        };
        self.results.with_label_values(&[result]).inc();
        encode_message(&action, out).map_err(|_| "malformed")
    }
}

impl LoginServer {
    /// Builds the server state and its metrics registry.
    pub fn new(cfg: LoginConfig) -> Result<Self, TargetError> {
        let limits = Limits {
            framing: Framing::Length,
            max_frame: cfg.max_frame_bytes,
            read_timeout: cfg.read_timeout,
            shutdown_grace: cfg.shutdown_grace,
        };
        let core = Core::new("login", limits, cfg.max_connections)?;
        let results = IntCounterVec::new(
            prometheus::Opts::new("logins_total", "Login answers by result."),
            &["result"],
        )?;
        core.metrics.registry.register(Box::new(results.clone()))?;
        for r in [
            "granted",
            "unknown_user",
            "wrong_password",
            "account_locked",
        ] {
            results.with_label_values(&[r]);
        }
        Ok(Self {
            core: Arc::new(core),
            handler: Arc::new(Login {
                users: cfg.users,
                results,
            }),
        })
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> FramedStats {
        self.core.stats()
    }

    /// The metrics in Prometheus text format.
    pub fn metrics_text(&self) -> String {
        self.core.metrics_text()
    }

    /// Waits until `pred(&self.stats())` holds; re-evaluated when a connection opens or closes.
    pub async fn wait_until(&self, mut pred: impl FnMut(&FramedStats) -> bool) {
        self.core
            .conns
            .wait_until(|_| pred(&self.core.stats()))
            .await;
    }

    /// Serves `listener` until `shutdown` resolves, then drains (see [`LoginConfig`]).
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), TargetError> {
        framed::serve_tcp(self.core, self.handler, listener, shutdown, "login target").await
    }
}

/// Serves the login protocol on `listener` until `shutdown`; see [`LoginServer::serve`].
pub async fn serve(
    listener: TcpListener,
    cfg: LoginConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), TargetError> {
    LoginServer::new(cfg)?.serve(listener, shutdown).await
}

/// Parses a request frame's payload.
pub fn decode_request(payload: &[u8]) -> Result<LoginRequest, serde_json::Error> {
    serde_json::from_slice(payload)
}

/// Parses an answer frame's payload.
pub fn decode_action(payload: &[u8]) -> Result<LoginAction, serde_json::Error> {
    serde_json::from_slice(payload)
}

/// Appends `msg` to `out` as one frame (length prefix and JSON).
pub fn encode_message<T: Serialize>(msg: &T, out: &mut BytesMut) -> Result<(), TargetError> {
    let json = serde_json::to_vec(msg).map_err(TargetError::Payload)?;
    codec::encode(Framing::Length, &json, out)?;
    Ok(())
}

/// A minimal client of the login protocol, one request at a time over one connection.
pub struct Client {
    stream: TcpStream,
    decoder: Decoder,
    rbuf: BytesMut,
    wbuf: BytesMut,
}

impl Client {
    /// Connects to a login server.
    pub async fn connect(addr: SocketAddr) -> Result<Self, TargetError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(TargetError::ClientIo)?;
        let _ = stream.set_nodelay(true);
        Ok(Self {
            stream,
            decoder: Decoder::new(Framing::Length, 1 << 20),
            rbuf: BytesMut::with_capacity(512),
            wbuf: BytesMut::with_capacity(512),
        })
    }

    /// Sends one request and waits for its answer.
    pub async fn login(
        &mut self,
        username: &str,
        password: &str,
    ) -> Result<LoginAction, TargetError> {
        let req = LoginRequest {
            username: username.to_owned(),
            password: password.to_owned(),
        };
        self.wbuf.clear();
        encode_message(&req, &mut self.wbuf)?;
        self.stream
            .write_all(&self.wbuf)
            .await
            .map_err(TargetError::ClientIo)?;
        loop {
            if let Some(frame) = self.decoder.decode(&mut self.rbuf)? {
                return decode_action(&frame).map_err(TargetError::Payload);
            }
            let n = self
                .stream
                .read_buf(&mut self.rbuf)
                .await
                .map_err(TargetError::ClientIo)?;
            if n == 0 {
                return Err(TargetError::Closed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(u: &str, p: &str) -> LoginRequest {
        LoginRequest {
            username: u.into(),
            password: p.into(),
        }
    }

    #[test]
    fn builtin_table_decides() {
        let t = UserTable::builtin();
        let denied = |reason| LoginAction::Denied { reason };
        assert_eq!(
            t.check(&req("alice", "wonderland")),
            LoginAction::Granted {
                role: "admin".into()
            }
        );
        assert_eq!(
            t.check(&req("alice", "x")),
            denied(DenyReason::WrongPassword)
        );
        assert_eq!(
            t.check(&req("mallory", "mallory")),
            denied(DenyReason::AccountLocked)
        );
        assert_eq!(
            t.check(&req("nobody", "x")),
            denied(DenyReason::UnknownUser)
        );
        assert_eq!(
            t.check(&req("user42", "pass42")),
            LoginAction::Granted {
                role: "user".into()
            }
        );
        assert_eq!(
            t.check(&req("user42", "pass43")),
            denied(DenyReason::WrongPassword)
        );
        assert_eq!(
            t.check(&req("user042", "pass042")),
            denied(DenyReason::UnknownUser)
        );
        assert_eq!(
            t.check(&req("user1000000", "pass1000000")),
            denied(DenyReason::UnknownUser)
        );
        assert_eq!(
            t.check(&req("user", "pass")),
            denied(DenyReason::UnknownUser)
        );
    }

    #[test]
    fn file_table_has_no_synthetic_users() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.json");
        std::fs::write(&path, r#"[{"username":"u","password":"p","role":"r"},{"username":"l","password":"p","role":"r","locked":true}]"#).unwrap();
        let t = UserTable::from_file(&path).unwrap();
        assert_eq!(
            t.check(&req("u", "p")),
            LoginAction::Granted { role: "r".into() }
        );
        assert_eq!(
            t.check(&req("l", "p")),
            LoginAction::Denied {
                reason: DenyReason::AccountLocked
            }
        );
        assert_eq!(
            t.check(&req("user1", "pass1")),
            LoginAction::Denied {
                reason: DenyReason::UnknownUser
            }
        );
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(
            UserTable::from_file(&path),
            Err(TargetError::UsersParse { .. })
        ));
        assert!(matches!(
            UserTable::from_file(&dir.path().join("none")),
            Err(TargetError::UsersFile { .. })
        ));
    }

    #[test]
    fn wire_format_is_as_documented() {
        let mut out = BytesMut::new();
        encode_message(
            &LoginAction::Granted {
                role: "admin".into(),
            },
            &mut out,
        )
        .unwrap();
        let json = br#"{"action":"granted","role":"admin"}"#;
        assert_eq!(&out[..4], &(json.len() as u32).to_be_bytes());
        assert_eq!(&out[4..], json);
        let denied = serde_json::to_string(&LoginAction::Denied {
            reason: DenyReason::AccountLocked,
        })
        .unwrap();
        assert_eq!(denied, r#"{"action":"denied","reason":"account_locked"}"#);
        assert_eq!(
            decode_request(br#"{"username":"a","password":"b","extra":1}"#).unwrap(),
            req("a", "b")
        );
        assert!(decode_request(br#"{"username":"a"}"#).is_err());
        assert!(decode_request(b"\xff\xfe").is_err());
    }
}
