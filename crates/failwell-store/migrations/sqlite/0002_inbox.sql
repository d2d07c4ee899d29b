-- Webhook events as received, before any processing: one row per
-- (integration, provider event id), however many times it was delivered.
-- The payload is the request body byte for byte (the signature covers
-- those bytes); `headers` keeps the headers of interest as a JSON object.
CREATE TABLE inbox_events (
    integration     TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    payload         BLOB    NOT NULL,
    headers         TEXT    NOT NULL,
    received_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (integration, event_id)
) WITHOUT ROWID;

-- What was received is never rewritten or deleted by a delivery.
CREATE TRIGGER inbox_events_no_update BEFORE UPDATE OF integration, event_id, payload, headers, received_at_ms
ON inbox_events BEGIN
    SELECT RAISE(ABORT, 'inbox events are append-only');
END;
