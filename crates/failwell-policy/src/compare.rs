//! The scheduled comparison: our operations against the provider's records
//! over a time window, and the discrepancies between them.
//!
//! A pure function of the two lists ([`compare`]); fetching them (the
//! provider's list endpoint, page by page, and a lookup by reference for
//! our records the window's edge cut off) is the caller's work. Only
//! settled operations are judged: an operation still `pending` or `unknown`
//! is in flight, and the status lookup resolves it.
//!
//! The kinds follow what payment reconciliation looks for (a "three-way
//! match" without the bank leg): a record on one side only, a different
//! amount, a different outcome, and one intent charged twice.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

/// How an operation ended on our side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OurStatus {
    /// We recorded the effect as done.
    Succeeded,
    /// We recorded that the provider refused (or never acted).
    Failed,
    /// Still pending or unknown: not judged.
    Open,
}

/// One of our operations, as the comparison needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OurRecord {
    /// Our operation id.
    pub operation_id: i64,
    /// Our business reference (the key both sides share).
    pub reference: String,
    /// How it ended here.
    pub status: OurStatus,
    /// The amount we asked for, in minor units, when the payload has one.
    pub amount: Option<i64>,
    /// The provider's id for the effect, once we know it.
    pub provider_ref: Option<String>,
}

/// What the provider's record says happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TheirStatus {
    /// One of the provider's "succeeded" statuses.
    Succeeded,
    /// One of its "failed" statuses.
    Failed,
    /// Anything else (e.g. still processing): not judged.
    Other(String),
}

/// One record from the provider's list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TheirRecord {
    /// The provider's id, e.g. `ch_…`.
    pub id: String,
    /// Our reference as the provider stored it, if any.
    pub reference: Option<String>,
    /// Its outcome.
    pub status: TheirStatus,
    /// Its amount in minor units, if the record has one.
    pub amount: Option<i64>,
}

/// What kind of disagreement was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DiscrepancyKind {
    /// We recorded a success the provider has no record of.
    MissingAtProvider,
    /// The provider has a record no operation of ours carries.
    MissingHere,
    /// Both sides succeeded with different amounts.
    AmountMismatch,
    /// One side succeeded, the other failed.
    StatusMismatch,
    /// The provider succeeded more than once for one reference.
    DuplicateAtProvider,
}

impl DiscrepancyKind {
    /// The stable snake_case name used in SQL, JSON and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingAtProvider => "missing_at_provider",
            Self::MissingHere => "missing_here",
            Self::AmountMismatch => "amount_mismatch",
            Self::StatusMismatch => "status_mismatch",
            Self::DuplicateAtProvider => "duplicate_at_provider",
        }
    }

    /// Every kind, in report order.
    pub const ALL: [Self; 5] = [
        Self::MissingAtProvider,
        Self::MissingHere,
        Self::AmountMismatch,
        Self::StatusMismatch,
        Self::DuplicateAtProvider,
    ];
}

impl fmt::Display for DiscrepancyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One disagreement, with what each side said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Discrepancy {
    /// Its kind.
    pub kind: DiscrepancyKind,
    /// The reference it is about, if any.
    pub reference: Option<String>,
    /// Our operation, if we have one.
    pub operation_id: Option<i64>,
    /// The provider's record id(s), comma-separated, if it has any.
    pub provider_ref: Option<String>,
    /// One sentence for a person, e.g. `amount: ours 1200, provider 1250`.
    pub detail: String,
}

/// Compares `ours` with `theirs` (see the module docs). `ours` must hold
/// every operation whose reference appears in `theirs` (else those records
/// read as [`DiscrepancyKind::MissingHere`]), and `theirs` every record
/// of the provider for a reference in `ours` (else a success reads as
/// [`DiscrepancyKind::MissingAtProvider`]). Result order: by kind, then
/// reference.
pub fn compare(ours: &[OurRecord], theirs: &[TheirRecord]) -> Vec<Discrepancy> {
    let mut by_reference: BTreeMap<&str, Vec<&TheirRecord>> = BTreeMap::new();
    let mut found = Vec::new();
    for record in theirs {
        match record.reference.as_deref() {
            Some(reference) => by_reference.entry(reference).or_default().push(record),
            None => found.push(Discrepancy {
                kind: DiscrepancyKind::MissingHere,
                reference: None,
                operation_id: None,
                provider_ref: Some(record.id.clone()),
                detail: format!("provider record {} carries no reference", record.id),
            }),
        }
    }
    let known: BTreeSet<&str> = ours.iter().map(|o| o.reference.as_str()).collect();
    for (reference, records) in &by_reference {
        if !known.contains(reference) {
            found.push(Discrepancy {
                kind: DiscrepancyKind::MissingHere,
                reference: Some((*reference).to_owned()),
                operation_id: None,
                provider_ref: Some(ids(records)),
                detail: format!("the provider has {} record(s) we have no operation for", records.len()),
            });
        }
    }
    for our in ours {
        let records = by_reference.get(our.reference.as_str()).map(Vec::as_slice).unwrap_or_default();
        if let Some(kind_detail) = judge(our, records) {
            let (kind, detail) = kind_detail;
            found.push(Discrepancy {
                kind,
                reference: Some(our.reference.clone()),
                operation_id: Some(our.operation_id),
                provider_ref: (!records.is_empty()).then(|| ids(records)),
                detail,
            });
        }
    }
    found.sort_by(|a, b| (a.kind, &a.reference).cmp(&(b.kind, &b.reference)));
    found
}

/// The one disagreement between a settled operation and the provider's
/// records for its reference, if any.
fn judge(our: &OurRecord, records: &[&TheirRecord]) -> Option<(DiscrepancyKind, String)> {
    let succeeded: Vec<&TheirRecord> =
        records.iter().copied().filter(|r| r.status == TheirStatus::Succeeded).collect();
    match our.status {
        OurStatus::Open => None,
        OurStatus::Failed => (!succeeded.is_empty()).then(|| {
            (
                DiscrepancyKind::StatusMismatch,
                format!("ours failed, provider succeeded ({})", ids(&succeeded)),
            )
        }),
        OurStatus::Succeeded => match succeeded.as_slice() {
            [] if records.is_empty() => Some((
                DiscrepancyKind::MissingAtProvider,
                "ours succeeded, the provider has no record".into(),
            )),
            [] => Some((
                DiscrepancyKind::StatusMismatch,
                format!("ours succeeded, provider {}", their_statuses(records)),
            )),
            [one] => match (our.amount, one.amount) {
                (Some(a), Some(b)) if a != b => Some((
                    DiscrepancyKind::AmountMismatch,
                    format!("amount: ours {a}, provider {b} ({})", one.id),
                )),
                _ => None,
            },
            many => Some((
                DiscrepancyKind::DuplicateAtProvider,
                format!("the provider succeeded {} times for one intent", many.len()),
            )),
        },
    }
}

fn ids(records: &[&TheirRecord]) -> String {
    records.iter().map(|r| r.id.as_str()).collect::<Vec<_>>().join(",")
}

fn their_statuses(records: &[&TheirRecord]) -> String {
    records
        .iter()
        .map(|r| match &r.status {
            TheirStatus::Succeeded => "succeeded".to_owned(),
            TheirStatus::Failed => "failed".to_owned(),
            TheirStatus::Other(s) => s.clone(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests;
