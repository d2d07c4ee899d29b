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

mod config;
mod in_process;
mod window;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

pub use config::{BreakerConfig, BreakerConfigError, SlidingWindow};
pub use in_process::InProcess;

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

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;
