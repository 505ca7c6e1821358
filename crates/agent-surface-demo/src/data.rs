//! Where the shop keeps its orders, its warm tracking lookups and its ledgers (the tickets it
//! opened, the refunds it issued): in this process's memory, in the SQLite file of `serve --data`
//! (next to the stores, so that a restart finds the shop as it was), or in Redis so that several
//! server processes (replicas) serve one shop.
//!
//! In the SQLite file, the orders are the table `app_shop_orders` (a JSON document per order id),
//! the warm lookups `app_shop_warm` and the ledgers `app_shop_ledger`; every change is one
//! transaction of the stores' database thread (`SqliteStores::transaction`), synced before it is
//! answered.
//!
//! On Redis, the orders are one hash (`{prefix}shop:orders`, a JSON document per order id), the
//! warm lookups one set (`{prefix}shop:warm`), and each ledger one list of JSON entries, the
//! newest last (`{prefix}shop:tickets`, `{prefix}shop:refunds`; at most [`LEDGER_MAX`] entries,
//! the oldest dropped). Every change is one script that checks and changes an order atomically,
//! so two replicas can never both cancel one order. Seeding writes an order only where none
//! exists, so a replica starting next to a running one keeps the shop as it is.
//!
//! The ledgers are the shop's effects as an outsider sees them: a ticket opened or a refund issued
//! twice for one request shows there as two entries (the replicas' chaos test counts them).
//!
//! A read that fails is transient ("nothing ran", retry after a delay). A write that fails is so
//! only when Redis refused it; one whose answer was lost (timed out, connection dropped) may have
//! been carried out, and is an unknown outcome instead.
//!
//! Preconditions are synchronous and cannot ask Redis: they read the orders as this replica last
//! saw them ([`Data::seen`]). That view is never stricter than the truth (an order only ever
//! leaves `placed`, and no order is ever removed), so a precondition never refuses a call it
//! should allow; the change scripts re-check, and answer the same `PRECONDITION_FAILED` when
//! another replica got there first.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use agent_surface_core::AgentSurfaceError;
use agent_surface_redis::redis::{self, Script, aio::ConnectionManager};
use agent_surface_sqlite::rusqlite;

use crate::orders::{Address, Order, Status};

/// Why a change was refused.
pub(crate) enum Refused {
    /// No such order.
    Unknown,
    /// The order is not `placed` any more.
    NotPlaced(Status),
}

/// The most entries a ledger keeps; past it, the oldest go.
pub(crate) const LEDGER_MAX: usize = 10_000;

/// One of the shop's ledgers.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ledger {
    /// The tickets opened (`tickets.open`).
    Tickets,
    /// The refunds issued (`refunds.issue`).
    Refunds,
}

impl Ledger {
    /// The ledger's name in a key, `tickets` or `refunds`.
    fn name(self) -> &'static str {
        match self {
            Ledger::Tickets => "tickets",
            Ledger::Refunds => "refunds",
        }
    }

    /// Where the ledger is in [`Data::Memory`]'s `ledgers`.
    fn index(self) -> usize {
        match self {
            Ledger::Tickets => 0,
            Ledger::Refunds => 1,
        }
    }
}

/// The shop's data.
pub(crate) enum Data {
    /// In this process.
    Memory {
        orders: Mutex<BTreeMap<String, Order>>,
        warm: Mutex<HashSet<String>>,
        /// The tickets' and the refunds' ledgers, JSON entries, the newest last.
        ledgers: Mutex<[std::collections::VecDeque<String>; 2]>,
    },
    /// In Redis, shared by replicas.
    Shared(Shared),
    /// In the SQLite file of `serve --data`.
    Durable(Durable),
    /// In PostgreSQL (`serve --postgres`), shared by replicas.
    Pg(Pg),
}

/// The PostgreSQL half of [`Data`]: the tables `orders`, `warm` and `ledger` in a schema of the
/// shop's own (beside the stores' schema, never in it).
pub(crate) struct Pg {
    pool: agent_surface_postgres::deadpool_postgres::Pool,
    /// The quoted schema name.
    schema: String,
    /// The orders as this replica last read or wrote them.
    seen: Mutex<BTreeMap<String, Order>>,
}

/// A read of PostgreSQL that failed: nothing changed, try again later.
fn pg_unavailable(e: impl std::fmt::Display) -> AgentSurfaceError {
    AgentSurfaceError::transient(RETRY).with_cause(std::io::Error::other(e.to_string()))
}

/// A write to PostgreSQL that failed. Refused by the server (it answered with an error: the
/// transaction rolled back) or before anything was sent (no connection): nothing was written.
/// Otherwise (the connection dropped mid-way, the answer timed out) the commit may have landed:
/// an unknown outcome, never "nothing ran".
fn pg_write_failed(e: agent_surface_postgres::tokio_postgres::Error) -> AgentSurfaceError {
    if e.as_db_error().is_some() {
        return pg_unavailable(e);
    }
    AgentSurfaceError::outcome_unknown().with_cause(std::io::Error::other(e.to_string()))
}

/// The SQLite half of [`Data`].
pub(crate) struct Durable {
    stores: agent_surface_sqlite::SqliteStores,
    /// The orders as this process last read or wrote them.
    seen: Mutex<BTreeMap<String, Order>>,
}

/// An order's JSON that does not read, as the SQLite step's error.
fn unreadable(e: serde_json::Error) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
}

/// The Redis half of [`Data`].
pub(crate) struct Shared {
    conn: ConnectionManager,
    orders_key: String,
    warm_key: String,
    /// `{prefix}shop:`, the ledgers' keys without their names.
    ledger_prefix: String,
    /// The orders as this replica last read or wrote them.
    seen: Mutex<BTreeMap<String, Order>>,
    change: Script,
}

/// Changes one order if it is `placed`. KEYS: the orders hash. ARGV: order id, `cancel` or
/// `address`, the new address (JSON). Returns `{'ok', order}`, `{'unknown'}` or `{'unmet', order}`.
const CHANGE: &str = r"
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return {'unknown'} end
local o = cjson.decode(v)
if o.status ~= 'placed' then return {'unmet', v} end
if ARGV[2] == 'cancel' then o.status = 'cancelled' else o.address = cjson.decode(ARGV[3]) end
local out = cjson.encode(o)
redis.call('HSET', KEYS[1], ARGV[1], out)
return {'ok', out}
";

/// How long a caller is asked to wait when Redis did not answer.
const RETRY: Duration = Duration::from_secs(1);

fn unavailable(e: impl std::error::Error + Send + Sync + 'static) -> AgentSurfaceError {
    AgentSurfaceError::transient(RETRY).with_cause(e)
}

/// A write that failed. Redis may have carried it out although its answer never arrived (the
/// answer timed out, the connection dropped mid-way): its outcome is unknown, never "nothing ran",
/// which would invite a retry that writes twice. Only a refusal — Redis answered with an error, or
/// no connection could be made at all — means nothing was written (a transient failure).
fn write_failed(e: redis::RedisError) -> AgentSurfaceError {
    if e.code().is_some() || e.is_connection_refusal() {
        return unavailable(e);
    }
    AgentSurfaceError::outcome_unknown().with_cause(e)
}

/// A write to the SQLite file that failed: it may still be committed (its answer was late), so
/// its outcome is unknown, never "nothing ran".
fn write_unknown(e: agent_surface_policy::StoreError) -> AgentSurfaceError {
    AgentSurfaceError::outcome_unknown().with_cause(e)
}

fn corrupt(e: serde_json::Error) -> AgentSurfaceError {
    AgentSurfaceError::transient(RETRY).with_cause(e)
}

impl Data {
    /// The shop in memory, with `orders`.
    pub(crate) fn memory(orders: Vec<Order>) -> Data {
        let orders = orders.into_iter().map(|o| (o.order_id.clone(), o)).collect();
        Data::Memory { orders: Mutex::new(orders), warm: Mutex::default(), ledgers: Mutex::default() }
    }

    /// The shop in Redis under `prefix`, seeded with `orders` where it has none of them yet.
    pub(crate) async fn shared(conn: ConnectionManager, prefix: &str, orders: Vec<Order>) -> Result<Data, String> {
        let shared = Shared {
            conn,
            orders_key: format!("{prefix}shop:orders"),
            warm_key: format!("{prefix}shop:warm"),
            ledger_prefix: format!("{prefix}shop:"),
            seen: Mutex::default(),
            change: Script::new(CHANGE),
        };
        let mut seed = redis::pipe();
        for order in &orders {
            let json = serde_json::to_string(order).map_err(|e| e.to_string())?;
            seed.cmd("HSETNX").arg(&shared.orders_key).arg(&order.order_id).arg(json).ignore();
        }
        let mut conn = shared.conn.clone();
        seed.query_async::<()>(&mut conn).await.map_err(|e| format!("cannot seed the shop in Redis: {e}"))?;
        let data = Data::Shared(shared);
        data.orders().await.map_err(|e| format!("cannot read the shop from Redis: {e}"))?;
        Ok(data)
    }

    /// The shop in the SQLite file of `stores`, seeded with `orders` where it has none of them yet
    /// (a restart keeps the shop as it was).
    pub(crate) async fn durable(
        stores: agent_surface_sqlite::SqliteStores,
        orders: Vec<Order>,
    ) -> Result<Data, String> {
        let seed = orders
            .iter()
            .map(|o| Ok((o.order_id.clone(), serde_json::to_string(o)?)))
            .collect::<Result<Vec<_>, serde_json::Error>>()
            .map_err(|e| e.to_string())?;
        stores
            .transaction(move |conn| {
                conn.execute_batch(
                    "CREATE TABLE IF NOT EXISTS app_shop_orders (id TEXT PRIMARY KEY, json TEXT NOT NULL);
                      CREATE TABLE IF NOT EXISTS app_shop_warm (id TEXT PRIMARY KEY);
                     CREATE TABLE IF NOT EXISTS app_shop_ledger (
                       seq INTEGER PRIMARY KEY AUTOINCREMENT, ledger TEXT NOT NULL, entry TEXT NOT NULL);",
                )?;
                for (id, json) in &seed {
                    conn.execute("INSERT OR IGNORE INTO app_shop_orders (id, json) VALUES (?1, ?2)", [id, json])?;
                }
                Ok(())
            })
            .await
            .map_err(|e| format!("cannot seed the shop in {}: {e}", stores.path().display()))?;
        let data = Data::Durable(Durable { stores, seen: Mutex::default() });
        data.orders().await.map_err(|e| format!("cannot read the shop from its file: {e}"))?;
        Ok(data)
    }

    /// The shop in PostgreSQL, in the schema `schema` (created when missing), seeded with
    /// `orders` where it has none of them yet.
    pub(crate) async fn postgres(
        pool: agent_surface_postgres::deadpool_postgres::Pool,
        schema: &str,
        orders: Vec<Order>,
    ) -> Result<Data, String> {
        let pg = Pg { pool, schema: format!("\"{schema}\""), seen: Mutex::default() };
        let s = &pg.schema;
        let mut client = pg.pool.get().await.map_err(|e| format!("cannot reach PostgreSQL: {e}"))?;
        let tx = client.transaction().await.map_err(|e| e.to_string())?;
        tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&s]).await.map_err(|e| e.to_string())?;
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {s};
             CREATE TABLE IF NOT EXISTS {s}.orders (id text PRIMARY KEY, json text NOT NULL);
             CREATE TABLE IF NOT EXISTS {s}.warm (id text PRIMARY KEY);
             CREATE TABLE IF NOT EXISTS {s}.ledger (seq bigserial PRIMARY KEY, ledger text NOT NULL, entry text NOT NULL);"
        ))
        .await
        .map_err(|e| format!("cannot create the shop's tables: {e}"))?;
        for order in &orders {
            let json = serde_json::to_string(order).map_err(|e| e.to_string())?;
            tx.execute(
                &format!("INSERT INTO {s}.orders (id, json) VALUES ($1, $2) ON CONFLICT DO NOTHING"),
                &[&order.order_id, &json],
            )
            .await
            .map_err(|e| e.to_string())?;
        }
        tx.commit().await.map_err(|e| format!("cannot seed the shop in PostgreSQL: {e}"))?;
        drop(client);
        let data = Data::Pg(pg);
        data.orders().await.map_err(|e| format!("cannot read the shop from PostgreSQL: {e}"))?;
        Ok(data)
    }

    /// Every order, by id.
    pub(crate) async fn orders(&self) -> Result<Vec<Order>, AgentSurfaceError> {
        match self {
            Data::Memory { orders, .. } => {
                Ok(orders.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect())
            }
            Data::Shared(s) => {
                let mut conn = s.conn.clone();
                let all: BTreeMap<String, String> =
                    redis::cmd("HGETALL").arg(&s.orders_key).query_async(&mut conn).await.map_err(unavailable)?;
                let orders = all
                    .values()
                    .map(|v| serde_json::from_str(v).map_err(corrupt))
                    .collect::<Result<Vec<Order>, _>>()?;
                s.saw(&orders);
                Ok(orders)
            }
            Data::Durable(d) => {
                let all = d
                    .stores
                    .transaction(|conn| {
                        let mut statement = conn.prepare_cached("SELECT json FROM app_shop_orders ORDER BY id")?;
                        let rows = statement.query_map([], |r| r.get::<_, String>(0))?;
                        rows.map(|json| serde_json::from_str::<Order>(&json?).map_err(unreadable)).collect()
                    })
                    .await
                    .map_err(unavailable)?;
                d.saw(&all);
                Ok(all)
            }
            Data::Pg(p) => {
                let client = p.pool.get().await.map_err(pg_unavailable)?;
                let rows = client
                    .query(&format!("SELECT json FROM {}.orders ORDER BY id", p.schema), &[])
                    .await
                    .map_err(pg_unavailable)?;
                let all = rows
                    .iter()
                    .map(|r| serde_json::from_str::<Order>(r.get::<_, &str>(0)).map_err(corrupt))
                    .collect::<Result<Vec<_>, _>>()?;
                p.saw(&all);
                Ok(all)
            }
        }
    }

    /// One order.
    pub(crate) async fn order(&self, id: &str) -> Result<Option<Order>, AgentSurfaceError> {
        match self {
            Data::Memory { .. } => Ok(self.seen(id)),
            Data::Shared(s) => {
                let mut conn = s.conn.clone();
                let json: Option<String> =
                    redis::cmd("HGET").arg(&s.orders_key).arg(id).query_async(&mut conn).await.map_err(unavailable)?;
                let order: Option<Order> = json.map(|v| serde_json::from_str(&v)).transpose().map_err(corrupt)?;
                s.saw(order.iter());
                Ok(order)
            }
            Data::Durable(d) => {
                let id = id.to_string();
                let order = d
                    .stores
                    .transaction(move |conn| {
                        let json = conn
                            .prepare_cached("SELECT json FROM app_shop_orders WHERE id = ?1")?
                            .query_row([id], |r| r.get::<_, String>(0));
                        match json {
                            Ok(json) => serde_json::from_str::<Order>(&json).map(Some).map_err(unreadable),
                            Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
                            Err(e) => Err(e),
                        }
                    })
                    .await
                    .map_err(unavailable)?;
                d.saw(order.iter());
                Ok(order)
            }
            Data::Pg(p) => {
                let client = p.pool.get().await.map_err(pg_unavailable)?;
                let row = client
                    .query_opt(&format!("SELECT json FROM {}.orders WHERE id = $1", p.schema), &[&id])
                    .await
                    .map_err(pg_unavailable)?;
                let order =
                    row.map(|r| serde_json::from_str::<Order>(r.get::<_, &str>(0))).transpose().map_err(corrupt)?;
                p.saw(order.iter());
                Ok(order)
            }
        }
    }

    /// The order as this process last saw it, for synchronous checks (see the module docs).
    pub(crate) fn seen(&self, id: &str) -> Option<Order> {
        let orders = match self {
            Data::Memory { orders, .. } => orders,
            Data::Shared(s) => &s.seen,
            Data::Durable(d) => &d.seen,
            Data::Pg(p) => &p.seen,
        };
        orders.lock().unwrap_or_else(PoisonError::into_inner).get(id).cloned()
    }

    /// Cancels a `placed` order; the order after.
    pub(crate) async fn cancel(&self, id: &str) -> Result<Result<Order, Refused>, AgentSurfaceError> {
        self.change(id, None).await
    }

    /// Changes the address of a `placed` order; the order after.
    pub(crate) async fn update_address(
        &self,
        id: &str,
        address: &Address,
    ) -> Result<Result<Order, Refused>, AgentSurfaceError> {
        self.change(id, Some(address)).await
    }

    /// Cancels (`address` none) or readdresses a `placed` order.
    async fn change(&self, id: &str, address: Option<&Address>) -> Result<Result<Order, Refused>, AgentSurfaceError> {
        match self {
            Data::Memory { orders, .. } => {
                let mut orders = orders.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(order) = orders.get_mut(id) else { return Ok(Err(Refused::Unknown)) };
                if order.status != Status::Placed {
                    return Ok(Err(Refused::NotPlaced(order.status)));
                }
                match address {
                    Some(address) => order.address = address.clone(),
                    None => order.status = Status::Cancelled,
                }
                Ok(Ok(order.clone()))
            }
            Data::Shared(s) => {
                let address = address.map(serde_json::to_string).transpose().map_err(corrupt)?;
                let mut call = s.change.key(&s.orders_key);
                call.arg(id).arg(if address.is_some() { "address" } else { "cancel" }).arg(address.unwrap_or_default());
                let mut conn = s.conn.clone();
                let answer: Vec<String> = call.invoke_async(&mut conn).await.map_err(write_failed)?;
                let order = |json: &String| serde_json::from_str::<Order>(json).map_err(corrupt);
                Ok(match answer.as_slice() {
                    [verdict, json] if verdict == "ok" => {
                        let order = order(json)?;
                        s.saw([&order]);
                        Ok(order)
                    }
                    [verdict, json] if verdict == "unmet" => {
                        let order = order(json)?;
                        s.saw([&order]);
                        Err(Refused::NotPlaced(order.status))
                    }
                    _ => Err(Refused::Unknown),
                })
            }
            Data::Durable(d) => {
                let (id, address) = (id.to_string(), address.cloned());
                let changed = d
                    .stores
                    .transaction(move |conn| {
                        let json = conn
                            .prepare_cached("SELECT json FROM app_shop_orders WHERE id = ?1")?
                            .query_row([&id], |r| r.get::<_, String>(0));
                        let mut order = match json {
                            Ok(json) => serde_json::from_str::<Order>(&json).map_err(unreadable)?,
                            Err(rusqlite::Error::QueryReturnedNoRows) => return Ok(Err(Refused::Unknown)),
                            Err(e) => return Err(e),
                        };
                        if order.status != Status::Placed {
                            return Ok(Err(Refused::NotPlaced(order.status)));
                        }
                        match address {
                            Some(address) => order.address = address,
                            None => order.status = Status::Cancelled,
                        }
                        let json = serde_json::to_string(&order).map_err(unreadable)?;
                        conn.prepare_cached("UPDATE app_shop_orders SET json = ?2 WHERE id = ?1")?
                            .execute([&id, &json])?;
                        Ok(Ok(order))
                    })
                    .await
                    .map_err(write_unknown)?;
                if let Ok(order) = &changed {
                    d.saw([order]);
                }
                Ok(changed)
            }
            Data::Pg(p) => {
                let mut client = p.pool.get().await.map_err(pg_unavailable)?;
                let tx = client.transaction().await.map_err(pg_unavailable)?;
                let row = tx
                    .query_opt(&format!("SELECT json FROM {}.orders WHERE id = $1 FOR UPDATE", p.schema), &[&id])
                    .await
                    .map_err(pg_unavailable)?;
                let Some(row) = row else { return Ok(Err(Refused::Unknown)) };
                let mut order = serde_json::from_str::<Order>(row.get::<_, &str>(0)).map_err(corrupt)?;
                if order.status != Status::Placed {
                    p.saw([&order]);
                    return Ok(Err(Refused::NotPlaced(order.status)));
                }
                match address {
                    Some(address) => order.address = address.clone(),
                    None => order.status = Status::Cancelled,
                }
                let json = serde_json::to_string(&order).map_err(corrupt)?;
                tx.execute(&format!("UPDATE {}.orders SET json = $2 WHERE id = $1", p.schema), &[&id, &json])
                    .await
                    .map_err(pg_unavailable)?;
                tx.commit().await.map_err(pg_write_failed)?;
                p.saw([&order]);
                Ok(Ok(order))
            }
        }
    }

    /// Appends `entry` (a JSON document) to `ledger`, dropping the oldest entry past
    /// [`LEDGER_MAX`]. On Redis, one atomic step (`MULTI`: `RPUSH`, `LTRIM`); a failure whose
    /// answer was lost is an unknown outcome (the entry may be there).
    pub(crate) async fn record(&self, ledger: Ledger, entry: &impl serde::Serialize) -> Result<(), AgentSurfaceError> {
        let entry = serde_json::to_string(entry).map_err(corrupt)?;
        match self {
            Data::Memory { ledgers, .. } => {
                let mut ledgers = ledgers.lock().unwrap_or_else(PoisonError::into_inner);
                let list = &mut ledgers[ledger.index()];
                if list.len() == LEDGER_MAX {
                    list.pop_front();
                }
                list.push_back(entry);
                Ok(())
            }
            Data::Shared(s) => {
                let key = format!("{}{}", s.ledger_prefix, ledger.name());
                let mut conn = s.conn.clone();
                let max = isize::try_from(LEDGER_MAX).unwrap_or(isize::MAX);
                redis::pipe()
                    .atomic()
                    .cmd("RPUSH")
                    .arg(&key)
                    .arg(entry)
                    .ignore()
                    .cmd("LTRIM")
                    .arg(&key)
                    .arg(-max)
                    .arg(-1)
                    .ignore()
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(write_failed)
            }
            Data::Durable(d) => {
                let (name, max) = (ledger.name(), i64::try_from(LEDGER_MAX).unwrap_or(i64::MAX));
                d.stores
                    .transaction(move |conn| {
                        conn.prepare_cached("INSERT INTO app_shop_ledger (ledger, entry) VALUES (?1, ?2)")?
                            .execute(rusqlite::params![name, entry])?;
                        let oldest_kept = conn.last_insert_rowid() - max;
                        conn.prepare_cached("DELETE FROM app_shop_ledger WHERE ledger = ?1 AND seq <= ?2")?
                            .execute(rusqlite::params![name, oldest_kept])
                    })
                    .await
                    .map(drop)
                    .map_err(write_unknown)
            }
            Data::Pg(p) => {
                let max = i64::try_from(LEDGER_MAX).unwrap_or(i64::MAX);
                let client = p.pool.get().await.map_err(pg_unavailable)?;
                // One statement: the entry in, and at most the one entry past the bound out.
                let sql = format!(
                    "WITH i AS (INSERT INTO {s}.ledger (ledger, entry) VALUES ($1, $2) RETURNING seq)
                     DELETE FROM {s}.ledger WHERE ledger = $1 AND seq <= (SELECT seq FROM i) - $3",
                    s = p.schema
                );
                client.execute(&sql, &[&ledger.name(), &entry, &max]).await.map(drop).map_err(pg_write_failed)
            }
        }
    }

    /// Marks the order's tracking lookup warm; true when it was cold (the first lookup).
    pub(crate) async fn warm_up(&self, id: &str) -> Result<bool, AgentSurfaceError> {
        match self {
            Data::Memory { warm, .. } => Ok(warm.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_string())),
            Data::Shared(s) => {
                let mut conn = s.conn.clone();
                let added: i64 =
                    redis::cmd("SADD").arg(&s.warm_key).arg(id).query_async(&mut conn).await.map_err(unavailable)?;
                Ok(added == 1)
            }
            Data::Durable(d) => {
                let id = id.to_string();
                let added = d
                    .stores
                    .transaction(move |conn| {
                        conn.prepare_cached("INSERT OR IGNORE INTO app_shop_warm (id) VALUES (?1)")?.execute([id])
                    })
                    .await
                    .map_err(unavailable)?;
                Ok(added == 1)
            }
            Data::Pg(p) => {
                let client = p.pool.get().await.map_err(pg_unavailable)?;
                let added = client
                    .execute(&format!("INSERT INTO {}.warm (id) VALUES ($1) ON CONFLICT DO NOTHING", p.schema), &[&id])
                    .await
                    .map_err(pg_unavailable)?;
                Ok(added == 1)
            }
        }
    }
}

impl Pg {
    /// Remembers `orders` as seen.
    fn saw<'a>(&self, orders: impl IntoIterator<Item = &'a Order>) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        for order in orders {
            seen.insert(order.order_id.clone(), order.clone());
        }
    }
}

impl Durable {
    /// Remembers `orders` as seen.
    fn saw<'a>(&self, orders: impl IntoIterator<Item = &'a Order>) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        for order in orders {
            seen.insert(order.order_id.clone(), order.clone());
        }
    }
}

impl Shared {
    /// Remembers `orders` as seen.
    fn saw<'a>(&self, orders: impl IntoIterator<Item = &'a Order>) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        for order in orders {
            seen.insert(order.order_id.clone(), order.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::write_failed;
    use agent_surface_core::{ErrorCode, Retry};

    fn io(kind: std::io::ErrorKind) -> agent_surface_redis::redis::RedisError {
        std::io::Error::new(kind, "test").into()
    }

    /// A write whose answer never came (timed out, connection dropped) may have been carried out:
    /// an unknown outcome, retry `no`; one refused before anything was sent is transient.
    #[test]
    fn a_write_whose_answer_was_lost_is_an_unknown_outcome() {
        for lost in [std::io::ErrorKind::TimedOut, std::io::ErrorKind::ConnectionReset, std::io::ErrorKind::BrokenPipe]
        {
            let p = write_failed(io(lost)).into_payload();
            assert_eq!((p.code(), p.retry()), (ErrorCode::ExecutionFailed, Retry::No), "{lost:?}");
            assert_eq!(p.detail("reason"), Some(&serde_json::json!("outcome-unknown")), "{lost:?}");
        }
        let p = write_failed(io(std::io::ErrorKind::ConnectionRefused)).into_payload();
        assert_eq!((p.code(), p.retry()), (ErrorCode::ExecutionFailed, Retry::AfterDelay));
    }
}
