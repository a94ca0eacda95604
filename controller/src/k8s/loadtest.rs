//! Reconciles `LoadTest` resources: a new LoadTest submits a run through the same path as the
//! gRPC `SubmitRun`; its status (server-side apply, field manager `stampede-controller`) follows
//! the run: `Pending` (waiting for agents) → `Running` → `Succeeded` | `Failed` | `Incomplete`, with the merged
//! summary, the lost agents and the report's location. Events are published on the resource.
//!
//! A LoadTest in a terminal phase is never run again, also not after a controller restart: the
//! phase lives in the resource. A LoadTest that was `Pending`/`Running` when the controller
//! restarted gets its result from the report store if the run finished, else it is marked
//! `Failed` (the run's agents stopped when their lease lapsed), never rerun.
//!
//! Finalizer: `stampede.dev/abort-run` is added only while the run is active and removed as soon
//! as it is terminal. It exists so that deleting a running LoadTest aborts its run (nobody would
//! watch the load otherwise). It is not kept on finished LoadTests, so they stay deletable when
//! the controller is uninstalled (the CRD and LoadTests outlive `helm uninstall`).
//!
//! Data from a ConfigMap or Secret (`data.NAME.config_map` / `.secret`) is read before the run
//! is submitted (`super::data`), once: later changes to the object do not reach a submitted
//! run. A missing object or key may be on its way (`kubectl apply -f dir/` creates the LoadTest
//! and its ConfigMap in any order), so the LoadTest stays `Pending` for up to [`DATA_WAIT`],
//! looked at again with a growing delay, its message and its `DataReady` condition (reason
//! `Missing`) naming the field and the object, and a `DataMissing` event published; then it
//! fails with the same words. Nothing retries in silence, and nothing waits forever. An object
//! that cannot work (a bad format, a read the Role forbids, a `file:`) fails at once. The
//! `.proto` files of `grpc.config_map` are read the same way, and the gRPC calls encoded
//! against them (`super::protos`); a file that does not compile fails at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use stampede_core::report::Report;
use stampede_core::scenario::ReadyScenario;

use super::crd::{
    lost_agents, terminal_phase, LoadTest, LoadTestCondition, LoadTestPhase, LoadTestStatus,
    LoadTestSummary,
};
use super::data::DataFailure;
use super::{KubeError, KubeSettings};
use crate::run::RunHandle;
use crate::{lock, Inner};

/// Field manager of the status patches.
pub const MANAGER: &str = "stampede-controller";
/// Held while a LoadTest's run is active: deleting the LoadTest aborts the run.
pub const FINALIZER: &str = "stampede.dev/abort-run";
/// How long a LoadTest waits for a missing ConfigMap, Secret or key its data names (from its
/// first attempt, `status.startTime`) before it fails.
pub const DATA_WAIT: Duration = Duration::from_secs(60);
/// The condition about data read from ConfigMaps and Secrets.
pub const DATA_READY: &str = "DataReady";

struct Ctx {
    inner: Arc<Inner>,
    client: kube::Client,
    /// The namespace watched (a LoadTest's own, should its metadata lack one).
    namespace: String,
    api: Api<LoadTest>,
    recorder: Recorder,
    /// Run ids that have a follower task.
    following: Mutex<BTreeSet<String>>,
    /// The run submitted for each LoadTest (by uid). Adding the finalizer triggers another
    /// reconcile, which may see a cached object from before the status with the run id was
    /// written; without this it would submit the same LoadTest twice.
    submitted: Mutex<BTreeMap<String, String>>,
}

pub(crate) async fn run(inner: Arc<Inner>, client: kube::Client, settings: KubeSettings) {
    let api: Api<LoadTest> = Api::namespaced(client.clone(), &settings.namespace);
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: MANAGER.into(),
            instance: settings.pod_name.clone(),
        },
    );
    let ctx = Arc::new(Ctx {
        inner,
        client,
        namespace: settings.namespace.clone(),
        api: api.clone(),
        recorder,
        following: Mutex::default(),
        submitted: Mutex::default(),
    });
    Controller::new(api, watcher::Config::default())
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::warn!(error = %e, "loadtest reconcile");
            }
        })
        .await;
}

fn error_policy(_: Arc<LoadTest>, e: &KubeError, _: Arc<Ctx>) -> Action {
    tracing::warn!(error = %e, "loadtest: retrying");
    Action::requeue(Duration::from_secs(5))
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Time since an RFC 3339 `time` (zero if it does not parse or is in the future).
fn since(time: &str) -> Duration {
    time.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .and_then(|t| {
            Duration::try_from(k8s_openapi::jiff::Timestamp::now().duration_since(t)).ok()
        })
        .unwrap_or(Duration::ZERO)
}

/// When to look for missing data again, `waited` into the wait: half the time waited so far,
/// from 2 s up to 15 s.
fn data_backoff(waited: Duration) -> Duration {
    (waited / 2).clamp(Duration::from_secs(2), Duration::from_secs(15))
}

/// Sets the `DataReady` condition, keeping its transition time when its status is unchanged.
fn set_data_condition(
    st: &mut LoadTestStatus,
    prev: &LoadTestStatus,
    ready: bool,
    reason: &str,
    message: &str,
) {
    let status = if ready { "True" } else { "False" };
    let before = prev.conditions.iter().find(|c| c.type_ == DATA_READY);
    let last_transition_time = match before {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now(),
    };
    st.conditions.retain(|c| c.type_ != DATA_READY);
    st.conditions.push(LoadTestCondition {
        type_: DATA_READY.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time,
    });
}

async fn reconcile(lt: Arc<LoadTest>, ctx: Arc<Ctx>) -> Result<Action, KubeError> {
    let name = lt.name_any();
    let status = lt.status.clone().unwrap_or_default();
    let has_fin = lt.finalizers().iter().any(|f| f == FINALIZER);
    let uid = lt.uid().unwrap_or_default();
    let known = lock(&ctx.submitted).get(&uid).cloned();

    if lt.metadata.deletion_timestamp.is_some() {
        if let Some(run_id) = status.run_id.as_ref().or(known.as_ref()) {
            let h = lock(&ctx.inner.runs).get(run_id).cloned();
            if let Some(h) = h {
                h.request_abort(format!("LoadTest {name} was deleted"));
            }
        }
        if has_fin {
            set_finalizer(&ctx, &lt, false).await?;
        }
        lock(&ctx.submitted).remove(&uid);
        return Ok(Action::await_change());
    }

    match status.phase {
        Some(p) if p.is_terminal() => {
            if has_fin {
                set_finalizer(&ctx, &lt, false).await?;
            }
            lock(&ctx.submitted).remove(&uid);
            Ok(Action::await_change())
        }
        // Submitted, but this cached copy predates the status that says so: look again soon.
        _ if status.run_id.is_none() && known.is_some() => {
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        Some(_) if status.run_id.is_some() => {
            let run_id = status.run_id.clone().unwrap_or_default();
            let h = lock(&ctx.inner.runs).get(&run_id).cloned();
            if let Some(h) = h {
                follow(&ctx, lt.clone(), h, status);
                return Ok(Action::await_change());
            }
            // Not in memory: the controller restarted. Never rerun; take the stored result.
            let stored = ctx
                .inner
                .store
                .load(&run_id)
                .ok()
                .flatten()
                .and_then(|json| serde_json::from_str::<Report>(&json).ok());
            let mut st = status;
            match stored {
                Some(report) => finish_status(&ctx, &mut st, &run_id, Some(&report), None),
                None => {
                    st.phase = Some(LoadTestPhase::Failed);
                    st.end_time = Some(now());
                    st.message = Some(format!(
                        "the controller restarted while run {run_id} was active; its data is lost and the LoadTest is not rerun"
                    ));
                }
            }
            apply_status(&ctx, &lt, &st).await?;
            publish_final(&ctx, &lt, &st).await;
            if has_fin {
                set_finalizer(&ctx, &lt, false).await?;
            }
            Ok(Action::await_change())
        }
        _ => start(&ctx, lt).await,
    }
}

/// What a LoadTest's scenario names in ConfigMaps and Secrets, read into it: its data rows,
/// then the `.proto` files its gRPC calls are encoded against. `Ok(Some(summary))` says what
/// was read.
async fn read_inputs(
    client: &kube::Client,
    namespace: &str,
    scenario: &mut stampede_core::Scenario,
) -> Result<Option<String>, DataFailure> {
    let data = super::data::resolve(client, namespace, scenario).await?;
    let grpc = super::protos::resolve(client, namespace, scenario).await?;
    let read: Vec<String> = data.into_iter().chain(grpc).collect();
    Ok((!read.is_empty()).then(|| read.join("; ")))
}

/// A LoadTest's scenario once its ConfigMaps and Secrets are read: refused, with the event
/// reason and the message of its status, when it still needs what only the CLI does (a file
/// beside the scenario) or does not validate.
fn ready(scenario: stampede_core::Scenario) -> Result<ReadyScenario, (&'static str, String)> {
    ReadyScenario::new(scenario).map_err(|e| ("Invalid", format!("scenario: {e}")))
}

/// A new LoadTest: read its data from ConfigMaps and Secrets, validate, hold the finalizer,
/// submit the run, record Pending.
async fn start(ctx: &Arc<Ctx>, lt: Arc<LoadTest>) -> Result<Action, KubeError> {
    let name = lt.name_any();
    let mut scenario = lt.spec.0.clone();
    let prev = lt.status.clone().unwrap_or_default();
    let mut st = LoadTestStatus {
        observed_generation: lt.metadata.generation,
        // Kept from an earlier attempt (waiting for data): the wait is counted from it.
        start_time: prev.start_time.clone().or_else(|| Some(now())),
        ..Default::default()
    };
    let namespace = lt.namespace().unwrap_or_else(|| ctx.namespace.clone());
    // Checked before the data is read too, so a broken scenario is not told only after
    // waiting for its ConfigMap; its columns are checked once the rows are in.
    let read = match scenario.validate() {
        Ok(()) => Ok(read_inputs(&ctx.client, &namespace, &mut scenario).await),
        Err(e) => Err(("Invalid", format!("scenario: {e}"))),
    };
    let submitted = match read {
        Err(refused) => Err(refused),
        Ok(Err(DataFailure::Missing(why))) => {
            let waited = st.start_time.as_deref().map_or(Duration::ZERO, since);
            if waited < DATA_WAIT {
                st.phase = Some(LoadTestPhase::Pending);
                st.message = Some(format!(
                    "{why}; waiting up to {} s for it",
                    DATA_WAIT.as_secs()
                ));
                set_data_condition(&mut st, &prev, false, "Missing", &why);
                // Written (and announced) only when it changes, so the write does not wake
                // this reconcile again and again.
                if lt.status.as_ref() != Some(&st) {
                    apply_status(ctx, &lt, &st).await?;
                    event(ctx, &lt, EventType::Warning, "DataMissing", &why).await;
                }
                return Ok(Action::requeue(data_backoff(waited)));
            }
            set_data_condition(&mut st, &prev, false, "Missing", &why);
            Err((
                "DataMissing",
                format!("{why} (waited {} s for it)", DATA_WAIT.as_secs()),
            ))
        }
        Ok(Err(DataFailure::Invalid(why))) => {
            set_data_condition(&mut st, &prev, false, "Invalid", &why);
            Err(("Invalid", why))
        }
        Ok(Ok(read)) => {
            if let Some(summary) = read {
                set_data_condition(&mut st, &prev, true, "Read", &summary);
            }
            ready(scenario).and_then(|s| {
                crate::control::submit(ctx.inner.clone(), s, 0, None)
                    .map_err(|e| ("Invalid", e.to_string()))
            })
        }
    };
    let h = match submitted {
        Ok(h) => h,
        Err((reason, message)) => {
            st.phase = Some(LoadTestPhase::Failed);
            st.end_time = Some(now());
            st.message = Some(message.clone());
            apply_status(ctx, &lt, &st).await?;
            event(ctx, &lt, EventType::Warning, reason, &message).await;
            return Ok(Action::await_change());
        }
    };
    lock(&ctx.submitted).insert(lt.uid().unwrap_or_default(), h.run_id.clone());
    // The finalizer goes on first, so a delete from now on aborts the run.
    if let Err(e) = set_finalizer(ctx, &lt, true).await {
        h.request_abort(format!("LoadTest {name}: {e}"));
        lock(&ctx.submitted).remove(&lt.uid().unwrap_or_default());
        return Err(e);
    }
    st.phase = Some(LoadTestPhase::Pending);
    st.run_id = Some(h.run_id.clone());
    st.message = Some(format!("waiting for {} agents", h.agents_wanted));
    if let Err(e) = apply_status(ctx, &lt, &st).await {
        h.request_abort(format!("LoadTest {name}: recording the status failed: {e}"));
        lock(&ctx.submitted).remove(&lt.uid().unwrap_or_default());
        return Err(e);
    }
    event(
        ctx,
        &lt,
        EventType::Normal,
        "Submitted",
        &format!("run {} submitted for {} agents", h.run_id, h.agents_wanted),
    )
    .await;
    follow(ctx, lt, h, st);
    Ok(Action::await_change())
}

/// Follows a run (once per run id) and mirrors it into the LoadTest's status.
fn follow(ctx: &Arc<Ctx>, lt: Arc<LoadTest>, h: Arc<RunHandle>, mut st: LoadTestStatus) {
    if !lock(&ctx.following).insert(h.run_id.clone()) {
        return;
    }
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let run_id = h.run_id.clone();
        if st.phase != Some(LoadTestPhase::Running) {
            let mut rx = h.events.subscribe();
            loop {
                let state = h.state().state;
                if state.is_loading() || state.is_terminal() {
                    break;
                }
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) = rx.recv().await {
                    break;
                }
            }
            if !h.state().state.is_terminal() {
                st.phase = Some(LoadTestPhase::Running);
                st.message = Some(format!("running on {} agents", h.agents_wanted));
                if let Err(e) = apply_status(&ctx, &lt, &st).await {
                    tracing::warn!(loadtest = %lt.name_any(), error = %e, "status");
                }
                event(
                    &ctx,
                    &lt,
                    EventType::Normal,
                    "Started",
                    &format!("run {run_id} started"),
                )
                .await;
            }
        }
        h.finished().await;
        let report = h
            .report_json()
            .and_then(|json| serde_json::from_str::<Report>(json).ok());
        let message = h.state().message;
        finish_status(&ctx, &mut st, &run_id, report.as_ref(), Some(message));
        // Retry the final status a few times: it is the one that matters.
        for attempt in 0..5u32 {
            match apply_status(&ctx, &lt, &st).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(loadtest = %lt.name_any(), attempt, error = %e, "final status");
                    tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
                }
            }
        }
        publish_final(&ctx, &lt, &st).await;
        if let Err(e) = set_finalizer(&ctx, &lt, false).await {
            tracing::warn!(loadtest = %lt.name_any(), error = %e, "removing the finalizer");
        }
        lock(&ctx.following).remove(&run_id);
    });
}

fn finish_status(
    ctx: &Ctx,
    st: &mut LoadTestStatus,
    run_id: &str,
    report: Option<&Report>,
    message: Option<String>,
) {
    st.end_time = Some(now());
    match report {
        Some(r) => {
            st.phase = Some(terminal_phase(r));
            st.summary = Some(LoadTestSummary::of(r));
            st.lost_agents = lost_agents(r);
            let failed: Vec<&str> = r
                .thresholds
                .iter()
                .filter(|t| !t.passed)
                .map(|t| t.expr.as_str())
                .collect();
            let mut msg = r
                .message
                .clone()
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| format!("{:?}", r.outcome).to_lowercase());
            if !failed.is_empty() {
                msg = format!("{msg}; thresholds failed: {}", failed.join(", "));
            }
            if !st.lost_agents.is_empty() {
                let lost: Vec<String> = st
                    .lost_agents
                    .iter()
                    .map(|l| format!("{} ({:.1}% of the load)", l.agent, l.lost_share * 100.0))
                    .collect();
                msg = format!("{msg}; lost agents: {}", lost.join(", "));
            }
            st.message = Some(msg);
            st.report = ctx
                .inner
                .store
                .path(run_id)
                .ok()
                .map(|p| format!("{} (stampede report {run_id})", p.display()));
        }
        None => {
            st.phase = Some(LoadTestPhase::Failed);
            st.message = message.or_else(|| Some("the run ended without a report".into()));
        }
    }
}

async fn publish_final(ctx: &Ctx, lt: &LoadTest, st: &LoadTestStatus) {
    for l in &st.lost_agents {
        let note = format!(
            "agent {} was lost; {:.1}% of the load was not delivered",
            l.agent,
            l.lost_share * 100.0
        );
        event(ctx, lt, EventType::Warning, "AgentLost", &note).await;
    }
    let (ty, reason) = match st.phase {
        Some(LoadTestPhase::Succeeded) => (EventType::Normal, "Succeeded"),
        Some(LoadTestPhase::Incomplete) => (EventType::Warning, "Incomplete"),
        _ => (EventType::Warning, "Failed"),
    };
    let note = st.message.clone().unwrap_or_default();
    event(ctx, lt, ty, reason, &note).await;
}

async fn apply_status(ctx: &Ctx, lt: &LoadTest, st: &LoadTestStatus) -> Result<(), KubeError> {
    let patch = serde_json::json!({
        "apiVersion": "stampede.dev/v1alpha1",
        "kind": "LoadTest",
        "status": st,
    });
    ctx.api
        .patch_status(
            &lt.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(())
}

/// Adds or removes our finalizer (a JSON merge patch of the whole list, guarded by the
/// resourceVersion we read, so a concurrent change to the list is not overwritten).
async fn set_finalizer(ctx: &Ctx, lt: &LoadTest, present: bool) -> Result<(), KubeError> {
    let current = ctx.api.get(&lt.name_any()).await?;
    let mut list: Vec<String> = current.finalizers().to_vec();
    let has = list.iter().any(|f| f == FINALIZER);
    if has == present {
        return Ok(());
    }
    if present {
        list.push(FINALIZER.into());
    } else {
        list.retain(|f| f != FINALIZER);
    }
    let patch = serde_json::json!({
        "metadata": { "finalizers": list, "resourceVersion": current.resource_version() }
    });
    ctx.api
        .patch(
            &lt.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

async fn event(ctx: &Ctx, lt: &LoadTest, type_: EventType, reason: &str, note: &str) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Run".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &lt.object_ref(&())).await {
        tracing::warn!(loadtest = %lt.name_any(), error = %e, "publishing an event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A LoadTest whose scenario names a file is refused: no file is read in the cluster, and
    /// the run would otherwise send its requests without the body.
    #[test]
    fn a_loadtest_naming_a_file_is_refused_with_the_field() {
        let spec = |session: &str, extra: &str| {
            let yaml = format!(
                "name: lt\ntarget: http://web:80\nphases: [ {{ duration: 1s, arrival_rate: 1 }} ]\nsession:\n{session}{extra}"
            );
            serde_norway::from_str::<crate::k8s::crd::LoadTestSpec>(&yaml)
                .unwrap()
                .0
        };
        let (reason, message) = ready(spec(
            "  - http: { path: / }\n  - http: { path: /a }\n  - http: { method: POST, path: /o, body_file: o.json }\n",
            "",
        ))
        .unwrap_err();
        assert_eq!(reason, "Invalid");
        assert_eq!(
            message,
            "scenario: session[2].http.body_file: a file path cannot be read by the controller; \
             submit with the CLI, which inlines it"
        );
        let (_, message) = ready(spec(
            "  - http: { path: / }\n",
            "tls: { ca_file: ca.pem }\n",
        ))
        .unwrap_err();
        assert!(
            message.starts_with("scenario: tls.ca_file: a file path cannot be read"),
            "{message}"
        );
        ready(spec("  - http: { path: / }\n", "")).unwrap();
    }

    #[test]
    fn missing_data_is_looked_for_again_sooner_then_later() {
        assert_eq!(data_backoff(Duration::ZERO), Duration::from_secs(2));
        assert_eq!(
            data_backoff(Duration::from_secs(10)),
            Duration::from_secs(5)
        );
        assert_eq!(
            data_backoff(Duration::from_secs(59)),
            Duration::from_secs(15)
        );
        // Enough looks within the wait that an object created late is still found.
        let mut t = Duration::ZERO;
        let mut looks = 0;
        while t < DATA_WAIT {
            t += data_backoff(t);
            looks += 1;
        }
        assert!((5..=15).contains(&looks), "{looks}");
    }

    #[test]
    fn the_data_condition_keeps_its_transition_time_while_unchanged() {
        assert!(since(&now()) < Duration::from_secs(5));
        assert!(since("2001-01-01T00:00:00Z") > DATA_WAIT);
        assert_eq!(since("not a time"), Duration::ZERO);
        let mut prev = LoadTestStatus::default();
        set_data_condition(&mut prev, &LoadTestStatus::default(), false, "Missing", "m");
        let mut old = prev.clone();
        old.conditions[0].last_transition_time = "2001-01-01T00:00:00Z".into();
        let mut st = LoadTestStatus::default();
        set_data_condition(&mut st, &old, false, "Missing", "m2");
        assert_eq!(st.conditions.len(), 1);
        assert_eq!(
            st.conditions[0].last_transition_time,
            "2001-01-01T00:00:00Z"
        );
        assert_eq!(st.conditions[0].message, "m2");
        let mut st = LoadTestStatus::default();
        set_data_condition(&mut st, &old, true, "Read", "data.users: 2 rows");
        assert_ne!(
            st.conditions[0].last_transition_time,
            "2001-01-01T00:00:00Z"
        );
        assert_eq!(st.conditions[0].status, "True");
    }
}
