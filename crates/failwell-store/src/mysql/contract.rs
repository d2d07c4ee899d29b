//! What failwell completes of a row an application inserted into the
//! table `failwell_outbox` (migration `0002_outbox_contract.sql`).
//!
//! The table's trigger cannot compute the request hash: it writes the
//! operation with the hash `''` and holds its message (no lease,
//! `locked_until_ms` at the largest BIGINT) until [`take_over`] fills it
//! ([`fill_contract!`](crate::outbox::contract::fill_contract)) and
//! releases it. A replay the trigger found by comparing JSON values is
//! checked against the stored request's hash; then each row of the table
//! is deleted.
//!
//! The rows are found by a plain read, which never waits for an
//! application's insert not yet committed; each is then locked by its id,
//! so two processes never take over one row twice. The rows of
//! `failwell_transfers`, each applied by its trigger already, are deleted
//! the same way.

use sqlx::mysql::MySqlConnection;

use super::sql;

crate::outbox::contract::fill_contract!(
    conn = MySqlConnection,
    unfilled = "SELECT o.id, x.id AS outbox_id, o.idempotency_key, \
         CASE WHEN o.provider_key = 'provisional' THEN 1 ELSE 0 END AS provisional, \
         o.provider, o.operation, o.payload FROM failwell_outbox i JOIN operations o ON o.id = i.operation_id \
         JOIN outbox x ON x.operation_id = o.id \
         WHERE i.replay = 0 AND o.request_hash = '' AND ($1 IS NULL OR o.idempotency_key = $1) ORDER BY o.id LIMIT $2",
    lock = " FOR UPDATE",
);

/// Takes over the rows applications inserted into `failwell_outbox`, on
/// `conn` (inside the claim's transaction, before it reads the due
/// messages): fills their operations ([`fill`]), sets aside the message of
/// a key whose replay turns out to be another request, and deletes each
/// row once its operation is filled; then forgets the rows of
/// `failwell_transfers` ([`forget_transfers`]). At most
/// [`FILL_LIMIT`](crate::outbox::contract::FILL_LIMIT) rows at a time.
/// Errors: [`StoreError::Database`].
pub(super) async fn take_over(conn: &mut MySqlConnection, now_ms: i64) -> Result<(), StoreError> {
    fill(&mut *conn, now_ms, None).await?;
    let rows = sql::query(
        "SELECT i.id, i.replay, i.provider, i.operation, i.payload, o.id AS operation_id, o.idempotency_key, \
         o.request_hash FROM failwell_outbox i LEFT JOIN operations o ON o.id = i.operation_id \
         ORDER BY i.id LIMIT $1",
    )
    .bind(crate::outbox::contract::FILL_LIMIT)
    .fetch_all(&mut *conn)
    .await
    .context("reading rows inserted through failwell_outbox")?;
    for row in rows {
        let stored: Option<String> = row.try_get("request_hash").context("reading failwell_outbox")?;
        if stored.as_deref() == Some("") {
            continue; // Its operation is filled at a later claim.
        }
        let id: i64 = row.try_get("id").context("reading failwell_outbox")?;
        let taken: Option<i64> =
            sql::query_scalar("SELECT id FROM failwell_outbox WHERE id = $1 FOR UPDATE SKIP LOCKED")
                .bind(id)
                .fetch_optional(&mut *conn)
                .await
                .context("taking a row of failwell_outbox")?;
        if taken.is_none() {
            continue;
        }
        let operation_id: Option<i64> = row.try_get("operation_id").context("reading failwell_outbox")?;
        if row.try_get::<i64, _>("replay").unwrap_or(0) == 1
            && let (Some(stored), Some(operation_id)) = (stored, operation_id)
        {
            let text = |column: &str| row.try_get::<String, _>(column).unwrap_or_default();
            let hash =
                crate::outbox::contract::hash_of(&text("provider"), &text("operation"), &text("payload"));
            if hash.as_deref().ok() != Some(stored.as_str()) {
                let key = text("idempotency_key");
                let why = format!(
                    "idempotency key {key} was used again with a different request (failwell_outbox row {id}, \
                     which the insert took for the same one)"
                );
                refuse_replay(&mut *conn, operation_id, &why, now_ms).await?;
            }
        }
        sql::query("DELETE FROM failwell_outbox WHERE id = $1")
            .bind(id)
            .execute(&mut *conn)
            .await
            .context("deleting a row of failwell_outbox")?;
    }
    forget_transfers(conn).await
}

/// Deletes up to [`FILL_LIMIT`](crate::outbox::contract::FILL_LIMIT)
/// committed rows of `failwell_transfers` (migration
/// `0004_ledger_contract.sql`): its trigger applied each transfer when it
/// was inserted, into the ledger's own tables, so the rows are requests
/// already answered. Found by a plain read, deleted by primary key, so an
/// application's row not yet committed is never waited for.
async fn forget_transfers(conn: &mut MySqlConnection) -> Result<(), StoreError> {
    let rows: Vec<i64> = sql::query_scalar("SELECT seq FROM failwell_transfers ORDER BY seq LIMIT $1")
        .bind(crate::outbox::contract::FILL_LIMIT)
        .fetch_all(&mut *conn)
        .await
        .context("reading rows inserted through failwell_transfers")?;
    for seq in rows {
        sql::query("DELETE FROM failwell_transfers WHERE seq = $1")
            .bind(seq)
            .execute(&mut *conn)
            .await
            .context("deleting a row of failwell_transfers")?;
    }
    Ok(())
}

/// A key used again with another request, which the trigger took for a
/// replay: the operation's message is set aside, never sent, while it has
/// not been sent yet; once sent, nothing can be taken back, and the
/// refusal is written to the operation's history.
async fn refuse_replay(
    conn: &mut MySqlConnection,
    operation_id: i64,
    why: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    let unsent: Option<i64> = sql::query_scalar(
        "SELECT id FROM outbox WHERE operation_id = $1 AND state = 'pending' AND attempts = 0 AND in_flight = 0 \
         FOR UPDATE",
    )
    .bind(operation_id)
    .fetch_optional(&mut *conn)
    .await
    .context("reading a replayed operation's message")?;
    match unsent {
        Some(outbox_id) => {
            let why = format!("{why}; set aside, not sent");
            settle_unsent(conn, operation_id, outbox_id, "dead", &why, now_ms).await
        }
        None => {
            sql::query(
                "INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, `change`, detail) \
                 VALUES ('operation', $1, $1, $2, 'relay', 'request refused', $3)",
            )
            .bind(operation_id)
            .bind(now_ms)
            .bind(format!("{why}; not sent"))
            .execute(&mut *conn)
            .await
            .context("recording a refused request")?;
            Ok(())
        }
    }
}
