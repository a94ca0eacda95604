//! The data-rows cap, checked twice: by `validate` before submission, and by an agent as the
//! rows arrive. An `order: random` source goes whole to every agent, so random row sets a
//! few bytes either side of [`MAX_AGENT_DATA_BYTES`] must validate exactly when a lone agent
//! receiving them all accepts them, and both refusals must say the same thing.

use std::collections::BTreeMap;

use proptest::prelude::*;
use stampede_core::data::Rows;
use stampede_core::scenario::{data_rows_too_large, Scenario, MAX_AGENT_DATA_BYTES};
use stampede_proto::data::{chunks, shares_to_wire, Received};

/// Bytes one row of `values` costs against the cap: its text, 4 bytes a value, 4 the row.
fn row_cost(values: &[usize]) -> usize {
    values.iter().sum::<usize>() + 4 * values.len() + 4
}

/// Rows of `width` columns whose cost adds up to exactly `total` (at least one row's
/// overhead), cell lengths drawn from `lens` (cycled); the last row's first cell takes up
/// whatever is left.
fn rows_costing(total: usize, width: usize, lens: &[usize]) -> Vec<Vec<String>> {
    let overhead = 4 * width + 4;
    let mut rows = Vec::new();
    let mut left = total;
    let mut i = 0;
    while left > 0 {
        let mut cells: Vec<usize> = (0..width)
            .map(|c| lens[(i * width + c) % lens.len()])
            .collect();
        if row_cost(&cells) + overhead >= left {
            let rest: usize = cells[1..].iter().sum();
            if left < overhead + rest {
                cells[1..].iter_mut().for_each(|c| *c = 0);
            }
            cells[0] = left - overhead - cells[1..].iter().sum::<usize>();
        }
        left -= row_cost(&cells);
        rows.push(cells.iter().map(|&n| "v".repeat(n)).collect());
        i += 1;
    }
    rows
}

/// A scenario reading one `order: random` source per entry of `costs`, whose rows cost that
/// many bytes.
fn scenario(costs: &[usize], width: usize, lens: &[usize]) -> Scenario {
    let columns: Vec<String> = (0..width).map(|c| format!("c{c}")).collect();
    let names: Vec<String> = (0..costs.len()).map(|i| format!("d{i}")).collect();
    let data: Vec<String> = names
        .iter()
        .map(|n| {
            format!(
                "{n}: {{ order: random, columns: [{}], rows: [[{}]] }}",
                columns.join(", "),
                vec!["x"; width].join(", ")
            )
        })
        .collect();
    let path: String = names.iter().map(|n| format!("/${{{n}.c0}}")).collect();
    let text = format!(
        "name: cap\ntarget: http://127.0.0.1:1\nphases: [ {{ duration: 1s, arrival_rate: 1 }} ]\n\
         data: {{ {} }}\nsession: [ {{ http: {{ path: '{path}' }} }} ]\n",
        data.join(", ")
    );
    let mut s = Scenario::from_yaml(&text).unwrap();
    for (n, &cost) in names.iter().zip(costs) {
        let rows = rows_costing(cost, width, lens);
        let d = s.data.get_mut(n).unwrap();
        d.rows = Rows::from_rows(&rows).unwrap();
        assert_eq!(d.rows.share_bytes(), cost, "the rows cost what was asked");
    }
    s
}

/// What a lone agent does with every row of every source: receives them in the controller's
/// chunks, then checks them against its Assign.
fn agent_accepts(s: &Scenario) -> Result<(), String> {
    let mut rx = Received::default();
    let mut counts = BTreeMap::new();
    for (name, d) in &s.data {
        let pass = d.pass(name, 0);
        let positions: Vec<u32> = (0..pass.len() as u32).collect();
        for m in chunks("r", name, d, &pass, &positions) {
            rx.add(m);
        }
        counts.insert(name.clone(), pass.len() as u64);
    }
    rx.take("r", &s.agent_form(), &shares_to_wire(&counts))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn rows_near_the_cap_validate_exactly_when_the_agent_accepts_them(
        delta in -48i64..48,
        split in 0usize..=100,
        two in any::<bool>(),
        width in 1usize..=3,
        lens in prop::collection::vec(64usize..4096, 1..8),
    ) {
        let total = (MAX_AGENT_DATA_BYTES as i64 + delta) as usize;
        let costs = if two {
            // Two sources that add up: a share of the total each (at least a row's cost).
            let floor = 4 * width + 4 + width;
            let first = (total * split / 100).clamp(floor, total - floor);
            vec![first, total - first]
        } else {
            vec![total]
        };
        let s = scenario(&costs, width, &lens);
        let validated = s.validate().map_err(|e| e.to_string());
        let accepted = agent_accepts(&s);
        prop_assert_eq!(validated.is_ok(), total <= MAX_AGENT_DATA_BYTES, "{:?}", validated);
        prop_assert_eq!(validated.is_ok(), accepted.is_ok(), "validate {:?}, agent {:?}", validated, accepted);
        if let (Err(v), Err(a)) = (&validated, &accepted) {
            // The same reason in the agent's words, wherever it is found.
            prop_assert!(v.contains(&data_rows_too_large()), "{}", v);
            prop_assert!(a.contains(&data_rows_too_large()), "{}", a);
        }
    }
}
