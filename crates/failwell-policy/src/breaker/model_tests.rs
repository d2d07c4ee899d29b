//! The breaker against a small reference model.
//!
//! [`Model`] follows the rules of the module docs in their plainest form: a
//! list of every call recorded in the current closed period, the start of
//! every probe in flight, one generation number bumped on each state change.
//! It is sequential and slow, and meant to be read next to the docs.
//!
//! The property tests run random configurations and random sequences of
//! calls (a permit held open is a call in flight), outcomes, dropped
//! permits, clock steps and operator actions on paused tokio time, and
//! compare the breaker with the model after every step. They also check,
//! independently of the model:
//!
//! 1. a half-open period never has more probes taken (in flight or
//!    succeeded) than `half_open_probes`, also under real concurrency;
//! 2. from any reachable state that is not an operator override, calls that
//!    all succeed close the breaker within a bounded number of steps once
//!    time passes the open period and the probe timeout;
//! 3. outcomes that are only successes (how a 422 or a declined card is
//!    reported) and ignored calls never take the breaker out of closed.

use std::sync::Barrier;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::*;
use crate::clock::nanos;

const BUCKETS: u64 = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counted,
    Probe,
    Untracked,
}

#[derive(Clone, Copy, Debug)]
struct ModelTicket {
    id: u64,
    generation: u64,
    kind: Kind,
    started: Duration,
}

/// A recorded call of the current closed period.
#[derive(Clone, Copy, Debug)]
struct Call {
    at: Duration,
    failed: bool,
    slow: bool,
}

/// A rejection: the state the caller is told about and `retry_in`.
type Rejection = (BreakerState, Option<Duration>);

/// The breaker's rules, written plainly. Time is the offset from the
/// breaker's creation.
#[derive(Debug)]
struct Model {
    config: BreakerConfig,
    now: Duration,
    state: BreakerState,
    /// Bumped on every state change; results of tickets from an earlier
    /// generation are ignored.
    generation: u64,
    next_id: u64,
    /// Failures in a row in the current closed period.
    consecutive: u32,
    /// Every call recorded in the current closed period, oldest first.
    calls: Vec<Call>,
    /// Trips in a row (reset by closing or an operator action).
    trips: u32,
    open_until: Duration,
    /// Probes of the current half-open period in flight: ticket id, start.
    probes: Vec<(u64, Duration)>,
    /// Probes of the current half-open period that succeeded.
    succeeded: u32,
}

impl Model {
    fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            now: Duration::ZERO,
            state: BreakerState::Closed,
            generation: 0,
            next_id: 0,
            consecutive: 0,
            calls: Vec::new(),
            trips: 0,
            open_until: Duration::ZERO,
            probes: Vec::new(),
            succeeded: 0,
        }
    }

    /// `min(max_open_for, open_for * open_multiplier^(trips - 1))`.
    fn open_period(&self) -> Duration {
        let c = &self.config;
        let factor = c.open_multiplier.powi(self.trips.saturating_sub(1).min(1_000) as i32);
        Duration::try_from_secs_f64(c.open_for.as_secs_f64() * factor)
            .map_or(c.max_open_for, |d| d.min(c.max_open_for))
    }

    /// A state change: new generation, counts start afresh.
    fn enter(&mut self, to: BreakerState) {
        self.generation += 1;
        self.state = to;
        self.consecutive = 0;
        self.calls.clear();
        self.probes.clear();
        self.succeeded = 0;
        match to {
            BreakerState::Open => {
                self.trips += 1;
                self.open_until = self.now + self.open_period();
            }
            BreakerState::HalfOpen => {}
            BreakerState::Closed | BreakerState::ForcedOpen | BreakerState::ForcedClosed => self.trips = 0,
        }
    }

    fn ticket(&mut self, kind: Kind) -> ModelTicket {
        self.next_id += 1;
        ModelTicket { id: self.next_id, generation: self.generation, kind, started: self.now }
    }

    fn acquire(&mut self) -> Result<ModelTicket, Rejection> {
        if self.state == BreakerState::Open && self.now >= self.open_until {
            self.enter(BreakerState::HalfOpen);
        }
        match self.state {
            BreakerState::Closed => Ok(self.ticket(Kind::Counted)),
            BreakerState::ForcedClosed => Ok(self.ticket(Kind::Untracked)),
            BreakerState::ForcedOpen => Err((BreakerState::ForcedOpen, None)),
            BreakerState::Open => Err((BreakerState::Open, Some(self.open_until - self.now))),
            BreakerState::HalfOpen => {
                let taken = self.probes.len() as u32 + self.succeeded;
                if taken < self.config.half_open_probes {
                    let ticket = self.ticket(Kind::Probe);
                    self.probes.push((ticket.id, ticket.started));
                    return Ok(ticket);
                }
                // No free slot: a probe in flight for probe_timeout or longer
                // counts as failed.
                let timeout = self.config.probe_timeout;
                if self.probes.iter().any(|&(_, started)| self.now >= started + timeout) {
                    self.enter(BreakerState::Open);
                    return Err((BreakerState::Open, Some(self.open_until - self.now)));
                }
                Err((BreakerState::HalfOpen, None))
            }
        }
    }

    fn record(&mut self, ticket: ModelTicket, outcome: CallOutcome) {
        if ticket.kind == Kind::Untracked || ticket.generation != self.generation {
            return;
        }
        let slow = self.config.slow_call_duration.is_some_and(|d| self.now - ticket.started >= d);
        if ticket.kind == Kind::Probe {
            self.probes.retain(|&(id, _)| id != ticket.id);
            match outcome {
                CallOutcome::Ignored => {}
                // A slow probe fails when slow calls can trip the breaker.
                CallOutcome::Success if !(slow && self.config.slow_call_rate.is_some()) => {
                    self.succeeded += 1;
                    if self.succeeded == self.config.half_open_probes {
                        self.enter(BreakerState::Closed);
                    }
                }
                _ => self.enter(BreakerState::Open),
            }
            return;
        }
        match outcome {
            CallOutcome::Ignored => return,
            CallOutcome::Success if !slow => self.consecutive = 0,
            // A slow success neither extends nor ends a run of failures.
            CallOutcome::Success => {}
            CallOutcome::Failure => self.consecutive += 1,
        }
        self.calls.push(Call { at: self.now, failed: outcome == CallOutcome::Failure, slow });
        let (calls, failures, slow_calls) = self.window_totals();
        let c = &self.config;
        let rate_reached = |count: u32, threshold: Option<f64>| {
            threshold.is_some_and(|t| calls >= c.minimum_calls && f64::from(count) >= t * f64::from(calls))
        };
        if c.consecutive_failures.is_some_and(|n| self.consecutive >= n)
            || rate_reached(failures, c.failure_rate)
            || rate_reached(slow_calls, c.slow_call_rate)
        {
            self.enter(BreakerState::Open);
        }
    }

    /// Calls, failures and slow calls in the window: the last N calls, or
    /// the calls in the ten buckets of T/10 ending with the current one.
    fn window_totals(&self) -> (u32, u32, u32) {
        let in_window: Vec<&Call> = match self.config.window {
            SlidingWindow::Count(n) => self.calls.iter().rev().take(n as usize).collect(),
            SlidingWindow::Time(span) => {
                let width = (nanos(span) / BUCKETS).max(1);
                let current = nanos(self.now) / width;
                self.calls.iter().filter(|call| current - nanos(call.at) / width < BUCKETS).collect()
            }
        };
        let count = |f: fn(&Call) -> bool| in_window.iter().filter(|call| f(call)).count() as u32;
        (in_window.len() as u32, count(|call| call.failed), count(|call| call.slow))
    }

    fn force(&mut self, state: Option<BreakerState>) {
        self.enter(state.unwrap_or(BreakerState::Closed));
    }
}

/// One step of a test run.
#[derive(Clone, Debug)]
enum Op {
    /// Ask for a permit and keep it: a call in flight.
    Acquire,
    /// Record an outcome for the in-flight call at this index (modulo).
    Record(usize, CallOutcome),
    /// Drop the permit of the in-flight call at this index (modulo).
    Drop(usize),
    Advance(Duration),
    ForceOpen,
    ForceClosed,
    Reset,
}

struct Live<'a> {
    permit: Permit<'a, InProcess>,
    ticket: ModelTicket,
    /// The state period the permit was granted in, for probes.
    probe_of: Option<u64>,
}

/// The breaker, the model, the calls in flight, and the probe count of the
/// current period as seen from outside (through the state changes).
struct Harness<'a> {
    breaker: &'a CircuitBreaker,
    model: Model,
    live: Vec<Live<'a>>,
    events: broadcast::Receiver<StateChange>,
    period: u64,
    probes_taken: u32,
}

impl<'a> Harness<'a> {
    fn new(breaker: &'a CircuitBreaker, config: BreakerConfig) -> Self {
        Self {
            events: breaker.subscribe(),
            breaker,
            model: Model::new(config),
            live: Vec::new(),
            period: 0,
            probes_taken: 0,
        }
    }

    fn drain_events(&mut self) -> Result<(), TestCaseError> {
        loop {
            match self.events.try_recv() {
                Ok(_) => {
                    self.period += 1;
                    self.probes_taken = 0;
                }
                Err(broadcast::error::TryRecvError::Empty) => return Ok(()),
                Err(e) => return Err(TestCaseError::fail(format!("state changes lost: {e}"))),
            }
        }
    }

    /// Removes the call in flight at `index` (modulo); an ignored or
    /// dropped probe frees its slot, a probe with a result keeps it.
    fn take(&mut self, index: usize, outcome: CallOutcome) -> Option<Live<'a>> {
        if self.live.is_empty() {
            return None;
        }
        let live = self.live.remove(index % self.live.len());
        if outcome == CallOutcome::Ignored && live.probe_of == Some(self.period) {
            self.probes_taken -= 1;
        }
        Some(live)
    }

    /// Runs `op` on both; returns whether an `Acquire` was granted.
    async fn step(&mut self, op: &Op) -> Result<bool, TestCaseError> {
        let mut granted = false;
        match *op {
            Op::Acquire => {
                let real = self.breaker.try_acquire();
                let expected = self.model.acquire();
                self.drain_events()?;
                match (real, expected) {
                    (Ok(permit), Ok(ticket)) => {
                        prop_assert_eq!(permit.is_probe(), ticket.kind == Kind::Probe, "probe or not");
                        let mut probe_of = None;
                        if permit.is_probe() {
                            self.probes_taken += 1;
                            prop_assert!(
                                self.probes_taken <= self.model.config.half_open_probes,
                                "{} probes taken in one half-open period",
                                self.probes_taken
                            );
                            probe_of = Some(self.period);
                        }
                        self.live.push(Live { permit, ticket, probe_of });
                        granted = true;
                    }
                    (Err(open), Err((state, retry_in))) => {
                        prop_assert_eq!((open.state, open.retry_in), (state, retry_in), "rejection");
                    }
                    (real, expected) => {
                        return Err(TestCaseError::fail(format!(
                            "try_acquire: breaker {:?}, model {expected:?}",
                            real.map(|p| p.is_probe())
                        )));
                    }
                }
            }
            Op::Record(index, outcome) => {
                if let Some(live) = self.take(index, outcome) {
                    live.permit.record(outcome);
                    self.model.record(live.ticket, outcome);
                }
            }
            Op::Drop(index) => {
                if let Some(live) = self.take(index, CallOutcome::Ignored) {
                    drop(live.permit);
                    self.model.record(live.ticket, CallOutcome::Ignored);
                }
            }
            Op::Advance(d) => {
                tokio::time::advance(d).await;
                self.model.now += d;
            }
            Op::ForceOpen => {
                self.breaker.force_open();
                self.model.force(Some(BreakerState::ForcedOpen));
            }
            Op::ForceClosed => {
                self.breaker.force_closed();
                self.model.force(Some(BreakerState::ForcedClosed));
            }
            Op::Reset => {
                self.breaker.reset();
                self.model.force(None);
            }
        }
        self.drain_events()?;
        prop_assert_eq!(self.breaker.state(), self.model.state, "state after {:?}", op);
        Ok(granted)
    }

    /// Property 2: from here, with every new call succeeding at once and
    /// the calls in flight left hanging, the breaker closes within three
    /// rounds of (wait past the open period and the probe timeout, make
    /// `half_open_probes` calls).
    async fn recovers(&mut self) -> Result<(), TestCaseError> {
        if matches!(self.breaker.state(), BreakerState::ForcedOpen | BreakerState::ForcedClosed) {
            return Ok(()); // operator overrides last until reset, by design
        }
        let c = &self.model.config;
        let wait = c.max_open_for.max(c.probe_timeout);
        let calls = c.half_open_probes;
        for _ in 0..3 {
            if self.breaker.state() == BreakerState::Closed {
                break;
            }
            self.step(&Op::Advance(wait)).await?;
            for _ in 0..calls {
                if self.step(&Op::Acquire).await? {
                    self.step(&Op::Record(self.live.len() - 1, CallOutcome::Success)).await?;
                }
            }
        }
        prop_assert_eq!(self.breaker.state(), BreakerState::Closed, "not closed after successful calls");
        Ok(())
    }
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap()
}

/// Runs `ops`, comparing with the model after each; `always_closed` adds
/// property 3, `recover` property 2.
fn run(config: BreakerConfig, ops: &[Op], always_closed: bool, recover: bool) -> Result<(), TestCaseError> {
    paused_runtime().block_on(async {
        let breaker = CircuitBreaker::new("model", config.clone()).unwrap();
        let mut harness = Harness::new(&breaker, config);
        for op in ops {
            harness.step(op).await?;
            if always_closed {
                prop_assert_eq!(breaker.state(), BreakerState::Closed, "left closed on {:?}", op);
            }
        }
        if recover {
            harness.recovers().await?;
        }
        Ok(())
    })
}

fn millis(range: std::ops::RangeInclusive<u64>) -> impl Strategy<Value = Duration> {
    range.prop_map(Duration::from_millis)
}

fn rate() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(0.5)),
        1 => Just(Some(1.0)),
        1 => (0.05f64..=1.0).prop_map(Some),
    ]
}

fn config() -> impl Strategy<Value = BreakerConfig> {
    let window = prop_oneof![
        (1u32..=6).prop_map(SlidingWindow::Count),
        millis(100..=2000).prop_map(SlidingWindow::Time),
    ];
    let open = (millis(10..=500), prop_oneof![Just(1.0), Just(1.5), Just(2.0)], 1u32..=4);
    (
        proptest::option::of(1u32..=4),
        rate(),
        proptest::option::of(millis(10..=300)),
        rate(),
        window,
        1u32..=6,
        open,
        1u32..=3,
        millis(20..=1000),
    )
        .prop_map(
            |(
                consecutive_failures,
                failure_rate,
                slow_call_duration,
                slow_call_rate,
                window,
                minimum_calls,
                (open_for, open_multiplier, max_factor),
                half_open_probes,
                probe_timeout,
            )| {
                let mut c = BreakerConfig {
                    consecutive_failures,
                    failure_rate,
                    slow_call_duration,
                    slow_call_rate: slow_call_rate.filter(|_| slow_call_duration.is_some()),
                    window,
                    minimum_calls,
                    open_for,
                    open_multiplier,
                    max_open_for: open_for * max_factor,
                    half_open_probes,
                    probe_timeout,
                };
                if c.consecutive_failures.is_none() && c.failure_rate.is_none() && c.slow_call_rate.is_none()
                {
                    c.consecutive_failures = Some(minimum_calls.min(4));
                }
                if let SlidingWindow::Count(n) = c.window {
                    c.minimum_calls = c.minimum_calls.min(n);
                }
                c.validate().unwrap();
                c
            },
        )
}

fn advance() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => millis(0..=50),
        3 => millis(0..=600),
        1 => millis(600..=3000),
    ]
    .prop_map(Op::Advance)
}

fn op() -> impl Strategy<Value = Op> {
    let index = 0usize..8;
    prop_oneof![
        6 => Just(Op::Acquire),
        3 => index.clone().prop_map(|i| Op::Record(i, CallOutcome::Success)),
        3 => index.clone().prop_map(|i| Op::Record(i, CallOutcome::Failure)),
        1 => index.clone().prop_map(|i| Op::Record(i, CallOutcome::Ignored)),
        1 => index.prop_map(Op::Drop),
        4 => advance(),
        1 => prop_oneof![Just(Op::ForceOpen), Just(Op::ForceClosed), Just(Op::Reset)],
    ]
}

/// Only what a working provider produces: successes, ignored or dropped
/// calls, time passing.
fn benign_op() -> impl Strategy<Value = Op> {
    let index = 0usize..8;
    prop_oneof![
        4 => Just(Op::Acquire),
        3 => index.clone().prop_map(|i| Op::Record(i, CallOutcome::Success)),
        1 => index.clone().prop_map(|i| Op::Record(i, CallOutcome::Ignored)),
        1 => index.prop_map(Op::Drop),
        3 => advance(),
    ]
}

/// The configurations of [`config`] with calls never counted slow: the
/// slow-call rule is the one way successes may open a breaker.
fn config_without_slow_calls() -> impl Strategy<Value = BreakerConfig> {
    config().prop_map(|mut c| {
        c.slow_call_duration = None;
        c.slow_call_rate = None;
        if c.consecutive_failures.is_none() && c.failure_rate.is_none() {
            c.consecutive_failures = Some(1);
        }
        c
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Properties 1, 2 and 4: the breaker agrees with the model step by
    /// step, never has more probes than configured, and recovers.
    #[test]
    fn breaker_matches_the_model(config in config(), ops in proptest::collection::vec(op(), 1..120)) {
        run(config, &ops, false, true)?;
    }

    /// Property 3: successes and ignored calls never open the breaker.
    #[test]
    fn successes_never_open_the_breaker(
        config in config_without_slow_calls(),
        ops in proptest::collection::vec(benign_op(), 1..120),
    ) {
        run(config, &ops, true, false)?;
    }
}

/// Property 1 under real concurrency: eight threads racing for probes on a
/// breaker that has just become due for half-open get exactly
/// `half_open_probes` between them, round after round.
#[test]
fn concurrent_callers_get_exactly_the_configured_probes() {
    const THREADS: usize = 8;
    const TRIES: usize = 1000;
    for probes in 1..=3 {
        let breaker = CircuitBreaker::new(
            "race",
            BreakerConfig {
                consecutive_failures: Some(1),
                failure_rate: None,
                open_for: Duration::from_millis(1),
                open_multiplier: 1.0,
                max_open_for: Duration::from_millis(1),
                half_open_probes: probes,
                probe_timeout: Duration::from_secs(3600),
                ..BreakerConfig::default()
            },
        )
        .unwrap();
        for _ in 0..10 {
            breaker.try_acquire().unwrap().record(CallOutcome::Failure);
            assert_eq!(breaker.state(), BreakerState::Open);
            std::thread::sleep(Duration::from_millis(2));
            let barrier = Barrier::new(THREADS);
            let (breaker, barrier) = (&breaker, &barrier);
            let granted: Vec<Permit<'_, InProcess>> = std::thread::scope(|s| {
                let threads: Vec<_> = (0..THREADS)
                    .map(|_| {
                        s.spawn(move || {
                            barrier.wait();
                            (0..TRIES).filter_map(|_| breaker.try_acquire().ok()).collect::<Vec<_>>()
                        })
                    })
                    .collect();
                threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
            });
            assert_eq!(granted.len(), probes as usize, "probes granted to {THREADS} racing threads");
            assert!(granted.iter().all(Permit::is_probe));
            assert_eq!(breaker.state(), BreakerState::HalfOpen);
            granted.into_iter().for_each(|p| p.record(CallOutcome::Success));
            assert_eq!(breaker.state(), BreakerState::Closed);
        }
    }
}
