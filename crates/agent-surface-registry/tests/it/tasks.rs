//! Tasks (`agent_surface_registry::tasks`): a running call's record outlives `running_ttl` for as
//! long as the call may run, and a known result is recorded through a store that missed a beat.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_surface_core::{AgentSurfaceError, InvokeResult, Timestamp};
use agent_surface_policy::{
    Clock, Consumer, MemoryTaskStore, StoreError, TaskStore,
    task::{TaskRecord, TaskStatus},
};
use agent_surface_registry::tasks::{Started, TaskConfig, TaskOutcome, Tasks};
use agent_surface_registry::{Ctx, Registry};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::support::*;

/// `jobs.run`, with a time budget of a minute, whose handler waits until `go` is notified.
fn jobs(clock: &Arc<agent_surface_policy::ManualClock>, go: Arc<Notify>) -> (Registry, agent_surface_registry::Mount) {
    let r = Registry::new(config_with(clock));
    r.define("jobs", move |t| {
        t.capability("run", "Run a long job.").time_budget(Duration::from_secs(60)).handler(move |_: Ctx, i: Value| {
            let go = go.clone();
            async move {
                go.notified().await;
                Ok::<_, AgentSurfaceError>(json!({"ran": i}))
            }
        });
    })
    .unwrap();
    let m = r.mount("jobs", "main").unwrap();
    (r, m)
}

async fn started(tasks: &Tasks, r: &Registry) -> TaskRecord {
    match tasks.start(r, call("jobs.run", json!({"n": 1})), consumer("c"), CancellationToken::new()).await {
        Started::Task(record) => record,
        Started::Ended(inv) => panic!("the handler started, so a task: {:?}", inv.result),
    }
}

/// Reads the task until it is final (the call settles on a task of its own).
async fn ended(tasks: &Tasks, id: &str, now: Timestamp) -> TaskRecord {
    for _ in 0..500 {
        match tasks.find(id, &Consumer::anonymous("c"), now).await {
            Ok(Some(record)) if record.status.is_terminal() => return record,
            Ok(Some(_)) => tokio::time::sleep(Duration::from_millis(10)).await,
            other => panic!("the task is gone: {other:?}"),
        }
    }
    panic!("the task never ended")
}

fn result(record: &TaskRecord) -> InvokeResult {
    TaskOutcome::of_record(record).expect("an outcome").result
}

/// A call that runs longer than `running_ttl` (within its own time budget) keeps its task: it is
/// read as working meanwhile, and its result is there once it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_outlives_running_ttl_while_its_call_may_still_run() {
    let (clock, go) = (clock(), Arc::new(Notify::new()));
    let (r, _m) = jobs(&clock, go.clone());
    let config =
        TaskConfig { ttl: Duration::from_secs(1), running_ttl: Duration::from_secs(2), ..TaskConfig::default() };
    let tasks = Tasks::new(config);
    let task = started(&tasks, &r).await;
    clock.advance(Duration::from_secs(5));
    let working = tasks.find(&task.id, &Consumer::anonymous("c"), clock.now()).await.unwrap();
    assert_eq!(working.map(|t| t.status), Some(TaskStatus::Working), "past running_ttl, within the call's budget");
    go.notify_one();
    let done = ended(&tasks, &task.id, clock.now()).await;
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(result(&done).output(), Some(&json!({"ran": {"n": 1}})));
}

/// A memory task store whose `finish` does not answer the first `failures` times.
#[derive(Debug)]
struct Blip {
    inner: MemoryTaskStore,
    failures: usize,
    finishes: AtomicUsize,
}

type Answer<'a, T> = BoxFuture<'a, Result<T, StoreError>>;

impl TaskStore for Blip {
    fn create<'a>(&'a self, record: TaskRecord, now: Timestamp) -> Answer<'a, ()> {
        self.inner.create(record, now)
    }

    fn get<'a>(&'a self, id: &'a str, now: Timestamp) -> Answer<'a, Option<TaskRecord>> {
        self.inner.get(id, now)
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        status: TaskStatus,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> Answer<'a, bool> {
        if self.finishes.fetch_add(1, Ordering::SeqCst) < self.failures {
            return Box::pin(std::future::ready(Err(StoreError::Unavailable("no answer".into()))));
        }
        self.inner.finish(id, status, payload, message, now)
    }

    fn request_cancel<'a>(&'a self, id: &'a str, now: Timestamp) -> Answer<'a, Option<TaskRecord>> {
        self.inner.request_cancel(id, now)
    }

    fn renew<'a>(&'a self, id: &'a str, until: Timestamp, now: Timestamp) -> Answer<'a, Option<TaskRecord>> {
        self.inner.renew(id, until, now)
    }

    fn end_lapsed<'a>(
        &'a self,
        id: &'a str,
        payload: Option<Value>,
        message: Option<String>,
        now: Timestamp,
    ) -> Answer<'a, Option<TaskRecord>> {
        self.inner.end_lapsed(id, payload, message, now)
    }
}

/// A store that does not answer the first attempts to record a task's end still gets its result:
/// the end is asked again, so the task is not later read, once its lease lapsed, as abandoned
/// with an unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_s_result_is_recorded_through_a_store_that_missed_a_beat() {
    let (clock, go) = (clock(), Arc::new(Notify::new()));
    let (r, _m) = jobs(&clock, go.clone());
    let store = Arc::new(Blip { inner: MemoryTaskStore::default(), failures: 2, finishes: AtomicUsize::new(0) });
    let tasks = Tasks::new(TaskConfig { store: store.clone(), ..TaskConfig::default() });
    let task = started(&tasks, &r).await;
    go.notify_one();
    let done = ended(&tasks, &task.id, clock.now()).await;
    assert_eq!(store.finishes.load(Ordering::SeqCst), 3);
    // Past the lease, the record is read as it was recorded, not as abandoned.
    clock.advance(Duration::from_secs(31));
    let later = tasks.find(&task.id, &Consumer::anonymous("c"), clock.now()).await.unwrap().unwrap();
    assert_eq!(result(&done), result(&later));
    assert_eq!(result(&later).output(), Some(&json!({"ran": {"n": 1}})), "{:?}", result(&later));
}
