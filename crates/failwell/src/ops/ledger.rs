//! The balance ledger as an operator reads it, the same from the command
//! line and the dashboard: an account's figures with a page of its journal,
//! a page of accounts, the pending holds with their age; plus the text the
//! command line prints. It only reads: every change is the store's
//! ([`LedgerStore`]), one transaction each.

use std::fmt::Write as _;

use failwell_engine::compare::rfc3339;
use failwell_store::{Account, Entry, Store, StoreError, Transfer};
use serde::Serialize;

use super::{Align, human_ms, printable, table};

/// An account and a page of its journal.
#[derive(Clone, Debug, Serialize)]
pub struct AccountPage {
    /// The account and its figures.
    pub account: Account,
    /// Its journal entries after the page's cursor, oldest first.
    pub entries: Vec<Entry>,
    /// The cursor of the next page (the last entry's id), `None` on the
    /// last page.
    pub next_after: Option<i64>,
}

/// A page of accounts, by id.
#[derive(Clone, Debug, Serialize)]
pub struct AccountsPage {
    /// The accounts with their figures.
    pub accounts: Vec<Account>,
    /// The cursor of the next page (the last account's id), `None` on the
    /// last page.
    pub next_after: Option<String>,
}

/// A hold still pending, and how long it has been.
#[derive(Clone, Debug, Serialize)]
pub struct PendingHold {
    /// The hold.
    #[serde(flatten)]
    pub transfer: Transfer,
    /// Its age (ms) when read.
    pub age_ms: i64,
}

/// The first `limit` of `items` (read as `limit + 1`), and whether there
/// were more.
fn first<T>(mut items: Vec<T>, limit: u32) -> (Vec<T>, bool) {
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    (items, more)
}

/// Account `id` and up to `limit` of its journal entries after entry
/// `after` (0: from the first); `None` when no account has this id.
pub async fn account_page(
    store: &Store,
    id: &str,
    after: i64,
    limit: u32,
) -> Result<Option<AccountPage>, StoreError> {
    let Some(account) = store.account(id).await? else { return Ok(None) };
    let (entries, more) = first(store.entries(id, after, limit.saturating_add(1)).await?, limit);
    let next_after = entries.last().filter(|_| more).map(|e| e.id);
    Ok(Some(AccountPage { account, entries, next_after }))
}

/// Up to `limit` accounts with ids after `after` ("": from the first).
pub async fn accounts_page(store: &Store, after: &str, limit: u32) -> Result<AccountsPage, StoreError> {
    let (accounts, more) = first(store.accounts(after, limit.saturating_add(1)).await?, limit);
    let next_after = accounts.last().filter(|_| more).map(|a| a.id.clone());
    Ok(AccountsPage { accounts, next_after })
}

/// Up to `limit` pending holds, oldest first, with their age at `now_ms`;
/// and whether there are more.
pub async fn pending_holds(
    store: &Store,
    limit: u32,
    now_ms: i64,
) -> Result<(Vec<PendingHold>, bool), StoreError> {
    let (holds, more) = first(store.pending_holds(limit.saturating_add(1)).await?, limit);
    let holds = holds
        .into_iter()
        .map(|transfer| PendingHold { age_ms: now_ms.saturating_sub(transfer.created_at_ms), transfer })
        .collect();
    Ok((holds, more))
}

/// A floor as shown: the number, or `none` (no limit).
pub fn floor(floor: Option<i64>) -> String {
    floor.map_or_else(|| "none".into(), |f| f.to_string())
}

/// Accounts as a table, one row each with its figures.
pub fn accounts_table(accounts: &[Account]) -> String {
    if accounts.is_empty() {
        return "no accounts\n".into();
    }
    let rows: Vec<[String; 7]> = accounts
        .iter()
        .map(|a| {
            [
                printable(&a.id).into_owned(),
                printable(&a.unit).into_owned(),
                floor(a.floor),
                a.posted.to_string(),
                a.debits_pending.to_string(),
                a.credits_pending.to_string(),
                a.available.to_string(),
            ]
        })
        .collect();
    let header = [
        ("ACCOUNT", Align::Left),
        ("UNIT", Align::Left),
        ("FLOOR", Align::Right),
        ("POSTED", Align::Right),
        ("DEBITS PENDING", Align::Right),
        ("CREDITS PENDING", Align::Right),
        ("AVAILABLE", Align::Right),
    ];
    table(header, &rows)
}

/// Labelled values, one a line, the values in one column.
fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(label, _)| label.len()).max().unwrap_or(0);
    pairs.iter().map(|(label, value)| format!("{label:<width$}  {value}\n")).collect()
}

/// An account's figures, then its page of the journal.
pub fn account_text(page: &AccountPage) -> String {
    let a = &page.account;
    let mut out = fields(&[
        ("account", printable(&a.id).into_owned()),
        ("unit", printable(&a.unit).into_owned()),
        ("floor", floor(a.floor)),
        ("posted", a.posted.to_string()),
        ("debits pending", a.debits_pending.to_string()),
        ("credits pending", a.credits_pending.to_string()),
        ("available", a.available.to_string()),
        ("opened", rfc3339(a.created_at_ms)),
        ("last change", rfc3339(a.updated_at_ms)),
    ]);
    out.push('\n');
    if page.entries.is_empty() {
        out.push_str("no journal entries on this page\n");
    } else {
        let rows: Vec<[String; 7]> = page
            .entries
            .iter()
            .map(|e| {
                [
                    e.id.to_string(),
                    printable(&e.transfer_id).into_owned(),
                    printable(&e.event).into_owned(),
                    e.posted.to_string(),
                    e.debits_pending.to_string(),
                    e.credits_pending.to_string(),
                    rfc3339(e.created_at_ms),
                ]
            })
            .collect();
        let header = [
            ("ENTRY", Align::Right),
            ("TRANSFER", Align::Left),
            ("EVENT", Align::Left),
            ("POSTED", Align::Right),
            ("DEBITS PENDING", Align::Right),
            ("CREDITS PENDING", Align::Right),
            ("AT", Align::Left),
        ];
        out.push_str(&table(header, &rows));
    }
    if let Some(after) = page.next_after {
        let _ = writeln!(out, "more entries: --after {after}");
    }
    out
}

/// Pending holds as a table: age, accounts, amount and the operation
/// whose outcome ends each (`-`: none; posted or voided by hand, or it
/// expires).
pub fn holds_table(holds: &[PendingHold]) -> String {
    if holds.is_empty() {
        return "no pending holds\n".into();
    }
    let rows: Vec<[String; 8]> = holds
        .iter()
        .map(|h| {
            let t = &h.transfer;
            [
                printable(&t.id).into_owned(),
                human_ms(h.age_ms),
                printable(&t.debit_account).into_owned(),
                printable(&t.credit_account).into_owned(),
                t.amount.to_string(),
                printable(&t.unit).into_owned(),
                t.expires_at_ms.map_or_else(|| "-".into(), rfc3339),
                printable(t.operation.as_deref().unwrap_or("-")).into_owned(),
            ]
        })
        .collect();
    let header = [
        ("HOLD", Align::Left),
        ("AGE", Align::Right),
        ("FROM", Align::Left),
        ("TO", Align::Left),
        ("AMOUNT", Align::Right),
        ("UNIT", Align::Left),
        ("EXPIRES", Align::Left),
        ("OPERATION", Align::Left),
    ];
    table(header, &rows)
}

/// One transfer, field by field.
pub fn transfer_text(t: &Transfer) -> String {
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    fields(&[
        ("transfer", printable(&t.id).into_owned()),
        ("from", printable(&t.debit_account).into_owned()),
        ("to", printable(&t.credit_account).into_owned()),
        ("amount", format!("{} {}", t.amount, printable(&t.unit))),
        ("kind", if t.pending { "hold" } else { "posted at once" }.into()),
        ("state", t.state.as_str().into()),
        ("posted amount", or_dash(t.posted_amount.map(|a| a.to_string()))),
        ("expires", or_dash(t.expires_at_ms.map(rfc3339))),
        ("operation", or_dash(t.operation.as_deref().map(|o| printable(o).into_owned()))),
        ("made", rfc3339(t.created_at_ms)),
        ("ended", or_dash(t.ended_at_ms.map(rfc3339))),
        ("ended by", or_dash(t.ended_by.as_deref().map(|b| printable(b).into_owned()))),
    ])
}
