//! Notifications on one channel (PostgreSQL's LISTEN), from a connection of their own
//! that is opened again whenever it is lost; and the channel name a store in a schema
//! uses, so that executors in two schemas of one database never hear each other.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::{Cached, Postgres, chain};
use crate::{Error, Result};

/// How long the listener waits before connecting again after losing its connection.
const RECONNECT_AFTER: Duration = Duration::from_millis(500);

/// The payloads of the notifications on one channel, in the order they were delivered.
/// A notification sent while the listener was disconnected is lost: its users read
/// what it announced from the database as well. Dropping it stops the listening.
pub struct Listener {
    pub payloads: mpsc::UnboundedReceiver<String>,
    _listening: JoinSet<()>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").finish_non_exhaustive()
    }
}

impl Postgres {
    /// `base` for the stores in this pool's current schema: `base` itself in `public`,
    /// `base_<schema>` (or a digest of the schema, past 63 bytes) in another one.
    pub async fn channel(&self, base: &str) -> Result<String> {
        let schema: String = self
            .connection()
            .await?
            .row("SELECT current_schema()::TEXT", &[])
            .await
            .map_err(|e| Error::store(chain(&e)))?
            .get(0);
        Ok(channel_for(base, &schema))
    }

    /// Listens on `channel`; returns once the first LISTEN holds, so that a notification
    /// sent after that reaches it. `what` names the listener in the log.
    pub async fn listen(&self, channel: String, what: &'static str) -> Result<Listener> {
        let (payloads, received) = mpsc::unbounded_channel();
        let (listening, listens) = oneshot::channel();
        let mut tasks = JoinSet::new();
        tasks.spawn(keep_listening(
            self.clone(),
            channel,
            what,
            payloads,
            listening,
        ));
        listens.await.map_err(|_| {
            Error::store(format!(
                "cannot listen for {what} on PostgreSQL at {}",
                self.place()
            ))
        })?;
        Ok(Listener {
            payloads: received,
            _listening: tasks,
        })
    }
}

pub(super) fn channel_for(base: &str, schema: &str) -> String {
    if schema == "public" {
        return base.to_owned();
    }
    let named = format!("{base}_{schema}");
    // An identifier is at most 63 bytes; the channel is quoted, so no `"` in it.
    if named.len() <= 63 && !named.contains('"') {
        return named;
    }
    let digest = schema.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{base}_{digest:016x}")
}

/// Listens on `channel` until `payloads` is dropped, connecting again whenever the
/// connection is lost; `listening` is told once the first LISTEN holds.
async fn keep_listening(
    db: Postgres,
    channel: String,
    what: &'static str,
    payloads: mpsc::UnboundedSender<String>,
    listening: oneshot::Sender<()>,
) {
    let mut listening = Some(listening);
    while !payloads.is_closed() {
        match db.config.connect(tokio_postgres::NoTls).await {
            Ok((client, mut connection)) => {
                let forwarding = payloads.clone();
                // The connection's messages, notifications among them, come from polling
                // it; the client's LISTEN completes only while it is polled.
                let driving = async move {
                    loop {
                        let message = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
                        match message {
                            Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                                if forwarding.send(n.payload().to_owned()).is_err() {
                                    return None;
                                }
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => return Some(chain(&e)),
                            None => return Some("the connection closed".to_owned()),
                        }
                    }
                };
                let subscribing = async {
                    if let Err(e) = client.batch_execute(&format!("LISTEN \"{channel}\"")).await {
                        return Some(chain(&e));
                    }
                    db.reached(None);
                    if let Some(listening) = listening.take() {
                        let _ = listening.send(());
                    }
                    std::future::pending().await
                };
                let lost = tokio::select! {
                    lost = driving => lost,
                    lost = subscribing => lost,
                };
                let Some(lost) = lost else {
                    return;
                };
                tracing::warn!(error = %lost, "lost the connection listening for {what} on PostgreSQL; connecting again");
                db.reached(Some(format!(
                    "lost the connection to PostgreSQL at {}: {lost}",
                    db.place()
                )));
            }
            Err(e) => {
                db.reached(Some(format!(
                    "cannot reach PostgreSQL at {}: {}",
                    db.place(),
                    chain(&e)
                )));
                tracing::warn!(error = %chain(&e), "cannot listen for {what} on PostgreSQL; trying again");
            }
        }
        tokio::time::sleep(RECONNECT_AFTER).await;
    }
}
