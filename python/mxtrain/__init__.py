"""mxtrain: MXFP8 quantization, GEMM and training ops from Python.

The numpy API has the semantics of the command-line tool (``mxtrain quantize``,
``dequantize``, ``gemm``, ``grouped-gemm``): float32 arrays, or bf16 exchanged as uint16 bit
patterns, of rank >= 2 viewed as [..., M, K]; MX results in the canonical layout of
NUMERICS.md section 6 (uint8 data in the input's shape, uint8 E8M0 scales). Arrays are read
in place (no copy when C-contiguous) and results are numpy views of the library's own
buffers. A wrong argument type raises TypeError, a wrong value ValueError (with the
library's message where the library finds it).

    q = mxtrain.quantize(x)                             # MxArray: q.data, q.scale (rowwise)
    y = mxtrain.dequantize(q.data, q.scale)             # float32
    c = mxtrain.gemm(a, b)                              # a [M, K] . b [N, K]^T, float32

PyTorch modules (MxLinear, MxGroupedLinear) are in mxtrain.torch; expert parallelism over
torch.distributed (MXFP8 token dispatch and combine) in mxtrain.distributed, re-exported there.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from . import _C
from . import _validate as _check

__all__ = [
    "MxArray",
    "quantize",
    "dequantize",
    "gemm",
    "grouped_gemm",
    "memory",
    "weight_cache_stats",
    "gemm_paths",
]

__version__ = "0.1.0"

#: What the group_list arguments take: cumulative ends or sizes, as ints.
GroupListLike = Union[Sequence[int], np.ndarray]

_FLOAT_INPUT = "float32 or bf16 bits (uint16)"


@dataclass(frozen=True, eq=False)
class MxArray:
    """What :func:`quantize` returns: MX element codes and their E8M0 scales.

    Attributes
    ----------
    data : numpy.ndarray or None
        uint8 element codes in the input's shape. None when ``axis == "both"``: the two
        layouts are then in :attr:`rowwise` and :attr:`columnwise`.
    scale : numpy.ndarray or None
        uint8 E8M0 scales: rowwise ``[..., M, ceil(K/32)]``, columnwise
        ``[..., ceil(M/32), K]``, token-grouped ``[sum_g ceil(m_g/32), K]``. None when
        ``axis == "both"``.
    format : str
        The element format, ``"e4m3"`` or ``"e5m2"``.
    axis : int or str
        ``-1`` (rowwise 1x32 blocks), ``-2`` (columnwise 32x1 blocks) or ``"both"``.
    group_list : tuple of int or None
        The cumulative group ends of a token-grouped columnwise result, else None.

    Notes
    -----
    ``data, scale = mxtrain.quantize(x)`` and ``result["rowwise"]`` / ``result["colwise"]``
    (the tuple and dict of mxtrain 0.1) still work, with a DeprecationWarning, and go in the
    next release.
    """

    data: np.ndarray | None
    scale: np.ndarray | None
    format: str
    axis: int | str
    group_list: tuple[int, ...] | None = None
    _parts: tuple[MxArray, MxArray] | None = field(default=None, repr=False)

    @property
    def rowwise(self) -> MxArray | None:
        """The rowwise layout: this array when ``axis == -1``, None when ``axis == -2``."""
        if self._parts is not None:
            return self._parts[0]
        return self if self.axis == -1 else None

    @property
    def columnwise(self) -> MxArray | None:
        """The columnwise layout: this array when ``axis == -2``, None when ``axis == -1``."""
        if self._parts is not None:
            return self._parts[1]
        return self if self.axis == -2 else None

    def __repr__(self) -> str:
        if self._parts is not None:
            return (f"MxArray(format={self.format!r}, axis='both', rowwise={self._parts[0]!r}, "
                    f"columnwise={self._parts[1]!r})")

        def shape(a: np.ndarray | None) -> str:
            return "None" if a is None else f"{a.dtype}{list(a.shape)}"

        groups = "" if self.group_list is None else f", group_list={self.group_list}"
        return (f"MxArray(format={self.format!r}, axis={self.axis}, data={shape(self.data)}, "
                f"scale={shape(self.scale)}{groups})")

    # mxtrain 0.1 returned (data, scale), or {"rowwise": (d, s), "colwise": (d, s)} for
    # axis="both". Reading the result that way still works for one release.

    def _legacy(self) -> Any:  # the 0.1 tuple, or for axis="both" the 0.1 dict
        if self._parts is not None:
            row, col = self._parts
            _check.deprecated(
                "reading quantize(axis='both') as a dict is deprecated; use result.rowwise "
                "and result.columnwise (each with .data and .scale)", stacklevel=4)
            return {"rowwise": (row.data, row.scale), "colwise": (col.data, col.scale)}
        _check.deprecated(
            "unpacking quantize()'s result as (data, scale) is deprecated; use result.data "
            "and result.scale", stacklevel=4)
        return (self.data, self.scale)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._legacy())

    def __len__(self) -> int:
        return len(self._legacy())

    def __getitem__(self, key: int | str) -> Any:
        legacy = self._legacy()
        if isinstance(legacy, dict) and key == "columnwise":
            return legacy["colwise"]
        return legacy[key]

    def keys(self) -> Any:
        """Deprecated: the keys of the 0.1 dict of ``axis="both"``."""
        return self._legacy().keys()

    def values(self) -> Any:
        """Deprecated: the values of the 0.1 dict of ``axis="both"``."""
        return self._legacy().values()

    def items(self) -> Any:
        """Deprecated: the items of the 0.1 dict of ``axis="both"``."""
        return self._legacy().items()


def _operand(x: Any, what: str, command: str, rank: int | None = None) -> _C.Tensor:
    """x as a C-contiguous float32 / uint16 array, checked as the CLI checks its files."""
    a = _check.array(what, x)
    if a.dtype not in (np.float32, np.uint16):
        raise ValueError(f"{what} holds {a.dtype} data; {command} needs {_FLOAT_INPUT}")
    if rank is None and a.ndim < 2:
        raise ValueError(
            f"{what} has shape {list(a.shape)}; {command} needs rank >= 2 ([..., M, K])")
    if rank is not None and a.ndim != rank:
        axes = "[M, K]" if rank == 2 else "[E, N, K]"
        raise ValueError(
            f"{what} has shape {list(a.shape)}; {command} needs a {rank}-D {axes} array")
    return _C.Tensor.from_buffer(np.ascontiguousarray(a))


def _mx_part(x: Any, what: str) -> _C.Tensor:
    a = _check.array(what, x)
    if a.dtype != np.uint8:
        raise ValueError(f"{what} holds {a.dtype} data; MX data and scales are uint8")
    return _C.Tensor.from_buffer(np.ascontiguousarray(a))


def _array(t: _C.Tensor) -> np.ndarray:
    """A numpy view of a library tensor (keeps its storage alive)."""
    return np.asarray(t)


def _layout(axis: Any, group_list: Any, group_list_type: Any,
            allow_both: bool) -> tuple[int | str, str | None]:
    """The blocked axis and group list type as the CLI's --axis, --group-list and
    --group-list-type decide them."""
    if group_list_type is not None:
        group_list_type = _check.group_list_type(group_list_type)
        if group_list is None:
            raise ValueError("group_list_type needs group_list")
    if axis is None:
        axis = -2 if group_list is not None else -1  # token groups are columnwise
    axis = _check.axis(axis, allow_both)
    if group_list is not None and axis != -2:
        raise ValueError(
            f"group_list (token-grouped columnwise blocks) conflicts with axis {axis}")
    return axis, group_list_type


def _groups(group_list: Any, group_list_type: str | None, shape: Sequence[int],
            what: str) -> _C.GroupList:
    values = _check.group_values("group_list", group_list)
    if len(shape) != 2:
        raise ValueError(
            f"group_list needs 2-D [M, K] data, but {what} has shape {list(shape)}")
    return _C.GroupList(values, group_list_type or "cumsum", int(shape[0]))


def _result(q: _C.MxTensor, fmt: str, axis: int,
            groups: _C.GroupList | None = None) -> MxArray:
    ends = None if groups is None else tuple(int(e) for e in groups.ends)
    return MxArray(_array(q.data), _array(q.scales), fmt, axis, ends)


def quantize(x: np.ndarray, format: str = "e4m3", scale: str = "rceil",
             axis: int | str | None = None, group_list: GroupListLike | None = None,
             group_list_type: str | None = None, threads: int = 0) -> MxArray:
    """Quantizes x to MXFP8 (``mxtrain quantize``).

    Parameters
    ----------
    x : numpy.ndarray
        float32, or bf16 as uint16 bit patterns; rank >= 2, viewed as [..., M, K]. Read in
        place when C-contiguous.
    format : {"e4m3", "e5m2"}
        The element format.
    scale : {"rceil", "floor", "ceil", "even"}
        The E8M0 scale rule (NUMERICS.md section 4).
    axis : {-1, -2, "both"}, optional
        -1: rowwise 1x32 blocks, scale [..., M, ceil(K/32)]; -2: columnwise 32x1 blocks,
        scale [..., ceil(M/32), K]; "both": the two at once. Default -1, or -2 with a
        group_list.
    group_list : sequence of int or 1-D integer array, optional
        Token groups of a 2-D input (cumulative ends, or sizes with
        ``group_list_type="counts"``): columnwise blocks restart at each group, scale
        [sum_g ceil(m_g/32), K].
    group_list_type : {"cumsum", "counts"}, optional
        How group_list is written; default "cumsum". Needs group_list.
    threads : int
        Worker threads, >= 0; 0 means OpenMP's current count: all cores unless
        OMP_NUM_THREADS or torch.set_num_threads (same OpenMP runtime) set fewer.

    Returns
    -------
    MxArray
        ``data`` and ``scale`` (uint8 arrays over the library's buffers), ``format`` and
        ``axis``; for ``axis="both"``, ``rowwise`` and ``columnwise``, each an MxArray.

    Raises
    ------
    TypeError
        An argument of the wrong type (a list for x, a str for threads, ...).
    ValueError
        A wrong value: x not float32 / uint16 or of rank < 2, an unknown format, scale rule
        or axis, a group_list that does not fit x.
    """
    fmt = _check.element_format("format", format)
    rule = _check.scale_rule(scale)
    nthreads = _check.threads(threads)
    axis, group_list_type = _layout(axis, group_list, group_list_type, allow_both=True)
    t = _operand(x, "x", "quantize")
    if axis == "both":
        row, col = _C.quantize_dual(t, fmt, rule, nthreads)
        parts = (_result(row, fmt, -1), _result(col, fmt, -2))
        return MxArray(None, None, fmt, "both", None, parts)
    if group_list is not None:
        groups = _groups(group_list, group_list_type, t.shape, "x")
        return _result(_C.quantize_grouped(t, groups, fmt, rule, nthreads), fmt, -2, groups)
    if axis == -1:
        return _result(_C.quantize_rowwise(t, fmt, rule, nthreads), fmt, -1)
    return _result(_C.quantize_columnwise(t, fmt, rule, nthreads), fmt, -2)


def dequantize(data: np.ndarray, scale: np.ndarray, format: str = "e4m3",
               axis: int | str | None = None, group_list: GroupListLike | None = None,
               group_list_type: str | None = None, dtype: str = "f32",
               threads: int = 0) -> np.ndarray:
    """The values of MX data and scales (``mxtrain dequantize``).

    Parameters
    ----------
    data : numpy.ndarray
        uint8 element codes of rank >= 2, as :func:`quantize` returns them (``.data``).
    scale : numpy.ndarray
        uint8 E8M0 scales matching data and axis (``.scale``).
    format : {"e4m3", "e5m2"}
        The element format of data.
    axis : {-1, -2}, optional
        The blocked axis of data; default -1, or -2 with a group_list.
    group_list : sequence of int or 1-D integer array, optional
        The token groups data was quantized with, as for :func:`quantize`.
    group_list_type : {"cumsum", "counts"}, optional
        How group_list is written; default "cumsum".
    dtype : {"f32", "bf16"}
        The output: float32, or bf16 as uint16 bit patterns.
    threads : int
        Worker threads, >= 0; 0 means OpenMP's current count: all cores unless
        OMP_NUM_THREADS or torch.set_num_threads (same OpenMP runtime) set fewer.

    Returns
    -------
    numpy.ndarray
        float32 or uint16 (bf16 bits), data's shape.

    Raises
    ------
    TypeError
        An argument of the wrong type.
    ValueError
        data or scale not uint8, scale not of the shape data and axis need, an unknown
        format, axis or dtype.
    """
    fmt = _check.element_format("format", format)
    out = _check.dtype("dtype", dtype)
    nthreads = _check.threads(threads)
    axis, group_list_type = _layout(axis, group_list, group_list_type, allow_both=False)
    d = _mx_part(data, "data")
    s = _mx_part(scale, "scale")
    if len(d.shape) < 2:
        raise ValueError(
            f"data has shape {list(d.shape)}; MX data needs rank >= 2 ([..., M, K])")
    groups = None
    if group_list is not None:
        groups = _groups(group_list, group_list_type, d.shape, "data")
    # The scale rule is not part of the layout and dequantization does not depend on it.
    try:
        q = _C.MxTensor(d, s, fmt, "rceil", "rowwise" if axis == -1 else "columnwise", groups)
    except ValueError as e:
        raise ValueError(f"scale does not match data: {e}") from None
    return _array(_C.dequantize(q, out, nthreads))


def _bias(bias: Any, expected: list[int], layout: str) -> _C.Tensor | None:
    if bias is None:
        return None
    b = _check.array("bias", bias)
    if b.dtype != np.float32:
        raise ValueError(f"bias holds {b.dtype} data; bias needs float32")
    if list(b.shape) != list(expected):
        raise ValueError(
            f"bias has shape {list(b.shape)}; bias needs {layout} = {list(expected)}")
    return _C.Tensor.from_buffer(np.ascontiguousarray(b))


def _check_contraction(first: str, a: _C.Tensor, second: str, b: _C.Tensor) -> None:
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"contraction lengths differ: {first} {list(a.shape)} has K = {a.shape[-1]}, "
            f"{second} {list(b.shape)} has K = {b.shape[-1]}")


def gemm(a: np.ndarray, b: np.ndarray, format_a: str = "e4m3", format_b: str = "e4m3",
         scale: str = "rceil", bias: np.ndarray | None = None, out_dtype: str = "f32",
         threads: int = 0) -> np.ndarray:
    """C = A . B^T from the MX GEMM (``mxtrain gemm``), both operands quantized rowwise.

    Parameters
    ----------
    a : numpy.ndarray
        [M, K], float32 or bf16 bits (uint16).
    b : numpy.ndarray
        [N, K], float32 or bf16 bits (uint16).
    format_a, format_b : {"e4m3", "e5m2"}
        The element format of each operand.
    scale : {"rceil", "floor", "ceil", "even"}
        The E8M0 scale rule of both operands.
    bias : numpy.ndarray, optional
        float32 [N], added to every row.
    out_dtype : {"f32", "bf16"}
        The output: float32, or bf16 as uint16 bit patterns.
    threads : int
        Worker threads, >= 0; 0 means OpenMP's current count: all cores unless
        OMP_NUM_THREADS or torch.set_num_threads (same OpenMP runtime) set fewer.

    Returns
    -------
    numpy.ndarray
        C [M, N], float32 or uint16 (bf16 bits).

    Raises
    ------
    TypeError
        An argument of the wrong type (a list for a, b or bias, ...).
    ValueError
        An operand not 2-D float32 / uint16, contraction lengths that differ, a bias not
        float32 [N], an unknown format, scale rule or out_dtype.
    """
    fa = _check.element_format("format_a", format_a)
    fb = _check.element_format("format_b", format_b)
    rule = _check.scale_rule(scale)
    out = _check.dtype("out_dtype", out_dtype)
    nthreads = _check.threads(threads)
    ta = _operand(a, "a", "gemm", rank=2)
    tb = _operand(b, "b", "gemm", rank=2)
    _check_contraction("a", ta, "b", tb)
    tbias = _bias(bias, [tb.shape[0]], "float32 [N]")
    qa = _C.quantize_rowwise(ta, fa, rule, nthreads)
    qb = _C.quantize_rowwise(tb, fb, rule, nthreads)
    return _array(_C.gemm(qa, qb, tbias, out, nthreads))


def grouped_gemm(x: np.ndarray, w: np.ndarray, group_list: GroupListLike,
                 group_list_type: str = "cumsum", format_x: str = "e4m3",
                 format_w: str = "e4m3", scale: str = "rceil", bias: np.ndarray | None = None,
                 out_dtype: str = "f32", threads: int = 0) -> np.ndarray:
    """Mixture-of-experts fprop (``mxtrain grouped-gemm``): the rows of group e of
    Y [M, N] are X_e . W[e]^T (+ bias[e]).

    Parameters
    ----------
    x : numpy.ndarray
        [M, K] tokens sorted by expert, float32 or bf16 bits (uint16).
    w : numpy.ndarray
        [E, N, K] expert weights, float32 or bf16 bits (uint16).
    group_list : sequence of int or 1-D integer array
        The E token groups: cumulative ends, or sizes with ``group_list_type="counts"``.
    group_list_type : {"cumsum", "counts"}
        How group_list is written.
    format_x, format_w : {"e4m3", "e5m2"}
        The element format of each operand.
    scale : {"rceil", "floor", "ceil", "even"}
        The E8M0 scale rule of both operands.
    bias : numpy.ndarray, optional
        float32 [E, N].
    out_dtype : {"f32", "bf16"}
        The output: float32, or bf16 as uint16 bit patterns.
    threads : int
        Worker threads, >= 0; 0 means OpenMP's current count: all cores unless
        OMP_NUM_THREADS or torch.set_num_threads (same OpenMP runtime) set fewer.

    Returns
    -------
    numpy.ndarray
        Y [M, N], float32 or uint16 (bf16 bits).

    Raises
    ------
    TypeError
        An argument of the wrong type.
    ValueError
        Operands of the wrong rank or dtype, contraction lengths that differ, a group_list
        that does not sum to M or does not have E groups, a bias not float32 [E, N], an
        unknown option value.
    """
    gtype = _check.group_list_type(group_list_type)
    fx = _check.element_format("format_x", format_x)
    fw = _check.element_format("format_w", format_w)
    rule = _check.scale_rule(scale)
    out = _check.dtype("out_dtype", out_dtype)
    nthreads = _check.threads(threads)
    values = _check.group_values("group_list", group_list)
    tx = _operand(x, "x", "grouped-gemm", rank=2)
    tw = _operand(w, "w", "grouped-gemm", rank=3)
    _check_contraction("x", tx, "w", tw)
    groups = _C.GroupList(values, gtype, int(tx.shape[0]))
    experts = tw.shape[0]
    if groups.num_groups != experts:
        raise ValueError(
            f"group_list has {groups.num_groups} group{'s' if groups.num_groups != 1 else ''}"
            f" but w holds E = {experts} expert{'s' if experts != 1 else ''}")
    tbias = _bias(bias, [experts, tw.shape[1]], "float32 [E, N]")
    qx = _C.quantize_rowwise(tx, fx, rule, nthreads)
    qw = _C.quantize_rowwise(tw, fw, rule, nthreads)
    return _array(_C.grouped_gemm(qx, qw, groups, tbias, out, nthreads))


def memory() -> dict[str, Any]:
    """The tracking allocator's figures, in bytes.

    Returns
    -------
    dict
        ``by_category`` (a dict of category name to figures), ``total`` and
        ``held_for_backward`` (each ``{"live_bytes", "peak_bytes"}``) and ``cached_bytes``.
        Borrowed numpy / torch memory is not counted.
    """
    return _C.memory()


def weight_cache_stats() -> dict[str, int]:
    """The process-wide weight-quant cache's figures.

    Returns
    -------
    dict
        ``hits``, ``misses``, ``entries`` and ``bytes_held``.
    """
    return _C.weight_cache_stats()


def gemm_paths() -> list[str]:
    """The MX GEMM paths this machine can run, best first.

    Returns
    -------
    list of str
    """
    return list(_C.gemm_paths())
