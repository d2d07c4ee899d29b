//! The alert outbox on MySQL: the shared statements ([`crate::alerts::statements`]).

use super::MySqlStore;

crate::alerts::statements::alert_statements!(
    store = MySqlStore,
    // Not `SKIP LOCKED`: see `store.rs`'s `due_messages`.
    lock = " FOR UPDATE",
    // Every value is one failwell wrote, so `IGNORE` leaves out only the
    // duplicate.
    firing = "INSERT IGNORE INTO alerts_firing (kind, subject, since_ms) VALUES ($1, $2, $3)",
);
