//! [`RedisInboxStore`]: the approval inbox's sessions, used form nonces and form-signing keys in
//! Redis, so that replicas behind one address serve each other's sessions (no sticky routing).
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{prefix}inbox-s:{lookup}` | hash | a session: `v` (format), `sub` (subject), `exp` (expiry, Unix ms), `sealed` (the credential sealed by the inbox); lives until `exp` |
//! | `{prefix}inbox-subj:{subject}` | sorted set | the lookup keys of the subject's sessions, scored by expiry (the per-subject cap) |
//! | `{prefix}inbox-all` | sorted set | every session's lookup key, scored by expiry (the global cap) |
//! | `{prefix}inbox-n:{scope}:{nonce}` | string | `{v}:{until}`: the format and until when the used form token could still be presented (Unix ms on the inbox's clock; Redis deletes it then too) |
//! | `{prefix}inbox-key:{name}` | hash | a form-signing key: `v` (format), `key` (32 bytes), set once |
//!
//! `{lookup}` is the 64 hex digits of the lookup key, a digest of the session id: no key or value
//! holds the session id or a usable token. Each operation is one script (one round trip), so the
//! caps and the single use of a nonce hold among replicas.

use agent_surface_core::Timestamp;
use agent_surface_policy::Reach;
use agent_surface_policy::StoreError;
use agent_surface_policy::inbox::{InboxSession, InboxStore, NonceUse, SessionLimits};
use futures_util::future::BoxFuture;
use redis::Script;

use crate::{RedisStores, ms};

/// The format version of the records this build writes.
const FORMAT: i64 = 1;

/// Removes a session from the sets and deletes it. The last key (of the scripts that use it) is
/// the global set; ARGV starts with the session key prefix and the subject set prefix.
const DROP: &str = r"
local function drop(member)
  local all = KEYS[#KEYS]
  local skey = ARGV[1] .. member
  local sub = redis.call('HGET', skey, 'sub')
  redis.call('DEL', skey)
  redis.call('ZREM', all, member)
  if sub then redis.call('ZREM', ARGV[2] .. sub, member) end
end
";

/// Opens a session. KEYS: the session, its subject's set, the global set. ARGV: session key
/// prefix, subject set prefix, lookup hex, subject, expiry, now, sealed, per subject, total, format.
const OPEN: &str = r"
local member = ARGV[3]
local exp = tonumber(ARGV[5])
local now = tonumber(ARGV[6])
local per = tonumber(ARGV[8])
local total = tonumber(ARGV[9])
if redis.call('EXISTS', KEYS[1]) == 1 then drop(member) end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do drop(m) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local n = redis.call('ZCARD', KEYS[2])
if n >= per then
  for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, n - per)) do drop(m) end
end
local all = redis.call('ZCARD', KEYS[3])
if all >= total then
  for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, all - total)) do drop(m) end
end
local ttl = math.max(1, exp - now)
redis.call('HSET', KEYS[1], 'v', ARGV[10], 'sub', ARGV[4], 'exp', ARGV[5], 'sealed', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('ZADD', KEYS[2], exp, member)
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
redis.call('ZADD', KEYS[3], exp, member)
return 1
";

/// Ends a session. KEYS: the session, the global set. ARGV: session key prefix,
/// subject set prefix, lookup hex.
const CLOSE: &str = r"
drop(ARGV[3])
return 1
";

/// Marks a nonce used unless it is (until a time after now). KEYS: the nonce. ARGV: its time to
/// live (ms), now, the value (`{v}:{until}`).
const USE_NONCE: &str = r"
local held = redis.call('GET', KEYS[1])
if held then
  local untilv = tonumber(string.match(held, ':(%d+)$') or '0')
  if untilv > tonumber(ARGV[2]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[1])
return 1
";

/// The key, set from the candidate if absent. KEYS: the key's hash. ARGV: candidate, format.
const MAC_KEY: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'v', ARGV[2], 'key', ARGV[1])
end
return redis.call('HMGET', KEYS[1], 'v', 'key')
";

/// An [`InboxStore`] in Redis, shared by every replica on it: a session is a hash
/// `{prefix}inbox-s:{lookup}` (its format, subject, expiry and sealed credential, never a usable
/// token), indexed by subject and in all for the caps; a used form nonce is a string that lives
/// until its token expires; a form key is set once. Each operation is one script.
#[derive(Clone, Debug)]
pub struct RedisInboxStore {
    stores: RedisStores,
    scripts: std::sync::Arc<Scripts>,
}

#[derive(Debug)]
struct Scripts {
    open: Script,
    close: Script,
    use_nonce: Script,
    mac_key: Script,
}

impl RedisInboxStore {
    pub(crate) fn new(stores: RedisStores) -> RedisInboxStore {
        let scripts = Scripts {
            open: Script::new(&format!("{DROP}\n{OPEN}")),
            close: Script::new(&format!("{DROP}\n{CLOSE}")),
            use_nonce: Script::new(USE_NONCE),
            mac_key: Script::new(MAC_KEY),
        };
        RedisInboxStore { stores, scripts: std::sync::Arc::new(scripts) }
    }

    fn session_prefix(&self) -> String {
        self.stores.key("inbox-s", "")
    }

    fn subject_prefix(&self) -> String {
        self.stores.key("inbox-subj", "")
    }

    fn all(&self) -> String {
        format!("{}inbox-all", self.stores.config.prefix)
    }
}

fn hex(lookup: &[u8; 32]) -> String {
    agent_surface_core::hex::Hex(lookup).to_string()
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Unavailable(format!("redis: an inbox {what} that cannot be read"))
}

impl InboxStore for RedisInboxStore {
    fn reach(&self) -> Reach {
        Reach::Shared
    }

    fn open_session<'a>(
        &'a self,
        lookup: [u8; 32],
        session: InboxSession,
        limits: SessionLimits,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let member = hex(&lookup);
            let mut call = self.scripts.open.key(format!("{}{member}", self.session_prefix()));
            call.key(format!("{}{}", self.subject_prefix(), session.subject))
                .key(self.all())
                .arg(self.session_prefix())
                .arg(self.subject_prefix())
                .arg(&member)
                .arg(&session.subject)
                .arg(ms(session.expires_at))
                .arg(ms(now))
                .arg(session.sealed.as_slice())
                .arg(limits.per_subject)
                .arg(limits.total)
                .arg(FORMAT);
            let _: i64 = self.stores.run(call).await?;
            Ok(())
        })
    }

    fn session<'a>(
        &'a self,
        lookup: [u8; 32],
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<InboxSession>, StoreError>> {
        Box::pin(async move {
            let key = format!("{}{}", self.session_prefix(), hex(&lookup));
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(&key).arg("v").arg("sub").arg("exp").arg("sealed");
            let fields: Vec<Option<Vec<u8>>> = self.stores.query(cmd).await?;
            let [Some(v), Some(sub), Some(exp), Some(sealed)] =
                <[Option<Vec<u8>>; 4]>::try_from(fields).map_err(|_| corrupt("session"))?
            else {
                return Ok(None);
            };
            let number = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|t| t.parse::<u64>().ok());
            let v = number(&v).ok_or_else(|| corrupt("session"))?;
            if v > FORMAT as u64 {
                return Err(corrupt("session of a later format"));
            }
            let exp = number(&exp).ok_or_else(|| corrupt("session"))?;
            let subject = String::from_utf8(sub).map_err(|_| corrupt("session"))?;
            if exp <= now.unix_millis() {
                return Ok(None);
            }
            Ok(Some(InboxSession::new(subject, Timestamp::from_unix_millis(exp), sealed)))
        })
    }

    fn close_session<'a>(&'a self, lookup: [u8; 32]) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let member = hex(&lookup);
            let mut call = self.scripts.close.key(format!("{}{member}", self.session_prefix()));
            call.key(self.all()).arg(self.session_prefix()).arg(self.subject_prefix()).arg(member);
            let _: i64 = self.stores.run(call).await?;
            Ok(())
        })
    }

    fn use_nonce<'a>(
        &'a self,
        scope: &'a str,
        nonce: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<NonceUse, StoreError>> {
        Box::pin(async move {
            let mut call = self.scripts.use_nonce.key(self.stores.key("inbox-n", &format!("{scope}:{nonce}")));
            call.arg(until.unix_millis().saturating_sub(now.unix_millis()).max(1))
                .arg(ms(now))
                .arg(format!("{FORMAT}:{}", ms(until)));
            let fresh: i64 = self.stores.run(call).await?;
            Ok(if fresh == 1 { NonceUse::Fresh } else { NonceUse::Used })
        })
    }

    fn nonce_used<'a>(
        &'a self,
        scope: &'a str,
        nonce: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("GET");
            cmd.arg(self.stores.key("inbox-n", &format!("{scope}:{nonce}")));
            let Some(held): Option<String> = self.stores.query(cmd).await? else { return Ok(false) };
            let (v, until) = held.split_once(':').ok_or_else(|| corrupt("nonce"))?;
            let (v, until) = v.parse::<i64>().ok().zip(until.parse::<u64>().ok()).ok_or_else(|| corrupt("nonce"))?;
            if v > FORMAT {
                return Err(corrupt("nonce of a later format"));
            }
            Ok(until > now.unix_millis())
        })
    }

    fn mac_key<'a>(&'a self, name: &'a str, candidate: [u8; 32]) -> BoxFuture<'a, Result<[u8; 32], StoreError>> {
        Box::pin(async move {
            let mut call = self.scripts.mac_key.key(self.stores.key("inbox-key", name));
            call.arg(candidate.as_slice()).arg(FORMAT);
            let (v, key): (Option<i64>, Option<Vec<u8>>) = self.stores.run(call).await?;
            if v.is_none_or(|v| v > FORMAT) {
                return Err(corrupt("key of a later format"));
            }
            key.and_then(|k| <[u8; 32]>::try_from(k).ok()).ok_or_else(|| corrupt("key"))
        })
    }
}
