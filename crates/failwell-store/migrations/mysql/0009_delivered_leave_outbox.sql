-- A message whose delivery succeeded leaves the outbox when its result is
-- recorded, as on PostgreSQL (its `0026`): the relay's batch of results
-- marks it `done` (its history row is written as before) and deletes it
-- in the same transaction. The outbox then holds open work (pending
-- messages, dead letters) and the messages that ended another way
-- (failed, or settled by a status lookup or an event), which retention
-- deletes after `retention.delivered_ms` as before. The operation keeps
-- the outcome.
--
-- The status view keeps showing a delivered operation: a succeeded
-- operation without its message reads as delivered ('done'), with the
-- operation's attempts and error, the time its delivery started, and no
-- ordering key (a key orders open messages only). Columns and names are
-- 0002's.
CREATE OR REPLACE VIEW failwell_outbox_status AS
SELECT o.id, o.provider, o.operation, o.payload, o.idempotency_key, o.reference, x.ordering_key,
       FROM_UNIXTIME(x.available_at_ms / 1000) AS available_at, o.status, x.state AS delivery, x.attempts,
       x.last_error
FROM operations o JOIN outbox x ON x.operation_id = o.id
UNION ALL
SELECT o.id, o.provider, o.operation, o.payload, o.idempotency_key, o.reference, NULL,
       FROM_UNIXTIME(COALESCE(o.not_before_ms, o.created_at_ms) / 1000), o.status, 'done', o.attempts,
       o.last_error
FROM operations o
WHERE o.status = 'succeeded' AND NOT EXISTS (SELECT 1 FROM outbox x WHERE x.operation_id = o.id);
