-- Scheduled comparisons claimed by window: every process runs the same
-- schedule, and the first to claim a provider's window runs it; the others
-- skip it (one report, one alert).
CREATE TABLE comparison_runs (
    provider        text    NOT NULL,
    window_from_ms  bigint  NOT NULL,
    window_to_ms    bigint  NOT NULL,
    claimed_at_ms   bigint  NOT NULL,
    PRIMARY KEY (provider, window_from_ms, window_to_ms)
);
