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
DATA = os.path.join(ROOT, "crates", "cloudai", "tests", "data")


def peak_rss_mb(cmd, cwd, check=True):
    """Peak RSS of `cmd` itself, from GNU time (a Python child would report the forked interpreter's memory)."""
    r = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], cwd=cwd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, check=check)
    return int(r.stderr.strip().splitlines()[-1]) / 1024


def measure(cmd, runs, cwd):
    """Median and min wall time (ms) over `runs`, and peak RSS (MB)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000, min(times) * 1000, peak_rss_mb(cmd, cwd)


def report_1000(work):
    """generate-report over 1,000 iteration directories, each with a 28-row nccl-tests table."""
    sample = os.path.join(DATA, "nccl-samples", "seed-h100-1gpu-allreduce-runai.txt")
    tests = os.path.join(work, "rtests")
    os.makedirs(tests, exist_ok=True)
    with open(os.path.join(tests, "nccl.toml"), "w") as f:
        f.write('name = "nccl"\ndescription = "d"\ntest_template_name = "NcclTest"\n[cmd_args]\ndocker_image_url = ""\n')
    scen = os.path.join(work, "r1000.toml")
    with open(scen, "w") as f:
        f.write('name = "r1000"\n[[Tests]]\nid = "ar"\ntest_name = "nccl"\niterations = 1000\n')
    out = os.path.join(work, "r1000")
    subprocess.run([BIN, "dry-run", "--tests-dir", tests, "--test-scenario", scen, "--output-dir", out],
                   cwd=work, stdout=subprocess.DEVNULL, check=True)
    root = os.path.join(out, os.listdir(out)[0])
    text = open(sample).read()
    for it in os.listdir(os.path.join(root, "ar")):
        with open(os.path.join(root, "ar", it, "stdout.txt"), "w") as f:
            f.write(text)
    med, lo, rss = measure([BIN, "generate-report", "--result-dir", root], 3, work)
    base = os.path.join(work, "baseline.toml")
    subprocess.run([BIN, "baseline", "create", "--result-dir", root, "--output", base], cwd=work,
                   stdout=subprocess.DEVNULL, check=True)
    # the disk's file creation dominates and varies: compare with and without, interleaved, on tmpfs
    shm = tempfile.mkdtemp(prefix="cloudai-bench-", dir="/dev/shm") if os.path.isdir("/dev/shm") else work
    tree = os.path.join(shm, "r1000")
    shutil.copytree(root, tree)
    plain, graded = [], []
    for _ in range(7):
        plain.append(measure([BIN, "generate-report", "--result-dir", tree], 1, work)[0])
        graded.append(measure([BIN, "generate-report", "--result-dir", tree, "--baseline", base], 1, work)[0])
    if shm != work:
        shutil.rmtree(shm)
    p, g = statistics.median(plain), statistics.median(graded)
    return (f"generate-report, 1,000 iterations x 28 rows (parse+grade+CSV+HTML+summary): median {med:.0f} ms, min {lo:.0f} ms, peak RSS {rss:.1f} MB (target < 1 s)\n"
            f"  ... on tmpfs {p:.0f} ms; with --baseline {g:.0f} ms (+{(g / p - 1) * 100:.0f}%; target < +20%)")


def grade_2gb(work):
    """generate-report over one iteration whose stdout.txt is 2 GiB: a 24-row table inside NCCL INFO noise."""
    tests = os.path.join(work, "btests")
    os.makedirs(tests, exist_ok=True)
    with open(os.path.join(tests, "nccl.toml"), "w") as f:
        f.write('name = "nccl"\ndescription = "d"\ntest_template_name = "NcclTest"\n[cmd_args]\ndocker_image_url = ""\n')
    scen = os.path.join(work, "big.toml")
    with open(scen, "w") as f:
        f.write('name = "big"\n[[Tests]]\nid = "ar"\ntest_name = "nccl"\n')
    out = os.path.join(work, "big")
    subprocess.run([BIN, "dry-run", "--tests-dir", tests, "--test-scenario", scen, "--output-dir", out],
                   cwd=work, stdout=subprocess.DEVNULL, check=True)
    root = os.path.join(out, os.listdir(out)[0])
    log = os.path.join(root, "ar", "0", "stdout.txt")
    noise = ("node001:10:20 [0] NCCL INFO Channel 07/0 : 0[0] -> 1[1] via P2P/CUMEM/read, buffer size 4194304 "
             "bytes\n" * 10000).encode()
    total = 2 << 30
    with open(log, "wb") as f:
        f.write(b"# nThread 1 nGpus 1 minBytes 8 maxBytes 67108864 step: 2(factor) warmup iters: 5 iters: 20 "
                b"agg iters: 1 validation: 1 graph: 0\n#  Rank  0 Group  0 Pid  10 on node001 device  0 "
                b"[0000:1a:00] NVIDIA H100 80GB HBM3\n#       size         count      type   redop    root     time   "
                b"algbw   busbw #wrong     time   algbw   busbw #wrong\n")
        written = 0
        for i in range(24):
            size = 8 << i
            bw = 1.0 + i
            f.write(f"{size:>12}  {size // 4:>12}     float     sum      -1    10.00  {bw:>6.2f}  {bw:>6.2f}      0"
                    f"    10.00  {bw:>6.2f}  {bw:>6.2f}      0\n".encode())
            while written < total * (i + 1) // 24:
                f.write(noise)
                written += len(noise)
        f.write(b"# Avg bus bandwidth    : 12.5 \n")
    t0 = time.perf_counter()
    # the verdict does not matter here (exit 0 or 3), only the cost
    rss = peak_rss_mb([BIN, "generate-report", "--result-dir", root], work, check=False)
    secs = time.perf_counter() - t0
    os.remove(log)
    return (f"generate-report, one iteration with 2 GiB of output (INFO noise): {secs:.1f} s "
            f"({2048 / secs:.0f} MB/s), peak RSS {rss:.1f} MB (target < 64 MB)")


def write_rows_log(log, total):
    """An nccl-tests stdout of at least `total` bytes of table rows (a `-N 0` soak run printing its 8-size table
    again and again); (bytes of rows written, one block of rows)."""
    table = "".join(
        f"{8 << i:>12}  {(8 << i) // 4:>12}     float     sum      -1    10.00  {1.0 + i:>6.2f}  {1.0 + i:>6.2f}      0"
        f"    10.00  {1.0 + i:>6.2f}  {1.0 + i:>6.2f}      0\n" for i in range(8)).encode() * 2000
    with open(log, "wb") as f:
        f.write(b"# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20 "
                b"agg iters: 1 validation: 1 graph: 0\n#  Rank  0 Group  0 Pid  10 on node001 device  0 "
                b"[0000:1a:00] NVIDIA H100 80GB HBM3\n#       size         count      type   redop    root     time   "
                b"algbw   busbw #wrong     time   algbw   busbw #wrong\n")
        written = 0
        while written < total:
            f.write(table)
            written += len(table)
        f.write(b"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 4.5 \n")
    return written, table


def grade_rows(work, gib):
    """generate-report over one iteration whose stdout.txt is `gib` GiB of table rows (a `-N 0` soak run printing
    its 8-size table again and again): grading keeps the first rows and tallies the rest; the CSV is streamed."""
    tests = os.path.join(work, "rowtests")
    os.makedirs(tests, exist_ok=True)
    with open(os.path.join(tests, "nccl.toml"), "w") as f:
        f.write('name = "nccl"\ndescription = "d"\ntest_template_name = "NcclTest"\n[cmd_args]\ndocker_image_url = ""\n')
    scen = os.path.join(work, "rows.toml")
    with open(scen, "w") as f:
        f.write('name = "rows"\n[[Tests]]\nid = "ar"\ntest_name = "nccl"\n')
    out = os.path.join(work, f"rows{gib}")
    subprocess.run([BIN, "dry-run", "--tests-dir", tests, "--test-scenario", scen, "--output-dir", out],
                   cwd=work, stdout=subprocess.DEVNULL, check=True)
    root = os.path.join(out, os.listdir(out)[0])
    log = os.path.join(root, "ar", "0", "stdout.txt")
    written, table = write_rows_log(log, gib << 30)
    rows = written // (len(table) // 16000)
    t0 = time.perf_counter()
    rss = peak_rss_mb([BIN, "generate-report", "--result-dir", root], work, check=False)
    secs = time.perf_counter() - t0
    csv = os.path.join(root, "ar", "0", "cloudai_nccl_test_csv_report.csv")
    with open(csv, "rb") as f:
        csv_rows = sum(1 for _ in f) - 1
    shutil.rmtree(out)
    return (f"generate-report, {gib} GiB of table rows ({rows / 1e6:.1f} M rows, CSV {csv_rows / 1e6:.1f} M rows): "
            f"{secs:.1f} s ({gib * 1024 / secs:.0f} MB/s), peak RSS {rss:.1f} MB (target < 64 MB)")


def parser_throughput():
    r = subprocess.run(["cargo", "run", "--release", "-q", "-p", "cloudai", "--example", "parse_bench", "--", "100"],
                       cwd=ROOT, capture_output=True, text=True, check=True)
    return "parser: " + r.stdout.strip() + " (target >= 200 MB/s)"


def squeue_per_poll(work):
    """squeue calls per poll in a real run of the sleep scenario on the local Slurm cluster, if one is up."""
    if subprocess.run(["scontrol", "ping"], capture_output=True).returncode != 0:
        return "squeue calls per poll: (no Slurm cluster up: scripts/slurm-cluster.sh start)"
    log = os.path.join(work, "slurm-debug.log")
    subprocess.run([BIN, "--log-file", log, "run", "--system-config",
                    os.path.join(ROOT, "conf/common/system/local_slurm_cluster.toml"), "--tests-dir",
                    os.path.join(ROOT, "conf/common/test"), "--test-scenario",
                    os.path.join(ROOT, "conf/common/test_scenario/sleep.toml"), "--output-dir", os.path.join(work, "slurm")],
                   cwd=work, stdout=subprocess.DEVNULL, check=True)
    text = open(log).read()
    polls, squeues = text.count("Poll: "), text.count("Executing command: squeue")
    return f"squeue calls per poll (real Slurm run of the sleep scenario): {squeues}/{polls} = {squeues / max(polls, 1):.2f}"


def kubernetes_requests():
    """Requests cloudai sends for 16 Jobs on the local Kubernetes test cluster (start it with KUBE_AUDIT=1)."""
    if not os.path.exists(os.path.join(ROOT, "build", "kube", "kubeconfig")):
        return "kubernetes: (no test cluster: KUBE_AUDIT=1 scripts/kube-cluster.sh start)"
    out = subprocess.run(
        ["cargo", "test", "--release", "-q", "-p", "cloudai", "--test", "kubernetes", "--",
         "--ignored", "--nocapture", "bench_sixteen_jobs"],
        cwd=ROOT, capture_output=True, text=True,
    ).stdout
    lines = [l[len("BENCH "):] for l in out.splitlines() if l.startswith("BENCH ")]
    return lines[0] if lines else "kubernetes: the benchmark did not run"


def runai_requests(work, jobs=200, run_s=60, interval=1):
    """`jobs` concurrent 1-node NCCL workloads of `run_s` s on the Run:ai mock at `monitor_interval`: HTTP requests
    per job-minute (CloudAI: ~3 GETs per second per job, ~180 per minute), the workload GETs among them, and
    cloudai's peak memory."""
    import json
    import socket
    import urllib.request
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "runai-mock"], cwd=ROOT, check=True)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    sample = os.path.join(DATA, "nccl-samples", "single-node-8gpu-a100-allreduce-v2.19.4.txt")
    mock = subprocess.Popen([os.path.join(ROOT, "target", "release", "runai-mock"), "--listen", f"127.0.0.1:{port}",
                             "--stdout", sample, "--durations", f"0.5,0,0.5,{run_s},0.5"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        d = os.path.join(work, f"runai-{jobs}-{interval}")
        os.makedirs(os.path.join(d, "tests"), exist_ok=True)
        system = open(os.path.join(ROOT, "conf/common/system/runai_mock.toml")).read().replace("18080", str(port))
        system = "\n".join(f"monitor_interval = {interval}" if l.startswith("monitor_interval") else l
                            for l in system.splitlines()) + "\n"
        with open(os.path.join(d, "system.toml"), "w") as f:
            f.write(system)
        with open(os.path.join(d, "tests", "nccl.toml"), "w") as f:
            f.write('name = "nccl"\ndescription = "d"\ntest_template_name = "NcclTest"\n[cmd_args]\ndocker_image_url = "img"\n')
        with open(os.path.join(d, "s.toml"), "w") as f:
            f.write('name = "many"\n' + "".join(f'[[Tests]]\nid = "t{i}"\ntest_name = "nccl"\n' for i in range(jobs)))
        t0 = time.perf_counter()
        r = subprocess.run(["/usr/bin/time", "-f", "%M", BIN, "run", "--system-config", "system.toml", "--tests-dir", "tests",
                            "--test-scenario", "s.toml", "--output-dir", "out"], cwd=d, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, check=True)
        wall = time.perf_counter() - t0
        rss = int(r.stderr.strip().splitlines()[-1]) / 1024
        journal = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/mock/journal"))
    finally:
        mock.terminate()
        mock.wait()
    def own_get(x):
        rest = x["path"][len("/api/v1/workloads/"):] if x["path"].startswith("/api/v1/workloads/") else ""
        return x["method"] == "GET" and rest and "/" not in rest
    gets = sum(1 for x in journal if own_get(x))
    job_minutes = jobs * wall / 60
    return (f"Run:ai, {jobs:>3} workload(s) x {run_s} s, monitor_interval {interval:>2}: {len(journal):>6} requests in "
            f"{wall:5.1f} s = {len(journal) / job_minutes:5.1f} per job-minute ({gets / job_minutes:5.1f} workload GETs); "
            f"peak RSS {rss:.1f} MB"), rss


def runai_lines(work):
    out = []
    for jobs in (1, 200):
        for interval in (1, 10):
            line, _ = runai_requests(work, jobs=jobs, interval=interval)
            print(line, flush=True)
            out.append(line)
    out.append("  (CloudAI: ~180 GETs per job-minute at its 1 s interval; goal: one paged list per poll for all workloads)")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--grading", action="store_true", help="only the grading-memory numbers (1 and 4 GiB of rows)")
    ap.add_argument("--runai", action="store_true", help="only the Run:ai request and memory numbers")
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "cloudai"], cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix="cloudai-bench-")
    if args.runai:
        runai_lines(work)
        shutil.rmtree(work)
        return 0
    if args.grading:
        for gib in (1, 4):
            print(grade_rows(work, gib), flush=True)
        shutil.rmtree(work)
        return 0
    conf = os.path.join(ROOT, "conf", "common")
    dry = [BIN, "dry-run", "--system-config", os.path.join(conf, "system", "standalone_system.toml"),
           "--tests-dir", os.path.join(conf, "test"), "--test-scenario",
           os.path.join(conf, "test_scenario", "sleep.toml"), "--output-dir", os.path.join(work, "out")]
    shared = os.path.join(DATA, "compat")
    nccl_case = [BIN, "dry-run", "--system-config", os.path.join(shared, "conf/common/system/example_slurm_cluster.toml"),
                 "--tests-dir", os.path.join(shared, "conf/common/test"), "--test-scenario",
                 os.path.join(shared, "conf/common/test_scenario/nccl_test.toml"), "--hook-dir",
                 os.path.join(shared, "conf/hook"), "--output-dir", os.path.join(work, "out")]
    many = os.path.join(work, "many.toml")
    with open(many, "w") as f:
        f.write('name = "many"\n[[Tests]]\nid = "Tests.many"\ntest_name = "nccl_test_all_reduce"\n'
                'num_nodes = 2\niterations = 1000\ntime_limit = "00:10:00"\n')
    def many_cmd(out):
        return [BIN, "dry-run", "--system-config", os.path.join(ROOT, "conf/common/system/example_slurm_cluster.toml"),
                "--tests-dir", os.path.join(conf, "test"), "--test-scenario", many, "--output-dir", out]
    # a controller that does not answer: a scontrol that hangs 3 s (dry-run must not ask it)
    down = os.path.join(work, "down-bin")
    os.makedirs(down)
    with open(os.path.join(down, "scontrol"), "w") as f:
        f.write("#!/bin/sh\nsleep 3\n")
    os.chmod(os.path.join(down, "scontrol"), 0o755)
    hundred = os.path.join(work, "hundred.toml")
    with open(hundred, "w") as f:
        f.write('name = "hundred"\n' + "".join(
            f'[[Tests]]\nid = "t{i}"\ntest_name = "nccl_test_all_reduce"\nnum_nodes = 2\n' for i in range(100)))
    hundred_cmd = ["env", f"PATH={down}:{os.environ['PATH']}", BIN, "dry-run", "--system-config",
                   os.path.join(ROOT, "conf/common/system/example_slurm_cluster.toml"), "--tests-dir",
                   os.path.join(conf, "test"), "--test-scenario", hundred, "--output-dir", os.path.join(work, "h")]
    shm = tempfile.mkdtemp(prefix="cloudai-bench-", dir="/dev/shm") if os.path.isdir("/dev/shm") else work
    rows = [
        ("cloudai --help", [BIN, "--help"], "< 5 ms", args.runs),
        ("cloudai dry-run (sleep scenario, standalone)", dry, "< 30 ms", args.runs),
        ("cloudai verify-configs conf/", [BIN, "verify-configs", os.path.join(ROOT, "conf")], "", args.runs),
        ("dry-run slurm-nccl case (5 tests + hooks)", nccl_case, "< 50 ms (CloudAI: 22 s)", args.runs),
        ("dry-run 100 NCCL tests, Slurm controller down", hundred_cmd, "< 100 ms (was 3.05 s)", 10),
        ("dry-run 1,000 iterations, Slurm, disk", many_cmd(os.path.join(work, "many")), "< 1 s", 5),
        ("dry-run 1,000 iterations, Slurm, tmpfs", many_cmd(os.path.join(shm, "many")), "< 1 s", 5),
    ]
    lines = [f"{'command':<48} {'median ms':>10} {'min ms':>8} {'peak RSS MB':>12}  target"]
    for name, cmd, target, runs in rows:
        med, lo, rss = measure(cmd, runs, work)
        lines.append(f"{name:<48} {med:>10.2f} {lo:>8.2f} {rss:>12.1f}  {target}")
    if shm != work:
        shutil.rmtree(shm)
    lines.append(report_1000(work))
    lines.append(grade_2gb(work))
    lines.extend(grade_rows(work, gib) for gib in (1, 4))
    lines.append(parser_throughput())
    lines.append(squeue_per_poll(work))
    lines.extend(runai_lines(work))
    lines.append(kubernetes_requests())
    lines.append(f"(peak RSS target < 15 MB; {args.runs} runs each; {os.cpu_count()} cores)")
    shutil.rmtree(work)
    out = "\n".join(lines)
    print(out)
    with open(os.path.join(ROOT, "bench", "results.txt"), "w") as f:
        f.write(out + "\n")


if __name__ == "__main__":
    sys.exit(main())
