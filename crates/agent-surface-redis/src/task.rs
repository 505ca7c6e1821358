//! [`RedisTaskStore`]: task records in Redis, one hash per task, one script per operation.
//!
//! | field | holds |
//! |---|---|
//! | `id`, `own` | the task id and its owner (`=` and the owner's key; empty when anonymous) |
//! | `st`, `msg`, `p` | the status, the status message and the payload (JSON) |
//! | `ca`, `ua`, `ea`, `ru` | created, updated, expires at (once final), running until (Unix ms) |
//! | `cr` | `1` once a cancellation was requested |
//! | `lu` | the running process's lease (Unix ms; empty or absent: none) |

use agent_surface_core::Timestamp;
use agent_surface_policy::{
    StoreError, TaskStore,
    task::{TaskRecord, TaskStatus},
};
use futures_util::future::BoxFuture;
use redis::Script;
use serde_json::Value;

use crate::{RedisStores, ms, ttl_ms};

/// Creates a record unless the key exists. ARGV: id, owner, st, msg, ca, ua, ea, ru, p, cr, ttl, lu.
const CREATE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'own', ARGV[2], 'st', ARGV[3], 'msg', ARGV[4], 'ca', ARGV[5],
  'ua', ARGV[6], 'ea', ARGV[7], 'ru', ARGV[8], 'p', ARGV[9], 'cr', ARGV[10], 'lu', ARGV[12])
redis.call('PEXPIRE', KEYS[1], ARGV[11])
return 1
";

/// The fields of a live record (final: until `ea`; running: until `ru`). ARGV: now.
const FIELDS: &str = r"
local function live(now)
  local f = redis.call('HMGET', KEYS[1], 'id', 'own', 'st', 'msg', 'ca', 'ua', 'ea', 'ru', 'p', 'cr', 'lu')
  if not f[1] then return nil end
  f[11] = f[11] or ''
  local final = f[3] == 'completed' or f[3] == 'failed' or f[3] == 'cancelled'
  local untilv = tonumber(f[8])
  if final then untilv = tonumber(f[7]) end
  if now >= untilv then return nil end
  return f, final
end
";

/// The live record. ARGV: now.
const GET: &str = r"
local f = live(tonumber(ARGV[1]))
if not f then return {} end
return f
";

/// Moves a live, non-final record to a status (final: kept its time to live from now; not final:
/// kept until it runs out). ARGV: status, payload, message, now.
const FINISH: &str = r"
local now = tonumber(ARGV[4])
local f, final = live(now)
if not f or final then return 0 end
local ea = now + (tonumber(f[7]) - tonumber(f[5]))
local keep = ea
local st = ARGV[1]
if st ~= 'completed' and st ~= 'failed' and st ~= 'cancelled' then keep = math.max(ea, tonumber(f[8])) end
redis.call('HSET', KEYS[1], 'st', st, 'p', ARGV[2], 'msg', ARGV[3], 'ua', ARGV[4], 'ea', string.format('%d', ea))
redis.call('PEXPIRE', KEYS[1], string.format('%d', math.max(1, keep - now)))
return 1
";

/// Sets a live, non-final record's lease; returns the record. ARGV: lease until, now.
const RENEW: &str = r"
local f, final = live(tonumber(ARGV[2]))
if not f then return {} end
if not final then
  redis.call('HSET', KEYS[1], 'lu', ARGV[1])
  f[11] = ARGV[1]
end
return f
";

/// Ends a live, non-final record whose lease lapsed: completed with the payload and message, kept
/// its time to live from now; returns the record after (unchanged when not abandoned). ARGV:
/// payload, message, now.
const END_LAPSED: &str = r"
local now = tonumber(ARGV[3])
local f, final = live(now)
if not f then return {} end
if final or f[11] == '' or tonumber(f[11]) > now then return f end
local ea = now + (tonumber(f[7]) - tonumber(f[5]))
redis.call('HSET', KEYS[1], 'st', 'completed', 'p', ARGV[1], 'msg', ARGV[2], 'ua', ARGV[3], 'ea', string.format('%d', ea))
redis.call('PEXPIRE', KEYS[1], string.format('%d', math.max(1, ea - now)))
f[3] = 'completed'
f[4] = ARGV[2]
f[6] = ARGV[3]
f[7] = string.format('%d', ea)
f[9] = ARGV[1]
return f
";

/// Marks a live, non-final record as cancel-requested; returns the record. ARGV: now.
const CANCEL: &str = r"
local f, final = live(tonumber(ARGV[1]))
if not f then return {} end
if not final then
  redis.call('HSET', KEYS[1], 'cr', '1')
  f[10] = '1'
end
return f
";

fn status_str(status: TaskStatus) -> &'static str {
    status.as_str()
}

fn status_of(s: &str) -> Option<TaskStatus> {
    Some(match s {
        "working" => TaskStatus::Working,
        "input_required" => TaskStatus::InputRequired,
        "completed" => TaskStatus::Completed,
        "failed" => TaskStatus::Failed,
        "cancelled" => TaskStatus::Cancelled,
        _ => return None,
    })
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Unavailable(format!("redis: a task record is corrupt ({what})"))
}

/// The record from the fields a script returned (`[]`: none).
fn record_of(fields: Vec<String>) -> Result<Option<TaskRecord>, StoreError> {
    let Ok([id, own, st, msg, ca, ua, ea, ru, p, cr, lu]) = <[String; 11]>::try_from(fields) else {
        return Ok(None);
    };
    let time = |s: &str| s.parse::<u64>().map(Timestamp::from_unix_millis).map_err(|_| corrupt("time"));
    let (created, running_until) = (time(&ca)?, time(&ru)?);
    let expires = time(&ea)?;
    let mut record = TaskRecord::working(
        id,
        own.strip_prefix('=').map(str::to_string),
        created,
        expires.saturating_duration_since(created),
        running_until.saturating_duration_since(created),
    );
    record.status = status_of(&st).ok_or_else(|| corrupt("status"))?;
    record.status_message = (!msg.is_empty()).then_some(msg);
    record.updated_at = time(&ua)?;
    record.expires_at = expires;
    record.running_until = running_until;
    record.payload = if p.is_empty() { None } else { Some(serde_json::from_str(&p).map_err(|_| corrupt("payload"))?) };
    record.cancel_requested = cr == "1";
    record.lease_until = if lu.is_empty() { None } else { Some(time(&lu)?) };
    Ok(Some(record))
}

/// A [`TaskStore`] in Redis, shared by every replica that connects to it: a task created on one
/// replica is read, cancelled and finished through any other. Payloads over
/// [`crate::RedisConfig::max_task_payload_bytes`] are refused with `StoreError::Full`.
#[derive(Clone, Debug)]
pub struct RedisTaskStore {
    stores: RedisStores,
    scripts: std::sync::Arc<Scripts>,
}

#[derive(Debug)]
struct Scripts {
    create: Script,
    get: Script,
    finish: Script,
    cancel: Script,
    renew: Script,
    end_lapsed: Script,
}

impl RedisTaskStore {
    pub(crate) fn new(stores: RedisStores) -> RedisTaskStore {
        let with_live = |body: &str| Script::new(&format!("{FIELDS}\n{body}"));
        let scripts = Scripts {
            create: Script::new(CREATE),
            get: with_live(GET),
            finish: with_live(FINISH),
            cancel: with_live(CANCEL),
            renew: with_live(RENEW),
            end_lapsed: with_live(END_LAPSED),
        };
        RedisTaskStore { stores, scripts: std::sync::Arc::new(scripts) }
    }

    fn key(&self, id: &str) -> String {
        self.stores.key("task", id)
    }
}

impl TaskStore for RedisTaskStore {
    fn create<'a>(&'a self, record: TaskRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let payload = match &record.payload {
                Some(p) => p.to_string(),
                None => String::new(),
            };
            let mut call = self.scripts.create.key(self.key(&record.id));
            call.arg(&record.id)
                .arg(record.owner.as_ref().map_or(String::new(), |o| format!("={o}")))
                .arg(status_str(record.status))
                .arg(record.status_message.as_deref().unwrap_or(""))
                .arg(ms(record.created_at))
                .arg(ms(record.updated_at))
                .arg(ms(record.expires_at))
                .arg(ms(record.running_until))
                .arg(payload)
                .arg(if record.cancel_requested { "1" } else { "0" })
                .arg(ttl_ms(record.running_until.max(record.expires_at).saturating_duration_since(now)))
                .arg(record.lease_until.map(ms).unwrap_or_default());
            let created: i64 = self.stores.run(call).await?;
            if created == 1 {
                Ok(())
            } else {
                Err(StoreError::Unavailable(format!("task id {} already exists", record.id)))
            }
        })
    }

    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let mut call = self.scripts.get.key(self.key(id));
            call.arg(ms(now));
            record_of(self.stores.run(call).await?)
        })
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        status: TaskStatus,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let payload = payload.map(|p| p.to_string()).unwrap_or_default();
            if payload.len() > self.stores.config.max_task_payload_bytes {
                return Err(StoreError::Full { capacity: self.stores.config.max_task_payload_bytes });
            }
            let mut call = self.scripts.finish.key(self.key(id));
            call.arg(status_str(status)).arg(payload).arg(message.unwrap_or_default()).arg(ms(now));
            let moved: i64 = self.stores.run(call).await?;
            Ok(moved == 1)
        })
    }

    fn request_cancel<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let mut call = self.scripts.cancel.key(self.key(id));
            call.arg(ms(now));
            record_of(self.stores.run(call).await?)
        })
    }

    fn renew<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let mut call = self.scripts.renew.key(self.key(id));
            call.arg(ms(until)).arg(ms(now));
            record_of(self.stores.run(call).await?)
        })
    }

    fn end_lapsed<'a>(
        &'a self,
        id: &'a str,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        Box::pin(async move {
            let payload = payload.map(|p| p.to_string()).unwrap_or_default();
            if payload.len() > self.stores.config.max_task_payload_bytes {
                return Err(StoreError::Full { capacity: self.stores.config.max_task_payload_bytes });
            }
            let mut call = self.scripts.end_lapsed.key(self.key(id));
            call.arg(payload).arg(message.unwrap_or_default()).arg(ms(now));
            record_of(self.stores.run(call).await?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips_through_its_stored_name() {
        for status in [
            TaskStatus::Working,
            TaskStatus::InputRequired,
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
        ] {
            assert_eq!(status_of(status_str(status)), Some(status));
        }
        assert_eq!(status_of("nope"), None);
    }
}
