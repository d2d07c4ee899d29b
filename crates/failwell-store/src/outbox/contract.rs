//! What failwell completes of a row an application inserted with plain SQL
//! on a database that cannot compute failwell's request hash in SQL
//! (SQLite's `failwell_outbox` view, MySQL's `failwell_outbox` table):
//! [`fill_contract!`].

/// How many rows one fill completes at most; the rest wait for the next
/// claim (which leaves rows not filled yet where they are).
pub(crate) const FILL_LIMIT: i64 = 256;

/// Defines, for a backend whose `sql` module runs `$N` statements on
/// `conn`, `fill(conn, now_ms, only)`: completes the operations an
/// application inserted through the SQL contract, whose trigger stored the
/// request hash as `''` and, for a row without an idempotency key, a
/// provisional key (provider key `provisional`). Each gets its hash and
/// provider key with the scheme of every other path
/// ([`request_hash`](crate::outbox::request_hash),
/// [`failwell_policy::derive_key`]), and a key-less row its key, `sha256:`
/// and the hash. When that key is already taken by the same request, the
/// row is a second copy of it: its message is marked done without being
/// sent, so the request is delivered once. A payload failwell refuses, or a
/// row whose text is not UTF-8, is set aside (dead-lettered, never sent).
///
/// `unfilled` is the query of the rows to fill, oldest first: columns
/// `id` (the operation's), `outbox_id`, `idempotency_key`, `provisional`
/// (1 or 0), `provider`, `operation`, `payload`; `$1` is the one key to
/// fill (or NULL for any), `$2` the limit. `lock` is appended to the read
/// that takes each row (`" FOR UPDATE"` where several processes fill, `""`
/// under SQLite's single writer): a row another process filled meanwhile
/// is passed over. The message's hold, if the trigger set one
/// (`locked_until_ms` without a lease), is released once filled.
///
/// Also defines `settle_unsent(conn, operation_id, outbox_id, state, why,
/// now_ms)`: ends a message that is never sent.
macro_rules! fill_contract {
    (conn = $conn:ty, unfilled = $unfilled:expr, lock = $lock:literal $(,)?) => {
        use failwell_policy::derive_key;
        use sha2::{Digest as _, Sha256};
        use sqlx::Row as _;

        use crate::error::{Context as _, StoreError};

        /// A row not filled yet.
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

        /// Fills up to [`FILL_LIMIT`](crate::outbox::contract::FILL_LIMIT)
        /// rows, oldest first, on `conn` (inside the caller's transaction);
        /// `only` limits it to the operation of one idempotency key.
        /// Errors: [`StoreError::Database`].
        pub(super) async fn fill(conn: &mut $conn, now_ms: i64, only: Option<&str>) -> Result<(), StoreError> {
            let rows = super::sql::query($unfilled)
                .bind(only)
                .bind(crate::outbox::contract::FILL_LIMIT)
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
                    id: row.try_get("id").context("reading rows inserted through failwell_outbox")?,
                    outbox_id: row.try_get("outbox_id").context("reading rows inserted through failwell_outbox")?,
                    key,
                    provisional: row.try_get::<i64, _>("provisional").unwrap_or(0) == 1,
                    provider,
                    operation,
                    payload,
                    not_text,
                };
                fill_one(&mut *conn, &unfilled, now_ms).await?;
            }
            Ok(())
        }

        /// Fills one row: its hash and provider key, its key when
        /// provisional; a second copy of a request, a payload failwell
        /// refuses, or a row whose text is not UTF-8 is never sent.
        async fn fill_one(conn: &mut $conn, row: &Unfilled, now_ms: i64) -> Result<(), StoreError> {
            let still: Option<i64> =
                super::sql::query_scalar(concat!("SELECT id FROM operations WHERE id = $1 AND request_hash = ''", $lock))
                    .bind(row.id)
                    .fetch_optional(&mut *conn)
                    .await
                    .context("taking a row inserted through failwell_outbox")?;
            if still.is_none() {
                return Ok(());
            }
            if let Some(column) = row.not_text {
                let hash = hex::encode(Sha256::digest(row.payload.as_bytes()));
                return set_aside(conn, row, &hash, &format!("{column} is not UTF-8 text"), now_ms).await;
            }
            let (hash, refused) = match crate::outbox::contract::hash_of(&row.provider, &row.operation, &row.payload) {
                Ok(hash) => (hash, None),
                Err(why) => (hex::encode(Sha256::digest(row.payload.as_bytes())), Some(why)),
            };
            let mut key = row.key.clone();
            let mut copy_of = None;
            if row.provisional && refused.is_none() {
                let derived = format!("sha256:{hash}");
                let find = "SELECT id, request_hash FROM operations WHERE idempotency_key = $1";
                let mut holder: Option<(i64, String)> = super::sql::query_as(find)
                    .bind(derived.as_str())
                    .fetch_optional(&mut *conn)
                    .await
                    .context("finding a request")?;
                if holder.as_ref().is_some_and(|(_, stored)| stored.is_empty()) {
                    // The key was written as such through failwell_outbox and
                    // is not filled yet: filled first (its key is no
                    // provisional one, so this goes one level deep).
                    Box::pin(fill(&mut *conn, now_ms, Some(&derived))).await?;
                    holder = super::sql::query_as(find)
                        .bind(derived.as_str())
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
            super::sql::query(
                "UPDATE operations SET idempotency_key = $2, request_hash = $3, provider_key = $4 WHERE id = $1",
            )
            .bind(row.id)
            .bind(key.as_str())
            .bind(hash.as_str())
            .bind(derive_key(&row.provider, &row.operation, &key, 0))
            .execute(&mut *conn)
            .await
            .context("filling a row inserted through failwell_outbox")?;
            if let Some(original) = copy_of {
                // The same request enqueued again without a key: a replay,
                // which on every other path writes nothing. Its message is
                // done, never sent; it gives up its reference.
                let why = format!("not sent: the same request as operation {original}, enqueued again without a key");
                return settle_unsent(conn, row.id, row.outbox_id, "done", &why, now_ms).await;
            }
            super::sql::query("UPDATE outbox SET locked_until_ms = NULL WHERE id = $1 AND lease_token IS NULL")
                .bind(row.outbox_id)
                .execute(&mut *conn)
                .await
                .context("releasing a message once filled")?;
            Ok(())
        }

        /// Dead-letters a row whose payload failwell refuses (or whose
        /// derived key holds another request), after filling its hash.
        async fn set_aside(
            conn: &mut $conn,
            row: &Unfilled,
            hash: &str,
            why: &str,
            now_ms: i64,
        ) -> Result<(), StoreError> {
            super::sql::query("UPDATE operations SET request_hash = $2, provider_key = $3 WHERE id = $1")
                .bind(row.id)
                .bind(hash)
                .bind(derive_key(&row.provider, &row.operation, &row.key, 0))
                .execute(&mut *conn)
                .await
                .context("filling a row inserted through failwell_outbox")?;
            settle_unsent(conn, row.id, row.outbox_id, "dead", &format!("{why}; set aside, not sent"), now_ms).await
        }

        /// Ends the message `outbox_id` of operation `operation_id`, never
        /// sent: `state` `done` (a second copy, which gives up its
        /// reference) or `dead`, the operation `failed`, with `why` as the
        /// last error of both. Errors: [`StoreError::Database`].
        pub(super) async fn settle_unsent(
            conn: &mut $conn,
            operation_id: i64,
            outbox_id: i64,
            state: &str,
            why: &str,
            now_ms: i64,
        ) -> Result<(), StoreError> {
            super::sql::query(
                "UPDATE operations SET status = 'failed', last_error = $2, updated_at_ms = $3, changed_by = 'relay', \
                 reference = CASE WHEN $4 = 'done' THEN NULL ELSE reference END WHERE id = $1",
            )
            .bind(operation_id)
            .bind(why)
            .bind(now_ms)
            .bind(state)
            .execute(&mut *conn)
            .await
            .context("settling an operation that is not sent")?;
            super::sql::query(
                "UPDATE outbox SET state = $2, last_error = $3, dead_at_ms = CASE WHEN $2 = 'dead' THEN $4 END, \
                 locked_until_ms = NULL, updated_at_ms = $4, changed_by = 'relay' WHERE id = $1",
            )
            .bind(outbox_id)
            .bind(state)
            .bind(why)
            .bind(now_ms)
            .execute(&mut *conn)
            .await
            .context("settling a message that is not sent")?;
            Ok(())
        }
    };
}

pub(crate) use fill_contract;

/// The request hash of `payload` (stored JSON text) for `provider` and
/// `operation`, as every path computes it
/// ([`request_hash`](crate::outbox::request_hash)). Errors: why failwell
/// refuses the payload (not JSON, not an object, too deep, a reserved key,
/// a number too long), as text.
pub(crate) fn hash_of(provider: &str, operation: &str, payload: &str) -> Result<String, String> {
    let value = crate::outbox::stored::json(payload)
        .map_err(|e| format!("payload is not JSON failwell reads: {e}"))?;
    crate::outbox::stored::check_object(&value)
        .and_then(|()| crate::outbox::stored::check_payload(&value))
        .map_err(|e| e.to_string())?;
    Ok(crate::outbox::request_hash(provider, operation, &value))
}
