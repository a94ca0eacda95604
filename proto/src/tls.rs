//! TLS for dialing a controller, shared by the agent and the CLI.

use std::sync::OnceLock;

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// Whether this system has any trusted root certificates. A minimal container image has
/// none, and asking tonic for the system's roots there fails every connection ("no native
/// root CA certificates found") even when the controller's CA was given explicitly.
fn system_roots_exist() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| !rustls_native_certs::load_native_certs().certs.is_empty())
}

/// TLS settings for an `https://` controller: the system's roots when it has any, plus the
/// CAs in `cas` (PEM), a client identity (certificate and key, PEM) for mutual TLS, and the
/// name the certificate must carry when it is not the URL's host.
pub fn client_tls(
    cas: &[&[u8]],
    identity: Option<(&[u8], &[u8])>,
    server_name: Option<&str>,
) -> ClientTlsConfig {
    let mut config = ClientTlsConfig::new();
    if system_roots_exist() {
        config = config.with_native_roots();
    }
    for ca in cas {
        config = config.ca_certificate(Certificate::from_pem(ca));
    }
    if let Some((cert, key)) = identity {
        config = config.identity(Identity::from_pem(cert, key));
    }
    if let Some(name) = server_name {
        config = config.domain_name(name);
    }
    config
}
