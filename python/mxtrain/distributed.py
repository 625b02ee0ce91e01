"""Expert parallelism over torch.distributed: MXFP8 token dispatch and combine.

    import mxtrain.torch as mxt
    out_splits = mxt.exchange_splits(in_splits)                # rows each peer sends here
    xr = mxt.dispatch_mxfp8(x, in_splits, out_splits)          # MXFP8 forward, HP backward
    y = mxt.combine_mxfp8_bwd(yr, out_splits, in_splits)       # HP forward, MXFP8 backward
    moe = mxt.ExpertParallelGroupedLinear(8, 1024, 2816)       # E / world experts per rank
    y = moe(x_sorted_by_expert, counts)                        # counts: [E] rows per expert

The two autograd functions are torchao's ``a2a_dispatch_mxfp8_fwd_hp_bwd`` and
``a2a_combine_hp_fwd_mxfp8_bwd`` (torchtitan's MXFP8 expert parallelism), and Megatron's
``moe_dispatch_fwd_dtype`` / ``moe_combine_bwd_dtype = "mxfp8"``: the tokens an expert
reads in its forward GEMM, and the gradient its dgrad GEMM reads, cross the network in the
format the GEMM quantizes them to anyway, quantized once at the sender; the other direction
of each travels in high precision. ``wire="hp"`` sends everything in high precision, for
comparison.

The wire. A row of K values travels as K E4M3 / E5M2 codes followed by its ceil(K/32) E8M0
scales (rowwise 1x32 blocks, mxtrain.quantize's layout): one uint8 tensor
[rows, K + ceil(K/32)] (:func:`pack_mxfp8_rows`), 1.03 bytes a value against 2 (bf16) or 4
(fp32). The receiver dequantizes with mxtrain.dequantize (:func:`unpack_mxfp8_rows`) to
the sender's dtype: the result equals the sender's local quantize + dequantize bit for bit.
Everything, high precision too, is sent as uint8 over ``all_to_all_single`` with byte
split sizes, because gloo (the CPU backend) has no float8 in any torch and no bf16
all-to-all in torch 1.13:

    gloo, CPU            all_to_all_single                          all_to_all (lists)
    torch 1.13           uint8, int64, fp32: yes; bf16: "Invalid    "does not support
                         scalar type"                               alltoall"
    torch 2.x (2.15)     uint8, int64, fp32, bf16: yes;             as all_to_all_single
                         float8_e4m3fn / e5m2: "Invalid scalar type"

so ``all_to_all_single`` on uint8 is the one exchange every version supports (empty splits
and empty tensors included); split counts travel as int64, also supported in both.

Every rank calls every collective, in the same order, even one that sends or receives no
rows: run the forward on every rank, and a backward on every rank through the same ops
(an output of zero rows still takes part in the loss, as ``y.sum()`` does). All ranks pass
the same feature count, dtype, formats and wire. The functions run on CPU tensors, fp32 or
bf16, as the rest of mxtrain.torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.autograd.function import once_differentiable

from . import _validate as _check
from . import dequantize as _dequantize
from . import quantize as _quantize

if TYPE_CHECKING:
    from .torch import MxGroupedLinear

__all__ = ["WIRES", "pack_mxfp8_rows", "unpack_mxfp8_rows", "packed_row_bytes",
           "exchange_splits", "dispatch_mxfp8", "combine_mxfp8_bwd",
           "ExpertParallelGroupedLinear"]

#: What the split arguments take: row counts, one per rank of the group.
SplitsLike = Union[Sequence[int], np.ndarray, torch.Tensor]

#: The wire formats: "mxfp8" (codes + E8M0 scales in the quantized direction) or "hp"
#: (the tensors' own bytes both ways).
WIRES = ("mxfp8", "hp")

_HP = {torch.float32: "f32", torch.bfloat16: "bf16"}


def packed_row_bytes(in_features: int) -> int:
    """The bytes of one packed MXFP8 row of in_features values: K codes + ceil(K/32) scales.

    Parameters
    ----------
    in_features : int
        K, >= 0.

    Returns
    -------
    int
    """
    k = _check.integer("in_features", in_features)
    return k + -(-k // 32)


def _rows(name: str, x: Any) -> torch.Tensor:
    """x, a 2-D CPU fp32 / bf16 tensor, checked."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {_check.describe(x)}")
    if x.device.type != "cpu":
        raise ValueError(f"{name} is on {x.device}; mxtrain runs on CPU tensors")
    if x.dtype not in _HP:
        raise ValueError(f"{name} is {x.dtype}; mxtrain takes torch.float32 or torch.bfloat16")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D [rows, features], got {list(x.shape)}")
    return x


def _numpy(x: torch.Tensor) -> np.ndarray:
    """x's values as numpy reads them: float32, or bf16 as uint16 bits (no copy when
    contiguous)."""
    x = x.detach().contiguous()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    return x.numpy()


def _torch(a: np.ndarray) -> torch.Tensor:
    """A torch tensor over a float32 or uint16 (bf16 bits) array (no copy)."""
    if a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def pack_mxfp8_rows(x: torch.Tensor, fmt: str = "e4m3", scale: str = "rceil") -> torch.Tensor:
    """Quantizes x rowwise (mxtrain.quantize, 1x32 blocks) and packs each row for the wire.

    Parameters
    ----------
    x : torch.Tensor
        [T, K], CPU, torch.float32 or torch.bfloat16.
    fmt : {"e4m3", "e5m2"}
        The element format.
    scale : {"rceil", "floor", "ceil", "even"}
        The E8M0 scale rule (NUMERICS.md section 4).

    Returns
    -------
    torch.Tensor
        uint8 [T, K + ceil(K/32)]: row t is the K element codes of x[t] followed by its
        ceil(K/32) E8M0 scales.

    Raises
    ------
    TypeError
        x is not a tensor, fmt or scale not a str.
    ValueError
        x not 2-D, not on the CPU or of another dtype; an unknown fmt or scale rule.
    """
    x = _rows("x", x)
    f = _check.element_format("fmt", fmt)
    rule = _check.scale_rule(scale)
    q = _quantize(_numpy(x), format=f, scale=rule, axis=-1)
    assert q.data is not None and q.scale is not None
    return torch.cat((torch.from_numpy(q.data), torch.from_numpy(q.scale)), dim=1)


def unpack_mxfp8_rows(packed: torch.Tensor, in_features: int, fmt: str = "e4m3",
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The values of rows packed by :func:`pack_mxfp8_rows` (mxtrain.dequantize).

    Parameters
    ----------
    packed : torch.Tensor
        uint8 [T, K + ceil(K/32)], CPU.
    in_features : int
        K.
    fmt : {"e4m3", "e5m2"}
        The element format the rows were packed with.
    dtype : {torch.float32, torch.bfloat16}
        The result's dtype.

    Returns
    -------
    torch.Tensor
        [T, K] of dtype: bit for bit mxtrain.dequantize of the codes and scales.

    Raises
    ------
    TypeError
        packed is not a tensor, in_features not an int, fmt not a str.
    ValueError
        packed not 2-D uint8 on the CPU or not K + ceil(K/32) bytes wide, an unknown fmt or
        dtype.
    """
    if not isinstance(packed, torch.Tensor):
        raise TypeError(f"packed must be a torch.Tensor, got {_check.describe(packed)}")
    if packed.device.type != "cpu" or packed.dtype != torch.uint8 or packed.dim() != 2:
        raise ValueError(f"packed must be a 2-D torch.uint8 CPU tensor, got {packed.dtype} "
                         f"{list(packed.shape)} on {packed.device}")
    k = _check.integer("in_features", in_features)
    width = packed_row_bytes(k)
    if packed.shape[1] != width:
        raise ValueError(f"packed rows are {packed.shape[1]} bytes; {k} features pack into "
                         f"{k} codes + {width - k} scales = {width} bytes")
    if dtype not in _HP:
        raise ValueError(f"dtype must be torch.float32 or torch.bfloat16, got {dtype}")
    f = _check.element_format("fmt", fmt)
    p = packed.detach().contiguous().numpy()
    data = np.ascontiguousarray(p[:, :k])
    scales = np.ascontiguousarray(p[:, k:])
    return _torch(_dequantize(data, scales, format=f, dtype=_HP[dtype]))


# --- the exchange -------------------------------------------------------------------------


def _splits(name: str, value: Any, n: int, of: str = "the group's ranks") -> list[int]:
    """n non-negative row counts, one for each of `of`."""
    splits = _check.group_values(name, value)
    if len(splits) != n:
        raise ValueError(f"{name} has {len(splits)} entries; it needs {n}, one for each of "
                         f"{of}")
    if any(s < 0 for s in splits):
        raise ValueError(f"{name} holds a negative count: {splits}")
    return splits


def _all_to_all_bytes(send: torch.Tensor, input_splits: list[int], output_splits: list[int],
                      group: Any) -> torch.Tensor:
    """Rows of uint8 bytes to and from every rank: send [sum(input_splits), W] ->
    [sum(output_splits), W], rank r's rows in the order of the ranks (sender-major).

    One all_to_all_single over the flat bytes with byte split sizes: uint8 is the dtype
    gloo exchanges in every torch (see the module's notes)."""
    width = int(send.shape[1])
    rows = sum(output_splits)
    recv = torch.empty(rows * width, dtype=torch.uint8)
    dist.all_to_all_single(recv, send.contiguous().reshape(-1),
                           [s * width for s in output_splits],
                           [s * width for s in input_splits], group=group)
    return recv.view(rows, width)


def _exchange_hp(x: torch.Tensor, input_splits: list[int], output_splits: list[int],
                 group: Any) -> torch.Tensor:
    """x's rows exchanged in x's own bytes (a uint8 view), as x's dtype."""
    x = x.detach().contiguous()
    recv = _all_to_all_bytes(x.view(torch.uint8), input_splits, output_splits, group)
    return recv.view(x.dtype)


def _exchange_mxfp8(x: torch.Tensor, input_splits: list[int], output_splits: list[int],
                    group: Any, fmt: str, scale: str) -> torch.Tensor:
    """x's rows quantized here, exchanged as packed MXFP8, dequantized there to x's dtype."""
    hp = x if x.dtype in _HP else x.float()
    packed = pack_mxfp8_rows(hp.detach(), fmt, scale)
    recv = _all_to_all_bytes(packed, input_splits, output_splits, group)
    out = unpack_mxfp8_rows(recv, int(x.shape[1]), fmt, hp.dtype)
    return out if out.dtype == x.dtype else out.to(x.dtype)


def exchange_splits(input_splits: SplitsLike, group: Any = None) -> list[int]:
    """The rows each rank sends here, from the rows this rank sends each rank.

    A collective (one all_to_all_single of int64): every rank of the group calls it.

    Parameters
    ----------
    input_splits : sequence of int, or 1-D integer array or tensor
        Rows this rank sends to each rank of the group.
    group : torch.distributed.ProcessGroup, optional
        The group; the default (world) group if None.

    Returns
    -------
    list of int
        output_splits: rows each rank of the group sends to this one.
    """
    world = dist.get_world_size(group)
    splits = _splits("input_splits", input_splits, world)
    recv = torch.empty(world, dtype=torch.int64)
    dist.all_to_all_single(recv, torch.tensor(splits, dtype=torch.int64), group=group)
    return [int(v) for v in recv.tolist()]


class _Dispatch(torch.autograd.Function):
    """forward: rows to their ranks, in MXFP8 (or HP); backward: gradients back in HP."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, input_splits: list[int], output_splits: list[int],
                group: Any, fmt: str, scale: str, wire: str) -> torch.Tensor:
        ctx.splits = (input_splits, output_splits)
        ctx.group = group
        if wire == "hp":
            return _exchange_hp(x, input_splits, output_splits, group)
        return _exchange_mxfp8(x, input_splits, output_splits, group, fmt, scale)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        input_splits, output_splits = ctx.splits
        dx = _exchange_hp(dy, output_splits, input_splits, ctx.group)
        return dx, None, None, None, None, None, None


class _Combine(torch.autograd.Function):
    """forward: rows back to their ranks in HP; backward: gradients in MXFP8 (or HP)."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, input_splits: list[int], output_splits: list[int],
                group: Any, grad_fmt: str, scale: str, wire: str) -> torch.Tensor:
        ctx.splits = (input_splits, output_splits)
        ctx.group = group
        ctx.options = (grad_fmt, scale, wire)
        return _exchange_hp(y, input_splits, output_splits, group)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dz: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        input_splits, output_splits = ctx.splits
        grad_fmt, scale, wire = ctx.options
        if wire == "hp":
            dy = _exchange_hp(dz, output_splits, input_splits, ctx.group)
        else:
            dy = _exchange_mxfp8(dz, output_splits, input_splits, ctx.group, grad_fmt, scale)
        return dy, None, None, None, None, None, None


def _exchange_args(name: str, x: Any, input_splits: Any, output_splits: Any, group: Any,
                   fmt_name: str, fmt: Any, scale: Any,
                   wire: Any) -> tuple[torch.Tensor, list[int], list[int], str, str, str]:
    x = _rows(name, x)
    f = _check.element_format(fmt_name, fmt)
    rule = _check.scale_rule(scale)
    w = _check.choice("wire", wire, WIRES)
    world = dist.get_world_size(group)
    ins = _splits("input_splits", input_splits, world)
    outs = _splits("output_splits", output_splits, world)
    if sum(ins) != x.shape[0]:
        raise ValueError(f"input_splits sum to {sum(ins)} rows but {name} has "
                         f"{x.shape[0]} rows")
    return x, ins, outs, f, rule, w


def dispatch_mxfp8(x: torch.Tensor, input_splits: SplitsLike, output_splits: SplitsLike,
                   group: Any = None, *, fmt: str = "e4m3", scale: str = "rceil",
                   wire: str = "mxfp8") -> torch.Tensor:
    """Token dispatch: rows to the ranks of their experts, MXFP8 forward, HP backward.

    torchao's ``a2a_dispatch_mxfp8_fwd_hp_bwd``. Forward: x is quantized rowwise here, once
    (:func:`pack_mxfp8_rows`), the codes and scales cross as uint8 and each receiver
    dequantizes them to x's dtype: the result is the sender's quantize + dequantize of the
    rows, bit for bit. Backward: the gradient goes back the reverse way in its own precision
    (a uint8 view of its bytes), unchanged. A collective: every rank of the group calls it,
    and runs its backward.

    Parameters
    ----------
    x : torch.Tensor
        [T, K], CPU, torch.float32 or torch.bfloat16; rows grouped by destination rank.
        The same K and dtype on every rank.
    input_splits : sequence of int, or 1-D integer array or tensor
        Rows this rank sends to each rank of the group (in rank order); they sum to T.
    output_splits : sequence of int, or 1-D integer array or tensor
        Rows each rank sends to this one (:func:`exchange_splits`).
    group : torch.distributed.ProcessGroup, optional
        The group; the default (world) group if None.
    fmt : {"e4m3", "e5m2"}
        The element format on the wire.
    scale : {"rceil", "floor", "ceil", "even"}
        The E8M0 scale rule.
    wire : {"mxfp8", "hp"}
        "hp" sends x in its own precision both ways (fmt and scale unused).

    Returns
    -------
    torch.Tensor
        [sum(output_splits), K], x's dtype; the rows of rank 0, then of rank 1, ...

    Raises
    ------
    TypeError
        An argument of the wrong type.
    ValueError
        x not 2-D fp32 / bf16 on the CPU, splits not one non-negative count per rank,
        input_splits not summing to T, an unknown fmt, scale rule or wire.
    """
    x, ins, outs, f, rule, w = _exchange_args("x", x, input_splits, output_splits, group,
                                              "fmt", fmt, scale, wire)
    return _Dispatch.apply(x, ins, outs, group, f, rule, w)


def combine_mxfp8_bwd(y: torch.Tensor, input_splits: SplitsLike, output_splits: SplitsLike,
                      group: Any = None, *, grad_fmt: str = "e4m3", scale: str = "rceil",
                      wire: str = "mxfp8") -> torch.Tensor:
    """Token combine: expert outputs back to their tokens' ranks, HP forward, MXFP8 backward.

    torchao's ``a2a_combine_hp_fwd_mxfp8_bwd``. Forward: y's rows cross in their own
    precision (a uint8 view), unchanged. Backward: the incoming gradient is quantized
    rowwise with grad_fmt at its sender, crosses as codes + scales and is dequantized at the
    receiver: the gradient of y is the quantize + dequantize of the gradient of the result,
    bit for bit. A collective: every rank of the group calls it, and runs its backward.

    Parameters
    ----------
    y : torch.Tensor
        [R, N], CPU, torch.float32 or torch.bfloat16; rows grouped by destination rank (for
        a combine after :func:`dispatch_mxfp8`: the rows it returned, in its order). The
        same N and dtype on every rank.
    input_splits : sequence of int, or 1-D integer array or tensor
        Rows this rank sends to each rank (the dispatch's output_splits); they sum to R.
    output_splits : sequence of int, or 1-D integer array or tensor
        Rows each rank sends to this one (the dispatch's input_splits).
    group : torch.distributed.ProcessGroup, optional
        The group; the default (world) group if None.
    grad_fmt : {"e4m3", "e5m2"}
        The element format of the gradient on the wire.
    scale : {"rceil", "floor", "ceil", "even"}
        The E8M0 scale rule of the gradient.
    wire : {"mxfp8", "hp"}
        "hp" sends the gradient in its own precision (grad_fmt and scale unused).

    Returns
    -------
    torch.Tensor
        [sum(output_splits), N], y's dtype.

    Raises
    ------
    TypeError
        An argument of the wrong type.
    ValueError
        y not 2-D fp32 / bf16 on the CPU, splits not one non-negative count per rank,
        input_splits not summing to R, an unknown grad_fmt, scale rule or wire.
    """
    y, ins, outs, f, rule, w = _exchange_args("y", y, input_splits, output_splits, group,
                                              "grad_fmt", grad_fmt, scale, wire)
    return _Combine.apply(y, ins, outs, group, f, rule, w)


def _expert_major(counts: torch.Tensor) -> tuple[torch.Tensor | None, list[int]]:
    """counts [W, L]: rows from sender s for local expert j, laid out sender-major (s, then
    j). The permutation that reorders the rows expert-major (j, then s: within an expert,
    rows keep the order of the senders), None where that is the identity, and the rows of
    each local expert."""
    senders, local = counts.shape
    per_expert = [int(v) for v in counts.sum(0).tolist()]
    if senders == 1 or local == 1:
        return None, per_expert
    flat = counts.reshape(-1)
    starts = torch.cumsum(flat, 0) - flat                       # block (s, j), sender-major
    sizes_em = counts.t().reshape(-1)                            # blocks in (j, s) order
    starts_em = starts.view(senders, local).t().reshape(-1)
    dest_em = torch.cumsum(sizes_em, 0) - sizes_em
    total = int(flat.sum())
    perm = torch.repeat_interleave(starts_em - dest_em, sizes_em) + torch.arange(total)
    return perm, per_expert


class ExpertParallelGroupedLinear(nn.Module):
    """An MoE expert linear sharded over the ranks of a group, tokens dispatched in MXFP8.

    Expert e of num_experts lives on rank ``e // (num_experts / world)``; each rank holds its
    ``num_experts / world`` local experts as an :class:`mxtrain.torch.MxGroupedLinear`
    (:attr:`experts`). A forward, on every rank:

    1. the per-expert row counts are exchanged (all_to_all_single of int64);
    2. the rows go to their experts' ranks with :func:`dispatch_mxfp8` (quantized once,
       here, to fmt; HP gradients back);
    3. the received rows, sender-major (rank 0's rows for local expert 0, 1, ..., then rank
       1's), are permuted expert-major (expert 0's rows from rank 0, 1, ..., then expert
       1's) so that one MxGroupedLinear call runs every local expert (one weight
       quantization, one grouped GEMM, each expert's wgrad over all its rows), and the
       outputs are permuted back;
    4. the outputs return with :func:`combine_mxfp8_bwd` (HP forward; the gradient quantized
       once, at the token's rank, to grad_fmt).

    The expert GEMMs quantize their inputs (fprop) and output gradients (dgrad) rowwise to
    the wire's formats anyway, so with ``grad_fmt`` the recipe's gradient format and one
    scale rule, the MXFP8 wire changes neither the output nor the input gradient, bit for
    bit: quantizing an MXFP8 row again gives the same values. What differs from
    ``wire="hp"``: the weight gradient, by about fp32 rounding (over 130 dB SQNR in the
    tests: wgrad's columnwise blocks see the same values, which can round differently only
    at a double-rounding tie, but their scales may factor them differently), and the bias
    gradient, a plain sum of the wire-rounded output gradient (about 31 dB with E4M3
    gradients, 25 dB with E5M2).

    Parameters
    ----------
    num_experts : int
        E, the experts of all ranks, a multiple of the group's size.
    in_features : int
        The size of each token's input row, >= 0.
    out_features : int
        The size of each token's output row, >= 0.
    bias : bool
        Whether the local experts have a bias.
    group : torch.distributed.ProcessGroup, optional
        The expert-parallel group; the default (world) group if None.
    fmt : {"e4m3", "e5m2"}
        The element format of the dispatched tokens.
    grad_fmt : {"e4m3", "e5m2"}, optional
        The element format of the combine's gradient; default the recipe's gradient format
        ("e5m2" for recipe="hybrid", else "e4m3").
    scale : {"rceil", "floor", "ceil", "even"}
        The E8M0 scale rule of the wire and of the experts.
    wire : {"mxfp8", "hp"}
        "hp": both exchanges in high precision, for comparison.
    **options
        MxGroupedLinear's other keyword options (recipe, input_policy, weight_policy,
        defer_backward_quant, reuse_quantized_weight, hp_gemms, hp_precision).

    Attributes
    ----------
    experts : MxGroupedLinear
        The local experts: weight [num_experts / world, out_features, in_features], the
        global experts first_expert, first_expert + 1, ...
    first_expert : int
        The global index of local expert 0.

    Raises
    ------
    TypeError
        An argument of the wrong type.
    ValueError
        num_experts not a multiple of the group's size, an unknown option value.

    Examples
    --------
    >>> moe = ExpertParallelGroupedLinear(8, 1024, 2816)          # 2 ranks: 4 experts each
    >>> y = moe(x_sorted_by_expert, counts)                       # counts: [8] ints
    """

    def __init__(self, num_experts: int, in_features: int, out_features: int,
                 bias: bool = False, group: Any = None, *, fmt: str = "e4m3",
                 grad_fmt: str | None = None, scale: str = "rceil", wire: str = "mxfp8",
                 **options: Any) -> None:
        super().__init__()
        from .torch import MxGroupedLinear  # here: mxtrain.torch re-exports this module

        num_experts = _check.integer("num_experts", num_experts, minimum=1)
        world = dist.get_world_size(group)
        if num_experts % world:
            raise ValueError(f"num_experts {num_experts} is not a multiple of the group's "
                             f"{world} ranks")
        self.group = group
        self.world_size = world
        self.num_experts = num_experts
        self.num_local_experts = num_experts // world
        self.first_expert = dist.get_rank(group) * self.num_local_experts
        self.experts: MxGroupedLinear = MxGroupedLinear(
            self.num_local_experts, in_features, out_features, bias, scale=scale, **options)
        self.fmt = _check.element_format("fmt", fmt)
        if grad_fmt is None:
            grad_fmt = "e5m2" if self.experts.recipe == "hybrid" else "e4m3"
        self.grad_fmt = _check.element_format("grad_fmt", grad_fmt)
        self.scale = self.experts.scale
        self.wire = _check.choice("wire", wire, WIRES)

    def forward(self, x: torch.Tensor, counts: SplitsLike) -> torch.Tensor:
        """Every row through its expert, wherever the expert lives; a collective.

        Parameters
        ----------
        x : torch.Tensor
            [T, in_features] this rank's tokens sorted by global expert, CPU, torch.float32
            or torch.bfloat16 (the same on every rank).
        counts : sequence of int, or 1-D integer array or tensor
            [num_experts]: this rank's rows of each global expert; they sum to T.

        Returns
        -------
        torch.Tensor
            [T, out_features], x's dtype, in x's order: row t is x[t]'s expert's output.

        Raises
        ------
        TypeError
            x is not a tensor, counts do not hold ints.
        ValueError
            x not 2-D fp32 / bf16 on the CPU, counts not num_experts non-negative counts
            summing to T.
        """
        x = _rows("x", x)
        counts = _splits("counts", counts, self.num_experts, "the experts")
        if sum(counts) != x.shape[0]:
            raise ValueError(f"counts sum to {sum(counts)} rows but x has {x.shape[0]} rows")
        world, local = self.world_size, self.num_local_experts
        recv = torch.empty(self.num_experts, dtype=torch.int64)
        dist.all_to_all_single(recv, torch.tensor(counts, dtype=torch.int64), group=self.group)
        recv = recv.view(world, local)  # [sender, local expert]
        input_splits = [sum(counts[r * local:(r + 1) * local]) for r in range(world)]
        output_splits = [int(v) for v in recv.sum(1).tolist()]
        xr = dispatch_mxfp8(x, input_splits, output_splits, self.group, fmt=self.fmt,
                            scale=self.scale, wire=self.wire)
        perm, per_expert = _expert_major(recv)
        if perm is None:
            yr = self.experts(xr, per_expert, "counts")
        else:
            inverse = torch.empty_like(perm)
            inverse[perm] = torch.arange(perm.numel())
            ye = self.experts(xr.index_select(0, perm), per_expert, "counts")
            yr = ye.index_select(0, inverse)
        return combine_mxfp8_bwd(yr, output_splits, input_splits, self.group,
                                 grad_fmt=self.grad_fmt, scale=self.scale, wire=self.wire)

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, world_size={self.world_size}, "
                f"first_expert={self.first_expert}, fmt={self.fmt}, "
                f"grad_fmt={self.grad_fmt}, wire={self.wire}")
