//! What failwell completes of a row an application inserted into the
//! `failwell_outbox` view (migration `0010_outbox_contract.sql`).
//!
//! The view's trigger runs on the application's connection, which has no
//! SHA-256: it stores the request hash as `''`, and a row without an
//! idempotency key gets a provisional key (`sqlite:…`, provider key
//! `provisional`). Before a claim, failwell fills the hash and the provider
//! key with the scheme every other path uses ([`request_hash`],
//! [`derive_key`]) and gives a key-less row its key, `sha256:` and the
//! hash. When that key is already taken by the same request, the row is a
//! second copy of it: its message is marked done without being sent, so the
//! request is delivered once.

use failwell_policy::derive_key;
use sha2::{Digest, Sha256};
use sqlx::Row;
use sqlx::sqlite::SqliteConnection;

use crate::error::{Context, StoreError};
use crate::outbox::request_hash;
use crate::outbox::stored::{check_object, check_payload, json};

/// How many rows one claim fills at most; the rest wait for the next claim
/// (the claim skips rows not filled yet).
const FILL_LIMIT: i64 = 256;

/// The claim's condition that an outbox message aliased `x` has been filled.
pub(super) const FILLED: &str = "x.operation_id NOT IN (SELECT id FROM operations WHERE request_hash = '')";

/// A row of the view not filled yet.
struct Unfilled {
    id: i64,
    outbox_id: i64,
    key: String,
    provisional: bool,
    provider: String,
    operation: String,
    payload: String,
    /// The first column whose stored text is not UTF-8 (read lossily
    /// above): the row is set aside, its key left as stored.
    not_text: Option<&'static str>,
}

/// Fills up to [`FILL_LIMIT`] rows inserted through the view, oldest first,
/// on `conn` (inside the caller's write transaction); `only` limits it to
/// the operation of one idempotency key. Errors: [`StoreError::Database`].
pub(super) async fn fill(
    conn: &mut SqliteConnection,
    now_ms: i64,
    only: Option<&str>,
) -> Result<(), StoreError> {
    let rows = sqlx::query(
        "SELECT o.id, x.id AS outbox_id, o.idempotency_key, o.provider_key = 'provisional' AS provisional, \
         o.provider, o.operation, o.payload FROM operations o JOIN outbox x ON x.operation_id = o.id \
         WHERE o.request_hash = '' AND (?1 IS NULL OR o.idempotency_key = ?1) ORDER BY o.id LIMIT ?2",
    )
    .bind(only)
    .bind(FILL_LIMIT)
    .fetch_all(&mut *conn)
    .await
    .context("reading rows inserted through failwell_outbox")?;
    for row in rows {
        let mut not_text = None;
        let mut text = |column: &'static str| match row.try_get::<String, _>(column) {
            Ok(text) => text,
            Err(_) => {
                not_text = not_text.or(Some(column));
                let bytes: Vec<u8> = row.try_get(column).unwrap_or_default();
                String::from_utf8_lossy(&bytes).into_owned()
            }
        };
        let (key, provider, operation, payload) =
            (text("idempotency_key"), text("provider"), text("operation"), text("payload"));
        let unfilled = Unfilled {
            id: row.get("id"),
            outbox_id: row.get("outbox_id"),
            key,
            provisional: row.try_get::<bool, _>("provisional").unwrap_or(false),
            provider,
            operation,
            payload,
            not_text,
        };
        fill_one(&mut *conn, &unfilled, now_ms).await?;
    }
    Ok(())
}

/// Fills one row: its hash and provider key, its key when provisional; a
/// second copy of a request, a payload failwell refuses, or a row whose
/// text is not UTF-8 is never sent.
async fn fill_one(conn: &mut SqliteConnection, row: &Unfilled, now_ms: i64) -> Result<(), StoreError> {
    if let Some(column) = row.not_text {
        let hash = hex::encode(Sha256::digest(row.payload.as_bytes()));
        return set_aside(conn, row, &hash, &format!("{column} is not UTF-8 text"), now_ms).await;
    }
    let payload = json(&row.payload).map_err(|e| e.to_string()).and_then(|value| {
        check_object(&value).and_then(|()| check_payload(&value)).map_err(|e| e.to_string())?;
        Ok(value)
    });
    let (hash, refused) = match &payload {
        Ok(value) => (request_hash(&row.provider, &row.operation, value), None),
        Err(why) => (hex::encode(Sha256::digest(row.payload.as_bytes())), Some(format!("payload {why}"))),
    };
    let mut key = row.key.clone();
    let mut copy_of = None;
    if row.provisional && refused.is_none() {
        let derived = format!("sha256:{hash}");
        let find = "SELECT id, request_hash FROM operations WHERE idempotency_key = ?1";
        let mut holder: Option<(i64, String)> = sqlx::query_as(find)
            .bind(&derived)
            .fetch_optional(&mut *conn)
            .await
            .context("finding a request")?;
        if holder.as_ref().is_some_and(|(_, stored)| stored.is_empty()) {
            // The key was written as such through the view and is not
            // filled yet: filled first (its key is no provisional one, so
            // this goes one level deep).
            Box::pin(fill(&mut *conn, now_ms, Some(&derived))).await?;
            holder = sqlx::query_as(find)
                .bind(&derived)
                .fetch_optional(&mut *conn)
                .await
                .context("finding a request")?;
        }
        match holder {
            None => key = derived,
            Some((id, stored)) if stored == hash => copy_of = Some(id),
            Some(_) => {
                let why = format!("key {derived} holds a different request");
                return set_aside(conn, row, &hash, &why, now_ms).await;
            }
        }
    }
    if let Some(why) = refused {
        return set_aside(conn, row, &hash, &why, now_ms).await;
    }
    sqlx::query(
        "UPDATE operations SET idempotency_key = ?2, request_hash = ?3, provider_key = ?4 WHERE id = ?1",
    )
    .bind(row.id)
    .bind(&key)
    .bind(&hash)
    .bind(derive_key(&row.provider, &row.operation, &key, 0))
    .execute(&mut *conn)
    .await
    .context("filling a row inserted through failwell_outbox")?;
    if let Some(original) = copy_of {
        // The same request enqueued again without a key: a replay, which
        // on every other path writes nothing. Its message is done, never
        // sent; it gives up its reference.
        let why = format!("not sent: the same request as operation {original}, enqueued again without a key");
        settle_unsent(conn, row, "done", &why, now_ms).await?;
    }
    Ok(())
}

/// Dead-letters a row whose payload failwell refuses (or whose derived key
/// holds another request), after filling its hash.
async fn set_aside(
    conn: &mut SqliteConnection,
    row: &Unfilled,
    hash: &str,
    why: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE operations SET request_hash = ?2, provider_key = ?3 WHERE id = ?1")
        .bind(row.id)
        .bind(hash)
        .bind(derive_key(&row.provider, &row.operation, &row.key, 0))
        .execute(&mut *conn)
        .await
        .context("filling a row inserted through failwell_outbox")?;
    settle_unsent(conn, row, "dead", &format!("{why}; set aside, not sent"), now_ms).await
}

/// Ends a message that is never sent: `state` `done` (a second copy) or
/// `dead`, its operation `failed`, with `why` as the last error of both.
async fn settle_unsent(
    conn: &mut SqliteConnection,
    row: &Unfilled,
    state: &str,
    why: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE operations SET status = 'failed', last_error = ?2, updated_at_ms = ?3, changed_by = 'relay', \
         reference = CASE WHEN ?4 = 'done' THEN NULL ELSE reference END WHERE id = ?1",
    )
    .bind(row.id)
    .bind(why)
    .bind(now_ms)
    .bind(state)
    .execute(&mut *conn)
    .await
    .context("settling an operation that is not sent")?;
    sqlx::query(
        "UPDATE outbox SET state = ?2, last_error = ?3, dead_at_ms = CASE WHEN ?2 = 'dead' THEN ?4 END, \
         updated_at_ms = ?4, changed_by = 'relay' WHERE id = ?1",
    )
    .bind(row.outbox_id)
    .bind(state)
    .bind(why)
    .bind(now_ms)
    .execute(&mut *conn)
    .await
    .context("settling a message that is not sent")?;
    Ok(())
}
