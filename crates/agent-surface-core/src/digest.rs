//! SHA-256 over several parts, each length-prefixed — the one construction behind the
//! idempotency fingerprint of a request and the ids a conflicting retry is renamed to.
//!
//! Hashing parts one after another is ambiguous (`"ab" + "c"` and `"a" + "bc"` give the same
//! digest); writing each part's length before it makes the split part of what is hashed.

use sha2::{Digest, Sha256};

/// A SHA-256 of length-prefixed parts, built part by part.
///
/// Each [`part`](PartsDigest::part) is hashed as its length (a big-endian `u64`) followed by its
/// bytes; a [`labelled`](PartsDigest::labelled) part has its label written first, as is. Labels
/// are fixed by the construction that uses them (the same labels in the same order every time),
/// never taken from input: only the parts' lengths frame what follows them.
///
/// ```
/// use agent_surface_core::digest::PartsDigest;
/// let ab_c = PartsDigest::new().part(b"ab").part(b"c").finish();
/// let a_bc = PartsDigest::new().part(b"a").part(b"bc").finish();
/// assert_ne!(ab_c, a_bc);
/// ```
#[derive(Clone, Debug, Default)]
#[must_use = "a digest does nothing until it is finished"]
pub struct PartsDigest(Sha256);

impl PartsDigest {
    /// An empty digest.
    pub fn new() -> PartsDigest {
        PartsDigest(Sha256::new())
    }

    /// Hashes `bytes` after its length.
    pub fn part(mut self, bytes: &[u8]) -> PartsDigest {
        self.0.update((bytes.len() as u64).to_be_bytes());
        self.0.update(bytes);
        self
    }

    /// Hashes the fixed `label` as is, then `bytes` after its length.
    pub fn labelled(mut self, label: &[u8], bytes: &[u8]) -> PartsDigest {
        self.0.update(label);
        self.part(bytes)
    }

    /// The 32 bytes of the SHA-256.
    #[must_use]
    pub fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }
}

/// The SHA-256 of `parts`, each length-prefixed (see [`PartsDigest`]).
///
/// ```
/// use agent_surface_core::digest::{PartsDigest, sha256_parts};
/// assert_eq!(sha256_parts([&b"tool"[..], b"{}"]), PartsDigest::new().part(b"tool").part(b"{}").finish());
/// ```
#[must_use]
pub fn sha256_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    parts.into_iter().fold(PartsDigest::new(), PartsDigest::part).finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex::Hex;

    /// Known answers computed outside Rust (SHA-256 of the framed bytes).
    #[test]
    fn parts_hash_their_length_then_their_bytes() {
        // sha256(be64(0))
        assert_eq!(
            Hex(&sha256_parts([&b""[..]])).to_string(),
            "af5570f5a1810b7af78caf4bc70a660f0df51e42baf91d4de5b2328de0e83dfc"
        );
        // sha256(be64(3) "abc" be64(0))
        assert_eq!(
            Hex(&sha256_parts([&b"abc"[..], b""])).to_string(),
            "f5a934b5ab96157b46905e4dec48ff8175fe8926c36ec293b98c8fbd0886171b"
        );
        // sha256("tag" be64(1) "x")
        assert_eq!(
            Hex(&PartsDigest::new().labelled(b"tag", b"x").finish()).to_string(),
            "a9816a6f0cf94f60328da2d50630ca9257e9b042db3c3e147291edbf4c8c05f9"
        );
        // No parts: the SHA-256 of nothing.
        assert_eq!(
            Hex(&sha256_parts(std::iter::empty())).to_string(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn the_split_between_parts_is_hashed() {
        assert_ne!(sha256_parts([&b"ab"[..], b"c"]), sha256_parts([&b"a"[..], b"bc"]));
        assert_ne!(sha256_parts([&b"ab"[..]]), sha256_parts([&b"ab"[..], b""]));
        assert_eq!(sha256_parts([&b"ab"[..], b"c"]), PartsDigest::new().part(b"ab").part(b"c").finish());
    }
}
