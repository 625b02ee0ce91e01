"""python -m mxtrain.bench: MxLinear forward + backward against PyTorch's bf16 nn.Linear.

Same shapes, same run, same threads (torch.set_num_threads(os.cpu_count()); mxtrain's
OpenMP uses every core too). Per shape, one JSON line: the median milliseconds of a
forward + backward of
  mx            MxLinear (fp32 master weights, bf16 input; e4m3, rceil; the policy given)
  torch_bf16    nn.Linear with bf16 weights and a bf16 input
  torch_autocast nn.Linear with fp32 weights under torch.autocast("cpu", bfloat16)
and ratio = torch_bf16_ms / mx_ms (above 1: mxtrain is faster).

A torch is only as fast as the BLAS it was built with, so the first line names it: torch's
version, BLAS (BLAS_INFO of torch.__config__.show(): "mkl", "open", or "generic", the
reference BLAS of Debian's python3-torch), CPU capability and oneDNN (mkldnn) use, with the
same-run GFLOP/s of a plain fp32 and bf16 matmul at 1024^3. scripts/bench_python.sh runs
this bench under Debian's torch and under PyTorch 2.x from the Python registry in one go.

    python -m mxtrain.bench [--shapes 2048x1024x4096,...] [--reps 5] [--policy deferred]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import torch as mxt

DEFAULT_SHAPES = "2048x1024x1024,2048x1024x4096,2048x4096x1024"


def _time(fn: Callable[[], object], reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _step(layer: torch.nn.Module, x: torch.Tensor, dy: torch.Tensor,
          autocast: bool = False) -> Callable[[], None]:
    def run() -> None:
        x.grad = None
        for p in layer.parameters():
            p.grad = None
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = layer(x)
        else:
            y = layer(x)
        y.backward(dy.to(y.dtype))
    return run


def torch_build() -> dict[str, Any]:
    """What this torch computes with: version, BLAS, CPU capability, oneDNN."""
    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", config)
    capability = re.search(r"CPU capability usage: (\S+)", config)
    if hasattr(torch.backends, "cpu") and hasattr(torch.backends.cpu, "get_cpu_capability"):
        cap = torch.backends.cpu.get_cpu_capability()
    else:
        cap = capability.group(1) if capability else "unknown"
    return {"torch": torch.__version__, "torch_blas": blas.group(1) if blas else "unknown",
            "torch_cpu_capability": cap, "torch_mkldnn": torch.backends.mkldnn.is_available()}


def matmul_gflops(dtype: torch.dtype, n: int = 1024, reps: int = 5) -> float:
    """GFLOP/s of an n^3 matmul in dtype, median of reps."""
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    ms = _time(lambda: a @ b, reps, warmup=1)
    return round(2 * n ** 3 / ms / 1e6, 1)


def main(argv: Sequence[str] | None = None) -> None:
    """Runs the benchmark; argv as the command line's (default sys.argv[1:])."""
    ap = argparse.ArgumentParser(prog="python -m mxtrain.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES,
                    help="comma-separated MxKxN: tokens x in_features x out_features")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--policy", choices=["quantized", "deferred", "auto"], default="quantized",
                    help="input and weight save policy of MxLinear")
    ap.add_argument("--reuse", action="store_true", help="reuse_quantized_weight=True")
    args = ap.parse_args(argv)

    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    build = torch_build()
    print(json.dumps({"case": "torch_build", **build, "threads": threads,
                      "fp32_matmul_1024_gflops": matmul_gflops(torch.float32),
                      "bf16_matmul_1024_gflops": matmul_gflops(torch.bfloat16)}), flush=True)
    for shape in args.shapes.split(","):
        m, k, n = (int(v) for v in shape.lower().split("x"))
        ref = torch.nn.Linear(k, n)
        mx = mxt.convert(torch.nn.Linear(k, n), input_policy=args.policy,
                         weight_policy=args.policy, reuse_quantized_weight=args.reuse)
        mx.load_state_dict(ref.state_dict())
        bf16 = torch.nn.Linear(k, n).to(torch.bfloat16)
        bf16.load_state_dict({key: v.bfloat16() for key, v in ref.state_dict().items()})
        x = torch.randn(m, k).bfloat16().requires_grad_(True)
        x32 = x.detach().float().requires_grad_(True)
        dy = torch.randn(m, n).bfloat16()

        mx_ms = _time(_step(mx, x, dy), args.reps)
        bf16_ms = _time(_step(bf16, x, dy), args.reps)
        autocast_ms = _time(_step(ref, x32, dy, autocast=True), args.reps)
        flops = 3 * 2 * m * k * n
        print(json.dumps({
            "case": f"linear_{m}x{k}x{n}", "m": m, "k": k, "n": n, "policy": args.policy,
            "reuse": args.reuse, "threads": threads, "torch": build["torch"],
            "torch_blas": build["torch_blas"],
            "mx_ms": round(mx_ms, 3), "mx_gflops": round(flops / mx_ms / 1e6, 1),
            "torch_bf16_ms": round(bf16_ms, 3), "torch_autocast_ms": round(autocast_ms, 3),
            "ratio": round(bf16_ms / mx_ms, 3), "ratio_autocast": round(autocast_ms / mx_ms, 3),
        }), flush=True)


if __name__ == "__main__":
    main()
