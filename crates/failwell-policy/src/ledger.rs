//! What a provider's event does to our record of an operation: the
//! monotonic state machine of the webhook inbox, as a pure function.
//!
//! Providers deliver events at least once and in any order, so an event
//! carries a **version** (the provider's creation time or object version,
//! configured per integration) and only an event newer than the last one
//! applied to an operation may change it. Versions can tie (Stripe's
//! `created` is in whole seconds, and `charge.pending` and
//! `charge.succeeded` often share one): at a tie, an event that settles an
//! operation still open wins, anything else is stale (repeated deliveries of
//! one event never get here: the inbox keeps each event id once).
//!
//! A settled operation (`succeeded` or `failed`) never goes back: an event
//! reporting the object still in progress is recorded but changes nothing.
//! A newer settling event wins over an older settled state that came from an
//! event (the provider knows best: a payment can fail after it looked done)
//! and resolves an operation whose outcome failwell did not know. But when
//! failwell's own call settled the operation and no event has been applied
//! since, an event saying the opposite cannot be placed in time against the
//! provider's answer: it is a [`EventEffect::Conflict`], never applied as
//! such; the store puts the operation back to `unknown` so that a status
//! lookup decides.

use crate::Outcome;

/// What an event reports about the provider's object behind an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reported {
    /// Still in progress at the provider (e.g. `charge.pending`).
    InProgress,
    /// Settled: the provider acted, or certainly did not
    /// ([`Outcome::Succeeded`] or [`Outcome::Failed`]; never `Unknown`).
    Settled(Outcome),
}

/// Our operation as an event finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ledger {
    /// `Some(Succeeded | Failed)` once the operation is settled, `None`
    /// while it is pending or unknown.
    pub settled: Option<Outcome>,
    /// The version of the newest event applied so far, if any.
    pub version: Option<i64>,
}

/// What an event does to an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventEffect {
    /// Settle the operation with this outcome and remember the version.
    Settle(Outcome),
    /// Newer, but reports the object in progress while the operation is not
    /// settled: remember the version, change nothing else.
    Note,
    /// Not newer than the version already applied (a duplicate or a late
    /// older event): nothing changes.
    Stale,
    /// Newer, but reports the object in progress while the operation is
    /// settled: nothing changes (a settled operation never goes back).
    WouldRegress,
    /// Contradicts the outcome the provider gave failwell's own call, with
    /// no event applied since to order them: nothing changes.
    Conflict,
}

impl EventEffect {
    /// A stable phrase for the event's history, e.g. `settled: succeeded`.
    pub fn describe(&self) -> String {
        match self {
            Self::Settle(outcome) => format!("settled: {outcome}"),
            Self::Note => "noted: in progress at the provider".into(),
            Self::Stale => "ignored: not newer than the event already applied".into(),
            Self::WouldRegress => "ignored: the operation is settled and never goes back".into(),
            Self::Conflict => {
                "conflict: contradicts the provider's answer to our call; left for reconciliation".into()
            }
        }
    }
}

/// Decides what an event of `version` reporting `reported` does to an
/// operation in state `ledger` (see the module docs for the rules).
pub fn apply_event(ledger: Ledger, reported: Reported, version: i64) -> EventEffect {
    let settles = matches!(reported, Reported::Settled(Outcome::Succeeded | Outcome::Failed));
    match ledger.version {
        Some(applied) if applied > version => return EventEffect::Stale,
        Some(applied) if applied == version && !(settles && ledger.settled.is_none()) => {
            return EventEffect::Stale;
        }
        _ => {}
    }
    match (reported, ledger.settled) {
        (Reported::Settled(Outcome::Unknown), _) => EventEffect::Note,
        (Reported::Settled(outcome), Some(ours)) if ours != outcome && ledger.version.is_none() => {
            EventEffect::Conflict
        }
        (Reported::Settled(outcome), _) => EventEffect::Settle(outcome),
        (Reported::InProgress, Some(_)) => EventEffect::WouldRegress,
        (Reported::InProgress, None) => EventEffect::Note,
    }
}

/// Why a webhook event reports nothing the ledger can apply: what its
/// integration's mapping (`[webhooks.NAME.ledger]`) looked for and did not
/// find. Recorded in the event's history as "not applicable".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotApplicable {
    /// The body is not JSON, or a field could not be read (the reader's
    /// own words).
    #[error("not applicable: {0}")]
    Unreadable(String),
    /// Nothing at the JSON pointer.
    #[error("not applicable: nothing at {0:?}")]
    Missing(String),
    /// The value at the JSON pointer is not a string.
    #[error("not applicable: {0:?} is not a string")]
    NotText(String),
    /// The event's type is not one the mapping applies.
    #[error("not applicable: event type {0:?} is not in types")]
    OtherType(String),
    /// The reference is neither a string nor an integer.
    #[error("not applicable: {0:?} is not a string or an integer")]
    Reference(String),
    /// The version is neither an integer nor a string of digits.
    #[error("not applicable: {0:?} is not an integer version")]
    Version(String),
    /// The status is in none of the mapping's lists.
    #[error("not applicable: status {0:?} is not mapped")]
    Status(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::{Failed, Succeeded};

    const OPEN: Ledger = Ledger { settled: None, version: None };

    #[test]
    fn the_rules_as_a_table() {
        let at = |settled, version| Ledger { settled, version };
        let settled = Reported::Settled;
        let cases = [
            // An open (pending or unknown) operation is settled by a settling event.
            (OPEN, settled(Succeeded), 1, EventEffect::Settle(Succeeded)),
            (OPEN, settled(Failed), 1, EventEffect::Settle(Failed)),
            (OPEN, Reported::InProgress, 1, EventEffect::Note),
            // Versions: only newer events count...
            (at(None, Some(5)), settled(Succeeded), 4, EventEffect::Stale),
            (at(None, Some(5)), Reported::InProgress, 5, EventEffect::Stale),
            // ...but at a tie, settling an open operation wins (pending and
            // succeeded in the same second).
            (at(None, Some(5)), settled(Succeeded), 5, EventEffect::Settle(Succeeded)),
            (at(Some(Succeeded), Some(5)), settled(Failed), 5, EventEffect::Stale),
            (at(None, Some(5)), settled(Succeeded), 6, EventEffect::Settle(Succeeded)),
            // Never back to in progress, whatever the version.
            (at(Some(Succeeded), Some(2)), Reported::InProgress, 1, EventEffect::Stale),
            (at(Some(Succeeded), Some(2)), Reported::InProgress, 3, EventEffect::WouldRegress),
            (at(Some(Failed), None), Reported::InProgress, 3, EventEffect::WouldRegress),
            // Settled by our own call (no event applied yet): an event confirms
            // it, but cannot be ordered against it to contradict it.
            (at(Some(Succeeded), None), settled(Succeeded), 1, EventEffect::Settle(Succeeded)),
            (at(Some(Succeeded), None), settled(Failed), 1, EventEffect::Conflict),
            // Once an event is applied, newer events order against it.
            (at(Some(Succeeded), Some(1)), settled(Failed), 2, EventEffect::Settle(Failed)),
            // An event cannot report "unknown": it is only noted.
            (OPEN, settled(Outcome::Unknown), 1, EventEffect::Note),
        ];
        for (ledger, reported, version, expected) in cases {
            assert_eq!(
                apply_event(ledger, reported, version),
                expected,
                "{ledger:?} {reported:?} v{version}"
            );
        }
    }

    /// Whatever order a monotonic sequence of events arrives in (each
    /// possibly several times), the result is what its newest event says.
    #[test]
    fn any_delivery_order_ends_at_the_newest_event() {
        use rand::SeedableRng;
        use rand::seq::SliceRandom;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let events = [(Reported::InProgress, 1), (Reported::InProgress, 2), (Reported::Settled(Failed), 3)];
        for _ in 0..500 {
            let mut deliveries: Vec<_> = events.iter().chain(events.iter()).copied().collect();
            deliveries.shuffle(&mut rng);
            let mut ledger = OPEN;
            for (reported, version) in deliveries {
                match apply_event(ledger, reported, version) {
                    EventEffect::Settle(outcome) => {
                        ledger = Ledger { settled: Some(outcome), version: Some(version) }
                    }
                    EventEffect::Note => ledger.version = Some(version),
                    EventEffect::Stale | EventEffect::WouldRegress | EventEffect::Conflict => {}
                }
            }
            assert_eq!(ledger, Ledger { settled: Some(Failed), version: Some(3) });
        }
    }
}
