"""Checks runtime_bench.py's rank correlations: the strict tau-b over distinct plans, and the tau at
the runs' resolution (plans predicted, or measured, closer than the run-to-run spread tied on that
side)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import runtime_bench as rb  # noqa: E402


def check(what, got, want):
    if got != want and not (isinstance(want, float) and got is not None and abs(got - want) < 1e-9):
        print(f"FAIL {what}: got {got!r}, want {want!r}")
        sys.exit(1)


# dp and gholami predicted 0.2% apart and measured in the other order: a discordant pair strictly,
# a tie on both sides at a 4% resolution.
plans = [("dp", 0.0500, 0.0520), ("gholami", 0.0501, 0.0510), ("megatron", 0.0550, 0.0560), ("mp", 0.0600, 0.0610)]
check("strict tau", round(rb.kendall_tau_b([p[1] for p in plans], [p[2] for p in plans]), 6), round(4 / 6, 6))
tau, predicted, measured = rb.tau_at_resolution(plans, 0.04)
check("predicted levels at 4%", predicted, ["dp=gholami", "megatron", "mp"])
check("measured levels at 4%", measured, ["gholami=dp", "megatron", "mp"])
# dp and gholami tied on both sides: their pair counts for nothing, the other five agree.
check("tau at 4%", tau, 1.0)
# Everything predicted within the resolution: no order is claimed.
check("one level", rb.tau_at_resolution(plans, 0.5)[:2], (None, ["dp=gholami=megatron=mp"]))
# An order the prediction claims beyond the resolution and the runs reverse still counts against it.
check("reversed", rb.tau_at_resolution([("a", 0.05, 0.07), ("b", 0.06, 0.05)], 0.04), (-1.0, ["a", "b"], ["b", "a"]))
# Plans predicted tied that the runs tell apart count against the prediction (a tie in it only).
tied = [("a", 1.00, 1.00), ("b", 1.01, 1.10), ("c", 1.20, 1.30)]
check("tied in the prediction only", round(rb.tau_at_resolution(tied, 0.04)[0], 6), round(2 / (3 * 2) ** 0.5, 6))
# An order the prediction claims that the runs cannot see counts against it too (a tie in them only).
unseen = [("a", 1.00, 1.00), ("b", 1.10, 1.01), ("c", 1.20, 1.30)]
check("tied in the runs only", round(rb.tau_at_resolution(unseen, 0.04)[0], 6), round(2 / (2 * 3) ** 0.5, 6))
# Every plan measured within the resolution while the prediction orders them: undefined, not a pass.
flat = rb.tau_at_resolution([("a", 1.0, 1.00), ("b", 1.2, 1.01)], 0.04)[0]
check("undefined", flat != flat, True)
# Levels start at their fastest plan: a chain of small steps does not fold into one level.
_, chain, _ = rb.tau_at_resolution([("a", 1.00, 1), ("b", 1.03, 2), ("c", 1.06, 3), ("d", 1.09, 4)], 0.04)
check("chain", chain, ["a=b", "c=d"])
print("runtime_bench tau: ok")
