-- Webhook events as received, before any processing: one row per
-- (integration, provider event id), however many times it was delivered.
-- The payload is the request body byte for byte (the signature covers
-- those bytes); `headers` keeps the headers of interest as a JSON object.
-- `seq` orders the events as they were first received (the feed's cursor).
CREATE TABLE inbox_events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    integration     TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    payload         BLOB    NOT NULL,
    headers         TEXT    NOT NULL,
    received_at_ms  INTEGER NOT NULL,
    UNIQUE (integration, event_id)
);

-- What was received is never rewritten or deleted by a delivery.
CREATE TRIGGER inbox_events_no_update BEFORE UPDATE ON inbox_events BEGIN
    SELECT RAISE(ABORT, 'inbox events are append-only');
END;
