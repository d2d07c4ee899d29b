//! Batches bound as JSON arrays, one array per row (SQLite reads them with
//! `json_each`, MySQL with `JSON_TABLE`).

use serde_json::Value;

/// One JSON array of `rows`.
pub(crate) fn json_rows(rows: impl Iterator<Item = Value>) -> String {
    Value::Array(rows.collect()).to_string()
}

/// Implements [`InboxBinds`](crate::inbox::InboxBinds) for `query` (any
/// statement builder with `bind(String)`): each batch is one JSON array,
/// of ids or of one array per row in the order the row sources read them
/// (payloads in hex).
macro_rules! json_inbox_binds {
    ($query:ty) => {
        /// Each batch is one JSON array, of ids or of one array per row in the
        /// order the row sources above read them (payloads in hex, which
        /// `unhex` turns back into bytes).
        impl crate::inbox::InboxBinds for $query {
            fn bind_ids(self, ids: &[i64]) -> Self {
                self.bind(serde_json::to_string(ids).unwrap_or_default())
            }

            fn bind_events(self, events: &[crate::NewEvent]) -> Self {
                self.bind(crate::inbox::json_binds::json_rows(events.iter().map(|e| {
                    serde_json::json!([
                        e.integration,
                        e.event_id,
                        hex::encode(&e.payload),
                        e.headers.to_string()
                    ])
                })))
            }

            fn bind_keys(self, reports: &[(i64, &crate::EventReport)]) -> Self {
                self.bind(crate::inbox::json_binds::json_rows(
                    reports.iter().map(|(_, r)| serde_json::json!([r.provider, r.reference])),
                ))
            }

            fn bind_changes(self, changes: &[crate::inbox::LedgerChange<'_>]) -> Self {
                self.bind(crate::inbox::json_binds::json_rows(changes.iter().map(|c| {
                    serde_json::json!([c.id, c.status, c.version, c.settled, c.provider_ref, c.conflict])
                })))
            }

            fn bind_steps(self, steps: &[(i64, crate::EventStep)]) -> Self {
                self.bind(crate::inbox::json_binds::json_rows(
                    steps.iter().map(crate::inbox::StepColumns::of).map(|s| {
                        serde_json::json!([
                            s.event_seq,
                            s.kind,
                            s.at_ms,
                            s.duration_ms,
                            s.status_code,
                            s.operation_id,
                            s.effect,
                            s.detail
                        ])
                    }),
                ))
            }

            fn bind_forward_changes(self, changes: &[crate::inbox::ForwardChange<'_>]) -> Self {
                self.bind(crate::inbox::json_binds::json_rows(changes.iter().map(|c| {
                    serde_json::json!([
                        c.id,
                        c.state,
                        c.available_at_ms,
                        c.delay_ms,
                        c.error,
                        c.dead_at_ms,
                        c.given_back
                    ])
                })))
            }
        }
    };
}

pub(crate) use json_inbox_binds;
