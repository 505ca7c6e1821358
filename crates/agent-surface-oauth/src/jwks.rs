//! The signing keys: a JWKS given as JSON (a file, a string) or fetched from a URL through a
//! [`FetchJwks`] hook, cached, refreshed on an interval and refetched (rate-limited) when a token
//! names a key the cache does not hold.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};

/// The largest JWKS document read, in bytes.
pub const MAX_JWKS_BYTES: usize = 256 * 1024;

/// What a [`FetchJwks`] hook fails with: anything printable, for the operator log.
pub type FetchError = Box<dyn std::error::Error + Send + Sync>;

/// Fetches a JWKS document: the body of a `GET` of `url`.
///
/// The crate brings no HTTP client, so that services which do not fetch keys compile no TLS
/// stack; plug in the client you already have. A closure taking `&str` and returning a boxed
/// future is a `FetchJwks`. With `reqwest`:
///
/// ```ignore
/// use agent_surface_oauth::{FetchError, FetchJwks};
/// use futures_util::future::BoxFuture;
///
/// let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(5)).build()?;
/// let fetch = move |url: &str| -> BoxFuture<'static, Result<Vec<u8>, FetchError>> {
///     let request = client.get(url);
///     Box::pin(async move { Ok(request.send().await?.error_for_status()?.bytes().await?.to_vec()) })
/// };
/// ```
///
/// Fetch over `https` only: whoever can change the document in transit can sign tokens.
pub trait FetchJwks: Send + Sync + 'static {
    /// The body at `url`, or why not.
    fn fetch(&self, url: &str) -> BoxFuture<'static, Result<Vec<u8>, FetchError>>;
}

impl<F> FetchJwks for F
where
    F: Fn(&str) -> BoxFuture<'static, Result<Vec<u8>, FetchError>> + Send + Sync + 'static,
{
    fn fetch(&self, url: &str) -> BoxFuture<'static, Result<Vec<u8>, FetchError>> {
        self(url)
    }
}

/// A JWKS fetched from a URL. Build with struct update over [`RemoteJwks::new`].
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use agent_surface_oauth::{FetchError, RemoteJwks};
/// use futures_util::future::BoxFuture;
///
/// let fetch = |_: &str| -> BoxFuture<'static, Result<Vec<u8>, FetchError>> {
///     Box::pin(async { Ok(br#"{"keys":[]}"#.to_vec()) })
/// };
/// let remote = RemoteJwks { refresh: Duration::from_secs(600), ..RemoteJwks::new("https://id.example/jwks", Arc::new(fetch)) };
/// # let _ = remote;
/// ```
#[derive(Clone)]
pub struct RemoteJwks {
    /// Where the document is.
    pub url: String,
    /// How it is fetched.
    pub fetch: Arc<dyn FetchJwks>,
    /// How long a fetched document is used before it is fetched again (default 5 min). A failed
    /// refresh keeps the keys held.
    pub refresh: Duration,
    /// The least time between two fetches (default 30 s): a token naming an unknown `kid` causes
    /// a refetch only this long after the previous fetch, so forged `kid`s cannot make the
    /// server hammer the authorization server.
    pub min_refetch_interval: Duration,
    /// How long one fetch may take (default 5 s).
    pub timeout: Duration,
}

impl RemoteJwks {
    /// The defaults for `url` fetched by `fetch`.
    pub fn new(url: impl Into<String>, fetch: Arc<dyn FetchJwks>) -> RemoteJwks {
        RemoteJwks {
            url: url.into(),
            fetch,
            refresh: Duration::from_secs(300),
            min_refetch_interval: Duration::from_secs(30),
            timeout: Duration::from_secs(5),
        }
    }
}

impl std::fmt::Debug for RemoteJwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteJwks")
            .field("url", &self.url)
            .field("refresh", &self.refresh)
            .field("min_refetch_interval", &self.min_refetch_interval)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Why a JWKS document cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JwksError {
    /// The file could not be read.
    #[error("cannot read the jwks file: {0}")]
    Read(#[from] std::io::Error),
    /// The document is larger than [`MAX_JWKS_BYTES`].
    #[error("the jwks document is larger than {MAX_JWKS_BYTES} bytes")]
    TooLarge,
    /// The document is not a JSON object with a `keys` array.
    #[error("the jwks document is not a json object with a `keys` array")]
    Malformed,
    /// No key of the document can verify signatures (asymmetric, for signing, well-formed).
    #[error("the jwks document holds no usable signing key")]
    NoUsableKey,
}

/// Where the signing keys come from: a fixed document ([`Jwks::from_json`],
/// [`Jwks::from_file`]) or a URL ([`Jwks::remote`]).
#[derive(Clone, Debug)]
pub struct Jwks(Source);

#[derive(Clone, Debug)]
enum Source {
    Fixed(Arc<KeySet>),
    Remote(Arc<Remote>),
}

impl Default for Jwks {
    /// No keys: every token is refused. Only a placeholder for struct update syntax.
    fn default() -> Self {
        Jwks(Source::Fixed(Arc::new(KeySet::default())))
    }
}

impl Jwks {
    /// The keys of a JWKS document (RFC 7517 `{"keys": […]}`). Keys that cannot verify
    /// signatures — symmetric (`oct`), for encryption (`use: enc`), of an unknown type or
    /// curve, malformed — are skipped; a document with no usable key is an error.
    pub fn from_json(json: &str) -> Result<Jwks, JwksError> {
        let keys = KeySet::parse(json.as_bytes())?;
        if keys.keys.is_empty() {
            return Err(JwksError::NoUsableKey);
        }
        Ok(Jwks(Source::Fixed(Arc::new(keys))))
    }

    /// The keys of the JWKS document in the file at `path` (see [`Jwks::from_json`]).
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Jwks, JwksError> {
        let bytes = std::fs::read(path)?;
        let keys = KeySet::parse(&bytes)?;
        if keys.keys.is_empty() {
            return Err(JwksError::NoUsableKey);
        }
        Ok(Jwks(Source::Fixed(Arc::new(keys))))
    }

    /// Why these keys cannot serve a resource server ([`crate::ResourceServer::new`] asks): a
    /// fixed set without a key, or a URL fetched over plain `http` from a host other than the
    /// loopback.
    pub(crate) fn unusable(&self) -> Option<Unusable> {
        match &self.0 {
            Source::Fixed(keys) if keys.keys.is_empty() => Some(Unusable::NoKeys),
            Source::Fixed(_) => None,
            Source::Remote(remote) => match remote.config.url.parse::<http::Uri>() {
                Ok(uri) if uri.scheme_str() == Some("https") => None,
                Ok(uri) if uri.scheme_str() == Some("http") && uri.host().is_some_and(is_loopback) => None,
                _ => Some(Unusable::InsecureUrl),
            },
        }
    }

    /// Keys fetched from a URL, first when a token needs them.
    pub fn remote(remote: RemoteJwks) -> Jwks {
        Jwks(Source::Remote(Arc::new(Remote {
            config: remote,
            state: std::sync::Mutex::new(RemoteState::default()),
            fetching: tokio::sync::Mutex::new(()),
        })))
    }

    /// The keys to check a token whose header names `kid` with, or `Unavailable` when a remote
    /// document was never fetched.
    pub(crate) async fn keys(&self, kid: Option<&str>) -> Result<Arc<KeySet>, Unavailable> {
        match &self.0 {
            Source::Fixed(keys) => Ok(keys.clone()),
            Source::Remote(remote) => remote.keys(kid).await,
        }
    }
}

/// No keys could be had (a remote document never fetched).
#[derive(Debug)]
pub(crate) struct Unavailable;

/// One usable verification key.
#[derive(Debug)]
pub(crate) struct Key {
    pub(crate) kid: Option<String>,
    /// The one algorithm the key is for, if the JWK says (`alg`).
    pub(crate) alg: Option<Algorithm>,
    /// The algorithms its type and curve allow.
    pub(crate) allows: &'static [Algorithm],
    pub(crate) decoding: DecodingKey,
}

impl Key {
    /// Whether a token signed with `alg` may be checked with this key.
    pub(crate) fn fits(&self, alg: Algorithm) -> bool {
        self.allows.contains(&alg) && self.alg.is_none_or(|a| a == alg)
    }
}

/// The usable keys of one document.
#[derive(Debug, Default)]
pub(crate) struct KeySet {
    pub(crate) keys: Vec<Key>,
}

impl KeySet {
    fn parse(bytes: &[u8]) -> Result<KeySet, JwksError> {
        if bytes.len() > MAX_JWKS_BYTES {
            return Err(JwksError::TooLarge);
        }
        #[derive(serde::Deserialize)]
        struct Document {
            keys: Vec<serde_json::Value>,
        }
        let document: Document = serde_json::from_slice(bytes).map_err(|_| JwksError::Malformed)?;
        let mut keys = Vec::new();
        for value in document.keys {
            let Ok(jwk) = serde_json::from_value::<Jwk>(value) else {
                tracing::debug!(target: "agent_surface::auth", "a malformed jwk skipped");
                continue;
            };
            match usable(&jwk) {
                Some(key) => keys.push(key),
                None => {
                    tracing::debug!(target: "agent_surface::auth", kid = ?jwk.common.key_id, "a jwk that cannot verify signatures skipped");
                }
            }
        }
        Ok(KeySet { keys })
    }

    /// Whether a key named `kid` is held.
    fn has(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }
}

const RSA: &[Algorithm] =
    &[Algorithm::RS256, Algorithm::RS384, Algorithm::RS512, Algorithm::PS256, Algorithm::PS384, Algorithm::PS512];

/// The key a JWK describes, if it can verify signatures with an asymmetric algorithm.
fn usable(jwk: &Jwk) -> Option<Key> {
    if jwk.common.public_key_use.as_ref().is_some_and(|u| *u != PublicKeyUse::Signature) {
        return None;
    }
    let allows: &'static [Algorithm] = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => RSA,
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => &[Algorithm::ES256],
            EllipticCurve::P384 => &[Algorithm::ES384],
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(p) => match p.curve {
            EllipticCurve::Ed25519 => &[Algorithm::EdDSA],
            _ => return None,
        },
        // Symmetric keys never verify here: a resource server holding the secret could mint.
        _ => return None,
    };
    let alg = match jwk.common.key_algorithm {
        None => None,
        Some(alg) => Some(Algorithm::try_from(alg).ok().filter(|a| allows.contains(a))?),
    };
    let decoding = DecodingKey::from_jwk(jwk).ok()?;
    if allows.iter().any(|a| a.family() != decoding.family()) || decoding.family() == AlgorithmFamily::Hmac {
        return None;
    }
    Some(Key { kid: jwk.common.key_id.clone(), alg, allows, decoding })
}

#[derive(Debug)]
struct Remote {
    config: RemoteJwks,
    state: std::sync::Mutex<RemoteState>,
    /// Held while fetching: one fetch at a time, and callers that wanted one wait for it.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct RemoteState {
    keys: Option<Arc<KeySet>>,
    /// When the keys held were fetched.
    fetched: Option<Instant>,
    /// When the last fetch started, whatever its outcome.
    attempted: Option<Instant>,
}

impl RemoteState {
    /// Whether a fetch is due for a token naming `kid`: none was ever tried, or the last one is
    /// at least `min` old and the keys are older than `refresh` (or missing) or lack `kid`.
    fn due(&self, kid: Option<&str>, config: &RemoteJwks, now: Instant) -> bool {
        let Some(attempted) = self.attempted else { return true };
        if now.duration_since(attempted) < config.min_refetch_interval {
            return false;
        }
        let stale = self.fetched.is_none_or(|at| now.duration_since(at) >= config.refresh);
        let unknown = kid.is_some_and(|kid| self.keys.as_ref().is_none_or(|keys| !keys.has(kid)));
        stale || unknown
    }
}

impl Remote {
    fn lock(&self) -> std::sync::MutexGuard<'_, RemoteState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn keys(&self, kid: Option<&str>) -> Result<Arc<KeySet>, Unavailable> {
        let wait = {
            let state = self.lock();
            state.due(kid, &self.config, Instant::now()) || state.keys.is_none()
        };
        // A fetch due, no keys yet, or a fetch under way (its keys may be the ones needed):
        // wait for the fetching lock, then fetch unless whoever held it did.
        if wait || self.fetching.try_lock().is_err() {
            let _fetching = self.fetching.lock().await;
            // Whoever held the lock before may have fetched already.
            if self.lock().due(kid, &self.config, Instant::now()) {
                self.fetch().await;
            }
        }
        self.lock().keys.clone().ok_or(Unavailable)
    }

    /// One fetch; on success (a document with a usable key) the keys are replaced, on failure
    /// the old ones kept.
    async fn fetch(&self) {
        let started = Instant::now();
        self.lock().attempted = Some(started);
        let url = &self.config.url;
        let outcome = match tokio::time::timeout(self.config.timeout, self.config.fetch.fetch(url)).await {
            Err(_) => Err("timed out".to_string()),
            Ok(Err(e)) => Err(e.to_string()),
            // A document with no usable key (an empty set, encryption keys only, an error page
            // that parses) is a failed fetch, as for a fixed set: the keys held stay in use.
            Ok(Ok(body)) => {
                KeySet::parse(&body).map_err(|e| e.to_string()).and_then(|keys| match keys.keys.is_empty() {
                    true => Err(JwksError::NoUsableKey.to_string()),
                    false => Ok(keys),
                })
            }
        };
        match outcome {
            Ok(keys) => {
                tracing::debug!(target: "agent_surface::auth", url = %url, keys = keys.keys.len(), "jwks fetched");
                let mut state = self.lock();
                state.keys = Some(Arc::new(keys));
                state.fetched = Some(started);
            }
            Err(cause) => {
                tracing::warn!(target: "agent_surface::auth", url = %agent_surface_policy::redacted(&url), cause = %agent_surface_policy::redacted(&cause), "jwks fetch failed; the keys held stay in use");
            }
        }
    }
}

/// Why keys cannot serve a resource server ([`Jwks::unusable`]).
pub(crate) enum Unusable {
    /// A fixed set without a key.
    NoKeys,
    /// A URL fetched over plain `http` from a host other than the loopback.
    InsecureUrl,
}

/// Whether `host` (a URI's host, an IPv6 address in brackets) names the loopback.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}
