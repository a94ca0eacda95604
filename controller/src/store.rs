//! The report store: one JSON file per finished run under `<data-dir>/runs/`, written
//! atomically (temporary file, fsync, rename) before the run is declared finished; and a
//! marker per run in flight under `<data-dir>/inflight/`, so that a controller that restarts
//! ends the runs it lost as `failed` instead of forgetting them.

use std::io::Write;
use std::path::{Path, PathBuf};

use stampede_core::report::Report;

/// Report store failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A report or marker could not be written; the run is then reported as failed.
    #[error("writing {path}: {error}")]
    Write {
        /// The file being written.
        path: PathBuf,
        /// What the file system said.
        error: std::io::Error,
    },
    /// A stored report or marker could not be read.
    #[error("reading {path}: {error}")]
    Read {
        /// The file being read.
        path: PathBuf,
        /// What the file system said.
        error: std::io::Error,
    },
    /// A stored report does not parse: its run id, and the parser's error.
    #[error("report {0} is not valid JSON: {1}")]
    Corrupt(String, serde_json::Error),
    /// A run id that is empty, longer than 128 bytes, or has a byte other than ASCII letters,
    /// digits, `-` and `_`, so it can never name a path outside the store.
    #[error("run id `{0}` is not valid")]
    BadId(String),
}

/// Finished reports as files in the data directory (`runs/`), one per run, plus markers of
/// runs in flight (`inflight/`) that a restarted controller re-adopts or records as failed.
#[derive(Debug, Clone)]
pub struct ReportStore {
    dir: PathBuf,
    inflight: PathBuf,
}

/// What is known of a run while it is in flight: enough for its failed report after a restart.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct InFlight {
    run_id: String,
    scenario: String,
    submitted_at_unix_ms: u64,
}

/// Temporary file, fsync, rename, fsync of the directory: the file is whole or absent.
fn atomic_write(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let tmp = path.with_extension("json.tmp");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    };
    write().map_err(|error| StoreError::Write {
        path: path.to_path_buf(),
        error,
    })
}

pub(crate) fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl ReportStore {
    /// Opens the store under `data_dir`, creating its `runs/` and `inflight/` directories.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let dir = data_dir.join("runs");
        let inflight = data_dir.join("inflight");
        for d in [&dir, &inflight] {
            std::fs::create_dir_all(d).map_err(|error| StoreError::Write {
                path: d.clone(),
                error,
            })?;
        }
        Ok(Self { dir, inflight })
    }

    /// Records that a run is in flight (removed when its report is stored).
    pub fn mark_in_flight(
        &self,
        run_id: &str,
        scenario: &str,
        submitted_at_unix_ms: u64,
    ) -> Result<(), StoreError> {
        self.path(run_id)?;
        let marker = InFlight {
            run_id: run_id.to_string(),
            scenario: scenario.to_string(),
            submitted_at_unix_ms,
        };
        let json = serde_json::to_string(&marker)
            .map_err(|e| StoreError::Corrupt(run_id.to_string(), e))?;
        let path = self.inflight.join(format!("{run_id}.json"));
        atomic_write(&self.inflight, &path, json.as_bytes())
    }

    /// The run is no longer in flight.
    pub fn clear_in_flight(&self, run_id: &str) {
        if valid_id(run_id) {
            let _ = std::fs::remove_file(self.inflight.join(format!("{run_id}.json")));
        }
    }

    /// After a restart: every run still marked in flight, besides the re-adopted ones in
    /// `adopted`, was lost with the previous process. Each gets a stored `failed` report that
    /// says so (unless its report was stored just before the crash); returns those reports.
    pub fn recover_interrupted(&self, adopted: &[String]) -> Vec<Report> {
        let Ok(entries) = std::fs::read_dir(&self.inflight) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries.filter_map(Result::ok) {
            let path = e.path();
            let marker: Option<InFlight> = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            if marker.as_ref().is_some_and(|m| adopted.contains(&m.run_id)) {
                continue; // still in flight, under this controller
            }
            if let Some(m) = marker.filter(|m| valid_id(&m.run_id)) {
                if matches!(self.load(&m.run_id), Ok(None)) {
                    let report = Report::lost(
                        &m.run_id,
                        &m.scenario,
                        m.submitted_at_unix_ms,
                        "the controller restarted while this run was in flight; the data it had \
                         merged was lost (agents stopped their load when their lease lapsed)",
                    );
                    if self.save(&report).is_err() {
                        continue; // keep the marker: the next start tries again
                    }
                    out.push(report);
                }
            }
            let _ = std::fs::remove_file(&path);
        }
        out
    }

    /// Where the report of `run_id` is, once the id is checked to stay inside the store.
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
        atomic_write(&self.dir, &path, json.as_bytes())?;
        Ok(json)
    }

    /// Retention: keeps the newest `keep` reports and none older than `max_age` (by file
    /// time), and clears temporary files a failed save left behind. Returns how many reports
    /// were removed.
    pub fn prune(&self, keep: usize, max_age: Option<std::time::Duration>) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let now = std::time::SystemTime::now();
        let mut reports: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
        for e in entries.filter_map(Result::ok) {
            let path = e.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let modified = e
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            if name.ends_with(".json.tmp") {
                // Another save may be writing it right now: only stale ones go.
                if now.duration_since(modified).unwrap_or_default().as_secs() > 600 {
                    let _ = std::fs::remove_file(&path);
                }
            } else if name.ends_with(".json") {
                reports.push((modified, path));
            }
        }
        reports.sort_by_key(|r| std::cmp::Reverse(r.0));
        let mut removed = 0;
        for (i, (modified, path)) in reports.iter().enumerate() {
            let too_old =
                max_age.is_some_and(|m| now.duration_since(*modified).unwrap_or_default() > m);
            if (i >= keep || too_old) && std::fs::remove_file(path).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// The stored JSON of a run, if any.
    pub fn load(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        let path = self.path(run_id)?;
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(StoreError::Read { path, error }),
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
    fn runs_in_flight_at_a_restart_end_failed() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReportStore::open(dir.path()).unwrap();
        store
            .mark_in_flight("r-lost", "soak", 1_700_000_000_000)
            .unwrap();
        store.mark_in_flight("r-done", "quick", 1).unwrap();
        store.mark_in_flight("r-cleared", "x", 1).unwrap();
        store.clear_in_flight("r-cleared");
        // r-done's report was stored just before the crash: it is kept as it is.
        let done = Report {
            run_id: "r-done".into(),
            ..Report::default()
        };
        store.save(&done).unwrap();
        // A new process over the same directory.
        let store = ReportStore::open(dir.path()).unwrap();
        let lost = store.recover_interrupted(&[]);
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].run_id, "r-lost");
        let back: Report = serde_json::from_str(&store.load("r-lost").unwrap().unwrap()).unwrap();
        assert_eq!(back.outcome, stampede_core::report::RunOutcome::Failed);
        assert_eq!(back.scenario, "soak");
        assert!(back.message.unwrap().contains("controller restarted"));
        let kept: Report = serde_json::from_str(&store.load("r-done").unwrap().unwrap()).unwrap();
        assert_eq!(kept, done);
        assert!(store.load("r-cleared").unwrap().is_none());
        // A marker is consumed when it is recovered: a second restart records nothing again.
        assert!(store.recover_interrupted(&[]).is_empty());
    }

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

    #[test]
    fn retention_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let store = ReportStore::open(dir.path()).unwrap();
        for i in 0..5 {
            let r = Report {
                run_id: format!("r-{i}"),
                ..Report::default()
            };
            store.save(&r).unwrap();
            let t = std::time::SystemTime::now() - std::time::Duration::from_secs(100 - i);
            std::fs::File::options()
                .write(true)
                .open(store.path(&r.run_id).unwrap())
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        assert_eq!(store.prune(3, None), 2);
        assert!(store.load("r-0").unwrap().is_none() && store.load("r-1").unwrap().is_none());
        assert!(store.load("r-4").unwrap().is_some());
        // Everything is older than 10 s.
        assert_eq!(
            store.prune(100, Some(std::time::Duration::from_secs(10))),
            3
        );
    }
}
