//! `.proto` sources held in memory, keyed by base name: a LoadTest's ConfigMap, where
//! `kubectl create configmap NAME --from-file=DIR` makes one key per file, named by the file's
//! base name (a key cannot hold a `/`). protox asks for files by the names that `import`
//! statements and `proto_files` give (`shop/v1/common.proto`); each is the source under its
//! base name (`common.proto`). protobuf's well-known types (`google/protobuf/*.proto`) come
//! with protox when no key holds them.

use std::collections::BTreeMap;

use protox::file::{File, FileResolver, GoogleFileResolver};

/// The files of a schema, by key.
#[derive(Debug, Default)]
pub struct Sources {
    files: BTreeMap<String, String>,
    google: GoogleFileResolver,
}

impl Sources {
    /// `files`: key (a file's base name) → the file's text.
    pub fn new(files: BTreeMap<String, String>) -> Self {
        Self {
            files,
            google: GoogleFileResolver::new(),
        }
    }

    /// Whether a file has the key `key`.
    pub fn contains(&self, key: &str) -> bool {
        self.files.contains_key(key)
    }

    /// The keys, for messages that say what there is.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }
}

/// The key a file named `name` (a path in `proto_files` or an `import`) is read from: its base
/// name.
pub fn key_of(name: &str) -> &str {
    name.rsplit(['/', '\\']).next().unwrap_or(name)
}

impl FileResolver for Sources {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.files.get(key_of(name)) {
            Some(source) => File::from_source(name, source),
            None if name.starts_with("google/protobuf/") => self.google.open_file(name),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}
