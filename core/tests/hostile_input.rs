//! Hostile input: the scenario parser and the histogram decoders, on random and
//! mutated input, return errors and never panic; where a round trip exists it holds. The
//! same inputs as the `scenario` and `hist_decode` fuzz targets (`fuzz/README.md`),
//! at a few hundred cases each so `cargo test` stays fast.

use proptest::prelude::*;
use stampede_core::hist::{self, SparseHist};
use stampede_core::scenario::{Scenario, ScenarioError};

const EXAMPLES: &[&str] = &[
    include_str!("../../examples/demo.yaml"),
    include_str!("../../examples/session.yaml"),
    include_str!("../../examples/sessions.yaml"),
    include_str!("../../examples/tcp-login.yaml"),
    include_str!("../../examples/echo-udp.yaml"),
    include_str!("../../examples/closed-wrk.yaml"),
    include_str!("../../examples/ramp-poisson.yaml"),
    include_str!("../../examples/https-h2.yaml"),
];

type Parse = fn(&str) -> Result<Scenario, ScenarioError>;
const PARSERS: [Parse; 2] = [Scenario::from_yaml, Scenario::from_yaml_loadless];

/// What YAML and the scenario's values are made of, for single-byte edits.
const ALPHABET: &[u8] = b" \n\t:-[]{},&*!|>'\"#%@?0123456789.eEhmsx";

/// `text` with `edits` applied in turn: each replaces, inserts or deletes one byte.
fn mutate(text: &str, edits: &[(usize, u8, u8)]) -> String {
    let mut b = text.as_bytes().to_vec();
    for &(at, op, c) in edits {
        let at = at % (b.len() + 1);
        let c = ALPHABET[usize::from(c) % ALPHABET.len()];
        match op % 3 {
            0 if at < b.len() => b[at] = c,
            1 => b.insert(at, c),
            _ if at < b.len() => {
                b.remove(at);
            }
            _ => {}
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// Parses `text` with both parsers; whatever one accepts must come back unchanged from its
/// JSON form (the CLI re-sends scenarios as JSON once it has inlined their files).
fn parse_all(text: &str) -> Result<(), TestCaseError> {
    for parse in PARSERS {
        if let Ok(s) = parse(text) {
            let json = serde_json::to_string(&s).unwrap();
            let again = parse(&json);
            prop_assert!(again.is_ok(), "{json}: {:?}", again.err());
            prop_assert_eq!(again.unwrap(), s);
        }
    }
    Ok(())
}

fn duration() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u32..5_000).prop_map(|n| format!("{n}ms")),
        (1u32..600).prop_map(|n| format!("{n}s")),
        (1u32..90).prop_map(|n| format!("{}.5s", n)),
        (1u32..30).prop_map(|n| format!("{n}m")),
        Just("1h".to_string()),
    ]
}

/// A valid scenario as YAML: any transport, a few phases, a few steps, thresholds.
fn valid_scenario() -> impl Strategy<Value = (String, usize, usize)> {
    let phase = (duration(), 1u32..500, proptest::option::of(0u32..500));
    (
        prop_oneof![Just("http"), Just("https"), Just("tcp"), Just("udp")],
        1u16..=65535,
        1u32..=8,
        prop_oneof![Just("uniform"), Just("poisson")],
        any::<u64>(),
        proptest::collection::vec(phase, 1..4),
        proptest::collection::vec((1u32..5, proptest::option::of(duration())), 1..4),
        proptest::sample::subsequence(
            vec!["p99 < 50ms", "error_rate < 1%", "throughput >= 99% planned", "max < 2s"],
            0..=4,
        ),
    )
        .prop_map(
            |(scheme, port, agents, arrival, seed, phases, steps, thresholds)| {
                let mut y = format!(
                    "name: generated\ntarget: {scheme}://127.0.0.1:{port}\nagents: {agents}\n\
                     arrival: {arrival}\nseed: {seed}\nrequest_timeout: 2s\nphases:\n"
                );
                for (i, (d, rate, ramp)) in phases.iter().enumerate() {
                    y += &format!("  - {{ name: p{i}, duration: {d}, arrival_rate: {rate}");
                    if let Some(r) = ramp {
                        y += &format!(", ramp_to: {r}");
                    }
                    y += " }\n";
                }
                y += "session:\n";
                for (i, (repeat, think)) in steps.iter().enumerate() {
                    let step = match scheme {
                        "http" | "https" => format!(
                            "http: {{ method: POST, path: /s{i}, body: b{i}, headers: {{ x-n: '{i}' }} }}"
                        ),
                        "tcp" => format!(
                            "tcp: {{ send: {{ text: s{i} }}, framing: length_prefixed, \
                             expect: {{ prefix: {{ text: s }} }} }}"
                        ),
                        _ => format!("udp: {{ send: {{ hex: \"0{i}\" }}, timeout: 100ms }}"),
                    };
                    y += &format!("  - name: step{i}\n    {step}\n    repeat: {repeat}\n");
                    if let Some(t) = think {
                        y += &format!("  - think_time: {t}\n");
                    }
                }
                if !thresholds.is_empty() {
                    y += "thresholds:\n";
                    for t in &thresholds {
                        y += &format!("  - {t}\n");
                    }
                }
                (y, phases.len(), steps.len())
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Examples with a few bytes changed: errors or scenarios, never a panic.
    #[test]
    fn mutated_scenarios_never_panic(
        example in 0..EXAMPLES.len(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..8),
    ) {
        parse_all(&mutate(EXAMPLES[example], &edits))?;
    }

    /// Text of YAML's punctuation, keys and numbers, and any text at all.
    #[test]
    fn arbitrary_text_never_panics(
        yamlish in "([a-z_]{1,8}|[-:\\[\\]{},&*!|>'\" \n]|[0-9.]{1,6}(ms|s|m|h)?){0,60}",
        any_text in "\\PC{0,120}",
    ) {
        parse_all(&yamlish)?;
        parse_all(&any_text)?;
    }

    /// A valid generated scenario parses, with its phases and steps.
    #[test]
    fn generated_scenarios_parse((text, phases, steps) in valid_scenario()) {
        let s = Scenario::from_yaml(&text);
        prop_assert!(s.is_ok(), "{text}\n{:?}", s.err());
        let s = s.unwrap();
        prop_assert_eq!(s.phases.len(), phases);
        prop_assert_eq!(s.step_names().len(), steps);
        parse_all(&text)?;
    }
}

/// Latencies across the spec, the bounds and beyond them.
fn latencies() -> impl Strategy<Value = Vec<(u64, u64)>> {
    proptest::collection::vec(
        (
            prop_oneof![
                0u64..3_000,
                1u64..3_600_000_000,
                Just(0u64),
                Just(3_600_000_000u64),
                Just(u64::MAX),
            ],
            // Up to 300 × 2^40 in one bucket: within what V2 carries (`i64::MAX`).
            prop_oneof![Just(1u64), 1u64..1_000, Just(1u64 << 40)],
        ),
        0..300,
    )
}

fn recorded(values: &[(u64, u64)]) -> hdrhistogram::Histogram<u64> {
    let mut h = hist::new_histogram();
    for &(v, n) in values {
        h.saturating_record_n(v.clamp(1, hist::SPEC.highest_us), n);
    }
    h
}

/// Both decoders on `bytes`: never a panic; when both accept, they agree.
fn decode_both(bytes: &[u8]) -> Result<(), TestCaseError> {
    let sparse = hist::decode_sparse(bytes);
    let dense = hist::decode(bytes);
    if let (Ok(s), Ok(d)) = (&sparse, &dense) {
        prop_assert_eq!(s, &SparseHist::from_dense(d));
    }
    if let Ok(s) = &sparse {
        let again = hist::decode_sparse(&hist::encode_sparse(s).unwrap()).unwrap();
        prop_assert_eq!(&again, s);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Encode → decode gives the histogram back, in both wire forms and both decoders.
    #[test]
    fn histograms_round_trip(values in latencies()) {
        let h = recorded(&values);
        for bytes in [hist::encode(&h).unwrap(), hist::encode_wire(&h).unwrap()] {
            prop_assert_eq!(&hist::decode(&bytes).unwrap(), &h);
            prop_assert_eq!(hist::decode_sparse(&bytes).unwrap(), SparseHist::from_dense(&h));
        }
    }

    /// Valid encodings with bytes changed, cut or extended, and random bytes: errors or
    /// histograms, never a panic.
    #[test]
    fn hostile_histogram_bytes_never_panic(
        values in latencies(),
        raw in any::<bool>(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
        tail in proptest::collection::vec(any::<u8>(), 0..16),
        random in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let h = recorded(&values);
        let mut bytes = if raw { hist::encode_wire(&h) } else { hist::encode(&h) }.unwrap();
        for (at, b) in edits {
            let at = at % bytes.len();
            bytes[at] = b;
        }
        decode_both(&bytes)?;
        bytes.truncate(cut % (bytes.len() + 1));
        decode_both(&bytes)?;
        bytes.extend_from_slice(&tail);
        decode_both(&bytes)?;
        decode_both(&random)?;
    }
}
