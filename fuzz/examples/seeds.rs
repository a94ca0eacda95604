//! Writes the seed corpora under `fuzz/seeds/<target>/` (committed): the repository's example
//! scenarios and a few handcrafted ones, histograms in both wire forms, HTTP/1 responses, and
//! Progress messages as an agent encodes them. Run from `fuzz/`: `cargo run --example seeds`.
//! The `crash-*` files next to them are inputs that crashed a target once (each has a unit test
//! where it was fixed); they are kept, not written here.

use std::path::Path;

use prost::Message;
use stampede_core::hist;
use stampede_core::stats::Stats;
use stampede_proto::convert::sample_to_wire;
use stampede_proto::v1;

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("seeds").join(target);
    std::fs::create_dir_all(&dir).expect("seed directory");
    std::fs::write(dir.join(name), bytes).expect("seed file");
}

fn scenarios() {
    let mut examples: Vec<_> = std::fs::read_dir("../examples")
        .expect("../examples")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    examples.sort();
    for p in examples {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("example");
        write("scenario", name, &std::fs::read(&p).expect("example"));
    }
    let handmade: &[(&str, &str)] = &[
        (
            "aliases.yaml",
            "name: a\ntarget: http://h:1\nphases: [&p { duration: 1s, arrival_rate: 1 }, *p]\n\
             session: [&s { http: { path: /x } }, *s]\n",
        ),
        (
            "json.json",
            r#"{"name":"j","target":"http://h:1","phases":[{"duration":"2s","arrival_rate":3.5,"ramp_to":7}],"session":[{"http":{"method":"PUT","path":"/p/${session.index}?a=${session.agent}&u=${uuid()}","body":"${row.user}"}}],"data":{"row":{"columns":["user"],"rows":[["u1"],["u2"]],"on_exhausted":"wrap"}}}"#,
        ),
        (
            "loadless.yaml",
            "name: capacity\ntarget: tcp://127.0.0.1:7000\nsession:\n  - tcp: { send: { text: ping }, framing: length_prefixed, expect: { prefix: { hex: \"70 6f\" } } }\n",
        ),
        (
            "closed.yaml",
            "name: c\ntarget: http://h:1\nload: { model: closed, connections: 4, duration: 2m }\n\
             request_timeout: 1h\nsession: [{ http: { path: / }, repeat: 4294967295 }, { think_time: { min: 1ms, max: 2h } }]\n",
        ),
        (
            "poisson.yaml",
            "name: p\ntarget: udp://127.0.0.1:9\narrival: poisson\nseed: 42\nagents: 3\non_agent_loss: { tolerate: 50 }\n\
             phases: [{ duration: 10s, arrival_rate: 0.5, ramp_to: 1000 }]\nsession: [{ udp: { send: { text: x }, timeout: 50ms } }]\n\
             thresholds: [\"p99.9 < 1s\", \"error_rate < 5%\"]\nmax_error_rate: 2%\n",
        ),
    ];
    for (name, text) in handmade {
        write("scenario", name, text.as_bytes());
    }
}

fn histograms() {
    let mut small = hist::new_histogram();
    for v in [1, 2, 3, 250, 251, 9_999, 1_000_000] {
        hist::record(&mut small, v);
    }
    let mut wide = hist::new_histogram();
    for k in 0..3_000u64 {
        hist::record(&mut wide, 1 + k * k * 397);
    }
    let empty = hist::new_histogram();
    write(
        "hist_decode",
        "small-raw",
        &hist::encode_wire(&small).expect("encode"),
    );
    write(
        "hist_decode",
        "small-deflated",
        &hist::encode(&small).expect("encode"),
    );
    write(
        "hist_decode",
        "wide-wire",
        &hist::encode_wire(&wide).expect("encode"),
    );
    write(
        "hist_decode",
        "empty-raw",
        &hist::encode_wire(&empty).expect("encode"),
    );
    write(
        "hist_decode",
        "empty-deflated",
        &hist::encode(&empty).expect("encode"),
    );
}

fn responses() {
    // First byte: piece size in the low 5 bits (0: whole reads), 0x20 HEAD, 0x40 capture.
    let seeds: &[(&str, u8, &[u8])] = &[
        ("length", 0x00, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 204 No Content\r\n\r\n"),
        ("chunked", 0x43, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nTrailer: t\r\n\r\n"),
        ("interim", 0x05, b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"),
        ("close", 0x40, b"HTTP/1.0 200 OK\r\nConnection: close\r\nSet-Cookie: a=b\r\n\r\nbody until the end"),
        ("head", 0x21, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nHTTP/1.1 304 Not Modified\r\nConnection: keep-alive\r\n\r\n"),
        ("switch", 0x00, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"),
    ];
    for (name, ctl, bytes) in seeds {
        let mut v = vec![*ctl];
        v.extend_from_slice(bytes);
        write("http1_response", name, &v);
    }
}

fn frame(out: &mut Vec<u8>, agent: u8, p: &v1::Progress) {
    let bytes = p.encode_to_vec();
    out.push(agent);
    out.extend_from_slice(
        &u16::try_from(bytes.len())
            .expect("a small Progress")
            .to_le_bytes(),
    );
    out.extend_from_slice(&bytes);
}

fn progress() {
    let mut s = Stats::with_steps(2);
    s.counters.sessions_planned = 20;
    for k in 0..20u64 {
        s.record_start(k * 100);
        s.record_success((k % 2) as usize, 1_000 + k * 37, 900 + k * 31);
        s.counters.count_status(200);
    }
    s.record_failure(1, "timeout");
    s.counters.requests_started = 21;
    s.counters.peak_open_connections = 3;
    let sample = |phase| sample_to_wire(phase, &s).expect("encode");
    let progress = |interval, phases: &[u32]| v1::Progress {
        run_id: "run".into(),
        interval,
        samples: phases.iter().map(|&p| sample(p)).collect(),
        open_connections: 2,
            resources: None,
        endpoints: Vec::new(),
        failure_samples: Vec::new(),
        stage_connects: Vec::new(),
        debug: Vec::new(),
        ..Default::default()
    };
    let mut one = Vec::new();
    frame(&mut one, 0, &progress(0, &[0]));
    write("progress", "one", &one);
    let mut run = Vec::new();
    for i in 0..4 {
        frame(&mut run, 0, &progress(i, &[0, 1]));
        frame(&mut run, 1, &progress(i, &[1]));
    }
    run.extend_from_slice(&[0xff, 0, 0]);
    frame(&mut run, 0, &progress(5, &[1]));
    write("progress", "run", &run);
}

fn main() {
    scenarios();
    histograms();
    responses();
    progress();
}
