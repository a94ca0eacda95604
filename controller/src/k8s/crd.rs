//! The `LoadTest` custom resource (`stampede.dev/v1alpha1`). The spec is the scenario, exactly as
//! in a scenario file; the status is what the controller reports back. The CRD YAML in the chart
//! (`helm/stampede/crds/`) is generated from these types ([`crd_yaml`]) and a test fails on drift.

use std::collections::BTreeMap;

use kube::CustomResource;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use stampede_core::report::{Report, RunOutcome};
use stampede_core::Scenario;

/// A Stampede load test: the spec is a scenario (the same fields as a scenario file).
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "stampede.dev",
    version = "v1alpha1",
    kind = "LoadTest",
    plural = "loadtests",
    singular = "loadtest",
    shortname = "lt",
    category = "stampede",
    namespaced,
    status = "LoadTestStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"RPS","type":"number","jsonPath":".status.summary.throughputRps"}"#,
    printcolumn = r#"{"name":"p99 ms","type":"number","jsonPath":".status.summary.p99Ms"}"#,
    printcolumn = r#"{"name":"Run","type":"string","jsonPath":".status.runId","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(transparent)]
pub struct LoadTestSpec(pub Scenario);

/// Where a LoadTest is in its life. Terminal phases (`Succeeded`, `Failed`, `Incomplete`) are
/// final: the controller never runs such a LoadTest again, also not after a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LoadTestPhase {
    /// Submitted, or waiting for its data or for agents.
    Pending,
    /// The run is under way; `status.runId` names it.
    Running,
    /// The run completed and every threshold passed.
    Succeeded,
    /// The scenario was refused, the run failed, or a threshold was breached;
    /// `status.message` says which.
    Failed,
    /// The run ended without failing but delivered less than planned (an agent was lost
    /// within `tolerate`, or stopped early).
    Incomplete,
}

impl LoadTestPhase {
    /// Whether the reconciler is done with this LoadTest for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Incomplete)
    }
}

/// What the controller reports about a LoadTest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadTestStatus {
    /// Absent until the reconciler first sees the LoadTest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<LoadTestPhase>,
    /// The controller's run id (`stampede report RUN_ID` fetches the full report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// RFC 3339 time the run was submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// RFC 3339 time the run finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// The merged summary of the finished run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<LoadTestSummary>,
    /// Agents lost during the run, with the share of the load they did not deliver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_agents: Vec<LostAgent>,
    /// Why the phase is what it is, in one line (a refusal, a failure, a breached threshold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Where the full report is: the controller's report store and the command to fetch it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
    /// The generation of the spec the phase refers to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions in the usual Kubernetes form. `DataReady`, when the scenario reads data
    /// from a ConfigMap or Secret: `True` once read (row counts, never values), `False` with
    /// the reason while an object or key is missing (reason `Missing`: the LoadTest stays
    /// `Pending` for up to 60 s, then fails) or when it cannot be used (reason `Invalid`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<LoadTestCondition>,
}

/// One condition of a LoadTest (`kubectl wait --for=condition=DataReady`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadTestCondition {
    /// The condition's name, e.g. `DataReady`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// One word, CamelCase.
    pub reason: String,
    /// What a person needs to act on the condition.
    pub message: String,
    /// RFC 3339 time the status last changed.
    pub last_transition_time: String,
}

/// The merged result of a run, in the units people read (milliseconds, requests/s).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadTestSummary {
    /// Completed requests per second over the measured phases.
    pub throughput_rps: f64,
    /// Requests that completed without error.
    pub completed: u64,
    /// Requests that ended in an error of any kind (see `errors`).
    pub failed: u64,
    /// `failed` over all requests, 0..1.
    pub error_rate: f64,
    /// Errors by kind: `connect_refused`, `connect_timeout`, `timeout`, `reset`, `tls`,
    /// `protocol`, `status_503` and the rest of `stampede_core::stats::error_kind`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, u64>,
    /// Median response time (from the intended send), in ms.
    pub p50_ms: f64,
    /// 99th percentile of the response time, in ms.
    pub p99_ms: f64,
    /// 99.9th percentile of the response time, in ms.
    pub p999_ms: f64,
    /// Longest response time, in ms.
    pub max_ms: f64,
    /// Number of agents that took part.
    pub agents: u32,
    /// Each threshold of the scenario and how the run measured against it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<ThresholdVerdict>,
}

/// One threshold judged against the finished run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThresholdVerdict {
    /// The threshold as the scenario wrote it (`p99 < 250ms`).
    pub expr: String,
    /// `false` fails the LoadTest.
    pub passed: bool,
    /// The value the run measured, with its unit.
    pub measured: String,
}

/// An agent whose stream or lease was lost before the run ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LostAgent {
    /// The agent's id, as `stampede agents` lists it.
    pub agent: String,
    /// Share of the whole run's planned requests this agent did not deliver (0..1).
    pub lost_share: f64,
}

fn ms(us: u64) -> f64 {
    (us as f64 / 1000.0 * 1000.0).round() / 1000.0
}

impl LoadTestSummary {
    /// The status summary of a finished run's report, rounded to microseconds.
    pub fn of(r: &Report) -> Self {
        let rt = &r.latency.response_time;
        Self {
            throughput_rps: (r.totals.throughput_rps * 100.0).round() / 100.0,
            completed: r.totals.completed,
            failed: r.totals.failed,
            error_rate: r.totals.error_rate,
            errors: r.totals.errors.clone(),
            p50_ms: ms(rt.p50_us),
            p99_ms: ms(rt.p99_us),
            p999_ms: ms(rt.p999_us),
            max_ms: ms(rt.max_us),
            agents: r.agents.len() as u32,
            thresholds: r
                .thresholds
                .iter()
                .map(|t| ThresholdVerdict {
                    expr: t.expr.clone(),
                    passed: t.passed,
                    measured: t.measured_text.clone(),
                })
                .collect(),
        }
    }
}

/// The phase a finished run's report maps to: succeeded only if the run succeeded and every
/// threshold passed (the same rule as the CLI's exit code).
pub fn terminal_phase(r: &Report) -> LoadTestPhase {
    if r.outcome == RunOutcome::Succeeded && r.thresholds.iter().all(|t| t.passed) {
        LoadTestPhase::Succeeded
    } else if r.outcome == RunOutcome::Incomplete {
        LoadTestPhase::Incomplete
    } else {
        LoadTestPhase::Failed
    }
}

/// The agents a finished run lost, with the share each left undelivered.
pub fn lost_agents(r: &Report) -> Vec<LostAgent> {
    r.agents
        .iter()
        .filter(|a| a.lost)
        .map(|a| LostAgent {
            agent: a.id.clone(),
            lost_share: a.lost_share,
        })
        .collect()
}

const HEADER: &str = "\
# The LoadTest custom resource: `kubectl apply -f` a scenario, read the outcome from its status.
# Installed from crds/, so Helm installs it once and never upgrades or deletes it: `helm uninstall` keeps it (and
# every LoadTest). Remove it by hand with `kubectl delete crd loadtests.stampede.dev` when Stampede is gone.
# GENERATED from the Rust types (controller/src/k8s/crd.rs) by `stampede crd`; do not edit by hand.
# The drift test (cargo test -p stampede-controller crd) fails when this file differs; STAMPEDE_BLESS=1 rewrites it.
";

/// The CRD as a JSON value, with what the derive cannot express added: the CEL rule (exactly
/// one of `phases` / `load`), the standard labels, and the spec's description.
pub fn crd_value() -> serde_json::Value {
    let mut v = serde_json::to_value(LoadTest::crd()).expect("crd serializes");
    v["metadata"]["labels"] = serde_json::json!({
        "app.kubernetes.io/name": "stampede",
        "app.kubernetes.io/part-of": "stampede",
    });
    let root = &mut v["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    root["description"] =
        "A Stampede load test. The spec is a scenario, in the same form as a scenario file.".into();
    let spec = &mut root["properties"]["spec"];
    any_value_for_alternatives(spec);
    any_value_for_untyped(spec);
    spec["description"] = "The scenario (the same fields as a scenario YAML file; its JSON Schema is \
        schema/scenario.schema.json in the Stampede repository). The controller validates the whole body \
        before it starts a run."
        .into();
    spec["x-kubernetes-validations"] = serde_json::json!([{
        "rule": "has(self.workloads) ? !has(self.phases) && !has(self.load) : has(self.phases) != has(self.load)",
        "message": "give either phases (arrival phases) or load (closed or constant model), not both; with workloads, neither (each workload has its own)",
    }]);
    v
}

/// Structural schemas cannot say "a string or an object" (`on_agent_loss: fail` or
/// `{tolerate: 0.3}`, `think_time: 50ms` or `{min, max}`): such nodes accept any value here, and
/// the controller validates them with the scenario's own rules before it starts a run.
fn any_value_for_alternatives(v: &mut serde_json::Value) {
    let Some(obj) = v.as_object_mut() else {
        if let Some(arr) = v.as_array_mut() {
            arr.iter_mut().for_each(any_value_for_alternatives);
        }
        return;
    };
    if obj.contains_key("anyOf") || obj.contains_key("oneOf") {
        let mut out = serde_json::Map::new();
        if let Some(d) = obj.get("description") {
            out.insert("description".into(), d.clone());
        }
        if let Some(n) = obj.get("nullable") {
            out.insert("nullable".into(), n.clone());
        }
        out.insert("x-kubernetes-preserve-unknown-fields".into(), true.into());
        *obj = out;
        return;
    }
    obj.values_mut().for_each(any_value_for_alternatives);
}

/// A structural schema gives every field a type. A field that holds any JSON value (a gRPC
/// step's `message`) has none in the derived schema, so it is marked to keep whatever it
/// holds; the controller validates it with the scenario's own rules. Walks schema nodes only:
/// properties, items and additional properties.
fn any_value_for_untyped(schema: &mut serde_json::Value) {
    if schema == &serde_json::Value::Bool(true) {
        *schema = serde_json::json!({ "x-kubernetes-preserve-unknown-fields": true });
        return;
    }
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let typed = [
        "type",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
    ]
    .iter()
    .any(|k| obj.contains_key(*k));
    if !typed {
        obj.insert("x-kubernetes-preserve-unknown-fields".into(), true.into());
    }
    if let Some(props) = obj.get_mut("properties").and_then(|p| p.as_object_mut()) {
        props.values_mut().for_each(any_value_for_untyped);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v) = obj.get_mut(key).filter(|v| v.is_object()) {
            any_value_for_untyped(v);
        }
    }
}

/// The CRD YAML, as committed in the chart.
pub fn crd_yaml() -> String {
    let body = serde_norway::to_string(&crd_value()).expect("crd renders as yaml");
    format!("{HEADER}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHART_CRD: &str = "../helm/stampede/crds/loadtests.stampede.dev.yaml";

    /// The chart's CRD is generated from these types; `STAMPEDE_BLESS=1` rewrites it.
    #[test]
    fn crd_in_chart_matches_the_rust_types() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(CHART_CRD);
        let want = crd_yaml();
        if std::env::var_os("STAMPEDE_BLESS").is_some() {
            std::fs::write(&path, &want).expect("writing the chart's CRD");
        }
        let have = std::fs::read_to_string(&path).expect("reading the chart's CRD");
        assert!(
            have == want,
            "{} is out of date with controller/src/k8s/crd.rs: run \
             `STAMPEDE_BLESS=1 cargo test -p stampede-controller crd` (or `stampede crd > {CHART_CRD}`)",
            path.display()
        );
    }

    #[test]
    fn crd_is_structural_and_keeps_the_cel_rule() {
        let v = crd_value();
        let spec = &v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(
            spec["x-kubernetes-validations"][0]["rule"],
            "has(self.workloads) ? !has(self.phases) && !has(self.load) : has(self.phases) != has(self.load)"
        );
        // Every field has a type, or keeps any value (the API server refuses the CRD otherwise:
        // a gRPC step's `message` once had neither).
        fn untyped(path: &str, s: &serde_json::Value, out: &mut Vec<String>) {
            let Some(o) = s.as_object() else {
                out.push(format!("{path}: not a schema object"));
                return;
            };
            if ![
                "type",
                "x-kubernetes-preserve-unknown-fields",
                "x-kubernetes-int-or-string",
            ]
            .iter()
            .any(|k| o.contains_key(*k))
            {
                out.push(path.to_string());
            }
            if let Some(p) = o.get("properties").and_then(|p| p.as_object()) {
                for (k, v) in p {
                    untyped(&format!("{path}.{k}"), v, out);
                }
            }
            for key in ["items", "additionalProperties"] {
                if let Some(v) = o.get(key).filter(|v| v.is_object()) {
                    untyped(&format!("{path}.{key}"), v, out);
                }
            }
        }
        let mut missing = Vec::new();
        untyped("spec", spec, &mut missing);
        assert!(missing.is_empty(), "fields without a type: {missing:?}");
        // Structural schemas forbid these anywhere.
        let text = serde_json::to_string(&v).unwrap();
        for bad in [
            "\"$ref\"",
            "\"$defs\"",
            "\"definitions\"",
            "\"anyOf\"",
            "\"oneOf\"",
            "\"patternProperties\"",
            "\"dependencies\"",
            "\"additionalItems\"",
        ] {
            assert!(!text.contains(bad), "generated CRD contains {bad}");
        }
        assert_eq!(
            v["spec"]["versions"][0]["subresources"]["status"],
            serde_json::json!({})
        );
        let cols = v["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap();
        let names: Vec<&str> = cols.iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["Phase", "RPS", "p99 ms", "Run", "Age"]);
    }

    #[test]
    fn a_loadtest_reads_a_scenario_file_as_its_spec() {
        let yaml = r#"
apiVersion: stampede.dev/v1alpha1
kind: LoadTest
metadata: {name: t, namespace: default}
spec:
  name: t
  target: http://web:8080
  agents: 3
  phases: [{duration: 10s, arrival_rate: 50}]
  session: [{http: {path: /}}]
"#;
        let lt: LoadTest = serde_norway::from_str(yaml).unwrap();
        assert_eq!(lt.spec.0.agents, Some(3));
        lt.spec.0.validate().unwrap();
        assert!(lt.status.is_none());
    }

    #[test]
    fn a_loadtest_names_its_data_in_a_configmap_or_secret() {
        let yaml = r#"
apiVersion: stampede.dev/v1alpha1
kind: LoadTest
metadata: {name: t, namespace: default}
spec:
  name: t
  target: http://web:8080
  data:
    users: {config_map: {name: users, key: users.csv}, order: shuffle}
    tokens: {secret: {name: tokens, key: tokens.jsonl}}
  phases: [{duration: 10s, arrival_rate: 5}]
  session: [{http: {path: '/u/${users.id}?t=${tokens.token}'}}]
"#;
        let lt: LoadTest = serde_norway::from_str(yaml).unwrap();
        let data = &lt.spec.0.data;
        assert_eq!(data["users"].config_map.as_ref().unwrap().key, "users.csv");
        assert_eq!(data["tokens"].secret.as_ref().unwrap().name, "tokens");
        // The API server checks the reference's shape: both fields, strings, required.
        let v = crd_value();
        let source = &v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["data"]["additionalProperties"]["properties"];
        for field in ["config_map", "secret"] {
            assert_eq!(source[field]["properties"]["key"]["type"], "string");
            assert_eq!(
                source[field]["required"],
                serde_json::json!(["key", "name"])
            );
        }
        // The status's condition is the usual shape (`type`, not `type_`).
        let st = LoadTestStatus {
            conditions: vec![LoadTestCondition {
                type_: "DataReady".into(),
                status: "False".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let json = serde_json::to_value(&st).unwrap();
        assert_eq!(json["conditions"][0]["type"], "DataReady");
        assert!(json["conditions"][0].get("lastTransitionTime").is_some());
    }
}
