//! Comparison windows and reports on SQLite: the shared statements
//! ([`crate::comparisons::statements`]) and how lists are bound.

use super::SqliteStore;
use sqlx::Sqlite;
use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;

crate::comparisons::statements::comparison_statements!(
    store = SqliteStore,
    texts_in = "(SELECT value FROM json_each($2))",
    discrepancies = "(SELECT value ->> 0 AS kind, value ->> 1 AS reference, value ->> 2 AS operation_id, \
                     value ->> 3 AS provider_ref, value ->> 4 AS detail FROM json_each($3)) AS d",
    returning_id = " RETURNING id",
    new_window = "INSERT INTO comparison_runs (provider, window_from_ms, window_to_ms, claimed_at_ms) \
                  VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
);

crate::comparisons::json_comparison_binds!(Query<'_, Sqlite, SqliteArguments>);
