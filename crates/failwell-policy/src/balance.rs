//! The rules of failwell's internal balance ledger (wallets, store credit,
//! points), as pure functions: what a transfer does to two accounts, when a
//! hold may be posted or voided, and what an operation's outcome does to the
//! hold tied to it.
//!
//! The model is TigerBeetle's (docs.tigerbeetle.com, "Transfers" and
//! "Two-phase transfers"): double-entry accounts of one unit each, and
//! transfers between two of them with a unique id, either **single-phase**
//! (posted at once) or **pending** (a hold: the amount is reserved on both
//! sides until the hold is **posted**, for its amount or less, or
//! **voided**, or it **expires**). Amounts are integers in the unit's minor
//! unit (cents, points); balances are `i64` and never wrap.
//!
//! One account's figures ([`Balance`]): `posted` is credits minus debits
//! posted; `debits_pending` and `credits_pending` are the holds it is on
//! either side of. What an account can still spend is
//! [`Balance::available`] (`posted − debits_pending`): a pending credit is
//! not money yet. An account with a `floor` refuses any debit (single-phase
//! or a hold) that would take its available balance below the floor; an
//! account without one (a system account holding the other side of top-ups
//! and payouts) may go negative. Every change is a pair of journal entries
//! ([`Delta`]) that sum to zero for each figure across the two accounts, so
//! over all accounts of a unit `posted` sums to zero and `debits_pending`
//! equals `credits_pending`.

use crate::Outcome;

/// One account's figures, in the unit's minor units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Balance {
    /// The lowest available balance a debit may leave (`Some(0)`: never
    /// below zero), or `None` for no limit.
    pub floor: Option<i64>,
    /// Credits minus debits posted.
    pub posted: i64,
    /// The amounts of the pending holds that debit this account.
    pub debits_pending: i64,
    /// The amounts of the pending holds that credit this account.
    pub credits_pending: i64,
}

impl Balance {
    /// An empty account with `floor`.
    pub fn new(floor: Option<i64>) -> Self {
        Self { floor, ..Self::default() }
    }

    /// What the account can still spend: posted minus the holds on it
    /// (`None` when that does not fit an `i64`).
    pub fn available(&self) -> Option<i64> {
        self.posted.checked_sub(self.debits_pending)
    }

    /// The account after `delta`, or `None` when a figure would overflow.
    fn with(self, delta: Delta) -> Option<Self> {
        Some(Self {
            floor: self.floor,
            posted: self.posted.checked_add(delta.posted)?,
            debits_pending: self.debits_pending.checked_add(delta.debits_pending)?,
            credits_pending: self.credits_pending.checked_add(delta.credits_pending)?,
        })
    }
}

/// One journal entry's change to one account's figures (signed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Added to [`Balance::posted`].
    pub posted: i64,
    /// Added to [`Balance::debits_pending`].
    pub debits_pending: i64,
    /// Added to [`Balance::credits_pending`].
    pub credits_pending: i64,
}

/// A change to the two accounts of a transfer: the journal entry of each
/// side, and both accounts afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The debit account's entry.
    pub debit: Delta,
    /// The credit account's entry.
    pub credit: Delta,
    /// The debit account after the change.
    pub debit_after: Balance,
    /// The credit account after the change.
    pub credit_after: Balance,
}

/// Why a transfer, a post or a void was refused. Nothing is written for a
/// refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The amount is zero or negative.
    #[error("the amount must be a positive integer of minor units, not {0}")]
    NotPositive(i64),
    /// Debit and credit name the same account.
    #[error("a transfer needs two different accounts")]
    SameAccount,
    /// The debit would take the account below its floor.
    #[error("insufficient funds: {available} available above the floor of {floor}, {amount} asked")]
    InsufficientFunds {
        /// The account's available balance before the debit.
        available: i64,
        /// The account's floor.
        floor: i64,
        /// The amount of the debit.
        amount: i64,
    },
    /// A figure would not fit an `i64`.
    #[error("a balance would overflow")]
    Overflow,
    /// A post for more than the hold reserved.
    #[error("a hold of {held} cannot be posted for {amount}")]
    PostExceedsHold {
        /// The hold's amount.
        held: i64,
        /// The amount asked.
        amount: i64,
    },
    /// The hold is no longer pending.
    #[error("the hold is {0} already")]
    NotPending(HoldState),
    /// A correction that does not fit the hold's state: only a posted
    /// hold is reversed, only a voided or expired one posted again.
    #[error("the hold is {0}: nothing to correct")]
    NothingToCorrect(HoldState),
}

/// The two accounts of a transfer, before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sides {
    /// The account debited.
    pub debit: Balance,
    /// The account credited.
    pub credit: Balance,
}

/// Applies a transfer of `amount` from `sides.debit` to `sides.credit`:
/// posted at once, or as a hold when `pending`. `same_account` is whether
/// both sides name one account (refused).
///
/// # Errors
/// [`Refused::NotPositive`], [`Refused::SameAccount`],
/// [`Refused::InsufficientFunds`] when the debit account has a floor and
/// its available balance minus `amount` would be below it, and
/// [`Refused::Overflow`].
pub fn transfer(sides: Sides, amount: i64, pending: bool, same_account: bool) -> Result<Applied, Refused> {
    if amount <= 0 {
        return Err(Refused::NotPositive(amount));
    }
    if same_account {
        return Err(Refused::SameAccount);
    }
    if let Some(floor) = sides.debit.floor {
        let available = sides.debit.available().ok_or(Refused::Overflow)?;
        if available.checked_sub(amount).is_none_or(|left| left < floor) {
            return Err(Refused::InsufficientFunds { available, floor, amount });
        }
    }
    let (debit, credit) = if pending {
        (
            Delta { debits_pending: amount, ..Delta::default() },
            Delta { credits_pending: amount, ..Delta::default() },
        )
    } else {
        (Delta { posted: -amount, ..Delta::default() }, Delta { posted: amount, ..Delta::default() })
    };
    applied(sides, debit, credit)
}

/// Where a hold (a pending transfer) stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HoldState {
    /// Reserved, counting against the debit account's available balance.
    Pending,
    /// Posted: the posted amount moved, the rest was released.
    Posted,
    /// Voided by a call or by the outcome of its operation: nothing moved.
    Voided,
    /// Its timeout passed before it was posted or voided: nothing moved.
    Expired,
}

impl HoldState {
    /// The state as stored and shown: `pending`, `posted`, `voided`,
    /// `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Posted => "posted",
            Self::Voided => "voided",
            Self::Expired => "expired",
        }
    }

    /// The state named by [`Self::as_str`], if any.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Posted, Self::Voided, Self::Expired]
            .into_iter()
            .find(|state| state.as_str() == s)
    }
}

impl std::fmt::Display for HoldState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What ends a hold, or corrects one that ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HoldAction {
    /// Post it, for the amount given (at most the hold's).
    Post(i64),
    /// Void it: release the whole amount.
    Void,
    /// Its timeout passed: release it as [`HoldState::Expired`].
    Expire,
    /// Give back the amount posted (the credit account pays it back to
    /// the debit account, within the credit account's floor): its
    /// operation, which had succeeded, failed after all. The hold becomes
    /// [`HoldState::Voided`].
    Reverse(i64),
    /// Move the amount after all (within the debit account's floor): its
    /// operation, which had failed, succeeded after all. The hold becomes
    /// [`HoldState::Posted`].
    Repost(i64),
}

/// Ends a hold of `held` in `state` with `action`: both sides' holds are
/// released and, for a post, the posted amount moves. A hold ends once:
/// any action on a hold that is not pending is refused (whether it repeats
/// the action that ended it is the caller's question: the same post again
/// is a replay, not an error, to an API).
///
/// A correction ([`HoldAction::Reverse`], [`HoldAction::Repost`]) is a
/// posted transfer between the two accounts, in one direction or the
/// other, under [`transfer`]'s rules.
///
/// # Errors
/// [`Refused::NotPending`], [`Refused::NotPositive`] for a post of zero or
/// less, [`Refused::PostExceedsHold`], [`Refused::Overflow`]; for a
/// correction [`Refused::NothingToCorrect`] and [`Refused::InsufficientFunds`]
/// (the account paying it back would go below its floor).
pub fn end_hold(
    sides: Sides,
    held: i64,
    state: HoldState,
    action: HoldAction,
) -> Result<(HoldState, Applied), Refused> {
    let (posted, next) = match (action, state) {
        (HoldAction::Reverse(amount), HoldState::Posted) => {
            // The posted transfer again, the other way.
            let back = transfer(Sides { debit: sides.credit, credit: sides.debit }, amount, false, false)?;
            let applied = Applied {
                debit: back.credit,
                credit: back.debit,
                debit_after: back.credit_after,
                credit_after: back.debit_after,
            };
            return Ok((HoldState::Voided, applied));
        }
        (HoldAction::Repost(amount), HoldState::Voided | HoldState::Expired) => {
            return transfer(sides, amount, false, false).map(|applied| (HoldState::Posted, applied));
        }
        (HoldAction::Reverse(_) | HoldAction::Repost(_), _) => return Err(Refused::NothingToCorrect(state)),
        (_, HoldState::Posted | HoldState::Voided | HoldState::Expired) => {
            return Err(Refused::NotPending(state));
        }
        (HoldAction::Post(amount), _) if amount <= 0 => return Err(Refused::NotPositive(amount)),
        (HoldAction::Post(amount), _) if amount > held => {
            return Err(Refused::PostExceedsHold { held, amount });
        }
        (HoldAction::Post(amount), _) => (amount, HoldState::Posted),
        (HoldAction::Void, _) => (0, HoldState::Voided),
        (HoldAction::Expire, _) => (0, HoldState::Expired),
    };
    let debit = Delta { posted: -posted, debits_pending: -held, credits_pending: 0 };
    let credit = Delta { posted, debits_pending: 0, credits_pending: -held };
    applied(sides, debit, credit).map(|applied| (next, applied))
}

/// What an operation's outcome does to the hold tied to it, in `state`
/// (of `held`, `posted` of it moved if it was posted): a success posts a
/// pending hold in full, a failure voids it (a dead letter is a failure),
/// and an unknown outcome keeps it pending until reconciliation, a webhook
/// or an operator settles the operation. When the outcome changes after
/// the hold ended (a provider's newer event reverses it), the hold follows:
/// a posted hold whose operation failed is reversed, a voided one whose
/// operation succeeded is posted again. `None`: nothing to do (the outcome
/// is not known, or the hold already agrees with it).
pub fn hold_after(outcome: Option<Outcome>, state: HoldState, held: i64, posted: i64) -> Option<HoldAction> {
    match (outcome?, state) {
        (Outcome::Succeeded, HoldState::Pending) => Some(HoldAction::Post(held)),
        (Outcome::Failed, HoldState::Pending) => Some(HoldAction::Void),
        (Outcome::Failed, HoldState::Posted) => Some(HoldAction::Reverse(posted)),
        (Outcome::Succeeded, HoldState::Voided | HoldState::Expired) => Some(HoldAction::Repost(held)),
        _ => None,
    }
}

/// Both sides after `debit` and `credit`, or [`Refused::Overflow`].
fn applied(sides: Sides, debit: Delta, credit: Delta) -> Result<Applied, Refused> {
    Ok(Applied {
        debit,
        credit,
        debit_after: sides.debit.with(debit).ok_or(Refused::Overflow)?,
        credit_after: sides.credit.with(credit).ok_or(Refused::Overflow)?,
    })
}

#[cfg(test)]
mod tests;
