"""The numpy API: the CLI's results byte for byte, a numpy reference of NUMERICS.md, the
GEMM bound of NUMERICS.md section 7, and the library's errors as ValueError."""

import numpy as np
import pytest

import mxtrain
from conftest import bf16_bits, bf16_values


def _npy(tmp_path, name, array):
    path = tmp_path / name
    np.save(path, array)
    return path


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


# ---- quantize / dequantize against the CLI -------------------------------------------------

CASES = [
    # (shape, dtype, format, scale, axis, group_list, group_list_type)
    ((70, 96), "f32", "e4m3", "rceil", None, None, None),
    ((3, 45, 33), "f32", "e5m2", "floor", -2, None, None),
    ((64, 40), "bf16", "e4m3", "even", -1, None, None),
    ((50, 64), "f32", "e4m3", "ceil", "both", None, None),
    ((100, 48), "f32", "e4m3", "rceil", None, [31, 0, 45, 24], "counts"),
    ((100, 48), "bf16", "e5m2", "rceil", -2, [31, 31, 76, 100], "cumsum"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{c[3]}-{c[4]}")
def test_quantize_and_dequantize_match_the_cli(tmp_path, cli, rng, case):
    shape, dtype, fmt, rule, axis, groups, gtype = case
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-6, 6, shape))).astype(np.float32)
    x.reshape(-1)[::97] = 0.0
    if dtype == "bf16":
        x = bf16_bits(x)
    flags = ["--format", fmt, "--scale", rule]
    if axis is not None:
        flags += ["--axis", axis]
    if groups is not None:
        flags += ["--group-list", ",".join(map(str, groups)), "--group-list-type", gtype]
    cli("quantize", _npy(tmp_path, "x.npy", x), "--out", tmp_path / "q", *flags)
    got = mxtrain.quantize(x, format=fmt, scale=rule, axis=axis, group_list=groups,
                           group_list_type=gtype)
    if axis == "both":
        for part in ("rowwise", "columnwise"):
            _same(getattr(got, part).data, np.load(tmp_path / f"q.{part}.data.npy"))
            _same(getattr(got, part).scale, np.load(tmp_path / f"q.{part}.scale.npy"))
        return
    data, scale = got.data, got.scale
    _same(data, np.load(tmp_path / "q.data.npy"))
    _same(scale, np.load(tmp_path / "q.scale.npy"))

    dq_flags = [f for f in flags if f not in ("--scale", rule)]
    for out in ("f32", "bf16"):
        cli("dequantize", tmp_path / "q", "--out", tmp_path / f"y_{out}.npy", "--dtype", out,
            *dq_flags)
        y = mxtrain.dequantize(data, scale, format=fmt, axis=axis, group_list=groups,
                               group_list_type=gtype, dtype=out)
        _same(y, np.load(tmp_path / f"y_{out}.npy"))


# ---- a numpy reference of NUMERICS.md ------------------------------------------------------

def _e4m3_table():
    codes = np.arange(0x7F)  # +0 .. 448 (0x7F is NaN)
    e, m = codes >> 3, codes & 7
    values = np.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * np.exp2(e - 7.0))
    return codes, values


def _encode_e4m3(v):
    """RNE to the nearest E4M3 code, ties to the even code, saturating (NUMERICS.md §1)."""
    codes, values = _e4m3_table()
    mag = np.minimum(np.abs(v), 448.0)
    hi = np.clip(np.searchsorted(values, mag), 1, len(values) - 1)
    lo = hi - 1
    dlo, dhi = mag - values[lo], values[hi] - mag
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return (codes[pick] | np.where(np.signbit(v), 0x80, 0)).astype(np.uint8)


def _reference_rowwise(x, rule):
    """Rowwise E4M3 of a 2-D float32 array of normal values (NUMERICS.md §4, §5)."""
    m, k = x.shape
    nb = -(-k // 32)
    scale = np.zeros((m, nb), np.uint8)
    data = np.zeros((m, k), np.uint8)
    for i in range(m):
        for j in range(nb):
            block = x[i, 32 * j:32 * j + 32]
            amax = np.float32(np.max(np.abs(block)))
            if rule == "rceil":
                d = np.float32(amax * np.array(0x3B124925, np.uint32).view(np.float32))
                bits = int(np.array(d).view(np.uint32))
                e, mant = (bits >> 23) & 0xFF, bits & 0x7FFFFF
                b = (1 if mant > 0x400000 else 0) if e == 0 else min(e + (mant != 0), 254)
            else:  # floor
                e = (int(np.array(amax).view(np.uint32)) >> 23) & 0xFF
                b = min(max(e - 127 - 8 + 127, 0), 254)
            scale[i, j] = b
            data[i, 32 * j:32 * j + 32] = _encode_e4m3(block.astype(np.float64) * 2.0**(127 - b))
    return data, scale


@pytest.mark.parametrize("rule", ["rceil", "floor"])
def test_quantize_matches_a_numpy_reference_of_numerics_md(rng, rule):
    x = (rng.standard_normal((6, 80)) * np.exp2(rng.integers(-20, 20, (6, 80)))).astype(np.float32)
    x[0, :32] *= np.float32(448.0 / np.max(np.abs(x[0, :32])))  # amax exactly 448
    q = mxtrain.quantize(x, scale=rule)
    ref_data, ref_scale = _reference_rowwise(x, rule)
    _same(q.scale, ref_scale)
    _same(q.data, ref_data)
    # Columnwise is rowwise of the transpose, element for element.
    c = mxtrain.quantize(np.ascontiguousarray(x.T), scale=rule, axis=-2)
    _same(c.data, np.ascontiguousarray(ref_data.T))
    _same(c.scale, np.ascontiguousarray(ref_scale.T))


def test_grouped_equals_columnwise_per_group(rng):
    x = rng.standard_normal((100, 40)).astype(np.float32)
    counts = [31, 0, 45, 24]
    g = mxtrain.quantize(x, group_list=counts, group_list_type="counts")
    assert g.scale.shape == (1 + 0 + 2 + 1, 40)
    assert g.axis == -2 and g.group_list == (31, 31, 76, 100)
    row = srow = 0
    for c in counts:
        if c:
            q = mxtrain.quantize(x[row:row + c], axis=-2)
            d, s = q.data, q.scale
        else:
            d, s = g.data[:0], g.scale[:0]
        _same(g.data[row:row + c], d)
        _same(g.scale[srow:srow + s.shape[0]], s)
        row, srow = row + c, srow + s.shape[0]


def test_results_are_views_not_copies_and_inputs_are_not_copied(rng):
    x = rng.standard_normal((64, 64)).astype(np.float32)
    before = mxtrain.memory()["total"]["live_bytes"]
    q = mxtrain.quantize(x)
    after = mxtrain.memory()["total"]["live_bytes"]
    # Only the MX copies are allocated (x is borrowed); data is a view of the library's buffer.
    assert after - before == q.data.nbytes + q.scale.nbytes
    assert q.data.base is not None
    del q
    assert mxtrain.memory()["total"]["live_bytes"] == before


# ---- GEMM ----------------------------------------------------------------------------------

def _dequantized_rowwise(x, fmt="e4m3"):
    q = mxtrain.quantize(x, format=fmt)
    return mxtrain.dequantize(q.data, q.scale, format=fmt).astype(np.float64)


def test_gemm_within_the_bound_of_numerics_md(rng):
    a = rng.standard_normal((70, 96)).astype(np.float32)
    b = rng.standard_normal((40, 96)).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)
    c = mxtrain.gemm(a, b, format_b="e5m2", bias=bias)
    assert c.dtype == np.float32 and c.shape == (70, 40)
    da, db = _dequantized_rowwise(a), _dequantized_rowwise(b, "e5m2")
    exact = da @ db.T + bias
    bound = 96 * 2.0**-24 * (np.abs(da) @ np.abs(db).T + np.abs(bias)) + \
        np.abs(exact) * 2.0**-24
    assert np.all(np.abs(c - exact) <= bound)
    # bf16 in and out: the same bound plus half an ulp of bf16.
    a16 = bf16_bits(a)
    c16 = mxtrain.gemm(a16, b, out_dtype="bf16")
    assert c16.dtype == np.uint16
    da16, db4 = _dequantized_rowwise(a16), _dequantized_rowwise(b)
    exact16 = da16 @ db4.T
    bound16 = 96 * 2.0**-24 * (np.abs(da16) @ np.abs(db4).T) + np.abs(exact16) * 2.0**-8
    assert np.all(np.abs(bf16_values(c16) - exact16) <= bound16)


def test_gemm_matches_the_cli(tmp_path, cli, rng):
    a = rng.standard_normal((33, 64)).astype(np.float32)
    b = bf16_bits(rng.standard_normal((17, 64)))
    cli("gemm", _npy(tmp_path, "a.npy", a), _npy(tmp_path, "b.npy", b), "--out",
        tmp_path / "c.npy", "--out-dtype", "bf16", "--scale", "floor")
    _same(mxtrain.gemm(a, b, out_dtype="bf16", scale="floor"), np.load(tmp_path / "c.npy"))


def test_grouped_gemm_rows_equal_gemm_per_expert(tmp_path, cli, rng):
    x = rng.standard_normal((100, 64)).astype(np.float32)
    w = rng.standard_normal((4, 48, 64)).astype(np.float32)
    bias = rng.standard_normal((4, 48)).astype(np.float32)
    counts = [31, 0, 45, 24]
    y = mxtrain.grouped_gemm(x, w, counts, group_list_type="counts", bias=bias)
    row = 0
    for e, c in enumerate(counts):
        if c:
            _same(y[row:row + c], mxtrain.gemm(x[row:row + c], w[e], bias=bias[e]))
        row += c
    cli("grouped-gemm", _npy(tmp_path, "x.npy", x), _npy(tmp_path, "w.npy", w), "--group-list",
        "31,0,45,24", "--group-list-type", "counts", "--bias", _npy(tmp_path, "b.npy", bias),
        "--out", tmp_path / "y.npy")
    _same(y, np.load(tmp_path / "y.npy"))


# ---- errors ---------------------------------------------------------------------------------

def test_bad_inputs_raise_value_error_with_the_library_message(rng):
    x = rng.standard_normal((4, 64)).astype(np.float32)
    with pytest.raises(ValueError, match="quantize needs float32 or bf16 bits"):
        mxtrain.quantize(x.astype(np.float64))
    with pytest.raises(ValueError, match=r"rank >= 2"):
        mxtrain.quantize(x[0])
    with pytest.raises(ValueError, match="e4m3"):  # the library names the accepted formats
        mxtrain.quantize(x, format="e3m4")
    with pytest.raises(ValueError, match="rceil"):
        mxtrain.quantize(x, scale="round")
    with pytest.raises(ValueError, match="axis value '0'"):
        mxtrain.quantize(x, axis=0)
    with pytest.raises(ValueError, match="conflicts with axis -1"):
        mxtrain.quantize(x, axis=-1, group_list=[4])
    with pytest.raises(ValueError, match="group"):  # cumulative ends must end at M = 4
        mxtrain.quantize(x, group_list=[1, 3])
    q = mxtrain.quantize(x)
    with pytest.raises(ValueError, match="scale does not match data"):
        mxtrain.dequantize(q.data, q.scale[:, :1])
    with pytest.raises(ValueError, match="contraction lengths differ"):
        mxtrain.gemm(x, x[:, :32])
    with pytest.raises(ValueError, match=r"bias needs float32 \[N\]"):
        mxtrain.gemm(x, x, bias=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="2 groups but w holds E = 1 expert"):
        mxtrain.grouped_gemm(x, x[None], [2, 4])
