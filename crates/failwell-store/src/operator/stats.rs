//! The four numbers of every integration, added up from rows.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use super::rows::{OperatorRow, lossy_text};
use super::{IntegrationStats, Stats};
use crate::error::{Context, StoreError};

/// The four numbers of every integration, added up from the rows of the
/// statements of [`operator_statements!`] (the SQL is there, the arithmetic
/// here).
pub(crate) struct StatsBuilder {
    by_name: BTreeMap<String, (IntegrationStats, Option<Histogram<u64>>)>,
}

impl StatsBuilder {
    /// A row for each of `known`, even if nothing is found for it.
    pub(crate) fn new(known: &[String]) -> Self {
        Self { by_name: known.iter().map(|name| (name.clone(), (empty_stats(name), None))).collect() }
    }

    /// The start of the success-rate and latency window ending at `now_ms`.
    pub(crate) fn window_start(now_ms: i64, window_ms: u64) -> i64 {
        now_ms.saturating_sub(i64::try_from(window_ms).unwrap_or(i64::MAX))
    }

    /// Adds the calls of the window, one row per `(name, duration_ms)`
    /// with `calls` (how many took that long) and `answered` (how many of
    /// those the provider answered definitively).
    pub(crate) fn add_calls<R: OperatorRow>(&mut self, rows: &[R]) -> Result<(), StoreError> {
        const CONTEXT: &str = "reading recent calls";
        for row in rows {
            let (stats, histogram) = self.slot(name_of(row).context(CONTEXT)?);
            let calls = row.value::<i64>("calls").context(CONTEXT)? as u64;
            stats.calls += calls;
            stats.answered += row.value::<i64>("answered").context(CONTEXT)? as u64;
            let histogram = histogram.get_or_insert_with(|| {
                Histogram::new(3).expect("3 significant digits is a valid HDR histogram precision")
            });
            let duration = row.value::<i64>("duration_ms").context(CONTEXT)?.max(0) as u64;
            histogram.saturating_record_n(duration, calls);
        }
        Ok(())
    }

    /// Adds open and dead entries: rows of `name, depth, oldest` (when the
    /// oldest open entry was due: created, scheduled or replayed), `dead, unacked` (dead letters, and those
    /// given up after the last acknowledgement), several per name (outbox
    /// messages and forwards, open and dead).
    pub(crate) fn add_entries<R: OperatorRow>(&mut self, rows: &[R], now_ms: i64) -> Result<(), StoreError> {
        const CONTEXT: &str = "reading open and dead entries";
        for row in rows {
            let (stats, _) = self.slot(name_of(row).context(CONTEXT)?);
            stats.depth += row.value::<i64>("depth").context(CONTEXT)? as u64;
            stats.dead_letters += row.value::<i64>("dead").context(CONTEXT)? as u64;
            stats.dead_letters_unacked +=
                row.value::<Option<i64>>("unacked").context(CONTEXT)?.unwrap_or(0) as u64;
            if let Some(oldest) = row.value::<Option<i64>>("oldest").context(CONTEXT)? {
                let age = now_ms.saturating_sub(oldest).max(0);
                stats.oldest_open_age_ms = Some(stats.oldest_open_age_ms.map_or(age, |a| a.max(age)));
            }
        }
        Ok(())
    }

    /// Adds the operations waiting for an outcome: rows of `name, status`
    /// (`unknown` or `needs_human`) and `n`, how many.
    pub(crate) fn add_unsettled<R: OperatorRow>(&mut self, rows: &[R]) -> Result<(), StoreError> {
        const CONTEXT: &str = "counting unknown operations";
        for row in rows {
            let n = row.value::<i64>("n").context(CONTEXT)? as u64;
            let status: String = row.value("status").context(CONTEXT)?;
            let stats = &mut self.slot(name_of(row).context(CONTEXT)?).0;
            match status.as_str() {
                "unknown" => stats.unknown = n,
                _ => stats.needs_human = n,
            }
        }
        Ok(())
    }

    /// The numbers, by integration name, with the ratios and percentiles
    /// worked out.
    pub(crate) fn finish(self, now_ms: i64, window_ms: u64, last_ack_ms: Option<i64>) -> Stats {
        let integrations = self
            .by_name
            .into_values()
            .map(|(mut stats, histogram)| {
                if stats.calls > 0 {
                    stats.success_ratio = Some(stats.answered as f64 / stats.calls as f64);
                }
                stats.p95_ms = histogram.map(|h| h.value_at_quantile(0.95));
                stats
            })
            .collect();
        Stats { at_ms: now_ms, window_ms, last_ack_ms, integrations }
    }

    fn slot(&mut self, name: String) -> &mut (IntegrationStats, Option<Histogram<u64>>) {
        self.by_name.entry(name).or_insert_with_key(|name| (empty_stats(name), None))
    }
}

/// The integration `name` of a statistics row ([`lossy_text`]).
fn name_of<R: OperatorRow>(row: &R) -> Result<String, sqlx::Error> {
    lossy_text(row, "name").map(Option::unwrap_or_default)
}

fn empty_stats(name: &str) -> IntegrationStats {
    IntegrationStats {
        integration: name.to_owned(),
        calls: 0,
        answered: 0,
        success_ratio: None,
        p95_ms: None,
        depth: 0,
        oldest_open_age_ms: None,
        unknown: 0,
        needs_human: 0,
        dead_letters: 0,
        dead_letters_unacked: 0,
    }
}
