#!/usr/bin/env python3
"""The band cutoffs a `widebag train --json` summary chose, as torch_peer.py's arguments
(`--input-cutoffs A B --output-cutoffs C`), one per line, for `mapfile` in the bench scripts.

  python3 benches/peers/cutoffs.py widebag-headtail.json
"""
import json
import sys

summary = json.load(open(sys.argv[1]))
side = {band["side"]: band["cutoffs"] for band in summary["bands"]}
print("--input-cutoffs")
for cut in side.get("input", []):
    print(cut)
print("--output-cutoffs")
for cut in side.get("output", []):
    print(cut)
