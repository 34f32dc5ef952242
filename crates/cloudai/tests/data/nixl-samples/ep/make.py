"""Writes the node logs of a two-node NIXL EP run of the plan [[0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6, 7]] (four
workers per node) with the print statements of NIXL's examples/device/ep/tests/elastic/elastic.py: each rank's
`[rank R] Dispatch + combine bandwidth: …` line per phase it runs and its `-> end phase P` line. The numbers are
made up; no public log of a run exists."""
import random

random.seed(11)
plan = [[0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6, 7]]
for node, ranks in [(0, [0, 1, 2, 3]), (1, [4, 5, 6, 7])]:
    lines = []
    for phase, active in enumerate(plan):
        for r in ranks:
            if r not in active:
                continue
            avg = random.uniform(480, 520)
            lo, hi = avg - random.uniform(5, 15), avg + random.uniform(5, 25)
            bw = 21.0e-3 * 1e6 / avg
            lines.append(f"[rank {r}] Dispatch + combine bandwidth: {bw:.2f} GB/s, "
                         f"avg_t={avg:.2f} us, min_t={lo:.2f} us, max_t={hi:.2f} us")
        for r in ranks:
            if r in active:
                lines.append(f"global_rank={r}, local_rank={r % 4} -> end phase {phase}")
    for r in ranks:
        lines.append(f"global_rank={r}, local_rank={r % 4} -> done")
    open(f"nixl-ep-node-{node}.log", "w").write("\n".join(lines) + "\n")
