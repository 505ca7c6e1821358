//! The cost of a shared, durable store: `Registry::invoke` with an invocation id on the
//! PostgreSQL idempotency store, against the memory store and against the floor of one bare round
//! trip, measured in the same run, with the statements per call counted by the server.
//!
//! Run with `cargo bench -p agent-surface-postgres --bench stores`. The database is a throwaway
//! cluster the bench starts (`agent_surface_testing::postgres::PgCluster`: loopback TCP, fsync on,
//! `synchronous_commit = on`), or the one `AGENT_SURFACE_POSTGRES_URL` names. Cases:
//!
//! - `pg_stores/memory`: a new invocation id per call on `MemoryIdempotencyStore` (admit, run,
//!   settle: the baseline);
//! - `pg_stores/postgres`: the same on `PostgresIdempotencyStore`: an admission, the started mark
//!   and a settlement, each one statement and one commit;
//! - `pg_stores/postgres_idempotent`: a new invocation id per call of an idempotent capability:
//!   its admission writes the started mark (`IdempotencyStore::admit_started`), so the call is an
//!   admission and a settlement;
//! - `pg_stores/postgres_replay`: a retry answered from the stored result;
//! - `pg_stores/select_1`: one bare `SELECT 1` through a pooled connection (a prepared
//!   statement): the floor of one round trip;
//! - `pg_stores/commit_floor`: one single-row insert, committed (and so flushed to the write-ahead
//!   log): the floor of one durable write;
//! - `pg_stores_32/memory`, `pg_stores_32/postgres`: 32 calls in flight at once, time per call.
//!
//! After the criterion groups it prints the ratios of the median estimates, the statements the
//! server ran per tracked call (`pg_stat_statements`, over 200 calls), and how long after its
//! leader's settlement a follower on another replica (stores of its own, listening on their own
//! connection) has the result, beside one bare round trip (medians of 200). `cargo bench -p
//! agent-surface-postgres --bench stores -- nothing` skips the criterion cases and prints the rest.

#![allow(missing_docs, clippy::print_stdout, reason = "a benchmark binary")]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_surface_policy::{Consumer, MemoryIdempotencyStore};
use agent_surface_postgres::{PostgresConfig, PostgresStores};
use agent_surface_registry::{InvokeOptions, InvokeRequest};
use agent_surface_testing::bench::{
    follower_latency, median_ns, recorded_idempotent_request, recorded_request as request,
    recording_registry as registry,
};
use criterion::{BatchSize, Criterion};

fn main() {
    let cluster = match std::env::var("AGENT_SURFACE_POSTGRES_URL") {
        Ok(_) => None,
        Err(_) => Some(agent_surface_testing::postgres::PgCluster::start("bench").expect("PostgreSQL is installed")),
    };
    let url = std::env::var("AGENT_SURFACE_POSTGRES_URL")
        .unwrap_or_else(|_| cluster.as_ref().map(|c| c.url()).unwrap_or_default());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let config = PostgresConfig::with_schema(format!("bench_{nonce}"));
    let stores = rt.block_on(PostgresStores::connect(&url, config)).expect("PostgreSQL answers");
    let (memory, _mm) = registry(Arc::new(MemoryIdempotencyStore::default()));
    let (pg, _mp) = registry(Arc::new(stores.idempotency()));
    let consumer = InvokeOptions::new(Consumer::anonymous("bench"));
    let n = AtomicU64::new(0);
    let fresh = || format!("inv-{}", n.fetch_add(1, Ordering::Relaxed));
    rt.block_on(async {
        let client = stores.pool().get().await.expect("a connection");
        client
            .batch_execute("CREATE TABLE IF NOT EXISTS bench_floor (k bigserial PRIMARY KEY, v text NOT NULL)")
            .await
            .expect("the floor table");
    });

    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("pg_stores");
    type NewCall = fn(String) -> InvokeRequest;
    let new_calls: [(&str, &agent_surface_registry::Registry, NewCall); 3] = [
        ("memory", &memory, request),
        ("postgres", &pg, request),
        ("postgres_idempotent", &pg, recorded_idempotent_request),
    ];
    for (name, r, request) in new_calls {
        g.bench_function(name, |b| {
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
    let replayed = rt.block_on(pg.invoke(request("replayed".to_string()), consumer.clone()));
    assert!(replayed.is_ok());
    g.bench_function("postgres_replay", |b| {
        b.to_async(&rt).iter_batched(
            || (request("replayed".to_string()), consumer.clone()),
            |(req, opts)| async { black_box(pg.invoke_detailed(req, opts).await) },
            BatchSize::SmallInput,
        )
    });
    let pool = stores.pool().clone();
    g.bench_function("select_1", |b| {
        b.to_async(&rt).iter(|| async {
            let client = pool.get().await.expect("a connection");
            let one = client.prepare_cached("SELECT 1").await.expect("prepared");
            black_box(client.query_one(&one, &[]).await.expect("one round trip"))
        })
    });
    g.bench_function("commit_floor", |b| {
        b.to_async(&rt).iter(|| async {
            let client = pool.get().await.expect("a connection");
            let insert = client.prepare_cached("INSERT INTO bench_floor (v) VALUES ('x')").await.expect("prepared");
            black_box(client.execute(&insert, &[]).await.expect("one committed row"))
        })
    });
    g.finish();

    let mut g = c.benchmark_group("pg_stores_32");
    for (name, r) in [("memory", &memory), ("postgres", &pg)] {
        g.bench_function(name, |b| {
            b.to_async(&rt).iter_batched(
                || (0..32).map(|_| request(fresh())).collect::<Vec<_>>(),
                |requests| async {
                    let calls = requests.into_iter().map(|req| r.invoke(req, consumer.clone()));
                    let results = futures_util::future::join_all(calls).await;
                    debug_assert!(results.iter().all(|res| res.is_ok()));
                    black_box(results)
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
    c.final_summary();

    println!("\nratios against pg_stores/memory (median estimates of this run):");
    let base = median_ns("pg_stores/memory");
    for id in [
        "pg_stores/memory",
        "pg_stores/postgres",
        "pg_stores/postgres_idempotent",
        "pg_stores/postgres_replay",
        "pg_stores/select_1",
        "pg_stores/commit_floor",
    ] {
        match (median_ns(id), base) {
            (Some(t), Some(b)) => println!("  {id:<28} {t:>10.0} ns   {:>7.2}x", t / b),
            _ => println!("  {id:<28} (no estimate)"),
        }
    }
    if let (Some(call), Some(floor)) = (median_ns("pg_stores/postgres"), median_ns("pg_stores/select_1")) {
        println!("  a tracked call costs {:.2} bare round trips", call / floor);
    }
    println!("32 calls in flight, per call:");
    let base = median_ns("pg_stores_32/memory");
    for id in ["pg_stores_32/memory", "pg_stores_32/postgres"] {
        match (median_ns(id), base) {
            (Some(t), Some(b)) => println!("  {id:<28} {:>10.0} ns   {:>7.2}x", t / 32.0, t / b),
            _ => println!("  {id:<28} (no estimate)"),
        }
    }

    // Statements per call, counted by the server: a write's new calls, then an idempotent
    // capability's.
    const CALLS: i64 = 200;
    let count = |request: NewCall| {
        rt.block_on(async {
            let client = stores.pool().get().await.expect("a connection");
            client.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").await.ok()?;
            client.batch_execute("SELECT pg_stat_statements_reset()").await.ok()?;
            for _ in 0..CALLS {
                let res = pg.invoke(request(fresh()), consumer.clone()).await;
                assert!(res.is_ok());
            }
            let row = client
                .query_one(
                    "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
                     WHERE query NOT LIKE '%pg_stat_statements%'",
                    &[],
                )
                .await
                .ok()?;
            Some(row.get::<_, i64>(0) as f64 / CALLS as f64)
        })
    };
    match (count(request), count(recorded_idempotent_request)) {
        (Some(write), Some(idempotent)) => println!(
            "statements the server ran per tracked call (pg_stat_statements, {CALLS} calls each): {write:.2} for a new call (admit, the started mark, settle), {idempotent:.2} for a new call of an idempotent capability (admit and mark, settle)"
        ),
        _ => println!("statements per call: pg_stat_statements is not loaded on this server"),
    }
    // A follower on another replica: its own stores (pool and listening connection) on the same
    // schema, as a second process would have.
    let other = rt
        .block_on(PostgresStores::connect(&url, PostgresConfig::with_schema(format!("bench_{nonce}"))))
        .expect("PostgreSQL answers");
    let (told, round_trip) = rt.block_on(async {
        let (leading, following) = (stores.idempotency(), other.idempotency());
        let pool = other.pool().clone();
        follower_latency(&leading, &following, || {
            let pool = pool.clone();
            async move {
                let client = pool.get().await.expect("a connection");
                let one = client.prepare_cached("SELECT 1").await.expect("prepared");
                black_box(client.query_one(&one, &[]).await.expect("one round trip"));
            }
        })
        .await
    });
    println!(
        "a follower on another replica learns the result {:.0} µs after its leader settled (median of 200); one bare SELECT 1 round trip: {:.0} µs; difference {:.0} µs (target: within one round trip + 1 ms)",
        told.as_secs_f64() * 1e6,
        round_trip.as_secs_f64() * 1e6,
        (told.as_secs_f64() - round_trip.as_secs_f64()) * 1e6
    );
    drop(other);
    drop(stores);
    drop(cluster);
}
