//! How the agent speaks to an `http(s)://` target: the HTTP version and the TLS options.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ScenarioError, SecretPem};

/// HTTP version of an `http://` or `https://` target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HttpVersion {
    /// HTTP/1.1 with keep-alive.
    #[default]
    #[serde(rename = "1.1")]
    Http11,
    /// HTTP/2: over `http://` cleartext with prior knowledge (h2c), over `https://`
    /// negotiated by ALPN (h2).
    #[serde(rename = "2")]
    Http2,
}

/// TLS options of an `https://` target.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsOptions {
    /// Accept any certificate, for self-signed test targets. Never for a real service: the
    /// run is then open to interception, and the report and the CLI say so loudly.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_verify: bool,
    /// PEM file of the certificate authorities to trust instead of the system's (relative to
    /// the scenario file). The CLI reads it into `ca_pem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// The trusted certificate authorities, PEM (what `ca_file` becomes once read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_pem: Option<String>,
    /// The name to send in SNI and to verify the certificate against, when it is not the
    /// target URL's host (for example a target addressed by IP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    /// PEM file of the certificate chain to present when the target asks for one (mutual
    /// TLS), leaf first, relative to the scenario file. Needs `client_key_file`. The CLI
    /// reads it into `client_cert_pem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert_file: Option<String>,
    /// PEM file of the private key of `client_cert_file` (PKCS#8, PKCS#1 or SEC1). The CLI
    /// reads it into `client_key_pem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key_file: Option<String>,
    /// The client certificate chain, PEM (what `client_cert_file` becomes once read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert_pem: Option<String>,
    /// The client private key, PEM (what `client_key_file` becomes once read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key_pem: Option<SecretPem>,
    /// Whether a new connection resumes an earlier TLS session (a ticket or session ID), as
    /// browsers and HTTP clients do. Omitted: on. `false` makes every connection a full
    /// handshake, to measure what a server's handshakes cost or how many it sustains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumption: Option<bool>,
}

/// Largest CA bundle accepted in `tls.ca_file`.
pub const MAX_CA_PEM: usize = 1 << 20;

impl TlsOptions {
    /// Whether connections may resume earlier sessions (`resumption`, on unless `false`).
    pub fn resumes(&self) -> bool {
        self.resumption != Some(false)
    }

    pub(super) fn validate(&self) -> Result<(), ScenarioError> {
        if self.ca_file.is_some() && self.ca_pem.is_some() {
            return Err(ScenarioError::invalid(
                "tls.ca_file",
                "give either ca_file or ca_pem, not both",
            ));
        }
        if self.insecure_skip_verify && (self.ca_file.is_some() || self.ca_pem.is_some()) {
            return Err(ScenarioError::invalid(
                "tls.insecure_skip_verify",
                "skips verification, so a CA (ca_file, ca_pem) would never be used; give one or the other",
            ));
        }
        self.ca_certificates()
            .map_err(|why| ScenarioError::invalid("tls.ca_pem", why))?;
        self.check_client_identity()?;
        if let Some(name) = &self.server_name {
            rustls_pki_types::ServerName::try_from(name.as_str()).map_err(|_| {
                ScenarioError::invalid(
                    "tls.server_name",
                    format!("`{name}` is neither a DNS name nor an IP address"),
                )
            })?;
        }
        Ok(())
    }
}
