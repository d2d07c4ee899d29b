#!/usr/bin/env python3
"""failwell against a provider that allows LIMIT requests per second.

Starts the provider simulator in its rate-limit mode (`failwell sim
--rate-limit LIMIT`, calm profile) and `failwell serve` with the example
configuration (failwell.toml, product defaults) on a fresh SQLite file,
submits MESSAGES charges through the HTTP API as fast as it can, and reads
the simulator's counters every half second until every charge has its
outcome. Prints, per second, the calls the provider received and how many
it answered 429, then the call rate after the first SETTLE seconds and the
429 share of all calls.

Usage: bench/rate_limit.py [--binary target/release/failwell]
       [--limit 200] [--messages 5000] [--settle 5]
Only the Python standard library; the binary must be built first
(`cargo build --release -p failwell`).
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def wait_for(url, what):
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            return get(url)
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not start")


def charge(api, i):
    body = json.dumps({
        "provider": "payments",
        "operation": "charge",
        # Amounts ending in 02 are declined by the simulator: none here.
        "payload": {"amount": 1000 + 10 * (i % 9000), "currency": "eur", "reference": f"rl-{i:06}"},
    }).encode()
    request = urllib.request.Request(f"{api}/v1/operations", data=body, method="POST", headers={
        "Content-Type": "application/json", "Idempotency-Key": f"rl-{i:06}"})
    with urllib.request.urlopen(request, timeout=30) as r:
        if r.status not in (200, 201, 202):
            sys.exit(f"submission {i} answered {r.status}")


def main():
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--binary", default=str(ROOT / "target/release/failwell"))
    args.add_argument("--limit", type=int, default=200)
    args.add_argument("--messages", type=int, default=5000)
    args.add_argument("--settle", type=float, default=5.0)
    a = args.parse_args()

    sim_port, api_port = free_port(), free_port()
    sim_url, api = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{api_port}"
    with tempfile.TemporaryDirectory() as tmp:
        config = pathlib.Path(tmp) / "failwell.toml"
        text = (ROOT / "failwell.toml").read_text().replace("http://127.0.0.1:9090", sim_url)
        config.write_text(text)
        env = dict(os.environ, FAILWELL_DATABASE_URL=f"sqlite://{tmp}/failwell.db",
                   FAILWELL_LISTEN=f"127.0.0.1:{api_port}", RUST_LOG="warn")
        log = open(pathlib.Path(tmp) / "log", "w")
        sim = subprocess.Popen([a.binary, "sim", "--listen", f"127.0.0.1:{sim_port}", "--profile", "calm",
                                "--rate-limit", str(a.limit)], stderr=log)
        server = subprocess.Popen([a.binary, "serve", "--config", str(config)], env=env, stderr=log)
        try:
            wait_for(f"{sim_url}/_sim/effects", "the simulator")
            wait_for(f"{api}/healthz", "failwell")
            start = time.time()
            samples = [(0.0, 0, 0)]
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                pending = [pool.submit(charge, api, i) for i in range(a.messages)]
                done = False
                while not done:
                    time.sleep(0.5)
                    e = get(f"{sim_url}/_sim/effects")
                    samples.append((time.time() - start, e["requests"], e["rate_limited"]))
                    done = all(f.done() for f in pending) and e["charges"] + e["declined"] >= a.messages
                for f in pending:
                    f.result()
        finally:
            server.terminate()
            sim.terminate()
            server.wait()
            sim.wait()
    print("second  calls  429s")
    per_second = []
    for second in range(int(samples[-1][0]) + 1):
        inside = [s for s in samples if second <= s[0] < second + 1]
        before = max((s for s in samples if s[0] < second), default=samples[0], key=lambda s: s[0])
        if not inside:
            continue
        last = inside[-1]
        span = last[0] - before[0]
        calls, limited = (last[1] - before[1]) / span, (last[2] - before[2]) / span
        per_second.append((second, calls, limited))
        print(f"{second:6}  {calls:5.0f}  {limited:4.0f}")
    settled = [c for s, c, _ in per_second if s >= a.settle]
    total, limited = samples[-1][1], samples[-1][2]
    accepted = [c - l for s, c, l in per_second if s >= a.settle]
    print(f"limit {a.limit}/s, {a.messages} messages, {samples[-1][0]:.1f} s to the last outcome")
    print(f"after {a.settle:.0f} s: calls/s median {statistics.median(settled):.0f}, "
          f"accepted/s median {statistics.median(accepted):.0f}")
    print(f"429s: {limited} of {total} calls ({100 * limited / total:.1f} %)")


if __name__ == "__main__":
    main()
