//! Followers told of a settlement rather than polling for it: one pub/sub subscription per
//! [`RedisStores`](crate::RedisStores), on the channel `{prefix}idem-settled`, to which every
//! script that ends a record in flight (settlement, a cancellation that voids or settles a claim)
//! publishes the record's key in the same atomic step.
//!
//! A follower registers its record's key before it polls, so a settlement is either seen by that
//! poll or announced after it; the announcement wakes the follower, which then reads the result
//! with one more poll: a follower learns the result about one round trip after the leader settled.
//! Followers still poll, at widening intervals (up to [`TOLD_MAX_POLL`] while the subscription is
//! up, 50 ms while it is down or reconnecting), to notice a leader whose
//! lease lapsed — nothing is published then — and as a fallback should a message be lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;

/// The longest wait between two polls of a follower while the subscription is up: the latest a
/// follower notices that its leader's lease lapsed (nothing is announced then), past the lease.
pub(crate) const TOLD_MAX_POLL: Duration = Duration::from_millis(500);

/// The wait before the subscription is tried again after it failed; doubled on each failure up to
/// [`RESUBSCRIBE_MAX`].
const RESUBSCRIBE_FIRST: Duration = Duration::from_millis(50);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(2);

/// The subscription of one `RedisStores` and the followers waiting on it.
#[derive(Debug)]
pub(crate) struct Told {
    /// Per record key: the followers' wake-up, shared by every follower of that record here.
    waiting: Mutex<HashMap<String, Weak<Notify>>>,
    /// Whether the subscription is up (subscribed, its connection open).
    up: AtomicBool,
}

impl Told {
    /// Starts the subscription to `channel` on `client`, in a task that lives as long as the
    /// returned value (it ends at the first message or reconnection after the value is dropped).
    pub(crate) fn start(client: redis::Client, channel: String, op_timeout: Duration) -> Arc<Told> {
        let told = Arc::new(Told { waiting: Mutex::new(HashMap::new()), up: AtomicBool::new(false) });
        let weak = Arc::downgrade(&told);
        tokio::spawn(subscribe(weak, client, channel, op_timeout));
        told
    }

    /// Whether announcements arrive (the subscription is up).
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// The wake-up of the followers of `record`, registered until the last of them drops it.
    pub(crate) fn watch(&self, record: &str) -> Watch<'_> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let notify = match waiting.get(record).and_then(Weak::upgrade) {
            Some(notify) => notify,
            None => {
                let notify = Arc::new(Notify::new());
                waiting.insert(record.to_string(), Arc::downgrade(&notify));
                notify
            }
        };
        Watch { told: self, record: record.to_string(), notify: Some(notify) }
    }

    /// Wakes the followers of `record`, if any wait here.
    fn announce(&self, record: &str) {
        let waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(notify) = waiting.get(record).and_then(Weak::upgrade) {
            notify.notify_waiters();
        }
    }
}

/// One follower's registration: its record's wake-up. Dropped by the last follower of the record,
/// it unregisters the record.
pub(crate) struct Watch<'a> {
    told: &'a Told,
    record: String,
    /// Held until the watch is dropped (`None` only while it is).
    notify: Option<Arc<Notify>>,
}

impl Watch<'_> {
    /// The wake-up to wait on; create (and enable) it before the poll it follows, so that an
    /// announcement between that poll and the wait is not missed.
    pub(crate) fn notify(&self) -> &Notify {
        self.notify.as_deref().expect("held until the watch is dropped")
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut waiting = self.told.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        // Our hold ends under the lock, so that of two followers dropped together the second
        // sees the first's gone: the entry stays while anyone holds the wake-up.
        drop(self.notify.take());
        if waiting.get(&self.record).is_some_and(|weak| weak.strong_count() == 0) {
            waiting.remove(&self.record);
        }
    }
}

/// The subscription's task: subscribe, relay announcements, and subscribe again after a failure.
async fn subscribe(told: Weak<Told>, client: redis::Client, channel: String, op_timeout: Duration) {
    let mut wait = RESUBSCRIBE_FIRST;
    loop {
        if told.strong_count() == 0 {
            return;
        }
        let connected = tokio::time::timeout(op_timeout, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        match connected {
            Ok(Ok(pubsub)) => {
                wait = RESUBSCRIBE_FIRST;
                let Some(up) = told.upgrade() else { return };
                up.up.store(true, Ordering::Release);
                drop(up);
                let mut messages = pubsub.into_on_message();
                while let Some(message) = messages.next().await {
                    let Some(told) = told.upgrade() else { return };
                    if let Ok(record) = message.get_payload::<String>() {
                        told.announce(&record);
                    }
                }
                let Some(down) = told.upgrade() else { return };
                down.up.store(false, Ordering::Release);
                tracing::warn!(target: "agent_surface::store", "the settlement subscription closed; followers poll until it is back");
            }
            Ok(Err(e)) => {
                tracing::warn!(target: "agent_surface::store", error = %agent_surface_policy::redacted(&e), "could not subscribe to settlements; followers poll meanwhile");
            }
            Err(_) => {
                tracing::warn!(target: "agent_surface::store", "subscribing to settlements took longer than the store budget; followers poll meanwhile");
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RESUBSCRIBE_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two followers of one record dropped at the same time leave nothing registered: whichever
    /// drops last sees the other's hold gone.
    #[test]
    fn followers_dropped_together_unregister_their_record() {
        let told = Told { waiting: Mutex::new(HashMap::new()), up: AtomicBool::new(false) };
        for _ in 0..2_000 {
            let (a, b) = (told.watch("k"), told.watch("k"));
            std::thread::scope(|s| {
                s.spawn(move || drop(a));
                s.spawn(move || drop(b));
            });
            assert!(told.waiting.lock().unwrap().is_empty(), "a record stays registered with nobody waiting");
        }
    }
}
