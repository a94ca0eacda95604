//! The report store: one JSON file per finished run under `<data-dir>/runs/`, written
//! atomically (temporary file, fsync, rename) before the run is declared finished.

use std::io::Write;
use std::path::{Path, PathBuf};

use stampede_core::report::Report;

/// Report store failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("report {0} is not valid JSON: {1}")]
    Corrupt(String, serde_json::Error),
    #[error("run id `{0}` is not valid")]
    BadId(String),
}

#[derive(Debug, Clone)]
pub struct ReportStore {
    dir: PathBuf,
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl ReportStore {
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let dir = data_dir.join("runs");
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::Write {
            path: dir.clone(),
            source,
        })?;
        Ok(Self { dir })
    }

    pub fn path(&self, run_id: &str) -> Result<PathBuf, StoreError> {
        if !valid_id(run_id) {
            return Err(StoreError::BadId(run_id.to_string()));
        }
        Ok(self.dir.join(format!("{run_id}.json")))
    }

    /// Writes the report durably; returns the JSON text.
    pub fn save(&self, report: &Report) -> Result<String, StoreError> {
        let path = self.path(&report.run_id)?;
        let json = serde_json::to_string_pretty(report)
            .map_err(|e| StoreError::Corrupt(report.run_id.clone(), e))?;
        let tmp = path.with_extension("json.tmp");
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(json.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            if let Ok(d) = std::fs::File::open(&self.dir) {
                let _ = d.sync_all();
            }
            Ok(())
        };
        write().map_err(|source| StoreError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(json)
    }

    /// The stored JSON of a run, if any.
    pub fn load(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        let path = self.path(run_id)?;
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StoreError::Read { path, source }),
        }
    }

    /// Every stored report (for listing runs after a restart). Unreadable files are skipped
    /// with a warning.
    pub fn list(&self) -> Vec<Report> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out: Vec<Report> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("json"))
            .filter_map(|p| {
                let text = std::fs::read_to_string(&p).ok()?;
                match serde_json::from_str(&text) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        tracing::warn!(path = %p.display(), error = %e, "skipping unreadable report");
                        None
                    }
                }
            })
            .collect();
        out.sort_by_key(|r: &Report| r.started_at_unix_ms);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_load_list() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReportStore::open(dir.path()).unwrap();
        let report = Report {
            run_id: "r-1".into(),
            ..Report::default()
        };
        store.save(&report).unwrap();
        let text = store.load("r-1").unwrap().unwrap();
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back, report);
        assert_eq!(store.list().len(), 1);
        assert!(store.load("missing").unwrap().is_none());
        assert!(matches!(
            store.load("../etc/passwd"),
            Err(StoreError::BadId(_))
        ));
    }
}
