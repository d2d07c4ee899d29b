//! The dashboard's balance-ledger pages: `/ui/ledger` (the accounts with
//! their figures, a page at a time, and the pending holds with their age
//! and operation) and `/ui/ledger/accounts/{id}` (an account's figures and
//! a page of its journal). Read-only: transfers, posts and voids are the
//! API's and the command line's. The reads are [`crate::ops::ledger`]'s,
//! shared with `failwell ledger`.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use failwell_engine::compare::rfc3339;
use maud::html;
use serde::Deserialize;

use super::{encode, page};
use crate::http::extract::ApiPath;
use crate::http::problem::{Problem, ProblemType};
use crate::http::state::AppState;
use crate::ops::human_ms;
use crate::ops::ledger::{self as view, floor};

/// Accounts on one page of `/ui/ledger`.
const ACCOUNTS_PER_PAGE: u32 = 50;
/// Pending holds shown on `/ui/ledger`, oldest first.
const HOLDS_SHOWN: u32 = 100;
/// Journal entries on one page of an account.
const ENTRIES_PER_PAGE: u32 = 100;

/// A page's cursor: `?after=…` (the previous page's last account id, or
/// entry id).
#[derive(Deserialize)]
pub(super) struct After<T> {
    after: Option<T>,
}

fn cursor<T>(query: Result<Query<After<T>>, QueryRejection>) -> Result<Option<T>, Problem> {
    let Query(After { after }) = query.map_err(|e| Problem::new(ProblemType::InvalidQuery, e.body_text()))?;
    Ok(after)
}

/// `/ui/ledger`.
pub(super) async fn ledger(
    State(state): State<Arc<AppState>>,
    query: Result<Query<After<String>>, QueryRejection>,
) -> Result<Response, Problem> {
    let after = cursor(query)?.unwrap_or_default();
    let accounts = view::accounts_page(&state.store, &after, ACCOUNTS_PER_PAGE).await?;
    let (holds, more_holds) =
        view::pending_holds(&state.store, HOLDS_SHOWN, failwell_engine::now_ms()).await?;
    let body = html! {
        h2 { "Accounts" }
        p { "Figures in minor units of each account's unit; available is posted minus debits pending." }
        @if accounts.accounts.is_empty() {
            p id="no-accounts" { "No accounts" @if !after.is_empty() { " after this one" } "." }
        } @else {
            table id="accounts" {
                tr { th { "account" } th { "unit" } th { "floor" } th { "posted" } th { "debits pending" } th { "credits pending" } th { "available" } }
                @for a in &accounts.accounts {
                    tr {
                        td { a href={ "/ui/ledger/accounts/" (encode(&a.id)) } { (a.id) } }
                        td { (a.unit) } td { (floor(a.floor)) } td { (a.posted) }
                        td { (a.debits_pending) } td { (a.credits_pending) } td { (a.available) }
                    }
                }
            }
        }
        @if let Some(next) = &accounts.next_after {
            p { a id="next-accounts" href={ "/ui/ledger?after=" (encode(next)) } { "Next accounts →" } }
        }
        h2 { "Pending holds" }
        @if holds.is_empty() {
            p id="no-holds" { "No pending holds." }
        } @else {
            @if more_holds { p { "The oldest " (HOLDS_SHOWN) " (" code { "failwell ledger holds --limit N" } " lists more)." } }
            table id="holds" {
                tr { th { "hold" } th { "age" } th { "from" } th { "to" } th { "amount" } th { "expires" } th { "operation" } }
                @for h in &holds {
                    @let t = &h.transfer;
                    tr {
                        td { (t.id) } td { (human_ms(h.age_ms)) }
                        td { a href={ "/ui/ledger/accounts/" (encode(&t.debit_account)) } { (t.debit_account) } }
                        td { a href={ "/ui/ledger/accounts/" (encode(&t.credit_account)) } { (t.credit_account) } }
                        td { (t.amount) " " (t.unit) }
                        td { (t.expires_at_ms.map_or_else(|| "-".into(), rfc3339)) }
                        td {
                            @if let Some(key) = &t.operation {
                                a href={ "/ui/operations/" (encode(key)) } { (key) }
                            } @else { "-" }
                        }
                    }
                }
            }
        }
    };
    Ok(page("Ledger", body).into_response())
}

/// `/ui/ledger/accounts/{id}`.
pub(super) async fn account(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
    query: Result<Query<After<i64>>, QueryRejection>,
) -> Result<Response, Problem> {
    let after = cursor(query)?.unwrap_or(0);
    let Some(found) = view::account_page(&state.store, &id, after, ENTRIES_PER_PAGE).await? else {
        return Err(Problem::new(ProblemType::NotFound, "No ledger account has this id."));
    };
    let a = &found.account;
    let body = html! {
        div.card id="account" {
            dl {
                dt { "unit" } dd { (a.unit) }
                dt { "floor" } dd { (floor(a.floor)) }
                dt { "posted" } dd { (a.posted) }
                dt { "debits pending" } dd { (a.debits_pending) }
                dt { "credits pending" } dd { (a.credits_pending) }
                dt { "available" } dd { (a.available) }
                dt { "opened" } dd { (rfc3339(a.created_at_ms)) }
                dt { "last change" } dd { (rfc3339(a.updated_at_ms)) }
            }
        }
        h2 { "Journal" }
        @if found.entries.is_empty() {
            p id="no-entries" { "No journal entries" @if after > 0 { " after entry " (after) } "." }
        } @else {
            table id="entries" {
                tr { th { "entry" } th { "transfer" } th { "event" } th { "posted" } th { "debits pending" } th { "credits pending" } th { "at" } }
                @for e in &found.entries {
                    tr {
                        td { (e.id) } td { (e.transfer_id) } td { (e.event) } td { (e.posted) }
                        td { (e.debits_pending) } td { (e.credits_pending) } td { (rfc3339(e.created_at_ms)) }
                    }
                }
            }
        }
        @if let Some(next) = found.next_after {
            p { a id="next-entries" href={ "/ui/ledger/accounts/" (encode(&a.id)) "?after=" (next) } { "Next entries →" } }
        }
    };
    Ok(page(&format!("Account {}", a.id), body).into_response())
}
