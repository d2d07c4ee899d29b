-- `failwell_enqueue` plans its statements for the batch it is given.
--
-- PostgreSQL keeps the plans of a PL/pgSQL function's statements for the
-- session, and from a statement's sixth run it may switch to a generic
-- plan, made without the arguments' values. For `failwell_enqueue` that
-- plan guesses a few intents a batch and joins them by nested loops: on
-- one connection, the sixth call of 5,000 intents took 4 s instead of
-- 0.17 s, and the sixth of 50,000 minutes. An application that reuses its
-- connections (a pool) calls it more than five times on one. Every call
-- now gets a plan of its own (the planning costs well under a millisecond
-- a call).
--
-- A later `CREATE OR REPLACE FUNCTION failwell_enqueue` drops this
-- setting, as it drops the `search_path` one: restate both.
ALTER FUNCTION failwell_enqueue(text, text, json[], text[], text[], text[], timestamptz[], text[])
    SET plan_cache_mode = force_custom_plan;
