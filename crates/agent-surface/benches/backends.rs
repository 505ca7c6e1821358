//! Every store backend in one run: `Registry::invoke` with an invocation id (admission, the
//! handler, settlement) on the memory, SQLite, Redis and PostgreSQL idempotency stores, each
//! against the memory store and against its own floor, all measured in the same run.
//!
//! Run with `cargo bench -p agent-surface --bench backends`. It starts a private `redis-server`
//! and a throwaway PostgreSQL cluster (unless `AGENT_SURFACE_REDIS_URL` /
//! `AGENT_SURFACE_POSTGRES_URL` name servers to use), and keeps the SQLite file in the system's
//! temporary folder. Cases (group `backends`):
//!
//! - `memory`: the baseline;
//! - `sqlite`: every commit synced (`Durability::PowerLoss`, the default): admission and
//!   settlement, two synced commits;
//! - `redis`: loopback, three round trips (admission, the started mark, settlement);
//! - `postgres`: loopback, three statements, two of them committing;
//! - the floors: `fsync_floor` (4 KiB written to a file and `sync_data`: the disk's own cost of
//!   one durable write), `redis_floor` (one bare `PING`), `postgres_floor` (one bare `SELECT 1`).
//!
//! After the criterion group it prints every case's median, its ratio to `memory`, and each
//! backend's ratio to its floor. The per-backend benches (`cargo bench -p agent-surface-sqlite
//! --bench stores`, `-p agent-surface-redis`, `-p agent-surface-postgres`) add replays, calls in
//! flight and round trips counted from the servers.

#![allow(missing_docs, clippy::print_stdout, reason = "a benchmark binary")]

use std::hint::black_box;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_surface_policy::{Consumer, IdempotencyStore, MemoryIdempotencyStore};
use agent_surface_postgres::{PostgresConfig, PostgresStores};
use agent_surface_redis::{RedisConfig, RedisStores, redis};
use agent_surface_registry::InvokeOptions;
use agent_surface_sqlite::{SqliteConfig, SqliteStores};
use agent_surface_testing::bench::{median_ns, recorded_request as request, recording_registry as registry};
use criterion::{BatchSize, Criterion};

/// A folder for this run's files, removed at the end.
struct Folder(PathBuf);

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn main() {
    let (Some(redis_url), Some(pg_url)) =
        (agent_surface_testing::services::redis_url(), agent_surface_testing::postgres::postgres_url())
    else {
        println!("needs redis-server and PostgreSQL (or AGENT_SURFACE_REDIS_URL and AGENT_SURFACE_POSTGRES_URL)");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let folder = Folder(std::env::temp_dir().join(format!("agent-surface-backends-bench-{nonce}")));
    std::fs::create_dir_all(&folder.0).expect("a temporary folder");
    let sqlite =
        rt.block_on(SqliteStores::open(folder.0.join("bench.db"), SqliteConfig::default())).expect("the file opens");
    let redis_stores = rt
        .block_on(RedisStores::connect(&redis_url, RedisConfig::with_prefix(format!("bench:{nonce}:"))))
        .expect("Redis answers");
    let pg_stores = rt
        .block_on(PostgresStores::connect(&pg_url, PostgresConfig::with_schema(format!("bench_{nonce}"))))
        .expect("PostgreSQL answers");
    let stores: [(&str, Arc<dyn IdempotencyStore>); 4] = [
        ("memory", Arc::new(MemoryIdempotencyStore::default())),
        ("sqlite", Arc::new(sqlite.idempotency())),
        ("redis", Arc::new(redis_stores.idempotency())),
        ("postgres", Arc::new(pg_stores.idempotency())),
    ];
    let backends: Vec<_> = stores
        .into_iter()
        .map(|(name, store)| {
            let (r, m) = registry(store);
            (name, r, m)
        })
        .collect();
    let consumer = InvokeOptions::new(Consumer::anonymous("bench"));
    let n = AtomicU64::new(0);
    let fresh = || format!("inv-{}", n.fetch_add(1, Ordering::Relaxed));

    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("backends");
    for (name, r, _) in &backends {
        g.bench_function(*name, |b| {
            b.to_async(&rt).iter_batched(
                || (request(fresh()), consumer.clone()),
                |(req, opts)| async {
                    let res = r.invoke(req, opts).await;
                    debug_assert!(res.is_ok());
                    black_box(res)
                },
                BatchSize::SmallInput,
            )
        });
    }
    let mut file = std::fs::File::create(folder.0.join("floor")).expect("the floor file");
    let page = [b'x'; 4096];
    g.bench_function("fsync_floor", |b| {
        b.iter(|| {
            file.write_all(&page).expect("written");
            file.sync_data().expect("synced");
        })
    });
    let conn = redis_stores.connection();
    g.bench_function("redis_floor", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = conn.clone();
            async move {
                let pong: String = redis::cmd("PING").query_async(&mut conn).await.expect("PONG");
                black_box(pong)
            }
        })
    });
    let pool = pg_stores.pool().clone();
    g.bench_function("postgres_floor", |b| {
        b.to_async(&rt).iter(|| {
            let pool = pool.clone();
            async move {
                let client = pool.get().await.expect("a connection");
                black_box(client.query_one("SELECT 1", &[]).await.expect("one row"))
            }
        })
    });
    g.finish();
    c.final_summary();

    println!("\nmedians of this run, against `memory` and against each backend's floor:");
    let base = median_ns("backends/memory");
    for (id, floor) in [
        ("memory", None),
        ("sqlite", Some("fsync_floor")),
        ("redis", Some("redis_floor")),
        ("postgres", Some("postgres_floor")),
        ("fsync_floor", None),
        ("redis_floor", None),
        ("postgres_floor", None),
    ] {
        let t = median_ns(&format!("backends/{id}"));
        let against_floor = floor.and_then(|f| Some((f, t? / median_ns(&format!("backends/{f}"))?)));
        match (t, base) {
            (Some(t), Some(b)) => {
                let floor = against_floor.map(|(f, r)| format!(", {r:.2}x {f}")).unwrap_or_default();
                println!("  {id:<16} {t:>12.0} ns   {:>7.2}x memory{floor}", t / b);
            }
            _ => println!("  {id:<16} (no estimate)"),
        }
    }
}
