//! The extension points the pipeline consults in phases 4 (authority), 6 (rate) and 7
//! (confirmation). With none configured, every call is allowed.

use std::time::Duration;

use agent_surface_core::details::{ConfirmationInvalidReason, Origin, RateLimitReason};
use agent_surface_core::{Effect, SafeText, Timestamp};
use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::Consumer;

/// What a hook knows about the call (or, during discovery, the capability) it decides on.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CallInfo<'a> {
    /// The caller.
    pub consumer: &'a Consumer,
    /// The capability name (`type.capability`).
    pub capability: &'a str,
    /// The capability type.
    pub type_id: &'a str,
    /// The declared effect.
    pub effect: Effect,
    /// Whether the capability is declared idempotent.
    pub idempotent: bool,
    /// The resolved target instance (absent during discovery).
    pub instance_id: Option<&'a str>,
    /// The validated, bound input (absent during discovery and in the authority phase, which
    /// runs before input validation).
    pub input: Option<&'a Value>,
}

impl<'a> CallInfo<'a> {
    /// Describes a call or a capability.
    pub fn new(
        consumer: &'a Consumer,
        capability: &'a str,
        type_id: &'a str,
        effect: Effect,
        idempotent: bool,
    ) -> Self {
        CallInfo { consumer, capability, type_id, effect, idempotent, instance_id: None, input: None }
    }

    /// The same, with a target instance.
    pub fn with_instance(mut self, instance_id: &'a str) -> Self {
        self.instance_id = Some(instance_id);
        self
    }

    /// The same, with the input.
    pub fn with_input(mut self, input: &'a Value) -> Self {
        self.input = Some(input);
        self
    }
}

/// An authority decision. Deliberately exhaustive: the pipeline must handle every outcome.
#[derive(Clone, Debug, PartialEq)]
pub enum AuthorityDecision {
    /// Go on.
    Allow,
    /// Authenticated but not permitted: `NOT_AUTHORIZED {origin}`.
    Deny {
        /// Who denied.
        origin: Origin,
    },
    /// A signed-in identity is required: `NOT_AUTHENTICATED`.
    Unauthenticated,
    /// The capability does not exist for this consumer: absent from its snapshot, and
    /// `CAPABILITY_NOT_FOUND` when invoked.
    Hide,
    /// Visible but disabled for this consumer: `CAPABILITY_NOT_AVAILABLE {reason}`.
    Disable {
        /// The reason shown as `unavailableReason` and in the error.
        reason: SafeText,
    },
}

/// A policy failure; the pipeline denies (fails closed) and logs it on the operator channel.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

/// Decides who may see and call what (phase 4, and discovery).
pub trait AuthorityPolicy: Send + Sync + 'static {
    /// A name for the operator channel.
    fn name(&self) -> &str;

    /// Decides on one call or capability.
    fn decide<'a>(&'a self, call: CallInfo<'a>) -> BoxFuture<'a, Result<AuthorityDecision, PolicyError>>;
}

/// A rate decision.
pub enum RateDecision {
    /// Go on; the permit (if any) is held until the call ends (a queue slot, say).
    Allow(Option<Box<dyn Send>>),
    /// `RATE_LIMITED {reason, retryAfterMs}`.
    Limited {
        /// Which limit.
        reason: RateLimitReason,
        /// An honest estimate of when a retry can pass.
        retry_after: Duration,
    },
}

/// Rate limits and the action queue (phase 6).
pub trait RateLimiter: Send + Sync + 'static {
    /// Takes a unit of budget for the call, or says how long to wait.
    fn acquire<'a>(&'a self, call: CallInfo<'a>, now: Timestamp) -> BoxFuture<'a, RateDecision>;
}

/// A confirmation decision.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfirmationDecision {
    /// No gate, or valid evidence (now consumed): go on.
    Proceed,
    /// `CONFIRMATION_REQUIRED`.
    Required {
        /// The id to retry with.
        confirmation_id: String,
        /// What will happen.
        summary: SafeText,
        /// When the pending confirmation expires.
        expires_at: Timestamp,
        /// Who requires it.
        origin: Origin,
    },
    /// `CONFIRMATION_INVALID {reason}`.
    Invalid(ConfirmationInvalidReason),
}

/// Confirmation gates (phase 7).
pub trait ConfirmationGate: Send + Sync + 'static {
    /// Checks the call and the evidence it carries.
    fn check<'a>(
        &'a self,
        call: CallInfo<'a>,
        confirmation_id: Option<&'a str>,
        now: Timestamp,
    ) -> BoxFuture<'a, ConfirmationDecision>;
}
