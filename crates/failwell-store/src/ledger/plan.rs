//! A batch of transfers and hold endings worked out in memory, on the
//! accounts a transaction has locked: the rules of
//! [`failwell_policy::balance`] applied one request after another, and the
//! rows that result. The backends write the plan in the same transaction
//! (`statements.rs`), so a batch of any size costs one lock per account and
//! a few statements.

use std::collections::{BTreeMap, HashMap};

use failwell_policy::{Applied, Balance, HoldAction, HoldState, Sides};
use serde_json::{Value, json};

use super::model::{NewTransfer, Transfer, TransferRefusal, TransferResult, valid_id};

/// A locked account as read: its unit and balance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Locked {
    pub unit: String,
    pub balance: Balance,
}

/// A stored transfer as the plan needs it: the record and its request hash.
#[derive(Clone, Debug)]
pub(crate) struct Known {
    pub transfer: Transfer,
    pub request_hash: String,
}

/// What to write for a batch, and each request's result.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// The accounts changed, as they end (absolute figures).
    pub accounts: BTreeMap<String, Balance>,
    /// New transfer rows (JSON objects for the backend's row source).
    pub new_transfers: Vec<Value>,
    /// Holds ended: (id, state, posted amount).
    pub ended: Vec<(String, HoldState, Option<i64>)>,
    /// Journal rows (JSON objects for the backend's row source).
    pub entries: Vec<Value>,
}

impl Plan {
    /// Account `id` as the plan leaves it so far, or as locked.
    fn balance(&self, id: &str, accounts: &HashMap<String, Locked>) -> Option<Balance> {
        self.accounts.get(id).copied().or_else(|| accounts.get(id).map(|a| a.balance))
    }
}

/// Works out `batch` on `accounts` (locked) given the transfers already
/// stored with the batch's ids (`known`), adding to `plan`: each result in
/// order. A transfer of the batch whose id appeared earlier in it is a
/// replay of that one, or refused when its content differs.
pub(crate) fn transfers(
    batch: &[NewTransfer],
    accounts: &HashMap<String, Locked>,
    known: &HashMap<String, Known>,
    now_ms: i64,
    plan: &mut Plan,
) -> Vec<TransferResult> {
    let mut made: HashMap<&str, Known> = HashMap::new();
    let mut results = Vec::with_capacity(batch.len());
    for new in batch {
        let hash = new.request_hash();
        if let Some(existing) = made.get(new.id.as_str()).or_else(|| known.get(&new.id)) {
            results.push(if existing.request_hash == hash {
                TransferResult::Replayed(existing.transfer.clone())
            } else {
                refused(new, TransferRefusal::IdReused(new.id.clone()))
            });
            continue;
        }
        let (debit, credit) = match sides_of(new, accounts) {
            Ok(sides) => sides,
            Err(reason) => {
                results.push(refused(new, reason));
                continue;
            }
        };
        let sides = Sides {
            debit: plan.balance(&new.debit_account, accounts).unwrap_or(debit.balance),
            credit: plan.balance(&new.credit_account, accounts).unwrap_or(credit.balance),
        };
        let applied = match failwell_policy::transfer(
            sides,
            new.amount,
            new.pending,
            new.debit_account == new.credit_account,
        ) {
            Ok(applied) => applied,
            Err(rule) => {
                results.push(refused(new, rule.into()));
                continue;
            }
        };
        plan.accounts.insert(new.debit_account.clone(), applied.debit_after);
        plan.accounts.insert(new.credit_account.clone(), applied.credit_after);
        let transfer = Transfer {
            id: new.id.clone(),
            debit_account: new.debit_account.clone(),
            credit_account: new.credit_account.clone(),
            unit: debit.unit.clone(),
            amount: new.amount,
            pending: new.pending,
            state: if new.pending { HoldState::Pending } else { HoldState::Posted },
            posted_amount: (!new.pending).then_some(new.amount),
            expires_at_ms: new.timeout_ms.map(|t| now_ms.saturating_add(t)),
            operation: None,
            created_at_ms: now_ms,
            ended_at_ms: None,
            ended_by: None,
        };
        plan.new_transfers.push(json!({
            "id": transfer.id,
            "debit_account": transfer.debit_account,
            "credit_account": transfer.credit_account,
            "unit": transfer.unit,
            "amount": transfer.amount,
            "pending": i64::from(transfer.pending),
            "state": transfer.state.as_str(),
            "posted_amount": transfer.posted_amount,
            "expires_at_ms": transfer.expires_at_ms,
            "request_hash": hash,
            "created_at_ms": now_ms,
        }));
        journal(plan, &transfer, if new.pending { "hold" } else { "transfer" }, &applied, now_ms);
        made.insert(&new.id, Known { transfer: transfer.clone(), request_hash: hash });
        results.push(TransferResult::Created(transfer));
    }
    results
}

/// Ends the hold `hold` with `action` on its two accounts (locked), or says
/// why not. The plan holds its journal, its accounts and its new state.
pub(crate) fn end_hold(
    hold: &Transfer,
    action: HoldAction,
    accounts: &HashMap<String, Locked>,
    now_ms: i64,
    plan: &mut Plan,
) -> Result<Transfer, TransferRefusal> {
    if !hold.pending {
        return Err(TransferRefusal::Invalid(format!("transfer {:?} is not a hold", hold.id)));
    }
    let (Some(debit), Some(credit)) =
        (plan.balance(&hold.debit_account, accounts), plan.balance(&hold.credit_account, accounts))
    else {
        return Err(TransferRefusal::NoAccount(hold.debit_account.clone()));
    };
    let (state, applied) =
        failwell_policy::end_hold(Sides { debit, credit }, hold.amount, hold.state, action)?;
    let (posted_amount, event) = match action {
        HoldAction::Post(amount) => (Some(amount), "post"),
        HoldAction::Void => (None, "void"),
        HoldAction::Expire => (None, "expire"),
        HoldAction::Reverse(_) => (None, "reverse"),
        HoldAction::Repost(amount) => (Some(amount), "repost"),
    };
    plan.accounts.insert(hold.debit_account.clone(), applied.debit_after);
    plan.accounts.insert(hold.credit_account.clone(), applied.credit_after);
    journal(plan, hold, event, &applied, now_ms);
    plan.ended.push((hold.id.clone(), state, posted_amount));
    Ok(Transfer { state, posted_amount, ended_at_ms: Some(now_ms), ..hold.clone() })
}

/// The two accounts of `new`, checked: both exist, one unit, valid ids,
/// a timeout only on a hold and positive.
fn sides_of<'a>(
    new: &NewTransfer,
    accounts: &'a HashMap<String, Locked>,
) -> Result<(&'a Locked, &'a Locked), TransferRefusal> {
    if !valid_id(&new.id, 255) {
        return Err(TransferRefusal::Invalid(
            "a transfer id is 1 to 255 bytes of printable ASCII without spaces".into(),
        ));
    }
    match new.timeout_ms {
        Some(_) if !new.pending => {
            return Err(TransferRefusal::Invalid("timeout_ms is for holds (pending transfers) only".into()));
        }
        Some(t) if t <= 0 => {
            return Err(TransferRefusal::Invalid(format!("timeout_ms must be more than zero, not {t}")));
        }
        _ => {}
    }
    let account = |id: &String| accounts.get(id).ok_or_else(|| TransferRefusal::NoAccount(id.clone()));
    let (debit, credit) = (account(&new.debit_account)?, account(&new.credit_account)?);
    if debit.unit != credit.unit {
        return Err(TransferRefusal::UnitMismatch {
            debit: new.debit_account.clone(),
            debit_unit: debit.unit.clone(),
            credit: new.credit_account.clone(),
            credit_unit: credit.unit.clone(),
        });
    }
    Ok((debit, credit))
}

fn refused(new: &NewTransfer, reason: TransferRefusal) -> TransferResult {
    TransferResult::Refused { id: new.id.clone(), reason }
}

/// The two journal rows of one change.
fn journal(plan: &mut Plan, transfer: &Transfer, event: &str, applied: &Applied, now_ms: i64) {
    for (account, delta) in
        [(&transfer.debit_account, applied.debit), (&transfer.credit_account, applied.credit)]
    {
        plan.entries.push(json!({
            "account_id": account,
            "transfer_id": transfer.id,
            "event": event,
            "posted": delta.posted,
            "debits_pending": delta.debits_pending,
            "credits_pending": delta.credits_pending,
            "created_at_ms": now_ms,
        }));
    }
}
