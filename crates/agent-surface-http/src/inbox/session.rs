//! Sign-in sessions: the cookie carries an opaque random id; the credential it stands for stays
//! on the server, in a bounded map with an absolute expiry, and is proven again on every request
//! (so a revoked or expired token ends the session at once).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use agent_surface_core::Timestamp;
use sha2::{Digest, Sha256};

/// The most sessions kept at once; past it, the one closest to its expiry is ended to make room.
const MAX_SESSIONS: usize = 10_000;

/// The most sessions one subject holds at once; a sign-in past it ends that subject's oldest
/// session (so one identity, signing in over and over, crowds out only its own sessions).
pub(crate) const MAX_PER_SUBJECT: usize = 8;

/// The server side of the signed-in sessions, keyed by the SHA-256 of their ids (so no lookup
/// compares a secret byte by byte).
pub(crate) struct Sessions {
    ttl_ms: u64,
    open: Mutex<HashMap<[u8; 32], Session>>,
}

struct Session {
    /// The bearer token the person signed in with (never sent back to the browser).
    credential: String,
    /// Who the credential proved at sign-in (for [`MAX_PER_SUBJECT`]).
    subject: String,
    /// Unix milliseconds from which the session is over.
    expires_at: u64,
}

impl Sessions {
    /// Sessions that last `ttl_ms` from sign-in.
    pub(crate) fn new(ttl_ms: u64) -> Sessions {
        Sessions { ttl_ms, open: Mutex::new(HashMap::new()) }
    }

    /// Opens a session for the holder of `credential`, who is `subject`: its id (64 hex digits,
    /// 256 random bits). Past [`MAX_PER_SUBJECT`] live sessions of `subject`, its oldest ends.
    pub(crate) fn open(&self, credential: &str, subject: &str, now: Timestamp) -> String {
        let mut raw = [0u8; 32];
        agent_surface_core::id::fill_random(&mut raw);
        let id = agent_surface_core::hex::Hex(&raw).to_string();
        let now = now.unix_millis();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let mut own: Vec<([u8; 32], u64)> =
            open.iter().filter(|(_, s)| s.subject == subject).map(|(k, s)| (*k, s.expires_at)).collect();
        own.retain(|(k, until)| {
            let live = *until > now;
            if !live {
                open.remove(k);
            }
            live
        });
        if own.len() >= MAX_PER_SUBJECT {
            own.sort_by_key(|(_, until)| *until);
            for (k, _) in &own[..=own.len() - MAX_PER_SUBJECT] {
                open.remove(k);
            }
        }
        if open.len() >= MAX_SESSIONS {
            open.retain(|_, s| s.expires_at > now);
        }
        if open.len() >= MAX_SESSIONS
            && let Some(oldest) = open.iter().min_by_key(|(_, s)| s.expires_at).map(|(k, _)| *k)
        {
            open.remove(&oldest);
        }
        let session = Session {
            credential: credential.to_string(),
            subject: subject.to_string(),
            expires_at: now.saturating_add(self.ttl_ms),
        };
        open.insert(key(&id), session);
        id
    }

    /// The credential of the live session `id`; an expired session is ended.
    pub(crate) fn credential(&self, id: &str, now: Timestamp) -> Option<String> {
        let key = key(id);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let session = open.get(&key)?;
        if session.expires_at <= now.unix_millis() {
            open.remove(&key);
            return None;
        }
        Some(session.credential.clone())
    }

    /// Ends session `id` (sign-out, or its credential no longer proves anyone).
    pub(crate) fn close(&self, id: &str) {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).remove(&key(id));
    }

    /// How many sessions are kept (ended ones may linger until looked up or crowded out).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

fn key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_unix_millis(ms)
    }

    #[test]
    fn a_session_holds_its_credential_until_it_expires_or_closes() {
        let sessions = Sessions::new(1_000);
        let a = sessions.open("t-manager", "manager", at(0));
        let b = sessions.open("t-manager", "manager", at(0));
        assert_ne!(a, b, "every sign-in is a new session");
        assert_eq!(a.len(), 64);
        assert!(!a.contains("t-manager"));
        assert_eq!(sessions.credential(&a, at(999)).as_deref(), Some("t-manager"));
        assert_eq!(sessions.credential(&a, at(1_000)), None, "expired");
        assert_eq!(sessions.credential(&a, at(0)), None, "an expired session is ended for good");
        sessions.close(&b);
        assert_eq!(sessions.credential(&b, at(1)), None, "closed");
        assert_eq!(sessions.credential("made-up", at(1)), None);
        assert_eq!(sessions.len(), 0);
    }

    #[test]
    fn the_map_is_bounded() {
        let sessions = Sessions::new(1_000);
        let first = sessions.open("t-0", "s-0", at(0));
        for i in 1..=MAX_SESSIONS {
            sessions.open(&format!("t-{i}"), &format!("s-{i}"), at(1));
        }
        assert_eq!(sessions.len(), MAX_SESSIONS);
        assert_eq!(sessions.credential(&first, at(2)), None, "the oldest made room");
    }

    #[test]
    fn one_subject_crowds_out_only_its_own_sessions() {
        let sessions = Sessions::new(1_000);
        let other = sessions.open("t-alice", "alice", at(0));
        let first = sessions.open("t-mallory", "mallory", at(1));
        let mut last = String::new();
        for i in 0..(3 * MAX_PER_SUBJECT as u64) {
            last = sessions.open("t-mallory", "mallory", at(2 + i));
        }
        assert_eq!(sessions.len(), 1 + MAX_PER_SUBJECT);
        assert_eq!(sessions.credential(&first, at(100)), None, "the subject's oldest ended");
        assert_eq!(sessions.credential(&last, at(100)).as_deref(), Some("t-mallory"));
        assert_eq!(sessions.credential(&other, at(100)).as_deref(), Some("t-alice"), "another subject's stays");
    }
}
