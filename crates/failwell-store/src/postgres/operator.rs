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

use super::PostgresStore;

crate::operator::statements::operator_statements!(
    store = PostgresStore,
    lock = [" FOR UPDATE"],
    snapshot = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    message_payload = "convert_to(o.payload, 'UTF8')",
    // Computed from the status (migration `0009_hot_operations.sql`).
    unsettled = "unsettled",
);
