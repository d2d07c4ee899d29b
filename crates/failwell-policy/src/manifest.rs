//! The integration manifest: each operation's written answers to the four
//! questions every integration must answer before its first request, and
//! the rules that refuse combinations that would lose money.
//!
//! 1. What happens to a user action when the provider is unavailable
//!    ([`OnUnavailable`])?
//! 2. How bad is a duplicate ([`Severity`])?
//! 3. How do we find out that we and the provider disagree ([`Reconcile`])?
//! 4. Who owns the retry ([`RetryOwner`])?
//!
//! And how a retry is made safe ([`KeyUse`]).
//!
//! [`Manifest::check`] is a pure function of the answers and what the
//! provider's configuration offers ([`Offers`]); it returns the resulting
//! behaviour ([`Effective`]) or the first rule the answers break
//! ([`Refusal`], with the fix).

use std::fmt;

/// Question 1: what a user action meets while the provider is unavailable
/// (breaker open, bulkhead full).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnUnavailable {
    /// Refuse at once (503 with `Retry-After`); nothing is recorded.
    Reject,
    /// Accept (202) and deliver from the outbox when the provider is back.
    Queue,
    /// Answer reads from a last-known-good cache, marked stale; anything
    /// else is rejected.
    Degrade,
}

/// Question 2: how bad a duplicate is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Money moves twice.
    Money,
    /// Goods ship twice.
    Goods,
    /// A message is sent twice.
    Message,
    /// Nothing happens twice (reads, idempotent by nature).
    Harmless,
}

/// Question 3: how failwell finds out that it and the provider disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reconcile {
    /// Look the effect up by the provider's id once known (confirms a known
    /// effect; cannot find one whose outcome is unknown).
    StatusLookup,
    /// List the provider's records by our reference (finds an effect whose
    /// outcome is unknown).
    ListByReference,
    /// No way: disagreement goes unnoticed.
    None,
}

/// Question 4: which layer retries (retries happen at exactly one layer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryOwner {
    /// failwell's relay.
    Failwell,
    /// The provider retries on its side.
    Provider,
    /// The caller's own queue resubmits.
    Queue,
    /// A person decides.
    Human,
}

/// How a retry is made safe at the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyUse {
    /// An idempotency key header the provider deduplicates by.
    KeyHeader,
    /// None: a retry after an ambiguous outcome could act twice.
    None,
}

/// One operation's answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// Question 1.
    pub on_unavailable: OnUnavailable,
    /// Question 2.
    pub duplicate_severity: Severity,
    /// Question 3.
    pub reconcile: Reconcile,
    /// When the scheduled comparison runs (free text, shown by `failwell
    /// check`), if any.
    pub schedule: Option<String>,
    /// Question 4.
    pub retry_owner: RetryOwner,
    /// How retries are made safe.
    pub idempotency: KeyUse,
}

/// What the provider's configuration offers an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offers {
    /// The provider takes an idempotency key header.
    pub key_header: bool,
    /// A lookup by our reference is configured.
    pub lookup: bool,
    /// The provider's `max_attempts`.
    pub max_attempts: u32,
    /// The operation reads (HTTP `GET`): answered at once, never queued.
    pub read: bool,
}

/// The behaviour that follows from a manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effective {
    /// failwell's attempts (1 when another layer owns the retry).
    pub max_attempts: u32,
    /// Whether the provider key header is sent.
    pub send_key: bool,
    /// Whether an ambiguous outcome may be retried without a key (harmless
    /// operations only).
    pub retry_ambiguous: bool,
}

/// A rule a manifest breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The rule's name, e.g. `money-needs-reconciliation`.
    pub rule: &'static str,
    /// Why, as a sentence.
    pub why: String,
    /// How to fix it, as a sentence naming the keys.
    pub fix: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule {}: {} Fix: {}", self.rule, self.why, self.fix)
    }
}

impl Manifest {
    /// The safe answers for an operation of a provider that offers
    /// `offers`: a write is queued when the provider is unavailable and
    /// every duplicate of it treated as money; a read is rejected and
    /// harmless; reconciliation by reference when a lookup exists (else
    /// none), failwell owning retries, the key header when the provider takes
    /// one.
    pub fn default_for(offers: Offers) -> Self {
        let (on_unavailable, duplicate_severity) = if offers.read {
            (OnUnavailable::Reject, Severity::Harmless)
        } else {
            (OnUnavailable::Queue, Severity::Money)
        };
        Manifest {
            on_unavailable,
            duplicate_severity,
            reconcile: if offers.lookup { Reconcile::ListByReference } else { Reconcile::None },
            schedule: None,
            retry_owner: RetryOwner::Failwell,
            idempotency: if offers.key_header { KeyUse::KeyHeader } else { KeyUse::None },
        }
    }

    /// Checks the answers against what the provider offers; the rules, in
    /// order:
    /// - `read-cannot-queue`: a read with `on_unavailable = "queue"` (nobody
    ///   waits for the answer of a queued read);
    /// - `key-header-needs-provider-keys`: `idempotency = "key_header"` on a
    ///   provider configured without idempotency keys;
    /// - `reconcile-needs-lookup`: a reconciliation with no lookup configured;
    /// - `money-needs-reconciliation`: a `money` operation with
    ///   `reconcile = "none"`;
    /// - `no-safe-retry`: a `money` or `goods` operation without a key and
    ///   without lookup by reference, retried by failwell (more than one
    ///   attempt): after an ambiguous outcome nothing tells a retry from a
    ///   second charge.
    ///
    /// Then: another retry owner leaves failwell one attempt; a `harmless`
    /// operation may retry an ambiguous outcome without a key.
    pub fn check(&self, offers: Offers) -> Result<Effective, Refusal> {
        if offers.read && self.on_unavailable == OnUnavailable::Queue {
            return Err(Refusal {
                rule: "read-cannot-queue",
                why: "a read is answered at once; queued, its answer would reach nobody.".into(),
                fix: "on_unavailable = \"reject\" or \"degrade\" (with max_stale_ms).".into(),
            });
        }
        if self.idempotency == KeyUse::KeyHeader && !offers.key_header {
            return Err(Refusal {
                rule: "key-header-needs-provider-keys",
                why: "idempotency = \"key_header\", but the provider is configured without idempotency keys."
                    .into(),
                fix: "set idempotency_keys = true (and idempotency_header) on the provider, or idempotency = \"none\"."
                    .into(),
            });
        }
        if self.reconcile != Reconcile::None && !offers.lookup {
            return Err(Refusal {
                rule: "reconcile-needs-lookup",
                why: "disagreement.reconcile asks the provider, but the provider has no lookup configured.".into(),
                fix: "add [providers.NAME.lookup], or disagreement = { reconcile = \"none\" } for an operation \
                      that is not money."
                    .into(),
            });
        }
        let severity = self.duplicate_severity;
        if severity == Severity::Money && self.reconcile == Reconcile::None {
            return Err(Refusal {
                rule: "money-needs-reconciliation",
                why: "a money operation must have a way to find out that failwell and the provider disagree."
                    .into(),
                fix: if offers.lookup {
                    "disagreement = { reconcile = \"list_by_reference\" } (the provider has a lookup).".into()
                } else {
                    "add [providers.NAME.lookup] and disagreement = { reconcile = \"list_by_reference\" }."
                        .into()
                },
            });
        }
        let retried = self.retry_owner == RetryOwner::Failwell && offers.max_attempts > 1;
        if matches!(severity, Severity::Money | Severity::Goods)
            && self.idempotency == KeyUse::None
            && self.reconcile != Reconcile::ListByReference
            && retried
        {
            return Err(Refusal {
                rule: "no-safe-retry",
                why: format!(
                    "a {} operation without an idempotency key and without lookup by reference cannot be retried \
                     after an ambiguous outcome: nothing tells a retry from a second effect.",
                    severity.as_str()
                ),
                fix: "set max_attempts = 1 or retry_owner = \"human\", or idempotency = \"key_header\", or \
                      disagreement = { reconcile = \"list_by_reference\" }."
                    .into(),
            });
        }
        Ok(Effective {
            max_attempts: if self.retry_owner == RetryOwner::Failwell { offers.max_attempts } else { 1 },
            send_key: self.idempotency == KeyUse::KeyHeader,
            retry_ambiguous: severity == Severity::Harmless,
        })
    }
}

/// One of the manifest's answers: its configuration spellings.
pub trait Answer: Copy + 'static {
    /// Every answer, in the order the documentation lists them.
    const ALL: &'static [Self];
    /// The configuration spelling, e.g. `"list_by_reference"`.
    fn as_str(&self) -> &'static str;
    /// The answer spelled `name`, if any.
    fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|a| a.as_str() == name)
    }
}

/// Implements [`Answer`] from the variants and their spellings.
macro_rules! answers {
    ($($ty:ident { $($variant:ident => $name:literal),+ $(,)? })+) => {$(
        impl Answer for $ty {
            const ALL: &'static [Self] = &[$(Self::$variant),+];
            fn as_str(&self) -> &'static str {
                match self {
                    $(Self::$variant => $name),+
                }
            }
        }
    )+};
}

answers! {
    OnUnavailable { Reject => "reject", Queue => "queue", Degrade => "degrade" }
    Severity { Money => "money", Goods => "goods", Message => "message", Harmless => "harmless" }
    Reconcile { StatusLookup => "status_lookup", ListByReference => "list_by_reference", None => "none" }
    RetryOwner { Failwell => "failwell", Provider => "provider", Queue => "queue", Human => "human" }
    KeyUse { KeyHeader => "key_header", None => "none" }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: Offers = Offers { key_header: true, lookup: true, max_attempts: 8, read: false };

    fn manifest(f: impl FnOnce(&mut Manifest)) -> Manifest {
        let mut m = Manifest::default_for(FULL);
        f(&mut m);
        m
    }

    #[test]
    fn every_refusal_with_the_answers_that_trigger_it() {
        let bare = Offers { key_header: false, lookup: false, max_attempts: 8, read: false };
        let read = Offers { read: true, ..FULL };
        let cases: [(Manifest, Offers, &str); 7] = [
            (manifest(|m| m.on_unavailable = OnUnavailable::Queue), read, "read-cannot-queue"),
            (manifest(|_| {}), bare, "key-header-needs-provider-keys"),
            (
                manifest(|m| m.idempotency = KeyUse::None),
                Offers { key_header: true, lookup: false, max_attempts: 8, read: false },
                "reconcile-needs-lookup",
            ),
            (Manifest::default_for(bare), bare, "money-needs-reconciliation"),
            (
                manifest(|m| (m.idempotency, m.reconcile) = (KeyUse::None, Reconcile::StatusLookup)),
                FULL,
                "no-safe-retry",
            ),
            (
                manifest(|m| {
                    (m.idempotency, m.reconcile, m.duplicate_severity) =
                        (KeyUse::None, Reconcile::None, Severity::Goods)
                }),
                FULL,
                "no-safe-retry",
            ),
            (manifest(|m| m.reconcile = Reconcile::None), FULL, "money-needs-reconciliation"),
        ];
        for (m, offers, rule) in cases {
            let refusal = m.check(offers).unwrap_err();
            assert_eq!(refusal.rule, rule, "{m:?}");
            assert!(refusal.fix.contains('='), "the fix names the keys: {refusal}");
        }
    }

    #[test]
    fn what_each_answer_allows() {
        let ok = |m: Manifest, offers| m.check(offers).unwrap();
        let full = ok(manifest(|_| {}), FULL);
        assert_eq!(full, Effective { max_attempts: 8, send_key: true, retry_ambiguous: false });
        // A read's safe answers: rejected when unavailable, harmless.
        let read = Offers { read: true, ..FULL };
        let reads = Manifest::default_for(read);
        assert_eq!(
            (reads.on_unavailable, reads.duplicate_severity),
            (OnUnavailable::Reject, Severity::Harmless)
        );
        assert!(ok(reads, read).retry_ambiguous);
        // No key, but a lookup by reference tells a retry from a second charge.
        let by_reference = ok(manifest(|m| m.idempotency = KeyUse::None), FULL);
        assert_eq!((by_reference.max_attempts, by_reference.send_key), (8, false));
        // No key and no lookup: a single attempt, or another layer retries.
        let single = Offers { max_attempts: 1, ..FULL };
        let no_key =
            |m: &mut Manifest| (m.idempotency, m.reconcile) = (KeyUse::None, Reconcile::StatusLookup);
        assert_eq!(ok(manifest(no_key), single).max_attempts, 1);
        let human = ok(
            manifest(|m| {
                no_key(m);
                m.retry_owner = RetryOwner::Human;
            }),
            FULL,
        );
        assert_eq!(human.max_attempts, 1, "another layer owns the retry: failwell makes one attempt");
        // Harmless operations retry freely, even ambiguous outcomes without a key.
        let read = ok(
            manifest(|m| {
                (m.duplicate_severity, m.idempotency, m.reconcile) =
                    (Severity::Harmless, KeyUse::None, Reconcile::None)
            }),
            Offers { key_header: false, lookup: false, max_attempts: 5, read: false },
        );
        assert_eq!(read, Effective { max_attempts: 5, send_key: false, retry_ambiguous: true });
        // A message without reconciliation is allowed (not money).
        let message =
            manifest(|m| (m.duplicate_severity, m.reconcile) = (Severity::Message, Reconcile::None));
        assert!(message.check(FULL).is_ok());
    }
}
