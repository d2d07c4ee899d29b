//! Ledger accounts: `POST /v1/ledger/accounts` opens one,
//! `GET /v1/ledger/accounts` lists them by id, and
//! `GET /v1/ledger/accounts/{id}` shows one with a page of its journal.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use failwell_store::{Account, Entry, NewAccount, Opened};
use serde::{Deserialize, Serialize};

use super::{check_limit, default_limit};
use crate::http::extract::{ApiJson, ApiPath};
use crate::http::operations::encode_segment;
use crate::http::problem::{Problem, ProblemType};
use crate::http::state::AppState;

/// Opens an account: 201 with the new account, 200 with the stored one
/// when it exists with the same unit and floor.
#[utoipa::path(post, path = "/v1/ledger/accounts", operation_id = "open_account", tag = "ledger",
    request_body(content = NewAccount, description = "The account to open"),
    responses(
        (status = 201, description = "Opened", body = Account),
        (status = 200, description = "It exists with the same unit and floor: the stored account", body = Account),
        (status = 400, response = Problem), (status = 409, response = Problem), (status = 413, response = Problem),
        (status = 415, response = Problem), (status = 422, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn open(
    State(state): State<Arc<AppState>>,
    ApiJson(account): ApiJson<NewAccount>,
) -> Result<Response, Problem> {
    Ok(match state.store.open_account(account, failwell_engine::now_ms()).await? {
        Opened::Created(account) => {
            let location = format!("/v1/ledger/accounts/{}", encode_segment(&account.id));
            (StatusCode::CREATED, [(header::LOCATION, location)], Json(account)).into_response()
        }
        Opened::Existing(account) => Json(account).into_response(),
        Opened::Differs(account) => {
            let floor = account.floor.map_or("none".to_owned(), |f| f.to_string());
            Problem::new(
                ProblemType::AccountExists,
                format!("Account {:?} exists in {} with the floor {floor}.", account.id, account.unit),
            )
            .into_response()
        }
    })
}

/// The query of the account list: ids after `after` ("" by default), at
/// most `limit` (1–1000, default 100).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AccountsQuery {
    #[serde(default)]
    after: String,
    #[serde(default = "default_limit")]
    limit: u32,
}

/// A page of accounts.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct AccountsPage {
    /// In id order.
    accounts: Vec<Account>,
    /// The `after` of the next page; `null` on the last one.
    next_after: Option<String>,
}

/// The accounts, in id order, a page at a time.
#[utoipa::path(get, path = "/v1/ledger/accounts", operation_id = "list_accounts", tag = "ledger",
    params(
        ("after" = Option<String>, Query, description = "The last id seen (default: from the first)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Accounts at most (default 100)")),
    responses(
        (status = 200, description = "A page of accounts", body = AccountsPage),
        (status = 400, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    query: Result<Query<AccountsQuery>, QueryRejection>,
) -> Result<Json<AccountsPage>, Problem> {
    let Query(query) =
        query.map_err(|e| Problem::new(ProblemType::InvalidQuery, format!("{}.", e.body_text())))?;
    let limit = check_limit(query.limit)?;
    let accounts = state.store.accounts(&query.after, limit).await?;
    let full = accounts.len() == limit as usize;
    let next_after = accounts.last().filter(|_| full).map(|a| a.id.clone());
    Ok(Json(AccountsPage { accounts, next_after }))
}

/// The query of an account's journal: entries after `after` (0 by
/// default), at most `limit` (1–1000, default 100).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JournalQuery {
    #[serde(default)]
    after: i64,
    #[serde(default = "default_limit")]
    limit: u32,
}

/// An account with a page of its journal.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct AccountDetail {
    #[serde(flatten)]
    account: Account,
    /// Its journal entries after `after`, oldest first.
    entries: Vec<Entry>,
    /// The `after` of the next page; `null` on the last one.
    next_after: Option<i64>,
}

/// One account, its balances and a page of its journal.
#[utoipa::path(get, path = "/v1/ledger/accounts/{id}", operation_id = "get_account", tag = "ledger",
    params(
        ("id" = String, Path, description = "The account's id"),
        ("after" = Option<i64>, Query, minimum = 0, description = "The last entry id seen (default 0: from the first)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Entries at most (default 100)")),
    responses(
        (status = 200, description = "The account and a page of its journal", body = AccountDetail),
        (status = 400, response = Problem), (status = 404, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn show(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
    query: Result<Query<JournalQuery>, QueryRejection>,
) -> Result<Json<AccountDetail>, Problem> {
    let Query(query) =
        query.map_err(|e| Problem::new(ProblemType::InvalidQuery, format!("{}.", e.body_text())))?;
    let limit = check_limit(query.limit)?;
    if query.after < 0 {
        return Err(Problem::new(ProblemType::InvalidQuery, "`after` must be at least 0."));
    }
    let Some(account) = state.store.account(&id).await? else {
        return Err(Problem::with_status(
            ProblemType::UnknownAccount,
            StatusCode::NOT_FOUND,
            format!("No account has the id {id:?}."),
        ));
    };
    let entries = state.store.entries(&id, query.after, limit).await?;
    let full = entries.len() == limit as usize;
    let next_after = entries.last().filter(|_| full).map(|e| e.id);
    Ok(Json(AccountDetail { account, entries, next_after }))
}
