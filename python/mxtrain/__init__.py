"""mxtrain: MXFP8 quantization, GEMM and training ops from Python.

The numpy API has the semantics of the command-line tool (``mxtrain quantize``,
``dequantize``, ``gemm``, ``grouped-gemm``): float32 arrays, or bf16 exchanged as uint16 bit
patterns, of rank >= 2 viewed as [..., M, K]; MX results in the canonical layout of
NUMERICS.md section 6 (uint8 data in the input's shape, uint8 E8M0 scales). Arrays are read
in place (no copy when C-contiguous) and results are numpy views of the library's own
buffers. Errors raise ValueError with the library's message.

    data, scale = mxtrain.quantize(x)                   # rowwise e4m3, rceil
    y = mxtrain.dequantize(data, scale)                 # float32
    c = mxtrain.gemm(a, b)                              # a [M, K] . b [N, K]^T, float32

PyTorch modules (MxLinear, MxGroupedLinear) are in mxtrain.torch.
"""

import numpy as _np

from . import _C

__all__ = [
    "quantize",
    "dequantize",
    "gemm",
    "grouped_gemm",
    "memory",
    "weight_cache_stats",
    "gemm_paths",
]

__version__ = "0.1.0"

_FLOAT_INPUT = "float32 or bf16 bits (uint16)"


def _operand(x, what, command, rank=None):
    """x as a C-contiguous float32 / uint16 array, checked as the CLI checks its files."""
    a = _np.asarray(x)
    if a.dtype not in (_np.float32, _np.uint16):
        raise ValueError(f"{what} holds {a.dtype} data; {command} needs {_FLOAT_INPUT}")
    if rank is None and a.ndim < 2:
        raise ValueError(
            f"{what} has shape {list(a.shape)}; {command} needs rank >= 2 ([..., M, K])")
    if rank is not None and a.ndim != rank:
        axes = "[M, K]" if rank == 2 else "[E, N, K]"
        raise ValueError(
            f"{what} has shape {list(a.shape)}; {command} needs a {rank}-D {axes} array")
    return _C.Tensor.from_buffer(_np.ascontiguousarray(a))


def _mx_part(x, what):
    a = _np.asarray(x)
    if a.dtype != _np.uint8:
        raise ValueError(f"{what} holds {a.dtype} data; MX data and scales are uint8")
    return _C.Tensor.from_buffer(_np.ascontiguousarray(a))


def _array(t):
    """A numpy view of a library tensor (keeps its storage alive)."""
    return _np.asarray(t)


def _axis(axis, group_list, group_list_type, allow_both):
    """The blocked axis as the CLI's --axis, --group-list and --group-list-type decide it."""
    if group_list is None and group_list_type is not None:
        raise ValueError("group_list_type needs group_list")
    if axis is None:
        axis = -2 if group_list is not None else -1  # token groups are columnwise
    text = str(axis)
    if text not in ("-1", "-2") and not (allow_both and text == "both"):
        choices = "-1, -2 or both" if allow_both else "-1 or -2"
        raise ValueError(f"axis value '{text}' is not {choices}")
    if group_list is not None and text != "-2":
        raise ValueError(
            f"group_list (token-grouped columnwise blocks) conflicts with axis {text}")
    return text


def _groups(group_list, group_list_type, shape, what):
    if len(shape) != 2:
        raise ValueError(
            f"group_list needs 2-D [M, K] data, but {what} has shape {list(shape)}")
    values = [int(v) for v in _np.asarray(group_list).reshape(-1)]
    return _C.GroupList(values, group_list_type or "cumsum", int(shape[0]))


def quantize(x, format="e4m3", scale="rceil", axis=None, group_list=None,
             group_list_type=None, threads=0):
    """Quantizes x (float32, or bf16 as uint16 bits; rank >= 2, [..., M, K]) to MXFP8.

    axis: -1 (rowwise 1x32 blocks, scale [..., M, ceil(K/32)]), -2 (columnwise 32x1
    blocks, scale [..., ceil(M/32), K]) or "both"; default -1, or -2 with a group_list.
    group_list: token groups of a 2-D input (cumulative ends, or sizes with
    group_list_type="counts"); columnwise blocks restart at each group, scale
    [sum_g ceil(m_g/32), K].

    Returns (data, scale) uint8 arrays; for axis="both" a dict {"rowwise": (data, scale),
    "colwise": (data, scale)}.
    """
    text = _axis(axis, group_list, group_list_type, allow_both=True)
    t = _operand(x, "x", "quantize")
    if text == "both":
        row, col = _C.quantize_dual(t, format, scale, threads)
        return {
            "rowwise": (_array(row.data), _array(row.scales)),
            "colwise": (_array(col.data), _array(col.scales)),
        }
    if group_list is not None:
        groups = _groups(group_list, group_list_type, t.shape, "x")
        q = _C.quantize_grouped(t, groups, format, scale, threads)
    elif text == "-1":
        q = _C.quantize_rowwise(t, format, scale, threads)
    else:
        q = _C.quantize_colwise(t, format, scale, threads)
    return _array(q.data), _array(q.scales)


def dequantize(data, scale, format="e4m3", axis=None, group_list=None, group_list_type=None,
               dtype="f32", threads=0):
    """The values of MX data and scales (as quantize returns them): float32, or bf16 bits
    (uint16) with dtype="bf16". axis, group_list and group_list_type as for quantize."""
    text = _axis(axis, group_list, group_list_type, allow_both=False)
    if dtype not in ("f32", "bf16"):
        raise ValueError(f"dtype value '{dtype}' is not f32 or bf16")
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
        q = _C.MxTensor(d, s, format, "rceil", "rowwise" if text == "-1" else "columnwise",
                        groups)
    except ValueError as e:
        raise ValueError(f"scale does not match data: {e}") from None
    return _array(_C.dequantize(q, dtype, threads))


def _bias(bias, expected, layout):
    if bias is None:
        return None
    b = _np.asarray(bias)
    if b.dtype != _np.float32:
        raise ValueError(f"bias holds {b.dtype} data; bias needs float32")
    if list(b.shape) != list(expected):
        raise ValueError(
            f"bias has shape {list(b.shape)}; bias needs {layout} = {list(expected)}")
    return _C.Tensor.from_buffer(_np.ascontiguousarray(b))


def _check_contraction(first, a, second, b):
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"contraction lengths differ: {first} {list(a.shape)} has K = {a.shape[-1]}, "
            f"{second} {list(b.shape)} has K = {b.shape[-1]}")


def gemm(a, b, format_a="e4m3", format_b="e4m3", scale="rceil", bias=None, out_dtype="f32",
         threads=0):
    """C = A . B^T [M, N] from the MX GEMM: a [M, K] and b [N, K] (float32 or bf16 bits)
    quantized rowwise; bias float32 [N]; out_dtype "f32" or "bf16" (uint16 bits)."""
    ta = _operand(a, "a", "gemm", rank=2)
    tb = _operand(b, "b", "gemm", rank=2)
    _check_contraction("a", ta, "b", tb)
    tbias = _bias(bias, [tb.shape[0]], "float32 [N]")
    qa = _C.quantize_rowwise(ta, format_a, scale, threads)
    qb = _C.quantize_rowwise(tb, format_b, scale, threads)
    return _array(_C.gemm(qa, qb, tbias, out_dtype, threads))


def grouped_gemm(x, w, group_list, group_list_type="cumsum", format_x="e4m3",
                 format_w="e4m3", scale="rceil", bias=None, out_dtype="f32", threads=0):
    """Mixture-of-experts fprop: x [M, K] tokens sorted by expert, w [E, N, K]; the rows of
    group e of Y [M, N] are X_e . W[e]^T. bias float32 [E, N]."""
    tx = _operand(x, "x", "grouped-gemm", rank=2)
    tw = _operand(w, "w", "grouped-gemm", rank=3)
    _check_contraction("x", tx, "w", tw)
    values = [int(v) for v in _np.asarray(group_list).reshape(-1)]
    groups = _C.GroupList(values, group_list_type, int(tx.shape[0]))
    experts = tw.shape[0]
    if groups.num_groups != experts:
        raise ValueError(
            f"group_list has {groups.num_groups} group{'s' if groups.num_groups != 1 else ''}"
            f" but w holds E = {experts} expert{'s' if experts != 1 else ''}")
    tbias = _bias(bias, [experts, tw.shape[1]], "float32 [E, N]")
    qx = _C.quantize_rowwise(tx, format_x, scale, threads)
    qw = _C.quantize_rowwise(tw, format_w, scale, threads)
    return _array(_C.grouped_gemm(qx, qw, groups, tbias, out_dtype, threads))


def memory():
    """The tracking allocator's figures (bytes): by_category, total, cached_bytes and
    held_for_backward, each live and peak. Borrowed numpy / torch memory is not counted."""
    return _C.memory()


def weight_cache_stats():
    """Hits, misses, entries and bytes_held of the process-wide weight-quant cache."""
    return _C.weight_cache_stats()


def gemm_paths():
    """The MX GEMM paths this machine can run, best first."""
    return list(_C.gemm_paths())
