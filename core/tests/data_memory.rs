//! A data source's rows cost their text and 4 bytes a value, from the submitted text to an
//! agent's share. A counting allocator (this test binary's only global allocator) measures
//! the peak live heap while a scenario of a million one-letter rows is parsed, validated,
//! turned into the agents' form and cut into a share, as the controller does.
//!
//! The budget, computed from the data: the text itself, the rows' arena (1 byte of text and
//! a 4-byte offset a row) three times over (a growing buffer briefly holds its old and its
//! doubled copy), the pass and one agent's positions (4 bytes a row each) and its share
//! (9 bytes a row), and 4 MiB for the rest. Rows held as lists of strings cost about 64 bytes
//! a row, and the YAML parser's events about 300 more.

#![allow(unsafe_code)] // the counting allocator only forwards to the system allocator
#![warn(clippy::undocumented_unsafe_blocks)]

use std::sync::atomic::Ordering;

use stampede_core::data::share::Share;
use stampede_core::data::{Keys, Rows};
use stampede_core::scenario::{ReadyScenario, Scenario};
use stampede_core::shard::ShardMap;

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{ALLOCS, LIVE, PEAK};

const ROWS: usize = 1_000_000;

#[test]
fn a_million_rows_cost_their_text_not_a_heap_block_each() {
    let rows: String = "[\"x\"],".repeat(ROWS);
    let text = format!(
        "{{\"name\":\"rows\",\"target\":\"http://127.0.0.1:1\",\"agents\":2,\
         \"phases\":[{{\"duration\":\"1000s\",\"arrival_rate\":1000}}],\
         \"data\":{{\"d\":{{\"columns\":[\"c\"],\"rows\":[{}]}}}},\
         \"session\":[{{\"http\":{{\"path\":\"/${{d.c}}\"}}}}]}}",
        rows.trim_end_matches(',')
    );
    drop(rows);

    // The rows alone: read into the arena with a handful of allocations, not one a row.
    let list = &text[text.find("[[").unwrap()..text.find("]]").unwrap() + 2];
    let before = ALLOCS.load(Ordering::Relaxed);
    let table: Rows = serde_json::from_str(list).unwrap();
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(table.len(), ROWS);
    assert!(allocs < 100, "{allocs} allocations for {ROWS} rows");
    let arena = table.heap_bytes();
    assert_eq!(arena, ROWS * 5);
    drop(table);

    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let scenario = Scenario::from_yaml(&text).unwrap();
    let ready = ReadyScenario::new(scenario).unwrap();
    let form = ready.agent_form();
    assert_eq!(form.data["d"].len(), ROWS as u64);
    let source = &ready.data["d"];
    let map = ShardMap::new(2, &[]).unwrap();
    let keys = Keys::new(&ready, "d", source, 0, &map);
    let pass = source.pass("d", 0);
    let positions = keys.positions(source, 1);
    assert_eq!(positions.len(), ROWS / 2);
    let share = Share::of(source, &pass, &positions).unwrap();
    assert_eq!(share.cell(share.row(1).unwrap(), 0), "x");
    let peak = PEAK.load(Ordering::Relaxed) - base;
    let budget = 3 * arena + ROWS * 4 + (ROWS / 2) * (4 + 9) + (4 << 20);
    eprintln!(
        "peak {} KiB over the text's {} KiB; budget {} KiB",
        peak >> 10,
        text.len() >> 10,
        budget >> 10
    );
    assert!(peak <= budget, "peak {peak} bytes, budget {budget}");
}
