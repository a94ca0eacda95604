//! An agent's part in one run, as the driver tracks it.

use stampede_proto::v1;
use tokio::sync::mpsc;

use super::received::Received;

/// Where an agent is in its part of a run. The moves between states are all in
/// [`MemberState::may_become`], so an agent cannot be both done and lost, and a late message
/// cannot revive an agent the run has given up on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum MemberState {
    /// Its shard was sent; the run waits for its Ready.
    Assigned,
    /// It acknowledged its shard and waits for the Start.
    Ready,
    /// Its load runs and its stream is up.
    Running,
    /// Its stream closed mid-run: until this instant it may reconnect and resume (its load
    /// goes on meanwhile, up to its lease and restart grace); after it, it is lost. `window`
    /// is how long it was given, for the reason a loss gives.
    Away {
        until: tokio::time::Instant,
        window: std::time::Duration,
    },
    /// It sent its Done: every interval it ran is delivered.
    Done,
    /// The run gave up on it (failed, stopped early, away too long, silent, too slow to
    /// finish): the loss policy has counted it. `books` says whether what it sent is all on
    /// the run's books, or may still arrive.
    Lost { why: String, books: Books },
}

/// A lost agent's books: whether every request it sent is in the run's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Books {
    /// It was lost while its load may still run (its stream went silent or closed before its
    /// lease lapsed): the run stays open until `until` for it to reconnect and replay what it
    /// collected, and its Done.
    Awaited { until: tokio::time::Instant },
    /// Every interval it ran is on the books: its Done arrived, or it stopped itself and said
    /// so.
    Complete,
    /// Closed as they were: what it sent after its last interval delivered is not on them
    /// (the report says how much that may be).
    Partial,
}

impl MemberState {
    /// Whether an agent in this state may move to `next`: forward through Assigned, Ready and
    /// Running, between Running and Away as its stream drops and comes back, and to Done or
    /// Lost from any state that has not ended (Done only once it runs). Done and Lost are
    /// final.
    pub(super) fn may_become(&self, next: &MemberState) -> bool {
        use MemberState::*;
        match (self, next) {
            // Awaited books close once, complete or partial, for the same loss.
            (
                Lost {
                    why,
                    books: Books::Awaited { .. },
                },
                Lost { why: w, books: b },
            ) => why == w && !matches!(b, Books::Awaited { .. }),
            (Done | Lost { .. }, _) => false,
            (_, Lost { .. }) => true,
            (Assigned, Ready) => true,
            (Ready, Running) => true,
            (Running, Away { .. }) => true,
            (Away { .. }, Running | Away { .. }) => true,
            (Running | Away { .. }, Done) => true,
            _ => false,
        }
    }

    /// Whether the agent has ended its part (done or lost), its books aside.
    pub(super) fn is_final(&self) -> bool {
        matches!(self, MemberState::Done | MemberState::Lost { .. })
    }

    /// The name in logs and checkpoints.
    pub(super) fn as_str(&self) -> &'static str {
        match self {
            MemberState::Assigned => "assigned",
            MemberState::Ready => "ready",
            MemberState::Running => "running",
            MemberState::Away { .. } => "away",
            MemberState::Done => "done",
            MemberState::Lost { .. } => "lost",
        }
    }
}

/// An agent taking part in the run.
pub(super) struct Member {
    pub(super) agent_id: String,
    pub(super) conn_id: u64,
    pub(super) tx: mpsc::Sender<Result<v1::ControllerMessage, tonic::Status>>,
    /// When its stream last brought a Progress (renewals depend on it).
    pub(super) heard: std::sync::Arc<crate::renew::Heard>,
    pub(super) offset_ns: i64,
    pub(super) rtt_ns: i64,
    state: MemberState,
    pub(super) received: Received,
}

impl Member {
    /// A member whose shard is about to be sent on `tx`.
    pub(super) fn assigned(
        agent_id: String,
        conn_id: u64,
        tx: mpsc::Sender<Result<v1::ControllerMessage, tonic::Status>>,
        heard: std::sync::Arc<crate::renew::Heard>,
    ) -> Self {
        Self {
            agent_id,
            conn_id,
            tx,
            heard,
            offset_ns: 0,
            rtt_ns: 0,
            state: MemberState::Assigned,
            received: Received::default(),
        }
    }

    pub(super) fn state(&self) -> &MemberState {
        &self.state
    }

    /// Moves the member to `next` when [`MemberState::may_become`] allows it; a forbidden move
    /// is logged and ignored. Returns whether it moved.
    pub(super) fn move_to(&mut self, next: MemberState) -> bool {
        if !self.state.may_become(&next) {
            tracing::debug!(agent = %self.agent_id, from = self.state.as_str(), to = next.as_str(), "member state change refused");
            return false;
        }
        self.state = next;
        true
    }

    /// Whether the run still waits for this agent (neither done nor lost).
    pub(super) fn pending(&self) -> bool {
        !self.state.is_final()
    }

    /// Whether it acknowledged its shard (or went further).
    pub(super) fn is_ready(&self) -> bool {
        !matches!(self.state, MemberState::Assigned)
    }

    pub(super) fn is_done(&self) -> bool {
        self.state == MemberState::Done
    }

    /// Why it was lost, if it was.
    pub(super) fn lost_why(&self) -> Option<&str> {
        match &self.state {
            MemberState::Lost { why, .. } => Some(why),
            _ => None,
        }
    }

    /// Until when the run waits for the books of this lost agent, if it does.
    pub(super) fn books_awaited(&self) -> Option<tokio::time::Instant> {
        match self.state {
            MemberState::Lost {
                books: Books::Awaited { until },
                ..
            } => Some(until),
            _ => None,
        }
    }

    /// Whether the run still waits for this agent: its part, or the books of its loss.
    pub(super) fn outstanding(&self) -> bool {
        self.pending() || self.books_awaited().is_some()
    }

    /// Its Done arrived: a running member is done; a lost one whose books were awaited has
    /// them complete (it stays lost). Returns whether it moved.
    pub(super) fn delivered(&mut self) -> bool {
        if let MemberState::Lost { why, .. } = &self.state {
            let why = why.clone();
            return self.move_to(MemberState::Lost {
                why,
                books: Books::Complete,
            });
        }
        self.move_to(MemberState::Done)
    }

    /// Closes the awaited books of a lost member as they are. Returns whether it moved.
    pub(super) fn close_books(&mut self) -> bool {
        let MemberState::Lost { why, .. } = &self.state else {
            return false;
        };
        let why = why.clone();
        self.move_to(MemberState::Lost {
            why,
            books: Books::Partial,
        })
    }

    /// Until when a member whose stream closed may come back.
    pub(super) fn away_until(&self) -> Option<tokio::time::Instant> {
        match self.state {
            MemberState::Away { until, .. } => Some(until),
            _ => None,
        }
    }

    /// How long a member whose stream closed was given to come back.
    pub(super) fn away_window(&self) -> Option<std::time::Duration> {
        match self.state {
            MemberState::Away { window, .. } => Some(window),
            _ => None,
        }
    }

    /// Whether it is away and its time to come back has passed at `now`.
    pub(super) fn overdue(&self, now: tokio::time::Instant) -> bool {
        self.away_until().is_some_and(|t| t <= now)
    }
}

/// Whether `agent_id` is one of the run's members: any agent's stream may name any run, so
/// only a member's messages may change it.
pub(super) fn is_member(members: &[Member], agent_id: &str) -> bool {
    members.iter().any(|m| m.agent_id == agent_id)
}

/// Longest text an agent may put into a run's message and stored report (a reason it failed
/// or stopped early): the rest is cut.
const MAX_AGENT_TEXT: usize = 200;

/// An agent's free text, cut to [`MAX_AGENT_TEXT`] characters: it arrives from the network
/// and would otherwise go whole into the run's message and its stored report.
pub(super) fn agent_text(text: &str) -> String {
    text.chars().take(MAX_AGENT_TEXT).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::Instant;

    fn member() -> Member {
        let (tx, _) = mpsc::channel(1);
        Member::assigned("a".into(), 1, tx, crate::renew::Heard::new())
    }

    /// A member's whole life, and the moves that are refused: done and lost are final, and a
    /// member cannot run before it is ready nor finish before it ran.
    #[tokio::test(start_paused = true)]
    async fn a_member_moves_forward_and_ends_once() {
        let mut m = member();
        assert!(!m.move_to(MemberState::Running), "not ready yet");
        assert!(!m.move_to(MemberState::Done), "never ran");
        assert!(m.move_to(MemberState::Ready) && m.is_ready());
        assert!(m.move_to(MemberState::Running));
        let until = Instant::now() + Duration::from_secs(3);
        let window = Duration::from_secs(3);
        assert!(m.move_to(MemberState::Away { until, window }));
        assert_eq!(m.away_window(), Some(window));
        assert_eq!(m.away_until(), Some(until));
        assert!(m.move_to(MemberState::Running), "it came back");
        assert!(m.move_to(MemberState::Done) && m.is_done() && !m.pending());
        assert!(
            !m.move_to(MemberState::Lost {
                why: "late".into(),
                books: Books::Partial
            }),
            "done is final"
        );
        assert!(!m.move_to(MemberState::Running));
        assert_eq!(m.lost_why(), None);

        let mut l = member();
        assert!(l.move_to(MemberState::Lost {
            why: "refused".into(),
            books: Books::Complete
        }));
        assert!(
            !l.move_to(MemberState::Done),
            "lost is final: never done and lost"
        );
        assert!(!l.move_to(MemberState::Ready));
        assert_eq!(l.lost_why(), Some("refused"));
    }

    /// An away member is overdue exactly when its time to come back has passed, by the
    /// paused clock.
    #[tokio::test(start_paused = true)]
    async fn an_away_member_is_overdue_after_its_grace() {
        let mut m = member();
        assert!(m.move_to(MemberState::Ready) && m.move_to(MemberState::Running));
        assert!(!m.overdue(Instant::now()));
        let window = Duration::from_millis(2500);
        let until = Instant::now() + window;
        assert!(m.move_to(MemberState::Away { until, window }));
        tokio::time::sleep(Duration::from_millis(2499)).await;
        assert!(!m.overdue(Instant::now()));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(m.overdue(Instant::now()));
        assert!(m.pending(), "overdue is not lost until the run says so");
    }

    /// Every pair of states: the final ones never move, and every unfinished one may end lost.
    #[test]
    fn final_states_never_move() {
        let now = Instant::now();
        let all = [
            MemberState::Assigned,
            MemberState::Ready,
            MemberState::Running,
            MemberState::Away {
                until: now,
                window: Duration::ZERO,
            },
            MemberState::Done,
            MemberState::Lost {
                why: String::new(),
                books: Books::Complete,
            },
            MemberState::Lost {
                why: String::new(),
                books: Books::Partial,
            },
        ];
        for s in &all {
            for n in &all {
                if s.is_final() {
                    assert!(!s.may_become(n), "{} -> {}", s.as_str(), n.as_str());
                } else if matches!(n, MemberState::Lost { .. }) {
                    assert!(s.may_become(n), "{} -> {}", s.as_str(), n.as_str());
                }
            }
        }
    }

    /// A member lost while its load may still run: the run waits for its books, which close
    /// once, complete (its Done) or partial (not back in time), and it stays lost either way.
    #[tokio::test(start_paused = true)]
    async fn awaited_books_close_once_and_the_loss_stands() {
        let until = Instant::now() + Duration::from_secs(8);
        let lost = |books| MemberState::Lost {
            why: "silent".into(),
            books,
        };
        for complete in [true, false] {
            let mut m = member();
            assert!(m.move_to(MemberState::Ready) && m.move_to(MemberState::Running));
            assert!(m.move_to(lost(Books::Awaited { until })));
            assert!(!m.pending() && m.outstanding());
            assert_eq!(m.books_awaited(), Some(until));
            assert!(
                !m.move_to(MemberState::Lost {
                    why: "another reason".into(),
                    books: Books::Partial
                }),
                "the loss keeps its reason"
            );
            assert!(!m.move_to(lost(Books::Awaited { until })), "awaited once");
            assert!(if complete {
                m.delivered()
            } else {
                m.close_books()
            });
            assert_eq!(m.lost_why(), Some("silent"), "still lost");
            assert!(!m.outstanding() && !m.is_done());
            assert!(!m.delivered() && !m.close_books(), "closed once");
            let books = if complete {
                Books::Complete
            } else {
                Books::Partial
            };
            assert_eq!(m.state(), &lost(books));
        }
        let mut d = member();
        assert!(d.move_to(MemberState::Ready) && d.move_to(MemberState::Running));
        assert!(!d.close_books(), "only a lost member's books close");
        assert!(d.delivered() && d.is_done());
    }
}
