-- One index entry fewer per attempt. Every delivery writes an attempt row
-- in the relay's batch of results, and each index of `attempts` is one
-- more B-tree insertion (and WAL record) there: it had three, the primary
-- key on `id`, `attempts_operation` on `(operation_id, id)` and
-- `attempts_started`. Attempts are read by operation (an operation's
-- attempts and history, in id order) and by start time (the recent
-- calls of `failwell status`), never by `id` alone. The primary key is
-- now `(operation_id, id)`, which also serves the reads by operation; `id`
-- is still numbered by its identity column.
CREATE UNIQUE INDEX attempts_operation_id ON attempts (operation_id, id);
ALTER TABLE attempts DROP CONSTRAINT attempts_pkey;
ALTER TABLE attempts ADD CONSTRAINT attempts_pkey PRIMARY KEY USING INDEX attempts_operation_id;
DROP INDEX attempts_operation;
