//! The alert outbox on PostgreSQL: the shared statements ([`crate::alerts::statements`]).

use super::PostgresStore;

crate::alerts::statements::alert_statements!(
    store = PostgresStore,
    lock = " FOR UPDATE OF a SKIP LOCKED",
    firing = "INSERT INTO alerts_firing (kind, subject, since_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
);
