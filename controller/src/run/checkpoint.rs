//! A running run's checkpoint, so that a controller restarted on the same data directory
//! re-adopts the run instead of losing it.
//!
//! Two files per run under `<data-dir>/checkpoints/`:
//! - `<run>.progress`, an append-only log of every Progress the run merged, in the order it
//!   merged them: `[member u32 LE][length u32 LE][the Progress, protobuf]`. Merging is
//!   deterministic, so replaying the log into a fresh accumulator rebuilds the merged state
//!   exactly, histograms included, in the wire's own codec.
//! - `<run>.observe`, an append-only log of what was seen of the target, one JSON line each:
//!   a scrape (`observe:`: the source's index and what it found, nothing when it failed) or a
//!   change to what is seen of the pods behind its Service (a pod's sample, the ready
//!   replicas, why they cannot be read).
//! - `<run>.json`, the header: the format's version, the scenario as agents receive it, the
//!   seed (the plan follows from it), T0, each member's state, how the run is ending once it
//!   is (an abort, a live threshold breach, the agent-loss policy), the newest setup values,
//!   and how many bytes of each log are durable. It is replaced atomically (temporary file,
//!   fsync, rename) after the logs' new bytes are synced, so a crash mid-write leaves the
//!   previous header, which ignores the torn tails. It may hold setup values (tokens): only
//!   its owner may read it.
//!
//! Writes are throttled to one per interval (and one per agent's Done, and one when the run's
//! ending is decided), and an agent's intervals are acknowledged only once they are in the
//! checkpoint: what the controller has not made durable, the agent still holds for replay.
//! The log is bounded ([`MAX_LOG_BYTES`]); a run that outgrows it stops checkpointing (and
//! acknowledges as it merges again), and a restart then ends it `failed`, as a controller
//! without a checkpoint would.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use prost::Message;
use stampede_core::observe::Scrape;
use stampede_core::pods::PodEvent;
use stampede_core::report::ThresholdAbort;
use stampede_proto::v1;

use super::Failure;
use crate::observe::Observation;

/// The header's format; a controller refuses (and fails) checkpoints of another version.
pub(crate) const VERSION: u32 = 1;
/// Most bytes of merged Progress one run's log may hold (a thousand agents' hour of
/// one-second intervals of a small scenario is about this).
pub(crate) const MAX_LOG_BYTES: u64 = 512 << 20;
/// Largest header read back: the scenario's bound and room for a thousand members.
const MAX_HEADER_BYTES: u64 = (stampede_core::scenario::MAX_SCENARIO_BYTES as u64) * 2 + (1 << 20);
/// Largest single Progress record: the wire's own bound on a message.
const MAX_RECORD_BYTES: usize = 64 << 20;
/// Most bytes of scrapes one run's observe log may hold (a line is under 100 bytes: a day
/// of one-second scrapes of several sources).
pub(crate) const MAX_OBSERVE_BYTES: u64 = 64 << 20;

/// Checkpoint failures.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckpointError {
    /// The file could not be written, synced or renamed.
    #[error("writing {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file could not be read.
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The header is not a checkpoint this controller can read.
    #[error("checkpoint {path} is not valid")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The header comes from another version of the format.
    #[error("checkpoint {path} has format version {found}, this controller reads {VERSION}")]
    Version { path: PathBuf, found: u32 },
    /// The log does not hold what its header says.
    #[error("checkpoint log {path}: {why}")]
    Log { path: PathBuf, why: LogError },
    /// The log outgrew [`MAX_LOG_BYTES`], or the observe log [`MAX_OBSERVE_BYTES`].
    #[error("the run's merged data outgrew the checkpoint's {} MiB", MAX_LOG_BYTES >> 20)]
    TooLarge,
}

/// How a checkpoint's log differs from what its header says; every length in it is checked
/// before it is used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LogError {
    /// The header claims a log past [`MAX_LOG_BYTES`].
    #[error("the header claims {claimed} bytes, more than the {} MiB bound", MAX_LOG_BYTES >> 20)]
    TooLong { claimed: u64 },
    /// Fewer bytes on disk than the header says were synced.
    #[error("{have} bytes, the header says {durable} are durable")]
    Short { have: usize, durable: u64 },
    /// The log ends inside a record's 8-byte header.
    #[error("record {record}: a truncated record header")]
    TruncatedHeader { record: usize },
    /// A record of a member the run does not have.
    #[error("record {record}: member {member}, the run has {members}")]
    Member {
        record: usize,
        member: usize,
        members: usize,
    },
    /// A record longer than the bytes left or the record bound.
    #[error("record {record}: {len} bytes, {left} left")]
    Length {
        record: usize,
        len: usize,
        left: usize,
    },
    /// A record that is not a Progress message.
    #[error("record {record}: {error}")]
    Decode {
        record: usize,
        error: prost::DecodeError,
    },
    /// An observe line that is neither a scrape nor a change to the pods.
    #[error("observe line {line}: {error}")]
    Observe {
        line: usize,
        error: serde_json::Error,
    },
}

/// Where a member stood at the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub(crate) enum MemberRecord {
    /// Loading (its stream up or away): it must come back within the restart grace.
    Running,
    /// Its Done arrived: its data is all in the log.
    Done,
    /// The run gave up on it, for this reason.
    Lost { why: String },
}

/// One member in the header.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct MemberEntry {
    pub(crate) agent_id: String,
    #[serde(flatten)]
    pub(crate) state: MemberRecord,
    /// Its clock offset (agent − controller), applied to its samples.
    pub(crate) offset_ns: i64,
}

/// The header: everything but the merged data.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Header {
    pub(crate) version: u32,
    pub(crate) run_id: String,
    pub(crate) scenario_name: String,
    pub(crate) submitted_at_unix_ms: u64,
    /// The scenario as agents receive it (JSON), from which the plan is rebuilt.
    pub(crate) scenario: String,
    pub(crate) agents: u32,
    pub(crate) seed: u64,
    pub(crate) t0_unix_ns: i64,
    pub(crate) started_at_unix_ms: u64,
    pub(crate) members: Vec<MemberEntry>,
    /// Bytes of the log that are durable and merged; anything past them is ignored.
    pub(crate) log_len: u64,
    #[serde(flatten)]
    pub(crate) state: RunRecord,
}

/// What the driver knows beyond the members and the merged data, rewritten with every flush.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RunRecord {
    /// How the run is ending, once it is: a re-adopted run ends the same way, not
    /// `succeeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ending: Option<Failure>,
    /// The live threshold breach that stopped the run (`abort_on_fail`), for its report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) threshold_abort: Option<ThresholdAbort>,
    /// The newest setup values and who refreshes them (`setup:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) setup: Option<SetupRecord>,
    /// Bytes of the observe log that are durable.
    #[serde(default)]
    pub(crate) observe_len: u64,
}

/// The setup values a run sends its agents, as the checkpoint keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SetupRecord {
    pub(crate) values: Vec<String>,
    pub(crate) generation: u64,
    /// The member that refreshes them: the first, or the one that took over.
    pub(crate) agent: usize,
}

/// One line of the observe log.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum ObserveLine {
    /// A change to what is seen of the target's pods.
    Pod { pod: PodEvent },
    /// A scrape of source `source`.
    Scrape {
        source: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scrape: Option<Scrape>,
    },
}

/// What was seen of the target, in order: what a re-adopted run's watchers start from.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TargetSeen {
    /// The scrapes of its Prometheus sources.
    pub(crate) scrapes: Vec<Observation>,
    /// The changes to what is seen of its Service's pods.
    pub(crate) pods: Vec<PodEvent>,
}

/// A checkpoint read back: its header and the Progress it merged, in order, by member index.
pub(crate) struct Saved {
    pub(crate) header: Header,
    pub(crate) progress: Vec<(usize, v1::Progress)>,
    /// What was seen of the target.
    pub(crate) observed: TargetSeen,
}

/// The checkpoints' folder in a data directory.
pub(crate) fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("checkpoints")
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Write {
        path: path.to_path_buf(),
        source,
    }
}

fn paths(data_dir: &Path, run_id: &str) -> [PathBuf; 3] {
    let dir = dir(data_dir);
    [
        dir.join(format!("{run_id}.json")),
        dir.join(format!("{run_id}.progress")),
        dir.join(format!("{run_id}.observe")),
    ]
}

/// One run's checkpoint, as its driver writes it.
pub(crate) struct Writer {
    header: Header,
    header_path: PathBuf,
    log_path: PathBuf,
    log: std::fs::File,
    /// Records merged since the last flush.
    pending: Vec<u8>,
    observe_path: PathBuf,
    observe: std::fs::File,
    /// Scrapes since the last flush.
    observe_pending: Vec<u8>,
}

impl Writer {
    /// Starts the checkpoint of a run whose load has just been started: an empty log and its
    /// header, both durable before this returns.
    pub(crate) fn create(data_dir: &Path, header: Header) -> Result<Self, CheckpointError> {
        let dir = dir(data_dir);
        std::fs::create_dir_all(&dir).map_err(write_err(&dir))?;
        let [header_path, log_path, observe_path] = paths(data_dir, &header.run_id);
        let log = std::fs::File::create(&log_path).map_err(write_err(&log_path))?;
        let observe = std::fs::File::create(&observe_path).map_err(write_err(&observe_path))?;
        let mut w = Self {
            header,
            header_path,
            log_path,
            log,
            pending: Vec::new(),
            observe_path,
            observe,
            observe_pending: Vec::new(),
        };
        w.header.log_len = 0;
        w.header.state.observe_len = 0;
        w.write_header()?;
        Ok(w)
    }

    /// Resumes the checkpoint of a re-adopted run: the log is cut back to its durable length
    /// (dropping a torn tail) and appended to from there.
    pub(crate) fn resume(data_dir: &Path, header: Header) -> Result<Self, CheckpointError> {
        let [header_path, log_path, observe_path] = paths(data_dir, &header.run_id);
        let resume = |path: &Path, len: u64| -> Result<std::fs::File, CheckpointError> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(write_err(path))?;
            f.set_len(len).map_err(write_err(path))?;
            std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)).map_err(write_err(path))?;
            Ok(f)
        };
        let log = resume(&log_path, header.log_len)?;
        let observe = resume(&observe_path, header.state.observe_len)?;
        Ok(Self {
            header,
            header_path,
            log_path,
            log,
            pending: Vec::new(),
            observe_path,
            observe,
            observe_pending: Vec::new(),
        })
    }

    /// Adds a Progress of member `i` the run has just merged (written at the next flush).
    pub(crate) fn record(&mut self, i: usize, progress: &v1::Progress) {
        let len = progress.encoded_len();
        self.pending
            .extend_from_slice(&u32::try_from(i).unwrap_or(u32::MAX).to_le_bytes());
        self.pending
            .extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
        progress.encode(&mut self.pending).unwrap_or_default();
    }

    /// Adds what was seen of the target (written at the next flush).
    pub(crate) fn observed(&mut self, seen: TargetSeen) {
        let scrapes = seen
            .scrapes
            .into_iter()
            .map(|(source, scrape)| ObserveLine::Scrape { source, scrape });
        let pods = seen.pods.into_iter().map(|pod| ObserveLine::Pod { pod });
        for line in scrapes.chain(pods) {
            if serde_json::to_writer(&mut self.observe_pending, &line).is_ok() {
                self.observe_pending.push(b'\n');
            }
        }
    }

    /// Makes everything recorded durable with the members' states and the run's: the logs'
    /// new bytes are written and synced, then the header is replaced.
    pub(crate) fn flush(
        &mut self,
        members: Vec<MemberEntry>,
        state: RunRecord,
    ) -> Result<(), CheckpointError> {
        let grown = self.header.log_len + self.pending.len() as u64;
        let observe_len = self.header.state.observe_len + self.observe_pending.len() as u64;
        if grown > MAX_LOG_BYTES || observe_len > MAX_OBSERVE_BYTES {
            return Err(CheckpointError::TooLarge);
        }
        for (file, path, bytes) in [
            (&mut self.log, &self.log_path, &mut self.pending),
            (
                &mut self.observe,
                &self.observe_path,
                &mut self.observe_pending,
            ),
        ] {
            if !bytes.is_empty() {
                file.write_all(bytes).map_err(write_err(path))?;
                file.sync_data().map_err(write_err(path))?;
                bytes.clear();
            }
        }
        self.header.log_len = grown;
        self.header.members = members;
        self.header.state = RunRecord {
            observe_len,
            ..state
        };
        self.write_header()
    }

    fn write_header(&self) -> Result<(), CheckpointError> {
        let json = serde_json::to_vec(&self.header).map_err(|source| CheckpointError::Corrupt {
            path: self.header_path.clone(),
            source,
        })?;
        let tmp = self.header_path.with_extension("json.tmp");
        let write = || -> std::io::Result<()> {
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut f = options.open(&tmp)?;
            f.write_all(&json)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.header_path)?;
            if let Some(d) = self.header_path.parent() {
                if let Ok(d) = std::fs::File::open(d) {
                    let _ = d.sync_all();
                }
            }
            Ok(())
        };
        write().map_err(write_err(&self.header_path))
    }

    /// The run ended (its report is stored): the checkpoint goes.
    pub(crate) fn remove(self) {
        remove(&[self.header_path, self.log_path, self.observe_path]);
    }
}

fn remove(paths: &[PathBuf]) {
    for p in paths {
        let _ = std::fs::remove_file(p);
    }
}

/// Removes run `run_id`'s checkpoint, if any.
pub(crate) fn discard(data_dir: &Path, run_id: &str) {
    remove(&paths(data_dir, run_id));
}

/// The run ids that have a checkpoint header in `data_dir`.
pub(crate) fn list(data_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir(data_dir)) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_suffix(".json")?;
            crate::store::valid_id(id).then(|| id.to_string())
        })
        .collect();
    ids.sort();
    ids
}

/// Reads run `run_id`'s checkpoint back, trusting no length in it.
pub(crate) fn load(data_dir: &Path, run_id: &str) -> Result<Saved, CheckpointError> {
    let [header_path, log_path, observe_path] = paths(data_dir, run_id);
    let read_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CheckpointError::Read { path, source }
    };
    let mut text = Vec::new();
    std::fs::File::open(&header_path)
        .map_err(read_err(&header_path))?
        .take(MAX_HEADER_BYTES)
        .read_to_end(&mut text)
        .map_err(read_err(&header_path))?;
    let header: Header =
        serde_json::from_slice(&text).map_err(|source| CheckpointError::Corrupt {
            path: header_path.clone(),
            source,
        })?;
    if header.version != VERSION {
        return Err(CheckpointError::Version {
            path: header_path,
            found: header.version,
        });
    }
    let log_err = |why: LogError| CheckpointError::Log {
        path: log_path.clone(),
        why,
    };
    if header.log_len > MAX_LOG_BYTES {
        return Err(log_err(LogError::TooLong {
            claimed: header.log_len,
        }));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&log_path)
        .map_err(read_err(&log_path))?
        .take(header.log_len)
        .read_to_end(&mut bytes)
        .map_err(read_err(&log_path))?;
    if (bytes.len() as u64) < header.log_len {
        return Err(log_err(LogError::Short {
            have: bytes.len(),
            durable: header.log_len,
        }));
    }
    let progress = decode_log(&bytes, header.members.len()).map_err(log_err)?;
    let observed = match header.state.observe_len {
        0 => TargetSeen::default(),
        len => {
            let observe_err = |why: LogError| CheckpointError::Log {
                path: observe_path.clone(),
                why,
            };
            if len > MAX_OBSERVE_BYTES {
                return Err(observe_err(LogError::TooLong { claimed: len }));
            }
            let mut bytes = Vec::new();
            std::fs::File::open(&observe_path)
                .map_err(read_err(&observe_path))?
                .take(len)
                .read_to_end(&mut bytes)
                .map_err(read_err(&observe_path))?;
            if (bytes.len() as u64) < len {
                return Err(observe_err(LogError::Short {
                    have: bytes.len(),
                    durable: len,
                }));
            }
            decode_observe(&bytes).map_err(observe_err)?
        }
    };
    Ok(Saved {
        header,
        progress,
        observed,
    })
}

/// The lines of an observe log, each a scrape or a change to the pods.
fn decode_observe(bytes: &[u8]) -> Result<TargetSeen, LogError> {
    let mut seen = TargetSeen::default();
    let lines = bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    for (line, l) in lines.enumerate() {
        match serde_json::from_slice::<ObserveLine>(l)
            .map_err(|error| LogError::Observe { line, error })?
        {
            ObserveLine::Scrape { source, scrape } => seen.scrapes.push((source, scrape)),
            ObserveLine::Pod { pod } => seen.pods.push(pod),
        }
    }
    Ok(seen)
}

/// The records of a log: each member index below `members`, each length within the bytes
/// left and the record bound, each Progress decodable.
fn decode_log(mut bytes: &[u8], members: usize) -> Result<Vec<(usize, v1::Progress)>, LogError> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let record = out.len();
        let (head, rest) = bytes
            .split_first_chunk::<8>()
            .ok_or(LogError::TruncatedHeader { record })?;
        let i = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if i >= members {
            return Err(LogError::Member {
                record,
                member: i,
                members,
            });
        }
        if len > rest.len() || len > MAX_RECORD_BYTES {
            return Err(LogError::Length {
                record,
                len,
                left: rest.len(),
            });
        }
        let p = v1::Progress::decode(&rest[..len])
            .map_err(|error| LogError::Decode { record, error })?;
        out.push((i, p));
        bytes = &rest[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(run_id: &str) -> Header {
        Header {
            version: VERSION,
            run_id: run_id.into(),
            scenario_name: "s".into(),
            submitted_at_unix_ms: 1,
            scenario: "{}".into(),
            agents: 2,
            seed: 7,
            t0_unix_ns: 5,
            started_at_unix_ms: 6,
            members: vec![
                MemberEntry {
                    agent_id: "a".into(),
                    state: MemberRecord::Running,
                    offset_ns: 3,
                },
                MemberEntry {
                    agent_id: "b".into(),
                    state: MemberRecord::Lost { why: "gone".into() },
                    offset_ns: -3,
                },
            ],
            log_len: 0,
            state: RunRecord::default(),
        }
    }

    fn progress(interval: u64) -> v1::Progress {
        v1::Progress {
            run_id: "run-1".into(),
            interval,
            open_connections: interval,
            ..Default::default()
        }
    }

    /// What was flushed comes back in order; what was recorded after the last flush, or
    /// written past the durable length (a torn tail), does not.
    #[test]
    fn a_checkpoint_reads_back_what_was_flushed_and_nothing_after() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Writer::create(dir.path(), header("run-1")).unwrap();
        w.record(0, &progress(0));
        w.record(1, &progress(0));
        w.record(0, &progress(1));
        let members = header("run-1").members;
        let ready = PodEvent::Ready(stampede_core::pods::ReadyReplicas {
            at_s: 0.0,
            ready: 2,
            pods: 3,
        });
        w.observed(TargetSeen {
            scrapes: vec![(0, None)],
            pods: vec![ready.clone()],
        });
        let state = RunRecord {
            ending: Some(Failure::Aborted("by a user".into())),
            setup: Some(SetupRecord {
                values: vec!["t-1".into()],
                generation: 2,
                agent: 1,
            }),
            ..RunRecord::default()
        };
        w.flush(members.clone(), state.clone()).unwrap();
        w.record(0, &progress(2)); // never flushed
        let saved = load(dir.path(), "run-1").unwrap();
        assert_eq!(saved.header.members, members);
        let got: Vec<(usize, u64)> = saved
            .progress
            .iter()
            .map(|(i, p)| (*i, p.interval))
            .collect();
        assert_eq!(got, [(0, 0), (1, 0), (0, 1)]);
        assert_eq!(saved.header.state.ending, state.ending);
        assert_eq!(saved.header.state.setup, state.setup);
        assert_eq!(saved.observed.scrapes, [(0, None)]);
        assert_eq!(saved.observed.pods, std::slice::from_ref(&ready));
        // A torn tail past the durable length is cut when the run is resumed.
        drop(w);
        let log = dir.path().join("checkpoints/run-1.progress");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .unwrap()
            .write_all(&[1, 2, 3])
            .unwrap();
        let mut w = Writer::resume(dir.path(), saved.header).unwrap();
        w.record(0, &progress(2));
        let scrape = Scrape {
            at_s: 1.5,
            sample: stampede_core::observe::ProcessSample {
                cpu_seconds: Some(2.0),
                resident_bytes: None,
            },
        };
        let sample = PodEvent::Sample {
            pod: "web-1".into(),
            sample: stampede_core::pods::PodSample {
                at_s: 1.0,
                restarts: 1,
                ready: true,
                ..Default::default()
            },
        };
        w.observed(TargetSeen {
            scrapes: vec![(1, Some(scrape))],
            pods: vec![sample.clone()],
        });
        w.flush(members, state).unwrap();
        let again = load(dir.path(), "run-1").unwrap();
        assert_eq!(again.progress.len(), 4);
        assert_eq!(again.progress[3].1.interval, 2);
        assert_eq!(again.observed.scrapes, [(0, None), (1, Some(scrape))]);
        assert_eq!(again.observed.pods, [ready, sample]);
        assert_eq!(
            again.header.state.ending,
            Some(Failure::Aborted("by a user".into()))
        );
        assert_eq!(list(dir.path()), ["run-1"]);
        w.remove();
        assert!(list(dir.path()).is_empty());
    }

    /// A log whose records lie (a member out of range, a length past the end) or a header of
    /// another version is refused with the reason, never trusted.
    #[test]
    fn a_hostile_checkpoint_is_refused() {
        assert!(decode_log(&[9, 0, 0, 0, 0, 0, 0, 0], 2)
            .unwrap_err()
            .to_string()
            .contains("member 9"));
        assert!(decode_log(&[0, 0, 0, 0, 255, 255, 255, 255, 1], 2)
            .unwrap_err()
            .to_string()
            .contains("bytes"));
        assert!(decode_log(&[0, 0, 0], 2)
            .unwrap_err()
            .to_string()
            .contains("truncated"));
        for line in [
            &b"{\"pod\":{\"nope\":1}}\n"[..],
            b"{\"scrape\":null}\n",
            b"[1]\n",
        ] {
            assert!(decode_observe(line)
                .unwrap_err()
                .to_string()
                .contains("observe line 0"));
        }
        let dir = tempfile::tempdir().unwrap();
        let mut h = header("run-2");
        h.version = 99;
        let w = Writer::create(dir.path(), h).unwrap();
        drop(w);
        assert!(matches!(
            load(dir.path(), "run-2"),
            Err(CheckpointError::Version { found: 99, .. })
        ));
        let mut h = header("run-3");
        h.log_len = 100;
        let w = Writer::create(dir.path(), header("run-3")).unwrap();
        drop(w);
        std::fs::write(
            dir.path().join("checkpoints/run-3.json"),
            serde_json::to_vec(&h).unwrap(),
        )
        .unwrap();
        assert!(matches!(
            load(dir.path(), "run-3"),
            Err(CheckpointError::Log { .. })
        ));
    }
}
