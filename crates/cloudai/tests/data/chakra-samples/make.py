"""A comm_replay log as PARAM's et_replay prints it (facebookresearch/param at 1e115ff:
et_replay/comm/comms_utils.py's logging format, et_replay/comm/backend/pytorch_dist_backend.py's sayHello,
et_replay/tools/comm_replay.py's performance summary), from made-up timings: no public log of a comm_replay run
was found. `python3 make.py > two-nodes.txt`."""

import logging
import sys

HOSTS = ["node-a", "node-b"]
WORLD = 16

def log(rank, msg, *args):
    sys.stdout.write("[2026-12-06 10:00:00,000][comm_replay][INFO][Rank{:3}] - ".format(rank) + (msg % args) + "\n")

for r in range(WORLD):
    host = HOSTS[r // 8]
    hello = f"[Rank {r:3}] host {host}, device: cuda:{r % 8}, local_rank: {r % 8} world_size: {WORLD}, master_ip: 10.0.0.1"
    log(0, "Hello from Rank %d: %s", r, hello)
for i, (name, ms) in enumerate([("all_reduce", 1.5), ("all_gather", 0.7)]):
    log(0, "[%d / %d] Replayed %s with id=%s in block [%s]... %.2f us", i + 1, 2, name, i, "forward", ms * 1000)
log(0, "")
log(0, "%s Performance of replayed comms %s", "=" * 20, "=" * 20)
log(0, "%s", "-" * 50)
total = 5123.40
log(0, "E2E latency (us): %s for %s iters, %10.2f per iter in avg", total, 3, total / 3)
log(0, "%s", "-" * 50)
for name, lat, share in [("all_reduce", [3000.0, 1100.5, 900.2, 1000.0, 980.1, 1090.3], 70.0),
                         ("all_gather", [1200.0, 450.0, 350.0, 400.0, 398.0, 448.0], 30.0)]:
    log(0, "%s", "-" * 50)
    log(0, " Replayed %d %s (%.2f%%): ", 3, name, share)
    log(0, "%s", "-" * 50)
    log(0, "Latency (us)")
    log(0, " %10s %10s %10s %10s %10s %10s", "Total", "Max.", "Min.", "Average", "p50", "p95")
    log(0, " %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f", *lat)
