-- The numbers a claim computes with stay in range, so a row changed behind
-- failwell's back cannot make a claim's arithmetic overflow (which would
-- fail the claim of every message): counts within 0..2^31-1 (failwell reads
-- a count from 1000000 on as damage, sets the row aside and no longer
-- increments it), flags 0 or 1, times not before 1970.
-- NOT VALID: rows already stored are not scanned; every new write is checked.
ALTER TABLE outbox ADD CONSTRAINT outbox_numbers_in_range
    CHECK (attempts BETWEEN 0 AND 2147483647 AND previous_delay_ms >= 0 AND in_flight IN (0, 1)
       AND updated_at_ms >= 0) NOT VALID;
ALTER TABLE operations ADD CONSTRAINT operations_numbers_in_range
    CHECK (attempts BETWEEN 0 AND 2147483647
       AND reconcile_attempts BETWEEN 0 AND 2147483647
       AND lookup_misses BETWEEN 0 AND 2147483647
       AND effect_possible IN (0, 1)) NOT VALID;
