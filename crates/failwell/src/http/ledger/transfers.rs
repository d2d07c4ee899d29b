//! Ledger transfers: `POST /v1/ledger/transfers` applies one (its id is
//! the `Idempotency-Key`), `POST /v1/ledger/transfers/batch` applies up to
//! [`MAX_BATCH`] in one transaction, `GET /v1/ledger/transfers/{id}` reads
//! one back, and `POST /v1/ledger/transfers/{id}/post` and `…/void` end a
//! hold.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use failwell_engine::ledger::TransferError;
use failwell_policy::Refused;
use failwell_store::{Ended, HoldEnd, NewTransfer, Transfer, TransferRefusal, TransferResult};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::no_nul;
use crate::http::extract::{ApiJson, ApiPath};
use crate::http::operations::{encode_segment, idempotency_key};
use crate::http::problem::{Problem, ProblemType};
use crate::http::state::AppState;

/// Transfers in one batch, at most.
pub const MAX_BATCH: usize = 1000;

/// The body limit of a batch: [`MAX_BATCH`] transfers of the longest ids.
pub const BATCH_BODY_BYTES: usize = 1 << 20;

/// The body of `POST /v1/ledger/transfers`; the transfer's id is the
/// `Idempotency-Key`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TransferBody {
    /// The transfer's id, if given: it must equal the `Idempotency-Key`.
    id: Option<String>,
    /// The account debited.
    debit_account: String,
    /// The account credited (same unit).
    credit_account: String,
    /// Minor units, more than zero.
    amount: i64,
    /// A hold: reserve the amount now, post or void it later.
    #[serde(default)]
    pending: bool,
    /// A hold's timeout (ms): unless posted or voided by then, it expires.
    #[serde(default)]
    timeout_ms: Option<i64>,
}

/// Applies a transfer (posted at once, or a hold): 201 with it, 200 with
/// the stored one when the same id came with the same content.
#[utoipa::path(post, path = "/v1/ledger/transfers", operation_id = "create_transfer", tag = "ledger",
    params(("Idempotency-Key" = String, Header, min_length = 1, max_length = 255, pattern = "^[!-~]+$",
        description = "The transfer's id (1–255 visible ASCII bytes), reused on every retry of it")),
    request_body(content = TransferBody, description = "The transfer"),
    responses(
        (status = 201, description = "Applied", body = Transfer),
        (status = 200, description = "The id was used before with the same content: the stored transfer", body = Transfer),
        (status = 400, response = Problem), (status = 409, response = Problem), (status = 413, response = Problem),
        (status = 415, response = Problem), (status = 422, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn create(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: ApiJson<TransferBody>,
) -> Result<Response, Problem> {
    let id = idempotency_key(&headers)?;
    let ApiJson(body) = body;
    if body.id.as_ref().is_some_and(|given| *given != id) {
        return Err(Problem::new(
            ProblemType::InvalidBody,
            "`id` must equal the Idempotency-Key (the transfer's id), or be left out.",
        ));
    }
    let transfer = NewTransfer {
        id,
        debit_account: body.debit_account,
        credit_account: body.credit_account,
        amount: body.amount,
        pending: body.pending,
        timeout_ms: body.timeout_ms,
    };
    no_nul([transfer.debit_account.as_str(), &transfer.credit_account])?;
    let result = state.transfers.transfer(transfer).await.map_err(unavailable)?;
    Ok(match result {
        TransferResult::Created(transfer) => {
            let location = format!("/v1/ledger/transfers/{}", encode_segment(&transfer.id));
            (StatusCode::CREATED, [(header::LOCATION, location)], Json(transfer)).into_response()
        }
        TransferResult::Replayed(transfer) => Json(transfer).into_response(),
        TransferResult::Refused { reason, .. } => Problem::refused(&reason).into_response(),
    })
}

/// A transfer the group commit could not apply: 503, nothing written.
fn unavailable(e: TransferError) -> Problem {
    tracing::warn!(error = %failwell_engine::chain(&e), "a transfer was not applied");
    Problem::new(
        ProblemType::StoreUnavailable,
        "The store is unavailable; nothing was applied: send the transfer again with the same Idempotency-Key.",
    )
}

/// The body of `POST /v1/ledger/transfers/batch`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BatchBody {
    /// At most 1,000 transfers, applied in order.
    #[schema(max_items = 1000)]
    transfers: Vec<NewTransfer>,
}

/// What became of each transfer of a batch, in order.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct BatchResults {
    /// One per transfer sent, in the same order.
    results: Vec<BatchItem>,
}

/// What became of one transfer of a batch.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct BatchItem {
    /// The transfer's id.
    id: String,
    /// `created`, `replayed` or `refused`.
    result: &'static str,
    /// The transfer, unless refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    transfer: Option<Transfer>,
    /// Why it was refused: the problem detail the single route would
    /// answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    problem: Option<Value>,
}

/// Applies up to 1,000 transfers in order, in one transaction: each is
/// created, replayed or refused on its own (a refusal stops no other).
#[utoipa::path(post, path = "/v1/ledger/transfers/batch", operation_id = "create_transfers", tag = "ledger",
    request_body(content = BatchBody, description = "The transfers, in order"),
    responses(
        (status = 200, description = "One result per transfer, in order", body = BatchResults),
        (status = 400, response = Problem), (status = 413, response = Problem), (status = 415, response = Problem),
        (status = 422, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn batch(
    State(state): State<Arc<AppState>>,
    ApiJson(body): ApiJson<BatchBody>,
) -> Result<Json<BatchResults>, Problem> {
    if body.transfers.len() > MAX_BATCH {
        return Err(Problem::new(
            ProblemType::InvalidBody,
            format!("A batch holds at most {MAX_BATCH} transfers, not {}.", body.transfers.len()),
        ));
    }
    no_nul(body.transfers.iter().flat_map(|t| [t.id.as_str(), &t.debit_account, &t.credit_account]))?;
    let results = failwell_engine::ledger::apply(&state.store, body.transfers).await?;
    let item = |result| match result {
        TransferResult::Created(t) => {
            BatchItem { id: t.id.clone(), result: "created", transfer: Some(t), problem: None }
        }
        TransferResult::Replayed(t) => {
            BatchItem { id: t.id.clone(), result: "replayed", transfer: Some(t), problem: None }
        }
        TransferResult::Refused { id, reason } => BatchItem {
            id,
            result: "refused",
            transfer: None,
            problem: Some(Problem::refused(&reason).body()),
        },
    };
    Ok(Json(BatchResults { results: results.into_iter().map(item).collect() }))
}

/// One transfer by id.
#[utoipa::path(get, path = "/v1/ledger/transfers/{id}", operation_id = "get_transfer", tag = "ledger",
    params(("id" = String, Path, description = "The transfer's id")),
    responses(
        (status = 200, description = "The transfer", body = Transfer),
        (status = 400, response = Problem), (status = 404, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn show(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Transfer>, Problem> {
    match state.store.transfer_by_id(&id).await? {
        Some(transfer) => Ok(Json(transfer)),
        None => Err(unknown(&id)),
    }
}

/// The optional body of `POST /v1/ledger/transfers/{id}/post`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PostBody {
    /// The amount to post, at most the hold's (the rest is released);
    /// the whole hold when left out.
    amount: Option<i64>,
}

/// Posts a hold, for its amount or less: 200 with it, also when it was
/// posted already for the same amount.
#[utoipa::path(post, path = "/v1/ledger/transfers/{id}/post", operation_id = "post_hold", tag = "ledger",
    params(("id" = String, Path, description = "The hold's transfer id")),
    request_body(content = Option<PostBody>, description = "Optional: the amount (default: the whole hold)"),
    responses(
        (status = 200, description = "Posted", body = Transfer),
        (status = 400, response = Problem), (status = 404, response = Problem), (status = 409, response = Problem),
        (status = 413, response = Problem), (status = 422, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn post(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Transfer>, Problem> {
    let body = body?;
    let amount = if body.iter().all(u8::is_ascii_whitespace) { None } else { post_body(&body)?.amount };
    end(&state, &id, HoldEnd::Post(amount)).await
}

/// The body of a post, when one is sent: a JSON object (400
/// `malformed-json`, 422 `invalid-body`).
fn post_body(body: &[u8]) -> Result<PostBody, Problem> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Problem::new(ProblemType::MalformedJson, format!("The body is not JSON: {e}.")))?;
    if !value.is_object() {
        return Err(Problem::new(ProblemType::InvalidBody, "The body must be a JSON object."));
    }
    serde_json::from_value(value).map_err(|e| Problem::new(ProblemType::InvalidBody, format!("{e}.")))
}

/// Voids a hold: 200 with it, also when it was voided already.
#[utoipa::path(post, path = "/v1/ledger/transfers/{id}/void", operation_id = "void_hold", tag = "ledger",
    params(("id" = String, Path, description = "The hold's transfer id")),
    responses(
        (status = 200, description = "Voided", body = Transfer),
        (status = 400, response = Problem), (status = 404, response = Problem), (status = 409, response = Problem),
        (status = 422, response = Problem), (status = 503, response = Problem)))]
pub(crate) async fn void(
    State(state): State<Arc<AppState>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Transfer>, Problem> {
    end(&state, &id, HoldEnd::Void).await
}

/// Ends hold `id` by hand and answers: the transfer, or 404
/// `unknown-transfer`, 409 `hold-tied` / `hold-ended`, 422
/// `invalid-transfer` (not a hold, more than the hold).
async fn end(state: &AppState, id: &str, how: HoldEnd) -> Result<Json<Transfer>, Problem> {
    match failwell_engine::ledger::end_hold(&state.store, id, how).await? {
        Ended::Now(transfer) | Ended::Already(transfer) => Ok(Json(transfer)),
        Ended::NotFound => Err(unknown(id)),
        Ended::Refused(transfer, _) if transfer.operation.is_some() => Err(Problem::new(
            ProblemType::HoldTied,
            format!(
                "Hold {id:?} is tied to operation {:?}: its outcome posts or voids it.",
                transfer.operation.unwrap_or_default()
            ),
        )),
        Ended::Refused(_, TransferRefusal::Rule(Refused::NotPending(state))) => {
            Err(Problem::new(ProblemType::HoldEnded, format!("Hold {id:?} is {} already.", state.as_str())))
        }
        Ended::Refused(_, reason) => Err(Problem::refused(&reason)),
    }
}

/// 404 `unknown-transfer`.
fn unknown(id: &str) -> Problem {
    Problem::new(ProblemType::UnknownTransfer, format!("No transfer has the id {id:?}."))
}
