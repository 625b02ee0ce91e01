"""mxtrain.torch in the hands of training loops: the weight cache is never stale (EMA swaps,
re-wrapped parameters, load_state_dict, no_grad copies, writes through .data with
invalidate()), stays bounded (parametrized weights), per-call state never leaks between
threads, double backward is refused and a second backward says the graph was freed, and
the options are checked. Every result is compared bit for bit with a twin layer that does
not use the cache, on seeded data."""

import sys
import threading

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import mxtrain  # noqa: E402
import mxtrain.torch as mxt  # noqa: E402


def _bits_equal(a, b):
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def _twins(seed, **options):
    """A layer that reuses quantized weights and an identical one that does not."""
    torch.manual_seed(seed)
    cached = mxt.MxLinear(64, 48, reuse_quantized_weight=True, **options)
    plain = mxt.MxLinear(64, 48, **options)
    plain.load_state_dict(cached.state_dict())
    return cached, plain


def _train_step(layers, opts, x):
    for layer, opt in zip(layers, opts):
        opt.zero_grad()
        layer(x).square().mean().backward()
        opt.step()


@pytest.fixture(autouse=True)
def _empty_cache():
    mxtrain._C.weight_cache_clear()
    yield
    mxtrain._C.weight_cache_clear()


@pytest.mark.parametrize("with_attach", [True, False])
@pytest.mark.parametrize("eval_mode", ["no_grad", "eval"])
def test_ema_swap_in_and_restore_never_serves_a_stale_weight(with_attach, eval_mode):
    # torch_ema / diffusers / LitEMA: store, p.data.copy_(ema), evaluate, p.data.copy_ back.
    cached, plain = _twins(10, weight_policy="deferred")
    layers = (cached, plain)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in layers]
    if with_attach:
        for o in opts:
            mxt.attach(o)
    torch.manual_seed(11)
    ema = [p.detach().clone() + 0.5 * torch.randn_like(p) for p in cached.parameters()]
    x = torch.randn(40, 64)
    for step in range(3):
        _train_step(layers, opts, x)
        outs = []
        for layer in layers:
            stored = [p.detach().clone() for p in layer.parameters()]
            for p, e in zip(layer.parameters(), ema):
                p.data.copy_(e)
            if eval_mode == "no_grad":
                with torch.no_grad():
                    outs.append(layer(x))
            else:
                layer.eval()
                outs.append(layer(x).detach())
                layer.train()
            for p, s in zip(layer.parameters(), stored):
                p.data.copy_(s)
        assert _bits_equal(outs[0], outs[1]), f"EMA evaluation, step {step}"
        # The next training forward sees the restored weights, not the EMA ones.
        ys = [layer(x) for layer in layers]
        assert _bits_equal(ys[0], ys[1]), f"training forward after restore, step {step}"
        for y in ys:
            y.sum().backward()
        assert _bits_equal(cached.weight.grad, plain.weight.grad), f"step {step}"


def test_rewrapped_parameter_is_seen_at_every_step():
    cached, plain = _twins(12)
    x = torch.randn(40, 64)
    for layer in (cached, plain):
        layer(x)  # binds (and fills the cache) before the re-wrap
        layer.weight = nn.Parameter(layer.weight.data)
    layers = (cached, plain)
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in layers]
    previous = None
    for step in range(3):
        ys = [layer(x) for layer in layers]
        assert _bits_equal(ys[0], ys[1]), f"step {step}"
        assert previous is None or not _bits_equal(ys[0], previous), f"step {step}"
        previous = ys[0].detach()
        _train_step(layers, opts, x)


def test_load_state_dict_and_no_grad_copy_are_seen():
    cached, plain = _twins(13)
    torch.manual_seed(14)
    other = mxt.MxLinear(64, 48)
    x = torch.randn(40, 64)
    for layer in (cached, plain):
        layer(x)  # fills the cache
        layer.load_state_dict(other.state_dict())
    assert _bits_equal(cached(x), plain(x))
    w = torch.randn(48, 64)
    for layer in (cached, plain):
        with torch.no_grad():
            layer.weight.copy_(w)
    assert _bits_equal(cached(x), plain(x))


@pytest.mark.parametrize("target", ["module", "parameter"])
def test_writes_through_data_are_seen_after_invalidate(target):
    cached, plain = _twins(15)
    x = torch.randn(40, 64)
    for layer in (cached, plain):
        layer(x)  # fills the cache
        layer.weight.data.mul_(2)  # bypasses torch's version counter: the documented contract
        mxt.invalidate(layer if target == "module" else layer.weight)
    assert _bits_equal(cached(x), plain(x))
    with pytest.raises(TypeError, match="invalidate"):
        mxt.invalidate("weight")


def _gradients(layer, x):
    x = x.clone().requires_grad_(True)
    layer(x).square().sum().backward()
    grads = (x.grad, layer.weight.grad, layer.bias.grad)
    layer.zero_grad(set_to_none=True)
    return grads


def test_a_no_grad_thread_never_takes_a_training_threads_gradients(monkeypatch):
    # Forced interleaving: an evaluation thread runs a whole no_grad forward of the shared
    # layer just before the training thread's C++ forward starts (the input's borrow).
    torch.manual_seed(16)
    layer = mxt.MxLinear(64, 48)
    x = torch.randn(40, 64)
    want = _gradients(layer, x)
    want_y = layer(x).detach()
    borrow = mxt._borrow
    main = threading.current_thread()
    armed = [True]
    eval_out = []

    def evaluate():
        with torch.no_grad():
            eval_out.append(layer(x))

    def interleaving_borrow(t, what):
        if what == "input" and armed[0] and threading.current_thread() is main:
            armed[0] = False
            t2 = threading.Thread(target=evaluate)
            t2.start()
            t2.join()
        return borrow(t, what)

    monkeypatch.setattr(mxt, "_borrow", interleaving_borrow)
    got = _gradients(layer, x)
    assert not armed[0]  # the evaluation ran inside the training call
    for g, w, name in zip(got, want, ("x", "weight", "bias")):
        assert g is not None, f"{name}.grad was dropped"
        assert _bits_equal(g, w), name
    assert _bits_equal(eval_out[0], want_y)


def test_training_and_evaluating_threads_share_a_layer_free_running():
    torch.manual_seed(17)
    layer = mxt.MxLinear(64, 48, reuse_quantized_weight=True)
    x = torch.randn(8, 64)
    want = _gradients(layer, x)
    with torch.no_grad():
        want_y = layer(x)
    stop = threading.Event()
    bad = []

    def evaluate():
        while not stop.is_set():
            with torch.no_grad():
                y = layer(x)
            if not _bits_equal(y, want_y):
                bad.append("evaluation output")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    t = threading.Thread(target=evaluate)
    t.start()
    try:
        for i in range(400):
            got = _gradients(layer, x)
            for g, w, name in zip(got, want, ("x", "weight", "bias")):
                if g is None or not _bits_equal(g, w):
                    bad.append(f"{name}.grad at step {i}")
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(interval)
    assert not bad, bad[:5]


@pytest.mark.parametrize("then", ["square", "sum"])
def test_double_backward_is_refused(then):
    # A gradient penalty (WGAN-GP, R1): differentiate the input gradient again.
    torch.manual_seed(18)
    layer = mxt.MxLinear(64, 48)
    x = torch.randn(16, 64, requires_grad=True)
    y = layer(x)
    out = y.square().sum() if then == "square" else y.sum()  # dy depends on W, or not
    (gx,) = torch.autograd.grad(out, x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        gx.square().sum().backward()


@pytest.mark.parametrize("policy", ["quantized", "deferred"])
def test_second_backward_says_the_graph_was_freed(policy):
    layer = mxt.MxLinear(64, 48, input_policy=policy, weight_policy=policy)
    x = torch.randn(16, 64, requires_grad=True)
    y = layer(x).sum()
    y.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


@pytest.mark.parametrize("kind", ["parametrize", "weight_norm"])
def test_cache_stays_bounded_with_a_parametrized_weight(kind):
    torch.manual_seed(19)
    cached = mxt.MxLinear(64, 48, reuse_quantized_weight=True)
    plain = mxt.MxLinear(64, 48)
    plain.load_state_dict(cached.state_dict())

    class Scaled(nn.Module):
        def forward(self, w):
            return w * 0.75

    for layer in (cached, plain):
        if kind == "parametrize":
            torch.nn.utils.parametrize.register_parametrization(layer, "weight", Scaled())
        else:
            torch.nn.utils.weight_norm(layer)
    layers = (cached, plain)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in layers]  # no attach()
    x = torch.randn(40, 64)
    entries = []
    for step in range(25):
        ys = [layer(x) for layer in layers]
        assert _bits_equal(ys[0], ys[1]), f"step {step}"
        for y, opt in zip(ys, opts):
            opt.zero_grad()
            y.square().mean().backward()
            opt.step()
        entries.append(mxt.weight_cache_stats()["entries"])
    # One live weight, at most its two layouts, however many steps ran.
    assert max(entries) <= 2, entries


def test_option_checks():
    for name in ("input_policy", "weight_policy"):
        with pytest.raises(ValueError, match=f"defer_backward_quant.*{name}"):
            mxt.MxLinear(64, 48, defer_backward_quant=True, **{name: "quantized"})
        with pytest.raises(ValueError, match=name):
            mxt.MxGroupedLinear(4, 64, 48, defer_backward_quant=True, **{name: "quantized"})
        # Saying "deferred" twice is no conflict.
        layer = mxt.MxLinear(64, 48, defer_backward_quant=True, **{name: "deferred"})
        assert layer.input_policy == layer.weight_policy == "deferred"
    for flag in ("defer_backward_quant", "reuse_quantized_weight", "bias"):
        for bad in (1, "yes", None):
            with pytest.raises(TypeError, match=flag):
                mxt.MxLinear(64, 48, **{flag: bad})
    with pytest.raises(TypeError, match="reuse_quantized_weight"):
        mxt.convert(nn.Linear(8, 8), reuse_quantized_weight="true")


def test_cache_drops_the_entries_of_a_collected_or_rebound_layer():
    import gc
    torch.manual_seed(20)
    layer = mxt.MxLinear(64, 48, reuse_quantized_weight=True)
    x = torch.randn(40, 64, requires_grad=True)  # dx wanted: both weight layouts are made
    layer(x).sum().backward()
    assert mxt.weight_cache_stats()["entries"] == 2  # rowwise and columnwise
    layer.weight = nn.Parameter(layer.weight.detach().clone())  # rebound: a new weight
    layer(x).sum().backward()
    assert mxt.weight_cache_stats()["entries"] == 2  # only the bound one's layouts
    del layer
    gc.collect()
    assert mxt.weight_cache_stats()["entries"] == 0
