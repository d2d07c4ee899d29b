-- Each index of `outbox` costs an insertion for every message written and
-- for every row version of it that is not a HOT update, and its WAL. Two
-- of them served too little for that:
-- - `outbox_open` (pending messages by creation time) served no
--   statement: the age of the oldest open message is read with the counts,
--   from every pending row.
-- - `outbox_due` (every pending message in due order) served only a claim
--   of every provider's messages at once. That claim now reads
--   `outbox_provider_due` one provider at a time, as the claim of the
--   providers the relay does not know already did.
-- Without them an intent writes 8 % less WAL (1,525 bytes instead of
-- 1,665 for 50,000 intents through `failwell_enqueue`).
DROP INDEX outbox_open;
DROP INDEX outbox_due;
