//! When a provider's records are compared with ours, and over which
//! window: `daily HH:MM` (UTC) for the previous day, or `every N` for the
//! period before the last. Times are ms since the Unix epoch; this module
//! reads no clock.

use std::time::Duration;

const DAY_MS: i64 = 86_400_000;

/// How a schedule is written, in the errors of [`Schedule::parse`].
const SPELLED: &str = "write \"daily HH:MM\" (UTC) or \"every N\" with N like 30s, 15m, 6h or 1d";

/// Why a schedule is not one; each variant holds the text as written and
/// says how a schedule is spelled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// `daily` is not followed by `HH:MM`.
    #[error("{0:?} is not HH:MM; {SPELLED}", SPELLED = SPELLED)]
    NotHhMm(String),
    /// `daily HH:MM` names no time of day (hour 0–23, minute 0–59, two
    /// digits each).
    #[error("{0:?} is not a time of day HH:MM; {SPELLED}", SPELLED = SPELLED)]
    NotTimeOfDay(String),
    /// `every` is not followed by a count and a unit (`s`, `m`, `h`, `d`).
    #[error("{0:?} is not a period; {SPELLED}", SPELLED = SPELLED)]
    NotPeriod(String),
    /// `every N` is under 1 s or over 366 days.
    #[error("{0:?} must be between 1s and 366d")]
    OutOfRange(String),
    /// The text starts with neither `daily` nor `every`, or has more words.
    #[error("{0:?} is not a schedule; {SPELLED}", SPELLED = SPELLED)]
    NotSchedule(String),
}

/// When a comparison runs, and over which window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Every day at this minute of the day (UTC), over the previous UTC day
    /// ("nightly for yesterday"). Spelled `daily HH:MM`.
    Daily {
        /// Minutes after midnight UTC (0–1439).
        minute: u32,
    },
    /// Every `period`, over the period before the last one: `[run − 2p,
    /// run − p)`, so work created at the window's end had a whole period to
    /// settle. Spelled `every 30s`, `every 15m`, `every 6h`, `every 1d`
    /// (1 s to 366 d).
    Every(Duration),
}

impl Schedule {
    /// Parses `daily HH:MM` (UTC) or `every N{s|m|h|d}` (1 s to 366 d).
    /// Errors: a [`ScheduleError`] saying what is wrong and how a schedule
    /// is spelled.
    pub fn parse(s: &str) -> Result<Self, ScheduleError> {
        let mut words = s.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("daily"), Some(at), None) => {
                let (h, m) = at.split_once(':').ok_or_else(|| ScheduleError::NotHhMm(at.to_owned()))?;
                match (h.parse::<u32>(), m.parse::<u32>()) {
                    (Ok(h @ 0..=23), Ok(m @ 0..=59)) if at.len() == 5 => {
                        Ok(Self::Daily { minute: h * 60 + m })
                    }
                    _ => Err(ScheduleError::NotTimeOfDay(at.to_owned())),
                }
            }
            (Some("every"), Some(n), None) => {
                let (digits, unit) = n.split_at(n.find(|c: char| !c.is_ascii_digit()).unwrap_or(n.len()));
                let count: u64 = digits.parse().map_err(|_| ScheduleError::NotPeriod(n.to_owned()))?;
                let seconds = match unit {
                    "s" => count,
                    "m" => count.saturating_mul(60),
                    "h" => count.saturating_mul(3600),
                    "d" => count.saturating_mul(86_400),
                    _ => return Err(ScheduleError::NotPeriod(n.to_owned())),
                };
                if seconds == 0 || seconds > 366 * 86_400 {
                    return Err(ScheduleError::OutOfRange(n.to_owned()));
                }
                Ok(Self::Every(Duration::from_secs(seconds)))
            }
            _ => Err(ScheduleError::NotSchedule(s.to_owned())),
        }
    }

    /// The first run strictly after `after_ms` (ms since epoch).
    pub fn next_run(&self, after_ms: i64) -> i64 {
        match *self {
            Self::Daily { minute } => {
                let today = after_ms - after_ms.rem_euclid(DAY_MS) + i64::from(minute) * 60_000;
                if today > after_ms { today } else { today + DAY_MS }
            }
            Self::Every(period) => {
                let p = period.as_millis() as i64;
                after_ms - after_ms.rem_euclid(p) + p
            }
        }
    }

    /// The window `[from, to)` (ms since epoch) a run at `run_ms` compares.
    pub fn window(&self, run_ms: i64) -> (i64, i64) {
        match *self {
            Self::Daily { .. } => {
                let midnight = run_ms - run_ms.rem_euclid(DAY_MS);
                (midnight - DAY_MS, midnight)
            }
            Self::Every(period) => {
                let p = period.as_millis() as i64;
                (run_ms - 2 * p, run_ms - p)
            }
        }
    }
}

#[cfg(test)]
mod tests;
