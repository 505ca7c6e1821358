//! The PostgreSQL stores against a live PostgreSQL: the store kit's suites, replicas sharing one
//! store, the stored shapes of format 1 pinned both ways, failing closed when the database
//! does not answer, what its admission marks, and what its sweeper deletes and leaves.
//!
//! The database comes from `AGENT_SURFACE_POSTGRES_URL` when set; otherwise a private cluster is
//! started once per test binary when PostgreSQL is installed
//! (`agent_surface_testing::postgres`). Under `CI=true` a missing PostgreSQL fails the tests
//! instead of skipping them.

mod admission;
mod faults;
mod format;
mod kit;
mod support;
mod sweep;
