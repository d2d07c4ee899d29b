//! The balance ledger's routes (`docs/LEDGER.md`): accounts
//! (`/v1/ledger/accounts`, in `accounts.rs`) and transfers
//! (`/v1/ledger/transfers`, in `transfers.rs`). Single transfers go through
//! the engine's group commit ([`failwell_engine::Transfers`]); a batch is
//! applied as sent, in one transaction.
//!
//! The rules (floors, holds, replays) are the store's and the policy's: a
//! handler only reads the request, calls, and turns the result into an
//! answer. A refusal writes nothing.

pub(crate) mod accounts;
pub(crate) mod transfers;

use super::problem::{Problem, ProblemType};

/// Items of a page, by default.
const DEFAULT_LIMIT: u32 = 100;
/// Items of a page, at most.
const MAX_LIMIT: u32 = 1000;

fn default_limit() -> u32 {
    DEFAULT_LIMIT
}

/// Checks a page's `limit` (1–[`MAX_LIMIT`]); 400 `invalid-query`.
fn check_limit(limit: u32) -> Result<u32, Problem> {
    if (1..=MAX_LIMIT).contains(&limit) {
        Ok(limit)
    } else {
        Err(Problem::new(ProblemType::InvalidQuery, format!("`limit` must be between 1 and {MAX_LIMIT}.")))
    }
}

/// Refuses ids that hold U+0000 (422 `invalid-body`): no account or
/// transfer has one, and PostgreSQL's text cannot hold it.
pub(crate) fn no_nul<'a>(ids: impl IntoIterator<Item = &'a str>) -> Result<(), Problem> {
    if ids.into_iter().any(|id| id.contains('\0')) {
        return Err(Problem::new(ProblemType::InvalidBody, "An id holds U+0000."));
    }
    Ok(())
}
