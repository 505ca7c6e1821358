//! The JSON-RPC ids of the requests in progress on streamable HTTP, held where `rmcp` routes
//! answers by id.
//!
//! `rmcp`'s legacy session keeps one answer route per request id: a second request under the id
//! of one in progress takes the first one's route, and the first `POST` never gets its answer (it
//! waits for the session's idle timeout). A guard inside the `ServerHandler` comes too late — the
//! route is already taken when the handler runs. So [`crate::http::router_with`] holds each
//! request's id from before `rmcp` sees the request until its response has been sent, or its
//! connection dropped ([`Held`], carried by the response body), and answers a request whose id is
//! held with `-32600` itself ([`ProtocolFault::IdInProgress`]). A request whose client hung up (a
//! `tools/call`, an application's `resources/read` or `prompts/get`: any method) goes on running
//! its handler, and `rmcp` keeps its route until the handler answers: its id stays
//! in progress until then ([`InFlightIds::running`], taken with the id's hold and carried in the
//! request's extensions, which `rmcp` hands to the handler's context and drops with it), so a
//! request that reuses it (a client retrying after a network error) is refused rather than taking
//! that route and being answered the first call's result. (A short window remains between the
//! handler's end and `rmcp`'s routing of its answer.)
//!
//! **Scope.** An id is in progress within the legacy session named by `Mcp-Session-Id`. A
//! modern (2026-07-28) request has no session: it is answered on its own HTTP response, `rmcp`
//! routes nothing of it by id, and two clients of one user may well number their requests alike,
//! so nothing is held for it; nor for an `initialize`, which opens a session of its own.
//!
//! **Bounds.** A held id is kept as a 32-byte digest of its scope and its value, so a long id costs
//! what a short one does; a scope holds at most `max_requests_in_flight` ids (one more is refused
//! with [`ProtocolFault::TooManyInProgress`]), and every held id belongs to a request whose response is
//! still open, so that part of the table is bounded by the connection limits. An id kept while its
//! handler runs after its client hung up is not counted against the scope (it holds no
//! connection): it goes with the handler's `RequestContext`, so an application handler that keeps
//! its context past its answer (clones it into a task of its own) keeps that id refused until the
//! clone is dropped; the adapter's own handlers keep only its peer and its cancellation token.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use agent_surface_core::digest::PartsDigest;
use rmcp::model::{NumberOrString, RequestId};

use crate::fault::ProtocolFault;

/// Where a JSON-RPC id must be unique while its request is in progress.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope<'a> {
    /// A legacy session: the value of its `Mcp-Session-Id` header.
    Session(&'a [u8]),
}

impl Scope<'_> {
    fn digest(self) -> [u8; 32] {
        match self {
            Scope::Session(id) => PartsDigest::new().labelled(b"session", id),
        }
        .finish()
    }
}

/// The ids in progress, per scope.
#[derive(Debug)]
pub(crate) struct InFlightIds {
    /// The most ids one scope may hold.
    max_per_scope: usize,
    /// Scope digest → the digests of its ids in progress; a scope without any is removed.
    scopes: Mutex<HashMap<[u8; 32], ScopeIds>>,
}

/// The ids in progress in one scope, by their digests.
#[derive(Debug, Default)]
struct ScopeIds {
    /// Held by their requests' responses ([`Held`]); at most `max_per_scope`.
    held: HashSet<[u8; 32]>,
    /// How many handlers run under each ([`Running`]). Not counted against `max_per_scope`: a
    /// running handler holds no connection, and its request held a place while it had one.
    running: HashMap<[u8; 32], usize>,
}

impl ScopeIds {
    fn is_empty(&self) -> bool {
        self.held.is_empty() && self.running.is_empty()
    }
}

/// The digest of a JSON-RPC id (its kind and its value).
fn id_digest(id: &RequestId) -> [u8; 32] {
    match id {
        NumberOrString::Number(n) => PartsDigest::new().labelled(b"number", &n.to_be_bytes()),
        NumberOrString::String(s) => PartsDigest::new().labelled(b"string", s.as_bytes()),
    }
    .finish()
}

impl InFlightIds {
    /// An empty table whose scopes hold at most `max_per_scope` ids each.
    pub(crate) fn new(max_per_scope: usize) -> Arc<InFlightIds> {
        Arc::new(InFlightIds { max_per_scope, scopes: Mutex::default() })
    }

    /// Holds `id` in `scope` until the returned [`Held`] is dropped, unless a request under it is
    /// still in progress there (its response open, or its handler running:
    /// [`ProtocolFault::IdInProgress`]) or the scope is full ([`ProtocolFault::TooManyInProgress`]).
    pub(crate) fn hold(self: &Arc<Self>, scope: Scope<'_>, id: &RequestId) -> Result<Held, ProtocolFault> {
        let scope = scope.digest();
        let id = id_digest(id);
        let mut scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        let ids = scopes.entry(scope).or_default();
        if ids.held.contains(&id) || ids.running.contains_key(&id) {
            return Err(ProtocolFault::IdInProgress);
        }
        if ids.held.len() >= self.max_per_scope {
            if ids.is_empty() {
                scopes.remove(&scope);
            }
            return Err(ProtocolFault::TooManyInProgress(self.max_per_scope));
        }
        ids.held.insert(id);
        Ok(Held { table: self.clone(), scope, id })
    }

    /// Keeps `id` in progress in `scope` until the returned [`Running`] is dropped: taken with the
    /// request's hold and dropped with its handler's context, it keeps the id from
    /// [`InFlightIds::hold`] after the client hung up too.
    pub(crate) fn running(self: &Arc<Self>, scope: Scope<'_>, id: &RequestId) -> Running {
        let (scope, id) = (scope.digest(), id_digest(id));
        let mut scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        *scopes.entry(scope).or_default().running.entry(id).or_default() += 1;
        Running { table: self.clone(), scope, id }
    }

    /// Removes what `change` takes out of `scope`, and the scope once it holds nothing.
    fn release(&self, scope: &[u8; 32], change: impl FnOnce(&mut ScopeIds)) {
        let mut scopes = self.scopes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ids) = scopes.get_mut(scope) {
            change(ids);
            if ids.is_empty() {
                scopes.remove(scope);
            }
        }
    }

    /// How many ids are held, in all scopes (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.scopes.lock().unwrap_or_else(PoisonError::into_inner).values().map(|ids| ids.held.len()).sum()
    }
}

/// An id held in its scope; dropping it frees the id.
#[derive(Debug)]
pub(crate) struct Held {
    table: Arc<InFlightIds>,
    scope: [u8; 32],
    id: [u8; 32],
}

impl Drop for Held {
    fn drop(&mut self) {
        self.table.release(&self.scope, |ids| {
            ids.held.remove(&self.id);
        });
    }
}

/// An id kept in progress while its handler runs; dropping it (the handler answered or was
/// dropped) frees it.
#[derive(Debug)]
pub(crate) struct Running {
    table: Arc<InFlightIds>,
    scope: [u8; 32],
    id: [u8; 32],
}

impl Drop for Running {
    fn drop(&mut self) {
        self.table.release(&self.scope, |ids| {
            if let Some(count) = ids.running.get_mut(&self.id) {
                *count -= 1;
                if *count == 0 {
                    ids.running.remove(&self.id);
                }
            }
        });
    }
}

/// A response body's data that holds its request's id until the body has been sent to its end
/// (the id is freed then) or dropped (the connection closed).
pub(crate) struct Holding<S> {
    inner: S,
    held: Option<Held>,
}

impl<S> Holding<S> {
    /// `inner`, holding `held` while it is read.
    pub(crate) fn new(inner: S, held: Held) -> Holding<S> {
        Holding { inner, held: Some(held) }
    }
}

impl<S: futures_util::Stream + Unpin> futures_util::Stream for Holding<S> {
    type Item = S::Item;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        let next = std::pin::Pin::new(&mut self.inner).poll_next(cx);
        if let std::task::Poll::Ready(None) = next {
            self.held = None;
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_held_once_per_scope_until_dropped() {
        let table = InFlightIds::new(2);
        let (a, b) = (Scope::Session(b"a"), Scope::Session(b"b"));
        let seven = NumberOrString::Number(7);
        let held = table.hold(a, &seven).unwrap();
        assert_eq!(table.hold(a, &seven).unwrap_err(), ProtocolFault::IdInProgress);
        // Another scope, another kind of id: not the same.
        let _b = table.hold(b, &seven).unwrap();
        let _s = table.hold(a, &NumberOrString::String("7".into())).unwrap();
        // The scope is full.
        assert_eq!(table.hold(a, &NumberOrString::Number(8)).unwrap_err(), ProtocolFault::TooManyInProgress(2));
        drop(held);
        let _again = table.hold(a, &seven).unwrap();
        drop((_again, _s, _b));
        assert_eq!(table.len(), 0);
        assert!(table.scopes.lock().unwrap().is_empty(), "an empty scope is removed");
    }

    #[test]
    fn a_running_handler_keeps_its_id_after_its_response_is_gone() {
        let table = InFlightIds::new(1);
        let (scope, seven) = (Scope::Session(b"a"), NumberOrString::Number(7));
        let held = table.hold(scope, &seven).unwrap();
        let running = table.running(scope, &seven);
        drop(held);
        assert_eq!(table.hold(scope, &seven).unwrap_err(), ProtocolFault::IdInProgress);
        // Its place is free: another id is taken.
        let other = table.hold(scope, &NumberOrString::Number(8)).unwrap();
        drop((running, other));
        let _again = table.hold(scope, &seven).unwrap();
        assert!(table.scopes.lock().unwrap().values().all(|ids| ids.running.is_empty()));
    }

    #[test]
    fn a_long_id_costs_a_digest() {
        let table = InFlightIds::new(1);
        let long = NumberOrString::String("x".repeat(1 << 20).into());
        let _held = table.hold(Scope::Session(b"s"), &long).unwrap();
        assert_eq!(table.hold(Scope::Session(b"s"), &long).unwrap_err(), ProtocolFault::IdInProgress);
    }
}
