//! The `ledger` task ([`sweep`]): ends the holds whose time has come —
//! those whose operation succeeded (posted) or failed (voided), and those
//! whose timeout passed (expired) —, corrects those whose operation's
//! outcome changed after they ended (reversed, reposted), and sets the
//! ledger's gauges.
//!
//! What ends a hold is the store's and the policy's decision
//! ([`failwell_store::LedgerStore::settle_holds`]); this task only runs it
//! often, in rounds of [`SWEEP_LIMIT`].

use std::time::Duration;

use failwell_store::Store;
use tokio_util::sync::CancellationToken;

use super::count_ended;
use crate::now_ms;

/// How often the task runs: a hold ends within about this long of its
/// operation's outcome or its timeout.
pub const SWEEP_INTERVAL: Duration = Duration::from_millis(500);
/// Holds ended per transaction, at most; a full round is followed by
/// another at once.
pub const SWEEP_LIMIT: u32 = 512;

/// Every [`SWEEP_INTERVAL`] until `shutdown`: ends the holds due, in
/// rounds of [`SWEEP_LIMIT`] while a round is full, counting them in
/// `failwell_ledger_holds_ended_total{how}` (`posted`, `voided`,
/// `expired`, `reversed`, `reposted`) and each hold that could not follow
/// in `failwell_ledger_holds_refused_total` (one warning a round; each such
/// hold waits [`failwell_store::FOLLOW_RETRY_MS`]); then sets
/// `failwell_ledger_holds_pending` and
/// `failwell_ledger_oldest_hold_age_seconds` (0 without pending holds).
/// A store error is logged and the task goes on at the next tick.
pub async fn sweep(store: Store, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(SWEEP_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {}
        }
        loop {
            match store.settle_holds(now_ms(), SWEEP_LIMIT).await {
                Ok(swept) => {
                    count_ended("posted", swept.posted);
                    count_ended("voided", swept.voided);
                    count_ended("expired", swept.expired);
                    count_ended("reversed", swept.reversed);
                    count_ended("reposted", swept.reposted);
                    if let Some((hold, reason)) = swept.refused.first() {
                        let count = swept.refused.len();
                        metrics::counter!("failwell_ledger_holds_refused_total").increment(count as u64);
                        tracing::warn!(
                            count,
                            hold = %hold,
                            reason = %reason,
                            retry_ms = failwell_store::FOLLOW_RETRY_MS,
                            "holds could not follow their operation (the first named); each is tried again later"
                        );
                    }
                    if swept.changed() < u64::from(SWEEP_LIMIT) || shutdown.is_cancelled() {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %crate::chain(&e), "ending holds failed");
                    break;
                }
            }
        }
        match store.ledger_stats().await {
            Ok(stats) => {
                metrics::gauge!("failwell_ledger_holds_pending").set(stats.holds_pending as f64);
                let age = stats.oldest_hold_at_ms.map_or(Duration::ZERO, |at| crate::since(now_ms(), at));
                metrics::gauge!("failwell_ledger_oldest_hold_age_seconds").set(age.as_secs_f64());
            }
            Err(e) => tracing::warn!(error = %crate::chain(&e), "reading the ledger's gauges failed"),
        }
    }
}
