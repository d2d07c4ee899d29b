-- An ordering key names the sequence a message is delivered in: an empty
-- or blank one would put every such message in one sequence by accident.
-- The outbox contract refuses it, as `Outbox::enqueue` does; the insert's
-- statement is undone, so nothing is written. Rows written before are
-- left as they are.
CREATE TRIGGER failwell_outbox_ordering_key INSTEAD OF INSERT ON failwell_outbox
    WHEN trim(NEW.ordering_key, char(32, 9, 10, 11, 12, 13)) = ''
BEGIN
    SELECT RAISE(ABORT, 'failwell_outbox: ordering_key must not be empty or blank');
END;
