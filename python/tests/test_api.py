"""The shape of the Python API itself (issue 25 point 4): wrong types raise TypeError and
wrong values ValueError, in one line naming the argument; quantize returns an MxArray
whatever the axis; the names and forms of 0.1 still work for one release with a
DeprecationWarning; "columnwise" is the one name; every public function and class is typed
and has numpydoc sections."""

import dataclasses
import importlib
import inspect
import os
import re
import warnings

import numpy as np
import pytest

import mxtrain
from mxtrain import _validate

X = np.linspace(-3, 3, 4 * 64, dtype=np.float32).reshape(4, 64)


def _raises(exc, name, fn, *args, **kwargs):
    """fn(*args, **kwargs) raises exc with a one-line message naming the argument."""
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    assert name in message, message
    return message


# ---- numpy API: TypeError and ValueError ----------------------------------------------------

TYPE_ERRORS = [
    # (argument named in the message, function, args, kwargs)
    ("x", mxtrain.quantize, (X.tolist(),), {}),
    ("x", mxtrain.quantize, (3.0,), {}),
    ("x", mxtrain.quantize, ("x.npy",), {}),
    ("threads", mxtrain.quantize, (X,), {"threads": "2"}),
    ("threads", mxtrain.quantize, (X,), {"threads": 2.0}),
    ("threads", mxtrain.quantize, (X,), {"threads": True}),
    ("format", mxtrain.quantize, (X,), {"format": 4}),
    ("scale", mxtrain.quantize, (X,), {"scale": None}),
    ("axis", mxtrain.quantize, (X,), {"axis": -1.0}),
    ("axis", mxtrain.quantize, (X,), {"axis": True}),
    ("group_list", mxtrain.quantize, (X,), {"group_list": "1,3"}),
    ("group_list", mxtrain.quantize, (X,), {"group_list": [1.0, 3.0]}),
    ("group_list_type", mxtrain.quantize, (X,), {"group_list": [4], "group_list_type": 1}),
    ("data", mxtrain.dequantize, ([[0] * 32], np.zeros((1, 1), np.uint8)), {}),
    ("scale", mxtrain.dequantize, (np.zeros((1, 32), np.uint8), [[127]]), {}),
    ("dtype", mxtrain.dequantize, (np.zeros((1, 32), np.uint8), np.zeros((1, 1), np.uint8)),
     {"dtype": np.float32}),
    ("a", mxtrain.gemm, ([[1.0] * 32], X), {}),
    ("b", mxtrain.gemm, (X, (1.0,)), {}),
    ("bias", mxtrain.gemm, (X, X), {"bias": [0.0] * 4}),
    ("format_b", mxtrain.gemm, (X, X), {"format_b": b"e4m3"}),
    ("out_dtype", mxtrain.gemm, (X, X), {"out_dtype": None}),
    ("group_list", mxtrain.grouped_gemm, (X, X[None]), {"group_list": None}),
    ("w", mxtrain.grouped_gemm, (X, X[None].tolist()), {"group_list": [4]}),
    ("format_w", mxtrain.grouped_gemm, (X, X[None]), {"group_list": [4], "format_w": 8}),
]


@pytest.mark.parametrize("case", TYPE_ERRORS,
                         ids=lambda c: f"{c[1].__name__}-{c[0]}-{type(c[2][0]).__name__}")
def test_wrong_types_raise_type_error_naming_the_argument(case):
    name, fn, args, kwargs = case
    _raises(TypeError, name, fn, *args, **kwargs)


VALUE_ERRORS = [
    ("threads", mxtrain.quantize, (X,), {"threads": -1}),
    ("format", mxtrain.quantize, (X,), {"format": "e3m4"}),
    ("scale", mxtrain.quantize, (X,), {"scale": "round"}),
    ("axis", mxtrain.quantize, (X,), {"axis": 0}),
    ("axis", mxtrain.quantize, (X,), {"axis": "rows"}),
    ("group_list_type", mxtrain.quantize, (X,), {"group_list": [4], "group_list_type": "sizes"}),
    ("group_list", mxtrain.quantize, (X,), {"group_list": [[1, 3]]}),
    ("axis", mxtrain.dequantize, (np.zeros((1, 32), np.uint8), np.zeros((1, 1), np.uint8)),
     {"axis": "both"}),
    ("dtype", mxtrain.dequantize, (np.zeros((1, 32), np.uint8), np.zeros((1, 1), np.uint8)),
     {"dtype": "f16"}),
    ("out_dtype", mxtrain.gemm, (X, X), {"out_dtype": "f64"}),
    ("threads", mxtrain.gemm, (X, X), {"threads": -2}),
    ("group_list_type", mxtrain.grouped_gemm, (X, X[None], [4]), {"group_list_type": "ends"}),
]


@pytest.mark.parametrize("case", VALUE_ERRORS, ids=lambda c: f"{c[1].__name__}-{c[0]}")
def test_wrong_values_raise_value_error_naming_the_argument(case):
    name, fn, args, kwargs = case
    _raises(ValueError, name, fn, *args, **kwargs)


def test_valid_calls_of_0_1_still_work():
    # The CLI's spelling of the axis, numpy integers, integer arrays as group lists, and an
    # object numpy reads without a copy.
    want = mxtrain.quantize(X, axis=-2)
    for axis in ("-2", np.int64(-2)):
        got = mxtrain.quantize(X, axis=axis, threads=np.int32(1))
        assert got.axis == -2 and np.array_equal(got.data, want.data)
    for groups in ([1, 4], np.array([1, 4], np.int32), (1, 4)):
        assert mxtrain.quantize(X, group_list=groups).group_list == (1, 4)
    assert np.array_equal(mxtrain.quantize(memoryview(X)).data, mxtrain.quantize(X).data)


def test_the_python_names_are_the_library_names():
    # _validate names each option's values to name the argument in its message; the library
    # accepts every one of them (and refuses what _validate refuses, ValueError either way).
    for fmt in _validate.FORMATS:
        for rule in _validate.SCALE_RULES:
            mxtrain._C.quantize_rowwise(mxtrain._C.Tensor.from_buffer(X), fmt, rule)
    for recipe in _validate.RECIPES:
        for policy in _validate.POLICIES:
            mxtrain._C.Recipe("mxfp8", recipe, "rceil", policy, policy)
    for gtype in _validate.GROUP_LIST_TYPES:
        mxtrain._C.GroupList([4], gtype, 4)
    for dtype in _validate.DTYPES:
        q = mxtrain.quantize(X)
        mxtrain.dequantize(q.data, q.scale, dtype=dtype)
    with pytest.raises(ValueError):
        mxtrain._C.quantize_rowwise(mxtrain._C.Tensor.from_buffer(X), "e3m4", "rceil")


# ---- quantize's result -----------------------------------------------------------------------

def test_quantize_returns_an_mx_array_whatever_the_axis():
    row = mxtrain.quantize(X)
    col = mxtrain.quantize(X, axis=-2, format="e5m2")
    grouped = mxtrain.quantize(X, group_list=[1, 3], group_list_type="counts")
    both = mxtrain.quantize(X, axis="both")
    for q in (row, col, grouped, both):
        assert type(q) is mxtrain.MxArray
    assert (row.axis, row.format, row.data.shape, row.scale.shape) == (-1, "e4m3", (4, 64), (4, 2))
    assert (col.axis, col.format, col.scale.shape) == (-2, "e5m2", (1, 64))
    assert row.rowwise is row and row.columnwise is None
    assert col.columnwise is col and col.rowwise is None
    assert row.group_list is None and grouped.group_list == (1, 4)
    assert both.axis == "both" and both.data is None and both.scale is None
    assert both.rowwise.axis == -1 and both.columnwise.axis == -2
    assert np.array_equal(both.rowwise.data, row.data)
    assert np.array_equal(both.rowwise.scale, row.scale)
    assert np.array_equal(both.columnwise.data, mxtrain.quantize(X, axis=-2).data)
    assert np.array_equal(both.columnwise.scale, mxtrain.quantize(X, axis=-2).scale)
    assert repr(row) == "MxArray(format='e4m3', axis=-1, data=uint8[4, 64], scale=uint8[4, 2])"
    assert "columnwise=MxArray(format='e4m3', axis=-2" in repr(both)
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.data = None


def test_the_new_api_warns_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q = mxtrain.quantize(X)
        mxtrain.dequantize(q.data, q.scale)
        both = mxtrain.quantize(X, axis="both")
        assert both.rowwise.data is not None and both.columnwise.scale is not None
        mxtrain._C.quantize_columnwise(mxtrain._C.Tensor.from_buffer(X), "e4m3", "rceil")


def test_the_0_1_tuple_and_dict_still_work_with_a_deprecation_warning():
    q = mxtrain.quantize(X)
    with pytest.warns(DeprecationWarning, match=r"result\.data and result\.scale") as record:
        data, scale = q
    assert os.path.basename(record[0].filename) == "test_api.py"  # points at the caller
    assert data is q.data and scale is q.scale
    with pytest.warns(DeprecationWarning):
        assert q[1] is q.scale
    with pytest.warns(DeprecationWarning):
        assert len(q) == 2
    with pytest.warns(DeprecationWarning):
        y = mxtrain.dequantize(*q)
    assert np.array_equal(y, mxtrain.dequantize(q.data, q.scale))

    both = mxtrain.quantize(X, axis="both")
    with pytest.warns(DeprecationWarning, match=r"result\.rowwise and result\.columnwise"):
        d, s = both["colwise"]
    assert d is both.columnwise.data and s is both.columnwise.scale
    with pytest.warns(DeprecationWarning):
        assert both["rowwise"][0] is both.rowwise.data
    with pytest.warns(DeprecationWarning):
        assert both["columnwise"][1] is both.columnwise.scale
    with pytest.warns(DeprecationWarning):
        assert sorted(both) == ["colwise", "rowwise"]
    with pytest.warns(DeprecationWarning):
        assert dict(both.items())["colwise"][0] is both.columnwise.data


def test_columnwise_is_the_one_name_and_colwise_is_deprecated():
    public = [n for n in dir(mxtrain._C) if not n.startswith("_")]
    assert [n for n in public if "colwise" in n] == ["quantize_colwise"]  # the deprecated alias
    assert "quantize_columnwise" in public
    t = mxtrain._C.Tensor.from_buffer(X)
    with pytest.warns(DeprecationWarning, match="quantize_columnwise"):
        old = mxtrain._C.quantize_colwise(t, "e4m3", "rceil")
    new = mxtrain._C.quantize_columnwise(t, "e4m3", "rceil")
    assert old.axis == new.axis == "columnwise"
    assert np.array_equal(np.asarray(old.data), np.asarray(new.data))
    assert np.array_equal(np.asarray(old.scales), np.asarray(new.scales))


# ---- mxtrain.torch: TypeError and ValueError ------------------------------------------------

def _torch_cases():
    """(TypeError cases, ValueError cases) of mxtrain.torch; none without torch."""
    try:
        import torch

        import mxtrain.torch as mxt
    except ImportError:
        return [], []
    layer = mxt.MxLinear(64, 32)
    experts = mxt.MxGroupedLinear(2, 64, 32)
    x = torch.randn(4, 64)
    type_errors = [
        ("in_features", mxt.MxLinear, ("64", 32), {}),
        ("out_features", mxt.MxLinear, (64, 32.0), {}),
        ("bias", mxt.MxLinear, (64, 32, 1), {}),
        ("recipe", mxt.MxLinear, (64, 32), {"recipe": 4}),
        ("scale", mxt.MxLinear, (64, 32), {"scale": None}),
        ("input_policy", mxt.MxLinear, (64, 32), {"input_policy": True}),
        ("num_experts", mxt.MxGroupedLinear, (2.0, 64, 32), {}),
        ("input", layer, (x.numpy(),), {}),
        ("input", experts, (x.tolist(), [4, 4]), {}),
        ("group_list", experts, (x, [2.0, 4.0]), {}),
        ("group_list", experts, (x, torch.tensor([2.0, 4.0])), {}),
        ("group_list_type", experts, (x, [2, 4], 0), {}),
        ("model", mxt.convert, ("model",), {}),
        ("scale_rule", mxt.convert, (torch.nn.Linear(8, 8),), {"scale_rule": "floor"}),
        ("optimizer", mxt.attach, (3,), {}),
    ]
    value_errors = [
        ("in_features", mxt.MxLinear, (-1, 32), {}),
        ("num_experts", mxt.MxGroupedLinear, (0, 64, 32), {}),
        ("recipe", mxt.MxLinear, (64, 32), {"recipe": "e5m2"}),
        ("weight_policy", mxt.MxGroupedLinear, (2, 64, 32), {"weight_policy": "lazy"}),
        ("group_list_type", experts, (x, [2, 4], "sizes"), {}),
        ("group_list", experts, (x, [[2, 4]]), {}),
        # Checked once, up front, even where no nn.Linear would take them.
        ("scale", mxt.convert, (torch.nn.ReLU(),), {"scale": "nearest"}),
    ]
    return type_errors, value_errors


TORCH_TYPE_ERRORS, TORCH_VALUE_ERRORS = _torch_cases()


def _torch_id(case):
    return f"{getattr(case[1], '__name__', type(case[1]).__name__)}-{case[0]}"


@pytest.mark.parametrize("case", TORCH_TYPE_ERRORS, ids=_torch_id)
def test_torch_wrong_types_raise_type_error_naming_the_argument(case):
    name, fn, args, kwargs = case
    _raises(TypeError, name, fn, *args, **kwargs)


@pytest.mark.parametrize("case", TORCH_VALUE_ERRORS, ids=_torch_id)
def test_torch_wrong_values_raise_value_error_naming_the_argument(case):
    name, fn, args, kwargs = case
    _raises(ValueError, name, fn, *args, **kwargs)


def test_torch_valid_calls_of_0_1_still_work():
    torch = pytest.importorskip("torch")
    import mxtrain.torch as mxt

    experts = mxt.MxGroupedLinear(np.int64(2), 64, 32, bias=np.bool_(True))
    x = torch.randn(6, 64)
    want = experts(x, [2, 6])
    for groups in (torch.tensor([2, 6]), np.array([2, 6]), (2, 6)):
        assert torch.equal(experts(x, groups), want)
    assert torch.equal(experts(x, [2, 4], "counts"), want)
    assert isinstance(mxt.attach(torch.optim.SGD(experts.parameters(), lr=0.1)),
                      mxt.StepHookHandle)


# ---- types and docs --------------------------------------------------------------------------

def _public(module):
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj):
            yield f"{name}.__init__", obj.__init__
            for attr, member in vars(obj).items():
                if inspect.isfunction(member) and not attr.startswith("_"):
                    yield f"{name}.{attr}", member
        else:
            yield name, obj


def _modules():
    modules = [mxtrain]
    try:
        modules.append(importlib.import_module("mxtrain.torch"))
    except ImportError:  # no torch: the numpy API alone
        pass
    return modules


def test_every_public_function_and_method_is_typed():
    untyped = []
    for module in _modules():
        for name, fn in _public(module):
            if fn is object.__init__:
                continue
            sig = inspect.signature(fn)
            params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
            missing = [p.name for p in params if p.annotation is inspect.Parameter.empty]
            if missing or sig.return_annotation is inspect.Signature.empty:
                untyped.append(f"{module.__name__}.{name}: {missing or 'return'}")
    assert not untyped, untyped


NUMPYDOC = ["quantize", "dequantize", "gemm", "grouped_gemm", "torch.MxLinear",
            "torch.MxGroupedLinear", "torch.MxLinear.forward", "torch.MxGroupedLinear.forward",
            "torch.convert", "torch.attach", "torch.invalidate"]


@pytest.mark.parametrize("path", NUMPYDOC)
def test_numpydoc_sections_name_every_parameter(path):
    if path.startswith("torch."):
        pytest.importorskip("torch")
        importlib.import_module("mxtrain.torch")

    obj = mxtrain
    for part in path.split("."):
        obj = getattr(obj, part)
    doc = inspect.getdoc(obj)
    assert "Parameters\n----------\n" in doc, path
    fn = obj.__init__ if inspect.isclass(obj) else obj
    section = doc.split("Parameters\n----------\n")[1]
    section = re.split(r"\n\n(?:Returns|Raises|Attributes|Examples)\n-+\n", section)[0]
    documented = set(re.findall(r"^\**(\w+)", section, re.MULTILINE))
    documented |= {n for line in re.findall(r"^(\w+(?:, \w+)+) :", section, re.MULTILINE)
                   for n in line.split(", ")}
    wanted = [p for p in inspect.signature(fn).parameters if p != "self"]
    assert set(wanted) <= documented, (path, sorted(set(wanted) - documented))
    returns = inspect.signature(fn).return_annotation not in (None, "None")
    assert not returns or inspect.isclass(obj) or "Returns\n-------\n" in doc, path
    assert "Raises\n------\n" in doc, path
