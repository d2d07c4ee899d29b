//! What operators read and do on SQLite: dead letters (list, replay,
//! purge, acknowledge), an operation's history, the four numbers per
//! integration. The statements are shared
//! ([`crate::operator::statements`]).
//!
//! The single writer connection serialises every write, so a read that
//! decides a write needs no lock of its own here.

use super::SqliteStore;

crate::operator::statements::operator_statements!(
    store = SqliteStore,
    lock = [],
    // A deferred transaction on a read connection: one WAL snapshot.
    snapshot = "BEGIN",
    message_payload = "o.payload",
    unsettled = "status IN ('unknown', 'needs_human')",
);
