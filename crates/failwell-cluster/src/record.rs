//! The shared state of one breaker and its transitions: what the Redis
//! script ([`crate::redis`]) and the PostgreSQL transaction
//! ([`crate::postgres`]) do atomically on the server, as one pure function
//! ([`Record::apply`]). The Lua script is the same rules written for Redis;
//! a property test runs both on the same events and compares them.
//!
//! Times are milliseconds since the Unix epoch on the *server's* clock (Redis
//! `TIME`, PostgreSQL `clock_timestamp()`), so processes with different
//! clocks agree; what goes back to a process is relative (`open_ms`: time
//! left), and each process turns it into a deadline on its own clock.

use std::time::Duration;

use failwell_policy::{BreakerConfig, BreakerState};
use serde::{Deserialize, Serialize};

/// The shared rules of one breaker: the cluster-wide trip rule and the open
/// and probe timing of the provider's [`BreakerConfig`].
#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    /// Open after this many failures anywhere in the cluster with no
    /// success in between, within `window_ms` (≥ 1).
    pub failures: u32,
    /// The sliding window of the failure count, ms (≥ 1).
    pub window_ms: u64,
    /// A half-open probe lease expires after this (the probe counts as
    /// failed), ms.
    pub probe_timeout_ms: u64,
    /// The first open period, ms.
    pub open_for_ms: u64,
    /// The open period grows by this factor on each trip in a row (≥ 1).
    pub open_multiplier: f64,
    /// The longest open period, ms.
    pub max_open_for_ms: u64,
}

impl Rules {
    /// The cluster rule `failures` within `window`, with the open and probe
    /// timing of `config`.
    pub fn new(config: &BreakerConfig, failures: u32, window: Duration) -> Self {
        Self {
            failures: failures.max(1),
            window_ms: millis(window).max(1),
            probe_timeout_ms: millis(config.probe_timeout),
            open_for_ms: millis(config.open_for),
            open_multiplier: config.open_multiplier,
            max_open_for_ms: millis(config.max_open_for),
        }
    }

    /// The open period after `trips` trips in a row (≥ 1), ms:
    /// `open_for × multiplier^(trips − 1)`, capped at `max_open_for`, as
    /// [`BreakerConfig::open_period`].
    pub fn open_ms(&self, trips: u32) -> u64 {
        let factor = self.open_multiplier.powi(trips.saturating_sub(1).min(1_000) as i32);
        let ms = (self.open_for_ms as f64 * factor).floor();
        if ms.is_finite() && ms < self.max_open_for_ms as f64 { ms as u64 } else { self.max_open_for_ms }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A breaker's phase in the shared record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Calls pass; failures are counted.
    #[default]
    Closed,
    /// Calls are refused until `open_ms` has passed, then one process wins
    /// the probe lease.
    Open,
    /// One process (`probe_owner`) holds the probe lease.
    HalfOpen,
    /// Refused until an operator resets it.
    ForcedOpen,
    /// Let through, not counted, until an operator resets it.
    ForcedClosed,
}

impl Phase {
    /// The wire code (Redis hash field, PostgreSQL column).
    pub fn code(self) -> i16 {
        match self {
            Phase::Closed => 0,
            Phase::Open => 1,
            Phase::HalfOpen => 2,
            Phase::ForcedOpen => 3,
            Phase::ForcedClosed => 4,
        }
    }

    /// The phase of a wire code; unknown codes read as closed.
    pub fn from_code(code: i64) -> Self {
        match code {
            1 => Phase::Open,
            2 => Phase::HalfOpen,
            3 => Phase::ForcedOpen,
            4 => Phase::ForcedClosed,
            _ => Phase::Closed,
        }
    }

    /// The breaker state this phase is.
    pub fn state(self) -> BreakerState {
        match self {
            Phase::Closed => BreakerState::Closed,
            Phase::Open => BreakerState::Open,
            Phase::HalfOpen => BreakerState::HalfOpen,
            Phase::ForcedOpen => BreakerState::ForcedOpen,
            Phase::ForcedClosed => BreakerState::ForcedClosed,
        }
    }
}

/// How a half-open probe ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeResult {
    /// The provider answered: close.
    Success,
    /// The provider failed: open again for a longer period.
    Failure,
    /// The probe was not judged (cut short by the caller): open with no
    /// wait, so another process can claim the next probe at once.
    Release,
    /// The lease holder sent its probe (a lease that runs out after this
    /// counts as a failed probe; before it, it passes to the next claimer).
    Started,
}

/// What a process tells the shared record.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Read the record, change nothing.
    Load,
    /// `count` calls admitted in the closed period `generation` failed.
    Failures {
        /// The closed period the calls were admitted in.
        generation: u64,
        /// How many failed (reported together).
        count: u32,
    },
    /// A process's own rules (the provider's `BreakerConfig`, e.g. a
    /// failure rate) tripped in the closed period `generation`: open
    /// everywhere.
    Trip {
        /// The closed period.
        generation: u64,
    },
    /// A call admitted in the closed period `generation` succeeded while
    /// failures were counted: the count starts again.
    Success {
        /// The closed period.
        generation: u64,
    },
    /// Asks for the probe lease of the open period that has ended.
    Claim {
        /// The asking process.
        owner: String,
    },
    /// The probe of the half-open period `generation` ended.
    Probe {
        /// The half-open period.
        generation: u64,
        /// How it ended.
        result: ProbeResult,
    },
    /// Stop every call to the provider for `ms` (a later end wins).
    Pause {
        /// How long, ms.
        ms: u64,
    },
    /// An operator override: `Some(ForcedOpen | ForcedClosed)`, or `None`
    /// to reset (closed, counts and pause cleared).
    Force(Option<Phase>),
    /// The process `owner` cut the provider's sending rate after
    /// throttling: every other process cuts its own.
    Throttle {
        /// The process that cut.
        owner: String,
    },
}

/// One breaker's shared record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// When the record was created (server ms; 0: no record yet). A record
    /// the store lost (deleted, evicted, flushed) comes back with another
    /// epoch, and processes then take it as it is.
    pub epoch: i64,
    /// Bumped on every phase change.
    pub generation: u64,
    /// The phase.
    pub phase: Phase,
    /// Failure times (server ms), newest first, at most `rules.failures`.
    pub recent: Vec<i64>,
    /// Trips in a row (0 while closed).
    pub trips: u32,
    /// End of the open period (server ms).
    pub open_until: i64,
    /// The process holding the probe lease (empty: none).
    pub probe_owner: String,
    /// End of the probe lease (server ms).
    pub probe_until: i64,
    /// Whether the lease holder has sent its probe.
    pub probe_started: bool,
    /// End of the pause (server ms).
    pub pause_until: i64,
    /// Cuts of the sending rate so far, cluster-wide.
    pub throttle_seq: u64,
    /// The process that made the last cut.
    pub throttle_owner: String,
}

/// What a process learns about a breaker: its record as of the server's
/// `now`, with times relative to it. Also the pub/sub and `NOTIFY` payload
/// (JSON, with `name`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The breaker's name.
    pub name: String,
    /// The record's creation time (see [`Record::epoch`]).
    pub epoch: i64,
    /// Bumped on every phase change; a process ignores a snapshot older
    /// than the one it has.
    pub generation: u64,
    /// The phase.
    pub phase: Phase,
    /// Failures counted in the window (closed only).
    pub failures: u32,
    /// Time left in the open period, ms (open only, else 0).
    pub open_ms: u64,
    /// The probe lease holder (half-open only, else empty).
    pub probe_owner: String,
    /// Time left on the probe lease, ms (half-open only, else 0).
    pub probe_ms: u64,
    /// Time left in the pause, ms (0: not paused).
    pub pause_ms: u64,
    /// Cuts of the sending rate so far ([`Record::throttle_seq`]).
    #[serde(default)]
    pub throttle_seq: u64,
    /// The process that made the last cut.
    #[serde(default)]
    pub throttle_owner: String,
    /// Whether the event changed the record (a changed record is
    /// published).
    #[serde(default)]
    pub changed: bool,
}

impl Record {
    /// Applies `event` at server time `now` (ms) under `rules`, and returns
    /// the record's snapshot named `name`.
    pub fn apply(&mut self, name: &str, rules: &Rules, event: &Event, now: i64) -> Snapshot {
        let before = self.clone();
        if self.epoch == 0 && *event != Event::Load {
            self.epoch = now;
        }
        match event {
            Event::Load => {}
            Event::Trip { generation } => {
                if self.phase == Phase::Closed && *generation == self.generation {
                    self.open(rules, 1, now);
                }
            }
            Event::Failures { generation, count } => {
                if self.phase == Phase::Closed && *generation == self.generation {
                    let keep = rules.failures as usize;
                    let add = (*count as usize).min(keep);
                    self.recent.splice(0..0, std::iter::repeat_n(now, add));
                    self.recent.truncate(keep);
                    if self.in_window(rules, now) >= rules.failures {
                        self.open(rules, 1, now);
                    }
                }
            }
            Event::Success { generation } => {
                if self.phase == Phase::Closed && *generation == self.generation {
                    self.recent.clear();
                }
            }
            Event::Claim { owner } => match self.phase {
                // The open period is over, or the lease ran out before its
                // holder sent the probe (it had no call to send): the lease
                // is the claimer's.
                Phase::Open if now >= self.open_until => {
                    self.lease(owner, rules, now);
                }
                Phase::HalfOpen if now >= self.probe_until && !self.probe_started => {
                    self.lease(owner, rules, now);
                }
                // The probe went out and never reported: it counts as failed.
                Phase::HalfOpen if now >= self.probe_until => self.open(rules, self.trips + 1, now),
                _ => {}
            },
            Event::Probe { generation, result } => {
                if self.phase == Phase::HalfOpen && *generation == self.generation {
                    match result {
                        ProbeResult::Started => self.probe_started = true,
                        ProbeResult::Success => self.reset(Phase::Closed),
                        ProbeResult::Failure => self.open(rules, self.trips + 1, now),
                        ProbeResult::Release => {
                            self.open(rules, self.trips, now);
                            self.open_until = now;
                        }
                    }
                }
            }
            Event::Pause { ms } => {
                self.pause_until = self.pause_until.max(now.saturating_add(*ms as i64));
            }
            Event::Force(Some(phase)) => {
                self.phase = *phase;
                self.generation += 1;
                self.probe_owner.clear();
                self.probe_started = false;
            }
            Event::Force(None) => {
                self.reset(Phase::Closed);
                self.pause_until = 0;
            }
            Event::Throttle { owner } => {
                self.throttle_seq += 1;
                self.throttle_owner.clone_from(owner);
            }
        }
        let changed = *self != before;
        self.snapshot(name, rules, now, changed)
    }

    fn in_window(&self, rules: &Rules, now: i64) -> u32 {
        let since = now.saturating_sub(rules.window_ms as i64);
        self.recent.iter().filter(|t| **t > since).count() as u32
    }

    fn lease(&mut self, owner: &str, rules: &Rules, now: i64) {
        self.phase = Phase::HalfOpen;
        self.generation += 1;
        self.probe_owner = owner.to_owned();
        self.probe_until = now.saturating_add(rules.probe_timeout_ms as i64);
        self.probe_started = false;
    }

    fn open(&mut self, rules: &Rules, trips: u32, now: i64) {
        self.phase = Phase::Open;
        self.generation += 1;
        self.trips = trips.max(1);
        self.open_until = now.saturating_add(rules.open_ms(self.trips) as i64);
        self.recent.clear();
        self.probe_owner.clear();
        self.probe_started = false;
    }

    fn reset(&mut self, phase: Phase) {
        self.phase = phase;
        self.generation += 1;
        self.trips = 0;
        self.recent.clear();
        self.probe_owner.clear();
        self.probe_started = false;
    }

    fn snapshot(&self, name: &str, rules: &Rules, now: i64, changed: bool) -> Snapshot {
        let left = |until: i64| u64::try_from(until.saturating_sub(now)).unwrap_or(0);
        Snapshot {
            name: name.to_owned(),
            epoch: self.epoch,
            generation: self.generation,
            phase: self.phase,
            failures: if self.phase == Phase::Closed { self.in_window(rules, now) } else { 0 },
            open_ms: if self.phase == Phase::Open { left(self.open_until) } else { 0 },
            probe_owner: if self.phase == Phase::HalfOpen { self.probe_owner.clone() } else { String::new() },
            probe_ms: if self.phase == Phase::HalfOpen { left(self.probe_until) } else { 0 },
            pause_ms: left(self.pause_until),
            throttle_seq: self.throttle_seq,
            throttle_owner: self.throttle_owner.clone(),
            changed,
        }
    }
}
