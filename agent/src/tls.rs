//! TLS for `https://` targets: rustls with the ring provider, one client configuration per run,
//! ALPN offering exactly the HTTP version the scenario asks for (`h2` or `http/1.1`).
//!
//! With `tls.client_cert_pem` and `tls.client_key_pem` the client presents that identity to a
//! server that asks for one (mutual TLS). New connections resume the run's earlier sessions
//! (rustls keeps them in memory) unless `tls.resumption` is `false`.
//!
//! A failed handshake (unknown issuer, wrong name, expired certificate, a plaintext server,
//! a server refusing the client's certificate or its absence) counts as a `tls` error. With `tls.insecure_skip_verify` any certificate is accepted, but the
//! handshake's signatures are still checked, so the peer must hold the key of what it shows.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use stampede_core::scenario::{CaBundleError, ClientCertError, TlsOptions};
use stampede_core::stats::error_kind;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::net::{io_failure, Failure};

/// A connection to an HTTP target: plain TCP or TLS over TCP (boxed: the TLS state is large,
/// and a cleartext connection should not carry its size).
pub type Io = tokio_util::either::Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// What every TLS connection of a run shares: the rustls configuration and the server name.
#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
    server_name: ServerName<'static>,
    alpn: &'static [u8],
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("server_name", &self.server_name)
            .field("alpn", &String::from_utf8_lossy(self.alpn))
            .finish_non_exhaustive()
    }
}

/// Why a TLS client for the target cannot be built; the message names the `tls` field.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rustls refuses its own default protocol versions with this provider.
    #[error("tls: {0}")]
    Protocols(rustls::Error),
    /// `tls.ca_pem` is not a certificate bundle.
    #[error("tls.ca_pem: {0}")]
    CaBundle(CaBundleError),
    /// A certificate of the bundle that rustls cannot use as a root.
    #[error("tls.ca_pem: certificate {index}: {error}")]
    Certificate {
        /// The certificate's place in the bundle, from 0.
        index: usize,
        /// Why rustls refuses it.
        error: rustls::Error,
    },
    /// No bundle given and none installed on this machine.
    #[error("tls: this machine has no trusted certificate authorities; give tls.ca_file (or, for a self-signed test target, tls.insecure_skip_verify)")]
    NoSystemRoots,
    /// `tls.client_cert_pem` and `tls.client_key_pem` are not a usable pair.
    #[error("{field}: {0}", field = .0.field())]
    ClientIdentity(ClientCertError),
    /// rustls refuses the client identity (checked already; kept for a provider's change).
    #[error("tls.client_key_pem: {0}")]
    ClientAuth(rustls::Error),
    /// A name that cannot be sent in SNI nor checked against a certificate.
    #[error("tls: `{name}` is neither a DNS name nor an IP address")]
    ServerName {
        /// The name as given.
        name: String,
    },
}

impl TlsClient {
    /// Builds the client for a target whose URL host is `host` (no port, no brackets).
    /// Trusts `ca_pem` when given, else the system's certificate authorities.
    pub fn new(opts: Option<&TlsOptions>, host: &str, http2: bool) -> Result<Self, TlsError> {
        let default = TlsOptions::default();
        let opts = opts.unwrap_or(&default);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Protocols)?;
        let builder = if opts.insecure_skip_verify {
            tracing::warn!(
                "TLS CERTIFICATE VERIFICATION IS OFF (tls.insecure_skip_verify): any certificate \
                 is accepted; use this only against your own self-signed test targets"
            );
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
        } else {
            builder.with_root_certificates(roots(opts)?)
        };
        // Mutual TLS: the identity is presented only to a server that asks for one.
        let mut config = match opts.client_identity().map_err(TlsError::ClientIdentity)? {
            Some(id) => builder
                .with_client_auth_cert(id.chain, id.key)
                .map_err(TlsError::ClientAuth)?,
            None => builder.with_no_client_auth(),
        };
        if !opts.resumes() {
            config.resumption = rustls::client::Resumption::disabled();
        }
        let alpn: &'static [u8] = if http2 { b"h2" } else { b"http/1.1" };
        config.alpn_protocols = vec![alpn.to_vec()];
        let name = opts.server_name.as_deref().unwrap_or(host);
        let server_name = ServerName::try_from(name.to_string())
            .map_err(|_| TlsError::ServerName { name: name.into() })?;
        Ok(Self {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
            alpn,
        })
    }

    /// Runs the handshake over `tcp`. For HTTP/2 the server must select `h2` by ALPN.
    pub async fn handshake(&self, tcp: TcpStream) -> Result<TlsStream<TcpStream>, Failure> {
        let stream = self
            .connector
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| handshake_failure(&e))?;
        if self.alpn == b"h2" && stream.get_ref().1.alpn_protocol() != Some(b"h2") {
            // The server does not speak HTTP/2 over TLS: nothing sent would be understood.
            return Err(Failure(error_kind::PROTOCOL));
        }
        Ok(stream)
    }
}

/// The trusted roots: the scenario's CA bundle, or the system's.
fn roots(opts: &TlsOptions) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    let cas = opts.ca_certificates().map_err(TlsError::CaBundle)?;
    if cas.is_empty() {
        let native = rustls_native_certs::load_native_certs();
        let (added, _) = roots.add_parsable_certificates(native.certs);
        if added == 0 {
            return Err(TlsError::NoSystemRoots);
        }
    } else {
        for (i, c) in cas.into_iter().enumerate() {
            roots
                .add(c)
                .map_err(|error| TlsError::Certificate { index: i, error })?;
        }
    }
    Ok(roots)
}

/// A handshake that fails for TLS reasons is `tls` or a `tls_*` kind naming the reason; a
/// socket error keeps its own kind.
fn handshake_failure(e: &std::io::Error) -> Failure {
    use std::io::ErrorKind;
    if let Some(kind) = tls_kind(e) {
        return Failure(kind);
    }
    if matches!(e.kind(), ErrorKind::InvalidData | ErrorKind::UnexpectedEof) {
        Failure(error_kind::TLS)
    } else {
        io_failure(e, false)
    }
}

/// The kind of an I/O error that carries a TLS failure: rustls's error inside it, or, where a
/// layer kept only its text (h2 hands each stream the connection's error as a kind and a
/// message), the alert that text names. `None` for a socket error.
pub(crate) fn tls_kind(e: &std::io::Error) -> Option<&'static str> {
    if let Some(r) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return Some(rustls_kind(r));
    }
    // rustls writes an alert as "received fatal alert: <description>".
    (e.kind() == std::io::ErrorKind::InvalidData && e.to_string().contains("received fatal alert"))
        .then_some(error_kind::TLS_REFUSED)
}

/// The error kind naming why rustls refused a connection.
pub(crate) fn rustls_kind(e: &rustls::Error) -> &'static str {
    use rustls::{CertificateError as C, Error as E};
    match e {
        E::InvalidCertificate(c) => match c {
            C::UnknownIssuer => error_kind::TLS_UNKNOWN_ISSUER,
            C::NotValidForName | C::NotValidForNameContext { .. } => error_kind::TLS_NAME_MISMATCH,
            C::Expired | C::ExpiredContext { .. } => error_kind::TLS_EXPIRED,
            C::NotValidYet | C::NotValidYetContext { .. } => error_kind::TLS_NOT_YET_VALID,
            _ => error_kind::TLS_BAD_CERTIFICATE,
        },
        E::AlertReceived(_) | E::NoCertificatesPresented => error_kind::TLS_REFUSED,
        E::PeerIncompatible(_) | E::NoApplicationProtocol => error_kind::TLS_INCOMPATIBLE,
        _ => error_kind::TLS,
    }
}

/// `tls.insecure_skip_verify`: any certificate chain and name are accepted; the handshake
/// signatures are still verified with the provider's algorithms.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_reason() {
        use rustls::{AlertDescription, CertificateError as C, Error as E};
        let io = |e: E| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        let cases = [
            (
                E::InvalidCertificate(C::UnknownIssuer),
                "tls_unknown_issuer",
            ),
            (
                E::InvalidCertificate(C::NotValidForName),
                "tls_name_mismatch",
            ),
            (E::InvalidCertificate(C::Expired), "tls_expired"),
            (E::InvalidCertificate(C::NotValidYet), "tls_not_yet_valid"),
            (E::InvalidCertificate(C::Revoked), "tls_bad_certificate"),
            (
                E::AlertReceived(AlertDescription::CertificateRequired),
                "tls_refused",
            ),
            (E::NoApplicationProtocol, "tls_incompatible"),
            (E::DecryptError, "tls"),
        ];
        for (e, kind) in cases {
            let text = e.to_string();
            assert_eq!(handshake_failure(&io(e)).0, kind, "{text}");
        }
        // h2 keeps only the kind and text of the connection's error: the alert is still named.
        let alert = E::AlertReceived(AlertDescription::BadCertificate).to_string();
        let kept = std::io::Error::new(std::io::ErrorKind::InvalidData, alert);
        assert_eq!(tls_kind(&kept), Some("tls_refused"));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(
            (tls_kind(&reset), handshake_failure(&reset).0),
            (None, "reset")
        );
    }

    #[test]
    fn the_server_name_comes_from_the_options_or_the_host() {
        let c = TlsClient::new(None, "127.0.0.1", false);
        // Either built (system roots present) or refused with the clear message.
        match c {
            Ok(c) => {
                assert_eq!(c.server_name, ServerName::try_from("127.0.0.1").unwrap());
                assert_eq!(c.alpn, b"http/1.1");
            }
            Err(e) => assert!(e.to_string().contains("tls.ca_file"), "{e}"),
        }
        let opts = TlsOptions {
            insecure_skip_verify: true,
            server_name: Some("api.test".into()),
            ..TlsOptions::default()
        };
        let c = TlsClient::new(Some(&opts), "10.0.0.1", true).unwrap();
        assert_eq!(c.server_name, ServerName::try_from("api.test").unwrap());
        assert_eq!(c.alpn, b"h2");
        let bad = TlsOptions {
            insecure_skip_verify: true,
            server_name: Some("not a name".into()),
            ..TlsOptions::default()
        };
        let e = TlsClient::new(Some(&bad), "h", false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("neither a DNS name nor an IP address"), "{e}");
        let garbage = TlsOptions {
            ca_pem: Some("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into()),
            ..TlsOptions::default()
        };
        let e = TlsClient::new(Some(&garbage), "h", false)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("tls.ca_pem"), "{e}");
    }
}
