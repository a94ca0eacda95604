//! The target URL, parsed once into its parts: the transport, the host and port (default
//! filled in), the HTTP path prefix, or a unix socket path. Validation, the port budget, the
//! controller's address policy and the agent's resolution all read this one value, so they
//! cannot disagree about what the URL means.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::protocol::Transport;

/// A parsed target URL; it serializes back to the text it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Target {
    text: String,
    transport: Transport,
    /// Host as written in the URL, brackets of an IPv6 address included.
    host: String,
    port: u16,
    /// Whether the URL gave the port (the HTTP `Host` header repeats the URL's form).
    explicit_port: bool,
    /// `http(s)://host/api/v1` → `/api/v1` (no trailing slash); empty for none.
    prefix: String,
    /// `unix:///path` → `/path`.
    unix_path: String,
}

/// A target URL that cannot be used; each variant holds the URL (or the part) it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// No `scheme://`.
    #[error("`{0}` has no scheme (http://, https://, tcp://, udp://, unix://, grpc://, grpcs://, ws://, wss://)")]
    NoScheme(String),
    /// A scheme no transport speaks.
    #[error(
        "`{0}://` is not a supported scheme (http, https, tcp, udp, unix, grpc, grpcs, ws, wss)"
    )]
    Scheme(String),
    /// A `unix://` URL without an absolute path.
    #[error("`{0}` is not unix:///absolute/path")]
    UnixPath(String),
    /// Nothing between `://` and the path.
    #[error("`{0}` has no host")]
    NoHost(String),
    /// A host that is empty or holds `@` or a space.
    #[error("`{0}` has no valid host")]
    Host(String),
    /// A port that is not a number from 1 to 65535.
    #[error("`{url}`: `{port}` is not a port")]
    Port {
        /// The whole URL.
        url: String,
        /// What stood where the port goes.
        port: String,
    },
    /// A transport without a default port, or a path where none is taken.
    #[error("`{0}` needs host:port")]
    NeedsPort(String),
    /// An http(s) URL with a query or fragment, which a prefix cannot hold.
    #[error("`{0}`: a target may have a path prefix, not a query or fragment")]
    QueryOrFragment(String),
}

impl Target {
    /// Parses a target URL; the error says what is wrong.
    pub fn parse(url: &str) -> Result<Self, TargetError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| TargetError::NoScheme(url.to_string()))?;
        let transport = match scheme {
            "http" => Transport::Http,
            "https" => Transport::Https,
            "tcp" => Transport::Tcp,
            "udp" => Transport::Udp,
            "unix" => Transport::Unix,
            "grpc" => Transport::Grpc,
            "grpcs" => Transport::Grpcs,
            "ws" => Transport::Ws,
            "wss" => Transport::Wss,
            other => return Err(TargetError::Scheme(other.to_string())),
        };
        let mut t = Self {
            text: url.to_string(),
            transport,
            host: String::new(),
            port: 0,
            explicit_port: false,
            prefix: String::new(),
            unix_path: String::new(),
        };
        if transport == Transport::Unix {
            if !rest.starts_with('/') || rest.len() < 2 {
                return Err(TargetError::UnixPath(url.to_string()));
            }
            t.unix_path = rest.to_string();
            return Ok(t);
        }
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(TargetError::NoHost(url.to_string()));
        }
        let (host, port) = match authority.rfind(']') {
            Some(close) if authority.starts_with('[') => {
                let port = authority[close + 1..].strip_prefix(':');
                (&authority[..=close], port)
            }
            _ => match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            },
        };
        if host.is_empty() || host == "[]" || host.contains(['@', ' ']) {
            return Err(TargetError::Host(url.to_string()));
        }
        t.host = host.to_string();
        match port {
            Some(p) => {
                t.port =
                    p.parse::<u16>()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| TargetError::Port {
                            url: url.to_string(),
                            port: p.to_string(),
                        })?;
                t.explicit_port = true;
            }
            None => {
                t.port = match transport {
                    Transport::Http | Transport::Ws => 80,
                    Transport::Https | Transport::Grpcs | Transport::Wss => 443,
                    _ => return Err(TargetError::NeedsPort(url.to_string())),
                }
            }
        }
        match transport {
            Transport::Http | Transport::Https | Transport::Ws | Transport::Wss => {
                if path.contains(['?', '#']) || path.contains(char::is_whitespace) {
                    return Err(TargetError::QueryOrFragment(url.to_string()));
                }
                t.prefix = path.trim_end_matches('/').to_string();
            }
            _ => {
                if !path.is_empty() && path != "/" {
                    return Err(TargetError::NeedsPort(url.to_string()));
                }
            }
        }
        Ok(t)
    }

    /// The transport the URL's scheme names (`http`, `grpcs`, `unix`, …).
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// `host:port` to connect to (default port filled in, IPv6 in brackets); `None` for unix.
    pub fn socket_authority(&self) -> Option<String> {
        (self.transport != Transport::Unix).then(|| format!("{}:{}", self.host, self.port))
    }

    /// What a `target(NAME)` threshold and the report's targets call it: `host:port` with the
    /// default port filled in (two URLs on one service name it alike), or a unix socket's path.
    pub fn scope_name(&self) -> String {
        self.socket_authority()
            .unwrap_or_else(|| self.unix_path.clone())
    }

    /// The authority as the URL wrote it: the HTTP `Host` header and `:authority`.
    pub fn authority(&self) -> String {
        if self.explicit_port {
            format!("{}:{}", self.host, self.port)
        } else {
            self.host.clone()
        }
    }

    /// The host without an IPv6 address's brackets: the TLS server name.
    pub fn host(&self) -> &str {
        self.host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host)
    }

    /// The port to connect to (the scheme's default filled in); `None` for unix.
    pub fn port(&self) -> Option<u16> {
        (self.transport != Transport::Unix).then_some(self.port)
    }

    /// The HTTP path prefix every request path is appended to (`""` for none).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The socket path of a `unix://` target.
    pub fn unix_path(&self) -> Option<&str> {
        (self.transport == Transport::Unix).then_some(self.unix_path.as_str())
    }

    /// The URL as it was written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl TryFrom<String> for Target {
    type Error = TargetError;
    fn try_from(s: String) -> Result<Self, TargetError> {
        Self::parse(&s)
    }
}

impl From<Target> for String {
    fn from(t: Target) -> String {
        t.text
    }
}

impl std::str::FromStr for Target {
    type Err = TargetError;
    fn from_str(s: &str) -> Result<Self, TargetError> {
        Self::parse(s)
    }
}

impl JsonSchema for Target {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Target".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "What to load. The scheme picks the transport and so the step kind: http://host:port/prefix and https://... (http steps; request paths are appended to the prefix), tcp://host:port and unix:///path (tcp steps), udp://host:port (udp steps), grpc://host:port (gRPC over h2c) and grpcs://host[:port] (gRPC over TLS, h2 by ALPN) (grpc steps), ws://host:port/prefix and wss://... (WebSocket, ws steps)."
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_part() {
        let t = Target::parse("http://127.0.0.1:8080/api/v1/").unwrap();
        assert_eq!(t.transport(), Transport::Http);
        assert_eq!(t.socket_authority().unwrap(), "127.0.0.1:8080");
        assert_eq!(t.authority(), "127.0.0.1:8080");
        assert_eq!(t.prefix(), "/api/v1");
        let s = Target::parse("https://[::1]/x").unwrap();
        assert_eq!(s.socket_authority().unwrap(), "[::1]:443");
        assert_eq!((s.authority().as_str(), s.host()), ("[::1]", "::1"));
        let h = Target::parse("https://example.test").unwrap();
        assert_eq!((h.authority().as_str(), h.prefix()), ("example.test", ""));
        assert_eq!(
            Target::parse("tcp://h:7000")
                .unwrap()
                .socket_authority()
                .unwrap(),
            "h:7000"
        );
        let u = Target::parse("unix:///tmp/s.sock").unwrap();
        assert_eq!(
            (u.unix_path(), u.socket_authority()),
            (Some("/tmp/s.sock"), None)
        );
        assert_eq!(u.to_string(), "unix:///tmp/s.sock");
    }

    #[test]
    fn refuses_what_cannot_be_a_target() {
        for bad in [
            "127.0.0.1:80",
            "gopher://h:1",
            "http://",
            "http:///x",
            "http://h:0",
            "http://h:99999",
            "http://h/x?q=1",
            "tcp://h",
            "tcp://h:1/x",
            "udp://:53",
            "unix://rel",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }
}
