//! The ledger role: internal balances (wallets, store credit, points) that
//! never overdraw, never apply a transfer twice, and whose holds follow the
//! outcome of the operation they are tied to (`docs/LEDGER.md`).
//!
//! The rules are [`failwell_policy::balance`]'s; this role applies them to
//! the accounts a transaction locks (`plan.rs`, in memory) and writes the
//! result: a batch of any size takes one row lock per account it touches,
//! in id order (so two batches never deadlock), and a few statements.

pub(crate) mod model;
pub(crate) mod plan;
pub(crate) mod rows;
pub(crate) mod statements;

use std::future::Future;

use failwell_policy::{HoldAction, HoldState};

pub use model::{
    Account, Ended, Entry, LedgerStats, NewAccount, NewHold, NewTransfer, Opened, Swept, Transfer,
    TransferRefusal, TransferResult,
};

use crate::error::StoreError;

/// How an API call ends a hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldEnd {
    /// Post it, for the amount given or (`None`) its whole amount.
    Post(Option<i64>),
    /// Void it.
    Void,
}

/// What failwell's ledger needs of its store. Every method is one
/// transaction; a refusal writes nothing.
#[async_trait::async_trait]
pub trait LedgerStore {
    /// Opens `account`. The same id with the same unit and floor is
    /// [`Opened::Existing`]; with another unit or floor it is
    /// [`Opened::Differs`]. Errors: [`StoreError::InvalidAccount`] (an id
    /// or unit out of form), [`StoreError::Database`].
    async fn open_account(&self, account: NewAccount, now_ms: i64) -> Result<Opened, StoreError>;

    /// Applies `batch` in order, in one transaction: each transfer is
    /// created, replayed (its id exists with the same content) or refused
    /// on its own ([`TransferResult`]); a refusal does not stop the others.
    async fn transfer(&self, batch: Vec<NewTransfer>, now_ms: i64)
    -> Result<Vec<TransferResult>, StoreError>;

    /// Posts or voids hold `id` (not one tied to an operation: its outcome
    /// ends it). Ending it again the same way is [`Ended::Already`].
    async fn end_hold(&self, id: &str, end: HoldEnd, now_ms: i64) -> Result<Ended, StoreError>;

    /// Ends up to `limit` holds whose time has come: those whose operation
    /// succeeded (posted in full) or failed (voided), and those whose
    /// timeout passed (expired); and corrects those whose operation's
    /// outcome changed after they ended (reversed, reposted); see
    /// [`failwell_policy::hold_after`]. A hold that cannot end or be
    /// corrected now is in [`Swept::refused`] and waits [`FOLLOW_RETRY_MS`]
    /// before the next try.
    async fn settle_holds(&self, now_ms: i64, limit: u32) -> Result<Swept, StoreError>;

    /// Account `id`, if it exists.
    async fn account(&self, id: &str) -> Result<Option<Account>, StoreError>;

    /// Up to `limit` journal entries of account `id` after entry `after`
    /// (0: from the first), oldest first.
    async fn entries(&self, id: &str, after: i64, limit: u32) -> Result<Vec<Entry>, StoreError>;

    /// Up to `limit` accounts with ids after `after` ("": from the first),
    /// in id order.
    async fn accounts(&self, after: &str, limit: u32) -> Result<Vec<Account>, StoreError>;

    /// Up to `limit` pending holds, oldest first.
    async fn pending_holds(&self, limit: u32) -> Result<Vec<Transfer>, StoreError>;

    /// Transfer `id`, if it exists.
    async fn transfer_by_id(&self, id: &str) -> Result<Option<Transfer>, StoreError>;

    /// Holds pending and the oldest one's age.
    async fn ledger_stats(&self) -> Result<LedgerStats, StoreError>;
}

/// The ledger inside the caller's own transaction.
#[derive(Debug)]
pub struct Ledger;

impl Ledger {
    /// Applies `batch` on `conn` — typically `&mut tx`, a transaction of the
    /// store's database — next to the caller's own writes: both commit or
    /// neither does. Results as [`LedgerStore::transfer`]. The accounts
    /// touched stay locked until the caller's transaction ends. Errors:
    /// [`StoreError::Database`]; when another transaction made a transfer
    /// with one of the batch's ids at the same time,
    /// [`StoreError::is_unique_violation`] says so: run the transaction
    /// again (it will find that transfer).
    pub async fn transfer<C: LedgerConnection>(
        conn: &mut C,
        batch: &[NewTransfer],
        now_ms: i64,
    ) -> Result<Vec<TransferResult>, StoreError> {
        conn.apply_transfers(batch, now_ms).await
    }
}

/// A connection the ledger can write on (SQLite's, PostgreSQL's or
/// MySQL's).
pub trait LedgerConnection: Send {
    /// See [`Ledger::transfer`].
    fn apply_transfers(
        &mut self,
        batch: &[NewTransfer],
        now_ms: i64,
    ) -> impl Future<Output = Result<Vec<TransferResult>, StoreError>> + Send;

    /// Ties hold `hold` (a pending transfer just made or replayed in this
    /// transaction) to operation `operation_id`, so that the operation's
    /// outcome ends it.
    fn tie_hold(
        &mut self,
        hold: &str,
        operation_id: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Makes `hold` for the operation `submitted` (key `key`) on `conn`, in
/// its transaction, and ties the two. A replayed operation must have been
/// made with the same hold. Errors: [`StoreError::HoldRefused`] (e.g.
/// insufficient funds, or the id taken by another transfer),
/// [`StoreError::KeyReused`] (a replay with another hold),
/// [`StoreError::Database`]. The caller rolls back on error.
pub(crate) async fn hold_with<C: LedgerConnection>(
    conn: &mut C,
    hold: &NewHold,
    submitted: &crate::Submitted,
    key: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    let result = conn.apply_transfers(&[NewTransfer::from(hold)], now_ms).await?.pop();
    let reused = || StoreError::KeyReused { key: key.to_owned() };
    match (submitted, result) {
        (crate::Submitted::Created(op), Some(TransferResult::Created(_))) => {
            conn.tie_hold(&hold.id, op.id).await
        }
        (crate::Submitted::Created(_), Some(TransferResult::Replayed(_))) => {
            Err(StoreError::HoldRefused(TransferRefusal::IdReused(hold.id.clone())))
        }
        (crate::Submitted::Created(_), Some(TransferResult::Refused { reason, .. })) => {
            Err(StoreError::HoldRefused(reason))
        }
        (crate::Submitted::Replayed(_), Some(TransferResult::Replayed(t)))
            if t.operation.as_deref() == Some(key) =>
        {
            Ok(())
        }
        (crate::Submitted::Replayed(_), _) | (_, None) => Err(reused()),
    }
}

/// How long a hold the sweep could not end or correct waits before the
/// sweep tries it again, in ms ([`LedgerStore::settle_holds`]).
pub const FOLLOW_RETRY_MS: i64 = 30_000;

/// What a sweep does to `hold` at `now_ms`: what its operation's status
/// says (end it, or correct it when the outcome changed after it ended),
/// or expire it (`None`: nothing now).
pub(crate) fn sweep_action(status: Option<&str>, hold: &Transfer, now_ms: i64) -> Option<HoldAction> {
    let outcome = match status {
        Some("succeeded") => Some(failwell_policy::Outcome::Succeeded),
        Some("failed") => Some(failwell_policy::Outcome::Failed),
        _ => None,
    };
    let expired = hold.state == HoldState::Pending && hold.expires_at_ms.is_some_and(|at| at <= now_ms);
    failwell_policy::hold_after(outcome, hold.state, hold.amount, hold.posted_amount.unwrap_or(0))
        .or(expired.then_some(HoldAction::Expire))
}
