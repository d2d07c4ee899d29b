-- A message whose delivery succeeded leaves the outbox when its result is
-- recorded: the relay's batch of results deletes it instead of writing it
-- again as 'done' and keeping it for `retention.delivered_ms`. The outbox
-- then holds open work (pending messages, dead letters) and the few
-- messages that ended another way (failed, unknown), which retention
-- deletes later as before. A delete writes about a fifth of the WAL of the
-- update it replaces, and no index entries (docs/BENCHMARKS.md).
--
-- What the message said is kept elsewhere: the operation holds its status,
-- its attempts and its error, and the attempt row says how it settled
-- (`settled_from`, 0017).

-- The relay's delete writes no 'purged' history row: its statement writes
-- the history of what it changes (`failwell.history_written`, see 0008).
-- A delete by anyone else (an operator's purge, an application's own
-- DELETE) still records the purge, as before.
DROP TRIGGER outbox_history_purge ON outbox;
CREATE TRIGGER outbox_history_purge AFTER DELETE ON outbox
    FOR EACH ROW WHEN (OLD.state <> 'done'
                       AND current_setting('failwell.history_written', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION failwell_state_changed();

-- The contract's view keeps showing a delivered operation: a succeeded
-- operation without its message reads as delivered ('done'), with the
-- operation's attempts and error, the time its delivery started, and no
-- ordering key (a key orders open messages only). The rows with a message
-- are read as before, so a query of open work (`delivery = 'pending'`)
-- still reads the outbox, not every operation. Columns, names and types
-- are 0019's, so the view's triggers and grants stay.
CREATE OR REPLACE VIEW failwell_outbox AS
SELECT o.id, o.provider, o.operation, failwell_stored_json(o.payload) AS payload, o.idempotency_key,
       o.reference::text AS reference, x.ordering_key, to_timestamp(x.available_at_ms / 1000.0) AS available_at,
       o.status, x.state::text AS delivery, x.attempts::bigint AS attempts, x.last_error, o.hold_id
FROM operations o JOIN outbox x ON x.operation_id = o.id
UNION ALL
SELECT o.id, o.provider, o.operation, failwell_stored_json(o.payload), o.idempotency_key,
       o.reference::text, NULL, to_timestamp(COALESCE(o.not_before_ms, o.created_at_ms) / 1000.0),
       o.status, 'done', o.attempts::bigint, o.last_error, o.hold_id
FROM operations o
WHERE o.status = 'succeeded' AND NOT EXISTS (SELECT FROM outbox x WHERE x.operation_id = o.id);
