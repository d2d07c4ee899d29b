-- An ordering key names the sequence a message is delivered in: an empty
-- or blank one would put every such message in one sequence by accident.
-- Refused before failwell_outbox_insert writes anything, as
-- `Outbox::enqueue` refuses it. Rows written before are left as they are.
CREATE TRIGGER failwell_outbox_ordering_key BEFORE INSERT ON failwell_outbox FOR EACH ROW
    PRECEDES failwell_outbox_insert
    IF NEW.ordering_key NOT REGEXP '[^[:space:]]' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'failwell_outbox: ordering_key must not be empty or blank';
    END IF;
