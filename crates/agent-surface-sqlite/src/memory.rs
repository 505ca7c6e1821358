//! The in-memory part of the stores, owned by the database thread next to the connection: what
//! concerns the calls of this process only, and so need not be on disk (a restart ends them).

use std::collections::{HashMap, VecDeque};

use agent_surface_core::InvokeResult;
use agent_surface_policy::idempotency::{Attempt, IdempotencyKey};
use tokio::sync::watch;

/// How many cancelled attempts are remembered (only admissions that had not run when they were
/// cancelled leave one; on the database thread, which runs operations in the order they were
/// sent, a cancellation follows its admission, so this is the contract's corner case).
pub(crate) const CANCELLED_KEPT: usize = 64;

/// The in-memory part of the stores, owned by the database thread.
pub(crate) struct Memory {
    /// Where the followers of each record in flight wait, made when the first one joins.
    pub(crate) followers: HashMap<IdempotencyKey, watch::Sender<Option<InvokeResult>>>,
    /// Attempts cancelled before they were admitted.
    pub(crate) cancelled: VecDeque<Attempt>,
    /// Records in flight whose settlement could not be written, with the token of their lease:
    /// treated as lapsed, and written as lapsed by the next transaction that commits (so this
    /// holds only what a failing disk has not let through yet).
    pub(crate) orphaned: HashMap<IdempotencyKey, u64>,
    /// The last fencing token handed out.
    last_token: u64,
}

impl Memory {
    /// The in-memory part of a file whose largest token is `last_token`.
    pub(crate) fn new(last_token: u64) -> Memory {
        Memory { followers: HashMap::new(), cancelled: VecDeque::new(), orphaned: HashMap::new(), last_token }
    }

    /// A fencing token greater than every one handed out before.
    pub(crate) fn next_token(&mut self) -> u64 {
        self.last_token += 1;
        self.last_token
    }

    /// Writes the records whose settlement could not be written ([`Memory::orphaned`]) as
    /// lapsed, at most `limit` of them, inside the caller's transaction: once it commits, they
    /// are lapsed on disk (the sweep removes them in time, a restart keeps them lapsed) and
    /// [`Memory::forget_orphans`] drops them from memory. Returns the ones written.
    pub(crate) fn persist_orphans(
        &self,
        conn: &rusqlite::Connection,
        limit: usize,
    ) -> rusqlite::Result<Vec<(IdempotencyKey, u64)>> {
        let mut written = Vec::new();
        for (key, token) in self.orphaned.iter().take(limit) {
            conn.prepare_cached(
                "UPDATE idem SET lapsed = 1 WHERE consumer = ?1 AND invocation = ?2 AND token = ?3 AND state = 0",
            )?
            .execute(rusqlite::params![
                key.consumer_key,
                key.invocation_id,
                i64::try_from(*token).unwrap_or(i64::MAX)
            ])?;
            written.push((key.clone(), *token));
        }
        Ok(written)
    }

    /// Drops from memory the orphans [`Memory::persist_orphans`] wrote, once their transaction
    /// committed (unless the record was orphaned again since, under another lease).
    pub(crate) fn forget_orphans(&mut self, written: Vec<(IdempotencyKey, u64)>) {
        for (key, token) in written {
            if self.orphaned.get(&key) == Some(&token) {
                self.orphaned.remove(&key);
            }
        }
    }
}
