//! Adaptive sending rate: when a provider answers "too many requests",
//! failwell slows down instead of stopping.
//!
//! The scheme is the AWS SDKs' *adaptive* retry mode (AWS SDKs and Tools
//! Reference Guide, "Retry behavior"; botocore `retries/adaptive.py`,
//! `retries/bucket.py` and `retries/cubic.py`):
//!
//! - calls take a token from a client-side **token bucket** whose fill rate
//!   is the sending rate (its capacity one second of it, at least one
//!   token);
//! - a throttling answer **cuts** the rate multiplicatively,
//!   `rate = β · W_max` with `β = 0.7`, where `W_max` is the rate the cut
//!   was made at;
//! - every other answer lets the rate **grow back along the CUBIC curve**
//!   of TCP (RFC 9438; Ha, Rhee and Xu, 2008):
//!   `rate(t) = C · (t − K)³ + W_max`, `C = 0.4`,
//!   `K = ∛(W_max · (1 − β) / C)`, `t` the seconds since the cut: fast at
//!   first, flat near `W_max`, then probing above it;
//! - the rate is measured as the SDKs do (calls per half-second bucket,
//!   smoothed with weight 0.8), and the bucket never fills faster than twice
//!   the measured rate, so a recovered limit allows no burst.
//!
//! The limiter is off until the first cut (a provider that never throttles
//! costs one lock per answer, to measure the rate), and turns itself off
//! again once the curve has probed to twice `W_max` and a whole window of
//! answers came without throttling.
//!
//! failwell departs from the SDKs in four ways, each for a reason:
//! - **A cut needs a signal, not one answer.** The SDKs cut on every
//!   throttling answer; a provider that throttles a few random calls (lock
//!   contention, a noisy neighbour) would then drive the rate to its floor.
//!   failwell cuts when at least `cut_ratio` of the last `window` answers
//!   were throttling (by default 10 of 100), or 5 of the last 10: a limit
//!   the sending rate exceeds throttles most calls past it (at a low limit
//!   the second rule sees it within a few calls), random throttling rarely
//!   does.
//! - **One cut per round trip**, as TCP reacts once per window: only
//!   answers to calls sent after the last cut count towards the next one,
//!   so the answers already on their way when the rate was cut do not cut
//!   it again.
//! - **`W_max` is the rate the provider accepted** (the answers of the
//!   window that were not throttling, over the time the window spans), so
//!   the curve flattens at the provider's limit rather than at the rate
//!   that overran it.
//! - **Rates are measured over the last `window` answers**, not in
//!   half-second buckets smoothed over several of them, which lag behind
//!   a change by seconds and, after a quiet spell, read far too low. When
//!   the provider refuses most calls within the first second of answers,
//!   a cut starts from the count of calls it accepted so far, so a first
//!   burst that its bucket took at once does not read as thousands of
//!   calls a second.
//!
//! Calls reserve their turn: the bucket may go into debt by up to
//! `max_wait` of the rate, so each call learns when it may go (and waits
//! that long) and a call whose turn is further away is refused with the
//! time to try again ([`Throttled`]): queued work is deferred without
//! spending an attempt, never dropped. A cut voids the turns booked before
//! it (they book again at the new rate), so calls booked at the old rate do
//! not overrun the provider once more.
//!
//! [`AdaptiveRate`] is the pure state machine (time is an argument);
//! [`Throttle`] shares one between tasks and reads tokio's clock.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::Clock;

/// `β`: the share of `W_max` a cut keeps (AWS SDKs, botocore `cubic.py`).
pub const BETA: f64 = 0.7;
/// The quick throttling signal: this many throttling answers among the
/// last [`QUICK_WINDOW`] (a random 3 % of throttling makes 5 of 10 about
/// once in 200,000 answers).
const QUICK_SIGNAL: usize = 5;
/// See [`QUICK_SIGNAL`].
const QUICK_WINDOW: usize = 10;
/// `C`: how fast the CUBIC curve grows, in calls/s per s³ (botocore
/// `cubic.py`).
pub const SCALE: f64 = 0.4;

/// Whether an answer asks the client to slow down: a `429 Too Many
/// Requests` (RFC 6585 §4), with or without `Retry-After`, or an answer
/// with one of `statuses` and a `Retry-After` (e.g. `503` with
/// `Retry-After`, RFC 9110 §15.6.4 and §10.2.3).
pub fn is_throttling(status: u16, has_retry_after: bool, statuses: &[u16]) -> bool {
    status == 429 || (has_retry_after && statuses.contains(&status))
}

/// An adaptive rate's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThrottleConfig {
    /// Answers the throttling share is counted over, 1–1000. Default 100.
    pub window: u32,
    /// Share of the window's answers that must be throttling to cut the
    /// rate, in (0, 1]. Default 0.1 (10 of 100).
    pub cut_ratio: f64,
    /// The lowest rate, calls per second, 0.01–1,000,000. Default 0.5.
    pub min_rate: f64,
    /// The longest a call waits for its turn, at most an hour; a call whose
    /// turn is further away is refused with [`Throttled`] (zero: a call
    /// never waits, it goes with a free token or is refused). Default 1 s.
    pub max_wait: Duration,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        Self { window: 100, cut_ratio: 0.1, min_rate: 0.5, max_wait: Duration::from_secs(1) }
    }
}

/// Invalid adaptive-rate parameters.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ThrottleConfigError {
    /// `window` outside 1–1000.
    #[error("window must be between 1 and 1000 answers, got {0}")]
    Window(u32),
    /// `cut_ratio` outside (0, 1].
    #[error("cut_ratio must be above 0 and at most 1, got {0}")]
    CutRatio(f64),
    /// `min_rate` outside 0.01–1,000,000 calls per second.
    #[error("min_rate_per_s must be between 0.01 and 1000000 calls per second, got {0}")]
    MinRate(f64),
    /// `max_wait` over an hour.
    #[error("max_wait_ms must be at most 3600000 (an hour), got {0}")]
    MaxWait(u128),
}

impl ThrottleConfig {
    /// Checks the ranges; see [`ThrottleConfigError`].
    pub fn validate(&self) -> Result<(), ThrottleConfigError> {
        if !(1..=1000).contains(&self.window) {
            return Err(ThrottleConfigError::Window(self.window));
        }
        if !(self.cut_ratio > 0.0 && self.cut_ratio <= 1.0) {
            return Err(ThrottleConfigError::CutRatio(self.cut_ratio));
        }
        if !(0.01..=1e6).contains(&self.min_rate) {
            return Err(ThrottleConfigError::MinRate(self.min_rate));
        }
        if self.max_wait > Duration::from_secs(3600) {
            return Err(ThrottleConfigError::MaxWait(self.max_wait.as_millis()));
        }
        Ok(())
    }

    /// Throttling answers in the window that cut the rate:
    /// `⌈cut_ratio × window⌉`, at least 1.
    pub fn cut_after(&self) -> usize {
        ((self.cut_ratio * f64::from(self.window)).ceil() as usize).max(1)
    }
}

/// A call refused because its turn is more than `max_wait` away.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("provider {name:?} is throttled: the next call may go in {} ms", .retry_in.as_millis())]
pub struct Throttled {
    /// The provider (the throttle's name).
    pub name: String,
    /// When the call would have its turn.
    pub retry_in: Duration,
}

/// A call's booked turn ([`AdaptiveRate::reserve`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Turn {
    /// How long until the call may go.
    pub wait: Duration,
    /// When it was booked: the answer's `sent_at`, so a call booked before
    /// a cut never counts towards the next one.
    pub booked_at: Duration,
    /// Cuts made before it was booked ([`AdaptiveRate::holds`]).
    cuts: u64,
}

/// What an answer did to the rate ([`AdaptiveRate::observe`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observation {
    /// The new rate when this answer cut it, calls per second.
    pub cut_to: Option<f64>,
    /// Share of throttling answers among the last `window` answers (all of
    /// them, cut or not; while fewer have come, the missing ones count as
    /// not throttling), in [0, 1]: how persistent the throttling is.
    pub throttled_share: f64,
}

/// The adaptive rate as a pure state machine: every method takes `now`, the
/// time since a fixed origin. See the module docs for the scheme.
#[derive(Clone, Debug)]
pub struct AdaptiveRate {
    config: ThrottleConfig,
    /// Whether calls are limited (after a cut, until the curve is far
    /// above `w_max`).
    enabled: bool,
    /// The bucket's fill rate, calls/s.
    rate: f64,
    /// Tokens in the bucket; negative while calls are booked ahead.
    tokens: f64,
    /// When the bucket was last refilled, s.
    refilled_at: f64,
    /// The rate of the last cut, calls/s.
    w_max: f64,
    /// Seconds from a cut until the curve is back at `w_max`.
    k: f64,
    /// When the rate was last cut, s (negative: never).
    cut_at: f64,
    /// Cuts so far.
    cuts: u64,
    /// The last `window` answers to calls sent since the last cut.
    since_cut: Answers,
    /// The last [`QUICK_WINDOW`] of them.
    quick: Answers,
    /// Answers in a row that were not throttling.
    clean: usize,
    /// The last `window` answers.
    recent: Answers,
    /// When the answers began to come, s: the first answer after a second
    /// or more without one.
    answering_since: f64,
    /// When the last answer came, s (negative: never).
    last_answer_at: f64,
    /// Answers since `answering_since` that were not throttling.
    accepted_since: u64,
}

/// The last answers (at most `cap`): when each came (s) and whether it was
/// throttling, with the count of throttling ones kept as they come and go,
/// so an answer costs no scan.
#[derive(Clone, Debug)]
struct Answers {
    entries: VecDeque<(f64, bool)>,
    cap: usize,
    throttled: usize,
}

impl Answers {
    fn new(cap: usize) -> Self {
        Self { entries: VecDeque::with_capacity(cap), cap, throttled: 0 }
    }

    fn push(&mut self, at: f64, throttled: bool) {
        if self.entries.len() == self.cap
            && let Some((_, gone)) = self.entries.pop_front()
        {
            self.throttled -= usize::from(gone);
        }
        self.entries.push_back((at, throttled));
        self.throttled += usize::from(throttled);
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.throttled = 0;
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    /// When the oldest answer came, s.
    fn since(&self) -> Option<f64> {
        self.entries.front().map(|(at, _)| *at)
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// `secs` seconds as a duration, saturating (never a panic on a huge or
/// odd value).
fn duration(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs).unwrap_or(if secs > 0.0 { Duration::MAX } else { Duration::ZERO })
}

impl AdaptiveRate {
    /// A rate that limits nothing yet. Errors when `config` is invalid.
    pub fn new(config: ThrottleConfig, now: Duration) -> Result<Self, ThrottleConfigError> {
        config.validate()?;
        let now = secs(now);
        Ok(Self {
            config,
            enabled: false,
            rate: f64::INFINITY,
            tokens: 0.0,
            refilled_at: now,
            w_max: 0.0,
            k: 0.0,
            cut_at: f64::NEG_INFINITY,
            cuts: 0,
            clean: 0,
            since_cut: Answers::new(config.window as usize),
            quick: Answers::new(QUICK_WINDOW),
            recent: Answers::new(config.window as usize),
            answering_since: f64::NEG_INFINITY,
            last_answer_at: f64::NEG_INFINITY,
            accepted_since: 0,
        })
    }

    /// The sending rate in calls per second, `None` while nothing is
    /// limited.
    pub fn rate(&self) -> Option<f64> {
        self.enabled.then_some(self.rate)
    }

    /// Books a call's turn at `now`: `Ok(turn)`, with the time until the
    /// call may go (zero when a token is free), or `Err(retry_in)` when its
    /// turn is more than `max_wait` away (nothing is booked).
    pub fn reserve(&mut self, now: Duration) -> Result<Turn, Duration> {
        let cuts = self.cuts;
        let turn = |wait| Turn { wait, booked_at: now, cuts };
        if !self.enabled {
            return Ok(turn(Duration::ZERO));
        }
        let wait = self.wait(secs(now));
        if wait > secs(self.config.max_wait) {
            return Err(duration(wait - secs(self.config.max_wait)).max(Duration::from_millis(1)));
        }
        self.tokens -= 1.0;
        Ok(turn(duration(wait)))
    }

    /// Whether `turn` still holds: no cut since it was booked. A turn a
    /// cut voided is booked again, at the new rate.
    pub fn holds(&self, turn: &Turn) -> bool {
        turn.cuts == self.cuts
    }

    /// How long until a call could book its turn (`None`: now).
    pub fn busy_for(&mut self, now: Duration) -> Option<Duration> {
        if !self.enabled {
            return None;
        }
        let over = self.wait(secs(now)) - secs(self.config.max_wait);
        (over > 0.0).then(|| duration(over))
    }

    /// Takes the answer at `now` to a call whose turn was booked at
    /// `sent_at` ([`Turn::booked_at`]): `throttled` when the provider said
    /// to slow down. Cuts the rate on a throttling
    /// signal, else lets it grow along the curve.
    pub fn observe(&mut self, sent_at: Duration, now: Duration, throttled: bool) -> Observation {
        let (sent_at, now) = (secs(sent_at), secs(now));
        let window = self.config.window as usize;
        self.recent.push(now, throttled);
        if now - self.last_answer_at >= 1.0 {
            self.answering_since = now;
            self.accepted_since = 0;
        }
        self.last_answer_at = now;
        self.accepted_since += u64::from(!throttled);
        let throttled_share = self.recent.throttled as f64 / window as f64;
        self.clean = if throttled { 0 } else { self.clean.saturating_add(1) };
        let mut cut_to = None;
        if sent_at >= self.cut_at {
            self.since_cut.push(now, throttled);
            self.quick.push(now, throttled);
            if throttled && self.signal() {
                cut_to = Some(self.cut(now, self.refusing_most()));
            }
        }
        if cut_to.is_none() && self.enabled && !throttled {
            let t = now - self.cut_at;
            let curve = SCALE * (t - self.k).powi(3) + self.w_max;
            if curve >= 2.0 * self.w_max && self.clean >= window {
                // A whole window without throttling, the curve far above
                // the rate of the last cut: the limit is gone.
                self.enabled = false;
                self.rate = f64::INFINITY;
            } else {
                self.set_rate(curve.min(2.0 * self.answered(now)), now);
            }
        }
        Observation { cut_to, throttled_share }
    }

    /// Whether the answers to calls sent since the last cut are a
    /// throttling signal: `cut_after` of the last `window`, or
    /// [`QUICK_SIGNAL`] of the last [`QUICK_WINDOW`] (a low limit throttles
    /// most calls past it, long before a whole window has been answered).
    fn signal(&self) -> bool {
        self.since_cut.throttled >= self.config.cut_after() || self.refusing_most()
    }

    /// The quick signal: [`QUICK_SIGNAL`] of the last [`QUICK_WINDOW`]
    /// answers were throttling, so the provider refuses most calls.
    fn refusing_most(&self) -> bool {
        self.quick.throttled >= QUICK_SIGNAL
    }

    /// The rate of answers, per second: over the time the window spans,
    /// or over the last second when that is higher (after a quiet spell
    /// the window still spans it).
    fn answered(&self, now: f64) -> f64 {
        let last_second =
            self.recent.entries.iter().rev().take_while(|(at, _)| now - at < 1.0).count() as f64;
        self.rate_of(self.recent.len(), now).max(last_second)
    }

    /// Another process sharing the provider cut its rate at `now`: this
    /// one cuts its own the same way (to `β` of what the provider accepted
    /// from it), unless it cut within the last second itself (the same
    /// throttling, seen here too). Returns the new rate, if cut.
    pub fn cut_elsewhere(&mut self, now: Duration) -> Option<f64> {
        let now = secs(now);
        (now - self.cut_at >= 1.0).then(|| self.cut(now, false))
    }

    /// Cuts the rate at `now` to `β` of what the provider accepted (no
    /// more than the rate in force), and starts the curve again from it.
    /// What it accepted is measured over the window, with one exception:
    /// when the provider refuses most calls (`refused_most`, the quick
    /// signal) within the first second of answers (after a second or more
    /// without one), it is the count of calls accepted so far, per that
    /// second. Such a first burst, answered within a few milliseconds until
    /// a token bucket's burst capacity ran out, says how many calls the
    /// provider took, not how many it takes a second: a rate measured over
    /// those milliseconds would start the curve so high that it took a cut
    /// per round trip, each costing throttled answers, to come down.
    /// Scattered throttling (the window's signal) says nothing of the
    /// provider's speed, and the window's rate stands. Returns the new
    /// rate.
    fn cut(&mut self, now: f64, refused_most: bool) -> f64 {
        let accepted = if refused_most && now - self.answering_since < 1.0 {
            self.accepted_since as f64
        } else {
            self.rate_of(self.recent.len() - self.recent.throttled, now)
        };
        let accepted = if self.enabled { accepted.min(self.rate) } else { accepted };
        self.w_max = accepted.max(self.config.min_rate);
        self.k = (self.w_max * (1.0 - BETA) / SCALE).cbrt();
        self.cut_at = now;
        self.since_cut.clear();
        self.quick.clear();
        self.enabled = true;
        // Turns booked at the old rate are void (`holds`): booked again.
        self.cuts += 1;
        self.tokens = self.tokens.max(0.0);
        self.set_rate(self.w_max * BETA, now);
        self.rate
    }

    /// Changes the fill rate at `now`. Turns already booked keep their
    /// times: a debt of tokens is a time, and stays that time at the new
    /// rate.
    fn set_rate(&mut self, rate: f64, now: f64) {
        self.refill(now);
        let rate = rate.max(self.config.min_rate);
        if self.tokens < 0.0 && self.rate.is_finite() {
            self.tokens *= rate / self.rate;
        }
        self.rate = rate;
        self.tokens = self.tokens.min(self.capacity());
    }

    /// `count` answers over the time the last `window` answers span, per
    /// second (the span at least 1 ms).
    fn rate_of(&self, count: usize, now: f64) -> f64 {
        count as f64 / (now - self.recent.since().unwrap_or(now)).max(0.001)
    }

    /// Seconds from `now` until the next free token (the bucket refilled).
    fn wait(&mut self, now: f64) -> f64 {
        self.refill(now);
        if self.tokens >= 1.0 { 0.0 } else { (1.0 - self.tokens) / self.rate }
    }

    fn capacity(&self) -> f64 {
        self.rate.max(1.0)
    }

    fn refill(&mut self, now: f64) {
        if now > self.refilled_at {
            if self.rate.is_finite() {
                self.tokens = (self.tokens + (now - self.refilled_at) * self.rate).min(self.capacity());
            }
            self.refilled_at = now;
        }
    }
}

/// A provider's adaptive rate shared by every task calling it; cheap to
/// clone (clones share the rate). Reads tokio's clock, so tests pause and
/// advance time. Metrics: `failwell_throttle_calls_per_second{provider}`
/// (0 while nothing is limited) and `failwell_throttle_cuts_total{provider}`.
#[derive(Clone)]
pub struct Throttle {
    inner: Arc<ThrottleInner>,
}

struct ThrottleInner {
    name: String,
    clock: Clock,
    state: Mutex<AdaptiveRate>,
    rate: metrics::Gauge,
    cuts: metrics::Counter,
}

impl fmt::Debug for Throttle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttle").field("name", &self.inner.name).field("rate", &self.rate()).finish()
    }
}

impl Throttle {
    /// An adaptive rate named `name` (for logs, metrics and
    /// [`Throttled`]). Errors when `config` is invalid.
    pub fn new(name: &str, config: ThrottleConfig) -> Result<Self, ThrottleConfigError> {
        let clock = Clock::new();
        let state = AdaptiveRate::new(config, Duration::ZERO)?;
        let rate = metrics::gauge!("failwell_throttle_calls_per_second", "provider" => name.to_owned());
        rate.set(0.0);
        Ok(Self {
            inner: Arc::new(ThrottleInner {
                name: name.to_owned(),
                clock,
                state: Mutex::new(state),
                rate,
                cuts: metrics::counter!("failwell_throttle_cuts_total", "provider" => name.to_owned()),
            }),
        })
    }

    fn now(&self) -> Duration {
        Duration::from_nanos(self.inner.clock.now())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, AdaptiveRate> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sending rate in calls per second, `None` while nothing is
    /// limited.
    pub fn rate(&self) -> Option<f64> {
        self.state().rate()
    }

    /// Books a call's turn: the wait until it may go, or [`Throttled`] when
    /// its turn is more than `max_wait` away (nothing booked). After the
    /// wait, check [`holds`](Self::holds): a cut meanwhile voids the turn.
    pub fn reserve(&self) -> Result<Turn, Throttled> {
        let now = self.now();
        self.state().reserve(now).map_err(|retry_in| Throttled { name: self.inner.name.clone(), retry_in })
    }

    /// How long until a call could book its turn (`None`: now). Books
    /// nothing.
    pub fn busy_for(&self) -> Option<Duration> {
        let now = self.now();
        self.state().busy_for(now)
    }

    /// Another process cut its rate for this provider: cut this one's too
    /// ([`AdaptiveRate::cut_elsewhere`]).
    pub fn cut_elsewhere(&self) {
        let now = self.now();
        let (cut, rate) = {
            let mut state = self.state();
            (state.cut_elsewhere(now), state.rate())
        };
        self.inner.rate.set(rate.unwrap_or(0.0));
        if let Some(to) = cut {
            self.inner.cuts.increment(1);
            tracing::info!(provider = %self.inner.name, rate_per_s = to, "sending rate cut: another process was throttled");
        }
    }

    /// Whether `turn` still holds (no cut since it was booked).
    pub fn holds(&self, turn: &Turn) -> bool {
        self.state().holds(turn)
    }

    /// Takes the answer to a call whose turn was booked at `sent_at`
    /// ([`Turn::booked_at`]); see [`AdaptiveRate::observe`].
    pub fn observe(&self, sent_at: Duration, throttled: bool) -> Observation {
        let now = self.now();
        let (observation, rate) = {
            let mut state = self.state();
            let observation = state.observe(sent_at, now, throttled);
            (observation, state.rate())
        };
        self.inner.rate.set(rate.unwrap_or(0.0));
        if let Some(to) = observation.cut_to {
            self.inner.cuts.increment(1);
            tracing::info!(provider = %self.inner.name, rate_per_s = to, "sending rate cut after throttling");
        }
        observation
    }
}

#[cfg(test)]
mod tests;
