#!/usr/bin/env python3
"""The kernels' speed targets per CPU class, measured on this machine in one go.

Runs `mxtrain bench gemm` three times per CPU class this machine can run (natively, and as
the smaller classes: `MXTRAIN_MAX_GEMM_PATH=avx512-bf16`, and the AVX2 caps of the test
command for the FMA-only class), `mxtrain bench quantize` at 4096 x 4096 on 2 threads five
times natively and five times under the caps, `mxtrain bench train` under the caps (the
FMA-only class's training step, MXFP8 against bf16), and prints one table: each target, the
figure it is judged on, the worst single run's figure beside it, and whether it holds. The
targets and why they are what they are: docs/benchmarks.md ("Targets").

Every figure is a ratio measured in the same run as its baseline (oneDNN's matmul, the
unit's peak loop, the dense twin, the memcpy-style pass). A case is judged on the median of
its figure over the runs: on a shared host one run's figure moves by 10-20% with the
neighbours, and the lowest of some forty such figures is low by that much even where every
case is on target. The worst case's median is the judged figure; the worst figure of any
single run is printed beside it, so that a miss hidden by the median is still seen.

    python3 scripts/bench_targets.py [--cli build/release/mxtrain] [--save DIR | --load DIR]

--save DIR keeps the JSON lines of every run (one file per run); --load DIR judges saved
ones instead of running anything. Exit code 0 whatever the verdicts (it is a report).
"""

import argparse
import json
import os
import statistics
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
GEMM_REPEATS = 3
QUANTIZE_REPEATS = 5
QUANTIZE_ARGS = ["quantize", "--shape", "4096x4096", "--threads", "2", "--reps", "15"]
# The cases the GEMM targets are about (the smoke and the main job's `train_` cases are
# reported by the bench but judged by no target).
FAMILIES = ("square_4096", "layer_", "moe_")
LAYERS = ("qkv", "proj", "fc1", "fc2")


def judged(line):
    return line["case"].startswith(FAMILIES)


class Figure:
    """A target's figure over repeated runs: per place (a case, a layer, a run of the
    quantizer) the median over the runs that measured it; `judged` is the worst place's
    median, `worst` the worst value of any single run. `higher_is_better` orders them."""

    def __init__(self, higher_is_better=True):
        self.by_place = {}
        self.sign = 1 if higher_is_better else -1

    def add(self, place, value):
        if value is not None:
            self.by_place.setdefault(place, []).append(value)

    def empty(self):
        return not self.by_place

    def judged(self):
        """(worst median, its place)."""
        medians = [(self.sign * statistics.median(v), place) for place, v in self.by_place.items()]
        value, place = min(medians)
        return self.sign * value, place

    def worst(self):
        """(worst single value, its place)."""
        value, place = min((self.sign * x, place) for place, v in self.by_place.items()
                           for x in v)
        return self.sign * value, place

    def runs(self):
        return max(len(v) for v in self.by_place.values())


def row_of(cls, target, figure, threshold, show_place=True):
    """(class, target, judged figure, worst single figure, holds) for a Figure."""
    if figure.empty():
        return (cls, target, "not measured", "-", "-")

    def text(found):
        value, place = found
        return f"{value:.3f} ({place})" if show_place and place else f"{value:.3f}"

    found = figure.judged()
    holds = found[0] >= threshold if figure.sign > 0 else found[0] <= threshold
    judged = text(found) + f", median of {figure.runs()}"
    return (cls, target, judged, text(figure.worst()), "yes" if holds else "NO")


def gemm_targets(cls, runs):
    """Rows (class, target, judged, worst, holds) for one class's `bench gemm` runs (a list
    of runs, each a list of JSON lines)."""
    ratio, vs_dense, peak = Figure(), Figure(), Figure()
    dgrad_vs_dense, layer_fprop = Figure(), Figure()
    wgrad_layers, wgrad_three = Figure(), Figure()  # wgrad / fprop GFLOP/s per family
    layers = ["layer_" + name for name in LAYERS] + ["moe_fc1", "moe_fc2"]
    three = ["layer_qkv", "layer_proj", "layer_fc1"]
    for lines in runs:
        cases = {line["case"]: line for line in lines}
        for line in lines:
            if not judged(line):
                continue
            ratio.add(line["case"], line["ratio"])
            if line["kind"] == "grouped":
                vs_dense.add(line["case"], line["vs_dense"])
                if line["gemm"] == "dgrad":
                    dgrad_vs_dense.add(line["case"], line["vs_dense"])
        for name in LAYERS:
            line = cases.get(f"layer_{name}_fprop")
            if line:
                layer_fprop.add(line["case"], line["ratio"])
        if "square_4096" in cases:
            peak.add("square_4096", cases["square_4096"]["peak_fraction"])
        # wgrad over fprop within one run (the two measured seconds apart).
        for families, figure in ((layers, wgrad_layers), (three, wgrad_three)):
            for family in families:
                fprop, w = cases.get(family + "_fprop"), cases.get(family + "_wgrad")
                if fprop and w:
                    figure.add(family, w["gflops"] / fprop["gflops"])
    if cls == "fma-f32":
        return [
            row_of(cls, "fraction of the FMA peak at 4096^3 >= 0.85", peak, 0.85, False),
            row_of(cls, "x oneDNN f32, every square/layer/MoE case >= 0.95", ratio, 0.95),
            row_of(cls, "grouped x its dense twin >= 0.9", vs_dense, 0.9),
            row_of(cls, "wgrad / fprop GFLOP/s >= 0.9", wgrad_layers, 0.9),
        ]
    if cls == "avx512-bf16":
        return [
            row_of(cls, "x oneDNN bf16, every square/layer/MoE case >= 1.0", ratio, 1.0),
            row_of(cls, "fraction of the VDPBF16PS peak at 4096^3 >= 0.88", peak, 0.88, False),
        ]
    if cls == "amx-bf16":
        return [
            row_of(cls, "x oneDNN bf16, every layer fprop >= 1.5", layer_fprop, 1.5),
            row_of(cls, "fraction of the AMX peak at 4096^3 >= 0.40", peak, 0.40, False),
            row_of(cls, "grouped dgrad x its dense twin >= 0.9", dgrad_vs_dense, 0.9),
            row_of(cls, "wgrad / fprop GFLOP/s on qkv, proj, fc1 >= 0.9", wgrad_three, 0.9),
        ]
    return []


def quantize_targets(label, runs):
    """Rows for `bench quantize` runs (lists of lines): every case's median >= 0.8."""
    figure = Figure()
    for lines in runs:
        for line in lines:
            figure.add(f"{line['case']} {line['dtype']}", line["ratio"])
    return [row_of(f"quantize ({label})", "every case >= 0.8 of its baseline", figure, 0.8)]


def train_targets(cls, runs):
    """Rows for `bench train` runs: every MXFP8 run's step no slower than bf16's (each run's
    figure is already a median over rounds of the same-round ratio)."""
    figure = Figure(higher_is_better=False)
    for lines in runs:
        for line in lines:
            if line["run"].startswith("mxfp8"):
                figure.add(line["run"], line["ratio"])
    return [row_of(cls, "MXFP8 step / bf16 step, median per round, <= 1.0", figure, 1.0)]


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

    def runs_of(name, repeats, bench_args, env):
        """The runs `name-0` .. `name-(repeats-1)` that exist (--load) or were made."""
        runs = (lines_of(f"{name}-{i}", bench_args, env) for i in range(repeats))
        return [lines for lines in runs if lines]

    # One class's runs one after the other: a run takes a few minutes, and the classes'
    # figures are judged apart.
    for cls, env, path in GEMM_RUNS:
        runs = []
        if args.load or path in paths:
            runs = runs_of("gemm-" + cls, GEMM_REPEATS, ["gemm", "--reps", "3"], env)
        if not runs:
            rows.append((cls, "(every target of the class)", "not measured: no such unit here",
                         "-", "-"))
            continue
        ran = {line["path"] for lines in runs for line in lines}
        assert ran == {path}, f"gemm-{cls}: ran {ran}, expected {path}"
        rows += gemm_targets(cls, runs)
    for cls, env in TRAIN_RUNS:
        rows += train_targets(cls, runs_of("train-" + cls, 1, TRAIN_ARGS, env))
    for label, env in QUANTIZE_RUNS:
        runs = runs_of(f"quantize-{label}", QUANTIZE_REPEATS, QUANTIZE_ARGS, env)
        rows += quantize_targets(label, runs)

    print("| class | target | judged: worst case's median over runs (where) "
          "| worst single run (where) | holds |")
    print("|---|---|---|---|---|")
    for cls, target, figure, worst, holds in rows:
        print(f"| {cls} | {target} | {figure} | {worst} | {holds} |")


if __name__ == "__main__":
    main()
