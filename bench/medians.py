#!/usr/bin/env python3
"""Prints the median time per call (ns) of every benchmark of the last
`cargo bench --manifest-path bench/Cargo.toml` run, one per line, from
criterion's estimates under bench/target/criterion."""

import json
import pathlib
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent / "target/criterion")
rows = []
for meta in sorted(root.glob("**/new/benchmark.json")):
    bench = json.loads(meta.read_text())
    median = json.loads((meta.parent / "estimates.json").read_text())["median"]["point_estimate"]
    rows.append((bench["group_id"], bench["function_id"], median))
for group, name, ns in rows:
    print(f"{group}\t{name}\t{ns:.1f}")
