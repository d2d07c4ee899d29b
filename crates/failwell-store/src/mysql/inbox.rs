//! The webhook inbox on MySQL: the shared statements ([`crate::inbox`])
//! with PostgreSQL's locks, batches passed as JSON arrays (`JSON_TABLE`).
//!
//! Receiving takes a row lock on `failwell_locks` first, so events are
//! stored one transaction at a time and `seq` order is commit order (as
//! PostgreSQL's advisory lock does). MySQL cannot return what an insert
//! stored, so the new events are inserted one by one and the stored ones
//! read back by `seq`, which that lock makes exact.

use sqlx::mysql::{MySqlConnection, MySqlRow};

use super::MySqlStore;
use crate::NewEvent;
use crate::error::StoreError;

crate::inbox::statements::inbox_statements!(
    store = MySqlStore,
    conn = sqlx::mysql::MySqlConnection,
    lock = [" FOR UPDATE"],
    // Not `SKIP LOCKED`: see `store.rs`'s `due_messages`.
    claim_lock = [" FOR UPDATE"],
    operations_lock = [" FOR UPDATE"],
    update = join,
    serialize = "SELECT name FROM failwell_locks WHERE name = 'inbox' FOR UPDATE",
    payload_size = "CAST(LENGTH(payload) AS SIGNED)",
    ids_in = "(SELECT id FROM JSON_TABLE($1, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j)",
    keys = "JSON_TABLE($1, '$[*]' COLUMNS (provider VARCHAR(255) PATH '$[0]', \
            reference VARCHAR(255) PATH '$[1]')) AS k",
    changes = "JSON_TABLE($3, '$[*]' COLUMNS (id BIGINT PATH '$[0]', status VARCHAR(16) PATH '$[1]', \
               version BIGINT PATH '$[2]', settled BOOLEAN PATH '$[3]', provider_ref TEXT PATH '$[4]', \
               conflict BOOLEAN PATH '$[5]')) AS u",
    steps = "JSON_TABLE($1, '$[*]' COLUMNS (n FOR ORDINALITY, event_seq BIGINT PATH '$[0]', \
             kind VARCHAR(16) PATH '$[1]', at_ms BIGINT PATH '$[2]', duration_ms BIGINT PATH '$[3]', \
             status_code BIGINT PATH '$[4]', operation_id BIGINT PATH '$[5]', effect VARCHAR(16) PATH '$[6]', \
             detail TEXT PATH '$[7]')) AS s",
    forward_changes = "JSON_TABLE($2, '$[*]' COLUMNS (id BIGINT PATH '$[0]', state VARCHAR(16) PATH '$[1]', \
                       available_at_ms BIGINT PATH '$[2]', delay_ms BIGINT PATH '$[3]', error TEXT PATH '$[4]', \
                       dead_at_ms BIGINT PATH '$[5]', given_back BIGINT PATH '$[6]')) AS u",
);

/// Stores the batch's new events in arrival order, leaving out those
/// already stored (and the later of two deliveries in the batch), and
/// returns the stored ones' `seq, integration, event_id`. Runs under the
/// receive lock, so no other transaction inserts meanwhile.
async fn insert_events(
    conn: &mut MySqlConnection,
    events: &[NewEvent],
    now_ms: i64,
) -> Result<Vec<MySqlRow>, StoreError> {
    use crate::error::Context as _;
    let mut stored = Vec::new();
    for e in events {
        let exists: Option<i64> =
            sql::query_scalar("SELECT seq FROM inbox_events WHERE integration = $1 AND event_id = $2")
                .bind(e.integration.as_str())
                .bind(e.event_id.as_str())
                .fetch_optional(&mut *conn)
                .await
                .context("looking for a stored webhook event")?;
        if exists.is_some() {
            continue;
        }
        let seq = sql::inserted_id(
            sql::query(
                "INSERT INTO inbox_events (integration, event_id, payload, headers, received_at_ms) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(e.integration.as_str())
            .bind(e.event_id.as_str())
            .bind(e.payload.as_slice())
            .bind(e.headers.to_string())
            .bind(now_ms),
            conn,
        )
        .await
        .context("storing a webhook event")?;
        stored.push(seq);
    }
    if stored.is_empty() {
        return Ok(Vec::new());
    }
    sql::query(
        "SELECT seq, integration, event_id FROM inbox_events \
         WHERE seq IN (SELECT id FROM JSON_TABLE($1, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j) ORDER BY seq",
    )
    .bind(serde_json::to_string(&stored).unwrap_or_default())
    .fetch_all(conn)
    .await
    .context("reading stored webhook events")
}
