//! Redaction of the operator channel: application-caused text (a handler's error chain, a panic's
//! message, a store's error) passes through one process-wide [`Redactor`] before it is logged.
//!
//! The default, [`Credentials`], masks credentials in URLs, bearer tokens and `key=value` pairs
//! whose key names a secret. An application replaces or extends it once, at startup, with
//! [`install_redactor`]; every crate that logs causes (the policy engines, the registry's
//! pipeline, the adapters and the stores) reads it through [`redact`] or [`redacted`]. It is
//! process-wide because the operator channel is: `tracing` has one global subscriber.
//!
//! The agent channel never carries any of this text, redacted or not.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;

/// What replaces a secret.
pub const MASK: &str = "***";

/// What a redactor's panic leaves of the text (nothing of it: the text may hold the secret the
/// redactor choked on).
const REDACTOR_PANICKED: &str = "(text withheld: the redactor panicked)";

/// Turns text bound for the operator channel into text fit for it.
///
/// Implementations must be cheap when there is nothing to mask (return [`Cow::Borrowed`]) and
/// should not panic; a panic is caught and the whole text withheld.
///
/// Extend the default by calling it first:
///
/// ```
/// use std::borrow::Cow;
///
/// use agent_surface_policy::{Credentials, Redactor};
///
/// /// The default, and account numbers.
/// struct Accounts;
///
/// impl Redactor for Accounts {
///     fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
///         let text = Credentials::new().redact(text);
///         if text.contains("ACCT-") { Cow::Owned(text.replace("ACCT-", "ACCT-***/")) } else { text }
///     }
/// }
///
/// assert_eq!(Accounts.redact("token=t0p ACCT-42"), "token=*** ACCT-***/42");
/// ```
pub trait Redactor: Send + Sync + 'static {
    /// `text` with its secrets masked; borrowed when there was nothing to mask.
    fn redact<'t>(&self, text: &'t str) -> Cow<'t, str>;
}

/// The default redactor: credentials in URLs, bearer tokens, and the values of keys that name a
/// secret.
///
/// - `scheme://user:password@host` → `scheme://user:***@host`; `scheme://token@host` →
///   `scheme://***@host` (the userinfo ends at the authority's last `@`; a password holding an
///   unencoded `/`, `?`, `#` or a space is not a URL's, and is masked only under one of the keys
///   below);
/// - `Bearer xyz` → `Bearer ***` (any case);
/// - `key=value` and `key: value`, the value plain, `"quoted"` or `'quoted'`, when the key
///   (letters, digits, `_`, `-`, `.`; any case) contains `password`, `passwd`, `secret`, `token`,
///   `apikey`, `api_key`, `api-key`, `credential`, `authorization` or `cookie`, or ends in `key`,
///   `pwd`, `pass` or `auth` (`api_key`, `AWS_SECRET_ACCESS_KEY`, `X-Api-Key`, `client_secret`…);
///   after `Authorization:` (a key naming `authorization` or ending in `auth`) a scheme word is
///   kept and the credentials after it masked (`Authorization: Basic ***`).
///
/// A plain value ends at whitespace or one of ``& , ; " ' ) ] } < > \``. The scan is one pass,
/// linear in the text, and allocates only when it masks something.
///
/// ```
/// use agent_surface_policy::{Credentials, Redactor};
///
/// let r = Credentials::new();
/// assert_eq!(r.redact("connect postgres://admin:hunter2@db:5432/prod"), "connect postgres://admin:***@db:5432/prod");
/// assert_eq!(r.redact("Authorization: Bearer eyJhbGci.x.y"), "Authorization: Bearer ***");
/// assert_eq!(r.redact(r#"{"api_key": "sk_live_51H", "user": "ann"}"#), r#"{"api_key": "***", "user": "ann"}"#);
/// assert_eq!(r.redact("nothing to see"), "nothing to see");
/// // More key names:
/// let r = Credentials::with_keys(["session"]);
/// assert_eq!(r.redact("session=abc&page=2"), "session=***&page=2");
/// ```
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    /// Key names masked besides the built-in ones, lower-case (a key containing one matches).
    extra_keys: Vec<Box<str>>,
}

impl Credentials {
    /// The built-in rules.
    pub fn new() -> Credentials {
        Credentials::default()
    }

    /// The built-in rules, and the values of keys containing any of `keys` (compared ignoring
    /// ASCII case).
    pub fn with_keys<K: AsRef<str>>(keys: impl IntoIterator<Item = K>) -> Credentials {
        let extra_keys = keys
            .into_iter()
            .map(|k| k.as_ref().to_ascii_lowercase().into_boxed_str())
            .filter(|k| !k.is_empty())
            .collect();
        Credentials { extra_keys }
    }
}

impl Redactor for Credentials {
    fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let masks = scan(text.as_bytes(), &self.extra_keys);
        if masks.is_empty() { Cow::Borrowed(text) } else { Cow::Owned(apply(text, masks)) }
    }
}

/// The redactor [`install_redactor`] installed, if any.
static INSTALLED: OnceLock<Box<dyn Redactor>> = OnceLock::new();

thread_local! {
    /// Set while the installed redactor runs on this thread: a panic inside it is logged by the
    /// panic hook, whose text is redacted with the default instead of recursing.
    static REDACTING: Cell<bool> = const { Cell::new(false) };
}

/// [`install_redactor`] was called before: the first redactor stays.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedactorAlreadyInstalled;

impl fmt::Display for RedactorAlreadyInstalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a redactor is already installed")
    }
}

impl std::error::Error for RedactorAlreadyInstalled {}

/// Installs the process-wide redactor of the operator channel, in place of [`Credentials`].
/// Call it once, at startup, before the first call is served; text logged before it was
/// redacted by the default.
///
/// ```
/// use agent_surface_policy::{Credentials, install_redactor, redact};
///
/// install_redactor(Credentials::with_keys(["session"])).unwrap();
/// assert_eq!(redact("session=abc token=xyz"), "session=*** token=***");
/// assert!(install_redactor(Credentials::new()).is_err());
/// ```
///
/// # Errors
///
/// When a redactor was installed before.
pub fn install_redactor(redactor: impl Redactor) -> Result<(), RedactorAlreadyInstalled> {
    INSTALLED.set(Box::new(redactor)).map_err(|_| RedactorAlreadyInstalled)
}

/// `text` as the operator channel may carry it: through the installed redactor, or
/// [`Credentials`] when none was installed. A redactor that panics withholds the whole text.
///
/// ```
/// assert_eq!(agent_surface_policy::redact("password=hunter2 retries=3"), "password=*** retries=3");
/// ```
pub fn redact(text: &str) -> Cow<'_, str> {
    let Some(installed) = INSTALLED.get() else { return Credentials::new().redact(text) };
    if REDACTING.with(Cell::get) {
        return Credentials::new().redact(text);
    }
    REDACTING.with(|r| r.set(true));
    let redacted = std::panic::catch_unwind(AssertUnwindSafe(|| installed.redact(text)));
    REDACTING.with(|r| r.set(false));
    redacted.unwrap_or(Cow::Borrowed(REDACTOR_PANICKED))
}

/// `value`'s `Display`, redacted: the form a cause takes in a `tracing` field
/// (`cause = %redacted(&e)`). It is formatted only when the event is logged.
///
/// ```
/// let e = std::io::Error::other("redis://:s3cret@cache:6379 refused");
/// assert_eq!(agent_surface_policy::redacted(&e).to_string(), "redis://:***@cache:6379 refused");
/// ```
pub fn redacted<T: fmt::Display>(value: T) -> Redacted<T> {
    Redacted(value)
}

/// A value whose `Display` is redacted; see [`redacted`].
#[derive(Debug, Clone, Copy)]
pub struct Redacted<T>(T);

impl<T: fmt::Display> fmt::Display for Redacted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.0.to_string()))
    }
}

/// How far back from a separator a key is looked for (bounds the scan to linear time).
const MAX_KEY_BYTES: usize = 64;

/// Key fragments whose presence anywhere in a key marks its value secret.
const SECRET_KEY_PARTS: &[&str] =
    &["password", "passwd", "secret", "token", "apikey", "api_key", "api-key", "credential", "authorization", "cookie"];

/// Key endings that mark its value secret.
const SECRET_KEY_ENDINGS: &[&str] = &["key", "pwd", "pass", "auth"];

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// Where a plain value (or a bearer token) ends.
fn ends_value(b: u8) -> bool {
    b.is_ascii_whitespace() || matches!(b, b'&' | b',' | b';' | b'"' | b'\'' | b')' | b']' | b'}' | b'<' | b'>' | b'\\')
}

/// Where a URL's authority ends.
fn ends_authority(b: u8) -> bool {
    b.is_ascii_whitespace() || matches!(b, b'/' | b'?' | b'#' | b'"' | b'\'' | b'<' | b'>' | b'\\')
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// What a key is, for masking.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    /// Not a secret's key.
    Plain,
    /// Its value is a secret.
    Secret,
    /// Its value is a scheme and credentials (`Authorization: Basic abc`).
    Authorization,
}

fn classify(key: &[u8], extra: &[Box<str>]) -> Key {
    if key.is_empty() {
        return Key::Plain;
    }
    let mut lower = [0u8; MAX_KEY_BYTES];
    let lower = &mut lower[..key.len()];
    lower.copy_from_slice(key);
    lower.make_ascii_lowercase();
    let contains = |part: &[u8]| lower.windows(part.len()).any(|w| w == part);
    if contains(b"authorization") || lower.ends_with(b"auth") {
        return Key::Authorization;
    }
    let secret = SECRET_KEY_PARTS.iter().any(|p| contains(p.as_bytes()))
        || SECRET_KEY_ENDINGS.iter().any(|e| lower.ends_with(e.as_bytes()))
        || extra.iter().any(|k| k.len() <= lower.len() && contains(k.as_bytes()));
    if secret { Key::Secret } else { Key::Plain }
}

/// The key just before the separator at `sep`: blanks, closing quotes (or backslashes of an
/// escaped quote), then the key's bytes, looking back at most [`MAX_KEY_BYTES`].
fn key_before(b: &[u8], sep: usize) -> &[u8] {
    let floor = sep.saturating_sub(MAX_KEY_BYTES);
    let mut end = sep;
    while end > floor && is_blank(b[end - 1]) {
        end -= 1;
    }
    while end > floor && matches!(b[end - 1], b'"' | b'\'' | b'\\') {
        end -= 1;
    }
    let mut start = end;
    while start > floor && is_key_byte(b[start - 1]) {
        start -= 1;
    }
    &b[start..end]
}

/// The end of the plain value starting at `from`.
fn plain_end(b: &[u8], from: usize) -> usize {
    b[from..].iter().position(|&c| ends_value(c)).map_or(b.len(), |n| from + n)
}

/// The value after a separator ending before `from`: the range to mask, if any.
fn value_range(b: &[u8], from: usize, key: Key) -> Option<(usize, usize)> {
    let mut j = from;
    while j < b.len() && is_blank(b[j]) {
        j += 1;
    }
    let first = *b.get(j)?;
    if first == b'"' || first == b'\'' {
        // Quoted: to the closing quote (skipping escapes), or to the end.
        let mut k = j + 1;
        while k < b.len() && b[k] != first {
            k += if b[k] == b'\\' { 2 } else { 1 };
        }
        let end = k.min(b.len());
        return (end > j + 1).then_some((j + 1, end));
    }
    if first == b'\\' && matches!(b.get(j + 1), Some(b'"' | b'\'')) {
        // An escaped quote (a JSON document inside a string): to the next backslash or quote.
        let start = j + 2;
        let end = b[start..].iter().position(|&c| matches!(c, b'\\' | b'"' | b'\'')).map_or(b.len(), |n| start + n);
        return (end > start).then_some((start, end));
    }
    let end = plain_end(b, j);
    if end == j {
        return None;
    }
    let word = &b[j..end];
    let scheme =
        (key == Key::Authorization && word.iter().all(u8::is_ascii_alphabetic)) || word.eq_ignore_ascii_case(b"bearer");
    if scheme {
        // `Basic abc`, `Bearer xyz`: keep the scheme, mask the credentials after it.
        let mut t = end;
        while t < b.len() && is_blank(b[t]) {
            t += 1;
        }
        let token_end = plain_end(b, t);
        if t > end && token_end > t {
            return Some((t, token_end));
        }
    }
    Some((j, end))
}

/// Where the scan resumes after masking `range`: at the last byte in it that is neither a key's
/// nor a blank, so that a separator or a `Bearer` near its end still has its value beyond the
/// range masked (`Bearer password: x`, `token=authorization=Basic x`, `token:"password = "x"`);
/// past the range when there is none. What lies
/// before that byte is masked already, so it need not be read again, which keeps the scan linear.
fn resume_after(b: &[u8], (start, end): (usize, usize)) -> usize {
    // A masked token that is itself `Bearer` (`Bearer Bearer x`): its own token follows.
    let word = end.saturating_sub(6).max(start);
    if end - word == 6 && b[word..end].eq_ignore_ascii_case(b"bearer") && (word == 0 || !is_key_byte(b[word - 1])) {
        return word;
    }
    b[start..end].iter().rposition(|&c| !is_key_byte(c) && !is_blank(c)).map_or(end, |n| start + n)
}

/// The ranges of `b` to mask, unordered and possibly overlapping; empty (without allocating)
/// when there are none.
fn scan(b: &[u8], extra: &[Box<str>]) -> Vec<(usize, usize)> {
    let mut masks = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let mut next = i + 1;
        if c == b':' && b[i + 1..].starts_with(b"//") {
            // A URL: mask its userinfo's password (or the whole userinfo when it has no `:`).
            // The scan goes on inside the userinfo, so a key there is still found.
            let start = i + 3;
            let end = b[start..].iter().position(|&c| ends_authority(c)).map_or(b.len(), |n| start + n);
            if let Some(at) = b[start..end].iter().rposition(|&c| c == b'@').map(|n| start + n) {
                let secret_from = b[start..at].iter().position(|&c| c == b':').map_or(start, |n| start + n + 1);
                if at > secret_from {
                    masks.push((secret_from, at));
                }
            }
            next = start;
        } else if (c == b'=' || c == b':')
            && b.get(i + 1) != Some(&c)
            && (i == 0 || !matches!(b[i - 1], b':' | b'=' | b'!' | b'<' | b'>'))
        {
            let key = classify(key_before(b, i), extra);
            if key != Key::Plain
                && let Some(range) = value_range(b, i + 1, key)
            {
                masks.push(range);
                next = resume_after(b, range);
            }
        } else if (c == b'b' || c == b'B')
            && (i == 0 || !is_key_byte(b[i - 1]))
            && b.len() >= i + 7
            && b[i..i + 6].eq_ignore_ascii_case(b"bearer")
            && is_blank(b[i + 6])
        {
            let mut t = i + 7;
            while t < b.len() && is_blank(b[t]) {
                t += 1;
            }
            let end = plain_end(b, t);
            if end > t {
                masks.push((t, end));
                next = resume_after(b, (t, end));
            } else {
                next = t;
            }
        }
        i = next.max(i + 1);
    }
    masks
}

/// `text` with `masks` (byte ranges on ASCII boundaries) replaced by [`MASK`], merged where they
/// overlap or touch.
fn apply(text: &str, mut masks: Vec<(usize, usize)>) -> String {
    masks.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for (start, end) in masks {
        if end <= copied {
            continue;
        }
        if start > copied {
            out.push_str(&text[copied..start]);
            out.push_str(MASK);
        } else if copied == 0 && start == 0 {
            out.push_str(MASK);
        }
        copied = end;
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(input: &str, expected: &str) {
        assert_eq!(Credentials::new().redact(input), expected, "{input:?}");
    }

    #[test]
    fn credentials_are_masked_and_the_rest_is_kept() {
        check("", "");
        check("no secrets here: db is down", "no secrets here: db is down");
        check("postgres://admin:hunter2@db.internal:5432/prod", "postgres://admin:***@db.internal:5432/prod");
        check("postgres://admin:p@ss@db/prod", "postgres://admin:***@db/prod");
        check("https://ghp_abc@github.example/x", "https://***@github.example/x");
        check("https://example.com/a?b=c", "https://example.com/a?b=c");
        check("mailto://example.com/a@b", "mailto://example.com/a@b");
        check("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9", "Authorization: Bearer ***");
        check("authorization=Basic dXNlcjpwYXNz, next", "authorization=Basic ***, next");
        check("header Bearer   abc.def;", "header Bearer   ***;");
        check("the bearer is unknown", "the bearer *** unknown");
        check("AWS_SECRET_ACCESS_KEY=AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY=***");
        check("token=sk_live_51H&page=2", "token=***&page=2");
        check("PASSWORD = hunter2", "PASSWORD = ***");
        check(r#"{"password":"hun\"ter2","n":1}"#, r#"{"password":"***","n":1}"#);
        check(r#"{\"apiKey\":\"k-123\"}"#, r#"{\"apiKey\":\"***\"}"#);
        check("Config { secret: 'x y z' }", "Config { secret: '***' }");
        check("apikey:abc x-api-key: def", "apikey:*** x-api-key: ***");
        check("api_key: Bearer abc", "api_key: Bearer ***");
        check("Bearer password: abc", "Bearer *** ***");
        check(r#"token:"password = "abc""#, r#"token:"***"***""#);
        check("password='x token:'abc'", "password='***'***'");
        check("Bearer Bearer abc", "Bearer *** ***");
        check("secret=", "secret=");
        check("token::Kind and a == b and key==value", "token::Kind and a == b and key==value");
        check("password=\"unterminated", "password=\"***");
        check("key=é", "key=***");
    }

    #[test]
    fn masks_that_overlap_or_start_the_text_merge() {
        check("x://token=abc:def@host", "x://token=***");
        assert_eq!(apply("abcdef", vec![(0, 2), (1, 3), (4, 5)]), "***d***f");
    }

    #[test]
    fn extra_keys_extend_the_default() {
        let r = Credentials::with_keys(["Session", ""]);
        assert_eq!(r.redact("SESSION_ID=42 user=ann"), "SESSION_ID=*** user=ann");
    }
}
