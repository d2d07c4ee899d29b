//! What operators read and do on SQLite: dead letters (list, replay,
//! purge, acknowledge), an operation's history, the four numbers per
//! integration, and the comparison reports. The statements are shared
//! ([`crate::operator::operator_statements!`]); lists are passed as JSON
//! arrays (`json_each`).
//!
//! The single writer connection serialises every write, so a read that
//! decides a write needs no lock of its own here.

use failwell_policy::Discrepancy;
use serde_json::Value;
use sqlx::Sqlite;
use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;

use super::SqliteStore;
use crate::operator::discrepancy_json;

crate::operator::operator_statements!(
    store = SqliteStore,
    reader = reader,
    writer = writer,
    lock = [],
    // A deferred transaction on a read connection: one WAL snapshot.
    snapshot = "BEGIN",
    message_payload = "o.payload",
    texts_in = "(SELECT value FROM json_each($2))",
    discrepancies = "(SELECT value ->> 0 AS kind, value ->> 1 AS reference, value ->> 2 AS operation_id, \
                     value ->> 3 AS provider_ref, value ->> 4 AS detail FROM json_each($3)) AS d",
    unsettled = "status IN ('unknown', 'needs_human')",
);

/// Each list is one JSON array: of texts, or of one
/// [`discrepancy_json`] array per discrepancy.
impl crate::operator::OperatorBinds for Query<'_, Sqlite, SqliteArguments> {
    fn bind_texts(self, texts: &[String]) -> Self {
        self.bind(serde_json::to_string(texts).unwrap_or_default())
    }

    fn bind_discrepancies(self, discrepancies: &[Discrepancy]) -> Self {
        self.bind(Value::Array(discrepancies.iter().map(discrepancy_json).collect()).to_string())
    }
}
