//! Circuit breaker: stop calling a provider that is failing, let one probe
//! find out when it is back.
//!
//! The state machine is the classic one (Nygard, *Release It!*; Fowler,
//! "CircuitBreaker") with the trip conditions of Resilience4j:
//!
//! - **Closed**: calls pass. The breaker opens on `consecutive_failures`
//!   failures in a row, or when the failure rate (or the slow-call rate) over
//!   a sliding window of the last N calls or the last T reaches its
//!   threshold, once the window holds `minimum_calls` calls.
//! - **Open**: calls are rejected with [`BreakerOpen`] (which says when the
//!   breaker will try again) for `open_for`, growing by `open_multiplier` on
//!   each trip in a row up to `max_open_for`.
//! - **Half-open**: exactly `half_open_probes` calls are let through (never
//!   more, whatever the concurrency); when all succeed the breaker closes,
//!   when one fails it opens again. A probe that neither succeeds nor fails
//!   within `probe_timeout` counts as failed, so the breaker is never stuck
//!   half-open.
//! - **Forced open / forced closed**: set by an operator
//!   ([`CircuitBreaker::force_open`], [`CircuitBreaker::force_closed`]) until
//!   [`CircuitBreaker::reset`].
//!
//! Only failures attributable to the provider should be reported as
//! [`CallOutcome::Failure`]: a declined card or a 422 is the provider
//! working, and is a [`CallOutcome::Success`] for the breaker.
//!
//! # Cost
//! While closed, taking a permit is one atomic load, and a success is at
//! most one more load when the window is a count window full of successes
//! (the common case): no clock read, no lock, no shared write, so threads do
//! not contend. The clock is read per call only for a slow-call rule (the
//! call's duration) or a time window (the bucket), and in the open and
//! half-open states. Failures, successes while the window still holds
//! failures, and the start and end of half-open probes take a short lock.
//!
//! # Where the state lives
//! Behind the [`BreakerStore`] trait; [`InProcess`] keeps it in this
//! process's memory.

mod window;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::clock::{Clock, nanos};
use window::{CountWindow, FAILED, SLOW, TimeWindow, Window};

/// The window failure and slow-call rates are computed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlidingWindow {
    /// The last N recorded calls (Resilience4j `COUNT_BASED`).
    Count(u32),
    /// The calls recorded in the last T, in ten buckets of T/10
    /// (Resilience4j `TIME_BASED`).
    Time(Duration),
}

/// A breaker's rules. Every field is public; [`CircuitBreaker::new`]
/// validates them.
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerConfig {
    /// Open after this many failures in a row (`None`: no such rule).
    /// Default none: with many calls in flight, failures that started
    /// together end together, so a run of them says less than a rate.
    pub consecutive_failures: Option<u32>,
    /// Open when failures / calls over the window reach this ratio, in
    /// (0, 1] (`None`: no such rule). Default 0.5.
    pub failure_rate: Option<f64>,
    /// A call slower than this is slow (`None`: durations are not measured).
    /// Default none.
    pub slow_call_duration: Option<Duration>,
    /// Open when slow calls / calls over the window reach this ratio, in
    /// (0, 1]; needs `slow_call_duration`. Default none.
    pub slow_call_rate: Option<f64>,
    /// The window of the rate rules. Default the last 50 calls.
    pub window: SlidingWindow,
    /// The rate rules apply once the window holds this many calls. Default 20.
    pub minimum_calls: u32,
    /// How long the breaker stays open after its first trip. Default 10 s.
    pub open_for: Duration,
    /// The open period is multiplied by this on each trip in a row (a probe
    /// that fails), ≥ 1. Default 2.
    pub open_multiplier: f64,
    /// The longest open period. Default 5 min.
    pub max_open_for: Duration,
    /// Calls let through while half-open; all must succeed to close. 1–1000.
    /// Default 1.
    pub half_open_probes: u32,
    /// A probe with no result after this counts as failed. Default 10 s.
    pub probe_timeout: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            consecutive_failures: None,
            failure_rate: Some(0.5),
            slow_call_duration: None,
            slow_call_rate: None,
            window: SlidingWindow::Count(50),
            minimum_calls: 20,
            open_for: Duration::from_secs(10),
            open_multiplier: 2.0,
            max_open_for: Duration::from_secs(300),
            half_open_probes: 1,
            probe_timeout: Duration::from_secs(10),
        }
    }
}

/// Invalid breaker rules; the message names the field.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BreakerConfigError {
    /// No rule could ever open the breaker.
    #[error("no trip rule: set consecutive_failures, failure_rate or slow_call_rate")]
    NoRule,
    /// A count of zero where at least one is needed.
    #[error("{field} must be at least 1")]
    Zero {
        /// The field.
        field: &'static str,
    },
    /// A ratio outside (0, 1].
    #[error("{field} must be in (0, 1], got {value}")]
    Ratio {
        /// The field.
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// `slow_call_rate` without `slow_call_duration`.
    #[error("slow_call_rate needs slow_call_duration")]
    SlowRateWithoutDuration,
    /// Any other out-of-range value.
    #[error("{field}: {problem}")]
    Range {
        /// The field.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
}

impl BreakerConfig {
    /// Checks the rules; see [`BreakerConfigError`].
    pub fn validate(&self) -> Result<(), BreakerConfigError> {
        if self.consecutive_failures.is_none() && self.failure_rate.is_none() && self.slow_call_rate.is_none()
        {
            return Err(BreakerConfigError::NoRule);
        }
        if self.consecutive_failures == Some(0) {
            return Err(BreakerConfigError::Zero { field: "consecutive_failures" });
        }
        for (field, rate) in [("failure_rate", self.failure_rate), ("slow_call_rate", self.slow_call_rate)] {
            if let Some(value) = rate
                && !(value > 0.0 && value <= 1.0)
            {
                return Err(BreakerConfigError::Ratio { field, value });
            }
        }
        if self.slow_call_rate.is_some() && self.slow_call_duration.is_none() {
            return Err(BreakerConfigError::SlowRateWithoutDuration);
        }
        match self.window {
            SlidingWindow::Count(0) => return Err(BreakerConfigError::Zero { field: "window" }),
            SlidingWindow::Count(n) if n > 100_000 => {
                return Err(BreakerConfigError::Range {
                    field: "window",
                    problem: format!("{n} calls is more than 100000"),
                });
            }
            SlidingWindow::Time(t) if t < Duration::from_millis(10) => {
                return Err(BreakerConfigError::Range {
                    field: "window",
                    problem: format!("{} ms is shorter than 10 ms", t.as_millis()),
                });
            }
            _ => {}
        }
        if self.minimum_calls == 0 {
            return Err(BreakerConfigError::Zero { field: "minimum_calls" });
        }
        if let SlidingWindow::Count(n) = self.window
            && self.minimum_calls > n
            && (self.failure_rate.is_some() || self.slow_call_rate.is_some())
        {
            return Err(BreakerConfigError::Range {
                field: "minimum_calls",
                problem: format!(
                    "{} exceeds the window of {n} calls: the rates could never apply",
                    self.minimum_calls
                ),
            });
        }
        if self.open_for.is_zero() {
            return Err(BreakerConfigError::Range {
                field: "open_for",
                problem: "must be greater than 0".into(),
            });
        }
        if !(self.open_multiplier >= 1.0 && self.open_multiplier.is_finite()) {
            return Err(BreakerConfigError::Range {
                field: "open_multiplier",
                problem: format!("must be a finite number ≥ 1, got {}", self.open_multiplier),
            });
        }
        if self.max_open_for < self.open_for {
            return Err(BreakerConfigError::Range {
                field: "max_open_for",
                problem: "must not be below the first open period".into(),
            });
        }
        if self.half_open_probes == 0 || self.half_open_probes > MAX_PROBES {
            return Err(BreakerConfigError::Range {
                field: "half_open_probes",
                problem: format!("must be between 1 and {MAX_PROBES}"),
            });
        }
        if self.probe_timeout.is_zero() {
            return Err(BreakerConfigError::Range {
                field: "probe_timeout",
                problem: "must be greater than 0".into(),
            });
        }
        Ok(())
    }

    /// The open period after `trips` trips in a row (≥ 1):
    /// `min(max_open_for, open_for * open_multiplier^(trips - 1))`.
    pub fn open_period(&self, trips: u32) -> Duration {
        let factor = self.open_multiplier.powi(trips.saturating_sub(1).min(1_000) as i32);
        Duration::try_from_secs_f64(self.open_for.as_secs_f64() * factor)
            .map_or(self.max_open_for, |d| d.min(self.max_open_for))
    }
}

const MAX_PROBES: u32 = 1000;

/// A breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Calls pass; outcomes are counted.
    Closed,
    /// Calls are rejected until the open period ends.
    Open,
    /// A limited number of probe calls pass.
    HalfOpen,
    /// Rejects every call until reset (operator action).
    ForcedOpen,
    /// Lets every call pass and counts nothing until reset (operator action).
    ForcedClosed,
}

impl BreakerState {
    /// The stable snake-case name used in metrics, logs and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
            Self::ForcedOpen => "forced_open",
            Self::ForcedClosed => "forced_closed",
        }
    }

    /// The state as the `failwell_breaker_state` gauge reports it: 0
    /// closed, 1 open, 2 half-open, 3 forced open, 4 forced closed.
    pub fn code(self) -> u64 {
        match self {
            Self::Closed => 0,
            Self::Open => 1,
            Self::HalfOpen => 2,
            Self::ForcedOpen => 3,
            Self::ForcedClosed => 4,
        }
    }

    fn from_code(code: u64) -> Self {
        match code {
            0 => Self::Closed,
            1 => Self::Open,
            2 => Self::HalfOpen,
            3 => Self::ForcedOpen,
            _ => Self::ForcedClosed,
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a call means for the breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallOutcome {
    /// The provider answered (including answers like 404, 422 or a declined
    /// card: the provider is working).
    Success,
    /// A failure attributable to the provider: timeout, reset, 5xx, 429.
    Failure,
    /// Says nothing about the provider (the caller gave up, a local error).
    /// A probe with this outcome frees its slot for another probe.
    Ignored,
}

/// A state change, as broadcast to [`CircuitBreaker::subscribe`]rs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateChange {
    /// The breaker's name.
    pub breaker: Arc<str>,
    /// The state before.
    pub from: BreakerState,
    /// The state after.
    pub to: BreakerState,
    /// When, on tokio's clock.
    pub at: Instant,
    /// Why, e.g. `failure rate 60% ≥ 50% over 20 calls`.
    pub reason: String,
}

/// The error of a call the breaker did not let through.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe_open(breaker, *state, *retry_in, *paused))]
pub struct BreakerOpen {
    /// The breaker's name.
    pub breaker: Arc<str>,
    /// Its state: open, half-open (all probes taken) or forced open; any
    /// state while paused.
    pub state: BreakerState,
    /// Time until the breaker lets a call (or a probe) through, when known.
    pub retry_in: Option<Duration>,
    /// Whether the provider is paused ([`BreakerStore::pause`]) rather than
    /// the breaker open.
    pub paused: bool,
}

fn describe_open(breaker: &str, state: BreakerState, retry_in: Option<Duration>, paused: bool) -> String {
    let ms = |d: Duration| d.as_millis();
    match (paused, retry_in) {
        (true, Some(d)) => format!("provider {breaker:?} is paused for {} ms", ms(d)),
        (true, None) => format!("provider {breaker:?} is paused"),
        (false, Some(d)) => format!("circuit breaker {breaker:?} is {state}, next probe in {} ms", ms(d)),
        (false, None) => format!("circuit breaker {breaker:?} is {state}"),
    }
}

/// Logs a state change, counts it (`failwell_breaker_transitions_total`,
/// `failwell_breaker_state`) and sends it to `events`' subscribers: what
/// every [`BreakerStore`] does on a change.
pub fn announce(events: &broadcast::Sender<StateChange>, change: StateChange) {
    let StateChange { breaker, from, to, reason, .. } = &change;
    let name = breaker.to_string();
    match to {
        BreakerState::Open | BreakerState::ForcedOpen => {
            tracing::warn!(breaker = %name, %from, %to, %reason, "circuit breaker opened");
        }
        BreakerState::HalfOpen => {
            tracing::info!(breaker = %name, %from, %to, %reason, "circuit breaker half-open")
        }
        BreakerState::Closed | BreakerState::ForcedClosed => {
            tracing::info!(breaker = %name, %from, %to, %reason, "circuit breaker closed");
        }
    }
    metrics::counter!("failwell_breaker_transitions_total", "breaker" => name.clone(), "to" => to.as_str())
        .increment(1);
    metrics::gauge!("failwell_breaker_state", "breaker" => name).set(to.code() as f64);
    let _ = events.send(change);
}

/// A permission to make one call, returned by [`BreakerStore::try_acquire`]
/// and handed back with the call's outcome. Plain data (no reference to the
/// breaker), so holding one costs nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    generation: u32,
    kind: TicketKind,
    /// Clock reading at the start (ns), 0 when the call is not timed.
    started: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TicketKind {
    Counted,
    Probe,
    Untracked,
}

impl Ticket {
    /// A call admitted while closed, in the state period `generation` (a
    /// store's own counter, bumped on every state change), started at
    /// `started` (a store's clock reading in ns; 0 when not timed).
    pub fn counted(generation: u32, started: u64) -> Self {
        Self { generation, kind: TicketKind::Counted, started }
    }

    /// A half-open probe of the period `generation`, started at `started`.
    pub fn probe(generation: u32, started: u64) -> Self {
        Self { generation, kind: TicketKind::Probe, started }
    }

    /// A call whose outcome is not counted (forced closed).
    pub fn untracked() -> Self {
        Self { generation: 0, kind: TicketKind::Untracked, started: 0 }
    }

    /// Whether this call is a half-open probe.
    #[inline]
    pub fn is_probe(&self) -> bool {
        self.kind == TicketKind::Probe
    }

    /// Whether this call's outcome is not counted.
    pub fn is_untracked(&self) -> bool {
        self.kind == TicketKind::Untracked
    }

    /// The state period the call was admitted in.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// When the call started, in the store's clock ns (0: not timed).
    pub fn started(&self) -> u64 {
        self.started
    }
}

/// Where a breaker's state lives. [`InProcess`] is this process's memory;
/// a shared implementation lets every process of a cluster see one state.
///
/// Implementations must be cheap on the success path: `try_acquire` and
/// `record` run on every call.
pub trait BreakerStore: Send + Sync + 'static {
    /// The breaker's name.
    fn name(&self) -> &Arc<str>;
    /// Asks to start a call. Errors with [`BreakerOpen`] while open, forced
    /// open, or half-open with every probe slot taken.
    fn try_acquire(&self) -> Result<Ticket, BreakerOpen>;
    /// Reports how a call that got `ticket` ended. Results of calls admitted
    /// before the latest state change are ignored.
    fn record(&self, ticket: Ticket, outcome: CallOutcome);
    /// The current state (open is reported until a call finds its period over).
    fn state(&self) -> BreakerState;
    /// Sets or clears an operator override: `Some(ForcedOpen)`,
    /// `Some(ForcedClosed)`, or `None` to return to closed and count afresh.
    fn force(&self, state: Option<BreakerState>);
    /// State changes from now on.
    fn subscribe(&self) -> broadcast::Receiver<StateChange>;
    /// The probe timeout, for callers that bound probes themselves.
    fn probe_timeout(&self) -> Duration;
    /// Refuses every call for `duration` (a provider's `Retry-After`, or a
    /// configured pause), with [`BreakerOpen::paused`] set, whatever the
    /// state; a later end wins over an earlier one. Counts nothing and
    /// changes no state; [`force`](Self::force)`(None)` lifts it.
    fn pause(&self, duration: Duration);
    /// Time left in a pause, if paused.
    fn paused_for(&self) -> Option<Duration>;
    /// Whether a call made now would be refused, without taking a permit,
    /// changing state or counting anything: `None` when it would be let
    /// through, `Some(retry_in)` when refused (`retry_in` as in
    /// [`BreakerOpen`]). The default reads [`state`](Self::state) only:
    /// open and forced open refuse.
    fn peek(&self) -> Option<Option<Duration>> {
        matches!(self.state(), BreakerState::Open | BreakerState::ForcedOpen).then_some(None)
    }
    /// Tells the other processes sharing this store that this process cut
    /// the provider's sending rate after throttling ([`crate::throttle`]),
    /// so they cut theirs. The default (a store of one process) tells
    /// no one.
    fn share_throttle(&self) {}
}

/// A store chosen at run time (in-process, or shared by a cluster): every
/// call goes to the boxed store, at the cost of one indirect call.
pub struct DynStore(Box<dyn BreakerStore>);

impl DynStore {
    /// Boxes `store`.
    pub fn new(store: impl BreakerStore) -> Self {
        Self(Box::new(store))
    }
}

impl fmt::Debug for DynStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynStore").field("name", self.0.name()).field("state", &self.0.state()).finish()
    }
}

impl BreakerStore for DynStore {
    fn name(&self) -> &Arc<str> {
        self.0.name()
    }
    #[inline]
    fn try_acquire(&self) -> Result<Ticket, BreakerOpen> {
        self.0.try_acquire()
    }
    #[inline]
    fn record(&self, ticket: Ticket, outcome: CallOutcome) {
        self.0.record(ticket, outcome)
    }
    fn state(&self) -> BreakerState {
        self.0.state()
    }
    fn force(&self, state: Option<BreakerState>) {
        self.0.force(state)
    }
    fn subscribe(&self) -> broadcast::Receiver<StateChange> {
        self.0.subscribe()
    }
    fn probe_timeout(&self) -> Duration {
        self.0.probe_timeout()
    }
    fn peek(&self) -> Option<Option<Duration>> {
        self.0.peek()
    }
    fn pause(&self, duration: Duration) {
        self.0.pause(duration)
    }
    fn paused_for(&self) -> Option<Duration> {
        self.0.paused_for()
    }
    fn share_throttle(&self) {
        self.0.share_throttle()
    }
}

/// A circuit breaker over a [`BreakerStore`]; cheap to clone (clones share
/// the state).
pub struct CircuitBreaker<S: BreakerStore = InProcess> {
    store: Arc<S>,
}

impl<S: BreakerStore> Clone for CircuitBreaker<S> {
    fn clone(&self) -> Self {
        Self { store: self.store.clone() }
    }
}

impl<S: BreakerStore> fmt::Debug for CircuitBreaker<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("name", self.store.name())
            .field("state", &self.store.state())
            .finish()
    }
}

impl CircuitBreaker<InProcess> {
    /// An in-process breaker named `name` (used in errors, logs and
    /// metrics). Errors when `config` is invalid.
    pub fn new(name: &str, config: BreakerConfig) -> Result<Self, BreakerConfigError> {
        Ok(Self::with_store(InProcess::new(name, config)?))
    }
}

impl<S: BreakerStore> CircuitBreaker<S> {
    /// A breaker whose state lives in `store`.
    pub fn with_store(store: S) -> Self {
        Self { store: Arc::new(store) }
    }

    /// The store.
    #[inline]
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The breaker's name.
    pub fn name(&self) -> &Arc<str> {
        self.store.name()
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        self.store.state()
    }

    /// Whether a call made now would be refused, with no side effect (see
    /// [`BreakerStore::peek`]).
    pub fn peek(&self) -> Option<Option<Duration>> {
        self.store.peek()
    }

    /// Asks to make one call; the [`Permit`] records its outcome. Dropping
    /// a permit without recording counts as [`CallOutcome::Ignored`].
    #[inline]
    pub fn try_acquire(&self) -> Result<Permit<'_, S>, BreakerOpen> {
        Ok(Permit { store: &self.store, ticket: Some(self.store.try_acquire()?) })
    }

    /// Rejects every call until [`reset`](Self::reset).
    pub fn force_open(&self) {
        self.store.force(Some(BreakerState::ForcedOpen));
    }

    /// Lets every call through, counting nothing, until [`reset`](Self::reset).
    pub fn force_closed(&self) {
        self.store.force(Some(BreakerState::ForcedClosed));
    }

    /// Ends an override (or any state): closed, with empty counts.
    pub fn reset(&self) {
        self.store.force(None);
    }

    /// Refuses every call for `duration` (see [`BreakerStore::pause`]).
    pub fn pause(&self, duration: Duration) {
        self.store.pause(duration);
    }

    /// Time left in a pause, if paused.
    pub fn paused_for(&self) -> Option<Duration> {
        self.store.paused_for()
    }

    /// Tells the processes sharing the store that the sending rate was cut
    /// here (see [`BreakerStore::share_throttle`]).
    pub fn share_throttle(&self) {
        self.store.share_throttle();
    }

    /// State changes from now on (a bounded channel: a slow receiver loses
    /// the oldest events and is told so by `RecvError::Lagged`).
    pub fn subscribe(&self) -> broadcast::Receiver<StateChange> {
        self.store.subscribe()
    }
}

/// Permission for one call; see [`CircuitBreaker::try_acquire`].
#[derive(Debug)]
pub struct Permit<'a, S: BreakerStore> {
    store: &'a S,
    ticket: Option<Ticket>,
}

impl<S: BreakerStore> Permit<'_, S> {
    /// Whether this call is a half-open probe.
    pub fn is_probe(&self) -> bool {
        self.ticket.is_some_and(|t| t.is_probe())
    }

    /// Records the call's outcome.
    #[inline]
    pub fn record(mut self, outcome: CallOutcome) {
        if let Some(ticket) = self.ticket.take() {
            self.store.record(ticket, outcome);
        }
    }
}

impl<S: BreakerStore> Drop for Permit<'_, S> {
    #[inline]
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.store.record(ticket, CallOutcome::Ignored);
        }
    }
}

// The state word: generation (32 bits) | probes succeeded (12) | probes
// taken (12) | state (8). Every change of state bumps the generation, so a
// result or a probe slot of an earlier period can never touch the current one.
const STATE_BITS: u32 = 8;
const COUNT_BITS: u32 = 12;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const TAKEN_SHIFT: u32 = STATE_BITS;
const OK_SHIFT: u32 = STATE_BITS + COUNT_BITS;
const GEN_SHIFT: u32 = STATE_BITS + 2 * COUNT_BITS;

fn state_of(word: u64) -> BreakerState {
    BreakerState::from_code(word & ((1 << STATE_BITS) - 1))
}
fn generation_of(word: u64) -> u32 {
    (word >> GEN_SHIFT) as u32
}
fn taken_of(word: u64) -> u32 {
    ((word >> TAKEN_SHIFT) & COUNT_MASK) as u32
}
fn ok_of(word: u64) -> u32 {
    ((word >> OK_SHIFT) & COUNT_MASK) as u32
}
fn pack(generation: u32, state: BreakerState) -> u64 {
    (u64::from(generation) << GEN_SHIFT) | state.code()
}

/// The in-process [`BreakerStore`]: atomics for the hot path, a mutex for
/// the window and the transitions.
pub struct InProcess {
    name: Arc<str>,
    config: BreakerConfig,
    clock: Clock,
    word: AtomicU64,
    consecutive: AtomicU32,
    /// The count window is full of fast successes: a success changes nothing.
    clean: AtomicBool,
    /// End of the open period (clock ns).
    open_until: AtomicU64,
    /// When the oldest probe in flight counts as hung (clock ns; `u64::MAX`
    /// when no probe is in flight).
    probe_deadline: AtomicU64,
    /// End of a pause (clock ns; 0: not paused).
    pause_until: AtomicU64,
    slow_path: Mutex<SlowPath>,
    events: broadcast::Sender<StateChange>,
    rejected: metrics::Counter,
}

struct SlowPath {
    window: Window,
    trips: u32,
    /// Starts (clock ns) of the probes of this half-open period in flight.
    probes: Vec<u64>,
}

impl fmt::Debug for InProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcess").field("name", &self.name).field("state", &self.state()).finish()
    }
}

impl InProcess {
    /// An in-process store for a breaker named `name`. Errors when `config`
    /// is invalid.
    pub fn new(name: &str, config: BreakerConfig) -> Result<Self, BreakerConfigError> {
        config.validate()?;
        let window = match (config.failure_rate.is_some() || config.slow_call_rate.is_some(), config.window) {
            (false, _) => Window::None,
            (true, SlidingWindow::Count(n)) => Window::Count(CountWindow::new(n)),
            (true, SlidingWindow::Time(t)) => Window::Time(TimeWindow::new(nanos(t))),
        };
        let name: Arc<str> = Arc::from(name);
        Ok(Self {
            rejected: metrics::counter!("failwell_breaker_rejected_total", "breaker" => name.to_string()),
            name,
            config,
            clock: Clock::new(),
            word: AtomicU64::new(pack(0, BreakerState::Closed)),
            consecutive: AtomicU32::new(0),
            clean: AtomicBool::new(false),
            open_until: AtomicU64::new(0),
            probe_deadline: AtomicU64::new(u64::MAX),
            pause_until: AtomicU64::new(0),
            slow_path: Mutex::new(SlowPath { window, trips: 0, probes: Vec::new() }),
            events: broadcast::channel(64).0,
        })
    }

    /// The rules.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlowPath> {
        // A panic while holding the lock cannot leave the counters
        // inconsistent in a way worse than a lost outcome.
        self.slow_path.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts the outcome of a call admitted elsewhere (by a shared breaker
    /// that uses this one to apply the provider's own rules), in the
    /// current closed period; ignored unless closed. Not timed: slow-call
    /// rules do not see it. A success is loads only while the window holds
    /// no failure.
    #[inline]
    pub fn observe(&self, outcome: CallOutcome) {
        let generation = generation_of(self.word.load(Ordering::Acquire));
        self.record_counted(Ticket::counted(generation, 0), outcome);
    }

    /// Closes the breaker and counts afresh, with `reason` in the state
    /// change (a pause is kept).
    pub fn reset(&self, reason: &str) {
        self.move_to(BreakerState::Closed, reason);
    }

    fn move_to(&self, to: BreakerState, reason: &str) {
        let now = self.clock.now();
        loop {
            let word = self.word.load(Ordering::Acquire);
            if self.transition(word, to, now, reason.into()) {
                return;
            }
        }
    }

    /// Time left in a pause, if paused (one atomic load when not).
    #[inline]
    fn paused_for(&self) -> Option<Duration> {
        let until = self.pause_until.load(Ordering::Acquire);
        if until == 0 {
            return None;
        }
        let now = self.clock.now();
        (now < until).then(|| Duration::from_nanos(until - now))
    }

    fn rejection(&self, state: BreakerState, retry_in: Option<Duration>) -> BreakerOpen {
        self.rejected.increment(1);
        tracing::trace!(breaker = %self.name, %state, "call rejected by the circuit breaker");
        BreakerOpen { breaker: self.name.clone(), state, retry_in, paused: false }
    }

    #[inline]
    fn timed_start(&self) -> u64 {
        if self.config.slow_call_duration.is_some() { self.clock.now() } else { 0 }
    }

    fn acquire_slow(&self, mut word: u64) -> Result<Ticket, BreakerOpen> {
        let now = self.clock.now();
        if state_of(word) == BreakerState::Open {
            let until = self.open_until.load(Ordering::Acquire);
            if now < until {
                return Err(self.rejection(BreakerState::Open, Some(Duration::from_nanos(until - now))));
            }
            self.transition(word, BreakerState::HalfOpen, now, "open period over".into());
            word = self.word.load(Ordering::Acquire);
        }
        loop {
            match state_of(word) {
                BreakerState::HalfOpen => {}
                BreakerState::Closed => {
                    return Ok(Ticket {
                        generation: generation_of(word),
                        kind: TicketKind::Counted,
                        started: self.timed_start(),
                    });
                }
                BreakerState::ForcedClosed => return Ok(Ticket::untracked()),
                state @ (BreakerState::Open | BreakerState::ForcedOpen) => {
                    let until = self.open_until.load(Ordering::Acquire);
                    let retry_in = (state == BreakerState::Open)
                        .then(|| Duration::from_nanos(until.saturating_sub(now)));
                    return Err(self.rejection(state, retry_in));
                }
            }
            if taken_of(word) >= self.config.half_open_probes {
                if now >= self.probe_deadline.load(Ordering::Acquire) {
                    self.transition(word, BreakerState::Open, now, "half-open probe timed out".into());
                    word = self.word.load(Ordering::Acquire);
                    continue;
                }
                return Err(self.rejection(BreakerState::HalfOpen, None));
            }
            match self.word.compare_exchange_weak(
                word,
                word + (1 << TAKEN_SHIFT),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.track_probe(generation_of(word), now, true);
                    return Ok(Ticket {
                        generation: generation_of(word),
                        kind: TicketKind::Probe,
                        started: now,
                    });
                }
                Err(current) => word = current,
            }
        }
    }

    fn record_probe(&self, ticket: Ticket, outcome: CallOutcome) {
        let slow = ticket.started != 0
            && self.config.slow_call_rate.is_some()
            && self.config.slow_call_duration.is_some_and(|d| self.clock.now() - ticket.started >= nanos(d));
        if outcome == CallOutcome::Ignored || (outcome == CallOutcome::Success && !slow) {
            self.track_probe(ticket.generation, ticket.started, false);
        }
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if generation_of(word) != ticket.generation || state_of(word) != BreakerState::HalfOpen {
                return;
            }
            let next = match outcome {
                CallOutcome::Success if !slow => word + (1 << OK_SHIFT),
                CallOutcome::Ignored => word - (1 << TAKEN_SHIFT),
                _ => {
                    let reason = if slow { "half-open probe was slow" } else { "half-open probe failed" };
                    self.transition(word, BreakerState::Open, self.clock.now(), reason.into());
                    return;
                }
            };
            match self.word.compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    if ok_of(next) >= self.config.half_open_probes {
                        let reason = format!("{} half-open probe(s) succeeded", ok_of(next));
                        self.transition(next, BreakerState::Closed, self.clock.now(), reason);
                    }
                    return;
                }
                Err(current) => word = current,
            }
        }
    }

    /// The common case inline: an untimed success that changes no window
    /// (the count window is clean, or there is none); the rest out of line.
    #[inline]
    fn record_counted(&self, ticket: Ticket, outcome: CallOutcome) {
        if outcome == CallOutcome::Success
            && ticket.started == 0
            && (self.clean.load(Ordering::Relaxed) || self.lock_free_window())
        {
            // A success from before the latest state change is ignored: it
            // must not end the current run of failures.
            if self.consecutive.load(Ordering::Relaxed) != 0
                && generation_of(self.word.load(Ordering::Acquire)) == ticket.generation
            {
                self.consecutive.store(0, Ordering::Relaxed);
            }
            return;
        }
        self.record_counted_slow(ticket, outcome);
    }

    fn record_counted_slow(&self, ticket: Ticket, outcome: CallOutcome) {
        let now = if ticket.started != 0 || matches!(self.config.window, SlidingWindow::Time(_)) {
            self.clock.now()
        } else {
            0
        };
        let slow = ticket.started != 0
            && self.config.slow_call_duration.is_some_and(|d| now.saturating_sub(ticket.started) >= nanos(d));
        let flags = match outcome {
            CallOutcome::Ignored => return,
            CallOutcome::Success if !slow => {
                // A success from before the latest state change is ignored:
                // it must not end the current run of failures.
                if self.consecutive.load(Ordering::Relaxed) != 0
                    && generation_of(self.word.load(Ordering::Acquire)) == ticket.generation
                {
                    self.consecutive.store(0, Ordering::Relaxed);
                }
                if self.clean.load(Ordering::Relaxed) || self.lock_free_window() {
                    return;
                }
                0
            }
            CallOutcome::Success => SLOW,
            CallOutcome::Failure => FAILED | if slow { SLOW } else { 0 },
        };
        let mut slow_path = self.lock();
        let word = self.word.load(Ordering::Acquire);
        if generation_of(word) != ticket.generation || state_of(word) != BreakerState::Closed {
            return;
        }
        let consecutive = if flags & FAILED != 0 {
            self.consecutive.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.consecutive.load(Ordering::Relaxed)
        };
        slow_path.window.push(flags, now);
        let totals = slow_path.window.totals(now);
        let c = &self.config;
        let rate_reached = |count: u32, threshold: Option<f64>| {
            threshold.is_some_and(|t| {
                totals.calls >= c.minimum_calls && f64::from(count) >= t * f64::from(totals.calls)
            })
        };
        let rate = |what: &str, count: u32, threshold: Option<f64>| {
            rate_reached(count, threshold).then(|| {
                format!("{what} {count}/{} calls reached {}", totals.calls, threshold.unwrap_or(1.0))
            })
        };
        let reason = if c.consecutive_failures.is_some_and(|n| consecutive >= n) {
            Some(format!("{consecutive} consecutive failures"))
        } else {
            rate("failure rate", totals.failures, c.failure_rate)
                .or_else(|| rate("slow-call rate", totals.slow, c.slow_call_rate))
        };
        match reason {
            Some(reason) => {
                drop(slow_path);
                self.transition(
                    word,
                    BreakerState::Open,
                    if now == 0 { self.clock.now() } else { now },
                    reason,
                );
            }
            None => self.clean.store(slow_path.window.is_saturated_clean(), Ordering::Relaxed),
        }
    }

    /// Adds a probe of `generation` started at `started` to the probes in
    /// flight, or removes it when it ends without failing, unless the state
    /// has changed since; the probe deadline follows the oldest one left.
    fn track_probe(&self, generation: u32, started: u64, in_flight: bool) {
        let mut slow_path = self.lock();
        if generation_of(self.word.load(Ordering::Acquire)) != generation {
            return;
        }
        let probes = &mut slow_path.probes;
        if in_flight {
            probes.push(started);
        } else if let Some(i) = probes.iter().position(|&s| s == started) {
            probes.swap_remove(i);
        }
        let timeout = nanos(self.config.probe_timeout);
        let deadline = probes.iter().min().map_or(u64::MAX, |&s| s.saturating_add(timeout));
        self.probe_deadline.store(deadline, Ordering::Release);
    }

    /// No window to record successes in (consecutive failures only).
    #[inline]
    fn lock_free_window(&self) -> bool {
        self.config.failure_rate.is_none() && self.config.slow_call_rate.is_none()
    }

    /// Moves from the state in `expected` to `to` unless another thread
    /// changed the state first. Returns whether this call made the change.
    fn transition(&self, expected: u64, to: BreakerState, now: u64, reason: String) -> bool {
        let mut slow_path = self.lock();
        if generation_of(self.word.load(Ordering::Acquire)) != generation_of(expected) {
            return false;
        }
        let from = state_of(expected);
        match to {
            BreakerState::Open => {
                slow_path.trips += 1;
                let period = self.config.open_period(slow_path.trips);
                self.open_until.store(now.saturating_add(nanos(period)), Ordering::Release);
            }
            BreakerState::HalfOpen => {}
            BreakerState::Closed | BreakerState::ForcedOpen | BreakerState::ForcedClosed => {
                slow_path.trips = 0
            }
        }
        slow_path.window.reset();
        slow_path.probes.clear();
        self.probe_deadline.store(u64::MAX, Ordering::Release);
        self.consecutive.store(0, Ordering::Relaxed);
        self.clean.store(false, Ordering::Relaxed);
        self.word.store(pack(generation_of(expected).wrapping_add(1), to), Ordering::Release);
        drop(slow_path);
        self.announce(from, to, now, reason);
        true
    }

    fn announce(&self, from: BreakerState, to: BreakerState, now: u64, reason: String) {
        let change =
            StateChange { breaker: self.name.clone(), from, to, at: self.clock.instant(now), reason };
        announce(&self.events, change);
    }
}

impl BreakerStore for InProcess {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    #[inline]
    fn peek(&self) -> Option<Option<Duration>> {
        if let Some(left) = self.paused_for() {
            return Some(Some(left));
        }
        let word = self.word.load(Ordering::Acquire);
        let now = self.clock.now();
        match state_of(word) {
            BreakerState::Closed | BreakerState::ForcedClosed => None,
            BreakerState::ForcedOpen => Some(None),
            BreakerState::Open => {
                let until = self.open_until.load(Ordering::Acquire);
                (now < until).then(|| Some(Duration::from_nanos(until - now)))
            }
            BreakerState::HalfOpen => (taken_of(word) >= self.config.half_open_probes
                && now < self.probe_deadline.load(Ordering::Acquire))
            .then_some(None),
        }
    }

    fn try_acquire(&self) -> Result<Ticket, BreakerOpen> {
        if let Some(left) = self.paused_for() {
            let state = self.state();
            return Err(BreakerOpen { paused: true, ..self.rejection(state, Some(left)) });
        }
        let word = self.word.load(Ordering::Acquire);
        match state_of(word) {
            BreakerState::Closed => Ok(Ticket {
                generation: generation_of(word),
                kind: TicketKind::Counted,
                started: self.timed_start(),
            }),
            BreakerState::ForcedClosed => Ok(Ticket::untracked()),
            BreakerState::ForcedOpen => Err(self.rejection(BreakerState::ForcedOpen, None)),
            BreakerState::Open | BreakerState::HalfOpen => self.acquire_slow(word),
        }
    }

    #[inline]
    fn record(&self, ticket: Ticket, outcome: CallOutcome) {
        match ticket.kind {
            TicketKind::Counted => self.record_counted(ticket, outcome),
            TicketKind::Probe => self.record_probe(ticket, outcome),
            TicketKind::Untracked => {}
        }
    }

    fn state(&self) -> BreakerState {
        state_of(self.word.load(Ordering::Acquire))
    }

    fn force(&self, state: Option<BreakerState>) {
        match state {
            Some(to) => self.move_to(to, "forced by an operator"),
            None => {
                self.pause_until.store(0, Ordering::Release);
                self.move_to(BreakerState::Closed, "reset by an operator");
            }
        }
    }

    fn paused_for(&self) -> Option<Duration> {
        InProcess::paused_for(self)
    }

    fn subscribe(&self) -> broadcast::Receiver<StateChange> {
        self.events.subscribe()
    }

    fn probe_timeout(&self) -> Duration {
        self.config.probe_timeout
    }

    fn pause(&self, duration: Duration) {
        let until = self.clock.now().saturating_add(nanos(duration)).max(1);
        self.pause_until.fetch_max(until, Ordering::AcqRel);
        tracing::warn!(breaker = %self.name, ms = duration.as_millis() as u64, "provider paused");
    }
}

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;
