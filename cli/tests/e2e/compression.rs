//! Compressed bodies end to end: the project's HTTP target gzips its answers when asked
//! (`accept-encoding: gzip`), the agent decodes them before a step's checks read them, and a
//! body that decodes past the cap (a decompression bomb) counts `decode_limit`.

use stampede_cli::local::LocalCluster;
use stampede_core::report::Report;
use stampede_target_servers::http::HttpConfig;

use crate::{run, Target};

/// Two full cycles of the target's `a..z` pattern: never literal in its gzip form.
const PATTERN: &str = "xyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzab";

/// 20 sessions/s for 1 s, each sending `GET PATH` 3 times with `headers`.
fn scenario(url: &str, path: &str, headers: &str) -> String {
    format!(
        "name: e2e-gzip\ntarget: {url}\nphases:\n  - {{ duration: 1s, arrival_rate: 20 }}\nsession:\n  - http: {{ path: '{path}', headers: {{ {headers} }} }}\n    check: {{ body_contains: {PATTERN} }}\n    repeat: 3\n"
    )
}

async fn run_local(text: &str) -> Report {
    let cluster = LocalCluster::start(1, None).await.unwrap();
    let r = run(&cluster.url(), &cluster.token, text, 1).await;
    cluster.stop().await;
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_answers_are_decoded_before_checks_and_a_bomb_stops_at_the_cap() {
    let target = Target::start_with(HttpConfig {
        gzip: true,
        bytes: 16 * 1024,
        ..HttpConfig::default()
    })
    .await;
    let plain = run_local(&scenario(&target.url, "/data", "")).await;
    assert!(plain.totals.errors.is_empty(), "{:?}", plain.totals.errors);
    assert_eq!(plain.totals.completed, 60);
    let gz = run_local(&scenario(&target.url, "/data", "accept-encoding: gzip")).await;
    assert!(gz.totals.errors.is_empty(), "{:?}", gz.totals.errors);
    assert_eq!(gz.totals.completed, 60);
    // 16 KiB bodies: over 60 × 16 KiB uncompressed, a small fraction of it gzipped.
    assert!(plain.totals.bytes_received > 60 * 16 * 1024);
    assert!(
        gz.totals.bytes_received * 10 < plain.totals.bytes_received,
        "{} against {}",
        gz.totals.bytes_received,
        plain.totals.bytes_received
    );
    // The decoded bodies are sized both ways: 60 × 16 KiB decoded from far fewer bytes.
    assert_eq!(plain.totals.compressed, None);
    let sizes = gz.totals.compressed.expect("gzipped bodies were decoded");
    assert_eq!(sizes.decoded_bytes, 60 * 16 * 1024);
    assert!(
        sizes.wire_bytes > 0 && sizes.wire_bytes * 10 < sizes.decoded_bytes,
        "{sizes:?}"
    );
    assert!(sizes.wire_bytes < gz.totals.bytes_received, "{sizes:?}");
    // 8 MiB decoded from a few KiB on the wire: past the 1 MiB cap, so each answer fails.
    let bomb = run_local(&scenario(
        &target.url,
        "/bytes?n=8388608",
        "accept-encoding: gzip",
    ))
    .await;
    assert_eq!(bomb.totals.completed, 0);
    assert_eq!(
        bomb.totals.errors.iter().collect::<Vec<_>>(),
        [(&"decode_limit".to_string(), &20)],
        "the first answer of each session fails it"
    );
    assert!(bomb.totals.bytes_received < 20 * (1 << 20));
}
