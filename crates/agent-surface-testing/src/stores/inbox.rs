//! The store kit's checks of an [`InboxStore`]: sessions (open, read, close, expiry, the
//! per-subject and global caps), used form nonces (once, also across two handles) and the shared
//! form-signing key.

use std::sync::Arc;

use agent_surface_core::Timestamp;
use agent_surface_core::digest::sha256_parts;
use agent_surface_policy::inbox::{InboxSession, InboxStore, NonceUse, SessionLimits};
use futures_util::future::join_all;

use super::at;

/// A lookup key for `name` under `prefix` (any 32 bytes do: the inbox gives digests).
fn lookup(prefix: &str, name: &str) -> [u8; 32] {
    sha256_parts([prefix.as_bytes(), name.as_bytes()])
}

fn session(subject: &str, expires_at: Timestamp, sealed: &[u8]) -> InboxSession {
    InboxSession::new(subject, expires_at, sealed.to_vec())
}

/// Checks an [`InboxStore`]: a session opened is read back as given until it expires or is
/// closed; a subject past its cap loses its oldest sessions, never another subject's; past the
/// global cap the session closest to its expiry ends; a nonce is marked used once; the key is
/// set once and then returned to everyone.
///
/// The global cap is checked with a small limit, which counts every session the store holds:
/// run this on a store of its own (a fresh prefix, schema or file).
pub async fn check_inbox_store(store: &dyn InboxStore, prefix: &str) {
    let limits = SessionLimits::default();
    let a = lookup(prefix, "a");
    let sealed: Vec<u8> = (0..=255u8).chain([0, 0, 255]).collect();
    assert_eq!(store.session(a, at(0)).await.unwrap(), None, "an unknown session is none");
    store.open_session(a, session(&format!("{prefix}manager"), at(1_000), &sealed), limits, at(0)).await.unwrap();
    let read = store.session(a, at(999)).await.unwrap().expect("a session opened is read back");
    assert_eq!(read, session(&format!("{prefix}manager"), at(1_000), &sealed), "read back as given, every byte");
    assert_eq!(store.session(a, at(1_000)).await.unwrap(), None, "a session is over at its expiry");
    let b = lookup(prefix, "b");
    store.open_session(b, session(&format!("{prefix}manager"), at(2_000), b"x"), limits, at(0)).await.unwrap();
    store.close_session(b).await.unwrap();
    assert_eq!(store.session(b, at(1)).await.unwrap(), None, "a closed session is gone");
    store.close_session(lookup(prefix, "never")).await.unwrap();

    // The per-subject cap: the subject's oldest end, another subject's stay.
    let per = SessionLimits::new(3, 1_000);
    let (mallory, alice) = (format!("{prefix}mallory"), format!("{prefix}alice"));
    let other = lookup(prefix, "alice-1");
    store.open_session(other, session(&alice, at(10_000), b"alice"), per, at(0)).await.unwrap();
    for i in 0..5u64 {
        let key = lookup(prefix, &format!("mallory-{i}"));
        store.open_session(key, session(&mallory, at(10_000 + i), b"m"), per, at(i)).await.unwrap();
    }
    for i in 0..5u64 {
        let kept = store.session(lookup(prefix, &format!("mallory-{i}")), at(100)).await.unwrap().is_some();
        assert_eq!(kept, i >= 2, "mallory's session {i}: only the 3 newest are kept");
    }
    assert!(store.session(other, at(100)).await.unwrap().is_some(), "another subject's session stays");

    // The global cap: past it, the one closest to its expiry ends.
    let global = SessionLimits::new(100, 8);
    for i in 0..8u64 {
        let key = lookup(prefix, &format!("g-{i}"));
        store
            .open_session(key, session(&format!("{prefix}g{i}"), at(20_000 + i), b"g"), global, at(200))
            .await
            .unwrap();
    }
    let mut kept = 0;
    for key in ["alice-1", "mallory-2", "mallory-3", "mallory-4"].iter().map(|n| lookup(prefix, n)) {
        kept += usize::from(store.session(key, at(300)).await.unwrap().is_some());
    }
    for i in 0..8u64 {
        kept += usize::from(store.session(lookup(prefix, &format!("g-{i}")), at(300)).await.unwrap().is_some());
    }
    assert_eq!(kept, 8, "the store keeps at most the global cap");
    assert!(
        store.session(lookup(prefix, "g-7"), at(300)).await.unwrap().is_some(),
        "the newest session is kept past the global cap"
    );
    assert!(
        store.session(lookup(prefix, "alice-1"), at(300)).await.unwrap().is_none(),
        "the session closest to its expiry made room"
    );

    // Nonces: once per scope, until they expire.
    let scope = format!("{prefix}forms");
    assert!(!store.nonce_used(&scope, "n-1", at(0)).await.unwrap());
    assert_eq!(store.use_nonce(&scope, "n-1", at(1_000), at(0)).await.unwrap(), NonceUse::Fresh);
    assert!(store.nonce_used(&scope, "n-1", at(1)).await.unwrap(), "a used nonce is reported used");
    assert_eq!(store.use_nonce(&scope, "n-1", at(1_000), at(1)).await.unwrap(), NonceUse::Used, "a nonce is used once");
    let elsewhere = format!("{prefix}sign-in");
    assert_eq!(
        store.use_nonce(&elsewhere, "n-1", at(1_000), at(1)).await.unwrap(),
        NonceUse::Fresh,
        "scopes are apart"
    );
    assert!(!store.nonce_used(&scope, "n-1", at(1_000)).await.unwrap(), "a nonce is forgotten once its token expired");

    // The key: set once, then the same for every caller.
    let name = format!("{prefix}forms");
    let first = store.mac_key(&name, [1; 32]).await.unwrap();
    assert_eq!(first, [1; 32], "the first candidate is kept");
    assert_eq!(store.mac_key(&name, [2; 32]).await.unwrap(), [1; 32], "a later candidate is not");
    assert_eq!(store.mac_key(&format!("{prefix}sign-in"), [3; 32]).await.unwrap(), [3; 32], "each name has its key");
}

/// Checks that two handles on one store (two replicas) share the inbox's state: a session opened
/// through one is read and closed through the other; of many marks of one nonce racing through
/// both, exactly one is fresh; and racing candidates for the key end with one key for both.
pub async fn check_inbox_replicas(a: Arc<dyn InboxStore>, b: Arc<dyn InboxStore>, prefix: &str) {
    let limits = SessionLimits::default();
    let key = lookup(prefix, "shared");
    a.open_session(key, session(&format!("{prefix}manager"), at(1_000), b"sealed"), limits, at(0)).await.unwrap();
    let read = b.session(key, at(1)).await.unwrap();
    assert_eq!(
        read.map(|s| s.sealed),
        Some(b"sealed".to_vec()),
        "a session opened on one replica is read on the other"
    );
    b.close_session(key).await.unwrap();
    assert_eq!(a.session(key, at(2)).await.unwrap(), None, "a session closed on one replica is gone on the other");

    let scope = format!("{prefix}forms");
    let marks = (0..16).map(|i| {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let scope = scope.clone();
        async move { store.use_nonce(&scope, "race", at(1_000), at(0)).await.unwrap() }
    });
    let results = join_all(marks).await;
    assert_eq!(results.iter().filter(|r| **r == NonceUse::Fresh).count(), 1, "one nonce is fresh once: {results:?}");
    assert!(results.iter().all(|r| matches!(r, NonceUse::Fresh | NonceUse::Used)), "{results:?}");

    let name = format!("{prefix}key");
    let candidates = (0..8u8).map(|i| {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let name = name.clone();
        async move { store.mac_key(&name, [i + 1; 32]).await.unwrap() }
    });
    let keys = join_all(candidates).await;
    assert!(keys.windows(2).all(|w| w[0] == w[1]), "every replica ends with one key: {keys:?}");
    assert_eq!(a.mac_key(&name, [99; 32]).await.unwrap(), keys[0]);
    assert_eq!(b.mac_key(&name, [99; 32]).await.unwrap(), keys[0]);
}
