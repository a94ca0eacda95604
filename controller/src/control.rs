//! The CLI-facing service: submit, watch, report, list, abort.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use stampede_core::scenario::{NotReady, ReadyScenario};
use stampede_core::Scenario;
use stampede_proto::v1;
use tokio::sync::broadcast::error::RecvError;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::{lock, run, ControllerError, Inner};

pub(crate) struct ControlSvc {
    pub inner: Arc<Inner>,
}

type EventStream = Pin<Box<dyn Stream<Item = Result<v1::RunEvent, Status>> + Send>>;

fn report_event(json: String) -> Result<v1::RunEvent, Status> {
    Ok(v1::RunEvent {
        event: Some(v1::run_event::Event::ReportJson(json)),
    })
}

#[tonic::async_trait]
impl v1::control_service_server::ControlService for ControlSvc {
    async fn submit_run(
        &self,
        req: Request<v1::SubmitRunRequest>,
    ) -> Result<Response<v1::SubmitRunResponse>, Status> {
        let req = req.into_inner();
        let scenario = parse_off_the_workers(req.scenario).await?;
        let wait = (req.agent_wait_ms > 0).then(|| Duration::from_millis(req.agent_wait_ms));
        let handle = submit(self.inner.clone(), scenario, req.agents, wait)?;
        Ok(Response::new(v1::SubmitRunResponse {
            run_id: handle.run_id.clone(),
        }))
    }

    type WatchRunStream = EventStream;

    async fn watch_run(
        &self,
        req: Request<v1::WatchRunRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let run_id = req.into_inner().run_id;
        let handle = lock(&self.inner.runs).get(&run_id).cloned();
        let Some(h) = handle else {
            // A finished run from before a restart: just the report.
            let json = self
                .inner
                .store
                .load(&run_id)
                .map_err(ControllerError::from)?;
            let json = json.ok_or_else(|| ControllerError::RunNotFound(run_id.clone()))?;
            return Ok(Response::new(Box::pin(tokio_stream::once(report_event(
                json,
            )))));
        };
        // Subscribe before looking at the state, so nothing falls between the two.
        let mut rx = h.events.subscribe();
        let shutdown = self.inner.shutdown.clone();
        let stream = async_stream(move |tx| async move {
            let crate::run::Status { state, message } = h.state();
            let first = v1::RunEvent {
                event: Some(v1::run_event::Event::State(v1::RunState {
                    run_id: h.run_id.clone(),
                    state: state.as_str().to_string(),
                    message,
                })),
            };
            if tx.send(Ok(first)).await.is_err() {
                return;
            }
            if let Some(json) = h.report_json() {
                let _ = tx.send(report_event(json.clone())).await;
                return;
            }
            loop {
                // A controller shutting down leaves a checkpointed run to the next one: the
                // watcher reconnects there.
                let ev = tokio::select! {
                    ev = rx.recv() => ev,
                    _ = shutdown.cancelled() => return,
                };
                match ev {
                    Ok(ev) => {
                        let last = matches!(ev.event, Some(v1::run_event::Event::ReportJson(_)));
                        if tx.send(Ok(ev)).await.is_err() || last {
                            return;
                        }
                    }
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return,
                }
            }
        });
        Ok(Response::new(stream))
    }

    async fn get_report(
        &self,
        req: Request<v1::GetReportRequest>,
    ) -> Result<Response<v1::GetReportResponse>, Status> {
        let run_id = req.into_inner().run_id;
        let handle = lock(&self.inner.runs).get(&run_id).cloned();
        if let Some(h) = handle {
            return match h.report_json() {
                Some(json) => Ok(Response::new(v1::GetReportResponse {
                    report_json: json.clone(),
                })),
                None => Err(ControllerError::NotFinished(run_id).into()),
            };
        }
        match self
            .inner
            .store
            .load(&run_id)
            .map_err(ControllerError::from)?
        {
            Some(json) => Ok(Response::new(v1::GetReportResponse { report_json: json })),
            None => Err(ControllerError::RunNotFound(run_id).into()),
        }
    }

    async fn list_runs(
        &self,
        _: Request<v1::ListRunsRequest>,
    ) -> Result<Response<v1::ListRunsResponse>, Status> {
        let mut runs: Vec<v1::RunSummary> = lock(&self.inner.runs)
            .values()
            .map(|h| h.summary())
            .collect();
        for r in self.inner.store.list() {
            if !runs.iter().any(|x| x.run_id == r.run_id) {
                runs.push(v1::RunSummary {
                    run_id: r.run_id.clone(),
                    scenario: r.scenario.clone(),
                    state: match r.outcome {
                        stampede_core::report::RunOutcome::Succeeded => "done".into(),
                        stampede_core::report::RunOutcome::Failed => "failed".into(),
                        stampede_core::report::RunOutcome::Aborted => "aborted".into(),
                        stampede_core::report::RunOutcome::Incomplete => "incomplete".into(),
                    },
                    submitted_at_unix_ms: r.started_at_unix_ms,
                    message: r.message.clone().unwrap_or_default(),
                    agents: r.agents.len() as u32,
                });
            }
        }
        runs.sort_by_key(|r| r.submitted_at_unix_ms);
        Ok(Response::new(v1::ListRunsResponse { runs }))
    }

    async fn list_agents(
        &self,
        _: Request<v1::ListAgentsRequest>,
    ) -> Result<Response<v1::ListAgentsResponse>, Status> {
        let mut agents: Vec<v1::AgentInfo> = lock(&self.inner.agents)
            .values()
            .map(|a| a.info.clone())
            .collect();
        if let Some(pods) = self.inner.kube.get().and_then(|k| k.pods.as_ref()) {
            crate::k8s::pods::annotate(&mut agents, pods);
        }
        agents.sort_by(|a, b| a.agent_id.cmp(&b.agent_id));
        Ok(Response::new(v1::ListAgentsResponse { agents }))
    }

    async fn abort_run(
        &self,
        req: Request<v1::AbortRunRequest>,
    ) -> Result<Response<v1::AbortRunResponse>, Status> {
        let req = req.into_inner();
        let handle = lock(&self.inner.runs).get(&req.run_id).cloned();
        let h = handle.ok_or_else(|| ControllerError::RunNotFound(req.run_id.clone()))?;
        let reason = if req.reason.is_empty() {
            "aborted by user".to_string()
        } else {
            req.reason
        };
        h.request_abort(reason);
        Ok(Response::new(v1::AbortRunResponse {}))
    }
}

/// Starts a run: the one path for gRPC `SubmitRun` and `LoadTest` resources, each of which
/// reads what it can (a LoadTest's ConfigMaps, Secrets and `.proto` files) before it makes the
/// [`ReadyScenario`]. `agents` 0 means the scenario's `agents` (default 1). In a cluster, the
/// agent Deployment is scaled up first when fewer agents are attached than the run needs.
pub(crate) fn submit(
    inner: Arc<Inner>,
    scenario: ReadyScenario,
    agents: u32,
    wait: Option<Duration>,
) -> Result<Arc<run::RunHandle>, ControllerError> {
    let agents = if agents > 0 {
        agents
    } else {
        scenario.agents.unwrap_or(1)
    };
    let max = inner
        .cfg
        .max_agents
        .min(stampede_core::scenario::MAX_AGENTS);
    if agents > max {
        return Err(ControllerError::Invalid(format!(
            "agents: {agents} asked for; this controller allows at most {max} per run (--max-agents)"
        )));
    }
    // A literal address the agents would refuse is refused here, before any agent is picked.
    stampede_core::target_policy::check_literals(&scenario)
        .map_err(|e| ControllerError::Invalid(e.to_string()))?;
    let wait = wait.unwrap_or(inner.cfg.agent_wait);
    stampede_core::scenario::check_agent_wait(wait, inner.cfg.max_agent_wait)?;
    let _admission = lock(&inner.admission);
    let pending = lock(&inner.runs)
        .values()
        .filter(|h| h.state().state == run::RunState::Pending)
        .count();
    if pending >= inner.cfg.max_pending_runs {
        return Err(ControllerError::Exhausted(format!(
            "{pending} runs are already waiting for agents, at most {} (--max-pending-runs): \
             submit again once one has started",
            inner.cfg.max_pending_runs
        )));
    }
    let handle = run::start(inner.clone(), scenario, agents, wait);
    if let Some(scaler) = inner.kube.get().and_then(|k| k.scaler.clone()) {
        tokio::spawn(scaler.hold(agents, handle.clone()));
    }
    Ok(handle)
}

/// Submissions parsed at once; the others wait their turn (each may hold a 32 MiB text and
/// what it parses into).
static PARSES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Parses and validates a submitted scenario, and checks it needs nothing read or encoded, on
/// the blocking pool, at most [`PARSES`] at a time: a large or hostile text (bounded by
/// `MAX_SCENARIO_BYTES` before any parsing) then never holds the async workers, which also
/// carry every run's lease renewals and agent streams.
async fn parse_off_the_workers(text: String) -> Result<ReadyScenario, Status> {
    let _turn = PARSES
        .acquire()
        .await
        .map_err(|_| Status::unavailable("the controller is shutting down"))?;
    tokio::task::spawn_blocking(move || {
        Scenario::from_yaml(&text)
            .map_err(NotReady::from)
            .and_then(ReadyScenario::new)
    })
    .await
    .map_err(|e| Status::internal(format!("parsing the scenario failed: {e}")))?
    .map_err(|e| ControllerError::from(e).into())
}

/// A stream fed by a spawned task through a channel.
fn async_stream<F, Fut>(f: F) -> EventStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<v1::RunEvent, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(f(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(yaml_name: &str) -> ReadyScenario {
        let s = Scenario::from_yaml(&format!(
            "name: {yaml_name}\ntarget: http://127.0.0.1:1\nphases:\n  - {{ duration: 1s, arrival_rate: 1 }}\n\
             session:\n  - http: {{ path: / }}\n"
        ))
        .unwrap();
        ReadyScenario::new(s).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn submissions_past_the_pending_cap_are_refused_until_a_place_frees() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = crate::ControllerConfig::new(dir.path());
        cfg.max_pending_runs = 2;
        let c = crate::Controller::new(cfg).unwrap();
        let wait = Some(Duration::from_secs(30));
        let a = submit(c.inner.clone(), ready("a"), 1, wait).unwrap();
        let _b = submit(c.inner.clone(), ready("b"), 1, wait).unwrap();
        let Err(e) = submit(c.inner.clone(), ready("c"), 1, wait) else {
            panic!("a third pending run is refused")
        };
        let status = Status::from(e);
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(
            status.message().contains("at most 2 (--max-pending-runs)"),
            "{}",
            status.message()
        );
        // A run that waited its whole bound ends failed, with the reason, and frees its place.
        let t = tokio::time::Instant::now();
        a.finished().await;
        assert_eq!(t.elapsed(), Duration::from_secs(30));
        let s = a.state();
        assert_eq!(s.state, run::RunState::Failed);
        assert!(s.message.contains("after 30 s"), "{}", s.message);
        assert!(
            submit(c.inner.clone(), ready("d"), 1, wait).is_ok(),
            "a place is free again"
        );
    }

    #[tokio::test]
    async fn an_agent_wait_past_the_controller_maximum_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = crate::ControllerConfig::new(dir.path());
        cfg.max_agent_wait = Duration::from_secs(600);
        let c = crate::Controller::new(cfg).unwrap();
        let Err(e) = submit(
            c.inner.clone(),
            ready("a"),
            1,
            Some(Duration::from_secs(601)),
        ) else {
            panic!("a wait over the maximum is refused")
        };
        let status = Status::from(e);
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains("agent_wait: 601s"),
            "{}",
            status.message()
        );
        assert!(status.message().contains("600s"), "{}", status.message());
        // A wait of u64::MAX milliseconds, too, is a clear refusal rather than an overflow.
        let huge = Some(Duration::from_millis(u64::MAX));
        assert!(submit(c.inner.clone(), ready("b"), 1, huge).is_err());
        assert!(lock(&c.inner.runs).is_empty());
    }
}
