//! The three outcomes of a call to another system (DESIGN: "three-outcome
//! model everywhere"): it happened, it did not, or we do not know yet.

use std::fmt;

/// The outcome of an operation or of one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The provider acted (2xx, or a status lookup found the effect).
    Succeeded,
    /// The provider certainly did not act, or refused for good.
    Failed,
    /// The provider may or may not have acted: timeout or reset after the
    /// request was sent, an ambiguous status. Resolved by reconciliation.
    Unknown,
}

impl Outcome {
    /// The stable lower-case name used in SQL, JSON and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
