//! What a run watches of its target beside its load: the scrapes of its Prometheus sources
//! (`observe:`) and the pods behind its Service. Started together, handed to the checkpoint
//! together (so a re-adopted run keeps what the previous controller saw) and ended into the
//! report's one `target_resources`.

use stampede_core::observe::TargetResources;
use tokio::time::Instant;

use super::checkpoint::TargetSeen;
use super::Driver;
use crate::k8s::target_pods::PodObserver;
use crate::observe::Observer;

/// A run's watchers of its target.
pub(super) struct TargetWatch {
    scrapes: Observer,
    pods: Option<PodObserver>,
}

impl Driver {
    /// Starts watching the target from `t0` (and `t0` on the wall clock, in ms), after what a
    /// previous controller saw of it (`before`, from a re-adopted run's checkpoint).
    pub(super) async fn watch_target(&self, t0: (Instant, u64), before: TargetSeen) -> TargetWatch {
        let scrapes = Observer::start(
            &self.scenario.observe,
            t0.0,
            self.inner.cfg.interval,
            before.scrapes,
        );
        let pods = self.observe_pods(t0, before.pods).await;
        TargetWatch { scrapes, pods }
    }
}

impl TargetWatch {
    /// What was seen since the last call, for the checkpoint.
    pub(super) fn take_fresh(&self) -> TargetSeen {
        TargetSeen {
            scrapes: self.scrapes.take_fresh(),
            pods: self
                .pods
                .as_ref()
                .map(PodObserver::take_fresh)
                .unwrap_or_default(),
        }
    }

    /// The cores the target uses now, for the live view: the `observe:` sources' when there
    /// are any (as in the report), else its pods'.
    pub(super) fn latest_cores(&self) -> Option<f64> {
        self.scrapes
            .latest_cores()
            .or_else(|| self.pods.as_ref()?.latest_cores())
    }

    /// Stops watching after one last look and returns what was seen, the pods' rows beside
    /// the scrapes (`None` with neither).
    pub(super) async fn finish(self) -> Option<TargetResources> {
        let scraped = self.scrapes.finish().await;
        match self.pods {
            Some(pods) => Some(stampede_core::pods::with_pods(
                scraped,
                &pods.finish().await,
            )),
            None => scraped,
        }
    }
}
