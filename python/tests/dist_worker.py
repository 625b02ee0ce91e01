"""One rank of test_distributed.py's process group (gloo on 127.0.0.1, CPU).

    python dist_worker.py --rank R --world 2 --init STORE_FILE --out RESULTS.json

Runs every case of CASES in order (each a collective: every rank runs the same cases) and
writes RESULTS.json after each: {case: {"ok": true, "info": {...}}} or {"ok": false,
"error": traceback}. Every rank builds every rank's data from the same seeds, so each can
compute, locally, what it must receive. At the first failure the rank writes the error and
exits at once (the peers' next collective then fails too, rather than running on out of
step); test_distributed.py reports each case, and runs the ranks under a timeout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import traceback

import numpy as np
import torch
import torch.distributed as dist

import mxtrain
import mxtrain.distributed as mxd
import mxtrain.torch as mxt

# The thresholds of the "ep_wire_sqnr" case, SQNR in dB of the MXFP8 wire against the HP
# wire in ExpertParallelGroupedLinear (y and dx are equal bit for bit, asserted as such):
# the weight gradient by about fp32 rounding (measured 131-164 dB, or equal: wgrad's
# columnwise blocks see the same values, rounding differently only at a double-rounding
# tie, under scales that may factor them differently), the bias gradient, a plain sum of the
# wire-rounded output gradient, by the gradient's quantization (measured 31.3-32.0 dB for
# E4M3, 25.5-25.6 dB for hybrid's E5M2). And every result of either wire against torch fp32
# (measured y 29.3-29.9 dB; dx and dw 28.4-28.7 dB with E4M3, 24.6-24.8 dB with E5M2).
# Measured with torch 1.13 and 2.15 alike.
WGRAD_SQNR_DB = 100.0
BGRAD_SQNR_DB = {"e4m3": 28.0, "hybrid": 22.0}
FP32_SQNR_DB = {"e4m3": 26.0, "hybrid": 22.0}


def rows(seed: int, rank: int, n: int, k: int, dtype: torch.dtype = torch.float32,
         spread: int = 6) -> torch.Tensor:
    """n random rows, each scaled by its own power of two (rows with different E8M0 scales),
    the same in every process."""
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    x = torch.randn(n, k, generator=g)
    x = x * torch.pow(2.0, torch.randint(-spread, spread + 1, (n, 1), generator=g).float())
    return x.to(dtype)


def qdq(x: torch.Tensor, fmt: str, scale: str = "rceil") -> torch.Tensor:
    """x quantized rowwise and dequantized to its dtype, with the numpy API directly."""
    a = x.detach().contiguous()
    bf16 = a.dtype == torch.bfloat16
    arr = a.view(torch.int16).numpy().view(np.uint16) if bf16 else a.numpy()
    q = mxtrain.quantize(arr, format=fmt, scale=scale, axis=-1)
    out = mxtrain.dequantize(q.data, q.scale, format=fmt, dtype="bf16" if bf16 else "f32")
    if bf16:
        return torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(out)


def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous()
    return t.view({torch.bfloat16: torch.int16, torch.float32: torch.int32}.get(t.dtype,
                                                                            t.dtype))


def assert_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, want {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {list(got.shape)}, want {list(want.shape)}"
    if not torch.equal(bits(got), bits(want)):
        diff = (got.double() - want.double()).abs()
        raise AssertionError(f"{what}: not bit-identical ({int((bits(got) != bits(want)).sum())}"
                             f" of {got.numel()} differ, max |diff| {float(diff.max()):.3g})")


def sqnr_db(ref: torch.Tensor, got: torch.Tensor) -> float:
    r = ref.detach().double()
    noise = float(((r - got.detach().double()) ** 2).sum())
    return float("inf") if noise == 0 else 10 * float(np.log10(float((r**2).sum()) / noise))


def itemsize(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()  # torch 1.13 has no dtype.itemsize


def block(x: torch.Tensor, splits: list[int], dest: int) -> torch.Tensor:
    """The rows of x that go to rank dest."""
    start = sum(splits[:dest])
    return x[start:start + splits[dest]]


def received(xs: list[torch.Tensor], splits: list[list[int]], rank: int) -> torch.Tensor:
    """What rank receives: each sender's block for it, sender-major."""
    return torch.cat([block(x, s, rank) for x, s in zip(xs, splits)])


# Split configurations of 2 ranks: splits[s][d] rows go from rank s to rank d.
SPLITS = {
    "uneven": [[3, 5], [7, 2]],
    "rank1_receives_none": [[4, 0], [6, 0]],
    "rank0_sends_none": [[0, 0], [2, 9]],
}


class Recorder:
    """Records what dispatch / combine hand to the byte exchange, and what comes back."""

    def __init__(self) -> None:
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.inner = mxd._all_to_all_bytes

    def __enter__(self) -> Recorder:
        def record(send: torch.Tensor, *args: object) -> torch.Tensor:
            recv = self.inner(send, *args)
            self.calls.append((send.clone(), recv.clone()))
            return recv
        mxd._all_to_all_bytes = record
        return self

    def __exit__(self, *exc: object) -> None:
        mxd._all_to_all_bytes = self.inner


# --- the cases ----------------------------------------------------------------------------


def case_exchange_splits(rank: int, world: int) -> dict:
    for name, splits in SPLITS.items():
        got = mxt.exchange_splits(splits[rank])
        assert got == [splits[s][rank] for s in range(world)], (name, got)
        got = mxt.exchange_splits(torch.tensor(splits[rank]))
        assert got == [splits[s][rank] for s in range(world)], (name, got)
    return {}


def case_dispatch_forward_wire(rank: int, world: int) -> dict:
    """dispatch_mxfp8's output is the sender's quantize + dequantize bit for bit, and the
    bytes on the wire are the sender's local packing (codes, then scales) of those rows."""
    info = {}
    options = [(torch.float32, "e4m3", "rceil", 64), (torch.bfloat16, "e5m2", "floor", 72),
               (torch.float32, "e4m3", "even", 40), (torch.bfloat16, "e4m3", "rceil", 32)]
    for seed, (dtype, fmt, scale, k) in enumerate(options):
        for name, splits in SPLITS.items():
            xs = [rows(seed, r, sum(splits[r]), k, dtype) for r in range(world)]
            outs = [splits[s][rank] for s in range(world)]
            with Recorder() as rec:
                got = mxt.dispatch_mxfp8(xs[rank], splits[rank], outs, fmt=fmt, scale=scale)
            what = f"{dtype} {fmt} {scale} K={k} {name}"
            want = received([qdq(x, fmt, scale) for x in xs], splits, rank)
            assert_bits(got, want, what)
            assert len(rec.calls) == 1, what
            sent, recv = rec.calls[0]
            width = k + (k + 31) // 32
            assert sent.dtype == torch.uint8 and list(sent.shape) == [sum(splits[rank]), width]
            assert torch.equal(sent, mxt.pack_mxfp8_rows(xs[rank], fmt, scale)), what
            assert list(recv.shape) == [sum(outs), width], what
            assert torch.equal(recv, received(
                [mxt.pack_mxfp8_rows(x, fmt, scale) for x in xs], splits, rank)), what
            # The wire is the numpy API's quantization: codes, then scales, row by row.
            for s in range(world):
                mine = block(xs[s], splits[s], rank)
                arr = mine.view(torch.int16).numpy().view(np.uint16) \
                    if dtype == torch.bfloat16 else mine.numpy()
                q = mxtrain.quantize(np.ascontiguousarray(arr), format=fmt, scale=scale)
                part = block(recv, outs, s).numpy()
                assert np.array_equal(part[:, :k], q.data), what
                assert np.array_equal(part[:, k:], q.scale), what
            info[f"{dtype} K={k}"] = {"wire_bytes_per_row": width,
                                      "hp_bytes_per_row": k * itemsize(dtype)}
            assert torch.equal(mxt.unpack_mxfp8_rows(recv, k, fmt, dtype).view(torch.uint8),
                               got.view(torch.uint8)), what
    return info


def case_dispatch_backward_hp(rank: int, world: int) -> dict:
    """dispatch_mxfp8's backward is the high-precision all-to-all of the gradient."""
    for seed, dtype in enumerate((torch.float32, torch.bfloat16), start=10):
        for name, splits in SPLITS.items():
            xs = [rows(seed, r, sum(splits[r]), 48, dtype) for r in range(world)]
            outs_of = [[splits[s][d] for s in range(world)] for d in range(world)]
            gs = [rows(seed + 100, d, sum(outs_of[d]), 48, dtype) for d in range(world)]
            x = xs[rank].clone().requires_grad_(True)
            y = mxt.dispatch_mxfp8(x, splits[rank], outs_of[rank], fmt="e4m3")
            y.backward(gs[rank])
            # The rows of x that went to d come back from d's gradient, where they sit
            # after the rows of the ranks below this one.
            want = torch.cat([block(gs[d], outs_of[d], rank) for d in range(world)])
            assert_bits(x.grad, want, f"{dtype} {name}")
    return {}


def case_combine(rank: int, world: int) -> dict:
    """combine_mxfp8_bwd: forward the exact rows; backward the gradient quantized rowwise
    with grad_fmt at its sender and dequantized here, bit for bit."""
    for seed, (dtype, grad_fmt, scale) in enumerate(
            [(torch.float32, "e4m3", "rceil"), (torch.float32, "e5m2", "rceil"),
             (torch.bfloat16, "e5m2", "ceil"), (torch.bfloat16, "e4m3", "rceil")], start=20):
        for name, splits in SPLITS.items():
            what = f"{dtype} {grad_fmt} {scale} {name}"
            ys = [rows(seed, r, sum(splits[r]), 80, dtype) for r in range(world)]
            outs_of = [[splits[s][d] for s in range(world)] for d in range(world)]
            gs = [rows(seed + 100, d, sum(outs_of[d]), 80, dtype) for d in range(world)]
            y = ys[rank].clone().requires_grad_(True)
            z = mxt.combine_mxfp8_bwd(y, splits[rank], outs_of[rank], grad_fmt=grad_fmt,
                                      scale=scale)
            assert_bits(z, received(ys, splits, rank), what + " forward")
            z.backward(gs[rank])
            want = torch.cat([block(qdq(gs[d], grad_fmt, scale), outs_of[d], rank)
                              for d in range(world)])
            assert_bits(y.grad, want, what + " backward")
    return {}


def case_round_trip(rank: int, world: int) -> dict:
    """dispatch then combine with the reverse splits: each row comes back home quantized +
    dequantized, and its gradient quantized + dequantized with grad_fmt."""
    for seed, dtype in enumerate((torch.float32, torch.bfloat16), start=30):
        for name, splits in SPLITS.items():
            what = f"{dtype} {name}"
            outs = mxt.exchange_splits(splits[rank])
            x = rows(seed, rank, sum(splits[rank]), 96, dtype).requires_grad_(True)
            g = rows(seed + 100, rank, x.shape[0], 96, dtype)
            mid = mxt.dispatch_mxfp8(x, splits[rank], outs)
            assert list(mid.shape) == [sum(outs), 96], what
            back = mxt.combine_mxfp8_bwd(mid, outs, splits[rank], grad_fmt="e5m2")
            assert_bits(back, qdq(x, "e4m3"), what + " forward")
            back.backward(g)
            assert_bits(x.grad, qdq(g, "e5m2"), what + " backward")
    return {}


def case_hp_wire(rank: int, world: int) -> dict:
    """wire="hp": rows and gradients cross unchanged both ways (bf16 too, which torch
    1.13's gloo cannot send as bf16)."""
    for seed, dtype in enumerate((torch.float32, torch.bfloat16), start=40):
        for name, splits in SPLITS.items():
            what = f"{dtype} {name}"
            xs = [rows(seed, r, sum(splits[r]), 40, dtype) for r in range(world)]
            outs = [splits[s][rank] for s in range(world)]
            x = xs[rank].clone().requires_grad_(True)
            with Recorder() as rec:
                mid = mxt.dispatch_mxfp8(x, splits[rank], outs, wire="hp")
                back = mxt.combine_mxfp8_bwd(mid, outs, splits[rank], wire="hp")
                assert_bits(mid, received(xs, splits, rank), what)
                assert_bits(back, xs[rank], what)
                g = rows(seed + 100, rank, x.shape[0], 40, dtype)
                back.backward(g)
            assert_bits(x.grad, g, what)
            assert all(s.shape[1] == 40 * itemsize(dtype) for s, _ in rec.calls), what
    return {}


def _ep_data(seed: int, counts: list[list[int]], k: int, n: int, experts: int,
             dtype: torch.dtype = torch.float32):
    world = len(counts)
    xs = [rows(seed, r, sum(counts[r]), k, dtype, spread=2) for r in range(world)]
    dys = [rows(seed + 100, r, sum(counts[r]), n, dtype, spread=2) for r in range(world)]
    g = torch.Generator().manual_seed(seed + 7)
    weight = (torch.randn(experts, n, k, generator=g) / k**0.5).to(dtype)
    bias = torch.randn(experts, n, generator=g).to(dtype)
    return xs, dys, weight, bias


def _ep_run(rank: int, world: int, counts: list[list[int]], xs, dys, weight, bias,
            **options):
    experts = weight.shape[0]
    moe = mxt.ExpertParallelGroupedLinear(experts, weight.shape[2], weight.shape[1],
                                          bias=True, **options)
    moe.to(dtype=weight.dtype)
    local = moe.num_local_experts
    assert moe.first_expert == rank * local
    with torch.no_grad():
        moe.experts.weight.copy_(weight[rank * local:(rank + 1) * local])
        moe.experts.bias.copy_(bias[rank * local:(rank + 1) * local])
    x = xs[rank].clone().requires_grad_(True)
    y = moe(x, counts[rank])
    y.backward(dys[rank])
    return y, x.grad, moe.experts.weight.grad, moe.experts.bias.grad, moe


def _ep_reference(rank: int, world: int, counts: list[list[int]], xs, dys, weight, bias,
                  fmt: str, grad_fmt: str, scale: str, recipe: str):
    """The same experts in one process over every rank's rows, inputs and output gradients
    quantized + dequantized as the wires do; each expert's rows in the order the
    expert-parallel layer runs them (rank 0's, then rank 1's)."""
    experts = weight.shape[0]
    ref = mxt.MxGroupedLinear(experts, weight.shape[2], weight.shape[1], bias=True,
                              recipe=recipe, scale=scale)
    with torch.no_grad():
        ref.weight.copy_(weight)
        ref.bias.copy_(bias)
    order = []  # (rank, row) of each reference row, expert-major then rank-major
    for e in range(experts):
        for r in range(world):
            start = sum(counts[r][:e])
            order += [(r, start + i) for i in range(counts[r][e])]
    qx = [qdq(x, fmt, scale) for x in xs]
    qdy = [qdq(dy, grad_fmt, scale) for dy in dys]
    x = torch.stack([qx[r][i] for r, i in order]) if order else \
        torch.zeros(0, weight.shape[2], dtype=weight.dtype)
    dy = torch.stack([qdy[r][i] for r, i in order]) if order else \
        torch.zeros(0, weight.shape[1], dtype=weight.dtype)
    x.requires_grad_(True)
    per_expert = [sum(c[e] for c in counts) for e in range(experts)]
    y = ref(x, per_expert, "counts")
    y.backward(dy)
    mine = [j for j, (r, _) in enumerate(order) if r == rank]
    rows_of = sorted(mine, key=lambda j: order[j][1])  # back to this rank's row order
    local = experts // world
    lo, hi = rank * local, (rank + 1) * local
    idx = torch.tensor(rows_of, dtype=torch.int64)
    return (y.detach().index_select(0, idx), x.grad.index_select(0, idx),
            ref.weight.grad[lo:hi], ref.bias.grad[lo:hi])


EP_COUNTS = {
    "uneven": [[5, 0, 7, 3], [2, 6, 0, 9]],
    "rank1_receives_none": [[4, 3, 0, 0], [0, 5, 0, 0]],
    "rank1_has_no_tokens": [[3, 1, 4, 1], [0, 0, 0, 0]],
    "one_expert_each": [[6, 2], [1, 4]],
}


def case_ep_reference(rank: int, world: int) -> dict:
    """ExpertParallelGroupedLinear on 2 ranks equals the same experts in one process over the
    same rows, with the wires' quantization applied to the inputs and the output gradients:
    output, input gradient and each rank's expert weight and bias gradients, bit for bit."""
    for seed, (name, counts) in enumerate(EP_COUNTS.items(), start=50):
        for recipe, grad_fmt in (("e4m3", "e4m3"), ("hybrid", "e5m2")):
            what = f"{name} {recipe}"
            experts = len(counts[0])
            xs, dys, weight, bias = _ep_data(seed, counts, 64, 48, experts)
            y, dx, dw, db, moe = _ep_run(rank, world, counts, xs, dys, weight, bias,
                                         recipe=recipe)
            assert moe.grad_fmt == grad_fmt and moe.fmt == "e4m3", what
            want = _ep_reference(rank, world, counts, xs, dys, weight, bias, "e4m3",
                                 grad_fmt, "rceil", recipe)
            for label, got, ref in zip(("y", "dx", "dw", "db"), (y, dx, dw, db), want):
                assert_bits(got, ref, f"{what} {label}")
    return {}


def case_ep_wire_sqnr(rank: int, world: int) -> dict:
    """The MXFP8 wire against the HP wire in ExpertParallelGroupedLinear: the forward output
    and the input gradient are the same bit for bit (the experts quantize their inputs and
    output gradients rowwise to the wire's formats anyway, and quantizing an MXFP8 row again
    gives the same values); the weight gradient (columnwise blocks over wire-rounded rows)
    and the bias gradient (a sum of the wire-rounded output gradient) are within the SQNR
    thresholds above. Both wires against torch fp32 for scale."""
    info = {}
    counts = [[40, 72, 24, 56], [64, 8, 88, 32]]
    for seed, (recipe, dtype) in enumerate(
            [("e4m3", torch.float32), ("hybrid", torch.float32), ("e4m3", torch.bfloat16)],
            start=70):
        what = f"{recipe} {dtype}"
        xs, dys, weight, bias = _ep_data(seed, counts, 256, 128, 4, dtype)
        hp = _ep_run(rank, world, counts, xs, dys, weight, bias, recipe=recipe, wire="hp")
        mx = _ep_run(rank, world, counts, xs, dys, weight, bias, recipe=recipe)
        # torch fp32 over this rank's rows (y, dx) and its experts' rows (dw): gathered
        # with the HP wire, whose exchange is exact.
        x32 = xs[rank].float().requires_grad_(True)
        w32 = weight.float().requires_grad_(True)
        out, start = [], 0
        for e, c in enumerate(counts[rank]):
            out.append(x32[start:start + c] @ w32[e].t() + bias[e].float())
            start += c
        y32 = torch.cat(out)
        y32.backward(dys[rank].float())
        # w32.grad holds this rank's rows' share; the other rank's share comes over the
        # wire (an all_reduce of fp32 is exact enough for a reference).
        dist.all_reduce(w32.grad)
        local = 4 // world
        dw32 = w32.grad[rank * local:(rank + 1) * local]
        figures = {
            "y_mx_vs_hp": sqnr_db(hp[0], mx[0]), "dx_mx_vs_hp": sqnr_db(hp[1], mx[1]),
            "dw_mx_vs_hp": sqnr_db(hp[2], mx[2]), "db_mx_vs_hp": sqnr_db(hp[3], mx[3]),
            "y_hp_vs_fp32": sqnr_db(y32, hp[0]), "y_mx_vs_fp32": sqnr_db(y32, mx[0]),
            "dx_hp_vs_fp32": sqnr_db(x32.grad, hp[1]), "dx_mx_vs_fp32": sqnr_db(x32.grad, mx[1]),
            "dw_hp_vs_fp32": sqnr_db(dw32, hp[2]), "dw_mx_vs_fp32": sqnr_db(dw32, mx[2]),
        }
        info[what] = figures
        assert_bits(mx[0], hp[0], what + " y")
        assert_bits(mx[1], hp[1], what + " dx")
        assert figures["dw_mx_vs_hp"] >= WGRAD_SQNR_DB, (what, figures)
        assert figures["db_mx_vs_hp"] >= BGRAD_SQNR_DB[recipe], (what, figures)
        for key in ("y", "dx", "dw"):
            for wire in ("hp", "mx"):
                name = f"{key}_{wire}_vs_fp32"
                assert figures[name] >= FP32_SQNR_DB[recipe], (what, name, figures)
    return info


def case_errors(rank: int, world: int) -> dict:
    """Wrong arguments raise before any collective, the same on every rank."""
    x = torch.randn(6, 32)

    def raises(kind: type, call, text: str) -> None:
        try:
            call()
        except kind as e:
            assert text in str(e), (text, str(e))
        else:
            raise AssertionError(f"no {kind.__name__}: {text}")

    raises(ValueError, lambda: mxt.dispatch_mxfp8(x, [6], [6, 0]), "one for each of")
    raises(ValueError, lambda: mxt.dispatch_mxfp8(x, [3, 2], [6, 0]), "sum to 5 rows")
    raises(ValueError, lambda: mxt.dispatch_mxfp8(x, [3, 3], [-1, 0]), "negative")
    raises(ValueError, lambda: mxt.dispatch_mxfp8(x, [3, 3], [3, 3], wire="fp8"), "wire")
    raises(TypeError, lambda: mxt.dispatch_mxfp8(x, [3, 3], [3, 3], fmt=8), "fmt")
    raises(TypeError, lambda: mxt.dispatch_mxfp8(x.numpy(), [3, 3], [3, 3]), "torch.Tensor")
    raises(ValueError, lambda: mxt.dispatch_mxfp8(x.double(), [3, 3], [3, 3]), "float64")
    raises(ValueError, lambda: mxt.combine_mxfp8_bwd(x, [3, 3], [3, 3], grad_fmt="e3m4"),
           "grad_fmt")
    raises(TypeError, lambda: mxt.combine_mxfp8_bwd(x, [3.0, 3.0], [3, 3]), "ints")
    raises(ValueError, lambda: mxt.ExpertParallelGroupedLinear(3, 32, 16), "multiple")
    moe = mxt.ExpertParallelGroupedLinear(4, 32, 16)
    raises(ValueError, lambda: moe(x, [6, 0, 0]), "one for each of the experts")
    raises(ValueError, lambda: moe(x, [1, 1, 1, 1]), "sum to 4 rows")
    raises(ValueError, lambda: mxt.unpack_mxfp8_rows(torch.zeros(2, 33, dtype=torch.uint8),
                                                     40), "42 bytes")
    assert mxt.packed_row_bytes(40) == 42 and mxt.packed_row_bytes(64) == 66
    return {}


CASES = [
    ("exchange_splits", case_exchange_splits),
    ("dispatch_forward_wire", case_dispatch_forward_wire),
    ("dispatch_backward_hp", case_dispatch_backward_hp),
    ("combine", case_combine),
    ("round_trip", case_round_trip),
    ("hp_wire", case_hp_wire),
    ("ep_reference", case_ep_reference),
    ("ep_wire_sqnr", case_ep_wire_sqnr),
    ("errors", case_errors),
]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--init", required=True, help="the FileStore's file")
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, dict] = {"_meta": {"torch": torch.__version__,
                                          "gloo": dist.is_gloo_available()}}

    def write() -> None:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1)
        os.replace(tmp, args.out)

    write()
    dist.init_process_group("gloo", init_method=f"file://{args.init}", rank=args.rank,
                            world_size=args.world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    for name, case in CASES:
        try:
            info = case(args.rank, args.world)
        except BaseException:
            results[name] = {"ok": False, "error": traceback.format_exc()}
            write()
            sys.stderr.write(results[name]["error"])
            sys.stderr.flush()
            os._exit(1)  # at once: a peer's next collective fails instead of waiting
        results[name] = {"ok": True, "info": info}
        write()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
