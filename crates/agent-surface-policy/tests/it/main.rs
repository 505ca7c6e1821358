//! Integration tests of the policy crate: clocks, idempotency admission and its model check, and
//! the authority, rate and confirmation engines, and the operator channel's redactor.

mod audit;
mod authn;
mod authority;
mod clock;
mod confirmation;
mod idempotency;
mod model;
mod rate;
mod redact;
mod sweeps;
