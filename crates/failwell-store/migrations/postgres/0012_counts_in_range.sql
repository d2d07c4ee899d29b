-- Counts failwell reads as unsigned 32-bit numbers stay within that range,
-- so a row changed behind failwell's back cannot make a claim's
-- `attempts + 1` overflow (which would fail the claim of every message).
-- NOT VALID: rows already stored are not scanned; every new write is checked.
ALTER TABLE outbox ADD CONSTRAINT outbox_attempts_in_range
    CHECK (attempts BETWEEN 0 AND 4294967295 AND previous_delay_ms >= 0) NOT VALID;
ALTER TABLE operations ADD CONSTRAINT operations_attempts_in_range
    CHECK (attempts BETWEEN 0 AND 4294967295
       AND reconcile_attempts BETWEEN 0 AND 4294967295
       AND lookup_misses BETWEEN 0 AND 4294967295) NOT VALID;
