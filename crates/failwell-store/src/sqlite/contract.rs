//! What failwell completes of a row an application inserted into the
//! `failwell_outbox` view (migration `0010_outbox_contract.sql`).
//!
//! The view's trigger runs on the application's connection, which has no
//! SHA-256: it stores the request hash as `''`, and a row without an
//! idempotency key gets a provisional key (`sqlite:…`, provider key
//! `provisional`). Before a claim, failwell fills them
//! ([`fill_contract!`](crate::outbox::contract::fill_contract)); the claim
//! passes over a row not filled yet ([`FILLED`]).

/// The claim's condition that an outbox message aliased `x` has been filled.
pub(super) const FILLED: &str = "x.operation_id NOT IN (SELECT id FROM operations WHERE request_hash = '')";

crate::outbox::contract::fill_contract!(
    conn = sqlx::sqlite::SqliteConnection,
    unfilled = "SELECT o.id, x.id AS outbox_id, o.idempotency_key, \
         CASE WHEN o.provider_key = 'provisional' THEN 1 ELSE 0 END AS provisional, \
         o.provider, o.operation, o.payload FROM operations o JOIN outbox x ON x.operation_id = o.id \
         WHERE o.request_hash = '' AND ($1 IS NULL OR o.idempotency_key = $1) ORDER BY o.id LIMIT $2",
    lock = "",
);
