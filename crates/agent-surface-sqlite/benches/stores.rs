//! The cost of durability: `Registry::invoke` with an invocation id on the SQLite idempotency
//! store, against the memory store and against the floor of one synced commit, measured in the
//! same run.
//!
//! Run with `cargo bench -p agent-surface-sqlite --bench stores`. The file lives in the system's
//! temporary folder (on this project's machines, the same disk as the checkout). Cases:
//!
//! - `stores/memory`: a new invocation id per call on `MemoryIdempotencyStore` (admit, run,
//!   settle: the baseline);
//! - `stores/sqlite`: the same on `SqliteIdempotencyStore`, every commit synced
//!   (`Durability::PowerLoss`, the default): two commits per call, admission and settlement;
//! - `stores/sqlite_process_crash`: the same with `Durability::ProcessCrash` (commits not synced);
//! - `stores/sqlite_replay`: a retry answered from the stored result (a read, nothing to sync);
//! - `stores/fsync_floor`: one bare commit of one row through `rusqlite` with the same pragmas
//!   (write-ahead log, `synchronous=FULL`), no store around it: the floor a synced call's two
//!   commits stand on;
//! - `stores_32/memory`, `stores_32/sqlite`: 32 calls in flight at once, time per call (the
//!   database thread commits the operations that queued up together).
//!
//! After the criterion groups it prints the ratios of the median estimates.

#![allow(missing_docs, clippy::print_stdout, reason = "a benchmark binary")]

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_surface_policy::{Consumer, MemoryIdempotencyStore};
use agent_surface_registry::InvokeOptions;
use agent_surface_sqlite::{Durability, SqliteConfig, SqliteStores};
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
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let folder = Folder(std::env::temp_dir().join(format!("agent-surface-sqlite-bench-{nonce}")));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let open = |name: &str, durability| {
        let config = SqliteConfig { durability, ..SqliteConfig::default() };
        rt.block_on(SqliteStores::open(folder.0.join(name), config)).expect("the store file opens")
    };
    let synced = open("synced.db", Durability::PowerLoss);
    let unsynced = open("unsynced.db", Durability::ProcessCrash);
    let (memory, _mm) = registry(Arc::new(MemoryIdempotencyStore::default()));
    let (durable, _md) = registry(Arc::new(synced.idempotency()));
    let (fast, _mf) = registry(Arc::new(unsynced.idempotency()));
    let consumer = InvokeOptions::new(Consumer::anonymous("bench"));
    let n = AtomicU64::new(0);
    let fresh = || format!("inv-{}", n.fetch_add(1, Ordering::Relaxed));

    let floor = rusqlite::Connection::open(folder.0.join("floor.db")).expect("the floor file opens");
    floor
        .execute_batch(
            "PRAGMA locking_mode = EXCLUSIVE; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
             CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL);",
        )
        .expect("the floor table");

    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("stores");
    for (name, r) in [("memory", &memory), ("sqlite", &durable), ("sqlite_process_crash", &fast)] {
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
    let replayed = rt.block_on(durable.invoke(request("replayed".to_string()), consumer.clone()));
    assert!(replayed.is_ok());
    g.bench_function("sqlite_replay", |b| {
        b.to_async(&rt).iter_batched(
            || (request("replayed".to_string()), consumer.clone()),
            |(req, opts)| async { black_box(durable.invoke_detailed(req, opts).await) },
            BatchSize::SmallInput,
        )
    });
    let mut row = 0i64;
    g.bench_function("fsync_floor", |b| {
        b.iter(|| {
            row += 1;
            floor.execute("INSERT INTO t (k, v) VALUES (?1, 'x')", [row]).expect("one synced commit")
        })
    });
    g.finish();

    let mut g = c.benchmark_group("stores_32");
    for (name, r) in [("memory", &memory), ("sqlite", &durable)] {
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

    println!("\nratios against stores/memory (median estimates of this run):");
    let base = median_ns("stores/memory");
    for id in
        ["stores/memory", "stores/sqlite", "stores/sqlite_process_crash", "stores/sqlite_replay", "stores/fsync_floor"]
    {
        match (median_ns(id), base) {
            (Some(t), Some(b)) => println!("  {id:<28} {t:>10.0} ns   {:>7.2}x", t / b),
            _ => println!("  {id:<28} (no estimate)"),
        }
    }
    if let (Some(call), Some(floor)) = (median_ns("stores/sqlite"), median_ns("stores/fsync_floor")) {
        println!("  a synced call costs {:.2} bare synced commits (it makes two: admission, settlement)", call / floor);
    }
    println!("32 calls in flight, per call:");
    let base = median_ns("stores_32/memory");
    for id in ["stores_32/memory", "stores_32/sqlite"] {
        match (median_ns(id), base) {
            (Some(t), Some(b)) => println!("  {id:<28} {:>10.0} ns   {:>7.2}x", t / 32.0, t / b),
            _ => println!("  {id:<28} (no estimate)"),
        }
    }
    drop((synced, unsynced));
}
