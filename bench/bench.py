#!/usr/bin/env python3
"""Start-up and dry-run speed of the release `cloudai` binary, and its peak memory.

Usage: python3 bench/bench.py [--runs N]   (builds the release binary first)
Prints a table and writes it to bench/results.txt. Numbers are wall-clock medians over N runs on this machine.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "cloudai")


def peak_rss_mb(cmd, cwd):
    """Peak RSS of `cmd` itself, from GNU time (a Python child would report the forked interpreter's memory)."""
    r = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], cwd=cwd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, check=True)
    return int(r.stderr.strip().splitlines()[-1]) / 1024


def measure(cmd, runs, cwd):
    """Median and min wall time (ms) over `runs`, and peak RSS (MB)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000, min(times) * 1000, peak_rss_mb(cmd, cwd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "cloudai"], cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix="cloudai-bench-")
    conf = os.path.join(ROOT, "conf", "common")
    dry = [BIN, "dry-run", "--system-config", os.path.join(conf, "system", "standalone_system.toml"),
           "--tests-dir", os.path.join(conf, "test"), "--test-scenario",
           os.path.join(conf, "test_scenario", "sleep.toml"), "--output-dir", os.path.join(work, "out")]
    rows = [
        ("cloudai --help", [BIN, "--help"], "< 5 ms"),
        ("cloudai dry-run (sleep scenario, standalone)", dry, "< 30 ms"),
        ("cloudai verify-configs conf/", [BIN, "verify-configs", os.path.join(ROOT, "conf")], ""),
    ]
    lines = [f"{'command':<48} {'median ms':>10} {'min ms':>8} {'peak RSS MB':>12}  target"]
    for name, cmd, target in rows:
        med, lo, rss = measure(cmd, args.runs, work)
        lines.append(f"{name:<48} {med:>10.2f} {lo:>8.2f} {rss:>12.1f}  {target}")
    lines.append(f"(peak RSS target < 15 MB; {args.runs} runs each; {os.cpu_count()} cores)")
    shutil.rmtree(work)
    out = "\n".join(lines)
    print(out)
    with open(os.path.join(ROOT, "bench", "results.txt"), "w") as f:
        f.write(out + "\n")


if __name__ == "__main__":
    sys.exit(main())
