-- A commit that enqueued messages wakes the relays of every failwell process
-- at once (`LISTEN failwell_outbox`; the payload is the schema, so stores in
-- other schemas of the database ignore it). One notice per statement, and
-- PostgreSQL folds equal notices of one transaction into one; processes
-- still poll, so a notice lost with a connection delays nothing for long.
CREATE FUNCTION failwell_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('failwell_outbox', TG_TABLE_SCHEMA);
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION failwell_outbox_notify();
