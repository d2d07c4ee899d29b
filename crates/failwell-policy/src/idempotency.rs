//! Idempotency keys: derived from the intent, never per attempt, never from a
//! clock (DESIGN promise 1), and the provider's key lifetime.

use std::time::Duration;

use sha2::{Digest, Sha256};

/// Derives the idempotency key sent to a provider for one intent.
///
/// The key is `fw_` followed by the first 32 hex digits (128 bits) of
/// SHA-256 over the length-prefixed `provider`, `operation` and `intent`
/// (the caller's idempotency key or business reference) and the attempt
/// `group`. The group starts at 0 and only moves on when a status lookup has
/// proved that every request sent under the previous key had no effect, so
/// every attempt of one intent carries the same key.
pub fn derive_key(provider: &str, operation: &str, intent: &str, group: u32) -> String {
    let mut hasher = Sha256::new();
    for part in [provider, operation, intent] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.update(group.to_be_bytes());
    let digest = hasher.finalize();
    format!("fw_{}", hex::encode(&digest[..16]))
}

/// How a provider honours idempotency keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyPolicy {
    /// The request header carrying the key (`Idempotency-Key` for Stripe), or
    /// `None` for a provider without idempotency keys: an ambiguous attempt is
    /// then never retried, only reconciled.
    pub header: Option<String>,
    /// How long the provider remembers a key (Stripe: 24 h) after its first use.
    pub key_ttl: Duration,
}

impl IdempotencyPolicy {
    /// A policy under which a retry is always safe, for the retry decisions
    /// only: a key the receiver honours for good (`header`, e.g. a Standard
    /// Webhooks `webhook-id` the application deduplicates by), or an
    /// operation whose duplicates are harmless (`header` names why). The
    /// header is not sent because of this policy.
    pub fn always_safe(header: &str) -> Self {
        Self { header: Some(header.to_owned()), key_ttl: Duration::MAX }
    }

    /// Whether a retry sent `delay` from now, under a key first used `key_age`
    /// ago, still reaches the provider while it honours the key. A safety
    /// margin of a tenth of the TTL (at most one hour) covers clock skew
    /// between us and the provider.
    pub fn key_honoured(&self, key_age: Duration, delay: Duration) -> bool {
        if self.header.is_none() {
            return false;
        }
        let margin = (self.key_ttl / 10).min(Duration::from_secs(3600));
        key_age.saturating_add(delay) < self.key_ttl.saturating_sub(margin)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn key_is_stable_and_separates_every_part() {
        let k = derive_key("payments", "charge", "order-1", 0);
        assert_eq!(k, derive_key("payments", "charge", "order-1", 0));
        assert!(k.starts_with("fw_") && k.len() == 35);
        assert_ne!(k, derive_key("payments", "charge", "order-1", 1));
        assert_ne!(k, derive_key("payments", "refund", "order-1", 0));
        // length prefixes keep ("ab","c") and ("a","bc") apart
        assert_ne!(derive_key("ab", "c", "x", 0), derive_key("a", "bc", "x", 0));
    }

    #[test]
    fn key_ttl_awareness() {
        let p =
            IdempotencyPolicy { header: Some("Idempotency-Key".into()), key_ttl: Duration::from_secs(100) };
        assert!(p.key_honoured(Duration::from_secs(10), Duration::from_secs(10)));
        // 90 s margin boundary: 100 s TTL minus 10 s margin
        assert!(!p.key_honoured(Duration::from_secs(85), Duration::from_secs(5)));
        let none = IdempotencyPolicy { header: None, key_ttl: Duration::from_secs(100) };
        assert!(!none.key_honoured(Duration::ZERO, Duration::ZERO));
    }
}
