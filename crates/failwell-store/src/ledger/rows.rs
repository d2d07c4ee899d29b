//! The ledger's rows as read on every database.

use failwell_policy::{Balance, HoldState};

use super::model::{Account, Entry, NewTransfer, Transfer};
use super::plan::{Known, Locked};
use crate::error::{Context as _, StoreError};
use crate::operator::rows::OperatorRow;

const CONTEXT: &str = "reading the ledger";

pub(crate) fn locked_from_row<R: OperatorRow>(row: &R) -> Result<(String, Locked), StoreError> {
    Ok((
        row.value("id").context(CONTEXT)?,
        Locked {
            unit: row.value("unit").context(CONTEXT)?,
            balance: Balance {
                floor: row.value("floor").context(CONTEXT)?,
                posted: row.value("posted").context(CONTEXT)?,
                debits_pending: row.value("debits_pending").context(CONTEXT)?,
                credits_pending: row.value("credits_pending").context(CONTEXT)?,
            },
        },
    ))
}

pub(crate) fn account_from_row<R: OperatorRow>(row: &R) -> Result<Account, StoreError> {
    let (id, locked) = locked_from_row(row)?;
    let b = locked.balance;
    Ok(Account {
        id,
        unit: locked.unit,
        floor: b.floor,
        posted: b.posted,
        debits_pending: b.debits_pending,
        credits_pending: b.credits_pending,
        available: b.available().unwrap_or(i64::MIN),
        created_at_ms: row.value("created_at_ms").context(CONTEXT)?,
        updated_at_ms: row.value("updated_at_ms").context(CONTEXT)?,
    })
}

pub(crate) fn transfer_from_row<R: OperatorRow>(row: &R) -> Result<Known, StoreError> {
    let state: String = row.value("state").context(CONTEXT)?;
    let state =
        HoldState::parse(&state).ok_or(StoreError::Corrupt { what: "transfer state", detail: state })?;
    let transfer = Transfer {
        id: row.value("id").context(CONTEXT)?,
        debit_account: row.value("debit_account").context(CONTEXT)?,
        credit_account: row.value("credit_account").context(CONTEXT)?,
        unit: row.value("unit").context(CONTEXT)?,
        amount: row.value("amount").context(CONTEXT)?,
        pending: row.value::<i64>("pending").context(CONTEXT)? != 0,
        state,
        posted_amount: row.value("posted_amount").context(CONTEXT)?,
        expires_at_ms: row.value("expires_at_ms").context(CONTEXT)?,
        operation: row.value("operation_key").context(CONTEXT)?,
        created_at_ms: row.value("created_at_ms").context(CONTEXT)?,
        ended_at_ms: row.value("ended_at_ms").context(CONTEXT)?,
        ended_by: row.value("ended_by").context(CONTEXT)?,
    };
    let stored: String = row.value("request_hash").context(CONTEXT)?;
    // SQLite's `failwell_transfers` cannot compute the hash: it stores ''.
    let request_hash = if stored.is_empty() { NewTransfer::asked(&transfer).request_hash() } else { stored };
    Ok(Known { transfer, request_hash })
}

pub(crate) fn entry_from_row<R: OperatorRow>(row: &R) -> Result<Entry, StoreError> {
    Ok(Entry {
        id: row.value("id").context(CONTEXT)?,
        account_id: row.value("account_id").context(CONTEXT)?,
        transfer_id: row.value("transfer_id").context(CONTEXT)?,
        event: row.value("event").context(CONTEXT)?,
        posted: row.value("posted").context(CONTEXT)?,
        debits_pending: row.value("debits_pending").context(CONTEXT)?,
        credits_pending: row.value("credits_pending").context(CONTEXT)?,
        created_at_ms: row.value("created_at_ms").context(CONTEXT)?,
    })
}
