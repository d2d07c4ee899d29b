//! The comparisons role's statements ([`comparison_statements!`]).

/// Implements [`ComparisonStore`](crate::ComparisonStore) for `store`, in
/// the invoking module, with the same SQL on every database (`$N`
/// parameters, run by the backend's `sql` module). The store
/// provides `pool()`, `read_pool()` and `begin()`. What differs is passed
/// in: `texts_in`, a subquery of the texts bound as `$2`, and
/// `discrepancies`, the row source (`d`) of the discrepancies bound from
/// `$3` on, both bound by the backend's [`ComparisonBinds`](crate::comparisons::ComparisonBinds);
/// `returning_id`, what an `INSERT` ends with for `sql::inserted_id` to
/// read the new row's id (`" RETURNING id"`, or nothing on MySQL, whose
/// connection knows it); `new_window`, the insert of a comparison run
/// `($1, $2, $3, $4)` that leaves an existing one alone.
macro_rules! comparison_statements {
    (
        store = $store:ty,
        texts_in = $texts_in:literal,
        discrepancies = $discrepancies:literal,
        returning_id = $returning_id:literal,
        new_window = $new_window:literal $(,)?
    ) => {
        use crate::comparisons::ComparisonBinds as _;
        use super::sql;
        use crate::error::Context as _;

        #[async_trait::async_trait]
        impl crate::ComparisonStore for $store {
            async fn operations_between(
                &self,
                provider: &str,
                from_ms: i64,
                to_ms: i64,
            ) -> Result<Vec<crate::Operation>, crate::error::StoreError> {
                let rows = sql::query(crate::outbox::rows::select_operation!(
                    "WHERE o.provider = $1 AND o.created_at_ms >= $2 AND o.created_at_ms < $3 ORDER BY o.id"
                ))
                .bind(provider)
                .bind(from_ms)
                .bind(to_ms)
                .fetch_all(self.read_pool())
                .await
                .context("reading operations of a window")?;
                rows.iter().map(crate::outbox::rows::operation_from_row).collect()
            }

            async fn operations_by_reference(
                &self,
                provider: &str,
                references: &[String],
            ) -> Result<Vec<crate::Operation>, crate::error::StoreError> {
                let rows = sql::query(crate::outbox::rows::select_operation!(
                    "WHERE o.provider = $1 AND o.reference IN ",
                    $texts_in,
                    " ORDER BY o.id"
                ))
                .bind(provider)
                .bind_texts(references)
                .fetch_all(self.read_pool())
                .await
                .context("reading operations by reference")?;
                rows.iter().map(crate::outbox::rows::operation_from_row).collect()
            }

            /// Stores a report and its discrepancies in one transaction: the
            /// discrepancies in one statement, whatever their number.
            async fn save_report(
                &self,
                report: crate::comparisons::NewReport,
            ) -> Result<i64, crate::error::StoreError> {
                let mut tx = self.begin().await?;
                let id = sql::inserted_id(
                    sql::query(concat!(
                    "INSERT INTO reconciliation_reports (provider, window_from_ms, window_to_ms, \
                     started_at_ms, finished_at_ms, actor, ours, theirs, discrepancies, report, text) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                    $returning_id
                ))
                .bind(&report.provider)
                .bind(report.window_from_ms)
                .bind(report.window_to_ms)
                .bind(report.started_at_ms)
                .bind(report.finished_at_ms)
                .bind(&report.actor)
                .bind(report.ours as i64)
                .bind(report.theirs as i64)
                .bind(report.discrepancies.len() as i64)
                .bind(report.report.to_string())
                .bind(&report.text),
                    &mut tx,
                )
                .await
                .context("storing a comparison report")?;
                sql::query(concat!(
                    "INSERT INTO discrepancies (report_id, provider, kind, reference, operation_id, \
                     provider_ref, detail) \
                     SELECT $1, $2, d.kind, d.reference, d.operation_id, d.provider_ref, d.detail FROM ",
                    $discrepancies
                ))
                .bind(id)
                .bind(&report.provider)
                .bind_discrepancies(&report.discrepancies)
                .execute(&mut *tx)
                .await
                .context("storing discrepancies")?;
                if report.alert {
                    sql::query(
                        "INSERT INTO alerts (kind, subject, report_id, created_at_ms, next_at_ms) \
                         VALUES ('comparison', $1, $2, $3, $3)",
                    )
                    .bind(&report.provider)
                    .bind(id)
                    .bind(report.finished_at_ms)
                    .execute(&mut *tx)
                    .await
                    .context("queueing a report's alert")?;
                }
                tx.commit().await.context("committing a comparison report")?;
                Ok(id)
            }

            async fn reports(&self, limit: u32) -> Result<Vec<crate::Report>, crate::error::StoreError> {
                self.list_reports(crate::comparisons::Reports::Newest(limit)).await
            }

            async fn latest_reports(&self) -> Result<Vec<crate::Report>, crate::error::StoreError> {
                self.list_reports(crate::comparisons::Reports::LatestPerProvider).await
            }

            async fn report(&self, id: i64) -> Result<Option<crate::Report>, crate::error::StoreError> {
                Ok(self.list_reports(crate::comparisons::Reports::One(id)).await?.pop())
            }


            async fn claim_comparison(
                &self,
                provider: &str,
                window: (i64, i64),
                now_ms: i64,
                lease_ms: i64,
            ) -> Result<bool, crate::error::StoreError> {
                // New, or claimed earlier by a run that never finished.
                let mut tx = self.begin().await?;
                let inserted = sql::query($new_window)
                    .bind(provider)
                    .bind(window.0)
                    .bind(window.1)
                    .bind(now_ms)
                    .execute(&mut *tx)
                    .await
                    .context("claiming a comparison")?
                    .rows_affected()
                    > 0;
                let claimed = inserted
                    || sql::query(
                        "UPDATE comparison_runs SET claimed_at_ms = $4 \
                         WHERE provider = $1 AND window_from_ms = $2 AND window_to_ms = $3 \
                         AND finished_at_ms IS NULL AND claimed_at_ms <= $5",
                    )
                    .bind(provider)
                    .bind(window.0)
                    .bind(window.1)
                    .bind(now_ms)
                    .bind(now_ms - lease_ms)
                    .execute(&mut *tx)
                    .await
                    .context("claiming a comparison")?
                    .rows_affected()
                        > 0;
                tx.commit().await.context("committing a comparison's claim")?;
                Ok(claimed)
            }

            async fn finish_comparison(
                &self,
                provider: &str,
                window: (i64, i64),
                now_ms: i64,
            ) -> Result<(), crate::error::StoreError> {
                sql::query(
                    "UPDATE comparison_runs SET finished_at_ms = $4 \
                     WHERE provider = $1 AND window_from_ms = $2 AND window_to_ms = $3",
                )
                .bind(provider)
                .bind(window.0)
                .bind(window.1)
                .bind(now_ms)
                .execute(self.pool())
                .await
                .context("finishing a comparison")?;
                Ok(())
            }

            async fn last_comparison_window(&self, provider: &str) -> Result<Option<crate::Window>, crate::error::StoreError> {
                sql::query_as(
                    "SELECT window_from_ms, window_to_ms FROM comparison_runs WHERE provider = $1 \
                     ORDER BY window_to_ms DESC LIMIT 1",
                )
                .bind(provider)
                .fetch_optional(self.read_pool())
                .await
                .context("reading the last compared window")
            }

            async fn abandoned_comparisons(
                &self,
                claimed_before_ms: i64,
            ) -> Result<Vec<(String, crate::Window)>, crate::error::StoreError> {
                let rows: Vec<(String, i64, i64)> = sql::query_as(
                    "SELECT provider, window_from_ms, window_to_ms FROM comparison_runs \
                     WHERE finished_at_ms IS NULL AND claimed_at_ms <= $1 ORDER BY window_from_ms, provider",
                )
                .bind(claimed_before_ms)
                .fetch_all(self.read_pool())
                .await
                .context("reading unfinished comparisons")?;
                Ok(rows.into_iter().map(|(p, from, to)| (p, (from, to))).collect())
            }
        }

        impl $store {
            async fn list_reports(
                &self,
                which: crate::comparisons::Reports,
            ) -> Result<Vec<crate::comparisons::Report>, crate::error::StoreError> {
                let (sql, value) = which.query();
                let query = sql::query(sqlx::AssertSqlSafe(sql));
                let query = match value {
                    Some(value) => query.bind(value),
                    None => query,
                };
                let rows = query.fetch_all(self.read_pool()).await.context("reading comparison reports")?;
                rows.iter().map(crate::comparisons::report_from_row).collect()
            }
        }
    };
}

pub(crate) use comparison_statements;
