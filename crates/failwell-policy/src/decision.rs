//! What to do after an attempt: the retry decision as a pure function.
//!
//! [`decide`] takes the attempt's [`Classification`], the operation's
//! history so far and the provider's policies, and returns one
//! [`Decision`]. It owns the rules of DESIGN promises 1 and 5: bounded
//! attempts, backoff with jitter, `Retry-After` honoured and capped, an
//! overall deadline, and ambiguous writes retried only under a key the
//! provider still honours. Carrying the decision out (scheduling,
//! recording) is the relay's job.

use std::time::Duration;

use rand::Rng;

use crate::{Backoff, Classification, IdempotencyPolicy};

/// Invalid retry policy parameters.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RetryPolicyError {
    /// `max_attempts` was zero.
    #[error("max_attempts must be at least 1")]
    ZeroAttempts,
    /// `deadline` was zero.
    #[error("deadline must be greater than 0 ms")]
    ZeroDeadline,
}

/// Bounds on the attempts of one operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: u32,
    backoff: Backoff,
    deadline: Duration,
    max_retry_after: Duration,
}

impl RetryPolicy {
    /// Validates and builds a policy: at most `max_attempts` attempts (≥ 1,
    /// the first included), delays from `backoff`, no attempt scheduled later
    /// than `deadline` after the operation was created, and a provider's
    /// `Retry-After` honoured up to `max_retry_after` (a longer one ends the
    /// retries: failwell never retries earlier than the provider asked).
    pub fn try_new(
        max_attempts: u32,
        backoff: Backoff,
        deadline: Duration,
        max_retry_after: Duration,
    ) -> Result<Self, RetryPolicyError> {
        if max_attempts == 0 {
            return Err(RetryPolicyError::ZeroAttempts);
        }
        if deadline.is_zero() {
            return Err(RetryPolicyError::ZeroDeadline);
        }
        Ok(Self { max_attempts, backoff, deadline, max_retry_after })
    }

    /// The maximum number of attempts, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The same policy with `max_attempts` attempts (at least 1).
    pub fn with_max_attempts(&self, max_attempts: u32) -> Self {
        Self { max_attempts: max_attempts.max(1), ..self.clone() }
    }

    /// The longest `Retry-After` honoured.
    pub fn max_retry_after(&self) -> Duration {
        self.max_retry_after
    }

    /// The backoff between attempts.
    pub fn backoff(&self) -> &Backoff {
        &self.backoff
    }

    /// The deadline across all attempts, counted from the operation's creation.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }
}

/// The history of an operation at the moment its latest attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempted {
    /// Attempts made so far, the failed one included (≥ 1).
    pub attempts: u32,
    /// Time since the operation was created.
    pub age: Duration,
    /// Time since the current idempotency key was first sent.
    pub key_age: Duration,
    /// The delay chosen before the previous attempt (zero before the first).
    pub previous_delay: Duration,
    /// An earlier attempt under the current key may have taken effect
    /// (ambiguous or interrupted), whatever the latest one says.
    pub effect_possible: bool,
}

/// What the relay does next with an operation whose attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Try again, with the same idempotency key, after `delay`.
    Retry {
        /// How long to wait, `Retry-After` included.
        delay: Duration,
    },
    /// The provider refused for good: the operation has failed.
    Fail,
    /// The outcome is unknown and may not be retried blindly: hand the
    /// operation to reconciliation (status lookup).
    Unknown {
        /// Why no retry: a stable, human-readable phrase.
        reason: &'static str,
    },
    /// Nothing more will be tried automatically: park the message as a
    /// dead letter for a human.
    DeadLetter {
        /// Why: a stable, human-readable phrase.
        reason: &'static str,
    },
}

/// Decides what follows a failed attempt. `rng` feeds the backoff jitter.
///
/// Rules, in order: permanent → [`Decision::Fail`]; out of attempts,
/// past the deadline, or a `Retry-After` above the cap → give up
/// ([`Decision::DeadLetter`] when no attempt can have acted,
/// [`Decision::Unknown`] when this one or an earlier one may have); ambiguous with no idempotency
/// key the provider will still honour at the retry's time →
/// [`Decision::Unknown`]; otherwise [`Decision::Retry`] after
/// `max(backoff, Retry-After)`.
pub fn decide(
    policy: &RetryPolicy,
    idempotency: &IdempotencyPolicy,
    classification: Classification,
    attempted: Attempted,
    rng: &mut impl Rng,
) -> Decision {
    let retry_after = match classification {
        Classification::Permanent => return Decision::Fail,
        Classification::Retryable { retry_after } => retry_after,
        Classification::Ambiguous => None,
    };
    // Giving up is `failed` only when no attempt can have acted.
    let give_up = |reason| {
        if classification == Classification::Ambiguous || attempted.effect_possible {
            Decision::Unknown { reason }
        } else {
            Decision::DeadLetter { reason }
        }
    };
    if attempted.attempts >= policy.max_attempts {
        return give_up("attempts exhausted");
    }
    let Some(delay) = retry_delay(
        &policy.backoff,
        attempted.attempts,
        attempted.previous_delay,
        retry_after,
        policy.max_retry_after,
        rng,
    ) else {
        return give_up("Retry-After exceeds max_retry_after");
    };
    if attempted.age.saturating_add(delay) >= policy.deadline {
        return give_up("deadline exceeded");
    }
    if classification == Classification::Ambiguous && !idempotency.key_honoured(attempted.key_age, delay) {
        return Decision::Unknown {
            reason: if idempotency.header.is_some() {
                "idempotency key expires before the retry"
            } else {
                "no idempotency key is sent for this operation"
            },
        };
    }
    Decision::Retry { delay }
}

/// The wait before the retry that follows failed attempt number `attempts`
/// (1-based): the backoff for retry `attempts - 1`, or the provider's
/// `Retry-After` if that is longer (never retry earlier than the provider
/// asked). `None` when the `Retry-After` exceeds `max_retry_after`: then
/// there is no retry at all, rather than one that comes too early.
pub(crate) fn retry_delay(
    backoff: &Backoff,
    attempts: u32,
    previous_delay: Duration,
    retry_after: Option<Duration>,
    max_retry_after: Duration,
    rng: &mut impl Rng,
) -> Option<Duration> {
    if retry_after.is_some_and(|wait| wait > max_retry_after) {
        return None;
    }
    let backoff = backoff.delay(attempts.saturating_sub(1), previous_delay, rng);
    Some(retry_after.map_or(backoff, |wait| wait.max(backoff)))
}

/// An operation whose attempt is due, at the moment it was claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Due {
    /// Attempts counted so far, the due one included (≥ 1).
    pub attempts: u32,
    /// The previous attempt's worker stopped before recording a result: that
    /// attempt may have reached the provider.
    pub interrupted: bool,
    /// Time since the operation was created.
    pub age: Duration,
    /// Time since the current idempotency key was first sent.
    pub key_age: Duration,
}

/// Whether a due attempt may be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Send it, with at most `budget` for the whole attempt (the time left
    /// before the deadline).
    Send {
        /// Time left before the deadline.
        budget: Duration,
    },
    /// Do not send; an earlier attempt may have taken effect, so a status
    /// lookup decides.
    Unknown {
        /// Short kind for history and metrics, e.g. `key_expired`.
        kind: &'static str,
        /// Why, as a sentence.
        reason: &'static str,
    },
    /// Do not send, and give up: nothing was sent before.
    DeadLetter {
        /// Short kind, e.g. `deadline`.
        kind: &'static str,
        /// Why.
        reason: &'static str,
    },
}

/// Decides whether a due attempt may go out, before anything is sent.
///
/// Rules, in order: an interrupted attempt at a provider without
/// idempotency keys is never resent (lookup first); a resend under a key the
/// provider no longer honours is never made (the relay may have been down,
/// or a `Retry-After` may have outlasted the key); past the deadline nothing
/// is sent (unknown if something may have been sent before, else a dead
/// letter); otherwise send, within the time left.
pub fn admit(policy: &RetryPolicy, idempotency: &IdempotencyPolicy, due: Due) -> Admission {
    let sent_before = due.attempts > 1 || due.interrupted;
    if due.interrupted && idempotency.header.is_none() {
        return Admission::Unknown {
            kind: "interrupted",
            reason: "an interrupted attempt may have reached a provider without idempotency keys",
        };
    }
    if sent_before && idempotency.header.is_some() && !idempotency.key_honoured(due.key_age, Duration::ZERO) {
        return Admission::Unknown {
            kind: "key_expired",
            reason: "the idempotency key expired before the retry could be sent",
        };
    }
    let budget = policy.deadline.saturating_sub(due.age);
    if budget.is_zero() {
        return if sent_before {
            Admission::Unknown { kind: "deadline", reason: "deadline exceeded" }
        } else {
            Admission::DeadLetter { kind: "deadline", reason: "deadline exceeded before the first attempt" }
        };
    }
    Admission::Send { budget }
}

/// A status lookup found no record of an operation whose outcome was unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotFound {
    /// Provider calls made so far.
    pub attempts: u32,
    /// Time since the operation was created.
    pub age: Duration,
    /// Time since the current idempotency key was first sent.
    pub key_age: Duration,
    /// Earlier lookups in a row that found nothing.
    pub misses: u32,
    /// A call under the current key may have taken effect (and may still be
    /// in flight at the provider).
    pub effect_possible: bool,
}

/// What follows a lookup that found nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterNotFound {
    /// Deliver again under the same key: the provider still honours it, so
    /// even a call still in flight there cannot take effect twice.
    ResendSameKey,
    /// Look once more later: without a live key, a call still in flight at
    /// the provider could commit after this lookup.
    Confirm,
    /// Deliver again under the next key group (a second lookup confirmed).
    ResendNewKey,
    /// Out of attempts or time (and, if a call may have acted, confirmed by a
    /// second lookup): give up for a human.
    DeadLetter,
}

/// Decides what follows a lookup that found nothing (DESIGN promise 1: an
/// ambiguous write is retried only under the same key while the provider
/// honours it, or after a status query says it did not happen — here, two
/// queries in a row when no live key protects the resend).
///
/// A miss is confirmed by a second lookup before anything final happens to an
/// operation whose call may have acted: before a resend without a live key,
/// and before giving up (a call still in flight at the provider may commit
/// late). The window is the provider's `reconcile_after`: set it to cover how
/// long the provider may keep working on a request after the client gave up.
pub fn after_not_found(
    policy: &RetryPolicy,
    idempotency: &IdempotencyPolicy,
    seen: NotFound,
) -> AfterNotFound {
    let spent = seen.attempts >= policy.max_attempts || seen.age >= policy.deadline;
    if spent && seen.effect_possible && seen.misses == 0 {
        AfterNotFound::Confirm
    } else if spent {
        AfterNotFound::DeadLetter
    } else if idempotency.key_honoured(seen.key_age, Duration::ZERO) {
        AfterNotFound::ResendSameKey
    } else if seen.misses == 0 {
        AfterNotFound::Confirm
    } else {
        AfterNotFound::ResendNewKey
    }
}

#[cfg(test)]
mod tests;
