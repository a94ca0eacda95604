//! Optional access logging: off, stdout, or a file, through a buffer of configurable size.

use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::TargetError;

/// Where the HTTP server writes its access log.
///
/// Parsed from `off`, `stdout`, or any other string, which is taken as a file path (appended to).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AccessLog {
    /// No access log (the default; logging costs throughput).
    #[default]
    Off,
    /// One line per request on standard output.
    Stdout,
    /// One line per request appended to this file.
    File(PathBuf),
}

/// An access log target that names nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("empty access log target")]
pub struct EmptyAccessLog;

impl FromStr for AccessLog {
    type Err = EmptyAccessLog;

    fn from_str(s: &str) -> Result<Self, EmptyAccessLog> {
        match s {
            "" => Err(EmptyAccessLog),
            "off" | "none" => Ok(Self::Off),
            "stdout" | "-" => Ok(Self::Stdout),
            path => Ok(Self::File(PathBuf::from(path))),
        }
    }
}

/// A buffered access log writer shared by all connections.
///
/// Lines are `<unix-ms> <client-ip> "<METHOD> <target> <version>" <status> <bytes> <micros>`.
/// The buffer is flushed when full, once a second by the server, and at shutdown.
pub(crate) struct AccessLogger {
    out: Mutex<BufWriter<Box<dyn Write + Send>>>,
}

impl AccessLogger {
    pub(crate) fn open(target: &AccessLog, buffer: usize) -> Result<Option<Self>, TargetError> {
        let sink: Box<dyn Write + Send> = match target {
            AccessLog::Off => return Ok(None),
            AccessLog::Stdout => Box::new(std::io::stdout()),
            AccessLog::File(path) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| TargetError::AccessLog {
                        path: path.clone(),
                        source,
                    })?,
            ),
        };
        Ok(Some(Self {
            out: Mutex::new(BufWriter::with_capacity(buffer.max(128), sink)),
        }))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn log(
        &self,
        ip: IpAddr,
        method: &str,
        target: &str,
        version: &str,
        status: u16,
        bytes: u64,
        elapsed: Duration,
    ) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let mut line = String::with_capacity(96 + target.len());
        let _ = write!(line, "{ts} {} \"{method} ", ip.to_canonical());
        escape_into(&mut line, target);
        let _ = writeln!(
            line,
            " {version}\" {status} {bytes} {}",
            elapsed.as_micros()
        );
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = out.write_all(line.as_bytes()) {
            tracing::debug!(error = %e, "access log write failed");
        }
    }

    pub(crate) fn flush(&self) {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = out.flush() {
            tracing::debug!(error = %e, "access log flush failed");
        }
    }
}

/// Copies `s`, percent-escaping anything that could break the line format.
fn escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        if c.is_ascii_graphic() && c != '"' && c != '\\' {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets() {
        assert_eq!("off".parse::<AccessLog>(), Ok(AccessLog::Off));
        assert_eq!("stdout".parse::<AccessLog>(), Ok(AccessLog::Stdout));
        assert_eq!(
            "/tmp/a.log".parse::<AccessLog>(),
            Ok(AccessLog::File("/tmp/a.log".into()))
        );
        assert!("".parse::<AccessLog>().is_err());
    }

    #[test]
    fn escapes_quotes_and_controls() {
        let mut s = String::new();
        escape_into(&mut s, "/a\"b c\n\u{e9}");
        assert_eq!(s, "/a%22b%20c%0A%C3%A9");
    }
}
