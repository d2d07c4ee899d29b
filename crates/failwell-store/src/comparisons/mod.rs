//! The comparisons role: scheduled comparisons of our operations against
//! the provider's records, their windows (claimed once across processes)
//! and their reports.
//!
//! The trait is [`ComparisonStore`]; its statements, the same SQL on every
//! database, are in `statements.rs` (`comparison_statements!`).

mod model;
pub(crate) mod statements;

pub use model::*;

use failwell_policy::Discrepancy;

use crate::{Operation, StoreError};

/// Comparison windows and reports: what the comparison schedule, the
/// operator commands and the dashboard need of a store.
#[async_trait::async_trait]
pub trait ComparisonStore: Send + Sync {
    /// Operations of `provider` created in `[from_ms, to_ms)`, oldest first.
    async fn operations_between(
        &self,
        provider: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<Operation>, StoreError>;

    /// Operations of `provider` carrying one of `references`.
    async fn operations_by_reference(
        &self,
        provider: &str,
        references: &[String],
    ) -> Result<Vec<Operation>, StoreError>;

    /// Stores a comparison report and its discrepancies in one transaction;
    /// returns the report's id.
    async fn save_report(&self, report: NewReport) -> Result<i64, StoreError>;

    /// The latest `limit` comparison reports, newest first.
    async fn reports(&self, limit: u32) -> Result<Vec<Report>, StoreError>;

    /// The newest comparison report of each provider, by provider name.
    async fn latest_reports(&self) -> Result<Vec<Report>, StoreError>;

    /// One comparison report.
    async fn report(&self, id: i64) -> Result<Option<Report>, StoreError>;

    /// Claims the comparison of `provider` over `[from_ms, to_ms)` for this
    /// process; returns `false` when another process (or an earlier run)
    /// claimed it and finished it, or claimed it less than `lease_ms` ago,
    /// so a schedule shared by several processes runs once and a run whose
    /// process died is taken over.
    async fn claim_comparison(
        &self,
        provider: &str,
        window: (i64, i64),
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<bool, StoreError>;

    /// Records that the claimed comparison of `provider` over `window` has
    /// run (whether it found anything or failed).
    async fn finish_comparison(
        &self,
        provider: &str,
        window: (i64, i64),
        now_ms: i64,
    ) -> Result<(), StoreError>;

    /// The latest window of `provider` a scheduled comparison claimed (by
    /// its end), if any.
    async fn last_comparison_window(&self, provider: &str) -> Result<Option<Window>, StoreError>;

    /// The comparisons claimed at or before `claimed_before_ms` and never
    /// finished, as `(provider, (from_ms, to_ms))`, oldest window first.
    async fn abandoned_comparisons(
        &self,
        claimed_before_ms: i64,
    ) -> Result<Vec<(String, Window)>, StoreError>;
}
/// How a backend passes the comparison statements' lists as parameters: each
/// method binds one list the way the row source of the same name given to
/// [`comparison_statements!`](statements::comparison_statements) reads it (a JSON array on SQLite, arrays on
/// PostgreSQL).
pub(crate) trait ComparisonBinds: Sized {
    /// A list of texts, read by `texts_in`.
    fn bind_texts(self, texts: &[String]) -> Self;
    /// A report's discrepancies, read by `discrepancies` as `kind,
    /// reference, operation_id, provider_ref, detail`.
    fn bind_discrepancies(self, discrepancies: &[Discrepancy]) -> Self;
}

/// Implements [`ComparisonBinds`] for `query` (any statement builder with
/// `bind(String)`): each list is one JSON array, of texts or of one
/// [`discrepancy_json`] array per discrepancy (SQLite reads it with
/// `json_each`, MySQL with `JSON_TABLE`).
macro_rules! json_comparison_binds {
    ($query:ty) => {
        impl crate::comparisons::ComparisonBinds for $query {
            fn bind_texts(self, texts: &[String]) -> Self {
                self.bind(serde_json::to_string(texts).unwrap_or_default())
            }

            fn bind_discrepancies(self, discrepancies: &[failwell_policy::Discrepancy]) -> Self {
                self.bind(
                    serde_json::Value::Array(
                        discrepancies.iter().map(crate::comparisons::discrepancy_json).collect(),
                    )
                    .to_string(),
                )
            }
        }
    };
}

pub(crate) use json_comparison_binds;
