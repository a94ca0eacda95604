//! A LoadTest's gRPC schema: the `.proto` files in the ConfigMap its `grpc.config_map` names,
//! read through the API from the LoadTest's namespace and compiled, and every gRPC call of the
//! scenario encoded against them (`stampede_grpc_schema`, shared with the CLI) before the run
//! is submitted, as the CLI does with the files beside a scenario. The agents get frames and
//! programs, never a descriptor.
//!
//! A file, named in `proto_files` or imported, is the key that is its base name, as
//! `kubectl create configmap NAME --from-file=DIR` names them. A missing ConfigMap or key may
//! be on its way, so it is [`DataFailure::Missing`] (the reconciler waits, bounded); a file
//! that does not compile or a message that does not fit its method fails the LoadTest at once.
//! A LoadTest cannot use `reflection: true`: the controller does not contact targets.

use std::collections::BTreeMap;

use stampede_core::data::{ObjectError, ObjectKind};
use stampede_core::Scenario;
use stampede_grpc_schema::{compile_sources, encode_all, key_of, Sources};

use super::data::DataFailure;

/// How to put the schema where a LoadTest can read it (for the messages).
const HOW: &str =
    "put the .proto files in a ConfigMap (kubectl create configmap NAME --from-file=DIR)";

/// Encodes the scenario's gRPC calls against the `.proto` files of its `grpc.config_map`.
/// `Ok(None)` when there is nothing to encode; `Ok(Some(summary))` says what was read (the
/// object and how many files and calls).
pub(crate) async fn resolve(
    client: &kube::Client,
    namespace: &str,
    scenario: &mut Scenario,
) -> Result<Option<String>, DataFailure> {
    if stampede_core::grpc::first_unresolved(scenario).is_none() {
        return Ok(None);
    }
    // Validation has refused gRPC steps without a schema already.
    let Some(options) = scenario.grpc.clone() else {
        return Ok(None);
    };
    if options.reflection {
        return Err(DataFailure::Invalid(format!(
            "grpc.reflection: a LoadTest cannot ask the target for its schema (the controller \
             does not contact targets): {HOW} in namespace {namespace} and give grpc: \
             {{ proto_files: [...], config_map: NAME }}"
        )));
    }
    let Some(name) = options.config_map.as_deref() else {
        return Err(DataFailure::Invalid(format!(
            "grpc.config_map: a LoadTest has no files beside it to read proto_files from: \
             {HOW} in namespace {namespace} and name it: grpc: {{ config_map: NAME }}"
        )));
    };
    let what = format!("configmap {namespace}/{name}");
    let object = super::data::fetch(
        client,
        namespace,
        ObjectKind::ConfigMap,
        name,
        "grpc.config_map",
    )
    .await?
    .ok_or_else(|| {
        DataFailure::Missing(format!(
            "grpc.config_map: {}",
            ObjectError::NotFound {
                kind: ObjectKind::ConfigMap,
                namespace: namespace.to_string(),
                name: name.to_string(),
            }
        ))
    })?;
    if let Some(f) = options
        .proto_files
        .iter()
        .find(|f| !object.contains_key(key_of(f)))
    {
        return Err(DataFailure::Missing(format!(
            "grpc.proto_files: `{f}`: {}",
            ObjectError::NoKey {
                kind: ObjectKind::ConfigMap,
                namespace: namespace.to_string(),
                name: name.to_string(),
                key: key_of(f).to_string(),
                keys: object.keys().cloned().collect(),
            }
        )));
    }
    let mut files = BTreeMap::new();
    for (key, bytes) in object {
        if !key.ends_with(".proto") {
            continue;
        }
        let text = String::from_utf8(bytes).map_err(|_| {
            DataFailure::Invalid(format!(
                "grpc.config_map: {what} key {key} is not UTF-8 text"
            ))
        })?;
        files.insert(key, text);
    }
    let pool = compile_sources(&options, Sources::new(files))
        .map_err(|e| DataFailure::Invalid(format!("{e} (read from {what})")))?;
    let calls = encode_all(scenario, &pool).map_err(|e| DataFailure::Invalid(e.to_string()))?;
    Ok(Some(format!(
        "grpc: {} encoded against {} from {what}",
        count(calls, "call"),
        count(options.proto_files.len(), "file")
    )))
}

/// `1 call`, `3 calls`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
