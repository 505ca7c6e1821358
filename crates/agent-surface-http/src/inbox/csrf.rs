//! Form tokens against cross-site request forgery: each form carries a token bound to the
//! signed-in credential and to the one action it may perform, which expires and is accepted once.
//!
//! The key that signs them and the nonces already used live in the inbox's store
//! ([`InboxStore`]): every replica signs with the key the store agreed on
//! ([`InboxStore::mac_key`], set-if-absent), and a nonce is marked used in one step
//! ([`InboxStore::use_nonce`]), so a form posted to one replica is refused when replayed to
//! another.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use agent_surface_core::Timestamp;
use agent_surface_policy::StoreError;
use agent_surface_policy::inbox::{InboxStore, NonceUse};
use sha2::{Digest, Sha256};

/// How long a form stays usable.
pub(crate) const TOKEN_TTL_MS: u64 = 30 * 60 * 1000;

/// Makes and checks form tokens: `{nonce}.{expiry}.{mac}`, where the MAC is HMAC-SHA256 under the
/// key of this token set (its scope's, shared through the store) over the credential's digest,
/// the action, the nonce and the expiry. The inbox keeps the sign-in form's tokens in a set of
/// their own, so that filling one set's used nonces (a bounded store refuses more) can only hold
/// up sign-in, never a signed-in approver's decision or sign-out.
pub(crate) struct Csrf {
    /// The scope of the key and of the used nonces in the store.
    scope: &'static str,
    store: Arc<dyn InboxStore>,
    /// The key, once the store has told it.
    key: OnceLock<[u8; 32]>,
}

/// Why a token was refused (for the operator log; the page says only that the form is invalid).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    Malformed,
    Forged,
    Expired,
    Replayed,
    Busy,
    /// The store did not answer (logged with the cause).
    Unavailable,
}

impl Csrf {
    /// The token set `scope` on `store`.
    pub(crate) fn new(scope: &'static str, store: Arc<dyn InboxStore>) -> Csrf {
        Csrf { scope, store, key: OnceLock::new() }
    }

    /// The key, asked of the store once (a random candidate is kept unless another replica's
    /// is there already).
    async fn key(&self) -> Result<[u8; 32], StoreError> {
        if let Some(key) = self.key.get() {
            return Ok(*key);
        }
        let mut candidate = [0u8; 32];
        agent_surface_core::id::fill_random(&mut candidate);
        let key = self.store.mac_key(self.scope, candidate).await?;
        Ok(*self.key.get_or_init(|| key))
    }

    /// A token for `action` by the holder of `credential`, valid until `now` + [`TOKEN_TTL_MS`].
    pub(crate) async fn issue(&self, credential: &str, action: &str, now: Timestamp) -> Result<String, StoreError> {
        let key = self.key().await?;
        let mut nonce = [0u8; 16];
        agent_surface_core::id::fill_random(&mut nonce);
        let nonce = agent_surface_core::hex::Hex(&nonce).to_string();
        let expiry = now.unix_millis().saturating_add(TOKEN_TTL_MS);
        let mac = mac(&key, credential, action, &nonce, expiry);
        Ok(format!("{nonce}.{expiry}.{mac}"))
    }

    /// Accepts `token` once, for `action` by the holder of `credential`.
    pub(crate) async fn redeem(
        &self,
        token: &str,
        credential: &str,
        action: &str,
        now: Timestamp,
    ) -> Result<(), Refused> {
        self.verify(token, credential, action, now, true).await
    }

    /// Whether [`redeem`](Csrf::redeem) would accept `token` now, without using it up (a later
    /// `redeem` still decides, atomically, which of two posts of one token wins).
    pub(crate) async fn check(
        &self,
        token: &str,
        credential: &str,
        action: &str,
        now: Timestamp,
    ) -> Result<(), Refused> {
        self.verify(token, credential, action, now, false).await
    }

    async fn verify(
        &self,
        token: &str,
        credential: &str,
        action: &str,
        now: Timestamp,
        record: bool,
    ) -> Result<(), Refused> {
        let mut parts = token.split('.');
        let (Some(nonce), Some(expiry), Some(mac_text), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Refused::Malformed);
        };
        let expiry: u64 = expiry.parse().map_err(|_| Refused::Malformed)?;
        if nonce.len() != 32 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Refused::Malformed);
        }
        let key = self.key().await.map_err(|e| unavailable(&e))?;
        let expected = mac(&key, credential, action, nonce, expiry);
        if !constant_time_eq(expected.as_bytes(), mac_text.as_bytes()) {
            return Err(Refused::Forged);
        }
        if now.unix_millis() >= expiry {
            return Err(Refused::Expired);
        }
        if !record {
            return match self.store.nonce_used(self.scope, nonce, now).await {
                Ok(false) => Ok(()),
                Ok(true) => Err(Refused::Replayed),
                Err(e) => Err(unavailable(&e)),
            };
        }
        let until = Timestamp::from_unix_millis(expiry);
        match self.store.use_nonce(self.scope, nonce, until, now).await {
            Ok(NonceUse::Fresh) => Ok(()),
            Ok(NonceUse::Used) => Err(Refused::Replayed),
            Ok(NonceUse::Full) => Err(Refused::Busy),
            Ok(_) => Err(Refused::Busy),
            Err(e) => Err(unavailable(&e)),
        }
    }
}

/// Logs a store failure; the form is refused.
fn unavailable(e: &StoreError) -> Refused {
    tracing::error!(target: "agent_surface::inbox", error = %agent_surface_policy::redacted(e), "inbox store failed");
    Refused::Unavailable
}

fn mac(key: &[u8; 32], credential: &str, action: &str, nonce: &str, expiry: u64) -> String {
    let credential = Sha256::digest(credential.as_bytes());
    let mut message = Vec::with_capacity(32 + action.len() + nonce.len() + 24);
    message.extend_from_slice(&credential);
    // Lengths first, so that no two (action, nonce) pairs share a message.
    message.extend_from_slice(&(action.len() as u64).to_be_bytes());
    message.extend_from_slice(action.as_bytes());
    message.extend_from_slice(nonce.as_bytes());
    message.extend_from_slice(&expiry.to_be_bytes());
    agent_surface_core::hex::Hex(&hmac_sha256(key, &message)).to_string()
}

/// HMAC-SHA256 (RFC 2104) with a 32-byte key.
pub(crate) fn hmac_sha256(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    let mut ipad = [0x36u8; 64];
    let mut opad = [0x5cu8; 64];
    for (i, k) in key.iter().enumerate() {
        ipad[i] ^= k;
        opad[i] ^= k;
    }
    let inner = Sha256::new().chain_update(ipad).chain_update(message).finalize();
    Sha256::new().chain_update(opad).chain_update(inner).finalize().into()
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The fields of an `application/x-www-form-urlencoded` body or query (later duplicates win):
/// `+` is a space, `%XX` a byte, a malformed escape is kept as written, and bytes that are not
/// UTF-8 become U+FFFD.
pub(crate) fn form_fields(body: &[u8]) -> HashMap<String, String> {
    form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_surface_policy::inbox::{MemoryInboxStore, MemoryInboxStoreConfig};

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_unix_millis(ms)
    }

    fn set(scope: &'static str, store: &Arc<MemoryInboxStore>) -> Csrf {
        Csrf::new(scope, store.clone())
    }

    #[tokio::test]
    async fn a_token_is_accepted_once_for_its_credential_and_action_until_it_expires() {
        let store = Arc::new(MemoryInboxStore::default());
        let csrf = set("forms", &store);
        let token = csrf.issue("t-manager", "decide:c-1", at(0)).await.unwrap();
        assert_eq!(csrf.redeem(&token, "t-alice", "decide:c-1", at(1)).await, Err(Refused::Forged));
        assert_eq!(csrf.redeem(&token, "t-manager", "decide:c-2", at(1)).await, Err(Refused::Forged));
        assert_eq!(csrf.redeem(&token, "t-manager", "decide:c-1", at(1)).await, Ok(()));
        assert_eq!(csrf.redeem(&token, "t-manager", "decide:c-1", at(2)).await, Err(Refused::Replayed));
        let late = csrf.issue("t-manager", "decide:c-1", at(0)).await.unwrap();
        assert_eq!(csrf.redeem(&late, "t-manager", "decide:c-1", at(TOKEN_TTL_MS)).await, Err(Refused::Expired));
        assert_eq!(csrf.redeem("x.y.z", "t-manager", "decide:c-1", at(1)).await, Err(Refused::Malformed));
        assert_eq!(csrf.redeem("", "t-manager", "decide:c-1", at(1)).await, Err(Refused::Malformed));
        // Another store's key (another deployment: a forged token) is refused.
        let other = set("forms", &Arc::new(MemoryInboxStore::default()));
        let forged = other.issue("t-manager", "decide:c-1", at(0)).await.unwrap();
        assert_eq!(csrf.redeem(&forged, "t-manager", "decide:c-1", at(1)).await, Err(Refused::Forged));
        // Another set on the same store (the sign-in form's) has a key of its own.
        let sign_in = set("sign-in", &store);
        let elsewhere = sign_in.issue("t-manager", "decide:c-1", at(0)).await.unwrap();
        assert_eq!(csrf.redeem(&elsewhere, "t-manager", "decide:c-1", at(1)).await, Err(Refused::Forged));
    }

    /// Two sets on one store (two replicas) agree on the key and on which nonces are used.
    #[tokio::test]
    async fn replicas_on_one_store_share_the_key_and_the_used_nonces() {
        let store = Arc::new(MemoryInboxStore::default());
        let (a, b) = (set("forms", &store), set("forms", &store));
        let token = a.issue("session:s", "sign-out", at(0)).await.unwrap();
        assert_eq!(b.check(&token, "session:s", "sign-out", at(1)).await, Ok(()));
        assert_eq!(b.redeem(&token, "session:s", "sign-out", at(1)).await, Ok(()));
        assert_eq!(a.redeem(&token, "session:s", "sign-out", at(2)).await, Err(Refused::Replayed));
    }

    #[tokio::test]
    async fn a_checked_token_is_not_used_up_and_a_full_set_fails_closed() {
        let store = Arc::new(MemoryInboxStore::new(MemoryInboxStoreConfig::with_max_used_per_scope(2)));
        let csrf = set("sign-in", &store);
        let a = csrf.issue("b", "sign-in", at(0)).await.unwrap();
        assert_eq!(csrf.check(&a, "b", "sign-in", at(1)).await, Ok(()));
        assert_eq!(csrf.check(&a, "b", "sign-in", at(1)).await, Ok(()), "checking uses nothing up");
        assert_eq!(csrf.redeem(&a, "b", "sign-in", at(1)).await, Ok(()));
        assert_eq!(csrf.check(&a, "b", "sign-in", at(1)).await, Err(Refused::Replayed));
        assert_eq!(csrf.check("x.y.z", "b", "sign-in", at(1)).await, Err(Refused::Malformed));
        let b = csrf.issue("b", "sign-in", at(0)).await.unwrap();
        assert_eq!(csrf.redeem(&b, "b", "sign-in", at(1)).await, Ok(()));
        let c = csrf.issue("b", "sign-in", at(0)).await.unwrap();
        assert_eq!(
            csrf.redeem(&c, "b", "sign-in", at(1)).await,
            Err(Refused::Busy),
            "full: refused, never accepted twice"
        );
        assert_eq!(csrf.redeem(&a, "b", "sign-in", at(1)).await, Err(Refused::Replayed));
        // Another set (the decisions') is not affected by this one being full.
        let decisions = set("forms", &store);
        let d = decisions.issue("session:s", "decide:c-1", at(0)).await.unwrap();
        assert_eq!(decisions.redeem(&d, "session:s", "decide:c-1", at(1)).await, Ok(()));
        // Once the used tokens expire, the set has room again.
        let late = csrf.issue("b", "sign-in", at(TOKEN_TTL_MS)).await.unwrap();
        assert_eq!(csrf.redeem(&late, "b", "sign-in", at(TOKEN_TTL_MS + 1)).await, Ok(()));
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2_shape() {
        // RFC 4231 test case 2 uses a 4-byte key; with our fixed 32-byte keys, check against a
        // key padded with zeros, which HMAC treats identically.
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        let mac = hmac_sha256(&key, b"what do ya want for nothing?");
        assert_eq!(
            agent_surface_core::hex::Hex(&mac).to_string(),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn form_fields_are_decoded() {
        let f = form_fields(b"verdict=approve&note=looks+good%21%20%E2%9C%93&csrf=a.b.c&bad=%zz&x");
        assert_eq!(f["verdict"], "approve");
        assert_eq!(f["note"], "looks good! ✓");
        assert_eq!(f["csrf"], "a.b.c");
        assert_eq!(f["bad"], "%zz");
        assert_eq!(f["x"], "");
    }

    /// Hostile bodies decode to something (never a panic): truncated and malformed escapes are
    /// kept as written, invalid UTF-8 becomes U+FFFD, empty pairs are skipped, the last duplicate
    /// wins, and a sign is not a hex digit.
    #[test]
    fn hostile_form_bodies_decode_without_panicking() {
        let f = form_fields(b"a=%&b=%4&c=%%41&d=%+1&e=%C3%28&f=\xff\xfe&&=v&g==x=y&h=1&h=2&%61%3D=%3d");
        assert_eq!(f["a"], "%");
        assert_eq!(f["b"], "%4");
        assert_eq!(f["c"], "%A");
        assert_eq!(f["d"], "% 1");
        assert_eq!(f["e"], "\u{fffd}(");
        assert_eq!(f["f"], "\u{fffd}\u{fffd}");
        assert_eq!(f[""], "v");
        assert_eq!(f["g"], "=x=y");
        assert_eq!(f["h"], "2");
        assert_eq!(f["a="], "=");
        assert_eq!(form_fields(b"raw=\xff%FF").get("raw").map(String::as_str), Some("\u{fffd}\u{fffd}"));
        assert!(form_fields(b"").is_empty());
        assert!(form_fields(b"&&&").is_empty());
        // Every byte, alone and after a `%`, decodes.
        for b in 0..=255u8 {
            let _ = form_fields(&[b]);
            let _ = form_fields(&[b'%', b]);
            let _ = form_fields(&[b'k', b'=', b'%', b, b'0']);
        }
    }
}
