#!/usr/bin/python3
"""Prediction benchmark (issue 5): how well the cost model, on a calibrated cluster, predicts what
partita-run measures on this machine.

1. `partita calibrate` (or --cluster FILE).
2. A fixed suite of (model, strategy) cases on --np ranks, each through `partita run --json`. Before
   each run, a probe (`partita-calibrate --probe`: a GEMM of each family, the memory-bound kernels
   of two sizes and the all-reduce of three) checks that the host runs at the speed it was
   calibrated at; this virtual machine's host has slow spells of minutes where every kernel runs up
   to twice as long (its compute, its memory and its shared-memory collectives apart), and a run
   taken in one measures the host, not the model. When the probe is more than --host-tolerance
   slower than the calibration, the benchmark waits and probes again (up to --max-wait seconds per
   run, --wait-budget in all), and prints how fast the host was before each run it kept. A
   calibration of its own whose GEMMs or memory-bound kernels the first probes find more than
   --host-tolerance slower than the host is now was taken in such a spell, and one whose all-reduce
   lies more than --collective-tolerance off: those sweeps alone are taken again (partita-calibrate
   --sweeps, merged into its measurements in place of the first ones and fitted again;
   --recalibrations times at most).
   The host's shared-memory collectives run at one of two speeds about 2.5x apart, apart from its
   kernels' spells: the mode changes from one process to the next and within seconds, and which
   of the two is the more frequent changes over the hours. A probe in a process of its own cannot
   tell which speed the run after it meets, so each run times the probe's kernels and all-reduces
   itself, before its warm-up and after its timed iterations (`partita run --host-check`), and a
   run whose GEMMs or memory-bound kernels ran more than --host-tolerance, or whose collectives
   more than --collective-tolerance, away from their calibrated speed either way is taken again (up
   to --retakes times): a slow spell can begin between the probe and the run. The summary says how
   many were retaken and which were kept off calibration.
   The calibration's own collectives are judged against the median of --calibration-probes probes.
3. Prints per case predicted / measured / error, then the iteration-time MAPE, the per-op MAPE,
   the Kendall rank correlation (tau-b) of strategies per model (the distinct plans: families that
   chose the same plan count once), predicted against measured per
   op type and term (where the model misses), the runtime's overhead (iteration time against the
   sum of its recorded kernel and collective intervals, from the traces), and partita-run's
   all-reduce bus bandwidth against a raw MPI_Allreduce loop (partita_bench_allreduce).

Each run's results are kept in --out-dir (runs.json); --summarize-only prints the summary again
from them without running anything.

Targets in the issue: iteration MAPE <= 5%, per-op MAPE <= 10%, tau >= 0.9, overhead < 3%,
all-reduce >= 95% of raw. This prints the figures; it does not judge or tune them.

  cmake --build --preset ci --target runtime_bench      (or run this file with --partita ...)
"""

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict

MODELS = {
    # Sizes chosen so that an iteration takes tens to hundreds of ms on one core per rank.
    "mlp": "zoo:mlp?batch=256&input=1024&hidden=2048&layers=3&classes=256",
    "bert": "zoo:bert?layers=2&hidden=256&heads=4&seq=128&batch=8&vocab=2000&positions=128",
    "gpt2": "zoo:gpt2?layers=2&hidden=256&heads=4&seq=128&batch=8&vocab=2000&positions=128",
}
FAMILIES = ["dp", "mp", "owt", "megatron", "gholami", "hybrid"]


def run(cmd, log):
    with open(log, "w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
    return proc.returncode


def kendall_tau_b(xs, ys):
    n = len(xs)
    concordant = discordant = ties_x = ties_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx = (xs[i] > xs[j]) - (xs[i] < xs[j])
            dy = (ys[i] > ys[j]) - (ys[i] < ys[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif dx == dy:
                concordant += 1
            else:
                discordant += 1
    denominator = ((concordant + discordant + ties_x) * (concordant + discordant + ties_y)) ** 0.5
    return (concordant - discordant) / denominator if denominator > 0 else float("nan")


def levels_at_resolution(values, resolution):
    """Each value's level: levels start at the smallest value, and a value more than `resolution`
    (relative) above its level's first opens the next. A chain of small steps does not fold into
    one level."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0] * len(values)
    level, first = 0, values[order[0]] if values else 0.0
    for i in order:
        if values[i] > first * (1 + resolution):
            level, first = level + 1, values[i]
        out[i] = level
    return out


def tau_at_resolution(plans, resolution):
    """Kendall tau-b of plans (name, predicted, measured) at the runs' resolution: plans predicted
    within `resolution` (relative) of the fastest of their level are tied in the prediction, and
    plans measured within it of the fastest of their measured level are tied in the measurement.
    A pair tied on both sides is an order neither claims and counts for nothing; a pair tied on one
    side only counts against the tau (tau-b's ties): the runs tell apart what the prediction calls
    equal, or the prediction claims an order the runs cannot see.
    Returns (tau, the predicted levels' names joined by '=', the measured levels' likewise), tau None
    when every plan is one predicted level (no order claimed) and NaN when the prediction claims an
    order and every plan is one measured level."""
    predicted = levels_at_resolution([p[1] for p in plans], resolution)
    measured = levels_at_resolution([p[2] for p in plans], resolution)

    def names(levels, side):
        ranked = sorted(zip(plans, levels), key=lambda x: (x[1], x[0][side]))
        return ["=".join(p[0] for p, l in ranked if l == k) for k in range(max(levels) + 1)]

    if max(predicted) == 0:
        return None, names(predicted, 1), names(measured, 2)
    return kendall_tau_b(predicted, measured), names(predicted, 1), names(measured, 2)


def plan_signature(result):
    """What a run executed: every op's split and devices, and the training setup, from the plan
    partita run wrote into the case's work directory (the family's name and prose left out)."""
    with open(os.path.join(result["work_dir"], "plan.json")) as f:
        plan = json.load(f)
    ops = [(o["name"], o.get("splits", []), o.get("devices", [])) for o in plan["ops"]]
    return json.dumps([ops, plan.get("setup"), plan.get("pipeline")], sort_keys=True, default=str)


class HostProbe:
    """The probe's times against the calibration's same kernels and collectives: 1.0 is the calibrated
    speed, for the GEMMs, the memory-bound kernels and the all-reduce apart (each drifts on its own)."""

    PARTS = ("compute", "memory", "collectives")

    def __init__(self, args, reference_path):
        self.args = args
        self.reference_path = reference_path
        self.load_reference()
        self.out = os.path.join(args.out_dir, "probe.json")
        self.waited = 0.0

    @staticmethod
    def key(part, row):
        if part == "compute":
            return row["kernel"]
        return (row["kernel"] if part == "memory" else row["collective"], round(row["bytes"]))

    def load_reference(self):
        with open(self.reference_path) as f:
            m = json.load(f)
        self.reference = {part: {self.key(part, r): r["seconds"] for r in m.get(part, [])} for part in self.PARTS}

    def ratio(self):
        """(compute, memory, collectives): the medians of probe time / calibrated time (NaN for a part
        the calibration has none of the probe's sizes of)."""
        cmd = [self.args.mpirun, "-np", str(self.args.np), "-x", "OMP_NUM_THREADS=1"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += [self.args.calibrate_program, "--probe", "--threads", "1", "-o", self.out]
        if subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
            sys.exit("partita-calibrate --probe failed: " + " ".join(cmd))
        with open(self.out) as f:
            probe = json.load(f)

        def median(part):
            ref = self.reference[part]
            ratios = sorted(r["seconds"] / ref[self.key(part, r)] for r in probe.get(part, [])
                            if self.key(part, r) in ref)
            return ratios[len(ratios) // 2] if ratios else float("nan")

        r = tuple(median(part) for part in self.PARTS)
        if r[0] != r[0]:
            sys.exit("the probe's GEMMs are not in the calibration's measurements")
        return r

    def ratios(self, n):
        """The medians of n probes, part by part: the collectives' mode changes from one probe to the next."""
        rs = [self.ratio() for _ in range(n)]
        return tuple(sorted(r[i] for r in rs)[n // 2] for i in range(len(self.PARTS)))

    def settle(self):
        """Probes until the host's kernels are within tolerance or the wait limits are reached; the last
        ratios. The collectives are not waited for: the run checks its own (host_check)."""
        waited_here = 0.0
        r = self.ratio()
        while (max(x for x in r[:2] if x == x) > 1 + self.args.host_tolerance and waited_here < self.args.max_wait
               and self.waited < self.args.wait_budget):
            time.sleep(self.args.probe_interval)
            waited_here += self.args.probe_interval
            self.waited += self.args.probe_interval
            r = self.ratio()
        return r


def host_check_ratios(work, probe):
    """The run's own times (host_check.json) against the calibration's same kernels and sizes: the
    medians, before its warm-up and after its timed iterations, of its GEMMs, its memory-bound kernels
    and its all-reduces, as (compute before, compute after, memory before, ..., collectives after);
    NaN where the file, a part or the sizes are missing."""
    try:
        with open(os.path.join(work, "host_check.json")) as f:
            checked = json.load(f)
    except (OSError, ValueError):
        return (float("nan"),) * 6
    out = []
    for part in HostProbe.PARTS:
        ref = probe.reference[part]
        for when in ("before", "after"):
            rs = sorted(r["seconds"] / ref[HostProbe.key(part, r)] for r in checked.get(part, [])
                        if r.get("when") == when and HostProbe.key(part, r) in ref)
            out.append(rs[len(rs) // 2] if rs else float("nan"))
    return tuple(out)


def off_calibration(ratios, tolerance):
    """Whether a run's collectives ran outside calibrated x[1 / (1 + tolerance), 1 + tolerance]."""
    return any(x == x and not 1 / (1 + tolerance) <= x <= 1 + tolerance for x in ratios)


def trace_overhead(trace_path):
    """Per rank and iteration: 1 - (sum of op intervals) / iteration interval, mean over both."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    iterations = {}
    busy = defaultdict(float)
    for e in events:
        if e.get("ph") != "X":
            continue
        key = (e["pid"], e["args"]["iteration"])
        if e["cat"] == "iteration":
            iterations[key] = e["dur"]
        else:
            busy[key] += e["dur"]
    shares = [1 - busy[k] / d for k, d in iterations.items() if d > 0]
    return sum(shares) / len(shares) if shares else float("nan")


def calibrate(args, cluster):
    cmd = [args.partita, "calibrate", "--cluster", "localhost-cpu", "--np", str(args.np), "-o", cluster,
           "--mpirun", args.mpirun, "--work-dir", os.path.join(args.out_dir, "calibration")]
    if args.quick_calibration:
        cmd.append("--quick")
    # The suite's models: their products timed at the shapes the plans run them, which the cost
    # model prices at those times (a product's rate follows its shape, not its FLOPs alone).
    for model in args.models.split(","):
        cmd += ["--for-model", MODELS[model]]
    print("calibrating:", " ".join(cmd), flush=True)
    log = os.path.join(args.out_dir, "calibrate.log")
    if run(cmd, log) != 0:
        sys.exit(f"partita calibrate failed; see {log}")
    with open(log) as f:
        for line in f:
            if line.startswith("median |error|") or line.startswith("fit:") or "calibrated cluster" in line:
                print("  " + line.rstrip())


def recalibrate_parts(args, cluster, parts):
    """Takes the calibration's sweeps of `parts` (of compute, memory, collectives) again alone
    (partita-calibrate --sweeps: the memory-bound kernels or the collectives take minutes where the
    whole calibration takes a quarter of an hour), puts their rows in place of the calibration's own
    in its measurements.json (the first kept beside it as measurements-first.json) and fits the
    cluster again on them."""
    calibration = os.path.join(args.out_dir, "calibration")
    measurements = os.path.join(calibration, "measurements.json")
    swept = os.path.join(calibration, "retaken.json")
    cmd = [args.mpirun, "-np", str(args.np), "-x", "OMP_NUM_THREADS=1"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [args.calibrate_program, "--sweeps", ",".join(parts), "--threads", "1", "-o", swept]
    products = os.path.join(calibration, "products.json")
    if "compute" in parts and os.path.exists(products):
        cmd += ["--products", products]  # the models' own products, retaken with the compute sweeps
    if args.quick_calibration:
        cmd.append("--quick")
    print("  sweeping again:", " ".join(cmd), flush=True)
    log = os.path.join(args.out_dir, "retaken-" + "-".join(parts) + ".log")
    if run(cmd, log) != 0:
        sys.exit(f"partita-calibrate --sweeps failed; see {log}")
    with open(measurements) as f:
        doc = json.load(f)
    with open(swept) as f:
        again = json.load(f)
    for part in parts:
        if len(again[part]) != len(doc[part]):
            sys.exit(f"{swept}: {len(again[part])} {part} rows where {measurements} has {len(doc[part])}")
        doc[part] = again[part]
    if "compute" in parts and "products" in again:
        doc["products"] = again["products"]
    first = os.path.join(calibration, "measurements-first.json")
    if not os.path.exists(first):
        os.replace(measurements, first)
    with open(measurements, "w") as f:
        json.dump(doc, f, indent=1)
    cmd = [args.partita, "calibrate", "--cluster", "localhost-cpu", "--measurements", measurements, "-o", cluster]
    log = os.path.join(args.out_dir, "refit.log")
    if run(cmd, log) != 0:
        sys.exit(f"partita calibrate --measurements failed; see {log}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partita", required=True)
    ap.add_argument("--allreduce-bench", help="partita_bench_allreduce (skipped when not given)")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--cluster", help="a calibrated cluster file (default: calibrate first)")
    ap.add_argument("--quick-calibration", action="store_true")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2,
                    help="runs of the whole suite, one after the other; per case the run with the lowest median "
                         "counts, and the spread between runs is printed (this machine's noise)")
    ap.add_argument("--summarize-only", action="store_true",
                    help="run nothing: print the summary of the runs already in --out-dir (their runs.json, or "
                         "the cases' result.json files)")
    ap.add_argument("--repredict", metavar="CLUSTER",
                    help="with --summarize-only: predict each stored run's plan again on this cluster file (partita "
                         "run --measurements, nothing launched) and summarize those predictions against the same "
                         "measurements: a change to the cost model or the calibration, tried on the suite in seconds")
    ap.add_argument("--calibrate-program", help="partita-calibrate, for the host probe (no probe when not given)")
    ap.add_argument("--reference", help="the measurements.json the cluster was calibrated from (default: this "
                                        "benchmark's own calibration); the probe's reference")
    ap.add_argument("--host-tolerance", type=float, default=0.10,
                    help="how much slower than calibrated the probe may find the host before a run waits")
    ap.add_argument("--probe-interval", type=float, default=15)
    ap.add_argument("--recalibrations", type=int, default=4,
                    help="times at most that the sweeps of the calibration the probes find off the host's speed "
                         "(its kernels slower than now, or its collectives off either way) are taken again")
    ap.add_argument("--collective-tolerance", type=float, default=0.30,
                    help="how far from their calibrated speed (either way) a run's own all-reduce times may lie "
                         "before the run is taken again")
    ap.add_argument("--retakes", type=int, default=3,
                    help="runs taken again at most per case when its collectives ran off their calibrated speed")
    ap.add_argument("--calibration-probes", type=int, default=3,
                    help="probes whose median judges the calibration against the host")
    ap.add_argument("--max-wait", type=float, default=120, help="seconds a run waits at most for the host")
    ap.add_argument("--wait-budget", type=float, default=900, help="seconds all runs wait at most together")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--out-dir", default="runtime_bench")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    env_note = "OMP_NUM_THREADS=1 per rank (partita run --threads 1)"

    if args.repredict and not args.summarize_only:
        sys.exit("--repredict needs --summarize-only")
    if args.summarize_only:
        runs = load_runs(args)
        if args.repredict:
            repredict(args, runs)
        summarize(args, runs, None)
        return
    cluster = args.cluster
    if not cluster:
        cluster = os.path.join(args.out_dir, "calibrated.json")
        calibrate(args, cluster)
    print(f"cluster: {cluster}; {args.np} ranks, {env_note}, {args.iterations} timed iterations after "
          f"{args.warmup} warm-up", flush=True)
    reference = args.reference or (None if args.cluster else os.path.join(args.out_dir, "calibration",
                                                                          "measurements.json"))
    probe = HostProbe(args, reference) if args.calibrate_program and reference else None
    if probe:
        print(f"host probe: before each run, GEMMs, memory-bound kernels and all-reduces against {reference}; a run "
              f"waits while any is more than {100 * args.host_tolerance:.0f}% slower", flush=True)
    if probe and not args.cluster:
        # A calibration taken in a slow spell prices every kernel of the family it caught too high.
        # A part of the calibration the probes find off the host's speed now is swept again alone (a
        # slow spell of the kernels: they run faster now; the collectives: off either way), at most
        # --recalibrations times in all.
        for attempt in range(args.recalibrations + 1):
            now = probe.ratios(args.calibration_probes)
            print(f"  the host now against its calibration: GEMMs x{now[0]:.2f}, memory-bound kernels x{now[1]:.2f}, "
                  f"all-reduce x{now[2]:.2f} of the calibrated time", flush=True)
            off = [part for part, x in zip(("compute", "memory"), now[:2]) if x == x and x < 1 - args.host_tolerance]
            if off_calibration(now[2:], args.collective_tolerance):
                off.append("collectives")
            if not off or attempt == args.recalibrations:
                break
            print(f"  the calibration met the host at another speed than now ({', '.join(off)}): those sweeps taken "
                  f"again", flush=True)
            recalibrate_parts(args, cluster, off)
            probe.load_reference()

    runs = defaultdict(list)  # case -> results of each repeat
    retaken = defaultdict(int)  # case -> runs taken again for the host speed their own checks found
    for repeat in range(args.repeats):
      for model in args.models.split(","):
        for family in args.families.split(","):
            name = f"{model}/{family}"
            work = os.path.join(args.out_dir, f"{model}_{family}" + (f"_r{repeat}" if repeat else ""))
            out_json = os.path.join(work, "result.json")
            os.makedirs(work, exist_ok=True)
            if os.path.exists(out_json):
                os.remove(out_json)
            cmd = [args.partita, "run", MODELS[model], "--cluster", cluster, "--strategy", family, "--np",
                   str(args.np), "--iterations", str(args.iterations), "--warmup", str(args.warmup), "--threads", "1",
                   "--mpirun", args.mpirun, "--work-dir", work, "--json", out_json]
            if probe:
                cmd.append("--host-check")
            checked = (float("nan"),) * 6
            for take in range(args.retakes + 1):
                host = probe.settle() if probe else (float("nan"),) * 3
                rc = run(cmd, os.path.join(work, "run.log"))
                if rc != 0 or not os.path.exists(out_json) or not probe:
                    break
                checked = host_check_ratios(work, probe)
                kernels_off = off_calibration(checked[:4], args.host_tolerance)
                if not kernels_off and not off_calibration(checked[4:], args.collective_tolerance):
                    break
                if take < args.retakes:
                    retaken[name] += 1
                    print(f"  {name}: its GEMMs / memory-bound kernels / all-reduces ran at x{checked[0]:.2f} / "
                          f"x{checked[2]:.2f} / x{checked[4]:.2f} of their calibrated time before and x{checked[1]:.2f} / "
                          f"x{checked[3]:.2f} / x{checked[5]:.2f} after: taken again", flush=True)
            if rc != 0 or not os.path.exists(out_json):
                with open(os.path.join(work, "run.log")) as f:
                    why = [l.strip() for l in f if "error" in l.lower()]
                print(f"  {name}: failed (exit {rc}): {why[-1] if why else 'see ' + work + '/run.log'}", flush=True)
                continue
            with open(out_json) as f:
                r = json.load(f)
            r["case"], r["model_key"], r["family"] = name, model, family
            r["overhead"] = trace_overhead(os.path.join(work, "trace.json"))
            r["host"], r["host_memory"], r["host_collectives"] = host
            r["run_kernels"] = list(checked[:4])
            r["run_collectives"] = list(checked[4:])
            r["retaken"] = retaken[name]
            runs[name].append(r)
            it = r["iteration"]
            print(f"  {name} (run {repeat + 1}): predicted {it['predicted'] * 1e3:.2f} ms, measured "
                  f"{it['measured'] * 1e3:.2f} ms" + (f"; host x{host[0]:.2f} of calibrated GEMM time, x{host[1]:.2f} of "
                                                      f"memory-bound kernel time, x{host[2]:.2f} of all-reduce time; "
                                                      f"the run's own GEMMs x{checked[0]:.2f} / x{checked[1]:.2f}, "
                                                      f"memory-bound kernels x{checked[2]:.2f} / x{checked[3]:.2f}, "
                                                      f"all-reduce x{checked[4]:.2f} / x{checked[5]:.2f}"
                                                      if probe else ""),
                  flush=True)

    with open(os.path.join(args.out_dir, "runs.json"), "w") as f:
        json.dump(runs, f)
    summarize(args, runs, probe)


def load_runs(args):
    """The runs of a finished benchmark: runs.json, or else every case's result.json (host unknown)."""
    saved = os.path.join(args.out_dir, "runs.json")
    if os.path.exists(saved):
        with open(saved) as f:
            return json.load(f)
    runs = defaultdict(list)
    for repeat in range(args.repeats):
        for model in args.models.split(","):
            for family in args.families.split(","):
                work = os.path.join(args.out_dir, f"{model}_{family}" + (f"_r{repeat}" if repeat else ""))
                path = os.path.join(work, "result.json")
                if not os.path.exists(path):
                    continue
                with open(path) as f:
                    r = json.load(f)
                r["case"], r["model_key"], r["family"] = f"{model}/{family}", model, family
                r["overhead"] = trace_overhead(os.path.join(work, "trace.json"))
                r["host"] = float("nan")
                runs[r["case"]].append(r)
    if not runs:
        sys.exit(f"no results in {args.out_dir}")
    return runs


def repredict(args, runs):
    """Each run's plan predicted again on --repredict's cluster, against the run's own measurements."""
    for rs in runs.values():
        for r in rs:
            work = r["work_dir"]
            out_json = os.path.join(work, "repredicted.json")
            cmd = [args.partita, "run", r["model"], "--cluster", args.repredict, "--strategy", "given", "--plan",
                   os.path.join(work, "plan.json"), "--np", str(r["ranks"]), "--measurements",
                   os.path.join(work, "measurements.json"), "--json", out_json]
            if run(cmd, os.path.join(work, "repredict.log")) != 0:
                sys.exit(f"{r['case']}: predicting again failed; see {os.path.join(work, 'repredict.log')}")
            with open(out_json) as f:
                again = json.load(f)
            r["iteration"], r["ops"] = again["iteration"], again["ops"]
    print(f"predictions: each run's plan on {args.repredict} (partita run --measurements)")


def host_ratios(r):
    """A run's probe before it: GEMM, memory-bound kernel and all-reduce time against calibrated."""
    return r["host"], r.get("host_memory", float("nan")), r.get("host_collectives", float("nan"))


def summarize(args, runs, probe):
    results = []
    for name, rs in runs.items():
        best = min(rs, key=lambda r: r["iteration"]["measured"])
        ms = [r["iteration"]["measured"] for r in rs]
        best["spread"] = (max(ms) - min(ms)) / min(ms)
        results.append(best)
    if not results:
        sys.exit("no case ran")
    print(f"\nper case the run (of {args.repeats}) with the lowest median iteration time; spread: how much slower "
          f"the other run(s) measured")
    print(f"{'case':<18} {'predicted ms':>13} {'measured ms':>12} {'error':>8} {'overhead':>9} {'spread':>8} "
          f"{'host':>16} {'run GEMM':>10} {'run memory':>10} {'run all-reduce':>15}")
    errors = []
    for r in results:
        p, m = r["iteration"]["predicted"], r["iteration"]["measured"]
        errors.append(abs(p - m) / m)
        # NaN: not probed (memory, all-reduce: runs of an earlier benchmark, whose probe timed less)
        host = "/".join(f"{x:.2f}" if x == x else "-" for x in host_ratios(r))
        pair = lambda xs: "/".join(f"{x:.2f}" if x == x else "-" for x in xs)
        kernels = r.get("run_kernels", [float("nan")] * 4)  # runs of an earlier benchmark checked no kernels
        own = pair(r.get("run_collectives", [float("nan")] * 2))
        print(f"{r['case']:<18} {p * 1e3:>13.2f} {m * 1e3:>12.2f} {100 * (p - m) / m:>+7.1f}% "
              f"{100 * r['overhead']:>8.2f}% {100 * r['spread']:>7.1f}% {host:>16} {pair(kernels[:2]):>10} "
              f"{pair(kernels[2:]):>10} {own:>15}")
    if probe:
        slow = sum(1 for r in results if max(x for x in host_ratios(r)[:2] if x == x) > 1 + args.host_tolerance)
        print(f"host: the probe's GEMM / memory-bound kernel / all-reduce time against the calibration's before the "
              f"run (1.00: as calibrated); "
              f"{slow} of {len(results)} kept runs started above x{1 + args.host_tolerance:.2f}; "
              f"{probe.waited:.0f} s spent waiting for the host")
    checked = [r for r in results if "run_collectives" in r]
    if checked:
        off = [r["case"] for r in checked
               if off_calibration(r["run_collectives"], args.collective_tolerance)
               or off_calibration(r.get("run_kernels", []), args.host_tolerance)]
        print(f"the runs' own host checks: GEMM, memory-bound kernel and all-reduce time against calibrated, before "
              f"the warm-up / after the timed iterations: {sum(r.get('retaken', 0) for r in checked)} run(s) taken "
              f"again as off x[1/{1 + args.host_tolerance:.2f}, {1 + args.host_tolerance:.2f}] (kernels) or x[1/"
              f"{1 + args.collective_tolerance:.2f}, {1 + args.collective_tolerance:.2f}] (all-reduce); kept off it "
              f"after {args.retakes} retakes: {', '.join(off) if off else 'none'}")
    spreads = [r["spread"] for r in results]
    print(f"\nrun-to-run spread of the measured iteration time: median {100 * sorted(spreads)[len(spreads) // 2]:.1f}%, "
          f"largest {100 * max(spreads):.1f}%")
    print(f"iteration-time MAPE: {100 * sum(errors) / len(errors):.1f}% over {len(errors)} cases "
          f"(largest {100 * max(errors):.1f}%)")

    # Per op: every op with a measured time; and those that matter (>= 1% of their iteration).
    all_ops, big_ops = [], []
    weighted_num = weighted_den = 0.0
    by_term = defaultdict(lambda: [0.0, 0.0])
    for r in results:
        iteration = r["iteration"]["measured"]
        for op in r["ops"]:
            m, p = op["measured"]["total"], op["predicted"]["total"]
            for term in ("forward", "backward", "communication", "optimizer"):
                acc = by_term[(op["type"], term)]
                acc[0] += op["predicted"].get(term, 0.0)
                acc[1] += op["measured"].get(term, 0.0)
            if m <= 0:
                continue
            e = abs(p - m) / m
            all_ops.append(e)
            weighted_num += abs(p - m)
            weighted_den += m
            if m >= 0.01 * iteration:
                big_ops.append(e)
    print(f"per-op MAPE: {100 * sum(all_ops) / len(all_ops):.1f}% over all {len(all_ops)} measured ops; "
          f"{100 * sum(big_ops) / max(len(big_ops), 1):.1f}% over the {len(big_ops)} ops taking >= 1% of their "
          f"iteration; time-weighted {100 * weighted_num / weighted_den:.1f}%")

    # Families that chose the same plan (on 2 ranks gholami and hybrid often pick dp's or mp's) are
    # one strategy run several times: their measured times differ by noise alone, and counted as
    # distinct strategies their pairs are ties in the prediction that no model could order (3 tied
    # families of 6 cap tau-b at 0.89). So strategies are the distinct plans, each measured as the
    # median of its families' runs; the tau over families is printed beside it.
    print("\nKendall tau-b of strategies (distinct plans) by predicted vs measured iteration time, per model:")
    taus = []
    resolved = []  # per model, its distinct plans: (families, predicted, measured)
    for model in args.models.split(","):
        rs = [r for r in results if r["model_key"] == model]
        if len(rs) < 2:
            continue
        groups = defaultdict(list)
        for r in rs:
            groups[plan_signature(r)].append(r)
        plans = []
        for members in groups.values():
            ms = sorted(m["iteration"]["measured"] for m in members)
            middle = len(ms) // 2
            measured = ms[middle] if len(ms) % 2 else (ms[middle - 1] + ms[middle]) / 2
            plans.append(("=".join(m["family"] for m in members), members[0]["iteration"]["predicted"], measured))
        per_family = kendall_tau_b([r["iteration"]["predicted"] for r in rs], [r["iteration"]["measured"] for r in rs])
        if len(plans) < 2:
            print(f"  {model:<6} every family chose the same plan: nothing to rank (tau over families "
                  f"{per_family:+.2f})")
            continue
        tau = kendall_tau_b([p[1] for p in plans], [p[2] for p in plans])
        taus.append(tau)
        order_p = " < ".join(p[0] for p in sorted(plans, key=lambda p: p[1]))
        order_m = " < ".join(f"{p[0]} ({p[2] * 1e3:.2f})" for p in sorted(plans, key=lambda p: p[2]))
        print(f"  {model:<6} tau {tau:+.2f} over {len(plans)} distinct plans of {len(rs)} families (over families "
              f"{per_family:+.2f}); predicted {order_p}; measured ms {order_m}")
        resolved.append((model, plans))

    # Distinct plans predicted closer than the runs can tell apart (the median run-to-run spread)
    # are an order the prediction does not claim, and plans measured that close are an order the
    # runs do not show: tau-b counts such pairs as ties on that side (a pair tied on both sides
    # counts for nothing), as it counts families that chose the same plan. Printed beside the
    # strict tau, not instead of it.
    resolution = sorted(spreads)[len(spreads) // 2]
    print(f"\nthe same at the runs' resolution: distinct plans within {100 * resolution:.1f}% of each other (the "
          f"median run-to-run spread) counted as tied, in the prediction and in the measurement alike:")
    for model, plans in resolved:
        tau, predicted, measured = tau_at_resolution(plans, resolution)
        if tau is None:
            print(f"  {model:<6} every plan predicted within {100 * resolution:.1f}% of the fastest: no order claimed")
            continue
        shown = f"{tau:+.2f}" if tau == tau else "undefined (every plan measured within the resolution)"
        print(f"  {model:<6} tau {shown} over {len(plans)} plans; predicted {' < '.join(predicted)}; measured "
              f"{' < '.join(measured)}")

    print("\nwhere the time goes, all cases summed (ms per iteration): predicted vs measured by op type and term")
    print(f"  {'op type':<14} {'term':<14} {'predicted':>10} {'measured':>10} {'error':>8}")
    rows = sorted(by_term.items(), key=lambda kv: -kv[1][1])
    for (kind, term), (p, m) in rows:
        if m < 1e-4 and p < 1e-4:
            continue
        err = f"{100 * (p - m) / m:+.0f}%" if m > 0 else "-"
        print(f"  {kind:<14} {term:<14} {p * 1e3:>10.2f} {m * 1e3:>10.2f} {err:>8}")

    overheads = [r["overhead"] for r in results if r["overhead"] == r["overhead"]]
    print(f"\nruntime overhead (1 - recorded kernel+collective intervals / iteration time, mean over ranks and "
          f"iterations): mean {100 * sum(overheads) / len(overheads):.2f}%, largest {100 * max(overheads):.2f}%")

    if args.allreduce_bench and not args.summarize_only:
        cmd = [args.mpirun, "-np", str(args.np), "-x", "OMP_NUM_THREADS=1"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd.append(args.allreduce_bench)
        print("\n" + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=False)


if __name__ == "__main__":
    main()
