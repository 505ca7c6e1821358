//! The cost of shared state: `Registry::invoke` with an invocation id on the Redis idempotency
//! store over loopback, against the memory store, measured in the same run.
//!
//! Run with `cargo bench -p agent-surface-redis --bench stores` (it starts a private
//! `redis-server` unless `AGENT_SURFACE_REDIS_URL` names one). Cases:
//!
//! - `stores/memory`: a new invocation id per call on `MemoryIdempotencyStore` (admit, run,
//!   settle: the baseline);
//! - `stores/redis`: the same on `RedisIdempotencyStore`;
//! - `stores/redis_idempotent`: a new invocation id per call of an idempotent capability on
//!   Redis (its admission marks it started: no separate mark);
//! - `stores/redis_replay`: a retry answered from the stored result on Redis;
//! - `stores/evalsha_x2`: the floor of two round trips, two bare `EVALSHA`s of a one-write
//!   script one after the other (issue #29 compares a tracked call with it).
//!
//! After the criterion groups it prints the ratios of the median estimates, the Redis round
//! trips per call, counted from the server's command statistics over 1,000 calls of each kind,
//! and how long a follower on another replica (a second connection and subscription) takes to
//! learn its leader's result after the leader's settlement returned, against one bare `PING`
//! round trip, medians of 200 trials each.

#![allow(missing_docs, clippy::print_stdout, reason = "a benchmark binary")]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_surface_policy::{Consumer, IdempotencyStore, MemoryIdempotencyStore};
use agent_surface_redis::{RedisConfig, RedisStores, redis};
use agent_surface_registry::{InvokeOptions, InvokeRequest};
use agent_surface_testing::bench::{
    median_ns, recorded_idempotent_request, recorded_request as request, recording_registry as registry,
};
use criterion::{BatchSize, Criterion};
use serde_json::json;

/// The client commands the server has answered so far (script calls, not the commands run
/// inside them), from `INFO commandstats`.
async fn round_trips(conn: &mut redis::aio::ConnectionManager) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await.expect("INFO answers");
    info.lines()
        .filter(|l| ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_script|load:"].iter().any(|p| l.starts_with(p)))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

fn main() {
    let Some(url) = agent_surface_testing::services::redis_url() else {
        println!("no Redis (set AGENT_SURFACE_REDIS_URL or install redis-server): nothing to measure");
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let stores = rt
        .block_on(RedisStores::connect(&url, RedisConfig::with_prefix(format!("bench:{nonce}:"))))
        .expect("Redis answers");
    let (memory, _mm) = registry(Arc::new(MemoryIdempotencyStore::default()));
    let (shared, _ms) = registry(Arc::new(stores.idempotency()));
    let consumer = InvokeOptions::new(Consumer::anonymous("bench"));
    let n = AtomicU64::new(0);
    let fresh = || format!("inv-{}", n.fetch_add(1, Ordering::Relaxed));

    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("stores");
    // Each case: a new invocation id per call, on a registry, of a capability.
    type NewCall = fn(String) -> InvokeRequest;
    let new_calls: [(&str, &agent_surface_registry::Registry, NewCall); 3] = [
        ("memory", &memory, request),
        ("redis", &shared, request),
        ("redis_idempotent", &shared, recorded_idempotent_request),
    ];
    for (name, r, new_call) in new_calls {
        g.bench_function(name, |b| {
            b.to_async(&rt).iter_batched(
                || (new_call(fresh()), consumer.clone()),
                |(req, opts)| async {
                    let res = r.invoke(req, opts).await;
                    debug_assert!(res.is_ok());
                    black_box(res)
                },
                BatchSize::SmallInput,
            )
        });
    }
    let replayed = rt.block_on(shared.invoke(request("replayed".to_string()), consumer.clone()));
    assert!(replayed.is_ok());
    g.bench_function("redis_replay", |b| {
        b.to_async(&rt).iter_batched(
            || (request("replayed".to_string()), consumer.clone()),
            |(req, opts)| async { black_box(shared.invoke_detailed(req, opts).await) },
            BatchSize::SmallInput,
        )
    });
    // The floor of a call that needs two round trips to the store: two bare `EVALSHA`s of a
    // one-write script, one after the other (what an admission and a settlement cost without the
    // records' work: the record's hash fields, the fingerprint, the lease, the announcement).
    let floor = redis::Script::new("redis.call('HSET', KEYS[1], 'v', ARGV[1]) return 1");
    let floor_conn = stores.connection();
    g.bench_function("evalsha_x2", |b| {
        b.to_async(&rt).iter_batched(
            || format!("bench:{nonce}:floor:{}", n.fetch_add(1, Ordering::Relaxed)),
            |key| {
                let (floor, mut conn) = (&floor, floor_conn.clone());
                async move {
                    let one: i64 = floor.key(&key).arg(1).invoke_async(&mut conn).await.expect("EVALSHA answers");
                    let two: i64 = floor.key(&key).arg(2).invoke_async(&mut conn).await.expect("EVALSHA answers");
                    black_box(one + two)
                }
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
    c.final_summary();

    // Round trips per call, counted by the server.
    let conn = stores.connection();
    let per_call = |calls: Vec<InvokeRequest>| {
        let count = calls.len() as f64;
        rt.block_on(async {
            let before = round_trips(&mut conn.clone()).await;
            for req in calls {
                assert!(shared.invoke(req, consumer.clone()).await.is_ok());
            }
            let after = round_trips(&mut conn.clone()).await;
            (after - before) as f64 / count
        })
    };
    let new_calls = per_call((0..1_000).map(|_| request(fresh())).collect());
    let replays = per_call((0..1_000).map(|_| request("replayed".to_string())).collect());
    let idempotent_calls = per_call((0..1_000).map(|_| recorded_idempotent_request(fresh())).collect());

    println!("\nratios against stores/memory (median estimates of this run):");
    let base = median_ns("stores/memory");
    for id in ["stores/memory", "stores/redis", "stores/redis_idempotent", "stores/redis_replay", "stores/evalsha_x2"] {
        match (median_ns(id), base) {
            (Some(t), Some(b)) => println!("  {id:<22} {t:>10.0} ns   {:>6.2}x", t / b),
            _ => println!("  {id:<22} (no estimate)"),
        }
    }
    if let (Some(tracked), Some(floor)) = (median_ns("stores/redis"), median_ns("stores/evalsha_x2")) {
        println!(
            "a tracked call on Redis against two bare EVALSHA round trips: {tracked:.0} / {floor:.0} ns = {:.2}x (target ≤ 1.2x)",
            tracked / floor
        );
    }
    if let (Some(tracked), Some(floor)) = (median_ns("stores/redis_idempotent"), median_ns("stores/evalsha_x2")) {
        println!(
            "a tracked call of an idempotent capability on Redis against two bare EVALSHA round trips: {tracked:.0} / {floor:.0} ns = {:.2}x (target ≤ 1.2x)",
            tracked / floor
        );
    }
    println!(
        "Redis round trips per call: {new_calls:.2} for a new call (admit, the started mark, settle), {idempotent_calls:.2} for a new call of an idempotent capability (admit and mark, settle), {replays:.2} for a replay"
    );

    let rounds = std::env::var("BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
    rt.block_on(breakdown(&stores, &shared, &memory, &consumer, nonce, rounds));

    let other = rt
        .block_on(RedisStores::connect(&url, RedisConfig::with_prefix(format!("bench:{nonce}:"))))
        .expect("Redis answers");
    let (told, ping) = rt.block_on(async {
        let (leading, following) = (stores.idempotency(), other.idempotency());
        let conn = other.connection();
        agent_surface_testing::bench::follower_latency(&leading, &following, || {
            let mut conn = conn.clone();
            async move {
                let _: String = redis::cmd("PING").query_async(&mut conn).await.expect("PONG");
            }
        })
        .await
    });
    println!(
        "a follower on another replica learns the result {:.0} µs after its leader settled (median of 200); one bare PING round trip: {:.0} µs; difference {:.0} µs",
        told.as_secs_f64() * 1e6,
        ping.as_secs_f64() * 1e6,
        (told.as_secs_f64() - ping.as_secs_f64()) * 1e6
    );
}

/// The CPU time this thread has used, in nanoseconds (the scheduler's own account,
/// `/proc/thread-self/schedstat`; 0 where there is none). The bench's runtime runs on this one
/// thread, the Redis connection's task included, so this is the client's whole CPU time.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// What the server reports: its CPU time (user and system, µs, from `INFO cpu`), and the calls
/// and the microseconds spent running the script commands (`EVALSHA`, `EVAL`, `SCRIPT LOAD`)
/// from `INFO commandstats` — the scripts' own work, without reading and answering the request.
async fn server_figures(conn: &mut redis::aio::ConnectionManager) -> (f64, u64, f64) {
    let info: String = redis::cmd("INFO").arg("cpu").arg("commandstats").query_async(conn).await.expect("INFO");
    let field =
        |line: &str, name: &str| -> Option<f64> { line.split(name).nth(1)?.split(',').next()?.trim().parse().ok() };
    let (mut cpu, mut calls, mut usec) = (0.0, 0, 0.0);
    for line in info.lines() {
        if let Some(v) = line.strip_prefix("used_cpu_user:").or_else(|| line.strip_prefix("used_cpu_sys:")) {
            cpu += v.trim().parse::<f64>().unwrap_or(0.0) * 1e6;
        }
        if ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_script|load:"].iter().any(|p| line.starts_with(p)) {
            calls += field(line, "calls=").unwrap_or(0.0) as u64;
            usec += field(line, "usec=").unwrap_or(0.0);
        }
    }
    (cpu, calls, usec)
}

/// One row of the breakdown: per call, wall time, the client's CPU time, the server's CPU time,
/// the time the server spent running scripts, and the round trips (script commands) it answered.
#[derive(Clone, Copy, Default)]
struct Row {
    wall: f64,
    client: f64,
    server: f64,
    script: f64,
    trips: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Medians over `rounds` of per-call figures, the cases interleaved in each round (so that the
/// load of a shared machine falls on all of them alike): a tracked call through the registry on
/// Redis and on the memory store, the store's three scripts called directly (admission, the
/// started mark and settlement, each over a batch of records, so that each is measured alone), and
/// one and two bare `EVALSHA`s of a one-write script.
async fn breakdown(
    stores: &RedisStores,
    shared: &agent_surface_registry::Registry,
    memory: &agent_surface_registry::Registry,
    consumer: &InvokeOptions,
    nonce: u128,
    rounds: usize,
) {
    use agent_surface_policy::idempotency::{Admission, Attempt, Fingerprint, IdempotencyKey, Settlement};
    const N: usize = 500;
    let names = [
        "tracked call, registry on Redis",
        "tracked call, registry on memory",
        "  admission script (store alone)",
        "  started mark script (store alone)",
        "  settlement script (store alone)",
        "  the three scripts (sum)",
        "one bare EVALSHA",
        "two bare EVALSHA (stores/evalsha_x2)",
    ];
    let mut rows: Vec<Vec<Row>> = vec![Vec::new(); names.len()];
    let mut conn = stores.connection();
    let store = stores.idempotency();
    let floor = redis::Script::new("redis.call('HSET', KEYS[1], 'v', ARGV[1]) return 1");
    let fp = Fingerprint::of(&json!({"request": "breakdown"}));
    let now = agent_surface_core::Timestamp::now;
    let mut seq = 0u64;
    let mut next = || {
        seq += 1;
        seq
    };
    for round in 0..rounds {
        // Runs `n` calls of one case and returns its per-call row.
        macro_rules! measure {
            ($n:expr, $body:expr) => {{
                let (cpu0, calls0, usec0) = server_figures(&mut conn).await;
                let (t0, c0) = (std::time::Instant::now(), thread_cpu_ns());
                $body;
                let (wall, client) = (t0.elapsed().as_nanos() as f64, (thread_cpu_ns() - c0) as f64);
                let (cpu1, calls1, usec1) = server_figures(&mut conn).await;
                let n = $n as f64;
                Row {
                    wall: wall / n / 1e3,
                    client: client / n / 1e3,
                    server: (cpu1 - cpu0) / n,
                    script: (usec1 - usec0) / n,
                    // The INFO command itself is not a script command, so it is not counted.
                    trips: (calls1 - calls0) as f64 / n,
                }
            }};
        }
        let ids: Vec<String> = (0..N).map(|_| format!("bd-{round}-{}", next())).collect();
        rows[0].push(measure!(
            N,
            for id in &ids {
                assert!(shared.invoke(request(id.clone()), consumer.clone()).await.is_ok());
            }
        ));
        rows[1].push(measure!(
            N,
            for id in &ids {
                assert!(memory.invoke(request(id.clone()), consumer.clone()).await.is_ok());
            }
        ));
        let keys: Vec<IdempotencyKey> =
            (0..N).map(|_| IdempotencyKey::new("bench", format!("bd-store-{round}-{}", next()))).collect();
        let mut leases = Vec::with_capacity(N);
        rows[2].push(measure!(
            N,
            for key in &keys {
                let Ok(Admission::Leader(lease)) = store.admit(key, fp, Attempt::fresh(), now()).await else {
                    panic!("a new key leads")
                };
                leases.push(lease);
            }
        ));
        rows[3].push(measure!(
            N,
            for (key, lease) in keys.iter().zip(&leases) {
                store.start(key, *lease, now()).await.expect("marked");
            }
        ));
        let result = agent_surface_core::InvokeResult::ok(json!({"sum": 5}), None);
        rows[4].push(measure!(
            N,
            for (key, lease) in keys.iter().zip(&leases) {
                let settlement = Settlement::Store {
                    result: result.clone(),
                    expires_at: now().saturating_add(std::time::Duration::from_secs(3600)),
                };
                store.settle(key, fp, *lease, settlement, now()).await.expect("settled");
            }
        ));
        let last = rows[2].len() - 1;
        let sum = [2, 3, 4].iter().fold(Row::default(), |a, &i| {
            let r = rows[i][last];
            Row {
                wall: a.wall + r.wall,
                client: a.client + r.client,
                server: a.server + r.server,
                script: a.script + r.script,
                trips: a.trips + r.trips,
            }
        });
        rows[5].push(sum);
        let floor_keys: Vec<String> = (0..N).map(|_| format!("bench:{nonce}:floor:bd-{}", next())).collect();
        rows[6].push(measure!(
            N,
            for key in &floor_keys {
                let one: i64 = floor.key(key).arg(1).invoke_async(&mut conn).await.expect("EVALSHA answers");
                black_box(one);
            }
        ));
        rows[7].push(measure!(
            N,
            for key in &floor_keys {
                let one: i64 = floor.key(key).arg(1).invoke_async(&mut conn).await.expect("EVALSHA answers");
                let two: i64 = floor.key(key).arg(2).invoke_async(&mut conn).await.expect("EVALSHA answers");
                black_box(one + two);
            }
        ));
    }
    println!("\nthe tracked call broken down (µs per call; medians of {rounds} interleaved rounds of {N} calls):");
    println!(
        "  {:<40} {:>8} {:>11} {:>11} {:>11} {:>7}",
        "", "wall", "client CPU", "server CPU", "script run", "trips"
    );
    for (name, rows) in names.iter().zip(rows) {
        let m = |f: fn(&Row) -> f64| median(rows.iter().map(f).collect());
        println!(
            "  {name:<40} {:>8.1} {:>11.1} {:>11.1} {:>11.1} {:>7.2}",
            m(|r| r.wall),
            m(|r| r.client),
            m(|r| r.server),
            m(|r| r.script),
            m(|r| r.trips)
        );
    }
}
