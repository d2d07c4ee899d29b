//! What operators read and do on MySQL: the shared statements
//! ([`crate::operator::operator_statements!`]) with PostgreSQL's row
//! locks, in the same lock order (the outbox message or forward before its
//! operation), so an operator never deadlocks with the relay.

use super::MySqlStore;

crate::operator::statements::operator_statements!(
    store = MySqlStore,
    lock = [" FOR UPDATE"],
    // A snapshot needs `REPEATABLE READ` (the session's level is `READ
    // COMMITTED`); the level set here holds for this transaction only.
    snapshot = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; START TRANSACTION READ ONLY, WITH CONSISTENT SNAPSHOT",
    message_payload = "CAST(o.payload AS BINARY)",
    unsettled = "status IN ('unknown', 'needs_human')",
);
