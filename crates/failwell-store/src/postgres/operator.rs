//! What operators read and do on PostgreSQL: dead letters (list, replay,
//! purge, acknowledge), an operation's history, the four numbers per
//! integration, and the comparison reports. The statements are shared
//! ([`crate::operator::operator_statements!`]); lists are passed as arrays
//! (`unnest`).
//!
//! Other failwell processes (relays, reconcilers, other operators) write
//! the same rows at the same time. A write that depends on a row's state
//! either carries the condition in its own `WHERE` (an `UPDATE` locks the
//! row and re-checks the condition once a concurrent writer commits, so of
//! two racing operators exactly one finds the row still dead), or reads the
//! state `FOR UPDATE` first. Locks are taken in the order every writer
//! uses: the outbox message (or forward) before its operation, so an
//! operator never deadlocks with the relay or the reconciler.

use failwell_policy::Discrepancy;
use sqlx::Postgres;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;

use super::PostgresStore;
use crate::operator::DiscrepancyColumns;

crate::operator::operator_statements!(
    store = PostgresStore,
    reader = pool,
    writer = pool,
    lock = [" FOR UPDATE"],
    snapshot = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    message_payload = "convert_to(o.payload, 'UTF8')",
    texts_in = "(SELECT unnest($2::text[]))",
    discrepancies = "unnest($3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[]) \
                     AS d (kind, reference, operation_id, provider_ref, detail)",
    // Computed from the status (migration `0009_hot_operations.sql`).
    unsettled = "unsettled",
);

/// Each list is an array, or one array per column
/// ([`DiscrepancyColumns`]).
impl crate::operator::OperatorBinds for Query<'_, Postgres, PgArguments> {
    fn bind_texts(self, texts: &[String]) -> Self {
        self.bind(texts)
    }

    fn bind_discrepancies(self, discrepancies: &[Discrepancy]) -> Self {
        let d = DiscrepancyColumns::of(discrepancies);
        self.bind(&d.kind).bind(&d.reference).bind(&d.operation_id).bind(&d.provider_ref).bind(&d.detail)
    }
}
