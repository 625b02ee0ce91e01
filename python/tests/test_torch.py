"""mxtrain.torch: MxLinear and MxGroupedLinear against PyTorch's fp32 modules, bit-identity
across save policies, the weight cache with a real optimizer, training, convert(), bf16,
and the errors."""

import copy
import itertools

import pytest

torch = pytest.importorskip("torch")
import mxtrain  # noqa: E402
import mxtrain.torch as mxt  # noqa: E402
from conftest import sqnr_db  # noqa: E402

torch.manual_seed(0)


def _sqnr(ref, got):
    return sqnr_db(ref.detach().double().numpy(), got.detach().double().numpy())


def _dense_run(layer, x, dy):
    x = x.clone().requires_grad_(True)
    y = layer(x)
    y.backward(dy)
    return y, x.grad, layer.weight.grad, None if layer.bias is None else layer.bias.grad


def _grouped_reference(x, w, b, counts):
    """Expert e: x_e . W[e]^T + b[e], with torch fp32 ops."""
    outs, row = [], 0
    for e, c in enumerate(counts):
        xe = x[row:row + c]
        outs.append(xe @ w[e].t() + (b[e] if b is not None else 0))
        row += c
    return torch.cat(outs)


COUNTS = [31, 0, 45, 24]


def _grouped_run(layer, x, dy, group_list=COUNTS, group_list_type="counts"):
    x = x.clone().requires_grad_(True)
    y = layer(x, group_list, group_list_type)
    y.backward(dy)
    return y, x.grad, layer.weight.grad, None if layer.bias is None else layer.bias.grad


def _bits_equal(a, b):
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.int16 if a.dtype == torch.bfloat16 else torch.int32),
        b.contiguous().view(torch.int16 if b.dtype == torch.bfloat16 else torch.int32))


@pytest.mark.parametrize("recipe", ["e4m3", "hybrid"])
def test_linear_against_torch_fp32(recipe):
    ref = torch.nn.Linear(96, 40)
    layer = mxt.convert(copy.deepcopy(ref), recipe=recipe)
    assert isinstance(layer, mxt.MxLinear)
    x = torch.randn(2, 35, 96)
    dy = torch.randn(2, 35, 40)
    got = _dense_run(layer, x, dy)
    want = _dense_run(ref, x, dy)
    bar = 25 if recipe == "e4m3" else 18  # E5M2 gradients have one mantissa bit less
    for name, g, w in zip(("y", "dx", "dw", "db"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        assert _sqnr(w, g) >= (25 if name == "y" else bar), name


def test_grouped_linear_against_torch_fp32():
    layer = mxt.MxGroupedLinear(4, 64, 48, bias=True)
    x = torch.randn(100, 64)
    dy = torch.randn(100, 48)
    y, dx, dw, db = _grouped_run(layer, x, dy)
    xr = x.clone().requires_grad_(True)
    w = layer.weight.detach().clone().requires_grad_(True)
    b = layer.bias.detach().clone().requires_grad_(True)
    yr = _grouped_reference(xr, w, b, COUNTS)
    yr.backward(dy)
    for name, g, r in (("y", y, yr), ("dx", dx, xr.grad), ("dw", dw, w.grad), ("db", db, b.grad)):
        assert _sqnr(r, g) >= 25, name
    assert torch.count_nonzero(dw[1]) == 0  # the expert without tokens
    # cumsum group lists, as a tensor, give the same result
    layer.zero_grad()
    y2 = _grouped_run(layer, x, dy, torch.tensor([31, 31, 76, 100]), "cumsum")
    assert _bits_equal(y, y2[0]) and _bits_equal(dw, y2[2])


def _policies():
    return list(itertools.product(["quantized", "deferred"], repeat=2))


@pytest.mark.parametrize("grouped", [False, True])
def test_deferred_is_quantized_bit_for_bit(grouped):
    x = torch.randn(100, 64) if grouped else torch.randn(2, 35, 96)
    dy = torch.randn(100, 48) if grouped else torch.randn(2, 35, 40)
    results = {}
    for ip, wp in _policies() + [("flag", "flag")]:
        torch.manual_seed(1)
        opts = dict(defer_backward_quant=True) if ip == "flag" else dict(
            input_policy=ip, weight_policy=wp)
        if grouped:
            layer = mxt.MxGroupedLinear(4, 64, 48, bias=True, **opts)
            results[ip, wp] = _grouped_run(layer, x, dy)
        else:
            layer = mxt.MxLinear(96, 40, **opts)
            results[ip, wp] = _dense_run(layer, x, dy)
        if ip == "flag":  # the seed's flag is both policies deferred
            assert layer.input_policy == layer.weight_policy == "deferred"
    base = results["quantized", "quantized"]
    for key, got in results.items():
        for g, b in zip(got, base):
            assert _bits_equal(g, b), key


def test_deferred_input_is_borrowed_not_copied():
    layer = mxt.MxLinear(128, 64, bias=False, defer_backward_quant=True)
    x = torch.randn(256, 128, requires_grad=True)
    mxtrain._C.release_cached_memory()
    before = mxtrain.memory()["total"]["live_bytes"]
    y = layer(x)
    # The forward keeps references to x and W (both torch's memory): nothing but y is live.
    assert mxtrain.memory()["total"]["live_bytes"] - before == y.numel() * 4
    y.sum().backward()
    assert x.grad is not None


def test_weight_cache_across_micro_batches_with_adamw():
    torch.manual_seed(2)
    cached = mxt.MxLinear(64, 32, reuse_quantized_weight=True)
    plain = mxt.MxLinear(64, 32)
    plain.load_state_dict(cached.state_dict())
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (cached, plain)]
    for o in opts:
        mxt.attach(o)
    batches = [torch.randn(40, 64) for _ in range(3)]
    mxtrain._C.weight_cache_clear()
    for _step in range(2):
        mxtrain._C.weight_cache_reset_stats()
        hits = 0
        for i, xb in enumerate(batches):  # gradient accumulation: three micro-batches
            for m in (cached, plain):
                m(xb).square().mean().backward()
            stats = mxt.weight_cache_stats()
            if i == 0:  # the step's first micro-batch quantizes (a miss, even after a step)
                assert stats["hits"] == 0 and stats["misses"] > 0, stats
                misses = stats["misses"]
            else:  # every later one is served from the cache
                assert stats["misses"] == misses and stats["hits"] > hits, stats
            hits = stats["hits"]
        assert _bits_equal(cached.weight.grad, plain.weight.grad)
        assert _bits_equal(cached.bias.grad, plain.bias.grad)
        for o in opts:
            o.step()
            o.zero_grad()
        assert mxt.weight_cache_stats()["entries"] == 0  # attach() cleared it
        assert _bits_equal(cached.weight, plain.weight)


def test_a_few_training_steps_reduce_the_loss():
    torch.manual_seed(3)
    model = torch.nn.Sequential(
        mxt.MxLinear(32, 64, defer_backward_quant=True, reuse_quantized_weight=True),
        torch.nn.GELU(), mxt.MxLinear(64, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    mxt.attach(opt)
    x = torch.randn(256, 32)
    target = torch.sin(x[:, :8] * 2)
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses


def test_convert_copies_weights_and_matches():
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Linear(96, 16, bias=False)))
    mx = mxt.convert(copy.deepcopy(model), input_policy="deferred")
    assert isinstance(mx[0], mxt.MxLinear) and isinstance(mx[2][0], mxt.MxLinear)
    assert mx[2][0].bias is None and mx[0].input_policy == "deferred"
    for a, b in zip(model.parameters(), mx.parameters()):
        assert torch.equal(a, b)
    x = torch.randn(64, 48)
    assert _sqnr(model(x), mx(x)) >= 25


def test_bf16_inputs_and_parameters():
    torch.manual_seed(5)
    ref = torch.nn.Linear(96, 40)
    layer = mxt.convert(copy.deepcopy(ref))
    x = torch.randn(70, 96)
    dy = torch.randn(70, 40)
    want = _dense_run(ref, x, dy)
    got = _dense_run(layer, x.bfloat16(), dy.bfloat16())  # bf16 input, fp32 parameters
    assert got[0].dtype == torch.bfloat16 and got[1].dtype == torch.bfloat16
    assert got[2].dtype == torch.float32
    for g, w in zip(got, want):
        assert _sqnr(w, g.float()) >= 25
    layer16 = copy.deepcopy(layer).to(torch.bfloat16)  # bf16 parameters too
    got16 = _dense_run(layer16, x.bfloat16(), dy.bfloat16())
    assert got16[2].dtype == torch.bfloat16
    for g, w in zip(got16, want):
        assert _sqnr(w, g.float()) >= 25


def test_no_grad_and_non_contiguous_inputs():
    layer = mxt.MxLinear(64, 32)
    x = torch.randn(64, 50)  # x.t() is a non-contiguous [50, 64] view
    with torch.no_grad():
        y = layer(x.t())
    assert not y.requires_grad
    assert _bits_equal(y, layer(x.t().contiguous()).detach())


def test_bad_inputs_raise():
    layer = mxt.MxLinear(64, 32, weight_policy="deferred")
    with pytest.raises(ValueError, match="64"):  # the library names both feature counts
        layer(torch.randn(8, 48))
    with pytest.raises(ValueError, match="torch.float32 or torch.bfloat16"):
        layer(torch.randn(8, 64, dtype=torch.float64))
    with pytest.raises(ValueError, match="rank >= 2"):
        layer(torch.randn(64))
    with pytest.raises(ValueError, match="recipe"):
        mxt.MxLinear(64, 32, recipe="e5m2")
    with pytest.raises(ValueError, match="rceil"):
        mxt.MxLinear(64, 32, scale="nearest")
    with pytest.raises(ValueError, match="input_policy"):
        mxt.MxLinear(64, 32, input_policy="lazy")
    experts = mxt.MxGroupedLinear(4, 64, 48)
    with pytest.raises(ValueError, match="group"):
        experts(torch.randn(100, 64), [31, 0, 45, 20], "counts")  # sums to 96, not 100
    with pytest.raises(ValueError, match="cumsum"):
        experts(torch.randn(100, 64), COUNTS, "sizes")
    # A deferred weight changed in place between forward and backward.
    y = layer(torch.randn(8, 64, requires_grad=True))
    with torch.no_grad():
        layer.weight.add_(1.0)
    with pytest.raises(ValueError, match="weight"):
        y.sum().backward()


@pytest.mark.parametrize("grouped", [False, True])
def test_auto_policy_is_bit_identical_and_references_the_weight(grouped):
    x = torch.randn(100, 64) if grouped else torch.randn(2, 35, 96)
    dy = torch.randn(100, 48) if grouped else torch.randn(2, 35, 40)
    results = {}
    for policy in ("quantized", "auto"):
        torch.manual_seed(1)
        if grouped:
            layer = mxt.MxGroupedLinear(4, 64, 48, bias=True, input_policy=policy,
                                        weight_policy=policy)
            results[policy] = _grouped_run(layer, x, dy)
        else:
            layer = mxt.MxLinear(96, 40, input_policy=policy, weight_policy=policy)
            results[policy] = _dense_run(layer, x, dy)
    for g, b in zip(results["auto"], results["quantized"]):
        assert _bits_equal(g, b)
    # What auto chose, seen through the C++ context of one forward: the parameter is
    # referenced (alive anyway); a torch input, whose other holders mxtrain cannot see, is
    # quantized.
    layer = mxt.MxLinear(96, 40, input_policy="auto", weight_policy="auto")
    bound = mxt._Bound(mxtrain._C.Linear, layer.weight, layer.bias, layer._make_recipe(), "t")
    _, ctx = bound.op.forward(mxt._borrow(torch.randn(70, 96), "input"))
    assert (ctx.input_policy, ctx.weight_policy) == ("quantized", "deferred")


@pytest.mark.parametrize("hp_gemms", [("wgrad",), ("fprop",), ("dgrad", "wgrad"), "dgrad"])
def test_hp_gemms_match_the_layer_of_their_precision(hp_gemms):
    x = torch.randn(2, 35, 96)
    dy = torch.randn(2, 35, 40)
    ref = torch.nn.Linear(96, 40)
    mx_layer = mxt.MxLinear(96, 40)
    layer = mxt.MxLinear(96, 40, hp_gemms=hp_gemms, hp_precision="fp32")
    for m in (mx_layer, layer):
        m.load_state_dict(ref.state_dict())
    mx = _dense_run(mx_layer, x, dy)
    got = _dense_run(layer, x, dy)
    fp32 = _dense_run(ref, x, dy)  # fp32 compute: torch's own fp32 layer, to rounding
    names = (hp_gemms,) if isinstance(hp_gemms, str) else hp_gemms
    for i, gemm in enumerate(("fprop", "dgrad", "wgrad")):
        if gemm in names:
            # High precision: within fp32 rounding of torch's fp32 layer, far from MXFP8.
            assert _sqnr(fp32[i], got[i]) > 100, gemm
        else:
            assert _bits_equal(got[i], mx[i]), gemm
    assert _bits_equal(got[3], mx[3])  # db: the column sums of dy either way
    assert "hp_gemms" in repr(layer)


def test_hp_gemms_contradictions_are_value_errors():
    with pytest.raises(ValueError, match="contradicts a high-precision wgrad"):
        mxt.MxLinear(8, 8, hp_gemms=("wgrad",), input_policy="deferred")
    with pytest.raises(ValueError, match="use precision bf16 or fp32"):
        mxt.MxLinear(8, 8, hp_gemms=("fprop", "dgrad", "wgrad"))
    with pytest.raises(ValueError, match="names 'wgrad' twice"):
        mxt.MxLinear(8, 8, hp_gemms=("wgrad", "wgrad"))
    with pytest.raises(ValueError, match="hp_gemms entry value 'bgrad'"):
        mxt.MxLinear(8, 8, hp_gemms=("bgrad",))
    with pytest.raises(TypeError, match="hp_gemms must be a tuple"):
        mxt.MxLinear(8, 8, hp_gemms=3)
    with pytest.raises(ValueError, match="hp_precision value 'fp8'"):
        mxt.MxLinear(8, 8, hp_gemms=("wgrad",), hp_precision="fp8")


def test_flush_denormal_changes_no_result():
    """torch.set_flush_denormal(True) sets FTZ and DAZ on the calling thread (and the
    threads it starts); mxtrain's results stay those of the default environment."""
    import numpy as np
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 96)) * 2.0**-135).astype(np.float32)  # fp32 subnormals
    x[32:] = (rng.standard_normal((32, 96)) * 2.0**-68).astype(np.float32)
    assert (np.abs(x[:32]) < np.finfo(np.float32).tiny).any()

    def run():
        q = mxtrain.quantize(x, axis="both")
        c = mxtrain.gemm(x[32:], x[32:])  # products near 2^-136: subnormal sums
        return q.rowwise.data.copy(), q.rowwise.scale.copy(), q.columnwise.data.copy(), c
    want = run()
    assert (want[3] != 0).any() and (np.abs(want[3]) < np.finfo(np.float32).tiny).any()
    if not torch.set_flush_denormal(True):
        pytest.fail("this CPU cannot flush denormals: the test cannot set its premise")
    try:
        got = run()
    finally:
        torch.set_flush_denormal(False)
    for w, g in zip(want, got):
        assert w.tobytes() == g.tobytes()
