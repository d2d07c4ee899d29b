//! CPU time per delivered message, by process, from `/proc`.

use std::collections::HashMap;

use crate::proc_stat::cpu_ms;
use crate::process::Process;
use crate::store::Db;

/// CPU time (µs) per message delivered in a drain, by who spent it: the
/// `failwell serve` processes, the database server's processes serving them, and
/// this process (the sink, and the checks polling the outbox).
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu {
    pub failwell: f64,
    /// The database server's processes ([`Db::server_pids`]).
    pub database: f64,
    pub sink: f64,
}

/// CPU used so far (ms) by each process that counts, keyed by pid, with its
/// place in [`Cpu`] (0 failwell, 1 the database server, 2 the sink: this
/// process, or the `sink` processes when given).
pub async fn cpu_now(db: &Db, processes: &[Process], sink: &[u32]) -> HashMap<u32, (usize, u64)> {
    let failwell = processes.iter().filter_map(|p| p.child.id()).map(|pid| (pid, 0));
    let database = db.server_pids().await.into_iter().map(|pid| (pid, 1));
    let sink: Vec<u32> = if sink.is_empty() { vec![std::process::id()] } else { sink.to_vec() };
    failwell
        .chain(database)
        .chain(sink.into_iter().map(|pid| (pid, 2)))
        .map(|(pid, who)| (pid, (who, cpu_ms(pid))))
        .collect()
}

impl Cpu {
    /// What was spent between two [`cpu_now`] readings, per message of `n`
    /// (a process first seen at the end counts from 0).
    pub fn between(start: &HashMap<u32, (usize, u64)>, end: &HashMap<u32, (usize, u64)>, n: u64) -> Self {
        let mut ms = [0u64; 3];
        for (pid, (who, at_end)) in end {
            ms[*who] += at_end.saturating_sub(start.get(pid).map_or(0, |(_, at_start)| *at_start));
        }
        let per_msg = |ms: u64| ms as f64 * 1000.0 / n as f64;
        Self { failwell: per_msg(ms[0]), database: per_msg(ms[1]), sink: per_msg(ms[2]) }
    }
}
