//! [`InboxStore`]: the state of the approval inbox (`agent_surface_http::inbox`) — its sign-in
//! sessions, the form tokens already used and the key that signs the forms — so that replicas
//! behind one address share it and need no sticky routing.
//!
//! # What is stored
//!
//! The store never holds a usable bearer token. The inbox gives it, per session:
//!
//! - a **lookup key**: a digest of the session id (the id itself lives only in the browser's
//!   cookie), under which the record is found;
//! - the **subject** the credential proved at sign-in (for the per-subject cap) and the session's
//!   **expiry**;
//! - the **sealed credential**: the token the person signed in with, encrypted and authenticated
//!   under a key derived from the session id. Without the cookie it opens to nothing, so a dump
//!   of the store reveals no token; with it, the inbox proves the token again on every request,
//!   so a revoked or expired token still ends the session at once.
//!
//! Form tokens are signed with a key every replica must agree on: [`InboxStore::mac_key`] sets it
//! once (set-if-absent) and returns the one that won. A used form token's nonce is marked once
//! ([`InboxStore::use_nonce`], insert-if-absent until the token expires), so a form posted to one
//! replica is refused when replayed to another.
//!
//! [`MemoryInboxStore`] keeps all this in the process (one replica; the default): bounded, with
//! the global session cap and the used-nonce capacity of the inbox before this store existed.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::{Mutex, PoisonError};

use agent_surface_core::Timestamp;
use futures_util::future::BoxFuture;

use crate::store::Reach;
use crate::store::StoreError;

/// The most sessions one subject holds at once; opening one past it ends that subject's oldest
/// (so one identity signing in over and over crowds out only its own sessions).
pub const MAX_SESSIONS_PER_SUBJECT: usize = 8;

/// The most sessions a store keeps at once (every subject together); past it, the one closest to
/// its expiry ends to make room.
pub const MAX_SESSIONS: usize = 10_000;

/// A signed-in session as the store keeps it: nothing in it signs anyone in without the
/// session id, which only the browser's cookie holds.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InboxSession {
    /// Who the credential proved at sign-in (for [`SessionLimits::per_subject`]).
    pub subject: String,
    /// From when on the session is over.
    pub expires_at: Timestamp,
    /// The credential, sealed by the inbox under a key derived from the session id (opaque to
    /// the store).
    pub sealed: Vec<u8>,
}

impl InboxSession {
    /// A session of `subject` until `expires_at`, holding the `sealed` credential.
    pub fn new(subject: impl Into<String>, expires_at: Timestamp, sealed: Vec<u8>) -> InboxSession {
        InboxSession { subject: subject.into(), expires_at, sealed }
    }
}

/// How many sessions a store keeps: per subject, and in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionLimits {
    /// The most live sessions of one subject; opening one past it ends that subject's oldest.
    pub per_subject: usize,
    /// The most sessions in all; opening one past it ends the one closest to its expiry.
    pub total: usize,
}

impl Default for SessionLimits {
    fn default() -> SessionLimits {
        SessionLimits { per_subject: MAX_SESSIONS_PER_SUBJECT, total: MAX_SESSIONS }
    }
}

impl SessionLimits {
    /// At most `per_subject` sessions per subject and `total` in all.
    pub fn new(per_subject: usize, total: usize) -> SessionLimits {
        SessionLimits { per_subject: per_subject.max(1), total: total.max(1) }
    }
}

/// What marking a form token's nonce as used found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NonceUse {
    /// It was not used: it is marked now, and the form may act.
    Fresh,
    /// It was used already (on this replica or another): the form is a replay.
    Used,
    /// The store keeps no more used nonces now (a bounded store whose set is full of unexpired
    /// ones): the form is refused, failing closed, never accepted twice.
    Full,
}

/// Where the approval inbox keeps its sessions, used form nonces and form-signing key (see the
/// [module](self)).
///
/// Every operation is required. `now` is passed in (the inbox's clock) rather than read, as for
/// the other stores. Lookup keys are digests (32 bytes); nonces and scope names are short ASCII
/// strings the inbox makes.
pub trait InboxStore: Send + Sync + fmt::Debug + 'static {
    /// Who shares what this store holds.
    fn reach(&self) -> Reach;

    /// Keeps `session` under `lookup` (replacing one kept there). Past
    /// [`SessionLimits::per_subject`] live sessions of its subject, that subject's oldest end;
    /// past [`SessionLimits::total`], the ones closest to their expiry end.
    fn open_session<'a>(
        &'a self,
        lookup: [u8; 32],
        session: InboxSession,
        limits: SessionLimits,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The session kept under `lookup`, if it is live at `now` (an expired one is never returned,
    /// and may be deleted).
    fn session<'a>(
        &'a self,
        lookup: [u8; 32],
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<InboxSession>, StoreError>>;

    /// Ends the session under `lookup` (nothing happens for an unknown one).
    fn close_session<'a>(&'a self, lookup: [u8; 32]) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Marks `nonce` of `scope` used until `until`, unless it is marked already: one step, so of
    /// two replicas marking one nonce at once exactly one sees [`NonceUse::Fresh`].
    fn use_nonce<'a>(
        &'a self,
        scope: &'a str,
        nonce: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<NonceUse, StoreError>>;

    /// Whether `nonce` of `scope` is marked used at `now` (without marking it).
    fn nonce_used<'a>(
        &'a self,
        scope: &'a str,
        nonce: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// The secret key named `name`: the one stored, or else `candidate`, stored now
    /// (set-if-absent, so every replica ends up with the same key). The inbox signs its forms with
    /// such keys; `agent_surface::Serve` keeps the key sealing MCP approval rounds under
    /// `mcp-approval-state` when it is given none.
    fn mac_key<'a>(&'a self, name: &'a str, candidate: [u8; 32]) -> BoxFuture<'a, Result<[u8; 32], StoreError>>;
}

/// The bounds of a [`MemoryInboxStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryInboxStoreConfig {
    /// The most used nonces remembered per scope at once; past it, [`NonceUse::Full`] until older
    /// ones expire.
    pub max_used_per_scope: usize,
}

impl Default for MemoryInboxStoreConfig {
    fn default() -> MemoryInboxStoreConfig {
        MemoryInboxStoreConfig { max_used_per_scope: 100_000 }
    }
}

impl MemoryInboxStoreConfig {
    /// At most `max_used_per_scope` used nonces per scope.
    pub fn with_max_used_per_scope(max_used_per_scope: usize) -> MemoryInboxStoreConfig {
        MemoryInboxStoreConfig { max_used_per_scope }
    }
}

/// An [`InboxStore`] in this process's memory: one replica (sticky routing, or one process),
/// forgotten on restart; its key is drawn by the first caller of [`InboxStore::mac_key`].
#[derive(Default)]
pub struct MemoryInboxStore {
    config: MemoryInboxStoreConfig,
    state: Mutex<MemoryInbox>,
}

#[derive(Default)]
struct MemoryInbox {
    sessions: HashMap<[u8; 32], InboxSession>,
    used: HashMap<String, Used>,
    keys: BTreeMap<String, [u8; 32]>,
}

#[derive(Default)]
struct Used {
    by_nonce: HashMap<String, u64>,
    order: VecDeque<(u64, String)>,
}

impl Used {
    fn forget_expired(&mut self, now: u64) {
        while self.order.front().is_some_and(|(until, _)| *until <= now) {
            if let Some((_, old)) = self.order.pop_front() {
                self.by_nonce.remove(&old);
            }
        }
    }
}

impl fmt::Debug for MemoryInboxStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryInboxStore").field("config", &self.config).finish_non_exhaustive()
    }
}

impl MemoryInboxStore {
    /// A store with these bounds.
    pub fn new(config: MemoryInboxStoreConfig) -> MemoryInboxStore {
        MemoryInboxStore { config, state: Mutex::default() }
    }

    fn open_now(&self, lookup: [u8; 32], session: InboxSession, limits: SessionLimits, now: Timestamp) {
        let now = now.unix_millis();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let open = &mut state.sessions;
        open.remove(&lookup);
        let mut own: Vec<([u8; 32], u64)> = open
            .iter()
            .filter(|(_, s)| s.subject == session.subject)
            .map(|(k, s)| (*k, s.expires_at.unix_millis()))
            .collect();
        own.retain(|(k, until)| {
            let live = *until > now;
            if !live {
                open.remove(k);
            }
            live
        });
        if own.len() >= limits.per_subject {
            own.sort_by_key(|(_, until)| *until);
            for (k, _) in &own[..=own.len() - limits.per_subject] {
                open.remove(k);
            }
        }
        if open.len() >= limits.total {
            open.retain(|_, s| s.expires_at.unix_millis() > now);
        }
        while open.len() >= limits.total {
            let Some(oldest) = open.iter().min_by_key(|(_, s)| s.expires_at).map(|(k, _)| *k) else { break };
            open.remove(&oldest);
        }
        open.insert(lookup, session);
    }
}

fn ready<T: Send + 'static>(value: T) -> BoxFuture<'static, T> {
    Box::pin(std::future::ready(value))
}

impl InboxStore for MemoryInboxStore {
    fn reach(&self) -> Reach {
        Reach::Process
    }

    fn open_session<'a>(
        &'a self,
        lookup: [u8; 32],
        session: InboxSession,
        limits: SessionLimits,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.open_now(lookup, session, limits, now);
        ready(Ok(()))
    }

    fn session<'a>(
        &'a self,
        lookup: [u8; 32],
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<InboxSession>, StoreError>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let found = match state.sessions.get(&lookup) {
            Some(s) if s.expires_at > now => Some(s.clone()),
            Some(_) => {
                state.sessions.remove(&lookup);
                None
            }
            None => None,
        };
        ready(Ok(found))
    }

    fn close_session<'a>(&'a self, lookup: [u8; 32]) -> BoxFuture<'a, Result<(), StoreError>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).sessions.remove(&lookup);
        ready(Ok(()))
    }

    fn use_nonce<'a>(
        &'a self,
        scope: &'a str,
        nonce: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<NonceUse, StoreError>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let used = state.used.entry(scope.to_string()).or_default();
        used.forget_expired(now.unix_millis());
        let answer = if used.by_nonce.contains_key(nonce) {
            NonceUse::Used
        } else if used.by_nonce.len() >= self.config.max_used_per_scope {
            NonceUse::Full
        } else {
            used.by_nonce.insert(nonce.to_string(), until.unix_millis());
            used.order.push_back((until.unix_millis(), nonce.to_string()));
            NonceUse::Fresh
        };
        ready(Ok(answer))
    }

    fn nonce_used<'a>(
        &'a self,
        scope: &'a str,
        nonce: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let used = state.used.get_mut(scope).is_some_and(|used| {
            used.forget_expired(now.unix_millis());
            used.by_nonce.contains_key(nonce)
        });
        ready(Ok(used))
    }

    fn mac_key<'a>(&'a self, name: &'a str, candidate: [u8; 32]) -> BoxFuture<'a, Result<[u8; 32], StoreError>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        ready(Ok(*state.keys.entry(name.to_string()).or_insert(candidate)))
    }
}

impl<S: InboxStore + ?Sized> InboxStore for std::sync::Arc<S> {
    fn reach(&self) -> Reach {
        (**self).reach()
    }

    fn open_session<'a>(
        &'a self,
        lookup: [u8; 32],
        session: InboxSession,
        limits: SessionLimits,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).open_session(lookup, session, limits, now)
    }

    fn session<'a>(
        &'a self,
        lookup: [u8; 32],
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<InboxSession>, StoreError>> {
        (**self).session(lookup, now)
    }

    fn close_session<'a>(&'a self, lookup: [u8; 32]) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).close_session(lookup)
    }

    fn use_nonce<'a>(
        &'a self,
        scope: &'a str,
        nonce: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<NonceUse, StoreError>> {
        (**self).use_nonce(scope, nonce, until, now)
    }

    fn nonce_used<'a>(
        &'a self,
        scope: &'a str,
        nonce: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).nonce_used(scope, nonce, now)
    }

    fn mac_key<'a>(&'a self, name: &'a str, candidate: [u8; 32]) -> BoxFuture<'a, Result<[u8; 32], StoreError>> {
        (**self).mac_key(name, candidate)
    }
}
