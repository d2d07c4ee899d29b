-- Scheduled comparisons claimed by window: the first run of a provider's
-- window claims it, so a window is compared once (the same table as on
-- PostgreSQL, where several processes run the same schedule).
CREATE TABLE comparison_runs (
    provider        TEXT    NOT NULL,
    window_from_ms  INTEGER NOT NULL,
    window_to_ms    INTEGER NOT NULL,
    claimed_at_ms   INTEGER NOT NULL,
    PRIMARY KEY (provider, window_from_ms, window_to_ms)
);
