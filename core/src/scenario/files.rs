//! What the CLI resolves before submission, so nothing past it reads a file or the
//! environment: files named by the scenario (`file:` payloads, `body_file`, `tls.ca_file`, the
//! client certificate and key, data files) read into it, and `${env:NAME}` references replaced by their values.

use super::{
    session_lists_mut, HttpRequest, Scenario, ScenarioError, SecretPem, Step, StepKind, TlsOptions,
    MAX_CA_PEM,
};
use crate::protocol::{self, TcpRequest, UdpRequest};
use crate::template::Var;

impl Scenario {
    /// Resolves every `${env:NAME}` through `lookup` (the CLI's environment, at submit
    /// time), so the submitted scenario carries values, never asks agents for theirs. The
    /// error names the field and the variable. Returns whether anything changed.
    pub fn resolve_env(
        &mut self,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<bool, ScenarioError> {
        let mut changed = false;
        // Every value a reference resolved to, for the agents to mask.
        let seen = std::cell::RefCell::new(std::collections::BTreeSet::new());
        let lookup = |name: &str| {
            let value = lookup(name);
            if let Some(v) = value.as_ref().filter(|v| !v.is_empty()) {
                seen.borrow_mut().insert(v.clone());
            }
            value
        };
        let lookup: &dyn Fn(&str) -> Option<String> = &lookup;
        let mut lists = vec![("setup".to_string(), &mut self.setup)];
        lists.extend(session_lists_mut(
            &mut self.session,
            &mut self.sessions,
            &mut self.workloads,
        ));
        for (part, steps) in lists {
            for (i, step) in steps.iter_mut().enumerate() {
                for (field, t) in step.templates_mut() {
                    changed |= t.resolve_env(lookup).map_err(|why| {
                        ScenarioError::invalid(format!("{part}[{i}].{field}"), why)
                    })?;
                }
            }
        }
        for v in seen.into_inner() {
            if !self.masked.contains(&v) {
                self.masked.push(v);
            }
        }
        if changed {
            self.validate()?;
        }
        Ok(changed)
    }

    /// The environment variables the templates read (`${env:NAME}`), by name: what a run
    /// needs set in the CLI's environment.
    pub fn env_names(&self) -> std::collections::BTreeSet<&str> {
        self.setup
            .iter()
            .chain(self.step_lists().into_iter().flat_map(|(_, s)| s.iter()))
            .flat_map(|s| s.templates().map(|(_, t)| t))
            .flat_map(|t| t.refs())
            .filter_map(|r| match &r.var {
                Var::Env(n) => Some(n.as_str()),
                _ => None,
            })
            .collect()
    }

    /// True when a template still reads the environment (the CLI resolves them; a scenario
    /// submitted otherwise cannot run).
    pub fn has_env_refs(&self) -> bool {
        !self.env_names().is_empty()
    }

    /// Reads every `file:` payload and `body_file` through `read` (relative to `base`, the
    /// scenario file's folder) and puts the bytes in the scenario, so the submitted scenario
    /// needs no file. Returns whether anything was read. The error names the field.
    pub fn inline_files(
        &mut self,
        base: &std::path::Path,
        read: &mut dyn FnMut(&std::path::Path) -> std::io::Result<Vec<u8>>,
    ) -> Result<bool, ScenarioError> {
        let mut changed = false;
        // A setup step's body_file is read like a session step's.
        for (i, step) in self.setup.iter_mut().enumerate() {
            if let StepKind::Http(h) = &mut step.kind {
                changed |= inline_body_file(h, &format!("setup[{i}].http.body_file"), base, read)?;
            }
        }
        for (path, i, step) in self.step_lists_mut().into_iter().flat_map(|(path, steps)| {
            steps
                .iter_mut()
                .enumerate()
                .map(move |(i, s)| (path.clone(), i, s))
        }) {
            let key = step.kind.key();
            let field =
                |f: &str, why| ScenarioError::invalid(format!("{path}[{i}].{key}.{f}"), why);
            match &mut step.kind {
                StepKind::Http(h) => {
                    changed |=
                        inline_body_file(h, &format!("{path}[{i}].http.body_file"), base, read)?;
                }
                StepKind::Tcp(TcpRequest { send, expect, .. }) => {
                    changed |= protocol::inline_payload(send, base, protocol::MAX_FRAME, read)
                        .map_err(|w| field("send", w))?;
                    changed |= protocol::inline_expect(expect, base, protocol::MAX_FRAME, read)
                        .map_err(|w| field("expect", w))?;
                }
                StepKind::Udp(UdpRequest { send, expect, .. }) => {
                    changed |= protocol::inline_payload(send, base, protocol::MAX_DATAGRAM, read)
                        .map_err(|w| field("send", w))?;
                    changed |= protocol::inline_expect(expect, base, protocol::MAX_DATAGRAM, read)
                        .map_err(|w| field("expect", w))?;
                }
                StepKind::Ws(crate::ws::WsAction::Send { message, .. }) => {
                    changed |=
                        protocol::inline_payload(message, base, crate::ws::MAX_MESSAGE, read)
                            .map_err(|w| field("send", w))?;
                }
                StepKind::Grpc(_) | StepKind::Ws(_) | StepKind::Think(_) => {}
            }
        }
        for (name, d) in &mut self.data {
            if let Some(f) = d.file.clone() {
                let field = format!("data.{name}.file");
                let bytes = protocol::read_file(&f, base, crate::data::MAX_DATA_BYTES, read)
                    .map_err(|why| ScenarioError::invalid(&field, why))?;
                let jsonl = f.ends_with(".jsonl") || f.ends_with(".ndjson");
                d.load(&bytes, jsonl)
                    .map_err(|e| ScenarioError::invalid(&field, format!("`{f}`: {e}")))?;
                changed = true;
            }
        }
        if let Some(tls) = &mut self.tls {
            if let Some(f) = tls.ca_file.take() {
                let bytes = protocol::read_file(&f, base, MAX_CA_PEM, read)
                    .map_err(|why| ScenarioError::invalid("tls.ca_file", why))?;
                let text = String::from_utf8(bytes).map_err(|_| {
                    ScenarioError::invalid("tls.ca_file", format!("`{f}` is not PEM text"))
                })?;
                tls.ca_pem = Some(text);
                changed = true;
            }
            changed |= inline_client_identity(tls, base, read)?;
        }
        if changed {
            self.validate()?;
        }
        Ok(changed)
    }

    /// True when a `file:` payload or `body_file` is still to be read by the CLI.
    pub fn has_files(&self) -> bool {
        self.first_unread_file().is_some()
    }

    /// The field of the first file path still to be read (`tls.ca_file`, `data.NAME.file`,
    /// `session[2].http.body_file`, `setup[0].http.body_file`, `session[1].tcp.send`), for the
    /// error that refuses such a scenario where no file can be read.
    pub fn first_unread_file(&self) -> Option<String> {
        if let Some(t) = &self.tls {
            let files = [
                ("tls.ca_file", &t.ca_file),
                ("tls.client_cert_file", &t.client_cert_file),
                ("tls.client_key_file", &t.client_key_file),
            ];
            if let Some((field, _)) = files.iter().find(|(_, f)| f.is_some()) {
                return Some((*field).into());
            }
        }
        if let Some((name, _)) = self.data.iter().find(|(_, d)| d.file.is_some()) {
            return Some(format!("data.{name}.file"));
        }
        let setup = ("setup".to_string(), self.setup.as_slice());
        std::iter::once(setup)
            .chain(self.step_lists())
            .find_map(|(path, steps)| {
                steps
                    .iter()
                    .enumerate()
                    .find_map(|(i, s)| s.unread_file().map(|field| format!("{path}[{i}].{field}")))
            })
    }
}

impl Step {
    /// The field, relative to the step, of a file path it still names (`http.body_file`,
    /// `tcp.send`, `udp.expect`).
    pub fn unread_file(&self) -> Option<&'static str> {
        use protocol::Payload::File;
        let expects_file = |e: &Option<protocol::Expect>| {
            e.as_ref().is_some_and(|e| matches!(e.payload(), File(_)))
        };
        match &self.kind {
            StepKind::Http(h) if h.body_file.is_some() => Some("http.body_file"),
            // The CLI assembles the body, reading the parts' files.
            StepKind::Http(h) if !h.multipart.is_empty() => Some("http.multipart"),
            StepKind::Http(_) => None,
            StepKind::Tcp(TcpRequest { send, expect, .. })
            | StepKind::Udp(UdpRequest { send, expect, .. }) => {
                let tcp = matches!(self.kind, StepKind::Tcp(_));
                match (matches!(send, File(_)), expects_file(expect), tcp) {
                    (true, _, true) => Some("tcp.send"),
                    (true, _, false) => Some("udp.send"),
                    (false, true, true) => Some("tcp.expect"),
                    (false, true, false) => Some("udp.expect"),
                    (false, false, _) => None,
                }
            }
            StepKind::Ws(crate::ws::WsAction::Send {
                message: File(_), ..
            }) => Some("ws.send"),
            StepKind::Grpc(_) | StepKind::Ws(_) | StepKind::Think(_) => None,
        }
    }
}

/// Reads an http step's `body_file` (relative to `base`) into its body template, for
/// [`Scenario::inline_files`]; `field` names it in errors. Returns whether it read a file.
pub(super) fn inline_body_file(
    h: &mut HttpRequest,
    field: &str,
    base: &std::path::Path,
    read: &mut dyn FnMut(&std::path::Path) -> std::io::Result<Vec<u8>>,
) -> Result<bool, ScenarioError> {
    if !h.multipart.is_empty() {
        return inline_multipart(h, field, base, read);
    }
    let Some(f) = h.body_file.take() else {
        return Ok(false);
    };
    let bytes = protocol::read_file(&f, base, protocol::MAX_FRAME, read)
        .map_err(|why| ScenarioError::invalid(field, why))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| ScenarioError::invalid(field, format!("`{f}` is not UTF-8 text")))?;
    h.body = Some(
        crate::template::Template::parse(&text)
            .map_err(|why| ScenarioError::invalid(field, why))?,
    );
    Ok(true)
}

/// Reads the files of a `multipart` body (each part's `file`, UTF-8 text, templated like a
/// `value`; its file name defaults to the file's base name), then writes the whole body as
/// the request's body template and sets its content type. `field` is the step's
/// `...http.body_file`, whose parent names the parts in errors.
fn inline_multipart(
    h: &mut HttpRequest,
    field: &str,
    base: &std::path::Path,
    read: &mut dyn FnMut(&std::path::Path) -> std::io::Result<Vec<u8>>,
) -> Result<bool, ScenarioError> {
    let http = field.strip_suffix(".body_file").unwrap_or(field);
    for (i, p) in h.multipart.iter_mut().enumerate() {
        let Some(f) = p.file.take() else {
            continue;
        };
        let at = format!("{http}.multipart[{i}].file");
        let bytes = protocol::read_file(&f, base, protocol::MAX_FRAME, read)
            .map_err(|why| ScenarioError::invalid(&at, why))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| ScenarioError::invalid(&at, format!("`{f}` is not UTF-8 text")))?;
        p.value = Some(
            crate::template::Template::parse(&text)
                .map_err(|why| ScenarioError::invalid(&at, why))?,
        );
        if p.filename.is_none() {
            let name = std::path::Path::new(&f)
                .file_name()
                .map_or(f.clone(), |n| n.to_string_lossy().into_owned());
            p.filename = Some(crate::template::Template::literal(name));
        }
    }
    let Some((body, content_type)) = crate::multipart::assemble(&h.multipart) else {
        return Ok(false);
    };
    h.body = Some(body);
    h.headers.insert(
        "content-type".into(),
        crate::template::Template::literal(content_type),
    );
    h.multipart.clear();
    Ok(true)
}

/// Reads `tls.client_cert_file` and `tls.client_key_file` (relative to `base`) into their PEM
/// fields and checks the pair, naming the file field at fault. Returns whether it read them.
fn inline_client_identity(
    tls: &mut TlsOptions,
    base: &std::path::Path,
    read: &mut dyn FnMut(&std::path::Path) -> std::io::Result<Vec<u8>>,
) -> Result<bool, ScenarioError> {
    let (Some(cert_file), Some(key_file)) =
        (tls.client_cert_file.take(), tls.client_key_file.take())
    else {
        // A lone file is refused by validate, which names the missing one.
        return Ok(false);
    };
    let mut text = |field: &str, f: &str| {
        let bytes = protocol::read_file(f, base, MAX_CA_PEM, read)
            .map_err(|why| ScenarioError::invalid(field, why))?;
        String::from_utf8(bytes)
            .map_err(|_| ScenarioError::invalid(field, format!("`{f}` is not PEM text")))
    };
    tls.client_cert_pem = Some(text("tls.client_cert_file", &cert_file)?);
    tls.client_key_pem = Some(SecretPem::new(text("tls.client_key_file", &key_file)?));
    tls.client_identity().map_err(|e| {
        let (field, f) = if e.field() == "tls.client_cert_pem" {
            ("tls.client_cert_file", &cert_file)
        } else {
            ("tls.client_key_file", &key_file)
        };
        ScenarioError::invalid(field, format!("`{f}` {e}"))
    })?;
    Ok(true)
}
