//! The host's reviewer in wait mode: the [`Approver`] trait, its answer [`Review`], and
//! [`FnApprover`] from an async closure.

use std::fmt;
use std::future::Future;

use futures_util::future::BoxFuture;

use super::record::ConfirmationRecord;
use crate::consumer::Identity;
use crate::hooks::PolicyError;

/// The host's answer to a confirmation request in wait mode.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Review {
    /// `approver` approves. Refused (and logged) when the approver is the requester; the call
    /// then keeps waiting.
    Approve {
        /// Who approves.
        approver: Identity,
    },
    /// The requesting user approved in person, through `channel` — a prompt the approver put in
    /// front of them that the agent cannot drive (see [`ConfirmationEngine::approve_in_person`](super::ConfirmationEngine::approve_in_person)).
    ApproveInPerson {
        /// The channel the person answered on, e.g. `"host-ui"`.
        channel: String,
    },
    /// `approver` denies; the call ends with `CONFIRMATION_INVALID {reason: denied}`.
    Deny {
        /// Who denies.
        approver: Identity,
    },
    /// No answer now: the decision will come through [`ConfirmationEngine::approve`](super::ConfirmationEngine::approve) or
    /// [`ConfirmationEngine::deny`](super::ConfirmationEngine::deny), or not before the timeout.
    Defer,
}

/// The host's approval callback for wait mode: shows the request to a person and reports their
/// decision.
pub trait Approver: Send + Sync + 'static {
    /// Reviews one pending confirmation. The call waits for the answer, bounded by the wait
    /// timeout; an error or a panic counts as no answer (it is logged on the operator channel).
    fn review<'a>(&'a self, request: &'a ConfirmationRecord) -> BoxFuture<'a, Result<Review, PolicyError>>;
}

/// An [`Approver`] from an async closure over the pending record.
///
/// ```
/// use agent_surface_policy::{FnApprover, Identity, Review};
///
/// let approver = FnApprover::new(|record| async move {
///     // Show record.summary to the person on duty and wait for their answer…
///     let _ = record;
///     Ok(Review::Approve { approver: Identity::new("manager-1") })
/// });
/// # let _ = approver;
/// ```
pub struct FnApprover<F>(F);

impl<F, Fut> FnApprover<F>
where
    F: Fn(ConfirmationRecord) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Review, PolicyError>> + Send + 'static,
{
    /// An approver that runs `review` on a copy of each pending record.
    pub fn new(review: F) -> FnApprover<F> {
        FnApprover(review)
    }
}

impl<F> fmt::Debug for FnApprover<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnApprover").finish_non_exhaustive()
    }
}

impl<F, Fut> Approver for FnApprover<F>
where
    F: Fn(ConfirmationRecord) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Review, PolicyError>> + Send + 'static,
{
    fn review<'a>(&'a self, request: &'a ConfirmationRecord) -> BoxFuture<'a, Result<Review, PolicyError>> {
        Box::pin((self.0)(request.clone()))
    }
}
