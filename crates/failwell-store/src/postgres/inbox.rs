//! The webhook inbox on PostgreSQL: storing events once, applying them to
//! the operations ledger in the same transaction, and the forwarding queue.
//! What is decided and read back, and the statements, are shared
//! ([`crate::inbox`]); this module gives them their locks and passes
//! batches as arrays, one per column (`unnest`).
//!
//! Several processes receive, claim and complete at once, so:
//! - receiving takes a transaction-level lock on the inbox first, so events
//!   are stored one transaction at a time and `seq` order is commit order
//!   (SQLite's single writer gives that for free): without it a feed reader
//!   could see `seq` 8 committed while 7 is still in flight, move its cursor
//!   past 7 and never see it;
//! - duplicates are left out by `ON CONFLICT DO NOTHING` (an error would
//!   abort the whole transaction);
//! - the operations the new events name are locked before they are read,
//!   their outbox messages first, then the operations (each in id order),
//!   the order every writer takes them in (the relay locks the message and
//!   then updates its operation), so no two writers wait for each other
//!   in a cycle;
//! - forward claims skip rows another process is claiming (`SKIP LOCKED`),
//!   and completions lock the forwards they judge, so the compare-and-set
//!   on `(id, lease_token)` holds until they are written.

use sqlx::Postgres;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;

use super::PostgresStore;
use crate::inbox::{ForwardChange, LedgerChange, StepColumns};
use crate::{EventReport, EventStep, NewEvent};

crate::inbox::statements::insert_returning_events!(
    conn = sqlx::postgres::PgConnection,
    row = sqlx::postgres::PgRow,
    events = "unnest($2::text[], $3::text[], $4::bytea[], $5::text[]) WITH ORDINALITY \
              AS u(integration, event_id, payload, headers, n)",
);

crate::inbox::statements::inbox_statements!(
    store = PostgresStore,
    conn = sqlx::postgres::PgConnection,
    lock = [" FOR UPDATE"],
    claim_lock = [" FOR UPDATE OF f SKIP LOCKED"],
    operations_lock = [" FOR UPDATE OF o"],
    update = from,
    // Held until the commit: the next batch takes its `seq`s only once this
    // one is visible (see the module docs). Keyed by the table's oid, so
    // stores in other schemas of the database do not wait.
    serialize = "SELECT pg_advisory_xact_lock('inbox_events'::regclass::oid::bigint)",
    payload_size = "octet_length(payload)::bigint",
    ids_in = "(SELECT unnest($1::bigint[]))",
    keys = "unnest($1::text[], $2::text[]) AS k(provider, reference)",
    changes = "unnest($3::bigint[], $4::text[], $5::bigint[], $6::boolean[], $7::text[], $8::boolean[]) \
               AS u(id, status, version, settled, provider_ref, conflict)",
    steps = "unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], \
             $7::text[], $8::text[]) WITH ORDINALITY \
             AS s(event_seq, kind, at_ms, duration_ms, status_code, operation_id, effect, detail, n)",
    forward_changes = "unnest($2::bigint[], $3::text[], $4::bigint[], $5::bigint[], $6::text[], \
                       $7::bigint[], $8::bigint[]) \
                       AS u(id, state, available_at_ms, delay_ms, error, dead_at_ms, given_back)",
);

/// Binds `rows` as one array per field named, in order.
macro_rules! bind_columns {
    ($query:expr, $rows:expr, $($field:ident),+ $(,)?) => {
        $query$(.bind($rows.iter().map(|r| r.$field).collect::<Vec<_>>()))+
    };
}

/// Each batch is one array per column, in the order the row sources above
/// read them.
impl crate::inbox::InboxBinds for Query<'_, Postgres, PgArguments> {
    fn bind_ids(self, ids: &[i64]) -> Self {
        self.bind(ids)
    }

    fn bind_events(self, events: &[NewEvent]) -> Self {
        let integrations: Vec<&str> = events.iter().map(|e| e.integration.as_str()).collect();
        let event_ids: Vec<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
        let payloads: Vec<&[u8]> = events.iter().map(|e| e.payload.as_slice()).collect();
        let headers: Vec<String> = events.iter().map(|e| e.headers.to_string()).collect();
        self.bind(&integrations).bind(&event_ids).bind(&payloads).bind(&headers)
    }

    fn bind_keys(self, reports: &[(i64, &EventReport)]) -> Self {
        let (providers, references): (Vec<&str>, Vec<&str>) =
            reports.iter().map(|(_, r)| (r.provider.as_str(), r.reference.as_str())).unzip();
        self.bind(&providers).bind(&references)
    }

    fn bind_changes(self, changes: &[LedgerChange<'_>]) -> Self {
        bind_columns!(self, changes, id, status, version, settled, provider_ref, conflict)
    }

    fn bind_steps(self, steps: &[(i64, EventStep)]) -> Self {
        let s: Vec<StepColumns<'_>> = steps.iter().map(StepColumns::of).collect();
        bind_columns!(self, s, event_seq, kind, at_ms, duration_ms, status_code, operation_id, effect, detail)
    }

    fn bind_forward_changes(self, changes: &[ForwardChange<'_>]) -> Self {
        bind_columns!(self, changes, id, state, available_at_ms, delay_ms, error, dead_at_ms, given_back)
    }
}
