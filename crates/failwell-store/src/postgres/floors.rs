//! Where a claim starts reading each provider's due messages
//! ([`ClaimFloors`]).
//!
//! A delivered message leaves its entry in the due messages' index
//! (`outbox_provider_due`, whose rows are `state = 'pending'`) until
//! `VACUUM` removes it: the update to `done` writes a new row version that
//! the partial index does not hold, and the old version's entry stays. A
//! claim reads the index from its first entry, so it walked past every
//! message delivered since the last `VACUUM` (killed entries, skipped one
//! by one) and past every message still leased (each one read from the
//! table to see its lease). Measured with 150,000 delivered messages and
//! 256 leased ones ahead of the due ones: 599 pages and 0.96 ms for a claim
//! of 128, where the messages themselves take a few pages. That cost grew
//! with every message delivered, so a drain slowed as it went.
//!
//! A claim that took as many messages as it asked for says where the next
//! one can start: after the last message it took of each provider, in the
//! index's order `(available_at_ms, id)`. Every due message before that
//! point was taken by that claim, or is leased, or was locked by another
//! claim at the time. What can become due there later:
//! - a message whose lease expires (its process stopped mid-delivery);
//! - a message committed after the claim with an earlier key (an
//!   application transaction that was still open, see
//!   `a_lower_id_committed_later_is_never_skipped`);
//! - a result that moved a message back to `pending` with a time that sorts
//!   before the floor (a retry or a deferral computed at the same
//!   millisecond);
//! - the next message of an ordering key, once the one before it is done
//!   or dead.
//!
//! So a floor is kept for at most [`FULL_SCAN_EVERY_MS`] of the relay's
//! clock after the claim that last read the provider's messages from the
//! start, and a claim that comes back with fewer messages than it asked
//! for (it reached the end of what is due) drops the floors of its
//! providers: the next claim reads from the start again. A message of an
//! ordering key that leaves `pending` moves its provider's floor back to
//! it: the next message of its key is due, and sorts after it (unless it
//! was scheduled earlier than the one before it was last due: then within
//! the second). Nothing is
//! skipped; a message that became due behind a floor is claimed at most
//! [`FULL_SCAN_EVERY_MS`] later, and only while a backlog keeps every claim
//! full. (A floor is recorded as the claim's statement returns, before its
//! commit: a claim that is then rolled back, or one that races a batch of
//! results freeing an ordering key, leaves a floor past messages still due,
//! for that second at most.)

use std::collections::HashMap;
use std::sync::Mutex;

/// How long (ms, on the clock the relay passes to its claims) a floor is
/// used before a claim reads a provider's due messages from the start.
pub(super) const FULL_SCAN_EVERY_MS: i64 = 1_000;

/// The start of the index range each provider's next claim reads, in this
/// process (see the module docs). Shared by the store's clones.
#[derive(Debug, Default)]
pub(super) struct ClaimFloors {
    by_provider: Mutex<HashMap<String, Floor>>,
}

/// A provider's floor: claims read the due messages after `after`
/// (`(available_at_ms, id)`), until [`FULL_SCAN_EVERY_MS`] after
/// `read_from_start_ms`, the time of the last claim that read them from
/// the start.
#[derive(Clone, Copy, Debug)]
struct Floor {
    after: (i64, i64),
    read_from_start_ms: i64,
}

/// The key before every message: a claim from it reads from the start.
const START: (i64, i64) = (i64::MIN, i64::MIN);

impl ClaimFloors {
    /// Where a claim at `now_ms` reads each of `providers` from: one
    /// `(available_at_ms, id)` per provider, in order, as two arrays; the
    /// messages claimed are those after it. [`START`] for a provider with
    /// no floor, or whose floor is older than [`FULL_SCAN_EVERY_MS`] (or
    /// from a later time: the clock went back).
    pub(super) fn starts(&self, now_ms: i64, providers: &[String]) -> (Vec<i64>, Vec<i64>) {
        let floors = self.by_provider.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        providers
            .iter()
            .map(|p| match floors.get(p) {
                Some(f) if (0..FULL_SCAN_EVERY_MS).contains(&(now_ms - f.read_from_start_ms)) => f.after,
                _ => START,
            })
            .unzip()
    }

    /// Moves `provider`'s floor back to `key` (`(available_at_ms, id)`) if
    /// it is past it: a message of an ordering key left `pending` there,
    /// and the next one of its key, now due, sorts after it.
    pub(super) fn lower(&self, provider: &str, key: (i64, i64)) {
        let mut floors = self.by_provider.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(floor) = floors.get_mut(provider) {
            floor.after = floor.after.min(key);
        }
    }

    /// Records what a claim at `now_ms` of up to `limit` messages of
    /// `providers`, started from `starts` (what [`Self::starts`] gave),
    /// took: `taken` as `(provider, available_at_ms, id)`. A claim that took
    /// fewer than `limit` drops its providers' floors; a full one puts each
    /// provider's floor after the last message it took of it (and drops the
    /// floor of a provider it took none of).
    pub(super) fn record<'a>(
        &self,
        now_ms: i64,
        providers: &[String],
        starts: &[(i64, i64)],
        limit: u32,
        taken: impl ExactSizeIterator<Item = (&'a str, i64, i64)>,
    ) {
        let mut floors = self.by_provider.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if taken.len() < limit as usize {
            for p in providers {
                floors.remove(p);
            }
            return;
        }
        let mut last: HashMap<&str, (i64, i64)> = HashMap::new();
        for (provider, at, id) in taken {
            let key = last.entry(provider).or_insert((at, id));
            *key = (*key).max((at, id));
        }
        for (provider, start) in providers.iter().zip(starts) {
            let Some(&after) = last.get(provider.as_str()) else {
                floors.remove(provider);
                continue;
            };
            let read_from_start_ms = match floors.get(provider) {
                Some(f) if *start != START => f.read_from_start_ms,
                _ => now_ms,
            };
            floors.insert(provider.clone(), Floor { after, read_from_start_ms });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn starts(f: &ClaimFloors, now_ms: i64, providers: &[String]) -> Vec<(i64, i64)> {
        let (at, id) = f.starts(now_ms, providers);
        at.into_iter().zip(id).collect()
    }

    #[test]
    fn a_full_claim_starts_the_next_after_the_last_message_it_took_of_each_provider() {
        let f = ClaimFloors::default();
        let p = names(&["a", "b", "c"]);
        assert_eq!(starts(&f, 10, &p), vec![START; 3]);
        let taken = [("a", 5, 1), ("b", 5, 2), ("a", 5, 3), ("a", 4, 9)];
        f.record(10, &p, &[START; 3], 4, taken.into_iter());
        assert_eq!(starts(&f, 20, &p), vec![(5, 3), (5, 2), START]);
    }

    #[test]
    fn a_claim_that_ran_short_drops_its_providers_floors() {
        let f = ClaimFloors::default();
        let p = names(&["a", "b"]);
        f.record(10, &p, &[START; 2], 2, [("a", 1, 1), ("b", 1, 2)].into_iter());
        f.record(11, &names(&["a"]), &[(1, 1)], 2, [("a", 1, 3)].into_iter());
        assert_eq!(starts(&f, 12, &p), vec![START, (1, 2)]);
    }

    #[test]
    fn a_message_of_an_ordering_key_leaving_pending_moves_its_providers_floor_back_to_it() {
        let f = ClaimFloors::default();
        let p = names(&["a", "b"]);
        f.record(10, &p, &[START; 2], 2, [("a", 5, 7), ("b", 5, 8)].into_iter());
        f.lower("a", (3, 2));
        f.lower("a", (4, 1));
        f.lower("b", (6, 1));
        f.lower("c", (1, 1));
        assert_eq!(starts(&f, 11, &names(&["a", "b", "c"])), vec![(3, 2), (5, 8), START]);
    }

    #[test]
    fn a_floor_is_read_from_the_start_again_a_second_after_the_last_full_read() {
        let f = ClaimFloors::default();
        let p = names(&["a"]);
        f.record(1_000, &p, &[START], 1, [("a", 1, 1)].into_iter());
        let from = starts(&f, 1_500, &p)[0];
        assert_eq!(from, (1, 1));
        // A claim from the floor keeps the time of the last full read.
        f.record(1_500, &p, &[from], 1, [("a", 1, 2)].into_iter());
        assert_eq!(starts(&f, 1_999, &p), vec![(1, 2)]);
        assert_eq!(starts(&f, 2_000, &p), vec![START]);
        assert_eq!(starts(&f, 999, &p), vec![START], "a clock that went back reads from the start");
        // A full read restarts the second.
        f.record(2_000, &p, &[START], 1, [("a", 1, 5)].into_iter());
        assert_eq!(starts(&f, 2_999, &p), vec![(1, 5)]);
    }
}
