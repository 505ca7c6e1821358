//! Sign-in sessions: the cookie carries an opaque random id; the credential it stands for is kept
//! in the inbox's store ([`InboxStore`]) — sealed under a key only the id opens — with an
//! absolute expiry, and is proven again on every request (so a revoked or expired token ends the
//! session at once).
//!
//! **What the store sees.** Under the lookup key SHA-256(`lookup` label ‖ id) it keeps the
//! subject, the expiry and the credential sealed with a key SHA-256(`seal` label ‖ id): a
//! keystream of HMAC-SHA256 blocks XORed over the token, then an HMAC-SHA256 tag over the subject,
//! the expiry and the ciphertext (encrypt-then-MAC). Each key seals exactly one value (a new
//! session is a new random id), so the construction needs no nonce. Neither the lookup key nor the
//! record tells the id, so a dump of the store signs nobody in and reveals no token. (The
//! workspace's other sealing, the MCP request-state codec, signs but does not encrypt; a token
//! needs both.)

use std::sync::Arc;

use agent_surface_core::Timestamp;
use agent_surface_core::digest::sha256_parts;
use agent_surface_policy::StoreError;
use agent_surface_policy::inbox::{InboxSession, InboxStore, SessionLimits};

use super::csrf::hmac_sha256;

/// The format byte of a sealed credential.
const SEALED_V1: u8 = 1;

/// The server side of the signed-in sessions, in the inbox's store.
pub(crate) struct Sessions {
    ttl_ms: u64,
    limits: SessionLimits,
    store: Arc<dyn InboxStore>,
}

impl Sessions {
    /// Sessions that last `ttl_ms` from sign-in, kept in `store` within `limits`.
    pub(crate) fn new(ttl_ms: u64, limits: SessionLimits, store: Arc<dyn InboxStore>) -> Sessions {
        Sessions { ttl_ms, limits, store }
    }

    /// Opens a session for the holder of `credential`, who is `subject`: its id (64 hex digits,
    /// 256 random bits). Past the per-subject limit of live sessions of `subject`, its oldest ends.
    pub(crate) async fn open(&self, credential: &str, subject: &str, now: Timestamp) -> Result<String, StoreError> {
        let mut raw = [0u8; 32];
        agent_surface_core::id::fill_random(&mut raw);
        let id = agent_surface_core::hex::Hex(&raw).to_string();
        let expires_at = Timestamp::from_unix_millis(now.unix_millis().saturating_add(self.ttl_ms));
        let sealed = seal(&id, credential, subject, expires_at);
        let session = InboxSession::new(subject, expires_at, sealed);
        self.store.open_session(lookup(&id), session, self.limits, now).await?;
        Ok(id)
    }

    /// The credential of the live session `id`; `None` for an unknown or expired one, and for a
    /// record that does not open with the id (altered in the store: logged).
    pub(crate) async fn credential(&self, id: &str, now: Timestamp) -> Result<Option<String>, StoreError> {
        let Some(session) = self.store.session(lookup(id), now).await? else { return Ok(None) };
        let opened = open(id, &session.sealed, &session.subject, session.expires_at);
        if opened.is_none() {
            tracing::warn!(target: "agent_surface::inbox", "a stored session does not open with its id: ignored");
        }
        Ok(opened)
    }

    /// Ends session `id` (sign-out, or its credential no longer proves anyone).
    pub(crate) async fn close(&self, id: &str) -> Result<(), StoreError> {
        self.store.close_session(lookup(id)).await
    }
}

/// The key a session is kept under: a digest of its id, which tells nothing of the id.
pub(crate) fn lookup(id: &str) -> [u8; 32] {
    sha256_parts([&b"agent-surface/inbox/session-lookup"[..], id.as_bytes()])
}

/// The key that seals the credential of session `id`.
fn seal_key(id: &str) -> [u8; 32] {
    sha256_parts([&b"agent-surface/inbox/session-seal"[..], id.as_bytes()])
}

/// XORs `data` with the keystream of `key` (HMAC-SHA256 of a block counter).
fn keystream(key: &[u8; 32], data: &mut [u8]) {
    for (i, chunk) in data.chunks_mut(32).enumerate() {
        let mut block = Vec::with_capacity(14);
        block.extend_from_slice(b"stream");
        block.extend_from_slice(&(i as u64).to_be_bytes());
        let pad = hmac_sha256(key, &block);
        for (byte, p) in chunk.iter_mut().zip(pad) {
            *byte ^= p;
        }
    }
}

/// The tag over what a sealed credential is bound to.
fn tag(key: &[u8; 32], subject: &str, expires_at: Timestamp, ciphertext: &[u8]) -> [u8; 32] {
    let mut message = Vec::with_capacity(3 + 16 + subject.len() + ciphertext.len());
    message.extend_from_slice(b"tag");
    message.extend_from_slice(&(subject.len() as u64).to_be_bytes());
    message.extend_from_slice(subject.as_bytes());
    message.extend_from_slice(&expires_at.unix_millis().to_be_bytes());
    message.extend_from_slice(ciphertext);
    hmac_sha256(key, &message)
}

/// `credential` sealed for session `id` of `subject` until `expires_at`.
fn seal(id: &str, credential: &str, subject: &str, expires_at: Timestamp) -> Vec<u8> {
    let key = seal_key(id);
    let mut body = credential.as_bytes().to_vec();
    keystream(&key, &mut body);
    let tag = tag(&key, subject, expires_at, &body);
    let mut sealed = Vec::with_capacity(1 + body.len() + 32);
    sealed.push(SEALED_V1);
    sealed.extend_from_slice(&body);
    sealed.extend_from_slice(&tag);
    sealed
}

/// The credential `sealed` holds, if it opens with `id` and is bound to `subject` and `expires_at`.
fn open(id: &str, sealed: &[u8], subject: &str, expires_at: Timestamp) -> Option<String> {
    let (&format, rest) = sealed.split_first()?;
    if format != SEALED_V1 || rest.len() < 32 {
        return None;
    }
    let (body, presented) = rest.split_at(rest.len() - 32);
    let key = seal_key(id);
    let expected = tag(&key, subject, expires_at, body);
    if !super::csrf::constant_time_eq(&expected, presented) {
        return None;
    }
    let mut plain = body.to_vec();
    keystream(&key, &mut plain);
    String::from_utf8(plain).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_surface_policy::inbox::MemoryInboxStore;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_unix_millis(ms)
    }

    #[tokio::test]
    async fn a_session_holds_its_credential_until_it_expires_or_closes() {
        let sessions = Sessions::new(1_000, SessionLimits::default(), Arc::new(MemoryInboxStore::default()));
        let a = sessions.open("t-manager", "manager", at(0)).await.unwrap();
        let b = sessions.open("t-manager", "manager", at(0)).await.unwrap();
        assert_ne!(a, b, "every sign-in is a new session");
        assert_eq!(a.len(), 64);
        assert!(!a.contains("t-manager"));
        assert_eq!(sessions.credential(&a, at(999)).await.unwrap().as_deref(), Some("t-manager"));
        assert_eq!(sessions.credential(&a, at(1_000)).await.unwrap(), None, "expired");
        sessions.close(&b).await.unwrap();
        assert_eq!(sessions.credential(&b, at(1)).await.unwrap(), None, "closed");
        assert_eq!(sessions.credential("made-up", at(1)).await.unwrap(), None);
    }

    /// What the store keeps signs nobody in: the token is nowhere in it, in the clear or as its
    /// digest, and the record opens only with the id, which only the cookie holds.
    #[tokio::test]
    async fn the_store_holds_no_usable_token() {
        let store = Arc::new(MemoryInboxStore::default());
        let sessions = Sessions::new(1_000, SessionLimits::default(), store.clone());
        let token = "t-a-long-bearer-token-of-the-manager-0123456789abcdef-0123456789abcdef";
        let id = sessions.open(token, "manager", at(0)).await.unwrap();
        let kept = store.session(lookup(&id), at(1)).await.unwrap().unwrap();
        assert_eq!(kept.subject, "manager");
        let sealed = kept.sealed.clone();
        let windows = |needle: &[u8]| sealed.windows(needle.len()).any(|w| w == needle);
        assert!(!windows(token.as_bytes()), "the token in the clear");
        assert!(!windows(&sha256_parts([token.as_bytes()])), "the token's digest");
        assert!(!windows(id.as_bytes()), "the session id");
        assert_ne!(lookup(&id), seal_key(&id));
        // Only the id opens it; another id, another subject or expiry, or one flipped bit do not.
        assert_eq!(open(&id, &sealed, "manager", at(1_000)).as_deref(), Some(token));
        assert_eq!(open(&"0".repeat(64), &sealed, "manager", at(1_000)), None);
        assert_eq!(open(&id, &sealed, "mallory", at(1_000)), None);
        assert_eq!(open(&id, &sealed, "manager", at(9_000)), None);
        for i in 0..sealed.len() {
            let mut altered = sealed.clone();
            altered[i] ^= 1;
            assert_eq!(open(&id, &altered, "manager", at(1_000)), None, "bit flipped at {i}");
        }
        assert_eq!(open(&id, &sealed[..sealed.len() - 1], "manager", at(1_000)), None);
        assert_eq!(open(&id, &[], "manager", at(1_000)), None);
        // A long credential (a JWT of several blocks) and an empty one round-trip.
        for credential in [String::new(), "x".repeat(4_000)] {
            let sealed = seal(&id, &credential, "s", at(5));
            assert_eq!(open(&id, &sealed, "s", at(5)), Some(credential));
        }
    }

    #[tokio::test]
    async fn one_subject_crowds_out_only_its_own_sessions() {
        let sessions = Sessions::new(1_000, SessionLimits::default(), Arc::new(MemoryInboxStore::default()));
        let other = sessions.open("t-alice", "alice", at(0)).await.unwrap();
        let first = sessions.open("t-mallory", "mallory", at(1)).await.unwrap();
        let mut last = String::new();
        for i in 0..(3 * SessionLimits::default().per_subject as u64) {
            last = sessions.open("t-mallory", "mallory", at(2 + i)).await.unwrap();
        }
        assert_eq!(sessions.credential(&first, at(100)).await.unwrap(), None, "the subject's oldest ended");
        assert_eq!(sessions.credential(&last, at(100)).await.unwrap().as_deref(), Some("t-mallory"));
        assert_eq!(sessions.credential(&other, at(100)).await.unwrap().as_deref(), Some("t-alice"));
    }
}
