//! Why a call stopped: a [`Stop`] carries the agent-safe error, the phase that produced it, and
//! what the operator channel and the record need to know of it (a note, the open questions, the
//! service's own fault, how its `notProcessed` statement is decided).

use agent_surface_core::{AgentSurfaceError, Phase};

/// Why a call stopped: the error and the phase that produced it ([`Stopped`]), boxed, so that
/// every phase's `Result` is as small as its success (a stop is the rare path; a call's
/// results are moved between its phases, and held in its future).
pub(crate) struct Stop(Box<Stopped>);

/// What a [`Stop`] holds.
pub(crate) struct Stopped {
    pub(crate) error: AgentSurfaceError,
    pub(crate) phase: Phase,
    /// A note for the operator channel (never agent-facing).
    pub(crate) note: Option<Box<str>>,
    /// The open questions, when the call stopped for them.
    pub(crate) questions: Option<Vec<crate::questions::Question>>,
    /// The service itself is at fault (user code panicked, a store or the rate limiter failed):
    /// the operator event is an `ERROR` whatever the code's level in the matrix.
    pub(crate) fault: Option<Fault>,
    /// How the payload's `notProcessed` statement is decided ([`Stopped::not_processed`]).
    pub(crate) marking: Marking,
    /// The payload as a record of this service keeps it, answered again word for word (the
    /// natural key's replay): the answer, and what the operator event says of it (its code, retry
    /// and level), are this payload's, not `error`'s.
    pub(crate) recorded: Option<Box<agent_surface_core::ErrorPayload>>,
}

/// How a stop decides whether its payload says `notProcessed` (`spec/error-model.md`, *Not
/// processed*).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Marking {
    /// From the phase that stopped the call: a phase before the handler says so
    /// ([`Phase::is_before_handler`]).
    #[default]
    ByPhase,
    /// The handler had not started, whatever the phase (strict audit refused to record the
    /// start, which comes first).
    BeforeHandler,
    /// As the record the call was answered from says (the value given): the call that ran
    /// decided it.
    AsRecorded(bool),
}

impl Stopped {
    /// Whether the payload of this stop says `notProcessed`: decided from the phase (or the
    /// stop's [`Marking`]), never from the code alone. The core refuses the mark for a payload
    /// that cannot carry it (an unknown outcome, met at admission from an earlier leader's
    /// record, is one).
    pub(crate) fn not_processed(&self) -> bool {
        match self.marking {
            Marking::ByPhase => self.phase.is_before_handler(),
            Marking::BeforeHandler => true,
            Marking::AsRecorded(recorded) => recorded,
        }
    }

    /// The payload, marked as [`Stopped::not_processed`] decides.
    pub(crate) fn marked_payload(&self) -> agent_surface_core::ErrorPayload {
        let mut payload = self.error.payload().clone();
        payload.set_not_processed(self.not_processed());
        payload
    }
}

/// How the service itself failed a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// User code (a handler, a precondition, a gate…) panicked or could not decide.
    UserCode,
    /// The idempotency store failed.
    IdempotencyStore,
    /// The confirmation store failed.
    ConfirmationStore,
    /// The rate limiter failed.
    RateLimiter,
    /// The audit sink failed under strict audit.
    AuditSink,
}

impl Fault {
    /// The metrics' `store` label of a store failure.
    pub(super) fn store(self) -> Option<&'static str> {
        match self {
            Fault::UserCode => None,
            Fault::IdempotencyStore => Some("idempotency"),
            Fault::ConfirmationStore => Some("confirmation"),
            Fault::RateLimiter => Some("rate-limiter"),
            Fault::AuditSink => Some("audit"),
        }
    }
}

impl Stop {
    pub(crate) fn new(error: AgentSurfaceError, phase: Phase) -> Stop {
        Stop::from(Stopped {
            error,
            phase,
            note: None,
            questions: None,
            fault: None,
            marking: Marking::ByPhase,
            recorded: None,
        })
    }

    pub(crate) fn noted(error: AgentSurfaceError, phase: Phase, note: impl Into<String>) -> Stop {
        Stop::from(Stopped {
            error,
            phase,
            note: Some(note.into().into_boxed_str()),
            questions: None,
            fault: None,
            marking: Marking::ByPhase,
            recorded: None,
        })
    }

    /// The same stop, marked as a fault of user code.
    pub(crate) fn fault(mut self) -> Stop {
        self.0.fault = Some(Fault::UserCode);
        self
    }

    /// The same stop, marked as a failure of a store (or the rate limiter).
    pub(crate) fn store_fault(mut self, store: Fault) -> Stop {
        self.0.fault = Some(store);
        self
    }

    /// The same stop, with its `notProcessed` statement decided as `marking` says.
    pub(crate) fn marking(mut self, marking: Marking) -> Stop {
        self.0.marking = marking;
        self
    }

    /// The same stop, answered with `payload` as this service recorded it, message included.
    pub(crate) fn recorded(mut self, payload: agent_surface_core::ErrorPayload) -> Stop {
        self.0.recorded = Some(Box::new(payload));
        self
    }

    /// What the stop holds.
    pub(crate) fn into_inner(self) -> Stopped {
        *self.0
    }
}

impl From<Stopped> for Stop {
    fn from(stopped: Stopped) -> Stop {
        Stop(Box::new(stopped))
    }
}

impl std::ops::Deref for Stop {
    type Target = Stopped;

    fn deref(&self) -> &Stopped {
        &self.0
    }
}

impl std::ops::DerefMut for Stop {
    fn deref_mut(&mut self) -> &mut Stopped {
        &mut self.0
    }
}
