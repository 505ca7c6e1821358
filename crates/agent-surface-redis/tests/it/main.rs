//! The Redis stores against a live Redis: the store kit's suites, replicas sharing one store, and
//! failing closed when Redis does not answer.
//!
//! Redis comes from `AGENT_SURFACE_REDIS_URL` (set by `cargo xtask ci`, which starts one); without
//! it, a private `redis-server` is started when one is installed. Under `CI=true` a missing Redis
//! fails the tests instead of skipping them.

mod format;
mod idempotency;
mod inbox;
mod kit;
mod rate;
mod relayed;
mod restart;
mod stores;
mod support;
