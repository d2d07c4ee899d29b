//! The ledger's types: accounts, transfers, journal entries and what
//! becomes of a request (see `docs/LEDGER.md`).

use failwell_policy::HoldState;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// An account to open: an id of the caller's choice, its unit and its
/// floor.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewAccount {
    /// The account's id, 1–255 bytes of printable ASCII without spaces
    /// (e.g. `wallet:alice`).
    pub id: String,
    /// Its unit, 1–16 bytes of printable ASCII (e.g. `EUR`, `points`);
    /// transfers move money only between accounts of one unit.
    pub unit: String,
    /// The lowest available balance a debit may leave, in minor units:
    /// `0` (the default) never below zero, a negative floor an overdraft
    /// limit, `null` no limit (a system account). Never above 0.
    #[serde(default = "zero_floor", deserialize_with = "nullable")]
    #[schema(value_type = Option<i64>)]
    pub floor: Option<i64>,
}

fn zero_floor() -> Option<i64> {
    Some(0)
}

/// `null` as `None`, a number as `Some` (absent is the default).
fn nullable<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    Option::<i64>::deserialize(deserializer)
}

/// An account and its balances, in minor units of its unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Account {
    /// The account's id.
    pub id: String,
    /// Its unit.
    pub unit: String,
    /// The lowest available balance a debit may leave; `None`: no limit.
    pub floor: Option<i64>,
    /// Credits minus debits posted.
    pub posted: i64,
    /// The holds that debit it, still pending.
    pub debits_pending: i64,
    /// The holds that credit it, still pending.
    pub credits_pending: i64,
    /// What it can still spend: `posted − debits_pending`.
    pub available: i64,
    /// When it was opened (ms since the Unix epoch).
    pub created_at_ms: i64,
    /// Its last change (ms since the Unix epoch).
    pub updated_at_ms: i64,
}

/// What [`crate::LedgerStore::open_account`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opened {
    /// The account is new.
    Created(Account),
    /// It existed with the same unit and floor: nothing changed.
    Existing(Account),
    /// It exists with another unit or floor: nothing changed.
    Differs(Account),
}

/// A transfer to make: `amount` from `debit_account` to `credit_account`,
/// posted at once or held (`pending`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTransfer {
    /// The transfer's id, its idempotency key: 1–255 bytes of printable
    /// ASCII without spaces. The same id with the same content is the same
    /// transfer; with other content it is refused.
    pub id: String,
    /// The account debited.
    pub debit_account: String,
    /// The account credited (same unit).
    pub credit_account: String,
    /// Minor units, more than zero.
    pub amount: i64,
    /// A hold: reserve the amount now, post or void it later.
    #[serde(default)]
    pub pending: bool,
    /// A hold's timeout (ms): unless posted or voided by then, it expires
    /// and releases the amount. Only for holds not tied to an operation.
    #[serde(default)]
    pub timeout_ms: Option<i64>,
}

impl NewTransfer {
    /// The hash of what the transfer asks (hex SHA-256 over its fields,
    /// each length-prefixed): equal for the same content only.
    pub fn request_hash(&self) -> String {
        let mut hash = Sha256::new();
        for field in [&self.debit_account, &self.credit_account] {
            hash.update((field.len() as u64).to_be_bytes());
            hash.update(field.as_bytes());
        }
        hash.update(self.amount.to_be_bytes());
        hash.update([u8::from(self.pending)]);
        hash.update(self.timeout_ms.map_or([0xff; 8], i64::to_be_bytes));
        hex::encode(hash.finalize())
    }

    /// What `transfer` asked, from its stored columns (its timeout is
    /// `expires_at_ms − created_at_ms`).
    pub(crate) fn asked(transfer: &Transfer) -> Self {
        Self {
            id: transfer.id.clone(),
            debit_account: transfer.debit_account.clone(),
            credit_account: transfer.credit_account.clone(),
            amount: transfer.amount,
            pending: transfer.pending,
            timeout_ms: transfer.expires_at_ms.map(|at| at.saturating_sub(transfer.created_at_ms)),
        }
    }
}

/// A hold to make with an operation (`NewOperation::hold`): `amount`
/// reserved from `debit_account` for `credit_account` until the
/// operation's outcome posts it (success) or voids it (failure).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewHold {
    /// The hold's transfer id (see [`NewTransfer::id`]).
    pub id: String,
    /// The account the amount is reserved on (e.g. the customer's wallet).
    pub debit_account: String,
    /// The account it goes to once the operation succeeds.
    pub credit_account: String,
    /// Minor units, more than zero.
    pub amount: i64,
}

impl From<&NewHold> for NewTransfer {
    fn from(hold: &NewHold) -> Self {
        Self {
            id: hold.id.clone(),
            debit_account: hold.debit_account.clone(),
            credit_account: hold.credit_account.clone(),
            amount: hold.amount,
            pending: true,
            timeout_ms: None,
        }
    }
}

/// A recorded transfer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Transfer {
    /// Its id.
    pub id: String,
    /// The account debited.
    pub debit_account: String,
    /// The account credited.
    pub credit_account: String,
    /// Their unit.
    pub unit: String,
    /// The amount asked (a hold's reserved amount), in minor units.
    pub amount: i64,
    /// Whether it is a hold (two-phase).
    pub pending: bool,
    /// `pending`, `posted`, `voided` or `expired` (a transfer posted at once
    /// is `posted`).
    #[schema(value_type = String)]
    #[serde(serialize_with = "state_name")]
    pub state: HoldState,
    /// What moved: the amount, or a hold's posted amount; `None` while a
    /// hold is pending, and for a voided or expired one.
    pub posted_amount: Option<i64>,
    /// When a pending hold expires (ms since the Unix epoch).
    pub expires_at_ms: Option<i64>,
    /// The operation whose outcome ends the hold, by idempotency key.
    pub operation: Option<String>,
    /// When it was made (ms since the Unix epoch).
    pub created_at_ms: i64,
    /// When a hold ended.
    pub ended_at_ms: Option<i64>,
    /// Who ended it: `api`, `app`, `operation` or `expiry`.
    pub ended_by: Option<String>,
}

fn state_name<S: serde::Serializer>(state: &HoldState, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(state.as_str())
}

/// What became of one [`NewTransfer`] of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransferResult {
    /// Applied now.
    Created(Transfer),
    /// Applied before, with the same content: nothing changed.
    Replayed(Transfer),
    /// Refused; nothing was written for it.
    Refused {
        /// The transfer's id.
        id: String,
        /// Why.
        reason: TransferRefusal,
    },
}

/// Why a transfer was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransferRefusal {
    /// A rule of the ledger ([`failwell_policy::Refused`]): insufficient
    /// funds, an amount not positive, one account on both sides, an
    /// overflow, a post over the hold, a hold ended already.
    #[error(transparent)]
    Rule(#[from] failwell_policy::Refused),
    /// The id is taken by a transfer with other content.
    #[error("transfer id {0:?} was already used with different content")]
    IdReused(String),
    /// An account named does not exist.
    #[error("account {0:?} does not exist")]
    NoAccount(String),
    /// The two accounts have different units.
    #[error("account {debit:?} is in {debit_unit}, account {credit:?} in {credit_unit}")]
    UnitMismatch {
        /// The debit account.
        debit: String,
        /// Its unit.
        debit_unit: String,
        /// The credit account.
        credit: String,
        /// Its unit.
        credit_unit: String,
    },
    /// A field is not acceptable (an id's form, a timeout on a transfer
    /// that is not a hold or is tied to an operation, …).
    #[error("{0}")]
    Invalid(String),
}

/// What posting or voiding a hold by id did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It ended now.
    Now(Transfer),
    /// It had ended the same way already (same action, same amount).
    Already(Transfer),
    /// It had ended otherwise, or the request is refused (the transfer is
    /// not a hold, the amount exceeds it, it is tied to an operation).
    Refused(Transfer, TransferRefusal),
    /// No transfer has this id.
    NotFound,
}

/// One journal entry: one account's change from one transfer event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Entry {
    /// Its sequence number (increasing; a page's cursor).
    pub id: i64,
    /// The account changed.
    pub account_id: String,
    /// The transfer behind it.
    pub transfer_id: String,
    /// `transfer` (posted at once), `hold`, `post`, `void` or `expire`.
    pub event: String,
    /// Added to the account's posted balance.
    pub posted: i64,
    /// Added to its pending debits.
    pub debits_pending: i64,
    /// Added to its pending credits.
    pub credits_pending: i64,
    /// When (ms since the Unix epoch).
    pub created_at_ms: i64,
}

/// What a sweep of holds did ([`crate::LedgerStore::settle_holds`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Holds posted because their operation succeeded.
    pub posted: u64,
    /// Holds voided because their operation failed.
    pub voided: u64,
    /// Holds whose timeout passed.
    pub expired: u64,
    /// Posted holds given back because their operation failed after all.
    pub reversed: u64,
    /// Voided holds posted because their operation succeeded after all.
    pub reposted: u64,
    /// Holds that could not follow their operation now (e.g. the account
    /// paying a reversal back is below what it must give), with why: tried
    /// again on every sweep, after the others.
    pub refused: Vec<(String, TransferRefusal)>,
}

impl Swept {
    /// Holds ended or corrected.
    pub fn changed(&self) -> u64 {
        self.posted + self.voided + self.expired + self.reversed + self.reposted
    }
}

/// The ledger's gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct LedgerStats {
    /// Holds pending.
    pub holds_pending: i64,
    /// When the oldest pending hold was made (ms since the Unix epoch).
    pub oldest_hold_at_ms: Option<i64>,
}

/// Whether `id` is a valid account or transfer id: 1–`max` bytes of
/// printable ASCII without spaces.
pub(crate) fn valid_id(id: &str, max: usize) -> bool {
    (1..=max).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}
