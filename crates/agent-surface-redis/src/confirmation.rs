//! [`RedisConfirmationStore`]: confirmations in Redis, one hash per record, one script per
//! operation.
//!
//! | field | holds |
//! |---|---|
//! | `rec` | the record's fixed part as JSON (id, binding, requester, summary, effect, origin, times, input preview, quorum, the requesting call's invocation and correlation ids) |
//! | `c`, `cap`, `r`, `i`, `h` | the binding (consumer key, capability, registration, instance, input hash) |
//! | `req` | the requester's subject (empty when anonymous) |
//! | `rq`, `cs` | the requester's subject and the consumer key as a person reads them (`agent_surface_policy::principal::skeleton`; `rq` is `\0` when anonymous), for the self-approval rule |
//! | `s`, `by` | the state (`pending`, `approved`, `denied`, `consumed`, `withdrawn`) and the approver (the approvers, separated by `, `, for a quorum) |
//! | `n` | how many approvals the record needs: its [`Quorum`]'s slots (its roles and named approvers are in `rec`; the engine checks them and works out which slots an approver may fill) |
//! | `d` | the decisions so far, a JSON array of `{a, v, t, k, m}`: approver, verdict (`approve`, `in-person`, `deny`), Unix milliseconds (as a string), the approver as a person reads it (for one decision per approver) and the slots they could fill (bit `i`: slot `i`; absent in records written before slots: every slot) |
//! | `ea`, `ga` | expires at and gone at (Unix milliseconds on the registry's clock) |
//! | `ct` | the consumption token of a consumed record, until it is reinstated ([`ConfirmationStore::reinstate`]) |
//! | `xr` | set once the record's expiry event is recorded ([`ConfirmationStore::expiry_recorded`]; a claim made before claims lapsed set it too, and reads as recorded) |
//! | `xu` | until when a claim to record the expiry holds (Unix ms; [`ConfirmationStore::claim_expiry`]) |
//!
//! Pending records are also indexed in one sorted set, `{prefix}conf-pending` (member the id,
//! score its expiry), for [`ConfirmationStore::list_pending`]: a record leaves it when it is
//! decided or withdrawn, and an expired one when the next listing runs.
//!
//! Every record is indexed by its expiry in a second sorted set, `{prefix}conf-expiry`, for
//! [`ConfirmationStore::list_expired`]: an entry leaves it when a listing past its deadline finds
//! the record consumed, denied, claimed or gone, and every insert drops the entries of records
//! past their retention, so the index holds at most the records the store holds.
//!
//! The confirmations relayed to callers ([`ConfirmationStore::insert_relayed`],
//! [`ConfirmationStore::remember_relayed`]) are one string each, `{prefix}conf-relay:{key}` (the
//! [`RelayKey`]'s 64 hex digits: a digest, never a consumer key or an input) holding the
//! confirmation id, expiring with the record (its `ga`). A request claims the string and adds its
//! record in one script, unless the string holds an open record of the same call, which answers
//! the request instead: racing identical calls open one confirmation.

use agent_surface_core::Timestamp;
use agent_surface_core::details::Origin;
use agent_surface_policy::{
    ConfirmationRecord, ConfirmationStore, Quorum, StoreError,
    confirmation::{
        ApprovalVerdict, ApproverDecision, ConfirmationBinding, ConfirmationState, Consumed, Decided, Inserted,
        Mismatch, Rejection, RelayKey, SlotSet,
    },
};
use futures_util::future::BoxFuture;
use redis::Script;
use serde::{Deserialize, Serialize};

use agent_surface_policy::principal::skeleton;

use crate::{RedisStores, ms, parse_hash, ttl_ms};

/// The longest listing asked of a script: its numbers are doubles, and four times this plus 16
/// (what an expiry listing looks at) is still exact in one.
const MAX_LISTED_EXACTLY: usize = 1 << 48;

/// The fixed part of a record, as stored under `rec`.
#[derive(Serialize, Deserialize)]
struct Fixed {
    id: String,
    consumer_key: String,
    capability: String,
    registration_id: String,
    instance_id: String,
    input_hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    requester: Option<String>,
    summary: String,
    effect: agent_surface_core::Effect,
    origin: Origin,
    created_at: u64,
    expires_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input_preview: Option<String>,
    #[serde(default)]
    quorum: Quorum,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    invocation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    correlation_id: Option<String>,
    /// The requesting consumer key (absent in records written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    consumer: Option<String>,
}

/// One entry of the `d` field.
#[derive(Deserialize)]
struct StoredDecision {
    a: String,
    v: String,
    t: String,
    /// The slots the approver could fill (absent: every slot).
    #[serde(default)]
    m: Option<u32>,
}

/// The `d` field as decisions (`""`, `[]` and `{}`, Lua's empty table, are none).
fn decisions_of(d: &str) -> Option<Vec<ApproverDecision>> {
    if d.is_empty() || d == "{}" {
        return Some(Vec::new());
    }
    let stored: Vec<StoredDecision> = serde_json::from_str(d).ok()?;
    stored
        .into_iter()
        .map(|x| {
            let verdict = match x.v.as_str() {
                "approve" => ApprovalVerdict::Approve,
                "in-person" => ApprovalVerdict::ApproveInPerson,
                "deny" => ApprovalVerdict::Deny,
                _ => return None,
            };
            let slots = x.m.map_or(SlotSet::ANY, SlotSet::from_bits);
            Some(ApproverDecision::new(x.a, verdict, Timestamp::from_unix_millis(x.t.parse().ok()?)).with_slots(slots))
        })
        .collect()
}

impl Fixed {
    fn of(record: &ConfirmationRecord) -> Fixed {
        Fixed {
            id: record.id.clone(),
            consumer_key: record.binding.consumer_key.clone(),
            capability: record.binding.capability.clone(),
            registration_id: record.binding.registration_id.clone(),
            instance_id: record.binding.instance_id.clone(),
            input_hash: record.binding.input_hash.to_string(),
            requester: record.requester.clone(),
            summary: record.summary.clone(),
            effect: record.effect,
            origin: record.origin,
            created_at: record.created_at.unix_millis(),
            expires_at: record.expires_at.unix_millis(),
            input_preview: record.input_preview.clone(),
            quorum: record.quorum.clone(),
            invocation_id: record.invocation_id.clone(),
            correlation_id: record.correlation_id.clone(),
            consumer: record.consumer.clone(),
        }
    }

    fn into_record(self, state: ConfirmationState, decisions: &str) -> Option<ConfirmationRecord> {
        let binding = ConfirmationBinding {
            consumer_key: self.consumer_key,
            capability: self.capability,
            registration_id: self.registration_id,
            instance_id: self.instance_id,
            input_hash: parse_hash(&self.input_hash)?,
        };
        let mut record = ConfirmationRecord::pending(
            self.id,
            binding,
            self.requester,
            self.summary,
            self.effect,
            self.origin,
            Timestamp::from_unix_millis(self.created_at),
            Timestamp::from_unix_millis(self.expires_at),
        )
        .with_input_preview(self.input_preview.as_deref())
        .with_quorum(self.quorum)
        .with_call_ids(self.invocation_id.as_deref(), self.correlation_id.as_deref());
        record.consumer = self.consumer;
        record.state = state;
        let all = record.quorum.all_slots();
        record.decisions = decisions_of(decisions)?
            .into_iter()
            .map(|d| {
                let slots = d.slots.intersect(all);
                d.with_slots(slots)
            })
            .collect();
        Some(record)
    }
}

fn state_of(s: &str, by: String) -> Option<ConfirmationState> {
    Some(match s {
        "pending" => ConfirmationState::Pending,
        "approved" => ConfirmationState::Approved { by },
        "denied" => ConfirmationState::Denied { by },
        "consumed" => ConfirmationState::Consumed { approved_by: by },
        "withdrawn" => ConfirmationState::Withdrawn,
        _ => return None,
    })
}

/// Passes a binding to a script as its next five arguments: c, cap, r, i, h.
fn binding_args<'c, 's>(
    call: &'c mut redis::ScriptInvocation<'s>,
    b: &ConfirmationBinding,
) -> &'c mut redis::ScriptInvocation<'s> {
    call.arg(&b.consumer_key)
        .arg(&b.capability)
        .arg(&b.registration_id)
        .arg(&b.instance_id)
        .arg(b.input_hash.to_string())
}

/// The error for an insert under an id the store holds already.
fn taken(id: &str) -> StoreError {
    StoreError::Unavailable(format!("confirmation id {id} already exists"))
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Unavailable(format!("redis: a confirmation record is corrupt ({what})"))
}

/// The body of [`INSERT`] and [`INSERT_RELAYED`] after the check that the record's key is free:
/// adds the pending record and indexes it (pending, and by expiry, whose entries of records past
/// their retention it drops). KEYS and ARGV[1..15]: as [`INSERT`].
macro_rules! insert_body {
    () => {
        r"
redis.call('HSET', KEYS[1], 'rec', ARGV[1], 'c', ARGV[2], 'cap', ARGV[3], 'r', ARGV[4], 'i', ARGV[5],
  'h', ARGV[6], 'req', ARGV[7], 's', 'pending', 'by', '', 'ea', ARGV[8], 'ga', ARGV[9], 'rq', ARGV[11],
  'cs', ARGV[12], 'n', ARGV[14], 'd', '[]')
redis.call('PEXPIRE', KEYS[1], ARGV[10])
redis.call('ZADD', KEYS[2], ARGV[8], ARGV[13])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[15])
redis.call('ZADD', KEYS[3], ARGV[8], ARGV[13])
"
    };
}

/// Adds a pending record unless the key exists, and indexes it (pending, and by expiry, whose
/// entries of records past their retention it drops). KEYS: the record, the pending index, the
/// expiry index. ARGV: rec, c, cap, r, i, h, req, ea, ga, ttl, rq, cs, id, n, the expiry of the
/// records now past their retention.
const INSERT: &str = concat!(
    r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end",
    insert_body!(),
    "return 1\n"
);

/// Opens a confirmation for a call unless one is open for it: when the relay key holds the id of
/// a held record that is pending or approved, before its deadline, with the same binding, answers
/// `{'held', rec, s, by, d}` and changes nothing; else adds the record as [`INSERT`] does and
/// makes the relay key hold its id for the record's time to live, answering `{'new'}` (or
/// `{'exists'}`, changing nothing, when the id is taken). KEYS: the record, the pending index,
/// the expiry index, the relay key. ARGV: as [`INSERT`], then now and the record key prefix.
const INSERT_RELAYED: &str = concat!(
    r"
local held = redis.call('GET', KEYS[4])
if held then
  local f = redis.call('HMGET', ARGV[17] .. held, 'rec', 's', 'by', 'd', 'ea', 'ga', 'c', 'cap', 'r', 'i', 'h')
  local now = tonumber(ARGV[16])
  if f[1] and (f[2] == 'pending' or f[2] == 'approved') and now < tonumber(f[5]) and now < tonumber(f[6])
    and f[7] == ARGV[2] and f[8] == ARGV[3] and f[9] == ARGV[4] and f[10] == ARGV[5] and f[11] == ARGV[6] then
    return {'held', f[1], f[2], f[3] or '', f[4] or ''}
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end",
    insert_body!(),
    r"redis.call('SET', KEYS[4], ARGV[13], 'PX', ARGV[10])
return {'new'}
"
);

/// Up to a limit of pending, unexpired records, soonest expiry first (expired index entries are
/// dropped), as `rec, d` pairs. KEYS: the pending index. ARGV: now, limit, the record key prefix.
const LIST: &str = r"
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', ARGV[3] .. id, 'rec', 's', 'ea', 'd')
  if f[1] and f[2] == 'pending' and now < tonumber(f[3]) then
    table.insert(out, f[1])
    table.insert(out, f[4] or '')
  elseif not f[1] or f[2] ~= 'pending' then
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
";

/// The live record: `{rec, s, by, d}`, or nothing. ARGV: now.
const GET: &str = r"
local f = redis.call('HMGET', KEYS[1], 'rec', 's', 'by', 'ga', 'd')
if not f[1] or tonumber(ARGV[1]) >= tonumber(f[4]) then return {} end
return {f[1], f[2], f[3], f[5] or ''}
";

/// Records one approver's decision on a pending record: a denial ends it, the approval that
/// fills the quorum's last slot approves it. A denial of an approved record before its deadline
/// revokes it (denied, the denial added to its decisions). An approval is recorded only when it and every
/// approval before it can each be given a distinct slot it could fill (a bipartite matching by
/// augmenting paths, at most 16 slots); an in-person approval counts once. KEYS: the record, the
/// pending index. ARGV: verdict (approve | in-person | deny), approver, now, the approver as a
/// person reads it, id, the slots the approver could fill (bits).
const DECIDE: &str = r"
local f = redis.call('HMGET', KEYS[1], 's', 'by', 'req', 'c', 'ea', 'ga', 'rq', 'cs', 'n', 'd')
local now = tonumber(ARGV[3])
if not f[1] or now >= tonumber(f[6]) then return {'unknown'} end
local d = {}
if f[10] and f[10] ~= '' and f[10] ~= '[]' then d = cjson.decode(f[10]) end
if f[1] == 'approved' and ARGV[1] == 'deny' and now < tonumber(f[5]) then
  local full = bit.lshift(1, math.max(1, math.min(16, tonumber(f[9]) or 1))) - 1
  table.insert(d, {a = ARGV[2], v = 'deny', t = ARGV[3], k = ARGV[4], m = bit.band(tonumber(ARGV[6]) or full, full)})
  redis.call('HSET', KEYS[1], 's', 'denied', 'by', ARGV[2], 'd', cjson.encode(d))
  return {'done'}
end
if f[1] == 'consumed' and ARGV[1] == 'deny' then
  -- A denial cannot undo the use, but the approval must never come back: no give-back.
  redis.call('HDEL', KEYS[1], 'ct')
end
if f[1] ~= 'pending' then return {'not-pending', f[1], f[2]} end
for _, x in ipairs(d) do
  if x.a == ARGV[2] or x.k == ARGV[4] then return {'before'} end
  if ARGV[1] == 'in-person' and x.v == 'in-person' then return {'before'} end
end
local requester = f[3] == ARGV[2] or f[4] == ARGV[2] or f[7] == ARGV[4] or f[8] == ARGV[4]
if ARGV[1] == 'approve' and requester then return {'self'} end
if now >= tonumber(f[5]) then return {'expired'} end
local n = math.max(1, math.min(16, tonumber(f[9]) or 1))
local full = bit.lshift(1, n) - 1
local m = bit.band(tonumber(ARGV[6]) or full, full)
if ARGV[1] ~= 'deny' then
  local sets = {}
  for _, x in ipairs(d) do
    if x.v ~= 'deny' then table.insert(sets, bit.band(tonumber(x.m) or full, full)) end
  end
  table.insert(sets, m)
  local owner = {}
  local function augment(i, seen)
    for slot = 0, n - 1 do
      if not seen[slot] and bit.band(sets[i], bit.lshift(1, slot)) ~= 0 then
        seen[slot] = true
        if owner[slot] == nil or augment(owner[slot], seen) then
          owner[slot] = i
          return true
        end
      end
    end
    return false
  end
  for i = 1, #sets do
    if not augment(i, {}) then return {'slots-taken'} end
  end
end
table.insert(d, {a = ARGV[2], v = ARGV[1], t = ARGV[3], k = ARGV[4], m = m})
local encoded = cjson.encode(d)
if ARGV[1] == 'deny' then
  redis.call('HSET', KEYS[1], 's', 'denied', 'by', ARGV[2], 'd', encoded)
  redis.call('ZREM', KEYS[2], ARGV[5])
  return {'done'}
end
if #d >= (tonumber(f[9]) or 1) then
  local by = {}
  for _, x in ipairs(d) do table.insert(by, x.a) end
  redis.call('HSET', KEYS[1], 's', 'approved', 'by', table.concat(by, ', '), 'd', encoded)
  redis.call('ZREM', KEYS[2], ARGV[5])
else
  redis.call('HSET', KEYS[1], 'd', encoded)
end
return {'done'}
";

/// Consumes approved evidence for a binding, recording the consumption token. ARGV: c, cap, r,
/// i, h, now, token.
const CONSUME: &str = r"
local f = redis.call('HMGET', KEYS[1], 'c', 'cap', 'r', 'i', 'h', 's', 'by', 'ea', 'ga', 'rec', 'd')
local now = tonumber(ARGV[6])
if not f[6] or now >= tonumber(f[9]) then return {'unknown'} end
local differs = ''
if f[1] ~= ARGV[1] then differs = differs .. 'c' end
if f[2] ~= ARGV[2] then differs = differs .. 'a' end
if f[3] ~= ARGV[3] or f[4] ~= ARGV[4] then differs = differs .. 't' end
if f[5] ~= ARGV[5] then differs = differs .. 'i' end
if differs ~= '' then return {'mismatch', differs} end
if f[6] == 'consumed' then return {'consumed'} end
if f[6] == 'denied' then return {'denied'} end
if f[6] == 'withdrawn' or now >= tonumber(f[8]) then return {'expired'} end
if f[6] == 'pending' then return {'pending', f[10], f[11] or ''} end
redis.call('HSET', KEYS[1], 's', 'consumed', 'ct', ARGV[7])
return {'ok', f[7]}
";

/// Gives back evidence its consumer did not use: consumed → approved, when the binding and the
/// consumption token match and the deadline has not passed; the token is cleared. 1 when
/// reinstated, else 0. ARGV: c, cap, r, i, h, now, token.
const REINSTATE: &str = r"
local f = redis.call('HMGET', KEYS[1], 'c', 'cap', 'r', 'i', 'h', 's', 'ea', 'ga', 'ct')
local now = tonumber(ARGV[6])
if not f[6] or now >= tonumber(f[8]) or now >= tonumber(f[7]) then return 0 end
if f[1] ~= ARGV[1] or f[2] ~= ARGV[2] or f[3] ~= ARGV[3] or f[4] ~= ARGV[4] or f[5] ~= ARGV[5] then return 0 end
if f[6] ~= 'consumed' or not f[9] or f[9] == '' or f[9] ~= ARGV[7] then return 0 end
redis.call('HSET', KEYS[1], 's', 'approved')
redis.call('HDEL', KEYS[1], 'ct')
return 1
";

/// Up to a limit of records past their deadline, pending, approved or withdrawn, whose expiry is
/// not recorded nor under a claim that holds, soonest expiry first, as `rec, s, by, d` quadruples;
/// the entries it looks at whose records are none of these (a claimed one stays: its claim may
/// lapse) leave the index. KEYS: the expiry index. ARGV: now, limit,
/// the record key prefix, how many entries to look at.
const LIST_EXPIRED: &str = r"
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[4]))
local out = {}
for _, id in ipairs(ids) do
  if #out >= 4 * limit then break end
  local f = redis.call('HMGET', ARGV[3] .. id, 'rec', 's', 'by', 'd', 'ea', 'ga', 'xr', 'xu')
  local open = f[2] == 'pending' or f[2] == 'approved' or f[2] == 'withdrawn'
  local claimed = f[8] and tonumber(f[8]) > now
  if f[1] and open and not f[7] and claimed then
    -- Under a claim that holds: not listed, kept in the index.
  elseif f[1] and open and not f[7] and now < tonumber(f[6]) and now >= tonumber(f[5]) then
    table.insert(out, f[1])
    table.insert(out, f[2])
    table.insert(out, f[3] or '')
    table.insert(out, f[4] or '')
  elseif not f[1] or not open or f[7] or now >= tonumber(f[6]) then
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
";

/// Withdraws a pending record; returns the state after. KEYS: the record, the pending index.
/// ARGV: now, id.
const WITHDRAW: &str = r"
local f = redis.call('HMGET', KEYS[1], 's', 'by', 'ga')
if not f[1] or tonumber(ARGV[1]) >= tonumber(f[3]) then return {} end
if f[1] == 'pending' then
  redis.call('HSET', KEYS[1], 's', 'withdrawn')
  redis.call('ZREM', KEYS[2], ARGV[2])
  return {'withdrawn', ''}
end
return {f[1], f[2]}
";

/// Claims the recording of a record's expiry until a deadline: 1 when nobody holds it (or the
/// record is gone), 0 while a claim holds or once recorded. KEYS: the record. ARGV: until, now.
const CLAIM_EXPIRY: &str = r"
local f = redis.call('HMGET', KEYS[1], 's', 'xr', 'xu')
if not f[1] then return 1 end
if f[2] then return 0 end
if f[3] and tonumber(f[3]) > tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'xu', ARGV[1])
return 1
";

/// Marks a record's expiry event as recorded, for good. KEYS: the record.
const EXPIRY_RECORDED: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'xr', '1')
redis.call('HDEL', KEYS[1], 'xu')
return 1
";

/// Remembers a confirmation relayed for a call, for as long as its record is held. KEYS: the
/// record, the relay key. ARGV: id, now.
const REMEMBER_RELAYED: &str = r"
local ga = redis.call('HGET', KEYS[1], 'ga')
if not ga then return 0 end
local left = tonumber(ga) - tonumber(ARGV[2])
if left <= 0 then return 0 end
redis.call('SET', KEYS[2], ARGV[1], 'PX', left)
return 1
";

/// The id a relay key holds, while its record is held. KEYS: the relay key. ARGV: now, the
/// record key prefix.
const RELAYED: &str = r"
local id = redis.call('GET', KEYS[1])
if not id then return false end
local ga = redis.call('HGET', ARGV[2] .. id, 'ga')
if not ga or tonumber(ARGV[1]) >= tonumber(ga) then return false end
return id
";

/// Forgets a relay key while it holds the id. KEYS: the relay key. ARGV: id.
const FORGET_RELAYED: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// A [`ConfirmationStore`] in Redis, shared by every replica that connects to it.
///
/// The semantics are those the trait documents, each operation one script: a record is
/// inserted once, decided once per approver until a denial or its quorum's last approval (an
/// approval by the requester refused), consumed once by a call
/// whose binding matches, withdrawn only while pending. Records are kept until `expires_at +
/// retention` ([`crate::RedisConfig::retention`]).
#[derive(Clone, Debug)]
pub struct RedisConfirmationStore {
    stores: RedisStores,
    scripts: std::sync::Arc<Scripts>,
}

#[derive(Debug)]
struct Scripts {
    insert: Script,
    insert_relayed: Script,
    get: Script,
    decide: Script,
    consume: Script,
    withdraw: Script,
    list: Script,
    claim_expiry: Script,
    expiry_recorded: Script,
    reinstate: Script,
    list_expired: Script,
    relay: RelayScripts,
}

/// The scripts of the relayed confirmations.
#[derive(Debug)]
struct RelayScripts {
    remember: Script,
    get: Script,
    forget: Script,
}

impl RedisConfirmationStore {
    pub(crate) fn new(stores: RedisStores) -> RedisConfirmationStore {
        let scripts = Scripts {
            insert: Script::new(INSERT),
            insert_relayed: Script::new(INSERT_RELAYED),
            get: Script::new(GET),
            decide: Script::new(DECIDE),
            consume: Script::new(CONSUME),
            withdraw: Script::new(WITHDRAW),
            list: Script::new(LIST),
            claim_expiry: Script::new(CLAIM_EXPIRY),
            expiry_recorded: Script::new(EXPIRY_RECORDED),
            reinstate: Script::new(REINSTATE),
            list_expired: Script::new(LIST_EXPIRED),
            relay: RelayScripts {
                remember: Script::new(REMEMBER_RELAYED),
                get: Script::new(RELAYED),
                forget: Script::new(FORGET_RELAYED),
            },
        };
        RedisConfirmationStore { stores, scripts: std::sync::Arc::new(scripts) }
    }

    fn key(&self, id: &str) -> String {
        self.stores.key("conf", id)
    }

    /// The string holding the id relayed for the call `key`.
    fn relay_key(&self, key: &RelayKey) -> String {
        self.stores.key("conf-relay", &key.to_string())
    }

    /// The sorted set of pending ids.
    fn pending_index(&self) -> String {
        format!("{}conf-pending", self.stores.config.prefix)
    }

    /// The sorted set of every record's id by its expiry.
    fn expiry_index(&self) -> String {
        format!("{}conf-expiry", self.stores.config.prefix)
    }

    fn scripts(&self) -> &Scripts {
        &self.scripts
    }

    async fn insert_now(&self, record: ConfirmationRecord, now: Timestamp) -> Result<(), StoreError> {
        let mut call = self.scripts().insert.key(self.key(&record.id));
        call.key(self.pending_index()).key(self.expiry_index());
        self.insert_args(&mut call, &record, now)?;
        let inserted: i64 = self.stores.run(call).await?;
        if inserted == 1 { Ok(()) } else { Err(taken(&record.id)) }
    }

    async fn insert_relayed_now(
        &self,
        record: ConfirmationRecord,
        key: &RelayKey,
        now: Timestamp,
    ) -> Result<Inserted, StoreError> {
        let mut call = self.scripts().insert_relayed.key(self.key(&record.id));
        call.key(self.pending_index()).key(self.expiry_index()).key(self.relay_key(key));
        self.insert_args(&mut call, &record, now)?;
        call.arg(ms(now)).arg(self.stores.key("conf", ""));
        let answer: Vec<String> = self.stores.run(call).await?;
        match answer.first().map(String::as_str) {
            Some("new") => Ok(Inserted::New),
            Some("exists") => Err(taken(&record.id)),
            Some("held") => {
                let [_, rec, s, by, d] = <[String; 5]>::try_from(answer).map_err(|_| corrupt("insert_relayed"))?;
                let fixed: Fixed = serde_json::from_str(&rec).map_err(|_| corrupt("rec"))?;
                let state = state_of(&s, by).ok_or_else(|| corrupt("state"))?;
                let held = fixed.into_record(state, &d).ok_or_else(|| corrupt("input hash or decisions"))?;
                Ok(Inserted::Held(Box::new(held)))
            }
            _ => Err(corrupt("insert_relayed")),
        }
    }

    /// The arguments of [`INSERT`] (the first fifteen of [`INSERT_RELAYED`]) for `record`.
    fn insert_args(
        &self,
        call: &mut redis::ScriptInvocation<'_>,
        record: &ConfirmationRecord,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let fixed = serde_json::to_string(&Fixed::of(record)).map_err(|e| corrupt(&e.to_string()))?;
        let gone = record.expires_at.saturating_add(self.stores.config.retention);
        let b = &record.binding;
        binding_args(call.arg(fixed), b)
            .arg(record.requester.as_deref().unwrap_or(""))
            .arg(ms(record.expires_at))
            .arg(ms(gone))
            .arg(ttl_ms(gone.saturating_duration_since(now)))
            .arg(record.requester.as_deref().map_or_else(|| "\0".to_string(), skeleton))
            .arg(skeleton(record.consumer.as_deref().unwrap_or(&b.consumer_key)))
            .arg(&record.id)
            .arg(record.quorum.required())
            .arg(now.unix_millis().saturating_sub(ttl_ms(self.stores.config.retention)));
        Ok(())
    }

    async fn get_now(&self, id: &str, now: Timestamp) -> Result<Option<ConfirmationRecord>, StoreError> {
        let mut call = self.scripts().get.key(self.key(id));
        call.arg(ms(now));
        let fields: Vec<String> = self.stores.run(call).await?;
        let [rec, s, by, d] = match <[String; 4]>::try_from(fields) {
            Ok(fields) => fields,
            Err(fields) if fields.is_empty() => return Ok(None),
            Err(_) => return Err(corrupt("fields")),
        };
        let fixed: Fixed = serde_json::from_str(&rec).map_err(|_| corrupt("rec"))?;
        let state = state_of(&s, by).ok_or_else(|| corrupt("state"))?;
        fixed.into_record(state, &d).map(Some).ok_or_else(|| corrupt("input hash or decisions"))
    }

    async fn decide_now(
        &self,
        id: &str,
        verdict: ApprovalVerdict,
        approver: &str,
        slots: SlotSet,
        now: Timestamp,
    ) -> Result<Decided, StoreError> {
        let verdict = match verdict {
            ApprovalVerdict::Approve => "approve",
            ApprovalVerdict::ApproveInPerson => "in-person",
            ApprovalVerdict::Deny => "deny",
        };
        let mut call = self.scripts().decide.key(self.key(id));
        call.key(self.pending_index());
        call.arg(verdict).arg(approver).arg(ms(now)).arg(skeleton(approver)).arg(id).arg(slots.bits());
        let answer: Vec<String> = self.stores.run(call).await?;
        Ok(match answer.first().map(String::as_str) {
            Some("done") => Decided::Done,
            Some("before") => Decided::DecidedBefore,
            Some("unknown") => Decided::Unknown,
            Some("self") => Decided::SelfApproval,
            Some("expired") => Decided::Expired,
            Some("not-pending") => {
                let s = answer.get(1).map(String::as_str).unwrap_or_default();
                let by = answer.get(2).cloned().unwrap_or_default();
                Decided::NotPending(state_of(s, by).ok_or_else(|| corrupt("state"))?)
            }
            Some("slots-taken") => Decided::SlotsTaken,
            _ => return Err(corrupt("decide")),
        })
    }
}

impl ConfirmationStore for RedisConfirmationStore {
    fn reach(&self) -> agent_surface_policy::Reach {
        agent_surface_policy::Reach::Shared
    }

    fn insert<'a>(&'a self, record: ConfirmationRecord, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.insert_now(record, now))
    }

    fn insert_relayed<'a>(
        &'a self,
        record: ConfirmationRecord,
        key: &'a RelayKey,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Inserted, StoreError>> {
        Box::pin(self.insert_relayed_now(record, key, now))
    }

    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<Option<ConfirmationRecord>, StoreError>> {
        Box::pin(self.get_now(id, now))
    }

    fn decide<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        Box::pin(self.decide_now(id, verdict, approver, SlotSet::ANY, now))
    }

    fn decide_in_slots<'a>(
        &'a self,
        id: &'a str,
        verdict: ApprovalVerdict,
        approver: &'a str,
        slots: SlotSet,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Decided, StoreError>> {
        Box::pin(self.decide_now(id, verdict, approver, slots, now))
    }

    fn consume<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Result<Consumed, Rejection>, StoreError>> {
        Box::pin(async move {
            // The consumption token, recorded with the consumption (see `reinstate`).
            let token = agent_surface_core::id::random_id("k-");
            let mut call = self.scripts().consume.key(self.key(id));
            binding_args(&mut call, expected).arg(ms(now)).arg(&token);
            let answer: Vec<String> = self.stores.run(call).await?;
            Ok(match answer.first().map(String::as_str) {
                Some("ok") => Ok(Consumed::new(answer.get(1).cloned().unwrap_or_default()).with_token(token)),
                Some("unknown") => Err(Rejection::Unknown),
                Some("consumed") => Err(Rejection::Consumed),
                Some("denied") => Err(Rejection::Denied),
                Some("expired") => Err(Rejection::Expired),
                Some("mismatch") => {
                    let differs = answer.get(1).map(String::as_str).unwrap_or_default();
                    Err(Rejection::Mismatch(Mismatch {
                        consumer: differs.contains('c'),
                        capability: differs.contains('a'),
                        target: differs.contains('t'),
                        input: differs.contains('i'),
                    }))
                }
                Some("pending") => {
                    let rec = answer.get(1).ok_or_else(|| corrupt("rec"))?;
                    let d = answer.get(2).map(String::as_str).unwrap_or_default();
                    let fixed: Fixed = serde_json::from_str(rec).map_err(|_| corrupt("rec"))?;
                    let record = fixed
                        .into_record(ConfirmationState::Pending, d)
                        .ok_or_else(|| corrupt("input hash or decisions"))?;
                    Err(Rejection::Pending(Box::new(record)))
                }
                _ => return Err(corrupt("consume")),
            })
        })
    }

    fn withdraw<'a>(
        &'a self,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<ConfirmationState>, StoreError>> {
        Box::pin(async move {
            let mut call = self.scripts().withdraw.key(self.key(id));
            call.key(self.pending_index());
            call.arg(ms(now)).arg(id);
            let answer: Vec<String> = self.stores.run(call).await?;
            match answer.as_slice() {
                [] => Ok(None),
                [s, by] => state_of(s, by.clone()).map(Some).ok_or_else(|| corrupt("state")),
                _ => Err(corrupt("withdraw")),
            }
        })
    }

    fn list_pending<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            // The scripts read numbers as doubles: a limit past what one holds exactly (no
            // listing is that long) is asked as the largest that is.
            let limit = limit.min(MAX_LISTED_EXACTLY);
            let mut call = self.scripts().list.key(self.pending_index());
            call.arg(ms(now)).arg(limit).arg(self.stores.key("conf", ""));
            let recs: Vec<String> = self.stores.run(call).await?;
            recs.chunks(2)
                .map(|pair| {
                    let [rec, d] = pair else { return Err(corrupt("list")) };
                    let fixed: Fixed = serde_json::from_str(rec).map_err(|_| corrupt("rec"))?;
                    fixed.into_record(ConfirmationState::Pending, d).ok_or_else(|| corrupt("input hash or decisions"))
                })
                .collect()
        })
    }

    fn claim_expiry<'a>(
        &'a self,
        id: &'a str,
        until: Timestamp,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut call = self.scripts().claim_expiry.key(self.key(id));
            call.arg(ms(until)).arg(ms(now));
            let first: i64 = self.stores.run(call).await?;
            Ok(first == 1)
        })
    }

    fn expiry_recorded<'a>(&'a self, id: &'a str, now: Timestamp) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = now;
        Box::pin(async move {
            let call = self.scripts().expiry_recorded.key(self.key(id));
            let _: i64 = self.stores.run(call).await?;
            Ok(())
        })
    }

    fn reinstate<'a>(
        &'a self,
        id: &'a str,
        expected: &'a ConfirmationBinding,
        token: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut call = self.scripts().reinstate.key(self.key(id));
            binding_args(&mut call, expected).arg(ms(now)).arg(token);
            let reinstated: i64 = self.stores.run(call).await?;
            Ok(reinstated == 1)
        })
    }

    fn list_expired<'a>(
        &'a self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConfirmationRecord>, StoreError>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            // Entries of consumed, denied or claimed records are dropped as they are met; look at a
            // few more than asked for, so that they do not starve one listing.
            let limit = limit.min(MAX_LISTED_EXACTLY);
            let look_at = limit.saturating_mul(4).saturating_add(16);
            let mut call = self.scripts().list_expired.key(self.expiry_index());
            call.arg(ms(now)).arg(limit).arg(self.stores.key("conf", "")).arg(look_at);
            let fields: Vec<String> = self.stores.run(call).await?;
            fields
                .chunks(4)
                .map(|quad| {
                    let [rec, s, by, d] = quad else { return Err(corrupt("list_expired")) };
                    let fixed: Fixed = serde_json::from_str(rec).map_err(|_| corrupt("rec"))?;
                    let state = state_of(s, by.clone()).ok_or_else(|| corrupt("state"))?;
                    fixed.into_record(state, d).ok_or_else(|| corrupt("input hash or decisions"))
                })
                .collect()
        })
    }

    fn remember_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut call = self.scripts().relay.remember.key(self.key(id));
            call.key(self.relay_key(key));
            call.arg(id).arg(ms(now));
            let _remembered: i64 = self.stores.run(call).await?;
            Ok(())
        })
    }

    fn relayed<'a>(&'a self, key: &'a RelayKey, now: Timestamp) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(async move {
            let mut call = self.scripts().relay.get.key(self.relay_key(key));
            call.arg(ms(now)).arg(self.stores.key("conf", ""));
            self.stores.run(call).await
        })
    }

    fn forget_relayed<'a>(
        &'a self,
        key: &'a RelayKey,
        id: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = now;
        Box::pin(async move {
            let mut call = self.scripts().relay.forget.key(self.relay_key(key));
            call.arg(id);
            let _forgotten: i64 = self.stores.run(call).await?;
            Ok(())
        })
    }
}
