//! A LoadTest's data sources kept in ConfigMaps and Secrets (`config_map:` / `secret:`), read
//! through the API from the LoadTest's namespace and inlined into the scenario before it is
//! submitted, so the run sees rows exactly as if the CLI had read a file. The parsing and the
//! messages are `stampede_core::data::object`'s; this module only fetches.
//!
//! Each object is read once per attempt with a plain GET (the Role grants `get` only). The API
//! server bounds a ConfigMap or Secret at 1 MiB, and a key's value is bounded again by
//! `MAX_OBJECT_VALUE_BYTES`. Nothing read here is logged: errors name the object and the key,
//! and a Secret's bytes live only in the submitted scenario, which agents receive as their
//! shares and which is never written to a status, an event or a report.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use stampede_core::data::{self, ObjectData, ObjectKind};
use stampede_core::Scenario;

/// Why the data sources could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DataFailure {
    /// An object or key is missing, or the API could not be reached: it may yet work, so the
    /// reconciler waits (a bounded time) and says why in the status.
    Missing(String),
    /// It cannot work as written (a `file:`, a bad format, a refused read): the LoadTest fails.
    Invalid(String),
}

/// Reads every `config_map:` / `secret:` source of `scenario` from `namespace` into its rows.
/// `Ok(None)` when there is none; `Ok(Some(summary))` says what was read (row counts, object
/// names; no values). A `file:` is refused: there is no file system to read it from.
pub(crate) async fn resolve(
    client: &kube::Client,
    namespace: &str,
    scenario: &mut Scenario,
) -> Result<Option<String>, DataFailure> {
    if let Some(name) = scenario
        .data
        .iter()
        .find_map(|(n, d)| d.file.is_some().then_some(n))
    {
        return Err(DataFailure::Invalid(format!(
            "data.{name}.file: a LoadTest has no files to read: put the rows in a ConfigMap \
             (config_map: {{name, key}}) or a Secret (secret: {{name, key}}) in namespace {namespace}"
        )));
    }
    let wanted: Vec<(String, ObjectKind, String)> = data::object::objects(&scenario.data)
        .map(|(source, kind, k)| (source.to_string(), kind, k.name.clone()))
        .collect();
    if wanted.is_empty() {
        return Ok(None);
    }
    // One GET per object, however many sources read it.
    let mut fetched: BTreeMap<(ObjectKind, String), Option<ObjectData>> = BTreeMap::new();
    for (source, kind, name) in &wanted {
        let id = (*kind, name.clone());
        if fetched.contains_key(&id) {
            continue;
        }
        let field = format!("data.{source}.{}", kind.field());
        let object = fetch(client, namespace, *kind, name, &field).await?;
        fetched.insert(id, object);
    }
    let mut read = Vec::with_capacity(wanted.len());
    for (source, kind, name) in &wanted {
        let field = format!("data.{source}.{}", kind.field());
        let object = fetched.get(&(*kind, name.clone())).and_then(Option::as_ref);
        let Some(d) = scenario.data.get_mut(source) else {
            continue;
        };
        d.load_object(namespace, object).map_err(|e| {
            let why = format!("{field}: {e}");
            if e.is_missing() {
                DataFailure::Missing(why)
            } else {
                DataFailure::Invalid(why)
            }
        })?;
        read.push(format!(
            "data.{source}: {} rows from {kind} {namespace}/{name}",
            d.len()
        ));
    }
    Ok(Some(read.join("; ")))
}

/// The object's keys and bytes, `None` when it does not exist. A read the Role forbids cannot
/// work ([`DataFailure::Invalid`]); any other failure may pass ([`DataFailure::Missing`]).
/// `field` is the scenario field that names the object, for the messages.
pub(super) async fn fetch(
    client: &kube::Client,
    namespace: &str,
    kind: ObjectKind,
    name: &str,
    field: &str,
) -> Result<Option<ObjectData>, DataFailure> {
    get(client, namespace, kind, name).await.map_err(|e| {
        let what = format!("{kind} {namespace}/{name}");
        match e {
            kube::Error::Api(s) if s.is_forbidden() => DataFailure::Invalid(format!(
                "{field}: the controller may not read {what} (forbidden: its Role grants get on \
                 configmaps and secrets in its own namespace only)"
            )),
            other => DataFailure::Missing(format!("{field}: reading {what}: {other}")),
        }
    })
}

/// One GET of the object: its keys and bytes.
async fn get(
    client: &kube::Client,
    namespace: &str,
    kind: ObjectKind,
    name: &str,
) -> Result<Option<ObjectData>, kube::Error> {
    Ok(match kind {
        ObjectKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await?
            .map(|cm| {
                let mut o: ObjectData = cm
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect();
                o.extend(
                    cm.binary_data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0)),
                );
                o
            }),
        ObjectKind::Secret => Api::<Secret>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await?
            .map(|s| {
                s.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect()
            }),
    })
}
