#!/usr/bin/env python3
"""Samples, every 100 ms until interrupted (Ctrl-C or SIGTERM), the CPU
time (ms, user and system, all threads, from /proc/PID/stat) used by
PostgreSQL, failwell, Node.js and the relay benchmark (which holds the
sink), and prints each interval's figures. On exit it prints the totals
over the intervals in which the sink and the client named by `--while`
were both busy (a drain of that client: the sink answers only drained
jobs) and, given the jobs drained (`--jobs N`), the CPU per job (µs).
pgmq's drain beside failwell's, with a copy of the peers harness whose
run.sh lists only pgmq with batches of 100:

    python3 bench/cpu_sample.py --while node --jobs 50000 &
    N=50000 REPS=1 WORKERS=2 PEERS_DIR=<that copy> PEERS_HOME=~/.cache/failwell-peers \\
      cargo bench --manifest-path bench/Cargo.toml --bench relay
    kill %1
"""

import argparse
import os
import signal
import sys
import time

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")
GROUPS = (("postgres", "postgres"), ("failwell", "failwell"), ("node", "node"), ("relay", "sink"))


def readings():
    """pid -> (group, CPU ticks) of every process of a group."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        group = next((g for prefix, g in GROUPS if comm.startswith(prefix)), None)
        if group:
            fields = stat[stat.rindex(")") + 2 :].split()
            out[int(pid)] = (group, int(fields[11]) + int(fields[12]))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, help="jobs drained while sampling")
    parser.add_argument("--while", dest="client", default="node", choices=["node", "failwell"],
                        help="the client whose drain counts (default node)")
    args = parser.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    totals, busy, before = {}, 0, readings()
    try:
        while not stop:
            time.sleep(0.1)
            now, spent = readings(), {}
            for pid, (group, ticks) in now.items():
                earlier = before.get(pid)
                used = ticks - earlier[1] if earlier and earlier[0] == group else ticks
                spent[group] = spent.get(group, 0) + used * TICK_MS
            before = now
            print(" ".join(f"{g}={ms:.0f}" for g, ms in sorted(spent.items()) if ms), flush=True)
            if spent.get("sink", 0) > 0 and spent.get(args.client, 0) > 0:
                busy += 1
                for group, ms in spent.items():
                    totals[group] = totals.get(group, 0) + ms
    except KeyboardInterrupt:
        pass
    line = f"busy {busy / 10:.1f} s: " + " ".join(f"{g}={ms:.0f}ms" for g, ms in sorted(totals.items()))
    if args.jobs:
        line += "; per job: " + " ".join(f"{g}={ms * 1000 / args.jobs:.0f}µs" for g, ms in sorted(totals.items()))
    print(line, file=sys.stderr)


if __name__ == "__main__":
    main()
