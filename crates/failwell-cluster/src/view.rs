//! [`SharedBreaker`]: one process's local view of a shared breaker, the
//! [`BreakerStore`] the policy layers call.
//!
//! The view answers every call from memory: while the breaker is closed,
//! not paused and no failure is counted anywhere, taking a permit is one
//! atomic load and a success is one more (no lock, no clock read, no round
//! trip). Everything else goes to the cluster's driver task through a
//! bounded channel and never waits for it:
//!
//! - a **failure** is reported as it happens; from the first failure the
//!   process knows of (its own, or one published by another process) until
//!   a success anywhere clears the count, the process lets **one call at a
//!   time** through (the others are refused for 20 ms), so a dead provider
//!   gets at most `failures` calls plus about one per process before the
//!   whole cluster has the breaker open;
//! - when the open period ends, the first call asks for the cluster-wide
//!   **probe lease**; only the process that wins it sends the probe, the
//!   others wait for its result;
//! - a **pause** is written locally at once and shared;
//! - a **cut of the sending rate** after throttling (`share_throttle`) is
//!   counted in the record, and every other process whose view
//!   [`follow`s](SharedBreaker::follow) the provider's adaptive rate cuts
//!   its own when it learns of it: once per cut, never per call.
//!
//! While the cluster's store cannot be reached (the driver marks every view
//! *degraded*), the view keeps the cluster's last refusal until it runs out
//! (an open period, another process's probe lease, forced open), then
//! answers from an [`InProcess`] breaker with the provider's own rules,
//! started fresh; when the store is back, the shared record is read again
//! and takes over.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use failwell_policy::{
    BreakerConfig, BreakerConfigError, BreakerOpen, BreakerState, BreakerStore, CallOutcome, InProcess,
    StateChange, Throttle, Ticket, announce,
};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use crate::Command;
use crate::record::{Event, Phase, ProbeResult, Rules, Snapshot};

/// `Ticket::started` bit of a ticket issued from the shared record (a
/// degraded-mode ticket comes from the [`InProcess`] breaker, whose
/// `started` is a clock reading far below it).
const SHARED: u64 = 1 << 63;
/// `Ticket::started` bit of the one call a suspicious process lets through.
const CAREFUL: u64 = 1 << 62;
/// Word flag: the fast path does not apply (not closed, paused, degraded).
const SLOW: u64 = 1 << 32;
/// Word flag: failures are counted somewhere; successes are reported.
const SUSPECT: u64 = 1 << 33;
/// How long a refused call waits while another call of this process is
/// the careful one, or while the probe lease is asked for.
const SHORT_WAIT: Duration = Duration::from_millis(20);

/// The local view of one shared breaker (see the module docs). Built by
/// [`crate::Cluster::breaker`]; use it as the store of a
/// [`failwell_policy::CircuitBreaker`].
#[derive(Clone)]
pub struct SharedBreaker {
    view: Arc<View>,
}

impl fmt::Debug for SharedBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBreaker").field("name", &self.view.name).field("state", &self.state()).finish()
    }
}

pub(crate) struct View {
    pub(crate) name: Arc<str>,
    pub(crate) rules: Rules,
    owner: Arc<str>,
    probe_timeout: Duration,
    /// Low 32 bits: the generation; above: [`SLOW`], [`SUSPECT`].
    word: AtomicU64,
    inner: Mutex<Inner>,
    /// The provider's own rules: fed every outcome while connected (a
    /// trip opens the shared breaker everywhere), the gate while degraded.
    local: InProcess,
    commands: mpsc::Sender<Command>,
    events: broadcast::Sender<StateChange>,
    rejected: metrics::Counter,
    /// The provider's adaptive rate, cut when another process cuts its own.
    throttle: OnceLock<Throttle>,
}

struct Inner {
    epoch: i64,
    generation: u64,
    phase: Phase,
    open_until: Instant,
    probe_mine: bool,
    probe_taken: bool,
    probe_until: Instant,
    pause_until: Option<Instant>,
    suspect: bool,
    careful_busy: bool,
    claiming: bool,
    degraded: bool,
    /// The local rules tripped and the store was told.
    local_tripped: bool,
    /// The cluster's count of rate cuts this view has taken in (`None`:
    /// none read yet; the cuts before it are history).
    throttle_seq: Option<u64>,
}

impl SharedBreaker {
    pub(crate) fn new(
        name: &str,
        config: BreakerConfig,
        rules: Rules,
        owner: Arc<str>,
        commands: mpsc::Sender<Command>,
    ) -> Result<Self, BreakerConfigError> {
        let now = Instant::now();
        let view = View {
            name: Arc::from(name),
            rules,
            owner,
            probe_timeout: config.probe_timeout,
            word: AtomicU64::new(SLOW),
            inner: Mutex::new(Inner {
                epoch: 0,
                generation: 0,
                phase: Phase::Closed,
                open_until: now,
                probe_mine: false,
                probe_taken: false,
                probe_until: now,
                pause_until: None,
                suspect: false,
                careful_busy: false,
                claiming: false,
                degraded: true,
                local_tripped: false,
                throttle_seq: None,
            }),
            local: InProcess::new(name, config)?,
            commands,
            events: broadcast::channel(64).0,
            rejected: metrics::counter!("failwell_breaker_rejected_total", "breaker" => name.to_owned()),
            throttle: OnceLock::new(),
        };
        Ok(Self { view: Arc::new(view) })
    }

    pub(crate) fn view(&self) -> &Arc<View> {
        &self.view
    }

    /// Cuts `throttle` whenever another process of the cluster cuts its
    /// sending rate for this provider (a second call is ignored: one rate
    /// per provider).
    pub fn follow(&self, throttle: Throttle) {
        let _ = self.view.throttle.set(throttle);
    }

    /// Whether this view answers from its in-process fallback because the
    /// cluster's store cannot be reached.
    pub fn degraded(&self) -> bool {
        self.view.lock().degraded
    }
}

impl View {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `event` to the driver; false when the channel is full (the
    /// event is dropped, counted) or closed.
    fn send(self: &Arc<Self>, event: Event) -> bool {
        let sent = self.commands.try_send(Command { view: self.clone(), event }).is_ok();
        if !sent {
            metrics::counter!("failwell_cluster_dropped_total", "breaker" => self.name.to_string())
                .increment(1);
        }
        sent
    }

    /// Rewrites the fast-path word from `inner`.
    fn publish(&self, inner: &Inner) {
        let slow = inner.degraded || inner.phase != Phase::Closed || inner.pause_until.is_some();
        let word = (inner.generation & u64::from(u32::MAX))
            | if slow { SLOW } else { 0 }
            | if inner.suspect { SUSPECT } else { 0 };
        self.word.store(word, Ordering::Release);
    }

    fn state_of(&self, inner: &Inner) -> BreakerState {
        if inner.degraded && Self::last_known_refusal(inner, Instant::now()).is_none() {
            self.local.state()
        } else {
            inner.phase.state()
        }
    }

    fn refuse(&self, state: BreakerState, retry_in: Option<Duration>) -> BreakerOpen {
        self.rejected.increment(1);
        BreakerOpen { breaker: self.name.clone(), state, retry_in, paused: false }
    }

    fn announce(&self, from: BreakerState, to: BreakerState, reason: String) {
        if from != to {
            let change = StateChange { breaker: self.name.clone(), from, to, at: Instant::now(), reason };
            announce(&self.events, change);
        }
    }

    fn claim(self: &Arc<Self>, inner: &mut Inner) {
        if !inner.claiming {
            inner.claiming = self.send(Event::Claim { owner: self.owner.to_string() });
        }
    }

    fn try_acquire_slow(self: &Arc<Self>) -> Result<Ticket, BreakerOpen> {
        let mut inner = self.lock();
        let now = Instant::now();
        if let Some(until) = inner.pause_until {
            if now < until {
                let state = self.state_of(&inner);
                return Err(BreakerOpen { paused: true, ..self.refuse(state, Some(until - now)) });
            }
            inner.pause_until = None;
            self.publish(&inner);
        }
        // What the cluster last said holds until it runs out, also while
        // degraded: a provider the cluster found dead is not tried again
        // by every process that loses the store.
        if let Some((state, retry_in)) = Self::last_known_refusal(&inner, now) {
            return Err(self.refuse(state, retry_in));
        }
        if inner.degraded {
            drop(inner);
            return self.local.try_acquire();
        }
        let generation = inner.generation as u32;
        match inner.phase {
            Phase::Closed if !inner.suspect => Ok(Ticket::counted(generation, SHARED)),
            Phase::Closed if inner.careful_busy => Err(self.refuse(BreakerState::Closed, Some(SHORT_WAIT))),
            Phase::Closed => {
                inner.careful_busy = true;
                Ok(Ticket::counted(generation, SHARED | CAREFUL))
            }
            Phase::ForcedClosed => Ok(Ticket::untracked()),
            Phase::HalfOpen if inner.probe_mine && !inner.probe_taken => {
                inner.probe_taken = true;
                self.send(Event::Probe { generation: inner.generation, result: ProbeResult::Started });
                Ok(Ticket::probe(generation, SHARED))
            }
            // This process's probe is out: its result comes soon.
            Phase::HalfOpen if inner.probe_mine => Err(self.refuse(BreakerState::HalfOpen, Some(SHORT_WAIT))),
            // The open period is over, or another process's lease ran out
            // (the store passes on a lease whose probe never went out, and
            // counts one that went out as failed): ask for it.
            phase @ (Phase::Open | Phase::HalfOpen) => {
                self.claim(&mut inner);
                Err(self.refuse(phase.state(), Some(SHORT_WAIT)))
            }
            // Refused above (`last_known_refusal`).
            Phase::ForcedOpen => Err(self.refuse(BreakerState::ForcedOpen, None)),
        }
    }

    /// The refusal the last shared state implies until it runs out (open
    /// until its end, another process's probe until its lease ends, forced
    /// open), if any: in force whether or not the store can be reached.
    /// Reads only: the state and the wait (`None`: until an operator acts).
    fn last_known_refusal(inner: &Inner, now: Instant) -> Option<(BreakerState, Option<Duration>)> {
        match inner.phase {
            Phase::Open if now < inner.open_until => Some((BreakerState::Open, Some(inner.open_until - now))),
            Phase::HalfOpen if !inner.probe_mine && now < inner.probe_until => {
                Some((BreakerState::HalfOpen, Some(inner.probe_until - now)))
            }
            Phase::ForcedOpen => Some((BreakerState::ForcedOpen, None)),
            _ => None,
        }
    }

    fn record_slow(self: &Arc<Self>, ticket: Ticket, outcome: CallOutcome) {
        let mut inner = self.lock();
        let current = ticket.generation() == inner.generation as u32;
        // The careful call's slot is free again once its outcome is known
        // to the store: at once for a success, when the store has counted
        // it for a failure (`failures_counted`), so a process never has
        // more than one failure the store has not counted.
        if ticket.started() & CAREFUL != 0 && current && outcome != CallOutcome::Failure {
            inner.careful_busy = false;
        }
        if inner.degraded || !current {
            return;
        }
        let generation = inner.generation;
        if ticket.is_probe() {
            let result = match outcome {
                CallOutcome::Success => ProbeResult::Success,
                CallOutcome::Failure => ProbeResult::Failure,
                CallOutcome::Ignored => ProbeResult::Release,
            };
            if result == ProbeResult::Success {
                // Close at once here (the store bumps the generation the
                // same way); the others hear it from the store.
                inner.phase = Phase::Closed;
                inner.generation += 1;
                inner.suspect = false;
                self.local_counts_afresh(&mut inner, "shared: probe succeeded");
                self.publish(&inner);
                self.announce(BreakerState::HalfOpen, BreakerState::Closed, "probe succeeded".into());
            }
            self.send(Event::Probe { generation, result });
            return;
        }
        self.local.observe(outcome);
        match outcome {
            CallOutcome::Failure => {
                if !inner.suspect {
                    inner.suspect = true;
                    self.publish(&inner);
                }
                if !self.send(Event::Failures { generation, count: 1 }) {
                    inner.careful_busy = false;
                }
                if !inner.local_tripped && self.local.state() == BreakerState::Open {
                    // The provider's own rules (e.g. its failure rate) say
                    // stop: stop everywhere.
                    inner.local_tripped = self.send(Event::Trip { generation });
                }
            }
            CallOutcome::Success if inner.suspect => {
                self.send(Event::Success { generation });
            }
            CallOutcome::Success | CallOutcome::Ignored => {}
        }
    }

    /// Takes in what the store said (the driver calls it only while the
    /// store is reachable). A degraded view (the store was unreachable, or
    /// the view is new) takes the snapshot as the truth and leaves its
    /// fallback; otherwise a snapshot older than the view's is ignored
    /// (pub/sub and replies can cross).
    pub(crate) fn apply(&self, snapshot: &Snapshot) {
        let mut inner = self.lock();
        let from = self.state_of(&inner);
        // A record made again (the store lost it: deleted, evicted,
        // flushed) counts from zero: take it as it is.
        if inner.degraded || snapshot.epoch != inner.epoch {
            // The shared record decides from now on; the local rules count
            // afresh (they may have tripped while they were the gate).
            self.local_counts_afresh(&mut inner, "shared state reachable: the cluster decides");
            inner.degraded = false;
            if snapshot.epoch != inner.epoch && inner.throttle_seq.is_some() {
                // A record made since this view read one (the first event
                // made it, or the store lost the old one): every cut it
                // counts is news.
                inner.throttle_seq = Some(0);
            }
            inner.epoch = snapshot.epoch;
            inner.generation = snapshot.generation;
            inner.probe_taken = false;
            inner.careful_busy = false;
            inner.claiming = false;
        } else if snapshot.generation < inner.generation {
            return;
        }
        self.take(&mut inner, snapshot);
        let to = self.state_of(&inner);
        self.announce(from, to, reason(snapshot));
    }

    /// The store has counted this view's failures (the answer to its
    /// report has been applied): a careful call may go out again.
    pub(crate) fn failures_counted(&self) {
        self.lock().careful_busy = false;
    }

    /// The provider's own rules count afresh: closed, and free to trip
    /// (and tell the store) again.
    fn local_counts_afresh(&self, inner: &mut Inner, reason: &str) {
        inner.local_tripped = false;
        if self.local.state() != BreakerState::Closed {
            self.local.reset(reason);
        }
    }

    /// The answer to this view's trip has been applied: if the store did
    /// not open (the trip came from an older period), the local rules count
    /// afresh.
    pub(crate) fn trip_answered(&self) {
        let mut inner = self.lock();
        if inner.phase == Phase::Closed && inner.local_tripped {
            self.local_counts_afresh(&mut inner, "shared: the trip came from an older period");
        }
    }

    /// The answer to this view's claim has been applied: it may claim again.
    pub(crate) fn claim_answered(&self) {
        self.lock().claiming = false;
    }

    fn take(&self, inner: &mut Inner, snapshot: &Snapshot) {
        let now = Instant::now();
        if snapshot.generation != inner.generation {
            inner.probe_taken = false;
            inner.careful_busy = false;
            inner.claiming = false;
        }
        inner.phase = snapshot.phase;
        inner.open_until = now + Duration::from_millis(snapshot.open_ms);
        inner.probe_mine = snapshot.phase == Phase::HalfOpen && *snapshot.probe_owner == *self.owner;
        inner.probe_until = now + Duration::from_millis(snapshot.probe_ms);
        if snapshot.pause_ms > 0 {
            let until = now + Duration::from_millis(snapshot.pause_ms);
            if inner.pause_until.is_none_or(|u| u + SHORT_WAIT < until) {
                tracing::warn!(breaker = %self.name, ms = snapshot.pause_ms, "provider paused by the cluster");
            }
            inner.pause_until = Some(inner.pause_until.map_or(until, |u| u.max(until)));
        } else if snapshot.generation > inner.generation {
            // A newer record with no pause (an operator's reset): a local
            // pause is one the store has already seen or one set while
            // degraded.
            inner.pause_until = None;
        }
        if snapshot.phase == Phase::Closed && snapshot.generation > inner.generation {
            self.local_counts_afresh(inner, "shared: closed");
        }
        if let Some(seen) = inner.throttle_seq
            && snapshot.throttle_seq > seen
            && *snapshot.throttle_owner != *self.owner
            && let Some(throttle) = self.throttle.get()
        {
            throttle.cut_elsewhere();
        }
        inner.throttle_seq = Some(inner.throttle_seq.unwrap_or(0).max(snapshot.throttle_seq));
        inner.generation = snapshot.generation;
        inner.suspect = snapshot.phase == Phase::Closed && snapshot.failures > 0;
        self.publish(inner);
    }

    /// The store cannot be reached: answer from the in-process breaker,
    /// started fresh.
    pub(crate) fn degrade(&self) {
        let mut inner = self.lock();
        if !inner.degraded {
            let from = self.state_of(&inner);
            inner.degraded = true;
            inner.local_tripped = false;
            self.publish(&inner);
            let to = self.state_of(&inner);
            self.announce(from, to, "shared state unreachable: in-process fallback".into());
        }
    }
}

fn reason(snapshot: &Snapshot) -> String {
    match snapshot.phase {
        Phase::Open => format!("shared: open for {} ms", snapshot.open_ms),
        Phase::HalfOpen => format!("shared: probe lease held by {}", snapshot.probe_owner),
        Phase::Closed => "shared: closed".into(),
        Phase::ForcedOpen | Phase::ForcedClosed => "shared: forced by an operator".into(),
    }
}

impl BreakerStore for SharedBreaker {
    fn name(&self) -> &Arc<str> {
        &self.view.name
    }

    #[inline]
    fn try_acquire(&self) -> Result<Ticket, BreakerOpen> {
        let word = self.view.word.load(Ordering::Acquire);
        if word >> 32 == 0 {
            return Ok(Ticket::counted(word as u32, SHARED));
        }
        self.view.try_acquire_slow()
    }

    #[inline]
    fn record(&self, ticket: Ticket, outcome: CallOutcome) {
        if ticket.is_untracked() {
            return;
        }
        if ticket.started() & SHARED == 0 {
            if self.view.lock().degraded {
                self.view.local.record(ticket, outcome);
            }
            return;
        }
        if outcome == CallOutcome::Success
            && !ticket.is_probe()
            && ticket.started() & CAREFUL == 0
            && self.view.word.load(Ordering::Acquire) & SUSPECT == 0
        {
            self.view.local.observe(outcome);
            return;
        }
        self.view.record_slow(ticket, outcome);
    }

    fn state(&self) -> BreakerState {
        let inner = self.view.lock();
        self.view.state_of(&inner)
    }

    fn force(&self, state: Option<BreakerState>) {
        let phase = match state {
            Some(BreakerState::ForcedOpen) => Some(Phase::ForcedOpen),
            Some(BreakerState::ForcedClosed) => Some(Phase::ForcedClosed),
            _ => None,
        };
        self.view.local.force(phase.map(Phase::state));
        let mut inner = self.view.lock();
        let from = self.view.state_of(&inner);
        if phase.is_none() {
            inner.pause_until = None;
        }
        if !inner.degraded {
            inner.phase = phase.unwrap_or(Phase::Closed);
            inner.generation += 1;
            inner.suspect = false;
            inner.probe_mine = false;
            self.view.send(Event::Force(phase));
        }
        self.view.publish(&inner);
        let to = self.view.state_of(&inner);
        self.view.announce(from, to, "forced by an operator".into());
    }

    fn subscribe(&self) -> broadcast::Receiver<StateChange> {
        self.view.events.subscribe()
    }

    fn probe_timeout(&self) -> Duration {
        self.view.probe_timeout
    }

    fn peek(&self) -> Option<Option<Duration>> {
        if self.view.word.load(Ordering::Acquire) >> 32 == 0 {
            return None;
        }
        let inner = self.view.lock();
        let now = Instant::now();
        if let Some(until) = inner.pause_until.filter(|u| now < *u) {
            return Some(Some(until - now));
        }
        if let Some((_, retry_in)) = View::last_known_refusal(&inner, now) {
            return Some(retry_in);
        }
        if inner.degraded {
            drop(inner);
            return self.view.local.peek();
        }
        // This process's probe is out; anything else lets a call through
        // or asks for the probe lease (an open period over, another
        // process's lease run out).
        (inner.phase == Phase::HalfOpen && inner.probe_mine && inner.probe_taken).then_some(Some(SHORT_WAIT))
    }

    fn paused_for(&self) -> Option<Duration> {
        let now = Instant::now();
        self.view.lock().pause_until.filter(|u| now < *u).map(|u| u - now)
    }

    fn share_throttle(&self) {
        if !self.view.lock().degraded {
            self.view.send(Event::Throttle { owner: self.view.owner.to_string() });
        }
    }

    fn pause(&self, duration: Duration) {
        let mut inner = self.view.lock();
        let until = Instant::now() + duration;
        inner.pause_until = Some(inner.pause_until.map_or(until, |u| u.max(until)));
        self.view.publish(&inner);
        tracing::warn!(breaker = %self.view.name, ms = duration.as_millis() as u64, "provider paused");
        if !inner.degraded {
            self.view.send(Event::Pause { ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX) });
        }
    }
}
