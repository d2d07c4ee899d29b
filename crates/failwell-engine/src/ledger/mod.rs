//! The balance ledger's effects (`docs/LEDGER.md`): the group commit of
//! single transfers ([`Transfers`]), the task that ends holds whose time
//! has come ([`sweep`]), holds ended by hand ([`end_hold`]), and the
//! ledger's counters.
//!
//! The rules (floors, holds, what an operation's outcome does to its hold)
//! are `failwell-policy`'s and the store applies them; this module decides
//! nothing, it only batches, schedules and counts.

mod batcher;
mod sweep;

use failwell_policy::Refused;
use failwell_store::{Ended, HoldEnd, Store, StoreError, Submitted, TransferRefusal, TransferResult};

pub use batcher::{TRANSFER_BATCH, TransferError, Transfers};
pub use sweep::{SWEEP_INTERVAL, SWEEP_LIMIT, sweep};

/// Every reason [`refusal_reason`] names, for series created at zero.
pub const REFUSAL_REASONS: [&str; 5] =
    ["insufficient-funds", "unknown-account", "unit-mismatch", "invalid-transfer", "transfer-id-reused"];

/// Why a transfer was refused, as the slug of the HTTP API's problem type
/// (one of [`REFUSAL_REASONS`]; `docs/PROBLEMS.md`): the label of
/// `failwell_ledger_refused_total` and the `type` of the answer.
pub fn refusal_reason(reason: &TransferRefusal) -> &'static str {
    match reason {
        TransferRefusal::Rule(Refused::InsufficientFunds { .. }) => "insufficient-funds",
        TransferRefusal::NoAccount(_) => "unknown-account",
        TransferRefusal::UnitMismatch { .. } => "unit-mismatch",
        TransferRefusal::IdReused(_) => "transfer-id-reused",
        TransferRefusal::Rule(_) | TransferRefusal::Invalid(_) => "invalid-transfer",
    }
}

/// Applies `batch` in order in one transaction ([`failwell_store::LedgerStore::transfer`])
/// and counts each result in `failwell_ledger_transfers_total{result}`
/// (`created`, `replayed`, `refused`) and each refusal in
/// `failwell_ledger_refused_total{reason}` ([`refusal_reason`]). Errors:
/// the store's (nothing was applied).
pub async fn apply(
    store: &Store,
    batch: Vec<failwell_store::NewTransfer>,
) -> Result<Vec<TransferResult>, StoreError> {
    let results = store.transfer(batch, crate::now_ms()).await?;
    for result in &results {
        match result {
            TransferResult::Created(_) => count("created", None),
            TransferResult::Replayed(_) => count("replayed", None),
            TransferResult::Refused { reason, .. } => count("refused", Some(reason)),
        }
    }
    Ok(results)
}

/// Counts what submitting an operation with a hold did to its hold, as
/// [`apply`] counts a transfer: made with a new operation (`created`),
/// replayed with it (`replayed`), or refused
/// ([`StoreError::HoldRefused`]); other errors are not the ledger's.
pub fn count_hold(submitted: &Result<Submitted, StoreError>) {
    match submitted {
        Ok(Submitted::Created(_)) => count("created", None),
        Ok(Submitted::Replayed(_)) => count("replayed", None),
        Err(StoreError::HoldRefused(reason)) => count("refused", Some(reason)),
        Err(_) => {}
    }
}

/// One transfer in `failwell_ledger_transfers_total{result}`, and its
/// refusal in `failwell_ledger_refused_total{reason}`.
fn count(result: &'static str, refused: Option<&TransferRefusal>) {
    if let Some(reason) = refused {
        metrics::counter!("failwell_ledger_refused_total", "reason" => refusal_reason(reason)).increment(1);
    }
    metrics::counter!("failwell_ledger_transfers_total", "result" => result).increment(1);
}

/// Posts or voids hold `id` by hand ([`failwell_store::LedgerStore::end_hold`])
/// and counts it in `failwell_ledger_holds_ended_total{how}` when it ends
/// now. Errors: the store's.
pub async fn end_hold(store: &Store, id: &str, end: HoldEnd) -> Result<Ended, StoreError> {
    let ended = store.end_hold(id, end, crate::now_ms()).await?;
    if let Ended::Now(_) = ended {
        count_ended(if let HoldEnd::Void = end { "voided" } else { "posted" }, 1);
    }
    Ok(ended)
}

/// Counts `count` holds ended `how` (`posted`, `voided` or `expired`) in
/// `failwell_ledger_holds_ended_total`.
fn count_ended(how: &'static str, count: u64) {
    metrics::counter!("failwell_ledger_holds_ended_total", "how" => how).increment(count);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_one_of_the_reasons() {
        let refusals = [
            TransferRefusal::Rule(Refused::InsufficientFunds { available: 1, floor: 0, amount: 2 }),
            TransferRefusal::Rule(Refused::NotPositive(0)),
            TransferRefusal::Rule(Refused::SameAccount),
            TransferRefusal::NoAccount("a".into()),
            TransferRefusal::UnitMismatch {
                debit: "a".into(),
                debit_unit: "EUR".into(),
                credit: "b".into(),
                credit_unit: "USD".into(),
            },
            TransferRefusal::IdReused("t".into()),
            TransferRefusal::Invalid("no".into()),
        ];
        let named: Vec<&str> = refusals.iter().map(refusal_reason).collect();
        assert_eq!(
            named,
            [
                "insufficient-funds",
                "invalid-transfer",
                "invalid-transfer",
                "unknown-account",
                "unit-mismatch",
                "transfer-id-reused",
                "invalid-transfer"
            ]
        );
        assert!(named.iter().all(|n| REFUSAL_REASONS.contains(n)));
    }
}
