//! Progress relaying: the handler's progress reports, sent to the client as
//! `notifications/progress` under the request's progress token (both eras).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use agent_surface_registry::{InvokeOptions, Progress};
use rmcp::RoleServer;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::{Peer, RequestContext};

use super::Answered;

/// Runs `call` with `options` relaying progress to the client when the request carried a
/// progress token; the last report is sent before the result, none after it.
pub(super) async fn relayed<F>(
    context: &RequestContext<RoleServer>,
    mut options: InvokeOptions,
    call: impl FnOnce(InvokeOptions) -> F,
) -> Answered
where
    F: Future<Output = Answered>,
{
    let progress = context.meta.get_progress_token().map(|token| ProgressRelay::new(context.peer.clone(), token));
    if let Some(relay) = &progress {
        options = options.with_progress(relay.clone());
    }
    let outcome = call(options).await;
    if let Some(relay) = progress {
        // The last report is sent before the result; none after it.
        relay.close().await;
    }
    outcome
}

/// The progress of one request on its way to the client: the latest report not sent yet (progress
/// is last-value-wins, so a handler that reports faster than the client reads costs one slot, not
/// a queue), and whether the call has ended. The task that sends the reports is started by the
/// first report: most calls carry a progress token (`rmcp`'s client sends one with every call) and
/// report nothing, and a task per call (spawned, then awaited under a timer) cost more than the
/// rest of the adapter's work on the call.
struct ProgressRelay {
    latest: Mutex<Option<Progress>>,
    ready: tokio::sync::Notify,
    closed: std::sync::atomic::AtomicBool,
    /// Where the reports go: the peer and the request's token.
    to: (Peer<RoleServer>, rmcp::model::ProgressToken),
    /// This relay, for the task the first report starts.
    this: std::sync::Weak<ProgressRelay>,
    /// The sending task, once started; `None` inside after [`ProgressRelay::close`] took it.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl ProgressRelay {
    /// The relay of one request that carried `token`.
    fn new(peer: Peer<RoleServer>, token: rmcp::model::ProgressToken) -> Arc<ProgressRelay> {
        Arc::new_cyclic(|this| ProgressRelay {
            latest: Mutex::new(None),
            ready: tokio::sync::Notify::new(),
            closed: std::sync::atomic::AtomicBool::new(false),
            to: (peer, token),
            this: this.clone(),
            task: Mutex::new(None),
        })
    }

    /// Ends the relay: the pending report is still sent (within a second), nothing after it.
    async fn close(&self) {
        let task = {
            let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
            self.closed.store(true, Ordering::Release);
            task.take()
        };
        let Some(mut task) = task else { return };
        self.ready.notify_one();
        if tokio::time::timeout(std::time::Duration::from_secs(1), &mut task).await.is_err() {
            task.abort();
        }
    }
}

impl agent_surface_registry::ProgressSink for ProgressRelay {
    fn report(&self, progress: Progress) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = Some(progress);
        {
            // Checked again under the lock `close` takes: a task started here is one it awaits.
            let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
            if task.is_none()
                && !self.closed.load(Ordering::Acquire)
                && let (Some(relay), Ok(runtime)) = (self.this.upgrade(), tokio::runtime::Handle::try_current())
            {
                *task = Some(runtime.spawn(forward_progress(relay)));
            }
        }
        self.ready.notify_one();
    }
}

/// Sends the relay's reports as `notifications/progress` with the request's token, until the relay
/// is closed.
async fn forward_progress(relay: Arc<ProgressRelay>) {
    let (peer, token) = &relay.to;
    loop {
        let pending = relay.latest.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(p) = pending {
            let mut param = ProgressNotificationParam::new(token.clone(), p.done);
            param.total = p.total;
            param.message = p.message;
            if peer.notify_progress(param).await.is_err() {
                return;
            }
            continue;
        }
        if relay.closed.load(Ordering::Acquire) {
            // Nothing pending, and nothing can arrive any more.
            if relay.latest.lock().unwrap_or_else(PoisonError::into_inner).is_none() {
                return;
            }
            continue;
        }
        relay.ready.notified().await;
    }
}
