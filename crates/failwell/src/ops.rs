//! What an operator does, the same from the command line, the admin API
//! and the dashboard: read the four numbers, look at and act on dead
//! letters, run a reconciliation, follow one operation's history. Plus the
//! plain-text renderings the command line prints. The balance ledger's
//! reads are in `ledger.rs`.

pub mod ledger;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use failwell_engine::{
    AlertSink, CompareError, Providers, Reconciler, ReconcilerConfig, compare::rfc3339, compare_and_alert,
};
use failwell_policy::Outcome;
use failwell_store::{
    Channel, DeadLetter, DeadLetterKind, HistoryEntry, IntegrationStats, ManualResolution, Operation,
    OperationStatus, Stats, Store, StoreError,
};
use serde::Serialize;

/// Unknown operations looked up by one `reconcile run`, at most.
pub const RECONCILE_LOOKUPS: u32 = 100_000;

/// The longest comparison window: 366 days.
pub const MAX_WINDOW: Duration = Duration::from_secs(366 * 86_400);

/// Lookups of one `reconcile run` in flight at once.
pub const LOOKUPS_AT_ONCE: u32 = 64;

/// How long one `reconcile run` waits for confirming lookups, at most.
pub const CONFIRM_WAIT: Duration = Duration::from_secs(60);

/// Why an operator's request failed.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A comparison failed.
    #[error(transparent)]
    Compare(#[from] CompareError),
    /// The request names something that is not configured.
    #[error("{0}")]
    Invalid(String),
    /// `(kind, id)` is not a dead letter (never was, or was replayed or
    /// purged meanwhile).
    #[error("{} {id} is not a dead letter", kind.as_str())]
    NotADeadLetter {
        /// Which queue.
        kind: DeadLetterKind,
        /// The id asked for.
        id: i64,
    },
    /// No operation has this idempotency key.
    #[error("no operation has the idempotency key {0:?}")]
    NoOperation(String),
    /// Only `unknown` and `needs_human` operations are resolved by hand.
    #[error("the operation is {}: only unknown and needs_human operations are resolved by hand", .0.as_str())]
    NotOpen(OperationStatus),
    /// A resolution must say why.
    #[error("the note must say why (it is kept in the history)")]
    NoNote,
}

/// Puts a dead letter back in its queue, due now, with fresh attempts and
/// the same idempotency key, as `channel`'s operator; logged. The caller
/// wakes its queue if it runs one. Errors: [`OpsError::NotADeadLetter`],
/// the store's.
pub async fn replay(store: &Store, kind: DeadLetterKind, id: i64, channel: Channel) -> Result<(), OpsError> {
    if !store.replay(kind, id, channel, failwell_engine::now_ms()).await? {
        return Err(OpsError::NotADeadLetter { kind, id });
    }
    tracing::info!(kind = kind.as_str(), id, by = channel.actor(), "dead letter replayed");
    Ok(())
}

/// Deletes a dead letter for good (the history keeps that it was), as
/// `channel`'s operator; logged. Errors: [`OpsError::NotADeadLetter`], the
/// store's.
pub async fn purge(store: &Store, kind: DeadLetterKind, id: i64, channel: Channel) -> Result<(), OpsError> {
    if !store.purge(kind, id, channel, failwell_engine::now_ms()).await? {
        return Err(OpsError::NotADeadLetter { kind, id });
    }
    tracing::info!(kind = kind.as_str(), id, by = channel.actor(), "dead letter purged");
    Ok(())
}

/// Acknowledges every dead letter so far, as `channel`'s operator; returns
/// when (ms since the epoch). Errors: the store's.
pub async fn acknowledge(store: &Store, channel: Channel) -> Result<i64, OpsError> {
    let now = failwell_engine::now_ms();
    store.ack_dead_letters(channel, now).await?;
    Ok(now)
}

/// Settles an `unknown` or `needs_human` operation by hand, after the
/// operator checked with the provider: `outcome` with the provider's id if
/// known, and a `note` saying why (kept in the history with who did it);
/// logged. Errors: [`OpsError::NoNote`] for a blank note,
/// [`OpsError::NoOperation`], [`OpsError::NotOpen`], the store's.
pub async fn resolve(
    store: &Store,
    key: &str,
    outcome: Outcome,
    provider_ref: Option<String>,
    note: String,
    channel: Channel,
) -> Result<(), OpsError> {
    if note.trim().is_empty() {
        return Err(OpsError::NoNote);
    }
    match store.resolve(key, outcome, provider_ref, note, channel, failwell_engine::now_ms()).await? {
        ManualResolution::Resolved => {
            tracing::info!(key, %outcome, by = channel.actor(), "operation resolved by hand");
            Ok(())
        }
        ManualResolution::NotFound => Err(OpsError::NoOperation(key.to_owned())),
        ManualResolution::NotOpen(status) => Err(OpsError::NotOpen(status)),
    }
}

/// What `reconcile run` did.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ReconcileRun {
    /// Unknown operations looked up.
    pub looked_up: usize,
    /// Unknown operations left after the lookups.
    pub still_unknown: u64,
    /// Operations waiting for a person (`needs_human`), in all.
    pub needs_human: u64,
    /// The comparisons made: provider, report id, discrepancies.
    pub comparisons: Vec<ComparisonRun>,
}

/// One comparison of a [`ReconcileRun`].
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct ComparisonRun {
    /// The provider compared.
    pub provider: String,
    /// The stored report's id.
    pub report_id: i64,
    /// Discrepancies found.
    pub discrepancies: usize,
    /// The report as text.
    pub text: String,
    /// What became of its alert: `none` (nothing found, or no alert sink),
    /// `sent`, `queued` (sent later: by this command's next run or a
    /// running `failwell serve`) or `given_up`.
    pub alert: &'static str,
}

/// The four numbers of every integration as of now over `window`, with a
/// row for each name of `providers` (clients or specs), active or not.
pub async fn stats<P>(
    store: &Store,
    providers: &BTreeMap<String, P>,
    window: Duration,
) -> Result<Stats, StoreError> {
    let known: Vec<String> = providers.keys().cloned().collect();
    store.stats(failwell_engine::now_ms(), window.as_millis() as u64, &known).await
}

/// Looks up every unknown operation now (and once more, after the
/// provider's `reconcile_after`, those it did not find: at most
/// [`CONFIRM_WAIT`] later), then compares each provider that
/// has `[compare]` (or only `provider`) over the last `window`, sending
/// reports with discrepancies to `sink`. Errors: `window` is not between
/// 1 ms and [`MAX_WINDOW`], `provider` is not configured or cannot be
/// compared (nothing is done then); a comparison or the store failed.
pub async fn reconcile_run(
    store: &Store,
    providers: &Arc<Providers>,
    sink: Option<&AlertSink>,
    provider: Option<&str>,
    window: Duration,
    channel: Channel,
) -> Result<ReconcileRun, OpsError> {
    if window.is_zero() || window > MAX_WINDOW {
        return Err(OpsError::Invalid(format!(
            "the comparison window must be between 1 ms and 366 days, not {} ms",
            window.as_millis()
        )));
    }
    let names: Vec<String> = match provider {
        Some(name) => match providers.get(name) {
            Some(client) if client.spec().compare.is_some() => vec![name.to_owned()],
            Some(_) => return Err(CompareError::NotConfigured(name.to_owned()).into()),
            None => return Err(OpsError::Invalid(format!("no provider {name:?} is configured"))),
        },
        None => {
            providers.iter().filter(|(_, c)| c.spec().compare.is_some()).map(|(n, _)| n.clone()).collect()
        }
    };
    let reconciler = Reconciler::new(
        store.clone(),
        providers.clone(),
        ReconcilerConfig { interval: Duration::from_secs(1), batch_size: LOOKUPS_AT_ONCE },
    );
    let mut looked_up = reconciler.look_up_all(RECONCILE_LOOKUPS).await?;
    // A lookup that found nothing is confirmed by a second one after the
    // provider's reconcile_after (a call still in flight there may commit
    // late): wait for those, up to CONFIRM_WAIT.
    let confirm_by = failwell_engine::now_ms()
        + providers
            .values()
            .map(|c| c.spec().reconcile_after)
            .max()
            .unwrap_or_default()
            .min(CONFIRM_WAIT)
            .as_millis() as i64;
    while !store.due_unknown(confirm_by, 1).await?.is_empty()
        && failwell_engine::now_ms() <= confirm_by + 1_000
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
        looked_up += reconciler.round().await?;
    }
    let now = failwell_engine::now_ms();
    let window = (now - window.as_millis() as i64, now);
    let mut comparisons = Vec::new();
    for name in names {
        let compared = compare_and_alert(store, providers, sink, &name, window, channel.actor()).await?;
        comparisons.push(ComparisonRun {
            provider: name,
            report_id: compared.report_id,
            discrepancies: compared.report.discrepancies.len(),
            text: compared.report.text,
            alert: "none",
        });
    }
    // Alerts queued earlier (a send that failed, a sender that died) are
    // due as well: sent now, so a failwell run only from a schedule (cron)
    // delivers them too.
    if let Some(sink) = sink {
        failwell_engine::deliver(store, sink, failwell_store::AlertClaim::Due).await?;
    }
    for c in &mut comparisons {
        if let Some(report) = store.report(c.report_id).await? {
            c.alert = report.alert_state().as_str();
        }
    }
    let counts = store.counts().await?;
    Ok(ReconcileRun {
        looked_up,
        still_unknown: counts.unknown,
        needs_human: counts.needs_human,
        comparisons,
    })
}

/// An operation and its history, by idempotency key.
pub async fn timeline(
    store: &Store,
    key: &str,
) -> Result<Option<(Operation, Vec<HistoryEntry>)>, StoreError> {
    let Some(op) = store.operation(key).await? else { return Ok(None) };
    let history = store.history(op.id).await?;
    Ok(Some((op, history)))
}

/// A duration in ms as `850 ms`, `12.3 s`, `4.0 min` or `2.5 h`.
pub fn human_ms(ms: i64) -> String {
    match ms {
        ..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1e3),
        60_000..3_600_000 => format!("{:.1} min", ms as f64 / 6e4),
        _ => format!("{:.1} h", ms as f64 / 3.6e6),
    }
}

/// The success ratio as a percentage, `-` without calls.
pub fn ratio(stats: &IntegrationStats) -> String {
    stats.success_ratio.map_or_else(|| "-".into(), |r| format!("{:.1} %", r * 100.0))
}

/// `failwell status` as a table: one row per integration.
pub fn status_table(stats: &Stats) -> String {
    let header = [
        "INTEGRATION",
        "SUCCESS",
        "P95",
        "CALLS",
        "OPEN",
        "OLDEST OPEN",
        "UNKNOWN",
        "HUMAN",
        "DEAD",
        "DEAD UNACKED",
    ];
    let rows: Vec<[String; 10]> = stats
        .integrations
        .iter()
        .map(|i| {
            [
                printable(&i.integration).into_owned(),
                ratio(i),
                i.p95_ms.map_or_else(|| "-".into(), |ms| human_ms(ms as i64)),
                i.calls.to_string(),
                i.depth.to_string(),
                i.oldest_open_age_ms.map_or_else(|| "-".into(), human_ms),
                i.unknown.to_string(),
                i.needs_human.to_string(),
                i.dead_letters.to_string(),
                i.dead_letters_unacked.to_string(),
            ]
        })
        .collect();
    // Names left-aligned, numbers right-aligned.
    let mut columns = header.map(|title| (title, Align::Right));
    columns[0].1 = Align::Left;
    let mut out = table(columns, &rows);
    let _ = writeln!(
        out,
        "success rate and p95 over the last {}; dead letters unacknowledged: {}",
        human_ms(stats.window_ms as i64),
        stats.last_ack_ms.map_or_else(
            || "all (`failwell dlq ack` has never run)".into(),
            |at| format!("since the last `failwell dlq ack` at {}", rfc3339(at))
        ),
    );
    out
}

/// How a column of a [`table`] is aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Text: padded on the right.
    Left,
    /// Numbers: padded on the left.
    Right,
}

/// `rows` under `header` (titles and alignments) as columns two spaces
/// apart, each as wide as its widest cell (in characters), one line per
/// row, without trailing spaces. Cells are printed as they are: pass them
/// through [`printable`] first when they hold stored text.
pub fn table<const N: usize>(header: [(&str, Align); N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|(title, _)| title.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; N]| {
        let mut l = String::new();
        for (i, (cell, (w, (_, align)))) in cells.iter().zip(widths.iter().zip(header)).enumerate() {
            let gap = if i == 0 { "" } else { "  " };
            let _ = match align {
                Align::Left => write!(l, "{gap}{cell:<w$}"),
                Align::Right => write!(l, "{gap}{cell:>w$}"),
            };
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.map(|(title, _)| title));
    for row in rows {
        line(row.each_ref().map(String::as_str));
    }
    out
}

/// `text` with every control character (escape, carriage return, newline,
/// …) written as its Rust escape (`\u{1b}`, `\r`, `\n`), and every
/// bidirectional formatting character (Unicode's `Bidi_Control`: U+061C,
/// U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) as `\u{202e}` and the
/// like, so stored text written by anyone can neither rewrite an
/// operator's terminal, nor fake a line of a table, nor show its
/// characters in another order than they are stored (CVE-2021-42574,
/// "Trojan Source").
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let bidi = |c: char| matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
    if text.chars().any(|c| c.is_control() || bidi(c)) {
        text.chars()
            .map(|c| match c {
                c if c.is_control() => c.escape_debug().to_string(),
                c if bidi(c) => c.escape_unicode().to_string(),
                c => c.to_string(),
            })
            .collect::<String>()
            .into()
    } else {
        text.into()
    }
}

/// Dead letters as a table.
pub fn dead_letter_table(letters: &[DeadLetter]) -> String {
    if letters.is_empty() {
        return "no dead letters\n".into();
    }
    let mut out = String::from("KIND     ID  INTEGRATION  KEY  ATTEMPTS  DEAD SINCE  LAST ERROR\n");
    for d in letters {
        let _ = writeln!(
            out,
            "{:<7} {:>3}  {}  {}  {}  {}  {}",
            d.kind.as_str(),
            d.id,
            printable(&d.integration),
            printable(&d.key),
            d.attempts,
            rfc3339(d.dead_at_ms),
            printable(d.last_error.as_deref().unwrap_or("-"))
        );
    }
    out
}

/// One operation's timeline as text.
pub fn timeline_text(op: &Operation, history: &[HistoryEntry]) -> String {
    let mut out = format!(
        "operation {} ({}.{}), reference {}\nstatus {}{}, {} calls, provider id {}\n",
        printable(&op.idempotency_key),
        printable(&op.provider),
        printable(&op.operation),
        printable(op.reference.as_deref().unwrap_or("-")),
        op.status.as_str(),
        if op.dead_letter { " (dead letter)" } else { "" },
        op.attempts,
        printable(op.provider_ref.as_deref().unwrap_or("-")),
    );
    if let Some(why) = &op.unreadable {
        // The stored text, which failwell cannot read as JSON, as it is.
        let stored = op.payload.as_str().unwrap_or_default();
        let _ = writeln!(out, "stored {}; the stored payload is:\n{}", printable(why), printable(stored));
    }
    for h in history {
        let _ = write!(
            out,
            "{}  {:<12} {:<9} {}",
            rfc3339(h.at_ms),
            printable(&h.actor),
            h.subject,
            printable(&h.change)
        );
        if let Some(detail) = &h.detail {
            let _ = write!(out, " — {}", printable(detail));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn stored_text_cannot_drive_the_terminal_or_fake_a_line() {
        assert_eq!(printable("order-1 café"), "order-1 café");
        assert_eq!(
            printable("evil\u{1b}[2K\r\u{1b}[32mOK\nnext\u{7}"),
            "evil\\u{1b}[2K\\r\\u{1b}[32mOK\\nnext\\u{7}"
        );
        assert_eq!(printable("key-\u{202E}gpj.exe"), "key-\\u{202e}gpj.exe", "a right-to-left override");
        assert_eq!(printable("\u{2066}a\u{2069}\u{200F}"), "\\u{2066}a\\u{2069}\\u{200f}");
    }
}
