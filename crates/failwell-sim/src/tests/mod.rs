//! Tests of the simulator against a real server on `127.0.0.1:0` with a reqwest
//! client, split by concern. They never sleep to wait for a state: they poll with
//! a deadline. They do not test the `failwell` CLI wiring.

mod determinism;
mod faults;
mod helpers;
mod idempotency;
mod lookups;
mod webhooks;
