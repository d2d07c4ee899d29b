//! The webhook inbox on MySQL: the shared statements ([`crate::inbox`])
//! with PostgreSQL's locks, batches passed as JSON arrays (`JSON_TABLE`).
//!
//! Receiving takes a row lock on `failwell_locks` first, so events are
//! stored one transaction at a time and `seq` order is commit order (as
//! PostgreSQL's advisory lock does). MySQL cannot return what an insert
//! stored, so the new rows are read back by `seq`, which that lock makes
//! exact.

use std::collections::HashSet;

use serde_json::json;
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
    keys = "JSON_TABLE($1, '$[*]' COLUMNS (provider LONGTEXT PATH '$[0]', \
            reference LONGTEXT PATH '$[1]')) AS k",
    changes = "JSON_TABLE($3, '$[*]' COLUMNS (id BIGINT PATH '$[0]', status LONGTEXT PATH '$[1]', \
               version BIGINT PATH '$[2]', settled BOOLEAN PATH '$[3]', provider_ref LONGTEXT PATH '$[4]', \
               conflict BOOLEAN PATH '$[5]')) AS u",
    steps = "JSON_TABLE($1, '$[*]' COLUMNS (n FOR ORDINALITY, event_seq BIGINT PATH '$[0]', \
             kind LONGTEXT PATH '$[1]', at_ms BIGINT PATH '$[2]', duration_ms BIGINT PATH '$[3]', \
             status_code BIGINT PATH '$[4]', operation_id BIGINT PATH '$[5]', effect LONGTEXT PATH '$[6]', \
             detail LONGTEXT PATH '$[7]')) AS s",
    forward_changes = "JSON_TABLE($2, '$[*]' COLUMNS (id BIGINT PATH '$[0]', state LONGTEXT PATH '$[1]', \
                       available_at_ms BIGINT PATH '$[2]', delay_ms BIGINT PATH '$[3]', error LONGTEXT PATH '$[4]', \
                       dead_at_ms BIGINT PATH '$[5]', given_back BIGINT PATH '$[6]')) AS u",
);

/// Stores the batch's new events in arrival order, leaving out those
/// already stored (and the later of two deliveries in the batch), and
/// returns the stored ones' `seq, integration, event_id`, in four
/// statements whatever the batch's size. Runs under the receive lock, so
/// no other transaction inserts meanwhile: the new rows are those after
/// the highest `seq` read before the insert.
async fn insert_events(
    conn: &mut MySqlConnection,
    events: &[NewEvent],
    now_ms: i64,
) -> Result<Vec<MySqlRow>, StoreError> {
    use crate::error::Context as _;
    use crate::inbox::InboxBinds as _;
    let keys = serde_json::Value::Array(events.iter().map(|e| json!([e.integration, e.event_id])).collect());
    let stored: HashSet<(String, String)> = sql::query_as(
        "SELECT e.integration, e.event_id FROM inbox_events e JOIN JSON_TABLE($1, '$[*]' COLUMNS \
         (integration LONGTEXT PATH '$[0]', event_id LONGTEXT PATH '$[1]')) AS k \
         ON e.integration = k.integration AND e.event_id = k.event_id",
    )
    .bind(keys.to_string())
    .fetch_all(&mut *conn)
    .await
    .context("looking for stored webhook events")?
    .into_iter()
    .collect();
    let mut seen = HashSet::with_capacity(events.len());
    let new: Vec<NewEvent> = events
        .iter()
        .filter(|e| {
            let key = (e.integration.clone(), e.event_id.clone());
            !stored.contains(&key) && seen.insert(key)
        })
        .cloned()
        .collect();
    if new.is_empty() {
        return Ok(Vec::new());
    }
    let before: i64 = sql::query_scalar("SELECT CAST(COALESCE(MAX(seq), 0) AS SIGNED) FROM inbox_events")
        .fetch_one(&mut *conn)
        .await
        .context("reading the inbox's last seq")?;
    sql::query(
        "INSERT INTO inbox_events (integration, event_id, payload, headers, received_at_ms) \
         SELECT integration, event_id, UNHEX(payload), headers, $1 FROM JSON_TABLE($2, '$[*]' COLUMNS \
         (n FOR ORDINALITY, integration LONGTEXT PATH '$[0]', event_id LONGTEXT PATH '$[1]', \
         payload LONGTEXT PATH '$[2]', headers LONGTEXT PATH '$[3]')) AS u ORDER BY n",
    )
    .bind(now_ms)
    .bind_events(&new)
    .execute(&mut *conn)
    .await
    .context("storing webhook events")?;
    sql::query("SELECT seq, integration, event_id FROM inbox_events WHERE seq > $1 ORDER BY seq")
        .bind(before)
        .fetch_all(conn)
        .await
        .context("reading stored webhook events")
}
