//! TLS for the HTTP target (`stampede target http --tls-*`): rustls with the ring provider,
//! ALPN `h2` and `http/1.1`, from PEM files or a self-signed certificate made at start, and
//! optionally requiring client certificates signed by a given CA (`--tls-client-ca`).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::TargetError;

/// The server side of TLS: what accepted connections are handshaken with.
#[derive(Clone)]
pub struct TlsServer(TlsAcceptor);

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsServer")
    }
}

impl TlsServer {
    /// From a PEM certificate chain and a PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, TargetError> {
        Self::new(cert_pem, key_pem, None)
    }

    /// As [`TlsServer::from_pem`]; with `client_ca_pem`, every client must present a
    /// certificate signed by one of its authorities (mutual TLS), and a handshake without
    /// one fails, so a load generator's client identity is tested for real.
    pub fn new(
        cert_pem: &[u8],
        key_pem: &[u8],
        client_ca_pem: Option<&[u8]>,
    ) -> Result<Self, TargetError> {
        let bad = |what: &str, e: &dyn std::fmt::Display| {
            TargetError::Config(format!("tls: {what}: {e}"))
        };
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad("certificate", &e))?;
        if chain.is_empty() {
            return Err(TargetError::Config(
                "tls: the certificate file holds no PEM certificate".into(),
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| bad("private key", &e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("protocol versions", &e))?;
        let builder = match client_ca_pem {
            None => builder.with_no_client_auth(),
            Some(pem) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| bad("client CA", &e))?;
                    roots.add(cert).map_err(|e| bad("client CA", &e))?;
                }
                if roots.is_empty() {
                    return Err(TargetError::Config(
                        "tls: the client CA file holds no PEM certificate".into(),
                    ));
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .map_err(|e| bad("client CA", &e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| bad("certificate and key", &e))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self(TlsAcceptor::from(Arc::new(config))))
    }

    /// A fresh self-signed certificate for `names` (DNS names or IP addresses). Returns the
    /// server and the certificate's PEM, for clients to trust (`tls.ca_file`).
    pub fn self_signed(names: &[String]) -> Result<(Self, String), TargetError> {
        Self::self_signed_requiring(names, None)
    }

    /// As [`TlsServer::self_signed`], requiring client certificates signed by
    /// `client_ca_pem` when given.
    pub fn self_signed_requiring(
        names: &[String],
        client_ca_pem: Option<&[u8]>,
    ) -> Result<(Self, String), TargetError> {
        let certified = rcgen::generate_simple_self_signed(names.to_vec())
            .map_err(|e| TargetError::Config(format!("tls: self-signed certificate: {e}")))?;
        let cert_pem = certified.cert.pem();
        let key_pem = certified.signing_key.serialize_pem();
        Ok((
            Self::new(cert_pem.as_bytes(), key_pem.as_bytes(), client_ca_pem)?,
            cert_pem,
        ))
    }

    pub(crate) fn acceptor(&self) -> &TlsAcceptor {
        &self.0
    }
}
