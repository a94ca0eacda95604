//! Whether a plan can be delivered at all: the sessions each agent must hold at once against
//! the slots it has — its session capacity (`stampede agent --capacity`) for arrival phases,
//! its share of a constant load's connections. A session holds its slot at least for its
//! think times, and for its requests besides, which no plan can know; so a plan is
//! undeliverable, by a computable share, when the think times alone need more slots than
//! there are, and otherwise the answer is a latency budget: how long a session may take
//! before arrivals are dropped. `stampede plan` prints both; a run that misses more than its
//! `max_dropped` ends `incomplete`.

use std::time::Duration;

use crate::scenario::{LoadModel, Scenario, StepKind, ThinkTime};
use crate::shard::split_evenly;

/// What one phase or load asks of an agent's slots.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotBudget {
    /// `phase NAME` or `constant load`.
    pub what: String,
    /// Sessions per second one agent starts at the peak (the busiest agent).
    pub rate_per_agent: f64,
    /// Slots one agent has for them.
    pub slots: u64,
    /// The shortest a session can hold a slot: its think times at their minimum.
    pub min_hold: Duration,
    /// How long a session may hold its slot before arrivals are dropped: slots over rate.
    pub budget: Duration,
    /// The share of sessions that can start at all, from the think times alone (1 when they
    /// fit).
    pub deliverable: f64,
}

impl SlotBudget {
    /// True when the think times alone need more slots than there are.
    pub fn undeliverable(&self) -> bool {
        self.deliverable < 1.0
    }

    /// The warning `plan` prints.
    pub fn text(&self, slots_are: &str) -> String {
        let budget = crate::duration::HumanDuration(self.budget);
        if self.undeliverable() {
            format!(
                "{}: {:.1} sessions/s per agent that think at least {} each need {:.0} {slots_are} at once, \
                 {} are there: at most {:.1}% of its sessions can start (raise it, or add agents)",
                self.what,
                self.rate_per_agent,
                crate::duration::HumanDuration(self.min_hold),
                self.rate_per_agent * self.min_hold.as_secs_f64(),
                self.slots,
                self.deliverable * 100.0
            )
        } else {
            format!(
                "{}: {:.1} sessions/s per agent over {} {slots_are}: a session may take at most {budget} \
                 on average, or arrivals are dropped and the run ends incomplete",
                self.what, self.rate_per_agent, self.slots
            )
        }
    }
}

/// The shortest time a session of `steps` holds its slot: its think times at their minimum.
fn min_hold(steps: &[crate::scenario::Step]) -> Duration {
    steps
        .iter()
        .map(|s| match s.kind {
            StepKind::Think(ThinkTime::Fixed(d)) => d.0,
            StepKind::Think(ThinkTime::Range { min, .. }) => min.0,
            _ => Duration::ZERO,
        })
        .fold(Duration::ZERO, Duration::saturating_add)
}

/// The slot budgets of every arrival phase (against `capacity` sessions per agent) and
/// constant load (against its connections) of `scenario` over `agents` agents.
pub fn budgets(scenario: &Scenario, agents: u32, capacity: u32) -> Vec<SlotBudget> {
    let agents = agents.max(1);
    let named = scenario.named_workloads();
    let mut out = Vec::new();
    for w in scenario.workload_views() {
        let hold = w
            .types
            .iter()
            .map(|t| min_hold(t.steps))
            .min()
            .unwrap_or_default();
        let mut push = |what: String, rate: f64, slots: u64| {
            if rate <= 0.0 || slots == 0 {
                return;
            }
            let need = rate * hold.as_secs_f64();
            out.push(SlotBudget {
                what,
                rate_per_agent: rate,
                slots,
                min_hold: hold,
                budget: Duration::from_secs_f64((slots as f64 / rate).min(1e9)),
                deliverable: if need > slots as f64 {
                    slots as f64 / need
                } else {
                    1.0
                },
            });
        };
        match w.load {
            Some(l) if l.model == LoadModel::Constant => {
                // The busiest agent: the largest share of the connections, and of the rate
                // as many agents as hold connections share it.
                let holders = u64::from(agents).min(u64::from(l.connections)).max(1);
                let conns = split_evenly(u64::from(l.connections), agents)
                    .into_iter()
                    .max()
                    .unwrap_or(0);
                let rate = l.rate.unwrap_or(0.0) / holders as f64;
                push("constant load".into(), rate, conns * u64::from(l.streams()));
            }
            Some(_) => {}
            None => {
                for (i, p) in w.effective_phases(named).iter().enumerate() {
                    let peak = p.arrival_rate.max(p.end_rate()) / f64::from(agents);
                    push(
                        format!("phase {}", p.display_name(i)),
                        peak,
                        u64::from(capacity),
                    );
                }
            }
        }
    }
    out
}

/// The warnings of constant-rate loads whose pool ramps: it starts from no connection while
/// the arrivals keep the rate from T0, so until the pool is big enough its slots wait for a
/// connection (counted late, from their intended time) and, past an agent's queue, are
/// dropped. That is the generator being the limit by plan, not the target; each warning
/// says how small the pool is at T0, at half its peak and at its peak, with the latency
/// budget (open connections over the rate) each leaves a session.
pub fn ramp_warnings(scenario: &Scenario) -> Vec<String> {
    let mut out = Vec::new();
    for w in scenario.workload_views() {
        let Some(l) = w
            .load
            .filter(|l| l.model == LoadModel::Constant && !l.stages.is_empty())
        else {
            continue;
        };
        let rate = l.rate.unwrap_or(0.0);
        if rate <= 0.0 {
            continue;
        }
        let peak = crate::ramp::peak(&l.stages);
        let at = |n: u32| {
            let t = crate::ramp::reaches(&l.stages, n).unwrap_or_default();
            // To the microsecond, so that round budgets print round.
            let budget =
                Duration::from_micros((f64::from(n) / rate * 1e6).min(1e15).round() as u64);
            format!(
                "{n} at {:.2}s ({} a session)",
                t.as_secs_f64(),
                crate::duration::HumanDuration(budget)
            )
        };
        let half = (peak / 2).max(1);
        out.push(format!(
            "constant load: its pool ramps from 0 while {rate:.1} sessions/s arrive from T0; \
             it holds {}, {} and {} (connections open over the rate): until it is big enough, \
             slots wait for a connection and count late, and past an agent's queue are dropped \
             (the run then ends incomplete): there the generator, not the target, is the limit",
            at(1),
            at(half),
            at(peak)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(text: &str) -> Scenario {
        Scenario::from_yaml(&format!("name: d\ntarget: http://h:1\n{text}")).unwrap()
    }

    /// 40 sessions/s that think 2 s each need 80 slots; capacity 20 lets a quarter start.
    #[test]
    fn think_times_beyond_the_capacity_are_undeliverable_by_a_share() {
        let s = scenario(
            "phases: [ { name: steady, duration: 4s, arrival_rate: 40 } ]\nsession:\n  - http: { path: / }\n  - think_time: 2s\n",
        );
        let b = &budgets(&s, 1, 20)[0];
        assert!(b.undeliverable());
        assert_eq!(b.deliverable, 0.25);
        let text = b.text("session slots (--capacity)");
        assert!(
            text.starts_with(
                "phase steady: 40.0 sessions/s per agent that think at least 2s each need 80"
            ),
            "{text}"
        );
        assert!(
            text.contains("at most 25.0% of its sessions can start"),
            "{text}"
        );
        // Two agents share the rate: 40 slots needed each, still twice their 20.
        assert_eq!(budgets(&s, 2, 20)[0].deliverable, 0.5);
        assert!(!budgets(&s, 4, 20)[0].undeliverable());
    }

    /// `-R 400 -c 2`: two connections carry 400 sessions/s only if each takes under 5 ms.
    #[test]
    fn a_small_pool_has_a_latency_budget() {
        let s = scenario(
            "load: { model: constant, rate: 400, connections: 2, duration: 10s }\nsession: [ { http: { path: / } } ]\n",
        );
        let b = &budgets(&s, 1, 10_000)[0];
        assert!(!b.undeliverable());
        assert_eq!(b.budget, Duration::from_millis(5));
        assert!(
            b.text("connections").contains("at most 5ms on average"),
            "{}",
            b.text("connections")
        );
        // A closed load has no rate to keep: nothing to budget.
        let closed = scenario(
            "load: { model: closed, connections: 2, duration: 1s }\nsession: [ { http: { path: / } } ]\n",
        );
        assert!(budgets(&closed, 1, 10).is_empty());
    }

    /// A constant-rate pool that ramps 0 → 100 over 10 s at 1,000/s: 1 connection at T0
    /// leaves a session 1 ms, 50 at 4.9 s leave 50 ms, the peak at 9.9 s leaves 100 ms; a
    /// pool that does not ramp, and a closed ramp, have no such warning.
    #[test]
    fn a_ramping_pool_is_the_limit_until_it_is_big_enough() {
        let s = scenario(
            "load: { model: constant, rate: 1000, stages: [ { connections: 100, duration: 10s }, { connections: 100, duration: 5s } ] }\nsession: [ { http: { path: / } } ]\n",
        );
        let w = ramp_warnings(&s);
        assert_eq!(w.len(), 1, "{w:?}");
        for part in [
            "1000.0 sessions/s arrive from T0",
            "1 at 0.00s (1ms a session), 50 at 4.90s (50ms a session) and 100 at 9.90s (100ms a session)",
            "the generator, not the target, is the limit",
        ] {
            assert!(w[0].contains(part), "{part}: {}", w[0]);
        }
        for quiet in [
            "load: { model: constant, rate: 1000, connections: 100, duration: 10s }\nsession: [ { http: { path: / } } ]\n",
            "load: { model: closed, stages: [ { connections: 100, duration: 10s } ] }\nsession: [ { http: { path: / } } ]\n",
        ] {
            assert!(ramp_warnings(&scenario(quiet)).is_empty(), "{quiet}");
        }
    }
}
