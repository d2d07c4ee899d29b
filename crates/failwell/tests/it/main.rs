//! failwell's integration tests: the real `failwell` binary against the
//! provider simulator on loopback. One test binary for the crate.

// These tests run failwell, the simulator and the databases as real
// processes and wait for them against the wall clock, which
// `clippy.toml` otherwise keeps to the clock modules.
#![allow(clippy::disallowed_methods)]

mod admin;
mod alerting;
mod api;
mod check_store;
mod cluster;
mod config;
mod contract_fuzz;
mod crash;
mod demo;
mod examples;
mod faults;
mod hardening;
mod helpers;
mod ledger_api;
mod ledger_cli;
mod logs;
mod manifest;
mod metrics;
mod mysql;
mod mysql_apps;
mod openapi;
mod operator;
mod processing;
mod scale_out;
mod sqlite_apps;
mod throttling;
mod webhook;
