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

    /// The key of the first source whose braces nest deeper than `limit`.
    pub fn deeper_than(&self, limit: usize) -> Option<&str> {
        self.files
            .iter()
            .find(|(_, text)| brace_depth(text) > limit)
            .map(|(k, _)| k.as_str())
    }
}

/// The key a file named `name` (a path in `proto_files` or an `import`) is read from: its base
/// name.
pub fn key_of(name: &str) -> &str {
    name.rsplit(['/', '\\']).next().unwrap_or(name)
}

/// Deepest `{` nesting a source may have. protobuf nests messages at most 31 deep; option
/// values in text format add a few more. protox bounds the nesting of declarations, but the
/// text-format value of an option whose type holds itself is parsed recursively, so a
/// ConfigMap written to nest it a million deep would overflow the controller's stack.
pub const MAX_BRACE_DEPTH: usize = 64;

/// The deepest `{` nesting of a `.proto` source, braces in comments and string literals
/// not counted.
pub fn brace_depth(source: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut star = false;
                for c in chars.by_ref() {
                    if star && c == '/' {
                        break;
                    }
                    star = c == '*';
                }
            }
            '"' | '\'' => {
                while let Some(x) = chars.next() {
                    match x {
                        '\\' => {
                            chars.next();
                        }
                        '\n' => break,
                        x if x == c => break,
                        _ => {}
                    }
                }
            }
            '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
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
