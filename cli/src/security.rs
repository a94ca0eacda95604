//! Where credentials and TLS material come from, for the controller, agents and the CLI.
//!
//! Tokens are read from the environment or from files, so they stay out of `ps` and
//! `/proc/*/cmdline`; a token given on the command line still works but is warned about. The
//! controller refuses to serve a non-loopback address with no credential unless told
//! `--insecure`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The controller's credential and TLS options.
#[derive(clap::Args, Debug, Clone)]
pub struct ServerSecurity {
    /// The users' token (CLI clients). Prefer STAMPEDE_TOKEN or --token-file: argv is visible
    /// to every process on the machine.
    #[arg(long, env = "STAMPEDE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// File holding the users' token.
    #[arg(long, env = "STAMPEDE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// The agents' token: agents present it, and it cannot submit, abort or read runs (a user
    /// token cannot attach as an agent). Without it, agents present the user token.
    #[arg(long, env = "STAMPEDE_AGENT_TOKEN", hide_env_values = true)]
    pub agent_token: Option<String>,
    /// File holding the agents' token.
    #[arg(long, env = "STAMPEDE_AGENT_TOKEN_FILE")]
    pub agent_token_file: Option<PathBuf>,
    /// Serve gRPC over TLS with this certificate (PEM; with --tls-key).
    #[arg(long, env = "STAMPEDE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "STAMPEDE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (mutual TLS; needs --tls-cert).
    #[arg(long, env = "STAMPEDE_CLIENT_CA", requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
    /// Serve without any credential on a non-loopback address (anyone who reaches the port
    /// could then aim the agents anywhere they can reach).
    #[arg(long)]
    pub insecure: bool,
}

/// What the controller ends up with.
pub struct ServerCredentials {
    /// The user token; `None` only where an open controller is allowed.
    pub token: Option<String>,
    /// The agents' token; `None`: agents present the user token.
    pub agent_token: Option<String>,
    /// The TLS identity and client CA, when the controller serves TLS.
    pub tls: Option<stampede_controller::ServerTls>,
}

impl ServerSecurity {
    /// Reads the files and checks the combination for serving on `listen`.
    pub fn resolve(&self, listen: SocketAddr) -> Result<ServerCredentials> {
        let token = token_from(self.token.as_deref(), self.token_file.as_deref(), "--token")?;
        let agent_token = token_from(
            self.agent_token.as_deref(),
            self.agent_token_file.as_deref(),
            "--agent-token",
        )?;
        if token.is_some() && token == agent_token {
            bail!("the agent token and the user token must differ: agents and users get different credentials");
        }
        let open = token.is_none() && agent_token.is_none();
        if open && !listen.ip().is_loopback() && !self.insecure {
            bail!(
                "refusing to serve {listen} without credentials: anyone who reaches it could submit runs and aim the agents at any address. Set STAMPEDE_TOKEN and STAMPEDE_AGENT_TOKEN (or --token-file/--agent-token-file), listen on 127.0.0.1, or pass --insecure to accept the risk"
            );
        }
        if open {
            tracing::warn!("no credentials: agents and CLIs are not authenticated");
        } else if agent_token.is_none() {
            tracing::warn!(
                "no agent token: agents present the user token (set STAMPEDE_AGENT_TOKEN to keep them apart)"
            );
        }
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(stampede_controller::ServerTls {
                cert_pem: read(cert)?,
                key_pem: read(key)?,
                client_ca_pem: self.client_ca.as_deref().map(read).transpose()?,
            }),
            _ => None,
        };
        if tls.is_none() && !listen.ip().is_loopback() && !open {
            tracing::warn!("serving gRPC without TLS: tokens cross the network in clear (--tls-cert/--tls-key)");
        }
        Ok(ServerCredentials {
            token,
            agent_token,
            tls,
        })
    }
}

/// TLS options of a client (the CLI or an agent) towards an `https://` controller.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClientTls {
    /// Trust this CA (PEM) for an https:// controller, besides the system's roots.
    #[arg(long, global = true, env = "STAMPEDE_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// Client certificate (PEM) for a controller that requires mutual TLS.
    #[arg(
        long,
        global = true,
        env = "STAMPEDE_CLIENT_CERT",
        requires = "client_key"
    )]
    pub client_cert: Option<PathBuf>,
    /// The private key of --client-cert (PEM).
    #[arg(
        long,
        global = true,
        env = "STAMPEDE_CLIENT_KEY",
        requires = "client_cert"
    )]
    pub client_key: Option<PathBuf>,
    /// Check the controller's certificate against this name instead of the URL's host (when
    /// the URL is an address, e.g. a Service's ClusterIP, and the certificate names the Service).
    #[arg(long, global = true, env = "STAMPEDE_TLS_SERVER_NAME")]
    pub tls_server_name: Option<String>,
}

impl ClientTls {
    /// The PEM material: (CA, (certificate, key)).
    pub fn load(&self) -> Result<crate::client::TlsMaterial> {
        Ok(crate::client::TlsMaterial {
            ca_pem: self.ca_cert.as_deref().map(read).transpose()?,
            identity: match (&self.client_cert, &self.client_key) {
                (Some(c), Some(k)) => Some((read(c)?, read(k)?)),
                _ => None,
            },
            server_name: self.tls_server_name.clone(),
            cluster_ca_pem: None,
        })
    }
}

/// An agent's target policy options.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TargetPolicyArgs {
    /// Only load these networks (CIDR or address; repeat or comma-separate). Also opens a
    /// network the default rules refuse, e.g. 169.254.0.0/16.
    #[arg(long, value_delimiter = ',', env = "STAMPEDE_ALLOW_TARGETS", value_parser = parse_net)]
    pub allow_target: Vec<ipnet::IpNet>,
    /// Never load these networks, besides link-local, cloud metadata, the controller and (in a
    /// cluster) the Kubernetes API and kubelet ports.
    #[arg(long, value_delimiter = ',', env = "STAMPEDE_DENY_TARGETS", value_parser = parse_net)]
    pub deny_target: Vec<ipnet::IpNet>,
}

impl TargetPolicyArgs {
    /// The policy: the defaults, the cluster's own endpoints when running in a pod, then the
    /// operator's lists.
    pub fn policy(&self) -> stampede_core::target_policy::TargetPolicy {
        let mut p = stampede_core::target_policy::TargetPolicy::default();
        if let (Ok(host), Ok(port)) = (
            std::env::var("KUBERNETES_SERVICE_HOST"),
            std::env::var("KUBERNETES_SERVICE_PORT"),
        ) {
            if let (Ok(ip), Ok(port)) = (host.parse::<std::net::IpAddr>(), port.parse::<u16>()) {
                p.deny_endpoint(SocketAddr::new(ip, port), "the Kubernetes API");
            }
            for port in stampede_core::target_policy::KUBELET_PORTS {
                p.deny_port(port, format!("the kubelet's port {port}"));
            }
        }
        for net in &self.deny_target {
            p.deny_net(*net);
        }
        for net in &self.allow_target {
            p.allow_net(*net);
        }
        p
    }
}

fn parse_net(s: &str) -> Result<ipnet::IpNet, String> {
    s.parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("`{s}` is neither a CIDR (10.0.0.0/8) nor an address"))
}

/// A token from a flag/env value or a file (trimmed); the file wins when both are given.
pub fn token_from(value: Option<&str>, file: Option<&Path>, flag: &str) -> Result<Option<String>> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{flag}-file: reading {}", path.display()))?;
        let t = text.trim().to_string();
        if t.is_empty() {
            bail!("{flag}-file: {} is empty", path.display());
        }
        return Ok(Some(t));
    }
    Ok(value
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(String::from))
}

/// Warns when a token was given in argv (where `ps` shows it) rather than env or a file.
pub fn warn_if_in_argv(flags: &[&str]) {
    let args: Vec<String> = std::env::args().collect();
    for flag in flags {
        if args
            .iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
        {
            eprintln!(
                "warning: {flag} on the command line is visible to every process on this machine; prefer the environment variable or {flag}-file"
            );
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sec() -> ServerSecurity {
        ServerSecurity {
            token: None,
            token_file: None,
            agent_token: None,
            agent_token_file: None,
            tls_cert: None,
            tls_key: None,
            client_ca: None,
            insecure: false,
        }
    }

    #[test]
    fn an_open_controller_is_refused_off_loopback() {
        let any: SocketAddr = "0.0.0.0:7070".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:7070".parse().unwrap();
        let e = sec().resolve(any).err().unwrap().to_string();
        assert!(e.contains("without credentials"), "{e}");
        assert!(sec().resolve(lo).is_ok());
        let mut s = sec();
        s.insecure = true;
        assert!(s.resolve(any).is_ok());
        s.insecure = false;
        s.token = Some("u".into());
        assert!(s.resolve(any).is_ok());
        s.agent_token = Some("u".into());
        assert!(s.resolve(any).is_err(), "equal tokens are refused");
    }

    #[test]
    fn token_files_are_read_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t");
        std::fs::write(&f, "secret\n").unwrap();
        assert_eq!(
            token_from(Some("argv"), Some(&f), "--token")
                .unwrap()
                .as_deref(),
            Some("secret")
        );
        std::fs::write(&f, "\n").unwrap();
        assert!(token_from(None, Some(&f), "--token").is_err());
    }
}
