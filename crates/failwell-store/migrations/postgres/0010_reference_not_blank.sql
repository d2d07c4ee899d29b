-- A reference identifies one intent at its provider, and status lookups
-- send it: an empty or blank one identifies nothing (the HTTP API and
-- `Outbox::enqueue` refuse it too). This refuses it on every path into the
-- table, the outbox contract's view included (`check_violation`, naming
-- the constraint). NOT VALID: rows written before are left as they are.
ALTER TABLE operations ADD CONSTRAINT operations_reference_not_blank
    CHECK (btrim(reference) <> '') NOT VALID;
