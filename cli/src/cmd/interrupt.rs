//! SIGINT and SIGTERM for the commands that run load (`run`, `demo`, `capacity`): either one
//! aborts the run, whose report is still collected and written (exit 2), because SIGTERM is
//! what `timeout`, a CI job's cancellation and `kubectl delete` send, and a run they stop
//! must not vanish. A second signal quits at once.

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// The two signals, registered once, before any load: from then on neither ends the process
/// by the default action, so one that arrives while a local cluster starts is not lost.
pub struct Interrupts {
    term: Signal,
    int: Signal,
}

/// Which signal came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    /// SIGINT, Ctrl-C at a terminal.
    CtrlC,
    /// SIGTERM.
    Term,
}

impl Interrupt {
    /// How the signal is named to the user and in the run's abort reason.
    pub fn name(self) -> &'static str {
        match self {
            Self::CtrlC => "Ctrl-C",
            Self::Term => "SIGTERM",
        }
    }

    /// The exit code of a process ended by a second signal of this kind (128 + its number),
    /// as a shell reports a process the signal killed.
    pub fn exit_code(self) -> i32 {
        match self {
            Self::CtrlC => 130,
            Self::Term => 143,
        }
    }
}

impl Interrupts {
    /// Registers both handlers.
    pub fn register() -> Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
        })
    }

    /// The next signal, either kind.
    pub async fn next(&mut self) -> Interrupt {
        tokio::select! {
            _ = self.int.recv() => Interrupt::CtrlC,
            _ = self.term.recv() => Interrupt::Term,
        }
    }
}
