//! The webhook inbox on SQLite: storing events once, applying them to the
//! operations ledger in the same transaction, and the forwarding queue.
//! What is decided and read back, and the statements, are shared
//! ([`crate::inbox`]); this module passes batches as JSON arrays
//! (`json_each`), one array per row.

use sqlx::Sqlite;
use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;

use super::SqliteStore;

crate::inbox::statements::insert_returning_events!(
    conn = sqlx::sqlite::SqliteConnection,
    row = sqlx::sqlite::SqliteRow,
    events = "(SELECT value ->> 0 AS integration, value ->> 1 AS event_id, unhex(value ->> 2) AS payload, \
              value ->> 3 AS headers, key AS n FROM json_each($2)) AS u",
);

crate::inbox::statements::inbox_statements!(
    store = SqliteStore,
    conn = sqlx::sqlite::SqliteConnection,
    lock = [],
    claim_lock = [],
    operations_lock = [],
    update = from,
    payload_size = "length(payload)",
    ids_in = "(SELECT value FROM json_each($1))",
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

crate::inbox::json_binds::json_inbox_binds!(Query<'_, Sqlite, SqliteArguments>);
