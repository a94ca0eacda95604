//! The trusted certificate authorities of `tls.ca_pem`, read once for validation and once by
//! each agent that dials the target.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use super::TlsOptions;

/// Why `tls.ca_pem` cannot serve as the trusted roots.
#[derive(Debug, thiserror::Error)]
pub enum CaBundleError {
    /// The PEM text does not parse (a cut or altered base64 block).
    #[error("not a valid PEM certificate bundle: {0}")]
    Pem(rustls_pki_types::pem::Error),
    /// Valid PEM without a certificate in it (a key, or an empty file).
    #[error("holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate,
}

impl TlsOptions {
    /// The certificates of `ca_pem` (DER); the error says what is wrong with the PEM.
    pub fn ca_certificates(&self) -> Result<Vec<CertificateDer<'static>>, CaBundleError> {
        let Some(pem) = &self.ca_pem else {
            return Ok(Vec::new());
        };
        let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(CaBundleError::Pem)?;
        if certs.is_empty() {
            return Err(CaBundleError::NoCertificate);
        }
        Ok(certs)
    }
}
