//! Integration tests of the policy crate: clocks, idempotency admission and its model check.

mod clock;
mod idempotency;
mod model;
