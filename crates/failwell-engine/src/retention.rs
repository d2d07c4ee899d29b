//! Retention: delivered outbox messages are deleted once they are old
//! enough, in small batches, so the table the relay claims from keeps only
//! open and recent work (and the space dead rows take can be reused).

use std::time::Duration;

use failwell_store::Store;
use tokio_util::sync::CancellationToken;

use crate::now_ms;

/// How long delivered messages are kept, and how they are deleted.
#[derive(Clone, Debug)]
pub struct RetentionConfig {
    /// A delivered message (its operation `succeeded` or `failed`) is
    /// deleted this long after its delivery; its operation, attempts and
    /// history stay.
    pub delivered: Duration,
    /// Messages deleted per statement: short transactions, short locks.
    pub batch_size: u32,
    /// How often retention runs.
    pub interval: Duration,
}

/// Deletes delivered messages older than `config.delivered`, a batch at a
/// time, every `config.interval`, until `shutdown`.
pub async fn run(store: Store, config: RetentionConfig, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(config.interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        let before = now_ms() - config.delivered.as_millis() as i64;
        let mut deleted = 0;
        loop {
            match store.delete_delivered(before, config.batch_size).await {
                Ok(n) => {
                    deleted += n;
                    if n < u64::from(config.batch_size) || shutdown.is_cancelled() {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "deleting delivered messages failed");
                    break;
                }
            }
        }
        if deleted > 0 {
            tracing::debug!(deleted, "delivered messages deleted");
            metrics::counter!("failwell_outbox_deleted_total").increment(deleted);
        }
    }
}
