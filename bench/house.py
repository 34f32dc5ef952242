#!/usr/bin/env python3
"""The house's cost numbers (issue 40), for one binary or two side by side:

    python3 bench/house.py [BIN [OLD_BIN]]

- dry-run of N distinct Sleep entries (1,000 and 10,000): user time and peak RSS;
- grading one iteration of 400 MB of nccl-tests rows (parse + grade + CSV + page), beside `wc -l` and an awk
  parse + CSV pass of the same file;
- generate-report re-run over an unchanged tree of 1,000 NCCL iterations (nothing to rewrite).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import write_rows_log  # noqa: E402
DATA = os.path.join(ROOT, "crates", "cloudai", "tests", "data")


def timed(cmd, cwd):
    """(wall s, user s, peak RSS MB) of one run of cmd (GNU time's numbers)."""
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%U %M", *cmd], cwd=cwd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    user, rss = r.stderr.strip().splitlines()[-1].split()
    return wall, float(user), int(rss) / 1024


def tests_dir(work):
    d = os.path.join(work, "tests")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "sleep.toml"), "w") as f:
        f.write('name = "sleep"\ndescription = "d"\ntest_template_name = "Sleep"\n[cmd_args]\nseconds = 1\n')
    with open(os.path.join(d, "nccl.toml"), "w") as f:
        f.write('name = "nccl"\ndescription = "d"\ntest_template_name = "NcclTest"\n[cmd_args]\ndocker_image_url = ""\n')
    return d


def dry_run(binary, work, n):
    scen = os.path.join(work, f"distinct{n}.toml")
    with open(scen, "w") as f:
        f.write('name = "distinct"\n' + "".join(f'[[Tests]]\nid = "t{i}"\ntest_name = "sleep"\n' for i in range(n)))
    runs = []
    for i in range(5):
        out = os.path.join(work, f"d{n}-{i}")
        runs.append(timed([binary, "dry-run", "--tests-dir", tests_dir(work), "--test-scenario", scen,
                           "--output-dir", out], work))
        shutil.rmtree(out, ignore_errors=True)
    # the median of five by user time (one run's user time at 1,000 entries is a few clock ticks)
    return sorted(runs, key=lambda r: r[1])[2]


def rows_tree(binary, work, mb):
    scen = os.path.join(work, "rows.toml")
    with open(scen, "w") as f:
        f.write('name = "rows"\n[[Tests]]\nid = "ar"\ntest_name = "nccl"\n')
    out = os.path.join(work, "rows")
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([binary, "dry-run", "--tests-dir", tests_dir(work), "--test-scenario", scen, "--output-dir", out],
                   cwd=work, stdout=subprocess.DEVNULL, check=True)
    root = os.path.join(out, os.listdir(out)[0])
    log = os.path.join(root, "ar", "0", "stdout.txt")
    write_rows_log(log, mb << 20)
    return root, log


def grading(binary, work, mb=400):
    root, log = rows_tree(binary, work, mb)
    size = os.path.getsize(log) / 1e6
    wall, user, rss = timed([binary, "generate-report", "--result-dir", root], work)
    return size, wall, user, rss, root, log


def floors(work, log):
    wc = timed(["wc", "-l", log], work)[0]
    awk = ("BEGIN{OFS=\",\"} /^ *[0-9]/ && NF>=13 {print $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13}")
    out = os.path.join(work, "awk.csv")
    t0 = time.perf_counter()
    with open(out, "w") as f:
        subprocess.run(["awk", awk, log], stdout=f, check=True)
    return wc, time.perf_counter() - t0


def rerun_1000(binary, work):
    sample = os.path.join(DATA, "nccl-samples", "seed-h100-1gpu-allreduce-runai.txt")
    scen = os.path.join(work, "r1000.toml")
    with open(scen, "w") as f:
        f.write('name = "r1000"\n[[Tests]]\nid = "ar"\ntest_name = "nccl"\niterations = 1000\n')
    out = os.path.join(work, "r1000")
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([binary, "dry-run", "--tests-dir", tests_dir(work), "--test-scenario", scen, "--output-dir", out],
                   cwd=work, stdout=subprocess.DEVNULL, check=True)
    root = os.path.join(out, os.listdir(out)[0])
    text = open(sample).read()
    for it in os.listdir(os.path.join(root, "ar")):
        with open(os.path.join(root, "ar", it, "stdout.txt"), "w") as f:
            f.write(text)
    timed([binary, "generate-report", "--result-dir", root], work)  # the first pass writes the reports
    walls = sorted(timed([binary, "generate-report", "--result-dir", root], work)[0] for _ in range(5))
    return walls[2]


def one(binary):
    work = tempfile.mkdtemp(prefix="cloudai-house-")
    lines = []
    d1 = dry_run(binary, work, 1000)
    d10 = dry_run(binary, work, 10000)
    lines.append(f"dry-run, distinct Sleep entries (median of 5): 1,000: {d1[1]:.2f} s user ({d1[0]:.2f} s wall); "
                 f"10,000: {d10[1]:.2f} s user ({d10[0]:.2f} s wall), peak RSS {d10[2]:.1f} MB; "
                 f"ratio {d10[1] / max(d1[1], 1e-3):.1f}x (target <= 13x)")
    rerun = rerun_1000(binary, work)
    lines.append(f"generate-report re-run on 1,000 unchanged NCCL iterations: {rerun * 1000:.0f} ms wall (median of 5)")
    size, wall, user, rss, root, log = grading(binary, work)
    wc, awk = floors(work, log)
    lines.append(f"grading {size:.0f} MB of rows (parse+grade+CSV+page): {wall:.2f} s wall, {user:.2f} s user = "
                 f"{size / wall:.0f} MB/s, peak RSS {rss:.1f} MB; floor: wc -l {wc:.2f} s, awk parse+CSV {awk:.2f} s")
    shutil.rmtree(work)
    return lines


def main():
    binary = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "cloudai")
    old = [("before", os.path.abspath(sys.argv[2]))] if len(sys.argv) > 2 else []
    for label, b in [("this", binary)] + old:
        print(f"[{label}: {b}]")
        for line in one(b):
            print("  " + line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
