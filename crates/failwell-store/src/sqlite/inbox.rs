//! The webhook inbox on SQLite: storing events once, applying them to the
//! operations ledger in the same transaction, and the forwarding queue.
//! What is decided and read back, and the statements, are shared
//! ([`crate::inbox`]); this module passes batches as JSON arrays
//! (`json_each`), one array per row.

use serde_json::{Value, json};
use sqlx::Sqlite;
use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;

use super::SqliteStore;
use crate::inbox::{ForwardChange, LedgerChange, StepColumns};
use crate::{EventReport, EventStep, NewEvent};

crate::inbox::statements::inbox_statements!(
    store = SqliteStore,
    conn = sqlx::sqlite::SqliteConnection,
    lock = [],
    payload_size = "length(payload)",
    ids_in = "(SELECT value FROM json_each($1))",
    events = "(SELECT value ->> 0 AS integration, value ->> 1 AS event_id, unhex(value ->> 2) AS payload, \
              value ->> 3 AS headers, key AS n FROM json_each($2)) AS u",
    keys = "(SELECT value ->> 0 AS provider, value ->> 1 AS reference FROM json_each($1)) AS k",
    changes = "(SELECT value ->> 0 AS id, value ->> 1 AS status, value ->> 2 AS version, \
               value ->> 3 AS settled, value ->> 4 AS provider_ref, value ->> 5 AS conflict \
               FROM json_each($3)) AS u",
    steps = "(SELECT value ->> 0 AS event_seq, value ->> 1 AS kind, value ->> 2 AS at_ms, \
             value ->> 3 AS duration_ms, value ->> 4 AS status_code, value ->> 5 AS operation_id, \
             value ->> 6 AS effect, value ->> 7 AS detail, key AS n FROM json_each($1)) AS s",
    forward_changes = "(SELECT value ->> 0 AS id, value ->> 1 AS state, value ->> 2 AS available_at_ms, \
                       value ->> 3 AS delay_ms, value ->> 4 AS error, value ->> 5 AS dead_at_ms, \
                       value ->> 6 AS given_back FROM json_each($2)) AS u",
);

/// One JSON array of `rows`.
fn json_rows(rows: impl Iterator<Item = Value>) -> String {
    Value::Array(rows.collect()).to_string()
}

/// Each batch is one JSON array, of ids or of one array per row in the
/// order the row sources above read them (payloads in hex, which
/// `unhex` turns back into bytes).
impl crate::inbox::InboxBinds for Query<'_, Sqlite, SqliteArguments> {
    fn bind_ids(self, ids: &[i64]) -> Self {
        self.bind(serde_json::to_string(ids).unwrap_or_default())
    }

    fn bind_events(self, events: &[NewEvent]) -> Self {
        self.bind(json_rows(
            events
                .iter()
                .map(|e| json!([e.integration, e.event_id, hex::encode(&e.payload), e.headers.to_string()])),
        ))
    }

    fn bind_keys(self, reports: &[(i64, &EventReport)]) -> Self {
        self.bind(json_rows(reports.iter().map(|(_, r)| json!([r.provider, r.reference]))))
    }

    fn bind_changes(self, changes: &[LedgerChange<'_>]) -> Self {
        self.bind(json_rows(
            changes.iter().map(|c| json!([c.id, c.status, c.version, c.settled, c.provider_ref, c.conflict])),
        ))
    }

    fn bind_steps(self, steps: &[(i64, EventStep)]) -> Self {
        self.bind(json_rows(steps.iter().map(StepColumns::of).map(|s| {
            json!([
                s.event_seq,
                s.kind,
                s.at_ms,
                s.duration_ms,
                s.status_code,
                s.operation_id,
                s.effect,
                s.detail
            ])
        })))
    }

    fn bind_forward_changes(self, changes: &[ForwardChange<'_>]) -> Self {
        self.bind(json_rows(changes.iter().map(|c| {
            json!([c.id, c.state, c.available_at_ms, c.delay_ms, c.error, c.dead_at_ms, c.given_back])
        })))
    }
}
