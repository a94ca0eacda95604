//! Data sources kept in a Kubernetes object: `config_map: { name, key }` or
//! `secret: { name, key }` in a `LoadTest`'s scenario. A LoadTest has no CLI in front of it to
//! read a `file:`, so the controller reads the object's key through the API (it lives in the
//! LoadTest's namespace) and hands the bytes here, where they are parsed by the same parser as
//! a file ([`DataSource::load`]) and inlined as `columns` and `rows`; from then on the source is
//! like any other, so validation, the supply check and the per-agent split are unchanged.
//!
//! Pure: fetching is the caller's; this module says which objects a scenario needs
//! ([`objects`]), and turns what was fetched into rows or an error that names the object and
//! never a value ([`DataSource::load_object`]: a Secret's contents must not reach a log, an
//! event or a status).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{DataError, DataSource, SourceError};

/// Largest value accepted from one key of a ConfigMap or Secret. The API server refuses
/// objects over 1 MiB anyway; the bound holds whatever the server is.
pub const MAX_OBJECT_VALUE_BYTES: usize = 1 << 20;

/// One key of a ConfigMap or Secret in the LoadTest's namespace. The key's extension says the
/// format, as a file's does: `.csv` (with a header), `.jsonl` or `.ndjson`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectKey {
    /// The object's name.
    pub name: String,
    /// The key in its `data` (or a ConfigMap's `binaryData`), e.g. `users.csv`.
    pub key: String,
}

/// Which kind of object a source names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    /// A ConfigMap (`config_map:`): its `data` and `binaryData`.
    ConfigMap,
    /// A Secret (`secret:`), whose values are never logged nor reported.
    Secret,
}

impl ObjectKind {
    /// The scenario field that names it.
    pub fn field(self) -> &'static str {
        match self {
            Self::ConfigMap => "config_map",
            Self::Secret => "secret",
        }
    }

    /// The name `kubectl` gives the kind, for messages.
    pub fn noun(self) -> &'static str {
        match self {
            Self::ConfigMap => "configmap",
            Self::Secret => "secret",
        }
    }
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.noun())
    }
}

/// The format of a file or key, from its name's extension; `None` when it has none of
/// `.csv`, `.jsonl`, `.ndjson`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataFormat {
    /// CSV with a header row (`.csv`).
    Csv,
    /// JSON lines, one object per line (`.jsonl`, `.ndjson`).
    JsonLines,
}

impl DataFormat {
    /// The format a file or key name's extension says; `None` for any other extension.
    pub fn of_name(name: &str) -> Option<Self> {
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".csv") {
            Some(Self::Csv)
        } else if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") {
            Some(Self::JsonLines)
        } else {
            None
        }
    }
}

/// An object as fetched: its keys and their bytes (a ConfigMap's `data` and `binaryData`, a
/// Secret's decoded `data`).
pub type ObjectData = BTreeMap<String, Vec<u8>>;

/// Why a source in an object cannot be read. The messages name the object and the key, never
/// a value; [`ObjectError::is_missing`] tells a missing object or key (which may yet be
/// created) from a bad one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// The object does not exist (it may yet be created).
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        /// ConfigMap or Secret.
        kind: ObjectKind,
        /// The namespace it was looked for in.
        namespace: String,
        /// The object's name.
        name: String,
    },
    /// The object exists without the key (which may yet be added).
    #[error("{kind} {namespace}/{name} has no key {key}{}", has(keys))]
    NoKey {
        /// ConfigMap or Secret.
        kind: ObjectKind,
        /// The object's namespace.
        namespace: String,
        /// The object's name.
        name: String,
        /// The key the source names.
        key: String,
        /// The keys it has (names only).
        keys: Vec<String>,
    },
    /// The key's extension names no format.
    #[error(
        "key {key}: the format is taken from the key's extension: name it .csv, .jsonl or .ndjson"
    )]
    Format {
        /// The key the source names.
        key: String,
    },
    /// The key's value is larger than [`MAX_OBJECT_VALUE_BYTES`].
    #[error(
        "{kind} {namespace}/{name} key {key} holds {size} bytes; at most {MAX_OBJECT_VALUE_BYTES}"
    )]
    TooLarge {
        /// ConfigMap or Secret.
        kind: ObjectKind,
        /// The object's namespace.
        namespace: String,
        /// The object's name.
        name: String,
        /// The key the source names.
        key: String,
        /// Its value's size, bytes.
        size: usize,
    },
    /// The key's value does not parse as its format.
    #[error("{kind} {namespace}/{name} key {key}: {error}")]
    Parse {
        /// ConfigMap or Secret.
        kind: ObjectKind,
        /// The object's namespace.
        namespace: String,
        /// The object's name.
        name: String,
        /// The key the source names.
        key: String,
        /// Why it does not parse, with the row or line where that applies.
        error: DataError,
    },
}

fn has(keys: &[String]) -> String {
    if keys.is_empty() {
        " (it has none)".into()
    } else {
        format!(" (it has {})", keys.join(", "))
    }
}

impl ObjectError {
    /// The object or its key does not exist (yet): worth waiting for, unlike a bad format.
    pub fn is_missing(&self) -> bool {
        matches!(self, Self::NotFound { .. } | Self::NoKey { .. })
    }
}

/// Every source of `data` kept in an object: its name, the object's kind and its key.
pub fn objects(
    data: &BTreeMap<String, DataSource>,
) -> impl Iterator<Item = (&str, ObjectKind, &ObjectKey)> {
    data.iter()
        .filter_map(|(name, d)| d.object().map(|(kind, key)| (name.as_str(), kind, key)))
}

impl DataSource {
    /// The object this source is read from, if any.
    pub fn object(&self) -> Option<(ObjectKind, &ObjectKey)> {
        match (&self.config_map, &self.secret) {
            (Some(k), _) => Some((ObjectKind::ConfigMap, k)),
            (None, Some(k)) => Some((ObjectKind::Secret, k)),
            (None, None) => None,
        }
    }

    /// True while the rows are still to be read by someone: from a `file` (the CLI), or from
    /// a ConfigMap or Secret (the LoadTest reconciler). Validation cannot check columns yet.
    pub fn is_unread(&self) -> bool {
        self.file.is_some() || self.object().is_some()
    }

    /// Where the rows come from is said once: `file`, `config_map`, `secret` or inlined
    /// `rows`, one of them.
    pub(super) fn check_origin(&self) -> Result<(), SourceError> {
        let given: Vec<&'static str> = [
            ("file", self.file.is_some()),
            ("config_map", self.config_map.is_some()),
            ("secret", self.secret.is_some()),
            ("rows", !self.rows.is_empty()),
        ]
        .iter()
        .filter_map(|&(f, set)| set.then_some(f))
        .collect();
        match given.len() {
            0 => Err(SourceError::NoOrigin),
            1 => {
                if let Some((kind, k)) = self.object() {
                    if k.name.is_empty() || k.key.is_empty() {
                        return Err(SourceError::NoObjectName {
                            field: kind.field(),
                        });
                    }
                    if DataFormat::of_name(&k.key).is_none() {
                        return Err(SourceError::ObjectFormat {
                            field: kind.field(),
                            key: k.key.clone(),
                        });
                    }
                }
                Ok(())
            }
            _ => Err(SourceError::Origins { given }),
        }
    }

    /// Reads this source's rows from its object as fetched from `namespace` (`None`: there is
    /// no such object), dropping the reference. The key's bytes are parsed by the parser of
    /// data files; errors name the object and the key only.
    pub fn load_object(
        &mut self,
        namespace: &str,
        fetched: Option<&ObjectData>,
    ) -> Result<(), ObjectError> {
        let Some((kind, k)) = self.object() else {
            return Ok(());
        };
        let (name, key) = (k.name.clone(), k.key.clone());
        let format = DataFormat::of_name(&key).ok_or(ObjectError::Format { key: key.clone() })?;
        let ns = || namespace.to_string();
        let Some(object) = fetched else {
            return Err(ObjectError::NotFound {
                kind,
                namespace: ns(),
                name,
            });
        };
        let Some(bytes) = object.get(&key) else {
            return Err(ObjectError::NoKey {
                kind,
                namespace: ns(),
                name,
                key,
                keys: object.keys().cloned().collect(),
            });
        };
        if bytes.len() > MAX_OBJECT_VALUE_BYTES {
            return Err(ObjectError::TooLarge {
                kind,
                namespace: ns(),
                name,
                key,
                size: bytes.len(),
            });
        }
        if let Err(error) = self.load(bytes, format == DataFormat::JsonLines) {
            return Err(ObjectError::Parse {
                kind,
                namespace: ns(),
                name,
                key,
                error,
            });
        }
        self.config_map = None;
        self.secret = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str, key: &str) -> DataSource {
        DataSource {
            config_map: Some(ObjectKey {
                name: name.into(),
                key: key.into(),
            }),
            ..Default::default()
        }
    }

    fn object(pairs: &[(&str, &[u8])]) -> ObjectData {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect()
    }

    #[test]
    fn a_configmap_key_is_parsed_like_a_file_and_the_reference_dropped() {
        let mut d = cm("users", "users.csv");
        assert!(d.is_unread());
        d.check().unwrap();
        let o = object(&[("users.csv", b"id,name\n1,a\n2,\"b, c\"\n"), ("x", b"")]);
        d.load_object("ns", Some(&o)).unwrap();
        assert_eq!(d.columns, ["id", "name"]);
        assert_eq!(d.rows.to_vec(), [vec!["1", "a"], vec!["2", "b, c"]]);
        assert!(!d.is_unread() && d.config_map.is_none());
        d.check().unwrap();
        // The inlined form is what a scenario file's source becomes: no trace of the object.
        let json = serde_json::to_value(&d).unwrap();
        assert!(json.get("config_map").is_none());
    }

    #[test]
    fn a_secret_key_in_json_lines() {
        let mut d = DataSource {
            secret: Some(ObjectKey {
                name: "tokens".into(),
                key: "t.ndjson".into(),
            }),
            ..Default::default()
        };
        let o = object(&[(
            "t.ndjson",
            b"{\"token\":\"s3cr3t\"}\n{\"token\":\"other\"}\n",
        )]);
        d.load_object("ns", Some(&o)).unwrap();
        assert_eq!(d.columns, ["token"]);
        assert_eq!(d.rows.len(), 2);
        assert!(d.secret.is_none());
    }

    #[test]
    fn errors_name_the_object_and_key_never_a_value() {
        let e = cm("users", "users.csv")
            .load_object("default", None)
            .unwrap_err();
        assert_eq!(e.to_string(), "configmap default/users not found");
        assert!(e.is_missing());

        let o = object(&[("other.csv", b"a\n1\n"), ("b", b"")]);
        let e = cm("users", "users.csv")
            .load_object("default", Some(&o))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "configmap default/users has no key users.csv (it has b, other.csv)"
        );
        assert!(e.is_missing());

        let secret = b"id,pass\n1,hunter2\n2\n";
        let mut s = DataSource {
            secret: Some(ObjectKey {
                name: "creds".into(),
                key: "c.csv".into(),
            }),
            ..Default::default()
        };
        let e = s
            .load_object("ns", Some(&object(&[("c.csv", secret)])))
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("secret ns/creds key c.csv: row 2"),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!e.is_missing());
        assert!(s.secret.is_some() && s.rows.is_empty());

        let big = vec![b'a'; MAX_OBJECT_VALUE_BYTES + 1];
        let e = cm("u", "u.csv")
            .load_object("ns", Some(&object(&[("u.csv", &big)])))
            .unwrap_err();
        assert!(e.to_string().contains("at most 1048576"), "{e}");

        let e = cm("u", "u.jsonl")
            .load_object("ns", Some(&object(&[("u.jsonl", b"")])))
            .unwrap_err();
        assert_eq!(e.to_string(), "configmap ns/u key u.jsonl: holds no row");
    }

    #[test]
    fn the_origin_is_given_once_and_the_key_says_the_format() {
        let mut d = cm("users", "users.txt");
        assert_eq!(
            d.check().unwrap_err().to_string(),
            "config_map: key users.txt: the format is taken from the key's extension: name it .csv, .jsonl or .ndjson"
        );
        d.config_map.as_mut().unwrap().key = "users.CSV".into();
        d.check().unwrap();
        d.file = Some("u.csv".into());
        assert_eq!(
            d.check(),
            Err(SourceError::Origins {
                given: vec!["file", "config_map"]
            })
        );
        assert_eq!(
            d.check().unwrap_err().to_string(),
            "give one of file or config_map, not both"
        );
        d.file = None;
        d.secret = d.config_map.clone();
        assert!(d
            .check()
            .unwrap_err()
            .to_string()
            .contains("config_map or secret"));
        assert_eq!(
            cm("", "a.csv").check(),
            Err(SourceError::NoObjectName {
                field: "config_map"
            })
        );
        assert_eq!(
            cm("", "a.csv").check().unwrap_err().to_string(),
            "config_map: needs a name and a key"
        );
        assert_eq!(DataSource::default().check(), Err(SourceError::NoOrigin));
        assert!(DataSource::default()
            .check()
            .unwrap_err()
            .to_string()
            .contains("config_map"));
    }

    #[test]
    fn objects_lists_the_sources_to_fetch() {
        let mut data = BTreeMap::new();
        data.insert("a".to_string(), cm("users", "u.csv"));
        data.insert(
            "b".to_string(),
            DataSource {
                file: Some("f.csv".into()),
                ..Default::default()
            },
        );
        let got: Vec<_> = objects(&data)
            .map(|(n, k, o)| (n, k, o.name.as_str()))
            .collect();
        assert_eq!(got, [("a", ObjectKind::ConfigMap, "users")]);
    }

    #[test]
    fn a_scenario_validates_before_and_after_its_object_is_read() {
        let yaml = r#"
name: s
target: http://127.0.0.1:8080
data:
  users: { config_map: { name: users, key: users.csv }, order: shuffle }
phases: [ { duration: 1s, arrival_rate: 2 } ]
session:
  - http: { path: '/u/${users.id}' }
"#;
        // Unread: the columns are not known yet, as with a file the CLI has not read.
        let mut s = crate::Scenario::from_yaml(yaml).unwrap();
        let o = object(&[("users.csv", b"id\n1\n2\n")]);
        s.data
            .get_mut("users")
            .unwrap()
            .load_object("ns", Some(&o))
            .unwrap();
        s.validate().unwrap();
        s.check_data_supply(1).unwrap();
        let wrong = object(&[("users.csv", b"name\nx\ny\n")]);
        let mut s = crate::Scenario::from_yaml(yaml).unwrap();
        let d = s.data.get_mut("users").unwrap();
        d.load_object("ns", Some(&wrong)).unwrap();
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("data.users has no column `id`"), "{e}");
        let typo = yaml.replace("config_map: { name", "config_map: { nme");
        assert!(crate::Scenario::from_yaml(&typo).is_err());
    }

    #[test]
    fn formats_by_extension() {
        assert_eq!(DataFormat::of_name("a.csv"), Some(DataFormat::Csv));
        assert_eq!(DataFormat::of_name("a.JSONL"), Some(DataFormat::JsonLines));
        assert_eq!(DataFormat::of_name("a.ndjson"), Some(DataFormat::JsonLines));
        assert_eq!(DataFormat::of_name("csv"), None);
    }
}
