//! Form tokens against cross-site request forgery: each form carries a token bound to the
//! signed-in credential and to the one action it may perform, which expires and is accepted once.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use agent_surface_core::Timestamp;
use sha2::{Digest, Sha256};

/// How long a form stays usable.
pub(crate) const TOKEN_TTL_MS: u64 = 30 * 60 * 1000;

/// The most tokens one [`Csrf`] remembers as used at once; past it, its new forms are refused
/// until older tokens expire (failing closed, never accepting a token twice). The inbox keeps
/// the sign-in form's tokens in a [`Csrf`] of their own, so that filling this set from outside
/// can only hold up sign-in, never a signed-in approver's decision or sign-out.
pub(crate) const MAX_USED: usize = 100_000;

/// Makes and checks form tokens: `{nonce}.{expiry}.{mac}`, where the MAC is HMAC-SHA256 under a
/// per-process key over the credential's digest, the action, the nonce and the expiry.
pub(crate) struct Csrf {
    key: [u8; 32],
    max_used: usize,
    used: Mutex<Used>,
}

#[derive(Default)]
struct Used {
    by_nonce: HashMap<String, u64>,
    order: VecDeque<(u64, String)>,
}

/// Why a token was refused (for the operator log; the page says only that the form is invalid).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    Malformed,
    Forged,
    Expired,
    Replayed,
    Busy,
}

impl Csrf {
    pub(crate) fn new(key: [u8; 32]) -> Csrf {
        Csrf::with_capacity(key, MAX_USED)
    }

    /// Tokens that remember at most `max_used` used ones at once.
    pub(crate) fn with_capacity(key: [u8; 32], max_used: usize) -> Csrf {
        Csrf { key, max_used, used: Mutex::new(Used::default()) }
    }

    /// A token for `action` by the holder of `credential`, valid until `now` + [`TOKEN_TTL_MS`].
    pub(crate) fn issue(&self, credential: &str, action: &str, now: Timestamp) -> String {
        let mut nonce = [0u8; 16];
        agent_surface_core::id::fill_random(&mut nonce);
        let nonce = agent_surface_core::hex::Hex(&nonce).to_string();
        let expiry = now.unix_millis().saturating_add(TOKEN_TTL_MS);
        let mac = self.mac(credential, action, &nonce, expiry);
        format!("{nonce}.{expiry}.{mac}")
    }

    /// Accepts `token` once, for `action` by the holder of `credential`.
    pub(crate) fn redeem(&self, token: &str, credential: &str, action: &str, now: Timestamp) -> Result<(), Refused> {
        self.verify(token, credential, action, now, true)
    }

    /// Whether [`redeem`](Csrf::redeem) would accept `token` now, without using it up (a later
    /// `redeem` still decides, atomically, which of two posts of one token wins).
    pub(crate) fn check(&self, token: &str, credential: &str, action: &str, now: Timestamp) -> Result<(), Refused> {
        self.verify(token, credential, action, now, false)
    }

    fn verify(&self, token: &str, credential: &str, action: &str, now: Timestamp, record: bool) -> Result<(), Refused> {
        let mut parts = token.split('.');
        let (Some(nonce), Some(expiry), Some(mac), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Refused::Malformed);
        };
        let expiry: u64 = expiry.parse().map_err(|_| Refused::Malformed)?;
        if nonce.len() != 32 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Refused::Malformed);
        }
        let expected = self.mac(credential, action, nonce, expiry);
        if !constant_time_eq(expected.as_bytes(), mac.as_bytes()) {
            return Err(Refused::Forged);
        }
        let now = now.unix_millis();
        if now >= expiry {
            return Err(Refused::Expired);
        }
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        while used.order.front().is_some_and(|(until, _)| *until <= now) {
            if let Some((_, old)) = used.order.pop_front() {
                used.by_nonce.remove(&old);
            }
        }
        if used.by_nonce.contains_key(nonce) {
            return Err(Refused::Replayed);
        }
        if !record {
            return Ok(());
        }
        if used.by_nonce.len() >= self.max_used {
            return Err(Refused::Busy);
        }
        used.by_nonce.insert(nonce.to_string(), expiry);
        used.order.push_back((expiry, nonce.to_string()));
        Ok(())
    }

    fn mac(&self, credential: &str, action: &str, nonce: &str, expiry: u64) -> String {
        let credential = Sha256::digest(credential.as_bytes());
        let mut message = Vec::with_capacity(32 + action.len() + nonce.len() + 24);
        message.extend_from_slice(&credential);
        // Lengths first, so that no two (action, nonce) pairs share a message.
        message.extend_from_slice(&(action.len() as u64).to_be_bytes());
        message.extend_from_slice(action.as_bytes());
        message.extend_from_slice(nonce.as_bytes());
        message.extend_from_slice(&expiry.to_be_bytes());
        agent_surface_core::hex::Hex(&hmac_sha256(&self.key, &message)).to_string()
    }
}

/// HMAC-SHA256 (RFC 2104) with a 32-byte key.
fn hmac_sha256(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    let mut ipad = [0x36u8; 64];
    let mut opad = [0x5cu8; 64];
    for (i, k) in key.iter().enumerate() {
        ipad[i] ^= k;
        opad[i] ^= k;
    }
    let inner = Sha256::new().chain_update(ipad).chain_update(message).finalize();
    Sha256::new().chain_update(opad).chain_update(inner).finalize().into()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
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

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_unix_millis(ms)
    }

    #[test]
    fn a_token_is_accepted_once_for_its_credential_and_action_until_it_expires() {
        let csrf = Csrf::new([7; 32]);
        let token = csrf.issue("t-manager", "decide:c-1", at(0));
        assert_eq!(csrf.redeem(&token, "t-alice", "decide:c-1", at(1)), Err(Refused::Forged));
        assert_eq!(csrf.redeem(&token, "t-manager", "decide:c-2", at(1)), Err(Refused::Forged));
        assert_eq!(csrf.redeem(&token, "t-manager", "decide:c-1", at(1)), Ok(()));
        assert_eq!(csrf.redeem(&token, "t-manager", "decide:c-1", at(2)), Err(Refused::Replayed));
        let late = csrf.issue("t-manager", "decide:c-1", at(0));
        assert_eq!(csrf.redeem(&late, "t-manager", "decide:c-1", at(TOKEN_TTL_MS)), Err(Refused::Expired));
        assert_eq!(csrf.redeem("x.y.z", "t-manager", "decide:c-1", at(1)), Err(Refused::Malformed));
        assert_eq!(csrf.redeem("", "t-manager", "decide:c-1", at(1)), Err(Refused::Malformed));
        // Another process's key (a forged token) is refused.
        let other = Csrf::new([8; 32]).issue("t-manager", "decide:c-1", at(0));
        assert_eq!(csrf.redeem(&other, "t-manager", "decide:c-1", at(1)), Err(Refused::Forged));
    }

    #[test]
    fn a_checked_token_is_not_used_up_and_a_full_set_fails_closed() {
        let csrf = Csrf::with_capacity([7; 32], 2);
        let a = csrf.issue("b", "sign-in", at(0));
        assert_eq!(csrf.check(&a, "b", "sign-in", at(1)), Ok(()));
        assert_eq!(csrf.check(&a, "b", "sign-in", at(1)), Ok(()), "checking uses nothing up");
        assert_eq!(csrf.redeem(&a, "b", "sign-in", at(1)), Ok(()));
        assert_eq!(csrf.check(&a, "b", "sign-in", at(1)), Err(Refused::Replayed));
        assert_eq!(csrf.check("x.y.z", "b", "sign-in", at(1)), Err(Refused::Malformed));
        let b = csrf.issue("b", "sign-in", at(0));
        assert_eq!(csrf.redeem(&b, "b", "sign-in", at(1)), Ok(()));
        let c = csrf.issue("b", "sign-in", at(0));
        assert_eq!(csrf.redeem(&c, "b", "sign-in", at(1)), Err(Refused::Busy), "full: refused, never accepted twice");
        assert_eq!(csrf.redeem(&a, "b", "sign-in", at(1)), Err(Refused::Replayed));
        // Another set (the decisions') is not affected by this one being full.
        let decisions = Csrf::with_capacity([7; 32], 2);
        let d = decisions.issue("session:s", "decide:c-1", at(0));
        assert_eq!(decisions.redeem(&d, "session:s", "decide:c-1", at(1)), Ok(()));
        // Once the used tokens expire, the set has room again.
        let late = csrf.issue("b", "sign-in", at(TOKEN_TTL_MS));
        assert_eq!(csrf.redeem(&late, "b", "sign-in", at(TOKEN_TTL_MS + 1)), Ok(()));
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
