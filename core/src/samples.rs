//! Failure samples: the first few failed requests of each step and error kind, kept whole
//! enough to act on (the data row the session used, the request line, the status and the start
//! of the answer) and bounded everywhere, so that a run with a million failures carries a few
//! hundred bytes per step and kind rather than a log.
//!
//! Agents keep the first [`PER_KIND`] of each step × kind they see ([`SampleBook`] decides which
//! are wanted); the controller merges the agents' into the first [`PER_KIND`] by time across
//! the run ([`SampleMerge`]), the same whatever order the agents' messages arrive in.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Samples kept per step and error kind: by each agent, and in the report.
pub const PER_KIND: usize = 3;
/// Distinct (step, error kind) pairs sampled, by an agent and in a report: a step that fails
/// in a hundred ways keeps the first ones, and the report stays small.
pub const MAX_KINDS: usize = 32;
/// Bytes of an answer's body kept, before escaping.
pub const MAX_BODY: usize = 512;
/// Bytes of the request line (or payload) kept, before escaping.
pub const MAX_REQUEST: usize = 256;
/// Bytes of the request's headers kept (after its line), before escaping.
pub const MAX_HEADERS: usize = 512;
/// Bytes of the request's body kept, before escaping.
pub const MAX_SENT_BODY: usize = 256;
/// Bytes of a gRPC answer's `grpc-message` kept, before escaping.
pub const MAX_GRPC_MESSAGE: usize = 256;
/// Bytes of an answer's body a debug print shows (`stampede run --debug`), before escaping.
pub const MAX_DEBUG_BODY: usize = 1024;
/// What a masked value is written as.
pub const MASK: &[u8] = b"***";
/// Data sources named in one sample.
pub const MAX_ROWS: usize = 4;
/// Values of one row kept.
pub const MAX_VALUES: usize = 8;
/// Bytes of one row value kept, before escaping.
pub const MAX_VALUE: usize = 64;
/// Longest escaped text from `n` bytes: every byte may become `\xNN`, plus the ellipsis mark.
pub const fn escaped_len(n: usize) -> usize {
    4 * n + 3
}

/// One failed request as an agent saw it: what travels in its Progress.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sample {
    /// When the request ended, in milliseconds after T0.
    pub offset_ms: u64,
    /// The request step's ordinal among the run's request steps.
    pub step: u32,
    /// The error kind it was counted under.
    pub kind: String,
    /// The data rows the session had bound.
    pub rows: Vec<RowRef>,
    /// The request line as sent (`GET /login?user=u11`), the gRPC method, or the start of a
    /// tcp/udp payload, escaped.
    pub request: String,
    /// The request's headers as sent, one `name: value` a line (escaped, so `\r\n` apart),
    /// or the gRPC call's metadata; empty for tcp and udp.
    pub headers: String,
    /// The start of the request's body as sent, escaped.
    pub sent_body: String,
    /// The HTTP status, or 0 when the request got none (a connect error, tcp, udp).
    pub status: u16,
    /// The start of the answer's body, escaped (see [`excerpt`]).
    pub body: String,
    /// A failed gRPC call's `grpc-message`, escaped.
    pub grpc_message: String,
}

/// A data row a sample's session used: the source, the row's position in the source's pass
/// (the file's row number, from 0, with `order: sequence`) and its first values, in column
/// order (none for a `secret` source).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct RowRef {
    /// The data source's name.
    pub source: String,
    /// The row's position in the source's pass (the file's row number, from 0, with `order:
    /// sequence`).
    pub row: u64,
    /// Its first values, in column order; none for a `secret` source.
    pub values: Vec<String>,
}

/// Escapes up to `max` bytes of `bytes` for a report: valid UTF-8 is kept, invalid bytes and
/// control characters are written `\xNN` (a line break `\n`), and a cut is marked with `…`.
/// The result is one line, whatever the answer was.
pub fn excerpt(bytes: &[u8], max: usize) -> String {
    let cut = bytes.len() > max;
    let bytes = &bytes[..bytes.len().min(max)];
    let mut out = String::with_capacity(bytes.len() + 3);
    let mut chunks = bytes.utf8_chunks().peekable();
    while let Some(chunk) = chunks.next() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    for b in c.encode_utf8(&mut [0; 4]).bytes() {
                        out.push_str(&format!("\\x{b:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        // A character the cut split in two is left out, not shown as bytes.
        let last = chunks.peek().is_none();
        if !(cut && last) {
            for b in chunk.invalid() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        }
    }
    if cut {
        out.push('…');
    }
    out
}

/// Replaces every occurrence of each of `secrets` in `bytes` by [`MASK`], and of each form a
/// template filter writes it in too (`|url`, as a secret in a query is sent encoded, `|json`
/// and `|hex`): what a sample or a debug print shows of a request that carried an
/// `${env:...}` or a setup value, filtered or not. Longer secrets are masked first, so that
/// one inside another leaves no part showing.
pub fn mask(bytes: &[u8], secrets: &[Vec<u8>]) -> Vec<u8> {
    use crate::template::{apply_filter, Filter};
    let mut out = bytes.to_vec();
    for secret in secrets {
        if secret.is_empty() {
            continue;
        }
        out = replace_all(&out, secret);
        for filter in [Filter::Url, Filter::Json, Filter::Hex] {
            let mut form = Vec::with_capacity(secret.len() * 2);
            apply_filter(Some(filter), secret, &mut form);
            if form != *secret {
                out = replace_all(&out, &form);
            }
        }
    }
    out
}

/// Sorts secrets longest first and drops empty and repeated ones, for [`mask`].
pub fn mask_order(mut secrets: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    secrets.retain(|s| !s.is_empty());
    secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    secrets.dedup();
    secrets
}

fn replace_all(bytes: &[u8], what: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(what) {
            out.extend_from_slice(MASK);
            i += what.len();
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// Which failures an agent still wants: the first [`PER_KIND`] of each step × kind, for at
/// most [`MAX_KINDS`] pairs. Asked before a sample is built, so that a run failing a million
/// times builds a few.
#[derive(Debug, Default)]
pub struct SampleBook {
    /// (step, kind, samples taken), in the order first seen.
    taken: Vec<(u32, String, usize)>,
    /// Taken and not yet sent.
    pending: Vec<Sample>,
}

impl SampleBook {
    /// Whether a failure of `step` under `kind` would be kept.
    pub fn wants(&self, step: u32, kind: &str) -> bool {
        match self.taken.iter().find(|(s, k, _)| *s == step && k == kind) {
            Some((_, _, n)) => *n < PER_KIND,
            None => self.taken.len() < MAX_KINDS,
        }
    }

    /// Keeps `sample` when it is still wanted; whether it was.
    pub fn offer(&mut self, sample: Sample) -> bool {
        let at = self
            .taken
            .iter()
            .position(|(s, k, _)| *s == sample.step && *k == sample.kind);
        match at {
            Some(i) if self.taken[i].2 < PER_KIND => self.taken[i].2 += 1,
            None if self.taken.len() < MAX_KINDS => {
                self.taken.push((sample.step, sample.kind.clone(), 1))
            }
            _ => return false,
        }
        self.pending.push(sample);
        true
    }

    /// The samples taken since the last call, for the next Progress.
    pub fn take(&mut self) -> Vec<Sample> {
        std::mem::take(&mut self.pending)
    }
}

/// The report's failure samples: the first [`PER_KIND`] of each step × kind across the
/// agents, by time (then agent, then content), for at most [`MAX_KINDS`] pairs (the earliest
/// seen win; an agent's first samples come in its first Progress).
#[derive(Debug, Clone, Default)]
pub struct SampleMerge {
    kept: BTreeMap<(u32, String), Vec<Kept>>,
}

/// A sample the merge keeps, ordered by (time, agent, content).
type Kept = (u64, u32, Sample);

impl SampleMerge {
    /// Adds the samples of agent `agent`.
    pub fn add(&mut self, agent: u32, samples: &[Sample]) {
        for s in samples {
            let key = (s.step, s.kind.clone());
            if !self.kept.contains_key(&key) && self.kept.len() >= MAX_KINDS {
                continue;
            }
            let list = self.kept.entry(key).or_default();
            let item = (s.offset_ms, agent, s.clone());
            let at = list.partition_point(|x| *x <= item);
            if at < PER_KIND {
                list.insert(at, item);
                list.truncate(PER_KIND);
            }
        }
    }

    /// Samples kept.
    pub fn len(&self) -> usize {
        self.kept.values().map(Vec::len).sum()
    }

    /// Whether no sample is kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The report's samples, by step then kind then time: steps and agents named, rows'
    /// values paired with their columns (`columns(source)`; a source without columns, or a
    /// secret one, shows none).
    pub fn report<'a>(
        &self,
        steps: &[String],
        agents: &[String],
        columns: impl Fn(&str) -> Option<&'a [String]>,
    ) -> Vec<FailureSample> {
        self.kept
            .values()
            .flatten()
            .map(|(offset_ms, agent, s)| FailureSample {
                step: steps
                    .get(s.step as usize)
                    .cloned()
                    .unwrap_or_else(|| format!("#{}", s.step)),
                kind: s.kind.clone(),
                agent: agents.get(*agent as usize).cloned().unwrap_or_default(),
                offset_s: *offset_ms as f64 / 1000.0,
                rows: s
                    .rows
                    .iter()
                    .map(|r| SampleRowReport {
                        source: r.source.clone(),
                        row: r.row,
                        values: match columns(&r.source) {
                            Some(cols) => cols.iter().cloned().zip(r.values.clone()).collect(),
                            None => BTreeMap::new(),
                        },
                    })
                    .collect(),
                request: s.request.clone(),
                headers: s.headers.clone(),
                sent_body: s.sent_body.clone(),
                status: (s.status != 0).then_some(s.status),
                body: s.body.clone(),
                grpc_message: s.grpc_message.clone(),
            })
            .collect()
    }
}

/// A failure sample in the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FailureSample {
    /// The step's name.
    pub step: String,
    /// The error kind it was counted under (`status_401`, `grpc_unavailable`, `timeout`).
    pub kind: String,
    /// The agent that sent it.
    pub agent: String,
    /// When it ended, in seconds after T0.
    pub offset_s: f64,
    /// The data rows its session used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<SampleRowReport>,
    /// The request line as sent, the gRPC method, or the start of a tcp/udp payload.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub request: String,
    /// The request's headers as sent (`\r\n` apart), secrets masked as `***`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub headers: String,
    /// The start of the request's body as sent, secrets masked as `***`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sent_body: String,
    /// The HTTP status, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The start of the answer's body (at most 512 bytes, escaped; `…` marks a cut).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub body: String,
    /// A failed gRPC call's `grpc-message`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub grpc_message: String,
}

/// A data row in a report's sample.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SampleRowReport {
    /// The data source's name.
    pub source: String,
    /// The row's position in the source's pass: its row number in the file (from 0, after a
    /// CSV header) with `order: sequence`.
    pub row: u64,
    /// The row's first values by column (none for a `secret` source).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, String>,
}

impl FailureSample {
    /// The row as a short reference: `users#11`, several joined by spaces.
    pub fn row_refs(&self) -> String {
        self.rows
            .iter()
            .map(|r| format!("{}#{}", r.source, r.row))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(step: u32, kind: &str, offset_ms: u64) -> Sample {
        Sample {
            offset_ms,
            step,
            kind: kind.into(),
            ..Sample::default()
        }
    }

    #[test]
    fn excerpts_keep_text_and_escape_the_rest() {
        assert_eq!(excerpt(br#"{"error":"no"}"#, 512), r#"{"error":"no"}"#);
        assert_eq!(excerpt(b"a\nb\x00\xff", 512), "a\\nb\\x00\\xff");
        assert_eq!(excerpt(b"abcdef", 3), "abc…");
        // "é" is two bytes; a cut between them drops the half, not shown as a byte.
        assert_eq!(excerpt("aé".as_bytes(), 2), "a…");
        assert_eq!(excerpt("aé".as_bytes(), 3), "aé");
        let hostile = vec![0xffu8; 10_000];
        assert!(excerpt(&hostile, MAX_BODY).len() <= escaped_len(MAX_BODY));
    }

    #[test]
    fn secrets_are_masked_plain_and_encoded() {
        let secrets = mask_order(vec![b"s3cr".to_vec(), b"s3cr3t/x".to_vec(), Vec::new()]);
        assert_eq!(secrets[0], b"s3cr3t/x");
        let out = mask(b"GET /a?k=s3cr3t%2Fx&j=s3cr&h=s3cr3t/x", &secrets);
        assert_eq!(out, b"GET /a?k=***&j=***&h=***");
        assert_eq!(mask(b"plain", &secrets), b"plain");
    }

    #[test]
    fn an_agent_keeps_the_first_few_of_each_step_and_kind() {
        let mut book = SampleBook::default();
        for i in 0..10 {
            if book.wants(0, "status_401") {
                assert!(book.offer(sample(0, "status_401", i)));
            }
        }
        assert!(book.offer(sample(1, "status_401", 11)));
        assert!(!book.wants(0, "status_401"));
        assert!(!book.offer(sample(0, "status_401", 12)));
        let taken = book.take();
        assert_eq!(taken.len(), PER_KIND + 1);
        assert!(book.take().is_empty(), "sent once");
        assert!(!book.wants(0, "status_401"), "still full after the send");
        for k in 0..100 {
            book.offer(sample(2, &format!("extract.v{k}"), 0));
        }
        assert_eq!(book.taken.len(), MAX_KINDS);
    }

    #[test]
    fn a_secret_is_masked_in_every_filtered_form() {
        let secrets = mask_order(vec![b"p\"a ss".to_vec()]);
        for (sent, shown) in [
            (&b"{\"pw\":\"p\\\"a ss\"}"[..], &b"{\"pw\":\"***\"}"[..]),
            (b"GET /?pw=p%22a%20ss", b"GET /?pw=***"),
            (b"x-pw: 7022612073732f", b"x-pw: ***2f"),
            (b"raw p\"a ss.", b"raw ***."),
        ] {
            assert_eq!(
                String::from_utf8_lossy(&mask(sent, &secrets)),
                String::from_utf8_lossy(shown)
            );
        }
    }

    #[test]
    fn the_merge_keeps_the_earliest_whatever_the_order() {
        let a: Vec<_> = (0..5).map(|i| sample(0, "timeout", 100 - i)).collect();
        let b: Vec<_> = (0..5).map(|i| sample(0, "timeout", 50 + i)).collect();
        let mut one = SampleMerge::default();
        one.add(0, &a);
        one.add(1, &b);
        let mut two = SampleMerge::default();
        two.add(1, &b);
        two.add(0, &a);
        let names = ["step".to_string()];
        let agents = ["a".to_string(), "b".to_string()];
        let r1 = one.report(&names, &agents, |_| None);
        assert_eq!(r1, two.report(&names, &agents, |_| None));
        let offsets: Vec<f64> = r1.iter().map(|s| s.offset_s).collect();
        assert_eq!(offsets, [0.05, 0.051, 0.052]);
        assert!(r1.iter().all(|s| s.agent == "b" && s.step == "step"));
    }

    #[test]
    fn the_merge_is_bounded_in_kinds_and_names_columns() {
        let mut m = SampleMerge::default();
        for k in 0..(MAX_KINDS as u32 + 10) {
            m.add(0, &[sample(k, "reset", 1)]);
        }
        assert_eq!(m.len(), MAX_KINDS);
        let mut m = SampleMerge::default();
        let mut s = sample(0, "status_401", 7);
        s.rows = vec![RowRef {
            source: "users".into(),
            row: 11,
            values: vec!["u11".into()],
        }];
        m.add(0, &[s]);
        let cols = vec!["name".to_string()];
        let r = m.report(&["login".into()], &["a".into()], |src| {
            (src == "users").then_some(cols.as_slice())
        });
        assert_eq!(r[0].rows[0].values["name"], "u11");
        assert_eq!(r[0].row_refs(), "users#11");
        let hidden = m.report(&["login".into()], &["a".into()], |_| None);
        assert!(hidden[0].rows[0].values.is_empty());
    }
}
