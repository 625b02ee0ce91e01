#!/usr/bin/env python3
"""The kernels' speed targets per CPU class, measured on this machine in one go.

Runs `mxtrain bench gemm` once per CPU class this machine can run (natively, and as the
smaller classes: `MXTRAIN_MAX_GEMM_PATH=avx512-bf16`, and the AVX2 caps of the test
command for the FMA-only class), `mxtrain bench quantize` at 4096 x 4096 on 2 threads a few
times natively and under the caps, `mxtrain bench train` under the caps (the FMA-only
class's training step, MXFP8 against bf16), and prints one table: each target, the figure it is
judged on, and whether it holds. The targets and why they are what they are:
docs/benchmarks.md ("Targets"). Every figure is a ratio measured in the same run as its
baseline (oneDNN's matmul, the unit's peak loop, the dense twin, the memcpy-style pass), so
the table compares like with like on a noisy host; run it twice before believing a miss.

    python3 scripts/bench_targets.py [--cli build/release/mxtrain] [--save DIR | --load DIR]

--save DIR keeps the JSON lines of every run (one file per run); --load DIR judges saved
ones instead of running anything. Exit code 0 whatever the verdicts (it is a report).
"""

import argparse
import json
import os
import subprocess
import sys

CAPS = {
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MXTRAIN_MAX_SIMD_TARGET": "AVX2",
    "MXTRAIN_MAX_GEMM_PATH": "simd-f32",
}
# The runs of `bench gemm`: the class, the environment that makes this machine behave as
# one of it, and the GEMM path that the class runs.
GEMM_RUNS = [
    ("amx-bf16", {}, "amx-bf16"),
    ("avx512-bf16", {"MXTRAIN_MAX_GEMM_PATH": "avx512-bf16"}, "avx512-bf16"),
    ("fma-f32", CAPS, "simd-f32"),
]
QUANTIZE_RUNS = [("native", {}), ("avx2-caps", CAPS)]
# `bench train` (the main job's model, runs stepped in turn) for the FMA-only class, where
# an MXFP8 step and a bf16 step both run on fp32 FMA.
TRAIN_RUNS = [("fma-f32", CAPS)]
TRAIN_ARGS = ["train", "--runs", "bf16,mxfp8-quantized,mxfp8-deferred", "--rounds", "20"]
QUANTIZE_REPEATS = 3
QUANTIZE_ARGS = ["quantize", "--shape", "4096x4096", "--threads", "2", "--reps", "15"]
# The cases the GEMM targets are about (the smoke and the main job's `train_` cases are
# reported by the bench but judged by no target).
FAMILIES = ("square_4096", "layer_", "moe_")
LAYERS = ("qkv", "proj", "fc1", "fc2")


def judged(line):
    return line["case"].startswith(FAMILIES)


def by_case(lines):
    return {line["case"]: line for line in lines}


def wgrad_over_fprop(cases, names):
    """(worst wgrad / fprop GFLOP/s ratio over the families `names`, its family)."""
    worst = None
    for name in names:
        fprop, wgrad = cases.get(name + "_fprop"), cases.get(name + "_wgrad")
        if fprop and wgrad:
            r = wgrad["gflops"] / fprop["gflops"]
            if worst is None or r < worst[0]:
                worst = (r, name)
    return worst


def lowest(lines, key):
    """(lowest value of `key` over `lines`, its case), or None."""
    values = [(line[key], line["case"]) for line in lines if line.get(key) is not None]
    return min(values) if values else None


def gemm_targets(cls, lines):
    """Rows (class, target, figure, holds) for one class's `bench gemm` lines."""
    cases = by_case(lines)
    dense = [line for line in lines if judged(line)]
    grouped = [line for line in dense if line["kind"] == "grouped"]
    square = cases.get("square_4096")
    rows = []

    def row(target, found, threshold):
        if found is None:
            rows.append((cls, target, "not measured", "-"))
            return
        value, where = found
        figure = f"{value:.3f} ({where})" if where else f"{value:.3f}"
        rows.append((cls, target, figure, "yes" if value >= threshold else "NO"))

    peak = square and (square["peak_fraction"], "")
    layers = ["layer_" + name for name in LAYERS] + ["moe_fc1", "moe_fc2"]
    if cls == "fma-f32":
        row("fraction of the FMA peak at 4096^3 >= 0.85", peak, 0.85)
        row("x oneDNN f32, every square/layer/MoE case >= 0.95", lowest(dense, "ratio"), 0.95)
        row("grouped x its dense twin >= 0.9", lowest(grouped, "vs_dense"), 0.9)
        row("wgrad / fprop GFLOP/s >= 0.9", wgrad_over_fprop(cases, layers), 0.9)
    elif cls == "avx512-bf16":
        row("x oneDNN bf16, every square/layer/MoE case >= 1.0", lowest(dense, "ratio"), 1.0)
        row("fraction of the VDPBF16PS peak at 4096^3 >= 0.88", peak, 0.88)
    elif cls == "amx-bf16":
        fprops = [cases[f"layer_{n}_fprop"] for n in LAYERS if f"layer_{n}_fprop" in cases]
        row("x oneDNN bf16, every layer fprop >= 1.5", lowest(fprops, "ratio"), 1.5)
        row("fraction of the AMX peak at 4096^3 >= 0.40", peak, 0.40)
        dgrads = [line for line in grouped if line["gemm"] == "dgrad"]
        row("grouped dgrad x its dense twin >= 0.9", lowest(dgrads, "vs_dense"), 0.9)
        three = ["layer_qkv", "layer_proj", "layer_fc1"]
        row("wgrad / fprop GFLOP/s on qkv, proj, fc1 >= 0.9",
            wgrad_over_fprop(cases, three), 0.9)
    return rows


def quantize_targets(label, runs):
    """Rows for `bench quantize` runs (lists of lines): every case >= 0.8 in every run."""
    worst = {}
    for lines in runs:
        for line in lines:
            key = f"{line['case']} {line['dtype']}"
            worst[key] = min(worst.get(key, line["ratio"]), line["ratio"])
    if not worst:
        return [(f"quantize ({label})", "every case >= 0.8 of its baseline", "not measured", "-")]
    key, value = min(worst.items(), key=lambda kv: kv[1])
    figure = f"{value:.3f} ({key}; lowest of {len(runs)} runs)"
    return [(f"quantize ({label})", "every case >= 0.8 of its baseline, every run", figure,
             "yes" if value >= 0.8 else "NO")]


def train_targets(cls, lines):
    """Rows for `bench train` lines: every MXFP8 run's step no slower than bf16's."""
    mx = [(line["ratio"], line["run"]) for line in lines if line["run"].startswith("mxfp8")]
    target = "MXFP8 step / bf16 step, median per round, <= 1.0"
    if not mx:
        return [(cls, target, "not measured", "-")]
    value, run = max(mx)
    return [(cls, target, f"{value:.3f} ({run})", "yes" if value <= 1.0 else "NO")]


def run_bench(cli, args, env, save, name):
    full_env = dict(os.environ, **env)
    out = subprocess.run([cli, "bench", *args], env=full_env, check=True, text=True,
                         stdout=subprocess.PIPE).stdout
    if save:
        with open(os.path.join(save, name + ".jsonl"), "w") as f:
            f.write(out)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def load(directory, name):
    path = os.path.join(directory, name + ".jsonl")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cli", default="build/release/mxtrain")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--save", metavar="DIR")
    group.add_argument("--load", metavar="DIR")
    args = parser.parse_args()
    if args.save:
        os.makedirs(args.save, exist_ok=True)

    def lines_of(name, bench_args, env):
        """The JSON lines of run `name`: saved ones (--load), or a run of `mxtrain bench`."""
        if args.load:
            return load(args.load, name)
        print(f"# bench {name} ...", file=sys.stderr)
        return run_bench(args.cli, bench_args, env, args.save, name)

    rows = []
    paths = []
    if not args.load:
        listing = subprocess.run([args.cli, "bench", "--list"], check=True, text=True,
                                 stdout=subprocess.PIPE).stdout
        paths = next(line.split(":", 1)[1].split() for line in listing.splitlines()
                     if line.startswith("gemm paths:"))
    for cls, env, path in GEMM_RUNS:
        name = "gemm-" + cls
        lines = None
        if args.load or path in paths:
            lines = lines_of(name, ["gemm", "--reps", "3"], env)
        if lines is None:
            rows.append((cls, "(every target of the class)", "not measured: no such unit here",
                         "-"))
            continue
        ran = {line["path"] for line in lines}
        assert ran == {path}, f"{name}: ran {ran}, expected {path}"
        rows += gemm_targets(cls, lines)
    for cls, env in TRAIN_RUNS:
        rows += train_targets(cls, lines_of("train-" + cls, TRAIN_ARGS, env) or [])
    for label, env in QUANTIZE_RUNS:
        runs = []
        for i in range(QUANTIZE_REPEATS):
            lines = lines_of(f"quantize-{label}-{i}", QUANTIZE_ARGS, env)
            if lines:
                runs.append(lines)
        rows += quantize_targets(label, runs)

    print("| class | target | lowest figure (where) | holds |")
    print("|---|---|---|---|")
    for cls, target, figure, holds in rows:
        print(f"| {cls} | {target} | {figure} | {holds} |")


if __name__ == "__main__":
    main()
