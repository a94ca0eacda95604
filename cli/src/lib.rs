//! The `stampede` binary's logic, as a library so end-to-end tests can drive it in-process.
//!
//! # Layout
//!
//! - [`cmd`]: one module per group of commands: `run`, `inspect` (status, report, agents,
//!   abort, plan, validate), `serve` (controller, agent), `demo`. `main.rs` calls
//!   [`cmd::dispatch`].
//! - [`config`]: every command, flag, environment variable and default; `docs/settings.md` is
//!   generated from it.
//! - [`client`]: talking to a controller. [`kube`]: finding one in the kube context.
//!   [`security`]: where tokens and TLS material come from. [`local`]: a controller and agents in
//!   this process.
//! - [`quick`]: the one-line run and the flags that override a file. [`grpc`]: gRPC schemas
//!   resolved and calls encoded before submission. [`plan`]: the dry run.
//! - [`render`] (the text report and the live line; [`render_samples`] its failure
//!   samples, text and HTML; [`render_load`] a ramp's stages and the agents' ports), [`html`], [`export`] (`.hlog`, CSV),
//!   [`report_file`] (local JSON reports), [`ci`] (JUnit XML, a Markdown summary).
//! - [`capacity`] and [`compare`]: the commands over `stampede_core::capacity` and
//!   `stampede_core::compare`.

#![warn(unreachable_pub, missing_docs)]

pub mod capacity;
pub mod ci;
pub mod client;
pub mod cmd;
pub mod compare;
pub mod config;
pub mod debug_print;
pub mod export;
pub mod grpc;
pub mod html;
mod html_target;
pub mod kube;
pub mod local;
pub mod plan;
pub mod quick;
pub mod render;
pub mod render_load;
pub mod render_samples;
pub mod render_target;
pub mod report_file;
pub mod security;

/// Exit codes (documented in `docs/concepts.md`).
pub mod exit {
    /// The run completed (and every threshold passed).
    pub const OK: i32 = 0;
    /// A threshold was breached.
    pub const THRESHOLD: i32 = 1;
    /// The run could not complete: agents lost, invalid scenario, controller unreachable, aborted.
    pub const RUN_FAILED: i32 = 2;
}

/// An error's chain of causes on one line, each said once: what `error: ` prints. Library
/// errors and transport errors may repeat their cause's text in their own ("tcp connect
/// error: tcp connect error: Connection refused").
pub fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if !parts
            .iter()
            .any(|p| p.contains(&text) || text.contains(p.as_str()))
        {
            parts.push(text);
        } else if let Some(last) = parts.last_mut() {
            if text.len() > last.len() {
                *last = text;
            }
        }
        cur = err.source();
    }
    parts.join(": ")
}

/// A random token for embedded runs.
pub fn random_token() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..32)
        .map(|_| format!("{:x}", rng.random_range(0..16u8)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::causes;

    /// An error that says its source in its message and chains it too.
    #[derive(Debug)]
    struct Write {
        path: &'static str,
        source: std::io::Error,
    }

    impl std::fmt::Display for Write {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "writing {}: {}", self.path, self.source)
        }
    }

    impl std::error::Error for Write {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    /// A cause the message already holds is said once; one it does not is added.
    #[test]
    fn each_cause_is_said_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::PermissionDenied, "permission denied");
        let e = anyhow::Error::new(Write {
            path: "/r.json",
            source: io(),
        })
        .context("storing the report");
        assert_eq!(
            causes(e.as_ref()),
            "storing the report: writing /r.json: permission denied"
        );
        let e = anyhow::Error::new(io()).context("reading r.json");
        assert_eq!(causes(e.as_ref()), "reading r.json: permission denied");
    }
}
