//! Who may call what: agents and users hold different credentials. An agent credential can
//! only attach as an agent; a user credential can only submit, watch, read and abort runs.
//! Tokens are kept and compared as SHA-256 digests in constant time, so neither their content
//! nor their length leaks through timing, and the raw token is never stored after start-up.

use ring::digest::{digest, SHA256};
use subtle::ConstantTimeEq;
use tonic::{Request, Status};

/// The role a gRPC service serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `AgentService.Attach`.
    Agent,
    /// `ControlService`: submit, watch, list, report, abort.
    User,
}

/// The controller's credentials.
#[derive(Clone, Default)]
pub struct Credentials {
    user: Option<[u8; 32]>,
    /// `None`: agents present the user token (one shared token, as before).
    agent: Option<[u8; 32]>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user.map(|_| "<set>"))
            .field("agent", &self.agent.map(|_| "<set>"))
            .finish()
    }
}

fn hash(token: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, token.as_bytes()).as_ref());
    out
}

fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    bool::from(a.ct_eq(b))
}

impl Credentials {
    /// `None` for a token the controller does not check; with both `None`, every caller is let in.
    pub fn new(user: Option<&str>, agent: Option<&str>) -> Self {
        Self {
            user: user.filter(|t| !t.is_empty()).map(hash),
            agent: agent.filter(|t| !t.is_empty()).map(hash),
        }
    }

    /// No credential at all: everyone is served (allowed on loopback, or with `--insecure`).
    pub fn is_open(&self) -> bool {
        self.user.is_none() && self.agent.is_none()
    }

    /// Agents and users share one token.
    pub fn shared(&self) -> bool {
        self.agent.is_none() && self.user.is_some()
    }

    /// Checks `authorization: Bearer <token>` against what `role` needs.
    pub fn check(&self, role: Role, given: Option<&str>) -> Result<(), Status> {
        if self.is_open() {
            return Ok(());
        }
        let Some(given) = given.filter(|g| !g.is_empty()).map(hash) else {
            return Err(unauthenticated(role));
        };
        let is_user = self.user.as_ref().is_some_and(|u| same(u, &given));
        let is_agent = self.agent.as_ref().is_some_and(|a| same(a, &given));
        match role {
            Role::User if is_user => Ok(()),
            Role::User if is_agent => Err(Status::permission_denied(
                "an agent credential cannot submit, abort or read runs",
            )),
            Role::Agent if is_agent || (self.agent.is_none() && is_user) => Ok(()),
            Role::Agent if is_user => Err(Status::permission_denied(
                "a user credential cannot register as an agent: agents use the agent token (STAMPEDE_AGENT_TOKEN)",
            )),
            _ => Err(unauthenticated(role)),
        }
    }

    /// The interceptor of a service serving `role`.
    pub fn interceptor(
        &self,
        role: Role,
    ) -> impl Fn(Request<()>) -> Result<Request<()>, Status> + Clone {
        let creds = self.clone();
        move |req: Request<()>| {
            let given = req
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            creds.check(role, given).map(|()| req)
        }
    }
}

fn unauthenticated(role: Role) -> Status {
    Status::unauthenticated(match role {
        Role::User => {
            "missing or wrong token: set STAMPEDE_TOKEN (or --token-file) to the controller's user token"
        }
        Role::Agent => {
            "missing or wrong agent token: set STAMPEDE_AGENT_TOKEN (or --agent-token-file) to the controller's agent token"
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn agents_and_users_are_kept_apart() {
        let c = Credentials::new(Some("user-t"), Some("agent-t"));
        assert!(c.check(Role::User, Some("user-t")).is_ok());
        assert!(c.check(Role::Agent, Some("agent-t")).is_ok());
        let e = c.check(Role::User, Some("agent-t")).unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied);
        let e = c.check(Role::Agent, Some("user-t")).unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied);
        for wrong in [None, Some(""), Some("user-tx"), Some("u")] {
            assert_eq!(
                c.check(Role::User, wrong).unwrap_err().code(),
                Code::Unauthenticated
            );
            assert_eq!(
                c.check(Role::Agent, wrong).unwrap_err().code(),
                Code::Unauthenticated
            );
        }
    }

    #[test]
    fn one_shared_token_serves_both_and_none_serves_everyone() {
        let c = Credentials::new(Some("t"), None);
        assert!(c.shared());
        assert!(c.check(Role::Agent, Some("t")).is_ok() && c.check(Role::User, Some("t")).is_ok());
        assert!(Credentials::new(None, None).check(Role::User, None).is_ok());
    }

    #[test]
    fn debug_never_shows_a_token() {
        let c = Credentials::new(Some("secret-user"), Some("secret-agent"));
        let text = format!("{c:?}");
        assert!(!text.contains("secret"), "{text}");
    }
}
