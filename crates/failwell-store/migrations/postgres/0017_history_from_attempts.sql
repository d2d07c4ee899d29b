-- A delivery that succeeds at once no longer writes two history rows beside
-- its attempt row. The relay's batch statement marks the attempt instead:
-- `settled_from` is the operation's status before that attempt's result
-- moved its message `pending -> done` and the operation to `succeeded`,
-- with no error to note. An operation's history shows those two changes
-- from the attempt row (`failwell ops history`), at the attempt's end, as
-- it showed the rows: `message pending -> done` and, unless the operation
-- had succeeded already, `operation <settled_from> -> succeeded`, both by
-- `relay`. Every other change is still a history row of its own. Two of
-- the five rows a delivered message wrote, with their index entries.
-- NOT VALID: the rows already stored (all NULL) are not scanned under the
-- table's lock; every new row is checked.
ALTER TABLE attempts ADD COLUMN settled_from text;
ALTER TABLE attempts ADD CONSTRAINT attempts_settled_from_check
    CHECK (settled_from IN ('pending', 'succeeded', 'failed', 'unknown', 'needs_human')) NOT VALID;
