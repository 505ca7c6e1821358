//! The connection that listens for settlements (`LISTEN {schema}_idem`) and wakes this replica's
//! followers.
//!
//! Each notification's payload is the digest of a record's key ([`digest`]); it is handed to
//! every follower waiting here, and each looks at its record again when the digest is its own.
//! When the connection is lost, the listener connects again (after 100 ms, doubling up to 2 s)
//! and, once listening again, hands out [`ANY`]: a notification may have been missed meanwhile,
//! so every follower looks at its record.

use std::time::Duration;

use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, watch};

/// What the listener hands out after a reconnection: every follower looks again.
pub(crate) const ANY: &str = "*";

/// How many notifications a slow follower may fall behind before it looks again anyway.
const BACKLOG: usize = 4096;

/// The digest a record's notifications carry: 64 hex digits of SHA-256 over the consumer key's
/// length, the consumer key and the invocation id (never the key itself).
pub(crate) fn digest(consumer: &str, invocation: &str) -> String {
    let mut h = Sha256::new();
    h.update(consumer.len().to_string().as_bytes());
    h.update(b":");
    h.update(consumer.as_bytes());
    h.update(b":");
    h.update(invocation.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The listening side of the stores (cheap to share).
pub(crate) struct Listener {
    woken: broadcast::Sender<String>,
    channel: String,
}

impl Listener {
    /// Connects, listens on `channel`, and keeps listening (reconnecting when needed) until
    /// `stopped` learns that the stores are gone. Returns once the first `LISTEN` is in place, so
    /// that no settlement after it goes unheard.
    pub(crate) async fn start(
        config: tokio_postgres::Config,
        channel: String,
        budget: Duration,
        stopped: watch::Receiver<()>,
    ) -> Result<Listener, String> {
        let (woken, _) = broadcast::channel(BACKLOG);
        let first = tokio::time::timeout(budget.max(Duration::from_secs(5)), listen(&config, &channel, &woken))
            .await
            .map_err(|_| "timed out".to_string())??;
        let task_woken = woken.clone();
        let task_channel = channel.clone();
        tokio::spawn(keep_listening(config, task_channel, task_woken, first, stopped));
        Ok(Listener { woken, channel })
    }

    /// A receiver of the digests notified from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<String> {
        self.woken.subscribe()
    }

    /// The channel's name.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }
}

/// A listening connection: its client (kept alive) and the task that drives it, which ends when
/// the connection does.
struct Listening {
    _client: tokio_postgres::Client,
    driver: tokio::task::JoinHandle<()>,
}

async fn listen(
    config: &tokio_postgres::Config,
    channel: &str,
    woken: &broadcast::Sender<String>,
) -> Result<Listening, String> {
    let (client, mut connection) = config.connect(tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
    let sender = woken.clone();
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                    let _ = sender.send(n.payload().to_string());
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(target: "agent_surface::store", error = %agent_surface_policy::redacted(&e), "the PostgreSQL listening connection failed");
                    break;
                }
            }
        }
    });
    if let Err(e) = client.batch_execute(&format!("LISTEN \"{channel}\"")).await {
        driver.abort();
        return Err(e.to_string());
    }
    Ok(Listening { _client: client, driver })
}

async fn keep_listening(
    config: tokio_postgres::Config,
    channel: String,
    woken: broadcast::Sender<String>,
    first: Listening,
    mut stopped: watch::Receiver<()>,
) {
    let mut current = first;
    loop {
        tokio::select! {
            _ = &mut current.driver => {}
            _ = stopped.changed() => {
                current.driver.abort();
                return;
            }
        }
        // The connection is gone: listen again, then wake everyone.
        let mut wait = Duration::from_millis(100);
        loop {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = stopped.changed() => return,
            }
            match listen(&config, &channel, &woken).await {
                Ok(again) => {
                    current = again;
                    let _ = woken.send(ANY.to_string());
                    tracing::info!(target: "agent_surface::store", "the PostgreSQL listening connection is back");
                    break;
                }
                Err(e) => {
                    tracing::warn!(target: "agent_surface::store", error = %agent_surface_policy::redacted(&e), "the PostgreSQL listening connection cannot be made again yet");
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}
