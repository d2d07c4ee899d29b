//! The scheduled comparison: lists the provider's records for a time window
//! page by page, gathers our operations for the same window, compares them
//! ([`failwell_policy::compare`]), and stores the report with each
//! discrepancy.
//!
//! Each of our operations is judged once, in the window it was created in;
//! a provider record no operation of ours carries, in the window the
//! provider created it in. The window's edges are handled on both sides: a
//! provider record whose reference belongs to an operation of ours created
//! outside the window is matched with that operation (and not judged here),
//! and an apparent disagreement about one of our operations is checked
//! against every record the provider has for its reference (a lookup by
//! reference: the provider may have created a record just outside the
//! window) before it is reported.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use failwell_policy::{
    Discrepancy, DiscrepancyKind, OurRecord, OurStatus, Rejected, TheirRecord, TheirStatus,
};
use failwell_store::{NewReport, Operation, OperationStatus, Store, StoreError};
use reqwest::Url;
use serde_json::{Value, json};

use crate::client::{CallResult, ProviderClient, TransportError};
use crate::provider::{CompareSpec, LookupSpec, TimeUnit};

/// Why a comparison could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// The provider has no `lookup` and `compare` configuration.
    #[error("provider {0:?} cannot be compared: it needs [providers.{0}.lookup] and [providers.{0}.compare]")]
    NotConfigured(String),
    /// The provider's list could not be read.
    #[error("listing the records of {provider:?} failed: {detail}")]
    Provider {
        /// The provider.
        provider: String,
        /// What went wrong (status, transport error, unexpected body).
        detail: ListError,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why the provider's records for a window could not be read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ListError {
    /// The provider's policy refused the call (breaker open, bulkhead full,
    /// no turn of the adaptive rate, deadline), after every read allowed.
    #[error(transparent)]
    Rejected(#[from] Rejected),
    /// The call got no complete answer: its kind (`connect`, `timeout`, …)
    /// and the error with its causes.
    #[error("{}: {}", .0.kind, .0.message)]
    Transport(TransportError),
    /// A 2xx answer whose body is not JSON (its status).
    #[error("HTTP {0} without a JSON body")]
    NotJson(u16),
    /// An answer other than 2xx, without a JSON body (its status).
    #[error("HTTP {0}")]
    Status(u16),
    /// An answer other than 2xx: its status and the provider's own words,
    /// the JSON body cut to 300 characters.
    #[error("HTTP {status}: {body}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The start of the JSON body.
        body: String,
    },
    /// A page has no array at the lookup's `list_pointer` (given).
    #[error("the answer has no list at {0:?}")]
    NoList(String),
    /// A record has no string at the provider's `id_pointer`.
    #[error("a record has no id at {pointer:?}: {record}")]
    NoId {
        /// The `id_pointer`.
        pointer: String,
        /// The record.
        record: Value,
    },
    /// The window holds more records than `compare.max_records` (given).
    #[error("more than compare.max_records = {0} records in the window")]
    TooMany(u32),
    /// The provider has no lookup to check one reference with.
    #[error("no lookup")]
    NoLookup,
    /// Checking one reference (given) failed.
    #[error("looking up {reference:?}: {error}")]
    Lookup {
        /// Our reference.
        reference: String,
        /// Why.
        error: Box<ListError>,
    },
}

/// A finished comparison: the stored report's id and what it holds.
#[derive(Clone, Debug)]
pub struct Compared {
    /// The stored report's id.
    pub report_id: i64,
    /// The report as stored (its JSON and text name the id).
    pub report: NewReport,
}

/// Compares `client`'s provider over `[from_ms, to_ms)` and stores the
/// report (see the module docs); `actor` is `schedule` or
/// `operator:<channel>`. With `alert`, a report with discrepancies is
/// queued for the alert sink in the transaction that stores it. Errors: the
/// provider is not configured for it, its list cannot be read (nothing is
/// stored), the store fails.
pub async fn compare<S: Store>(
    store: &S,
    client: &ProviderClient,
    (from_ms, to_ms): (i64, i64),
    actor: &str,
    alert: bool,
) -> Result<Compared, CompareError> {
    let spec = client.spec();
    let provider = spec.name.clone();
    let (Some(lookup), Some(compare)) = (&spec.lookup, &spec.compare) else {
        return Err(CompareError::NotConfigured(provider));
    };
    let started_at_ms = crate::now_ms();
    let failed = |detail: ListError| CompareError::Provider { provider: provider.clone(), detail };
    let mut theirs = list(client, lookup, compare, from_ms, to_ms).await.map_err(failed)?;
    let ours = store.operations_between(&provider, from_ms, to_ms).await?;
    let in_window: BTreeSet<i64> = ours.iter().map(|o| o.id).collect();
    // Records whose operation was created outside the window: matched with
    // it (so they are not "missing here"), judged in that operation's own
    // window.
    let known: BTreeSet<&str> = ours.iter().filter_map(|o| o.reference.as_deref()).collect();
    let strangers: Vec<String> = theirs
        .iter()
        .filter_map(|r| r.reference.clone())
        .filter(|r| !known.contains(r.as_str()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let context = if strangers.is_empty() {
        Vec::new()
    } else {
        store.operations_by_reference(&provider, &strangers).await?
    };
    let our_records: Vec<OurRecord> =
        ours.iter().chain(&context).filter_map(|op| our_record(op, compare)).collect();
    let judged = |found: Vec<Discrepancy>| -> Vec<Discrepancy> {
        found.into_iter().filter(|d| d.operation_id.is_none_or(|id| in_window.contains(&id))).collect()
    };
    // An apparent disagreement about one of our operations is checked
    // against every record the provider has for its reference (the list
    // holds only those created in the window), then judged again.
    let suspects: BTreeSet<String> = judged(failwell_policy::compare(&our_records, &theirs))
        .into_iter()
        .filter(|d| d.operation_id.is_some())
        .filter_map(|d| d.reference)
        .collect();
    for reference in &suspects {
        let answer = client.lookup(reference).await.ok_or_else(|| failed(ListError::NoLookup))?;
        let body = answer
            .map_err(ListError::from)
            .and_then(page_body)
            .map_err(|e| failed(ListError::Lookup { reference: reference.clone(), error: Box::new(e) }))?;
        theirs.retain(|r| r.reference.as_ref() != Some(reference));
        theirs.extend(records(&body, lookup, compare, &spec.id_pointer).map_err(failed)?);
    }
    let discrepancies = judged(failwell_policy::compare(&our_records, &theirs));
    let our_records: Vec<OurRecord> =
        our_records.into_iter().filter(|o| in_window.contains(&o.operation_id)).collect();
    let open = our_records.iter().filter(|o| o.status == OurStatus::Open).count();
    let mut report = NewReport {
        provider: provider.clone(),
        window_from_ms: from_ms,
        window_to_ms: to_ms,
        started_at_ms,
        finished_at_ms: crate::now_ms(),
        actor: actor.to_owned(),
        ours: our_records.len() as u64,
        theirs: theirs.len() as u64,
        discrepancies,
        report: Value::Null,
        text: String::new(),
        alert: false,
    };
    report.alert = alert && !report.discrepancies.is_empty();
    report.report = report_json(&report, open);
    report.text = report_text(&report, open);
    let report_id = store.save_report(report.clone()).await?;
    Ok(Compared { report_id, report })
}

/// Every record of the window, page by page.
async fn list(
    client: &ProviderClient,
    lookup: &LookupSpec,
    compare: &CompareSpec,
    from_ms: i64,
    to_ms: i64,
) -> Result<Vec<TheirRecord>, ListError> {
    let at = |ms: i64| match compare.time_unit {
        TimeUnit::Seconds => ms.div_euclid(1000).to_string(),
        TimeUnit::Millis => ms.to_string(),
    };
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        // Only the query is used: the URL encodes the parameters.
        let mut url = lookup.url.clone();
        url.set_query(None);
        {
            let mut q = url.query_pairs_mut();
            q.append_pair(&compare.from_param, &at(from_ms));
            q.append_pair(&compare.to_param, &at(to_ms));
            q.append_pair(&compare.page_size_param, &compare.page_size.to_string());
            if let Some(cursor) = &cursor {
                q.append_pair(&compare.cursor_param, cursor);
            }
        }
        let body = read_page(client, &lookup.url, url.query().unwrap_or_default()).await?;
        let page = records(&body, lookup, compare, &client.spec().id_pointer)?;
        let more = body.pointer(&compare.has_more_pointer).and_then(Value::as_bool).unwrap_or(false);
        cursor = page.last().map(|r| r.id.clone());
        let empty = page.is_empty();
        all.extend(page);
        if all.len() > compare.max_records as usize {
            return Err(ListError::TooMany(compare.max_records));
        }
        if !more || empty {
            return Ok(all);
        }
    }
}

/// Reads of one page, at most: a page the provider's pause or open
/// breaker held back, or that failed on the provider's side (5xx, 408,
/// 429, no answer), is read again.
const PAGE_READS: u32 = 4;

/// The longest wait before a page is read again.
const MAX_PAGE_WAIT: Duration = Duration::from_secs(10);

/// One page's JSON body, read again after a passing failure (see
/// [`PAGE_READS`]): after the pause or breaker's wait, or 1 s, 2 s, 4 s.
/// Errors: a refusal that a retry would not change (another 4xx), or the
/// last failure.
async fn read_page(client: &ProviderClient, url: &Url, query: &str) -> Result<Value, ListError> {
    let mut read = 0;
    loop {
        let (failure, wait) = match client.read(url, query).await {
            Err(rejected) => {
                let wait = client.wait_after(&rejected).unwrap_or(Duration::from_secs(1));
                (rejected.into(), wait)
            }
            Ok(result) => {
                let passing = match &result.response {
                    Ok(reply) => matches!(reply.status, 408 | 429 | 500..=599),
                    Err(_) => true,
                };
                match page_body(result) {
                    Ok(body) => return Ok(body),
                    Err(e) if passing => (e, Duration::from_secs(1 << read)),
                    Err(e) => return Err(e),
                }
            }
        };
        read += 1;
        if read == PAGE_READS {
            return Err(failure);
        }
        tokio::time::sleep(wait.min(MAX_PAGE_WAIT)).await;
    }
}

/// The JSON body of a 2xx answer, or why there is none.
fn page_body(result: CallResult) -> Result<Value, ListError> {
    match result.response {
        Ok(reply) if (200..300).contains(&reply.status) => reply.body.ok_or(ListError::NotJson(reply.status)),
        Ok(reply) => Err(match reply.body {
            // The provider's own words, shortened.
            Some(body) => ListError::Refused {
                status: reply.status,
                body: body.to_string().chars().take(300).collect(),
            },
            None => ListError::Status(reply.status),
        }),
        Err(e) => Err(ListError::Transport(e)),
    }
}

/// The records of one page.
fn records(
    body: &Value,
    lookup: &LookupSpec,
    compare: &CompareSpec,
    id_pointer: &str,
) -> Result<Vec<TheirRecord>, ListError> {
    let list = body
        .pointer(&lookup.list_pointer)
        .and_then(Value::as_array)
        .ok_or_else(|| ListError::NoList(lookup.list_pointer.clone()))?;
    list.iter()
        .map(|record| {
            let id = record
                .pointer(id_pointer)
                .and_then(Value::as_str)
                .ok_or_else(|| ListError::NoId { pointer: id_pointer.to_owned(), record: record.clone() })?;
            let status = record.pointer(&lookup.status_pointer).and_then(Value::as_str).unwrap_or_default();
            Ok(TheirRecord {
                id: id.to_owned(),
                reference: record.pointer(&compare.reference_pointer).and_then(as_text),
                status: if lookup.succeeded.iter().any(|s| s == status) {
                    TheirStatus::Succeeded
                } else if lookup.failed.iter().any(|s| s == status) {
                    TheirStatus::Failed
                } else {
                    TheirStatus::Other(status.to_owned())
                },
                amount: compare
                    .amount_pointer
                    .as_deref()
                    .and_then(|p| record.pointer(p))
                    .and_then(as_integer),
            })
        })
        .collect()
}

fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn as_integer(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

fn our_record(op: &Operation, compare: &CompareSpec) -> Option<OurRecord> {
    Some(OurRecord {
        operation_id: op.id,
        reference: op.reference.clone()?,
        status: match op.status {
            OperationStatus::Succeeded => OurStatus::Succeeded,
            OperationStatus::Failed => OurStatus::Failed,
            OperationStatus::Pending | OperationStatus::Unknown | OperationStatus::NeedsHuman => {
                OurStatus::Open
            }
        },
        amount: compare
            .payload_amount_pointer
            .as_deref()
            .and_then(|p| op.payload.pointer(p))
            .and_then(as_integer),
        provider_ref: op.provider_ref.clone(),
    })
}

/// The last moment RFC 3339 can write: 9999-12-31T23:59:59.999Z.
const LAST_RFC3339_MS: i64 = 253_402_300_799_999;

/// RFC 3339 in UTC, to the millisecond (clamped to years 1970–9999).
pub fn rfc3339(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(ms.clamp(0, LAST_RFC3339_MS) as u64);
    humantime::format_rfc3339_millis(at).to_string()
}

fn report_json(r: &NewReport, open: usize) -> Value {
    let by_kind: serde_json::Map<String, Value> = DiscrepancyKind::ALL
        .iter()
        .map(|k| (k.as_str().to_owned(), json!(r.discrepancies.iter().filter(|d| d.kind == *k).count())))
        .collect();
    json!({
        "provider": r.provider,
        "window": { "from": rfc3339(r.window_from_ms), "to": rfc3339(r.window_to_ms),
                    "from_ms": r.window_from_ms, "to_ms": r.window_to_ms },
        "ours": r.ours,
        "open": open,
        "theirs": r.theirs,
        "by_kind": by_kind,
        "discrepancies": r.discrepancies,
        "actor": r.actor,
        "finished_at": rfc3339(r.finished_at_ms),
    })
}

fn report_text(r: &NewReport, open: usize) -> String {
    let mut text = format!(
        "failwell comparison of {} from {} to {}\nours: {} operations ({open} still open, not judged); provider: {} records\n",
        r.provider,
        rfc3339(r.window_from_ms),
        rfc3339(r.window_to_ms),
        r.ours,
        r.theirs,
    );
    if r.discrepancies.is_empty() {
        text.push_str("no discrepancies\n");
    } else {
        let _ = writeln!(text, "{} discrepancies:", r.discrepancies.len());
        for d in &r.discrepancies {
            let _ = writeln!(text, "- {}", line(d));
        }
    }
    text
}

/// One discrepancy as one line: kind, reference, operation, provider ids, detail.
pub fn line(d: &Discrepancy) -> String {
    let mut s = d.kind.as_str().to_owned();
    if let Some(reference) = &d.reference {
        let _ = write!(s, " reference {reference}");
    }
    if let Some(id) = d.operation_id {
        let _ = write!(s, " (operation {id})");
    }
    if let Some(theirs) = &d.provider_ref {
        let _ = write!(s, " [{theirs}]");
    }
    let _ = write!(s, ": {}", d.detail);
    s
}

/// The time from now until `at_ms` (ms since epoch), zero if it passed.
pub fn until(at_ms: i64) -> Duration {
    crate::since(at_ms, crate::now_ms())
}

#[cfg(test)]
mod tests;
