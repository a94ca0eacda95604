//! The client identity of mutual TLS (`tls.client_cert_*`, `tls.client_key_*`): the
//! certificate chain and private key an agent presents when a target asks for one. Checked
//! once here (both PEM texts parse, the key is one TLS can sign with, and it is the
//! certificate's key), so a wrong pair fails at `validate` with the field named rather than
//! as handshake errors on every connection of a run.

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ScenarioError, TlsOptions};

/// A private key in PEM. Its `Debug` never shows the text, so a scenario logged or printed
/// while debugging does not leak the key.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct SecretPem(String);

impl SecretPem {
    /// Wraps PEM text (read from `client_key_file`, or given inline).
    pub fn new(pem: String) -> Self {
        Self(pem)
    }

    /// The PEM text, for the one place that hands it to TLS.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretPem(..)")
    }
}

/// A checked client certificate chain (leaf first) and its private key, DER.
pub struct ClientIdentity {
    /// The chain to present, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's private key.
    pub key: PrivateKeyDer<'static>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("chain", &self.chain.len())
            .finish_non_exhaustive()
    }
}

/// Why `tls.client_cert_pem` and `tls.client_key_pem` cannot serve as a client identity;
/// [`ClientCertError::field`] names the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum ClientCertError {
    /// The certificate PEM does not parse (a cut or altered base64 block).
    #[error("not a valid PEM certificate chain: {0}")]
    CertPem(rustls_pki_types::pem::Error),
    /// Valid PEM without a certificate in it (a key, or an empty file).
    #[error("holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate,
    /// The key PEM holds no private key, or one that does not parse.
    #[error("holds no PEM private key (-----BEGIN PRIVATE KEY-----, RSA or EC): {0}")]
    KeyPem(rustls_pki_types::pem::Error),
    /// A private key TLS cannot sign with (an algorithm the ring provider lacks).
    #[error("is not a key TLS can sign with: {0}")]
    UnsupportedKey(rustls::Error),
    /// The leaf certificate is not a certificate TLS can read.
    #[error("its first certificate cannot be read: {0}")]
    Certificate(rustls::Error),
    /// The key is not the leaf certificate's key: the server would refuse the handshake.
    #[error("is not the private key of the client certificate (their public keys differ)")]
    KeyMismatch,
}

impl ClientCertError {
    /// The field at fault: `tls.client_cert_pem` or `tls.client_key_pem`.
    pub fn field(&self) -> &'static str {
        match self {
            Self::CertPem(_) | Self::NoCertificate | Self::Certificate(_) => "tls.client_cert_pem",
            Self::KeyPem(_) | Self::UnsupportedKey(_) | Self::KeyMismatch => "tls.client_key_pem",
        }
    }
}

impl TlsOptions {
    /// The client identity of `client_cert_pem` and `client_key_pem`, checked; `None` when
    /// the scenario gives none (or gives files not read yet).
    pub fn client_identity(&self) -> Result<Option<ClientIdentity>, ClientCertError> {
        let (Some(cert), Some(key)) = (&self.client_cert_pem, &self.client_key_pem) else {
            return Ok(None);
        };
        let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(ClientCertError::CertPem)?;
        if chain.is_empty() {
            return Err(ClientCertError::NoCertificate);
        }
        let key = PrivateKeyDer::from_pem_slice(key.expose().as_bytes())
            .map_err(ClientCertError::KeyPem)?;
        let provider: CryptoProvider = rustls::crypto::ring::default_provider();
        let signer = provider
            .key_provider
            .load_private_key(key.clone_key())
            .map_err(ClientCertError::UnsupportedKey)?;
        match CertifiedKey::new(chain.clone(), signer).keys_match() {
            // The provider cannot tell a key's public half: the handshake will tell.
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(rustls::Error::InconsistentKeys(_)) => return Err(ClientCertError::KeyMismatch),
            Err(e) => return Err(ClientCertError::Certificate(e)),
        }
        Ok(Some(ClientIdentity { chain, key }))
    }

    /// The checks of `validate`: a certificate comes with its key, each given once (file or
    /// PEM), and a PEM pair is a usable identity.
    pub(super) fn check_client_identity(&self) -> Result<(), ScenarioError> {
        let cert = pick(
            self.client_cert_file.is_some(),
            self.client_cert_pem.is_some(),
            "client_cert",
        )?;
        let key = pick(
            self.client_key_file.is_some(),
            self.client_key_pem.is_some(),
            "client_key",
        )?;
        match (cert, key) {
            (Some(c), None) => Err(ScenarioError::invalid(
                format!("tls.{}", c.replace("cert", "key")),
                format!("is required with tls.{c}: the certificate's private key"),
            )),
            (None, Some(k)) => Err(ScenarioError::invalid(
                format!("tls.{}", k.replace("key", "cert")),
                format!("is required with tls.{k}: the key's certificate"),
            )),
            _ => self
                .client_identity()
                .map(drop)
                .map_err(|e| ScenarioError::invalid(e.field(), e)),
        }
    }
}

/// Which of `PREFIX_file` and `PREFIX_pem` is given (at most one may be).
fn pick(file: bool, pem: bool, prefix: &str) -> Result<Option<String>, ScenarioError> {
    match (file, pem) {
        (true, true) => Err(ScenarioError::invalid(
            format!("tls.{prefix}_file"),
            format!("give either {prefix}_file or {prefix}_pem, not both"),
        )),
        (true, false) => Ok(Some(format!("{prefix}_file"))),
        (false, true) => Ok(Some(format!("{prefix}_pem"))),
        (false, false) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> (String, String) {
        let c = rcgen::generate_simple_self_signed(vec!["client.test".into()]).unwrap();
        (c.cert.pem(), c.signing_key.serialize_pem())
    }

    fn opts(cert: &str, key: &str) -> TlsOptions {
        TlsOptions {
            client_cert_pem: Some(cert.into()),
            client_key_pem: Some(SecretPem::new(key.into())),
            ..TlsOptions::default()
        }
    }

    fn refused(o: &TlsOptions) -> String {
        o.check_client_identity().unwrap_err().to_string()
    }

    #[test]
    fn a_matching_pair_is_an_identity_and_its_key_is_never_shown() {
        let (cert, key) = identity();
        let o = opts(&cert, &key);
        o.check_client_identity().unwrap();
        let id = o.client_identity().unwrap().unwrap();
        assert_eq!(id.chain.len(), 1);
        let shown = format!("{o:?} {id:?}");
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        assert!(shown.contains("SecretPem(..)"), "{shown}");
        assert!(TlsOptions::default().client_identity().unwrap().is_none());
    }

    #[test]
    fn a_wrong_pair_names_the_field_and_the_reason() {
        let (cert, key) = identity();
        let (_, other_key) = identity();
        let e = refused(&opts(&cert, &other_key));
        assert!(
            e.starts_with("tls.client_key_pem") && e.contains("public keys differ"),
            "{e}"
        );
        let e = refused(&opts(&key, &key));
        assert!(
            e.starts_with("tls.client_cert_pem") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = refused(&opts(&cert, &cert));
        assert!(
            e.starts_with("tls.client_key_pem") && e.contains("no PEM private key"),
            "{e}"
        );
        let cut = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let e = refused(&opts(cut, &key));
        assert!(e.starts_with("tls.client_cert_pem"), "{e}");
    }

    #[test]
    fn a_certificate_needs_its_key_each_given_once() {
        let lone = TlsOptions {
            client_cert_file: Some("c.pem".into()),
            ..TlsOptions::default()
        };
        assert_eq!(
            refused(&lone),
            "tls.client_key_file: is required with tls.client_cert_file: the certificate's private key"
        );
        let lone = TlsOptions {
            client_key_pem: Some(SecretPem::new("k".into())),
            ..TlsOptions::default()
        };
        assert!(refused(&lone).starts_with("tls.client_cert_pem"));
        let both = TlsOptions {
            client_cert_file: Some("c.pem".into()),
            client_cert_pem: Some("c".into()),
            ..TlsOptions::default()
        };
        assert!(refused(&both).contains("either client_cert_file or client_cert_pem"));
        // Files not read yet: nothing to check beyond the pairing.
        let files = TlsOptions {
            client_cert_file: Some("c.pem".into()),
            client_key_file: Some("k.pem".into()),
            ..TlsOptions::default()
        };
        files.check_client_identity().unwrap();
    }

    #[test]
    fn the_cli_reads_both_files_and_names_the_file_at_fault() {
        let (cert, key) = identity();
        let (_, other_key) = identity();
        let yaml = "name: m\ntarget: https://localhost:8443\nphases: [ { duration: 1s, arrival_rate: 1 } ]\nsession:\n  - http: { path: / }\ntls: { client_cert_file: c.pem, client_key_file: k.pem }\n";
        let read_with = |key: String| {
            let cert = cert.clone();
            move |p: &std::path::Path| -> std::io::Result<Vec<u8>> {
                match p.file_name().and_then(|n| n.to_str()) {
                    Some("c.pem") => Ok(cert.clone().into_bytes()),
                    Some("k.pem") => Ok(key.clone().into_bytes()),
                    _ => Err(std::io::ErrorKind::NotFound.into()),
                }
            }
        };
        let mut s = super::super::Scenario::from_yaml(yaml).unwrap();
        assert_eq!(
            s.first_unread_file().as_deref(),
            Some("tls.client_cert_file")
        );
        assert!(s
            .inline_files(std::path::Path::new("/d"), &mut read_with(key.clone()))
            .unwrap());
        let tls = s.tls.as_ref().unwrap();
        assert_eq!(tls.client_cert_pem.as_deref(), Some(cert.as_str()));
        assert_eq!(
            tls.client_key_pem.as_ref().map(SecretPem::expose),
            Some(key.as_str())
        );
        assert_eq!(s.first_unread_file(), None);

        let mut s = super::super::Scenario::from_yaml(yaml).unwrap();
        let e = s
            .inline_files(std::path::Path::new("/d"), &mut read_with(other_key))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("tls.client_key_file: `k.pem` is not the private key"),
            "{e}"
        );
        let mut s = super::super::Scenario::from_yaml(yaml).unwrap();
        let e = s
            .inline_files(std::path::Path::new("/d"), &mut |_| {
                Err(std::io::ErrorKind::NotFound.into())
            })
            .unwrap_err();
        assert_eq!(e.path(), "tls.client_cert_file");
    }
}
