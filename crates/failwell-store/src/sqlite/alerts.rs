//! The alert outbox on SQLite: the shared statements ([`crate::alerts::statements`]).

use super::SqliteStore;

crate::alerts::statements::alert_statements!(
    store = SqliteStore,
    lock = "",
    firing = "INSERT INTO alerts_firing (kind, subject, since_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
);
