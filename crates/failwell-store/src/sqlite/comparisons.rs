//! Comparison windows and reports on SQLite: the shared statements
//! ([`crate::comparisons::statements`]) and how lists are bound.

use super::SqliteStore;
use crate::comparisons::discrepancy_json;
use failwell_policy::Discrepancy;
use serde_json::Value;
use sqlx::Sqlite;
use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;

crate::comparisons::statements::comparison_statements!(
    store = SqliteStore,
    texts_in = "(SELECT value FROM json_each($2))",
    discrepancies = "(SELECT value ->> 0 AS kind, value ->> 1 AS reference, value ->> 2 AS operation_id, \
                     value ->> 3 AS provider_ref, value ->> 4 AS detail FROM json_each($3)) AS d",
);

/// Each list is one JSON array: of texts, or of one
/// [`discrepancy_json`] array per discrepancy.
impl crate::comparisons::ComparisonBinds for Query<'_, Sqlite, SqliteArguments> {
    fn bind_texts(self, texts: &[String]) -> Self {
        self.bind(serde_json::to_string(texts).unwrap_or_default())
    }

    fn bind_discrepancies(self, discrepancies: &[Discrepancy]) -> Self {
        self.bind(Value::Array(discrepancies.iter().map(discrepancy_json).collect()).to_string())
    }
}
