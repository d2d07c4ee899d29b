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
//! providers: the next claim reads from the start again. When the relay's
//! batch of results moves a message of an ordering key out of `pending`,
//! the next message of its key is pinned: every floor of its provider
//! stays before it until a claim of this process takes it (or for that
//! second). Nothing is skipped; a message that became due behind a floor
//! otherwise (a late commit, an expired lease, a message of a key whose
//! previous one was settled by an event, an operator or another process)
//! is claimed at most [`FULL_SCAN_EVERY_MS`] later, and only while a
//! backlog keeps every claim full. (A floor is recorded as the claim's
//! statement returns, before its commit: a claim that is then rolled back
//! leaves a floor past the messages it had taken, for that second at
//! most.)

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

/// How long (ms, on the clock the relay passes to its claims) a floor is
/// used before a claim reads a provider's due messages from the start.
pub(super) const FULL_SCAN_EVERY_MS: i64 = 1_000;

/// The start of the index range each provider's next claim reads, in this
/// process (see the module docs). Shared by the store's clones.
#[derive(Debug, Default)]
pub(super) struct ClaimFloors {
    inner: Mutex<Floors>,
}

#[derive(Debug, Default)]
struct Floors {
    by_provider: HashMap<String, Floor>,
    /// Per provider, messages of an ordering key that became due when the
    /// one before them left `pending` (`(available_at_ms, id)` → when, on
    /// the clock of that result): no floor passes them until a claim of
    /// this process takes them, or for [`FULL_SCAN_EVERY_MS`].
    pinned: HashMap<String, BTreeMap<(i64, i64), i64>>,
    /// Every pin `(when, provider, key)` in the order they were set, so
    /// that the old ones are let go without reading all of them.
    pin_order: VecDeque<(i64, String, (i64, i64))>,
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

/// Where one provider's claim reads from ([`ClaimFloors::starts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Start {
    /// The claim takes the messages after this `(available_at_ms, id)`.
    pub(super) after: (i64, i64),
    /// When the floor it came from was last read from the start; `None`
    /// when this claim reads from the start.
    read_from_start_ms: Option<i64>,
}

/// The key before every message: a claim from it reads from the start.
const START: (i64, i64) = (i64::MIN, i64::MIN);

/// Says whether a pin set at `at_ms` still holds at `now_ms`: less than
/// [`FULL_SCAN_EVERY_MS`] apart either way (a claim's clock can read a
/// little earlier than that of the result that set the pin).
fn recent(now_ms: i64, at_ms: i64) -> bool {
    now_ms.abs_diff(at_ms) < FULL_SCAN_EVERY_MS as u64
}

/// The key just before `key`: a claim from it takes `key` (ids are whole
/// numbers, so no key lies between).
fn just_before((at, id): (i64, i64)) -> (i64, i64) {
    (at, id.saturating_sub(1))
}

impl ClaimFloors {
    fn lock(&self) -> std::sync::MutexGuard<'_, Floors> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Where a claim at `now_ms` reads each of `providers` from, in order:
    /// the provider's floor, or the start for a provider with none, or
    /// whose floor is [`FULL_SCAN_EVERY_MS`] old (or from a later time: the
    /// clock went back).
    pub(super) fn starts(&self, now_ms: i64, providers: &[String]) -> Vec<Start> {
        let floors = self.lock();
        providers
            .iter()
            .map(|p| match floors.by_provider.get(p) {
                Some(f) if (0..FULL_SCAN_EVERY_MS).contains(&(now_ms - f.read_from_start_ms)) => {
                    Start { after: f.after, read_from_start_ms: Some(f.read_from_start_ms) }
                }
                _ => Start { after: START, read_from_start_ms: None },
            })
            .collect()
    }

    /// Notes that the message `key` (`(available_at_ms, id)`) of
    /// `provider` became due at `now_ms`, wherever the provider's floor is
    /// (the next message of an ordering key, once the one before it left
    /// `pending`): the floor moves back before it, and stays there until
    /// a claim takes it ([`Self::record`]).
    ///
    /// Pins are let go [`FULL_SCAN_EVERY_MS`] after they were set, oldest
    /// first, as pins are set and claims recorded ([`Floors::let_go`]).
    pub(super) fn pin(&self, provider: &str, key: (i64, i64), now_ms: i64) {
        let mut floors = self.lock();
        floors.let_go(now_ms);
        if let Some(floor) = floors.by_provider.get_mut(provider) {
            floor.after = floor.after.min(just_before(key));
        }
        floors.pinned.entry(provider.to_owned()).or_default().insert(key, now_ms);
        floors.pin_order.push_back((now_ms, provider.to_owned(), key));
    }

    /// Records what a claim at `now_ms` of up to `limit` messages of
    /// `providers`, started from `starts` (what [`Self::starts`] gave),
    /// took: `taken` as `(provider, available_at_ms, id)`. A claim that took
    /// fewer than `limit` drops its providers' floors; a full one puts each
    /// provider's floor after the last message it took of it (and drops the
    /// floor of a provider it took none of), but before any pinned message
    /// it did not take.
    pub(super) fn record<'a>(
        &self,
        now_ms: i64,
        providers: &[String],
        starts: &[Start],
        limit: u32,
        taken: impl ExactSizeIterator<Item = (&'a str, i64, i64)>,
    ) {
        let full = taken.len() >= limit as usize;
        let mut floors = self.lock();
        floors.let_go(now_ms);
        let mut last: HashMap<&str, (i64, i64)> = HashMap::new();
        for (provider, at, id) in taken {
            if let Some(pins) = floors.pinned.get_mut(provider) {
                pins.remove(&(at, id));
            }
            let key = last.entry(provider).or_insert((at, id));
            *key = (*key).max((at, id));
        }
        for (provider, start) in providers.iter().zip(starts) {
            let first_pin = floors.pinned.get(provider).and_then(|pins| pins.keys().next().copied());
            let after = match (full, last.get(provider.as_str())) {
                (true, Some(&after)) => first_pin.map_or(after, |pin| after.min(just_before(pin))),
                _ => {
                    floors.by_provider.remove(provider);
                    continue;
                }
            };
            let read_from_start_ms = start.read_from_start_ms.unwrap_or(now_ms);
            floors.by_provider.insert(provider.clone(), Floor { after, read_from_start_ms });
        }
    }
}

impl Floors {
    /// Lets go of the pins set [`FULL_SCAN_EVERY_MS`] or more before
    /// `now_ms` (or as long after: the clock went back), oldest first; a
    /// pin a claim has taken is already gone from `pinned`, and one set
    /// again later keeps its later time.
    fn let_go(&mut self, now_ms: i64) {
        while let Some((at_ms, provider, key)) = self.pin_order.front() {
            if recent(now_ms, *at_ms) {
                return;
            }
            if let Some(pins) = self.pinned.get_mut(provider) {
                if pins.get(key) == Some(at_ms) {
                    pins.remove(key);
                }
                if pins.is_empty() {
                    self.pinned.remove(provider);
                }
            }
            self.pin_order.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn afters(f: &ClaimFloors, now_ms: i64, providers: &[&str]) -> Vec<(i64, i64)> {
        f.starts(now_ms, &names(providers)).iter().map(|s| s.after).collect()
    }

    /// A claim at `now_ms` of `providers` that took `taken`, asking for
    /// `limit`, from where [`ClaimFloors::starts`] says.
    fn claim(f: &ClaimFloors, now_ms: i64, providers: &[&str], limit: u32, taken: &[(&str, i64, i64)]) {
        let providers = names(providers);
        let starts = f.starts(now_ms, &providers);
        f.record(now_ms, &providers, &starts, limit, taken.iter().copied());
    }

    #[test]
    fn a_full_claim_starts_the_next_after_the_last_message_it_took_of_each_provider() {
        let f = ClaimFloors::default();
        assert_eq!(afters(&f, 10, &["a", "b", "c"]), vec![START; 3]);
        claim(&f, 10, &["a", "b", "c"], 4, &[("a", 5, 1), ("b", 5, 2), ("a", 5, 3), ("a", 4, 9)]);
        assert_eq!(afters(&f, 20, &["a", "b", "c"]), vec![(5, 3), (5, 2), START]);
    }

    #[test]
    fn a_claim_that_ran_short_drops_its_providers_floors() {
        let f = ClaimFloors::default();
        claim(&f, 10, &["a", "b"], 2, &[("a", 1, 1), ("b", 1, 2)]);
        claim(&f, 11, &["a"], 2, &[("a", 1, 3)]);
        assert_eq!(afters(&f, 12, &["a", "b"]), vec![START, (1, 2)]);
    }

    #[test]
    fn no_floor_passes_a_pinned_message_until_a_claim_takes_it_or_a_second_has_passed() {
        let f = ClaimFloors::default();
        claim(&f, 10, &["a", "b"], 2, &[("a", 5, 7), ("b", 5, 8)]);
        f.pin("a", (3, 2), 11);
        f.pin("a", (4, 1), 11);
        f.pin("c", (1, 1), 11);
        assert_eq!(afters(&f, 12, &["a", "b", "c"]), vec![(3, 1), (5, 8), START]);
        // A full claim that did not see (3, 2) due (its snapshot was older).
        claim(&f, 12, &["a"], 2, &[("a", 6, 1), ("a", 6, 2)]);
        assert_eq!(afters(&f, 13, &["a"]), vec![(3, 1)]);
        claim(&f, 13, &["a"], 2, &[("a", 3, 2), ("a", 6, 3)]);
        assert_eq!(afters(&f, 14, &["a"]), vec![(4, 0)], "(4, 1) is still pinned");
        f.pin("a", (2, 9), 14);
        claim(&f, 1_014, &["a"], 1, &[("a", 7, 1)]);
        assert_eq!(afters(&f, 1_015, &["a"]), vec![(7, 1)], "pins a second old are let go");
    }

    #[test]
    fn a_pin_set_by_a_result_whose_clock_read_later_still_holds_a_claim_that_passed_it() {
        let f = ClaimFloors::default();
        claim(&f, 10, &["a"], 1, &[("a", 1, 1)]);
        let providers = names(&["a"]);
        let from = f.starts(999, &providers);
        f.pin("a", (1, 2), 1_000);
        f.record(999, &providers, &from, 1, [("a", 1, 3)].into_iter());
        assert_eq!(afters(&f, 1_001, &["a"]), vec![(1, 1)]);
    }

    #[test]
    fn old_pins_of_providers_never_claimed_are_let_go() {
        let f = ClaimFloors::default();
        for n in 0..100 {
            f.pin(&format!("p{n}"), (1, n), n);
        }
        f.pin("p1", (1, 1), 500);
        f.pin("last", (1, 1), 1_050);
        let floors = f.lock();
        // Set less than a second before 1,050 ms: p51 to p99, p1 again, last.
        assert_eq!(floors.pinned.len(), 49 + 2);
        assert!(floors.pinned.contains_key("p1") && !floors.pinned.contains_key("p2"));
        assert_eq!(floors.pin_order.len(), 49 + 2);
    }

    #[test]
    fn a_floor_is_read_from_the_start_again_a_second_after_the_last_full_read() {
        let f = ClaimFloors::default();
        claim(&f, 1_000, &["a"], 1, &[("a", 1, 1)]);
        assert_eq!(afters(&f, 1_500, &["a"]), vec![(1, 1)]);
        // A claim from the floor keeps the time of the last full read, even
        // when another claim dropped the floor meanwhile.
        let providers = names(&["a"]);
        let from = f.starts(1_500, &providers);
        claim(&f, 1_500, &["a"], 2, &[("a", 1, 2)]);
        f.record(1_500, &providers, &from, 1, [("a", 1, 3)].into_iter());
        assert_eq!(afters(&f, 1_999, &["a"]), vec![(1, 3)]);
        assert_eq!(afters(&f, 2_000, &["a"]), vec![START]);
        assert_eq!(afters(&f, 999, &["a"]), vec![START], "a clock that went back reads from the start");
        // A read from the start restarts the second.
        claim(&f, 2_000, &["a"], 1, &[("a", 1, 5)]);
        assert_eq!(afters(&f, 2_999, &["a"]), vec![(1, 5)]);
    }
}
