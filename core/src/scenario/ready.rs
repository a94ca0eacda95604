//! A scenario ready to submit: what the controller, the LoadTest reconciler and the gRPC
//! service take. Nothing past the submitter reads a file, fetches data or holds a gRPC
//! schema, so a scenario that still needs one of them is refused with the field named rather
//! than run without it.

use super::{Scenario, ScenarioError};

/// A validated scenario with nothing left to read or encode: no file path (`body_file`,
/// `tls.ca_file`, `file:` payloads, data files), no data source still naming a ConfigMap or
/// Secret, no data in the agents' row-less form, and every gRPC call encoded. Only
/// [`ReadyScenario::new`] builds one.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadyScenario(Scenario);

/// Why a scenario is not ready to submit; each names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// A file path is still to be read, which only the CLI can do, beside the scenario file.
    #[error(
        "{path}: a file path cannot be read by the controller; submit with the CLI, which \
         inlines it"
    )]
    UnreadFile {
        /// The field naming the file (`session[2].http.body_file`, `tls.ca_file`).
        path: String,
    },
    /// A data source still names a ConfigMap or Secret: the LoadTest reconciler reads those
    /// before it submits, and nothing reads them after.
    #[error(
        "{path}: a submitted scenario carries its rows (the CLI reads a file; a config_map or \
         secret is read only for a LoadTest)"
    )]
    UnreadData {
        /// The source's field (`data.users.config_map`).
        path: String,
    },
    /// A data source is in the form the controller sends agents (`rows_in_all`, rows left
    /// out), never the form it takes.
    #[error("{path}: a submitted scenario carries its rows")]
    AgentForm {
        /// `data.NAME.rows_in_all`.
        path: String,
    },
    /// A gRPC call's message is not encoded, and no one past the submitter holds its schema.
    #[error(
        "{path}: the call is not encoded: the CLI encodes gRPC messages against the schema \
         (`stampede run`, `stampede capacity`), and a LoadTest's reconciler against the \
         .proto files of its grpc.config_map"
    )]
    Unencoded {
        /// The call's field (`session[0].grpc`).
        path: String,
    },
    /// The scenario itself does not validate.
    #[error(transparent)]
    Invalid(#[from] ScenarioError),
}

impl ReadyScenario {
    /// Checks that `scenario` is valid and needs nothing more read or encoded.
    pub fn new(scenario: Scenario) -> Result<Self, NotReady> {
        if let Some(path) = scenario.first_unread_file() {
            return Err(NotReady::UnreadFile { path });
        }
        if let Some(name) = scenario
            .data
            .iter()
            .find_map(|(n, d)| d.rows_in_all.is_some().then_some(n))
        {
            return Err(NotReady::AgentForm {
                path: format!("data.{name}.rows_in_all"),
            });
        }
        if let Some((name, (kind, _))) = scenario
            .data
            .iter()
            .find_map(|(n, d)| d.object().map(|o| (n, o)))
        {
            return Err(NotReady::UnreadData {
                path: format!("data.{name}.{}", kind.field()),
            });
        }
        if let Some(path) = crate::grpc::first_unresolved(&scenario) {
            return Err(NotReady::Unencoded { path });
        }
        scenario.validate()?;
        Ok(ReadyScenario(scenario))
    }

    /// The scenario, to read.
    pub fn scenario(&self) -> &Scenario {
        &self.0
    }

    /// The scenario, for the run that owns it from now on.
    pub fn into_inner(self) -> Scenario {
        self.0
    }
}

impl std::ops::Deref for ReadyScenario {
    type Target = Scenario;

    fn deref(&self) -> &Scenario {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HTTP: &str = "name: r\ntarget: http://127.0.0.1:1\nphases: [ { duration: 1s, arrival_rate: 1 } ]\nsession:\n  - http: { path: / }\n";

    fn refused(text: &str) -> String {
        ReadyScenario::new(Scenario::from_yaml(text).unwrap())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_scenario_with_nothing_to_read_is_ready() {
        let s = Scenario::from_yaml(HTTP).unwrap();
        let ready = ReadyScenario::new(s.clone()).unwrap();
        assert_eq!(ready.scenario(), &s);
        assert_eq!(ready.into_inner(), s);
    }

    #[test]
    fn every_unread_file_is_refused_with_its_field() {
        let body = HTTP.replace(
            "  - http: { path: / }\n",
            "  - http: { path: / }\n  - http: { method: POST, path: /x, body_file: b.json }\n",
        );
        assert_eq!(
            refused(&body),
            "session[1].http.body_file: a file path cannot be read by the controller; submit \
             with the CLI, which inlines it"
        );
        let ca = HTTP.replace("http://", "https://") + "tls: { ca_file: ca.pem }\n";
        assert!(refused(&ca).starts_with("tls.ca_file: a file path cannot be read"));
        let setup = HTTP.replace(
            "session:\n",
            "setup:\n  - http: { method: POST, path: /login, body_file: l.json }\nsession:\n",
        );
        assert!(refused(&setup).starts_with("setup[0].http.body_file: "));
        let tcp = "name: r\ntarget: tcp://127.0.0.1:1\nphases: [ { duration: 1s, arrival_rate: 1 } ]\nsession:\n  - tcp: { send: { text: hi }, expect: { exact: { file: r.bin } } }\n";
        assert!(refused(tcp).starts_with("session[0].tcp.expect: "));
    }

    #[test]
    fn unread_data_and_the_agents_form_are_refused() {
        let cm = HTTP.to_string() + "data:\n  users: { config_map: { name: u, key: u.csv } }\n";
        assert!(
            refused(&cm)
                .starts_with("data.users.config_map: a submitted scenario carries its rows"),
            "{}",
            refused(&cm)
        );
        let file = HTTP.to_string() + "data:\n  users: { file: u.csv }\n";
        assert!(refused(&file).starts_with("data.users.file: a file path cannot be read"));
    }
}
