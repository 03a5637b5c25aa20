"""Checks runtime_bench.py's rank correlations: the strict tau-b over distinct plans, and the tau at
the runs' resolution (plans predicted closer than the run-to-run spread tied in the prediction)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import runtime_bench as rb  # noqa: E402


def check(what, got, want):
    if got != want and not (isinstance(want, float) and got is not None and abs(got - want) < 1e-9):
        print(f"FAIL {what}: got {got!r}, want {want!r}")
        sys.exit(1)


# dp and gholami predicted 0.2% apart and measured in the other order: a discordant pair strictly,
# a tie at a 4% resolution.
plans = [("dp", 0.0500, 0.0520), ("gholami", 0.0501, 0.0510), ("megatron", 0.0550, 0.0560), ("mp", 0.0600, 0.0610)]
check("strict tau", round(rb.kendall_tau_b([p[1] for p in plans], [p[2] for p in plans]), 6), round(4 / 6, 6))
tau, groups = rb.tau_at_resolution(plans, 0.04)
check("levels at 4%", groups, ["dp=gholami", "megatron", "mp"])
check("tau at 4%", round(tau, 6), round(5 / (6 * 5) ** 0.5, 6))
# Everything within the resolution: no order is claimed.
check("one level", rb.tau_at_resolution(plans, 0.5), (None, ["dp=gholami=megatron=mp"]))
# An order the prediction claims beyond the resolution and the runs reverse still counts against it.
check("reversed", rb.tau_at_resolution([("a", 0.05, 0.07), ("b", 0.06, 0.05)], 0.04), (-1.0, ["a", "b"]))
# Levels start at their fastest plan: a chain of small steps does not fold into one level.
_, chain = rb.tau_at_resolution([("a", 1.00, 1), ("b", 1.03, 2), ("c", 1.06, 3), ("d", 1.09, 4)], 0.04)
check("chain", chain, ["a=b", "c=d"])
print("runtime_bench tau: ok")
