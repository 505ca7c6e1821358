//! The audit trail: [`AuditSink`], where every confirmation event (requested, decided, consumed,
//! expired) and every execution of a capability with an effect (started, finished with its code)
//! is recorded, and the shipped sinks.
//!
//! An [`AuditEvent`] names the principal, the capability, the SHA-256 digest of the canonical
//! input (never the input itself), the invocation and correlation ids and, for confirmation
//! events, the confirmation id and the approver. It never carries a private cause, a message or
//! an output: the trail says who did what and how it ended, by code.
//!
//! Sinks: [`MemoryAuditSink`] (bounded, in process, for tests and embedding),
//! [`JsonLinesAuditSink`] (a JSON Lines file, appended and synced per record; a torn last line
//! left by a crash is cut when the file is opened again), and `RedisAuditSink` in
//! `agent-surface-redis` (a Redis stream shared by replicas).
//!
//! The registry writes the execution events (`RegistryConfig::audit`), the confirmation engine
//! the confirmation events ([`ConfirmationConfig::audit`](crate::ConfirmationConfig::audit));
//! give both the same sink. With **strict audit** (`AuditConfig::strict`, or per capability)
//! a call whose `execution.started` event cannot be written does not run: it is answered
//! `EXECUTION_FAILED {reason: audit-unavailable, transient: true}` (`after-delay`). Otherwise a
//! failed write is an `ERROR` on the operator channel and the call goes on.
//!
//! `spec/authority-and-confirmation.md` (*Audit trail*) is the normative description of the
//! events and their JSON form.

mod jsonl;

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_surface_core::{Effect, ErrorCode, Timestamp};
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

pub use jsonl::JsonLinesAuditSink;

use crate::clock::Clock;
use crate::hooks::CallInfo;

/// The default [`AuditConfig::budget`]: how long one write may take.
pub const DEFAULT_AUDIT_BUDGET: Duration = Duration::from_secs(5);

/// How long a caller refused by strict audit is asked to wait.
pub const AUDIT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The longest approver note kept in an event, in characters; a longer note is cut.
pub const MAX_NOTE_CHARS: usize = 1000;

/// One entry of the audit trail; its JSON form is the trail's format (see [`AuditSink`]; the spec's *Audit trail*).
///
/// ```
/// use agent_surface_core::{Effect, Timestamp};
/// use agent_surface_policy::{AuditEvent, AuditKind};
///
/// let mut event = AuditEvent::new(
///     Timestamp::from_unix_millis(1_795_957_500_123),
///     AuditKind::ExecutionStarted { effect: Effect::Destructive },
///     "orders.cancel",
///     "session-1",
/// );
/// event.principal = Some("alice".into());
/// event.correlation_id = Some("inv-7".into());
/// assert_eq!(
///     serde_json::to_string(&event).unwrap(),
///     r#"{"at":"2026-11-29T13:05:00.123Z","event":"execution.started","effect":"destructive","capability":"orders.cancel","consumer":"session-1","principal":"alice","correlationId":"inv-7"}"#
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AuditEvent {
    /// When it happened, on the registry's (or the engine's) clock.
    #[serde(with = "rfc3339")]
    pub at: Timestamp,
    /// What happened (serialized as the field `event` and the kind's own fields).
    #[serde(flatten)]
    pub kind: AuditKind,
    /// The capability name.
    pub capability: String,
    /// The consumer key of the calling (for a confirmation: the requesting) consumer.
    pub consumer: String,
    /// The authenticated subject of that consumer, when it was signed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// SHA-256 of the canonical JSON of the validated input, as 64 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_digest: Option<String>,
    /// The caller's invocation id, when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_id: Option<String>,
    /// The call's correlation id. An event no call causes (a decision, an expiry found through a
    /// decision or a sweep) carries the invocation and correlation ids of the call that requested
    /// the confirmation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The confirmation, for confirmation events (and for an execution that consumed one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation_id: Option<String>,
}

impl AuditEvent {
    /// An event of `kind` about `capability`, called by the consumer `consumer`; the other fields
    /// are empty.
    pub fn new(
        at: Timestamp,
        kind: AuditKind,
        capability: impl Into<String>,
        consumer: impl Into<String>,
    ) -> AuditEvent {
        AuditEvent {
            at,
            kind,
            capability: capability.into(),
            consumer: consumer.into(),
            principal: None,
            input_digest: None,
            invocation_id: None,
            correlation_id: None,
            confirmation_id: None,
        }
    }

    /// An event of `kind` about the call `call` describes: its capability, consumer, principal,
    /// invocation and correlation ids.
    pub fn of_call(at: Timestamp, kind: AuditKind, call: &CallInfo<'_>) -> AuditEvent {
        let mut event = AuditEvent::new(at, kind, call.capability, call.consumer.key());
        event.principal = call.consumer.identity().map(|i| i.subject.clone());
        event.invocation_id = call.invocation_id.map(str::to_string);
        event.correlation_id = call.correlation_id.map(str::to_string);
        event
    }

    /// The wire name of the event (`confirmation.requested`, `execution.finished`, …).
    pub fn name(&self) -> &'static str {
        self.kind.name()
    }
}

/// What an [`AuditEvent`] records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event")]
#[non_exhaustive]
pub enum AuditKind {
    /// A gated call without evidence asked for a confirmation.
    #[serde(rename = "confirmation.requested", rename_all = "camelCase")]
    ConfirmationRequested {
        /// The capability's declared effect.
        effect: Effect,
        /// The deadline of the decision and of the evidence.
        #[serde(with = "rfc3339")]
        expires_at: Timestamp,
    },
    /// A person approved or denied.
    #[serde(rename = "confirmation.decided", rename_all = "camelCase")]
    ConfirmationDecided {
        /// The verdict.
        verdict: AuditVerdict,
        /// The approver's subject (`in-person:{channel}` for an approval in person).
        approver: String,
        /// The approver's note, at most [`MAX_NOTE_CHARS`] characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// Approved evidence was used by one call.
    #[serde(rename = "confirmation.consumed", rename_all = "camelCase")]
    ConfirmationConsumed {
        /// Who approved it.
        approved_by: String,
    },
    /// A confirmation reached its deadline without being used (noticed when it was presented,
    /// decided or waited for after it, when a waiting call gave up, or by the engine's sweep).
    #[serde(rename = "confirmation.expired")]
    ConfirmationExpired,
    /// Evidence a call consumed was given back to that call: approved again, by the same
    /// approvers, for its retry. Its handler never started (strict audit could not record its
    /// start; the caller went away first), or it answered that the same call should be made again
    /// (a transient failure: nothing took effect). Follows the call's `confirmation.consumed`; the
    /// retry writes another one.
    #[serde(rename = "confirmation.reinstated")]
    ConfirmationReinstated,
    /// The handler of a capability with an effect is about to run.
    #[serde(rename = "execution.started", rename_all = "camelCase")]
    ExecutionStarted {
        /// The capability's declared effect.
        effect: Effect,
    },
    /// The call whose start was recorded ended.
    #[serde(rename = "execution.finished", rename_all = "camelCase")]
    ExecutionFinished {
        /// How it ended.
        outcome: AuditOutcome,
        /// The code, when it ended with an error.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<ErrorCode>,
    },
}

impl AuditKind {
    /// The wire name of the event.
    pub fn name(&self) -> &'static str {
        match self {
            AuditKind::ConfirmationRequested { .. } => "confirmation.requested",
            AuditKind::ConfirmationDecided { .. } => "confirmation.decided",
            AuditKind::ConfirmationConsumed { .. } => "confirmation.consumed",
            AuditKind::ConfirmationExpired => "confirmation.expired",
            AuditKind::ConfirmationReinstated => "confirmation.reinstated",
            AuditKind::ExecutionStarted { .. } => "execution.started",
            AuditKind::ExecutionFinished { .. } => "execution.finished",
        }
    }
}

/// A decision, as the trail records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuditVerdict {
    /// Approved by someone other than the requester.
    Approve,
    /// Approved by the requester in person, through a channel the agent cannot drive.
    ApproveInPerson,
    /// Denied.
    Deny,
}

/// How a recorded execution ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuditOutcome {
    /// With an output.
    Ok,
    /// With an error (the event's `code`).
    Error,
    /// The caller went away mid-call (its future was dropped); the effect may have happened.
    Abandoned,
}

/// Why a sink could not record (or read back) an event. The text goes to the operator channel
/// only.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("audit sink unavailable: {0}")]
pub struct AuditError(pub String);

impl AuditError {
    /// A failure with this description.
    pub fn new(description: impl Into<String>) -> AuditError {
        AuditError(description.into())
    }
}

/// Where audit events go.
///
/// `record` returns once the event is durable as far as the sink can make it (the JSON Lines
/// sink: written and synced to disk); an `Err` means it may not be. Events of one call are
/// recorded in order (each is awaited before the next is written); events of concurrent calls
/// interleave.
pub trait AuditSink: Send + Sync + fmt::Debug + 'static {
    /// Records one event.
    fn record<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>>;

    /// Up to `limit` of the most recent events, oldest first (e.g. for an approval inbox's
    /// "recent decisions"). The default: none — a sink that cannot read back says nothing.
    fn recent<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<AuditEvent>, AuditError>> {
        let _ = limit;
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
}

impl<S: AuditSink + ?Sized> AuditSink for Arc<S> {
    fn record<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        (**self).record(event)
    }

    fn recent<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<AuditEvent>, AuditError>> {
        (**self).recent(limit)
    }
}

/// The registry's audit configuration (`RegistryConfig::audit`). Build it with struct update
/// syntax over [`AuditConfig::new`].
#[derive(Clone, Debug)]
pub struct AuditConfig {
    /// Where the events go (give the confirmation engine the same sink).
    pub sink: Arc<dyn AuditSink>,
    /// Strict audit for every capability with an effect: a call whose `execution.started` event
    /// cannot be written within `budget` does not run (`EXECUTION_FAILED {reason:
    /// audit-unavailable}`). A capability can ask for it alone (`CapabilityBuilder::strict_audit`).
    pub strict: bool,
    /// The time budget of one write; past it the write counts as failed.
    pub budget: Duration,
}

impl AuditConfig {
    /// Events to `sink`, not strict, within [`DEFAULT_AUDIT_BUDGET`].
    pub fn new(sink: Arc<dyn AuditSink>) -> AuditConfig {
        AuditConfig { sink, strict: false, budget: DEFAULT_AUDIT_BUDGET }
    }
}

/// Records `event` in `sink` within `budget` on `clock`, with the sink's panics caught: the one
/// way the registry and the confirmation engine write to a sink.
pub async fn record_within(
    sink: &dyn AuditSink,
    clock: &dyn Clock,
    budget: Duration,
    event: &AuditEvent,
) -> Result<(), AuditError> {
    let write = crate::guard::catch_future(|| sink.record(event));
    match crate::guard::within(clock, budget, write).await {
        Some(Ok(answer)) => answer,
        Some(Err(panic)) => Err(AuditError::new(format!("the audit sink panicked: {panic}"))),
        None => Err(AuditError::new(format!("the audit sink did not answer within {} ms", budget.as_millis()))),
    }
}

/// The configuration of a [`MemoryAuditSink`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryAuditSinkConfig {
    /// The most events kept; the oldest go first.
    pub capacity: usize,
    /// The most bytes (of the events' JSON) kept; the oldest go first.
    pub max_bytes: usize,
}

impl Default for MemoryAuditSinkConfig {
    /// 10 000 events, 8 MiB.
    fn default() -> MemoryAuditSinkConfig {
        MemoryAuditSinkConfig { capacity: 10_000, max_bytes: 8 * 1024 * 1024 }
    }
}

/// An [`AuditSink`] in this process's memory, bounded by count and bytes (the oldest events go
/// first). For tests, and for an embedded host that forwards the events elsewhere itself.
#[derive(Debug, Default)]
pub struct MemoryAuditSink {
    config: MemoryAuditSinkConfig,
    inner: Mutex<(VecDeque<(usize, AuditEvent)>, usize)>,
}

impl MemoryAuditSink {
    /// An empty sink.
    pub fn new(config: MemoryAuditSinkConfig) -> MemoryAuditSink {
        MemoryAuditSink { config, inner: Mutex::new((VecDeque::new(), 0)) }
    }

    /// Every event held, oldest first.
    pub fn events(&self) -> Vec<AuditEvent> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.0.iter().map(|(_, e)| e.clone()).collect()
    }

    /// The wire names of the events held, oldest first (`["confirmation.requested", …]`).
    pub fn names(&self) -> Vec<&'static str> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.0.iter().map(|(_, e)| e.name()).collect()
    }
}

impl AuditSink for MemoryAuditSink {
    fn record<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        let size = serde_json::to_vec(event).map_or(0, |v| v.len());
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let (events, bytes) = &mut *inner;
        events.push_back((size, event.clone()));
        *bytes += size;
        while events.len() > self.config.capacity || *bytes > self.config.max_bytes {
            let Some((dropped, _)) = events.pop_front() else { break };
            *bytes -= dropped;
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn recent<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<AuditEvent>, AuditError>> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let skip = inner.0.len().saturating_sub(limit);
        let recent = inner.0.iter().skip(skip).map(|(_, e)| e.clone()).collect();
        Box::pin(std::future::ready(Ok(recent)))
    }
}

/// A note as the trail keeps it: trimmed, at most [`MAX_NOTE_CHARS`] characters, `None` when
/// empty.
pub fn bounded_note(note: Option<&str>) -> Option<String> {
    let note = note?.trim();
    (!note.is_empty()).then(|| note.chars().take(MAX_NOTE_CHARS).collect())
}

/// Timestamps as RFC 3339 text in events.
mod rfc3339 {
    use agent_surface_core::Timestamp;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.to_rfc3339())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&text).ok_or_else(|| serde::de::Error::custom("not an RFC 3339 timestamp"))
    }
}
