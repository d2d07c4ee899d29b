//! Comparison windows and reports on PostgreSQL: the shared statements
//! ([`crate::comparisons::statements`]) and how lists are bound.

use super::PostgresStore;
use crate::comparisons::DiscrepancyColumns;
use failwell_policy::Discrepancy;
use sqlx::Postgres;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;

crate::comparisons::statements::comparison_statements!(
    store = PostgresStore,
    texts_in = "(SELECT unnest($2::text[]))",
    discrepancies = "unnest($3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[]) \
                     AS d (kind, reference, operation_id, provider_ref, detail)",
    returning_id = " RETURNING id",
    new_window = "INSERT INTO comparison_runs (provider, window_from_ms, window_to_ms, claimed_at_ms) \
                  VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
);

/// Each list is an array, or one array per column
/// ([`DiscrepancyColumns`]).
impl crate::comparisons::ComparisonBinds for Query<'_, Postgres, PgArguments> {
    fn bind_texts(self, texts: &[String]) -> Self {
        self.bind(texts)
    }

    fn bind_discrepancies(self, discrepancies: &[Discrepancy]) -> Self {
        let d = DiscrepancyColumns::of(discrepancies);
        self.bind(&d.kind).bind(&d.reference).bind(&d.operation_id).bind(&d.provider_ref).bind(&d.detail)
    }
}
