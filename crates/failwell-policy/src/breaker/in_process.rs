//! The breaker's state in this process ([`InProcess`]): one atomic word
//! for the fast path, a mutex for the rest.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;

use super::window::{CountWindow, FAILED, SLOW, TimeWindow, Window};
use super::*;
use crate::clock::{Clock, nanos};

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
