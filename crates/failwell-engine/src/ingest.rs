//! The group commit of webhook events ([`Ingest`]): deliveries that arrive
//! together are stored in one transaction, so one fsync serves many of
//! them, and each delivery is answered once its transaction committed.

use std::time::Duration;

use failwell_store::{NewEvent, Received, Store};
use tokio::sync::oneshot;

/// Deliveries waiting for the group commit, at most.
const INGEST_QUEUE: usize = 4096;
/// Events committed in one transaction, at most.
const INGEST_BATCH: usize = 256;
/// The longest a delivery waits for others to share its commit.
pub const INGEST_LINGER: Duration = Duration::from_millis(10);
/// The first wait tried when deliveries trickle in one at a time.
const LINGER_PROBE: Duration = Duration::from_millis(2);

/// How long the group commit waits for more deliveries before it commits,
/// learnt from what waiting brought (a feedback rule in the spirit of
/// Nagle's algorithm and PostgreSQL's `commit_delay`).
///
/// Deliveries that trickle in one at a time would each cost a commit (an
/// fsync on SQLite's single writer): after two lone commits in a row the
/// next one waits [`LINGER_PROBE`]. A wait is split in halves; when
/// deliveries still arrived in its second half the next wait doubles (up to
/// [`INGEST_LINGER`]), and when none did it halves (to none below the
/// probe). So a steady stream settles on waits that gather it, while a
/// fixed set of senders that each wait for their answer (who all arrived
/// in the first half) is committed without waiting.
#[derive(Debug, Default)]
struct Linger {
    wait: Duration,
    lone_before: bool,
}

impl Linger {
    /// How long to wait with `waiting` deliveries in hand.
    fn wait_for(&self, waiting: usize) -> Duration {
        if self.wait.is_zero() && waiting == 1 && self.lone_before { LINGER_PROBE } else { self.wait }
    }

    /// Learns from a wait of `waited`: whether deliveries arrived in its
    /// second half.
    fn learn(&mut self, waited: Duration, arrived_late: bool) {
        self.wait = if arrived_late {
            (waited * 2).min(INGEST_LINGER)
        } else if waited / 2 < LINGER_PROBE {
            Duration::ZERO
        } else {
            waited / 2
        };
    }

    /// Notes a commit of `size` deliveries.
    fn committed(&mut self, size: usize) {
        self.lone_before = size == 1;
    }
}

/// Bytes of bodies committed in one transaction, at most (a larger body
/// goes alone): bounds the memory of a group commit and keeps it far below
/// SQLite's 1 GB limit on a bound value.
const INGEST_BATCH_BYTES: usize = 16 << 20;

/// Group commit for webhook events: one writer task stores whatever
/// deliveries arrived together in one transaction, and each delivery is
/// answered once its transaction committed. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Ingest {
    queue: tokio::sync::mpsc::Sender<(NewEvent, oneshot::Sender<Option<Received>>)>,
}

impl Ingest {
    /// Starts the writer task on `store`; it ends when every handle is
    /// dropped. Each transaction counts in `failwell_webhook_commits_total`.
    pub fn start(store: Store) -> Self {
        let (queue, mut waiting) =
            tokio::sync::mpsc::channel::<(NewEvent, oneshot::Sender<Option<Received>>)>(INGEST_QUEUE);
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(INGEST_BATCH);
            let mut linger = Linger::default();
            while waiting.recv_many(&mut batch, INGEST_BATCH).await > 0 {
                let wait = linger.wait_for(batch.len());
                if !wait.is_zero() && batch.len() < INGEST_BATCH {
                    let mut gather = |batch: &mut Vec<_>| {
                        while batch.len() < INGEST_BATCH
                            && let Ok(next) = waiting.try_recv()
                        {
                            batch.push(next);
                        }
                    };
                    tokio::time::sleep(wait / 2).await;
                    gather(&mut batch);
                    let half = batch.len();
                    tokio::time::sleep(wait - wait / 2).await;
                    gather(&mut batch);
                    linger.learn(wait, batch.len() > half);
                }
                linger.committed(batch.len());
                let mut arrived = std::mem::take(&mut batch).into_iter().peekable();
                while arrived.peek().is_some() {
                    // At most INGEST_BATCH_BYTES of bodies per transaction
                    // (and always at least one delivery).
                    let mut bytes = 0;
                    let group: Vec<_> = std::iter::from_fn(|| {
                        let next = arrived.next_if(|(event, _)| {
                            bytes == 0 || bytes + event.payload.len() <= INGEST_BATCH_BYTES
                        })?;
                        bytes += next.0.payload.len().max(1);
                        Some(next)
                    })
                    .collect();
                    commit(&store, group).await;
                }
            }
        });
        Self { queue }
    }

    /// Stores `event` in one of the next group commits; `None` when the
    /// store failed.
    pub async fn store(&self, event: NewEvent) -> Option<Received> {
        let (reply, answer) = oneshot::channel();
        self.queue.send((event, reply)).await.ok()?;
        answer.await.ok().flatten()
    }
}

/// Commits one group of deliveries and answers each.
async fn commit(store: &Store, group: Vec<(NewEvent, oneshot::Sender<Option<Received>>)>) {
    let (events, replies): (Vec<_>, Vec<_>) = group.into_iter().unzip();
    let count = events.len();
    metrics::counter!("failwell_webhook_commits_total").increment(1);
    match store.receive(events, crate::now_ms()).await {
        Ok(received) => {
            for (reply, r) in replies.into_iter().zip(received) {
                let _ = reply.send(Some(r));
            }
        }
        Err(e) => {
            // Nothing was committed: every delivery gets a 503 and the
            // provider delivers again.
            tracing::error!(error = %e, count, "storing webhook events failed");
            for reply in replies {
                let _ = reply.send(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_linger_grows_for_a_trickle_and_vanishes_for_senders_that_wait() {
        let ms = Duration::from_millis;
        let mut linger = Linger::default();
        // Deliveries commit at once until two lone commits in a row.
        assert_eq!(linger.wait_for(1), Duration::ZERO);
        linger.committed(1);
        assert_eq!(linger.wait_for(5), Duration::ZERO, "not lone: no probe");
        assert_eq!(linger.wait_for(1), LINGER_PROBE);
        // A trickle: deliveries keep arriving late in every wait.
        let mut waits = Vec::new();
        for _ in 0..5 {
            let wait = linger.wait_for(1);
            waits.push(wait);
            linger.learn(wait, true);
            linger.committed(4);
        }
        assert_eq!(waits, [ms(2), ms(4), ms(8), ms(10), ms(10)]);
        // Senders that all arrived in the first half: the wait shrinks away.
        let mut waits = Vec::new();
        for _ in 0..4 {
            let wait = linger.wait_for(64);
            waits.push(wait);
            if !wait.is_zero() {
                linger.learn(wait, false);
            }
            linger.committed(64);
        }
        assert_eq!(waits, [ms(10), ms(5), Duration::from_micros(2_500), Duration::ZERO]);
    }
}
