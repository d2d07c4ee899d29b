-- Alerts go through an outbox of their own: each alert is queued in the
-- transaction that records what it reports (a comparison report, an alert
-- raised or resolved), then sent and marked sent. A process that dies
-- between the two leaves it queued, and the next process that looks sends
-- it (at least once; in id order per kind and subject). A comparison
-- report's alert carries no text of its own: it is the report's, read when
-- it is sent, and its outcome is also kept on the report.
CREATE TABLE alerts (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    kind            TEXT    NOT NULL,
    subject         TEXT    NOT NULL,
    report_id       INTEGER REFERENCES reconciliation_reports (id),
    text            TEXT,
    details         TEXT,
    created_at_ms   INTEGER NOT NULL,
    next_at_ms      INTEGER NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    locked_until_ms INTEGER,
    sent_at_ms      INTEGER,
    -- The sink refused it for good (a 4xx) or too often: set aside, so it
    -- no longer holds back the alerts queued after it.
    gave_up_at_ms   INTEGER,
    last_error      TEXT,
    CHECK ((report_id IS NULL) = (text IS NOT NULL AND details IS NOT NULL))
);
CREATE INDEX alerts_unsent ON alerts (next_at_ms) WHERE sent_at_ms IS NULL AND gave_up_at_ms IS NULL;

-- A scheduled comparison's window is claimed for a while, not for good: a
-- run that never finished (its process died) is taken over after that.
-- Runs claimed before this column existed count as finished.
ALTER TABLE comparison_runs ADD COLUMN finished_at_ms INTEGER;
UPDATE comparison_runs SET finished_at_ms = claimed_at_ms;

-- A replayed forward is open again from its replay (its age, like a
-- replayed message's, counts from then).
ALTER TABLE forwards ADD COLUMN replayed_at_ms INTEGER;
