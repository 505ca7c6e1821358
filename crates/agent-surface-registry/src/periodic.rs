//! The registry's periodic work while a server serves it: its confirmation gate's
//! [`run_periodic`](agent_surface_policy::ConfirmationGate::run_periodic) — for the
//! `ConfirmationEngine`, the expiry sweep every `ConfirmationConfig::sweep_interval`, which
//! writes expiry warnings (and whatever else the sweep records) without anyone looking at a
//! confirmation.

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::Registry;

/// The periodic work of a registry's confirmation gate, running on the Tokio runtime until the
/// server's shutdown token is cancelled or [`Periodic::stop`] is called (dropping it stops it
/// too, without waiting). The adapters' `serve` helpers run one while they serve; a host that
/// serves a router itself starts one beside it:
///
/// ```no_run
/// use agent_surface_registry::{Periodic, Registry, RegistryConfig};
/// use tokio_util::sync::CancellationToken;
///
/// # async fn run(registry: Registry, serving: impl std::future::Future<Output = ()>) {
/// let shutdown = CancellationToken::new(); // cancelled on SIGTERM
/// let periodic = Periodic::start(&registry, &shutdown);
/// serving.await; // e.g. agent_surface_server::serve_with(…, shutdown, …)
/// periodic.stop().await;
/// # }
/// ```
#[derive(Debug)]
pub struct Periodic {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Periodic {
    /// Starts the periodic work of `registry`'s confirmation gate (nothing when it has none),
    /// to run until `shutdown` is cancelled or the handle is stopped. Call it inside a Tokio
    /// runtime.
    pub fn start(registry: &Registry, shutdown: &CancellationToken) -> Periodic {
        let stop = shutdown.child_token();
        let task = registry.config().confirmation.clone().map(|gate| {
            let stopped = stop.clone();
            tokio::spawn(async move { gate.run_periodic(Box::pin(stopped.cancelled_owned())).await })
        });
        Periodic { stop, task }
    }

    /// Stops the work and waits for it to end (the engine's sweep drops a round in progress).
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
