//! A process's CPU time from `/proc` (Linux), shared with `bench/awa`.

/// CPU time (ms, user and system, all threads) process `pid` has used, from
/// `/proc/PID/stat` (Linux, in USER_HZ ticks of 10 ms); 0 once it is gone.
pub fn cpu_ms(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) * 10
}
