//! The pump over an in-memory queue, in paused time: how many claims run
//! at once, how many items are in hand, who polls, and that every item is
//! worked and recorded once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A queue of ids; a claim takes `CLAIM_MS`, a piece of work `WORK_MS`.
#[derive(Default)]
struct Ids {
    due: Mutex<VecDeque<i64>>,
    claims: AtomicUsize,
    claiming: AtomicUsize,
    most_claiming: AtomicUsize,
    working: AtomicUsize,
    most_working: AtomicUsize,
    recorded: Mutex<Vec<i64>>,
}

const CLAIM_MS: u64 = 10;
const WORK_MS: u64 = 5;

fn raise(most: &AtomicUsize, now: usize) {
    most.fetch_max(now, Ordering::SeqCst);
}

impl Queue for Ids {
    type Item = i64;
    type Done = i64;
    const WHAT: &'static str = "ids";

    fn lease_of(id: &i64) -> (i64, i64) {
        (*id, 1)
    }

    fn lease_done(id: &i64) -> (i64, i64) {
        (*id, 1)
    }

    async fn renew(&self, leases: Vec<(i64, i64)>, _until_ms: i64) -> Result<u64, StoreError> {
        Ok(leases.len() as u64)
    }

    async fn claim(&self, _now_ms: i64, limit: u32, _lease_ms: u64) -> Result<Vec<i64>, StoreError> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        raise(&self.most_claiming, self.claiming.fetch_add(1, Ordering::SeqCst) + 1);
        tokio::time::sleep(Duration::from_millis(CLAIM_MS)).await;
        self.claiming.fetch_sub(1, Ordering::SeqCst);
        let mut due = self.due.lock().unwrap();
        let take = due.len().min(limit as usize);
        Ok(due.drain(..take).collect())
    }

    async fn work(self: Arc<Self>, id: i64) -> i64 {
        raise(&self.most_working, self.working.fetch_add(1, Ordering::SeqCst) + 1);
        tokio::time::sleep(Duration::from_millis(WORK_MS)).await;
        self.working.fetch_sub(1, Ordering::SeqCst);
        id
    }

    async fn record(&self, done: Vec<i64>, _now_ms: i64) -> Result<Vec<Recorded>, StoreError> {
        let count = done.len();
        self.recorded.lock().unwrap().extend(done);
        Ok(vec![Recorded::Applied; count])
    }
}

fn config(concurrency: usize, batch_size: u32, poll_interval: Duration) -> PumpConfig {
    PumpConfig { concurrency, batch_size, poll_interval, lease: Duration::from_secs(30) }
}

struct Running {
    queue: Arc<Ids>,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
    pump: tokio::task::JoinHandle<()>,
}

fn start(backlog: i64, config: PumpConfig) -> Running {
    let queue = Arc::new(Ids { due: Mutex::new((0..backlog).collect()), ..Ids::default() });
    let (wake, shutdown) = (Arc::new(Notify::new()), CancellationToken::new());
    let pump = tokio::spawn(pump(queue.clone(), config, wake.clone(), shutdown.clone()));
    Running { queue, wake, shutdown, pump }
}

impl Running {
    fn recorded(&self) -> usize {
        self.queue.recorded.lock().unwrap().len()
    }

    /// Waits (in paused time) until `count` items are recorded, at most `within`.
    async fn until_recorded(&self, count: usize, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.recorded() < count {
            assert!(tokio::time::Instant::now() < deadline, "{} of {count} recorded", self.recorded());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn stop(self) -> Arc<Ids> {
        self.shutdown.cancel();
        self.pump.await.unwrap();
        self.queue
    }
}

#[tokio::test(start_paused = true)]
async fn a_backlog_is_claimed_two_claims_at_a_time_within_the_concurrency() {
    let running = start(400, config(8, 4, Duration::from_secs(10)));
    running.until_recorded(400, Duration::from_secs(10)).await;
    let queue = running.stop().await;
    assert_eq!(queue.most_claiming.load(Ordering::SeqCst), CLAIMERS, "claims in flight at once");
    assert!(queue.most_working.load(Ordering::SeqCst) <= 8, "never more work than the concurrency");
    let mut recorded = queue.recorded.lock().unwrap().clone();
    recorded.sort_unstable();
    assert_eq!(recorded, (0..400).collect::<Vec<_>>(), "every item worked and recorded once");
}

#[tokio::test(start_paused = true)]
async fn claims_and_work_overlap_so_the_drain_beats_claims_one_after_another() {
    // One claim at a time would need 100 claims of 10 ms for 400 items;
    // two at a time, with room for a claim's items beside the other's,
    // about half that.
    let running = start(400, config(16, 4, Duration::from_secs(10)));
    let started = tokio::time::Instant::now();
    running.until_recorded(400, Duration::from_secs(10)).await;
    let took = started.elapsed();
    running.stop().await;
    assert!(took < Duration::from_millis(100 * CLAIM_MS * 3 / 4), "drained in {took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_quiet_queue_is_polled_by_one_claimer() {
    let running = start(0, config(8, 4, Duration::from_millis(100)));
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let queue = running.stop().await;
    let claims = queue.claims.load(Ordering::SeqCst);
    // One claim per claimer at start, then the first one's polls: about 9
    // in 1 s at 100 ms (each poll waits its interval after a 10 ms claim).
    assert!((CLAIMERS + 7..=CLAIMERS + 10).contains(&claims), "{claims} claims in 1 s");
}

#[tokio::test(start_paused = true)]
async fn a_wake_claims_at_once_and_a_full_claim_brings_in_the_other_claimer() {
    let running = start(0, config(8, 4, Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(50)).await;
    running.queue.most_claiming.store(0, Ordering::SeqCst);
    running.queue.due.lock().unwrap().extend(0..40);
    running.wake.notify_one();
    // Long before the next poll, and with two claims at once again.
    running.until_recorded(40, Duration::from_secs(1)).await;
    let queue = running.stop().await;
    assert_eq!(queue.most_claiming.load(Ordering::SeqCst), CLAIMERS);
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_the_work_in_hand_and_records_it() {
    let running = start(400, config(8, 4, Duration::from_secs(10)));
    tokio::time::sleep(Duration::from_millis(CLAIM_MS + 1)).await;
    let queue = running.stop().await;
    let worked = 400 - queue.due.lock().unwrap().len();
    assert!(worked > 0);
    assert_eq!(queue.recorded.lock().unwrap().len(), worked, "every claimed item recorded");
}

#[test]
fn a_recorded_result_releases_its_own_lease_not_a_newer_claim_of_the_same_id() {
    let held = Held::default();
    held.lock().unwrap().extend([(1, 10), (2, 21), (3, 30)]);
    // Item 2 was claimed again (token 21) before its first claim's (20)
    // result was recorded.
    release(&held, &[(1, 10), (2, 20)]);
    let left: HashMap<i64, i64> = held.lock().unwrap().clone();
    assert_eq!(left, HashMap::from([(2, 21), (3, 30)]));
}

/// A queue whose one item is put back once, due again `AGAIN_MS` later
/// (a deferral or retry), then done. Due times are wall-clock ms, as the
/// store keeps them: a result carries its item's next due time, and a claim
/// takes what is due by `now_ms()`.
#[derive(Default)]
struct PutBack {
    due: Mutex<Vec<(i64, i64)>>,
    claimed_at: Mutex<Vec<tokio::time::Instant>>,
}

const AGAIN_MS: i64 = 100;

impl Queue for PutBack {
    type Item = i64;
    /// The item, and when it is due again if it is put back.
    type Done = (i64, Option<i64>);
    const WHAT: &'static str = "put-back ids";

    fn lease_of(id: &i64) -> (i64, i64) {
        (*id, 1)
    }

    fn lease_done(done: &(i64, Option<i64>)) -> (i64, i64) {
        (done.0, 1)
    }

    async fn renew(&self, leases: Vec<(i64, i64)>, _until_ms: i64) -> Result<u64, StoreError> {
        Ok(leases.len() as u64)
    }

    async fn claim(&self, now_ms: i64, limit: u32, _lease_ms: u64) -> Result<Vec<i64>, StoreError> {
        let mut due = self.due.lock().unwrap();
        let (ready, later): (Vec<_>, Vec<_>) = due.drain(..).partition(|(at, _)| *at <= now_ms);
        *due = later;
        let ready: Vec<i64> = ready.into_iter().take(limit as usize).map(|(_, id)| id).collect();
        if !ready.is_empty() {
            self.claimed_at.lock().unwrap().push(tokio::time::Instant::now());
        }
        Ok(ready)
    }

    async fn work(self: Arc<Self>, id: i64) -> (i64, Option<i64>) {
        let first = self.claimed_at.lock().unwrap().len() == 1;
        (id, first.then(|| now_ms() + AGAIN_MS))
    }

    async fn record(&self, done: Vec<(i64, Option<i64>)>, _now_ms: i64) -> Result<Vec<Recorded>, StoreError> {
        let mut due = self.due.lock().unwrap();
        due.extend(done.iter().filter_map(|(id, again)| again.map(|at| (at, *id))));
        Ok(vec![Recorded::Applied; done.len()])
    }

    fn due_again_at((_, again): &(i64, Option<i64>)) -> Option<i64> {
        *again
    }
}

#[tokio::test]
async fn an_item_put_back_is_claimed_when_it_comes_due_not_at_the_next_poll() {
    let queue = Arc::new(PutBack { due: Mutex::new(vec![(0, 7)]), ..Default::default() });
    let (wake, shutdown) = (Arc::new(Notify::new()), CancellationToken::new());
    let pump =
        tokio::spawn(pump(queue.clone(), config(4, 4, Duration::from_secs(10)), wake, shutdown.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    while queue.claimed_at.lock().unwrap().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the item put back was not claimed again");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let claimed = queue.claimed_at.lock().unwrap().clone();
    let gap = claimed[1] - claimed[0];
    // Due again 100 ms after its first claim's work; the poll would come
    // after 10 s.
    assert!(gap >= Duration::from_millis(AGAIN_MS as u64 - 1), "claimed again {gap:?} after the first claim");
    shutdown.cancel();
    pump.await.unwrap();
}
