-- An ordering key names the sequence a message is delivered in: an empty
-- or blank one would put every such message of every application in one
-- sequence by accident. The outbox contract's view (which calls this when
-- a row carries an ordering key or a delivery time) and `Outbox::enqueue`
-- refuse it (`check_violation`); nothing is written. Rows written before
-- are left as they are.
CREATE OR REPLACE FUNCTION failwell_schedule(operation_id bigint, ordering_key text, available_at_ms bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF ordering_key !~ '\S' THEN
        RAISE EXCEPTION 'failwell_outbox: ordering_key must not be empty or blank'
            USING ERRCODE = 'check_violation';
    END IF;
    UPDATE outbox SET ordering_key = $2, available_at_ms = GREATEST(outbox.available_at_ms, COALESCE($3, 0))
    WHERE outbox.operation_id = $1;
    UPDATE operations SET not_before_ms = $3 WHERE id = $1 AND $3 > created_at_ms;
END $$;
