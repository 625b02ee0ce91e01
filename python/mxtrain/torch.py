"""PyTorch modules over mxtrain's MXFP8 training ops.

    import mxtrain.torch as mxt
    layer = mxt.MxLinear(1024, 4096, recipe="e4m3", input_policy="deferred")
    experts = mxt.MxGroupedLinear(8, 1024, 2816)
    y = experts(x_sorted_by_expert, group_list, group_list_type="counts")
    opt = torch.optim.AdamW(model.parameters()); mxt.attach(opt)
    model = mxt.convert(model, defer_backward_quant=True)

Each module's forward and backward are one torch.autograd.Function that calls the C++ op
(mxtrain::Linear / GroupedLinear) on CPU tensors, fp32 or bf16. Inputs and parameters are
read in place (borrowed, not copied; a non-contiguous input is made contiguous first) and
results come back as tensors over the library's buffers. The C++ OpContext, what the
forward keeps for the backward, lives on the autograd context.

Options mirror the seed's (MindSpeed's MXFP8 matmul and grouped matmul):
  recipe                 "e4m3" (every operand E4M3) or "hybrid" (E5M2 gradients)
  scale                  E8M0 scale rule: "rceil" (default), "floor", "ceil", "even"
  input_policy,
  weight_policy          what the forward keeps for the backward: "quantized" (the
                         columnwise FP8 copy) or "deferred" (a reference to the
                         high-precision tensor, quantized in the backward)
  defer_backward_quant   the seed's --mxfp8-defer-backward-quant: both policies deferred
  reuse_quantized_weight the seed's --fp8-reuse-quantized-weight: each weight is quantized
                         at most once per layout per optimizer step (attach() clears the
                         cache at every step)
Outputs and gradients do not depend on the policies or on reuse, bit for bit.
"""

import math

import numpy as np
import torch
from torch import nn

from . import _C

__all__ = ["MxLinear", "MxGroupedLinear", "attach", "convert", "weight_cache_stats"]

_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16"}


def _borrow(t, what):
    """A C++ tensor over t's memory (t made contiguous if it is not), keeping t alive."""
    if t.device.type != "cpu":
        raise ValueError(f"{what} is on {t.device}; mxtrain runs on CPU tensors")
    if t.dtype not in _DTYPES:
        raise ValueError(f"{what} is {t.dtype}; mxtrain takes torch.float32 or torch.bfloat16")
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return _C.Tensor.borrow(t.data_ptr(), _DTYPES[t.dtype], list(t.shape), t)


def _to_torch(t):
    """A torch tensor over a C++ tensor's buffer (no copy; the buffer lives with it)."""
    if t is None:
        return None
    a = np.asarray(t)
    if t.dtype == "bf16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _recipe(recipe, scale, input_policy, weight_policy, defer_backward_quant,
            reuse_quantized_weight):
    if recipe not in ("e4m3", "hybrid"):
        raise ValueError(f"recipe '{recipe}' is not e4m3 or hybrid")
    if defer_backward_quant:
        input_policy = weight_policy = "deferred"
    return _C.Recipe("mxfp8", recipe, scale, input_policy, weight_policy,
                     bool(reuse_quantized_weight))


class _Bound:
    """The C++ parameters and op of a module, over its torch parameters' memory.

    Rebuilt when a parameter's memory changes (module.to(dtype), param.data = ...). The C++
    version follows torch's ._version, which every in-place update (an optimizer step,
    load_state_dict) bumps, so that the weight cache never serves a stale quantization and
    a deferred weight changed between forward and backward is refused.
    """

    def __init__(self, op_type, weight, bias, recipe):
        for name, p in (("weight", weight), ("bias", bias)):
            # A copy would not see the optimizer's in-place updates.
            if p is not None and not p.is_contiguous():
                raise ValueError(f"{name} must be contiguous (mxtrain reads it in place)")
        self.key = self.key_of(weight, bias)
        self.weight_t = weight
        self.bias_t = bias
        self.weight = _C.Parameter(_borrow(weight, "weight"), "weight")
        self.bias = None if bias is None else _C.Parameter(_borrow(bias, "bias"), "bias")
        self.op = op_type(self.weight, self.bias, recipe)

    @staticmethod
    def key_of(weight, bias):
        def one(p):
            return None if p is None else (p.data_ptr(), p.dtype, tuple(p.shape), p.device)
        return one(weight), one(bias)

    def sync_versions(self):
        self.weight.version = self.weight_t._version
        if self.bias is not None:
            self.bias.version = self.bias_t._version


class _MxFunction(torch.autograd.Function):
    """forward: y = op.forward(x); backward: (dx, dw, db) = op.backward(dy, op_ctx)."""

    @staticmethod
    def forward(ctx, x, weight, bias, bound, groups, need_dx, deferred_input):
        xt = _borrow(x, "input")
        if groups is None:
            y, op_ctx = bound.op.forward(xt, need_dx)
        else:
            y, op_ctx = bound.op.forward(xt, groups, need_dx)
        ctx.bound = bound
        ctx.op_ctx = op_ctx
        if deferred_input and op_ctx.defined:
            # The C++ context references x's memory; saving x as well (free: the same
            # tensor) lets autograd refuse a backward after x changed in place.
            ctx.save_for_backward(x)
        return _to_torch(y)

    @staticmethod
    def backward(ctx, dy):
        ctx.saved_tensors  # autograd's in-place check of a deferred input
        if not ctx.op_ctx.defined:
            raise RuntimeError("mxtrain: the forward kept nothing for a backward "
                               "(no gradient was wanted, or backward already ran)")
        bound = ctx.bound
        bound.sync_versions()
        dx, dw, db = bound.op.backward(_borrow(dy, "grad_output"), ctx.op_ctx)
        return _to_torch(dx), _to_torch(dw), _to_torch(db), None, None, None, None


def _check_options(input_policy, weight_policy):
    for name, v in (("input_policy", input_policy), ("weight_policy", weight_policy)):
        if v not in ("quantized", "deferred"):
            raise ValueError(f"{name} '{v}' is not quantized or deferred")


class _MxModule(nn.Module):
    def _init_options(self, recipe, scale, input_policy, weight_policy, defer_backward_quant,
                      reuse_quantized_weight):
        _check_options(input_policy, weight_policy)
        self.recipe = recipe
        self.scale = scale
        self.input_policy = "deferred" if defer_backward_quant else input_policy
        self.weight_policy = "deferred" if defer_backward_quant else weight_policy
        self.reuse_quantized_weight = bool(reuse_quantized_weight)
        self._recipe = self._make_recipe()  # validates the options now
        self._bound = None

    def _make_recipe(self):
        return _recipe(self.recipe, self.scale, self.input_policy, self.weight_policy, False,
                       self.reuse_quantized_weight)

    def __getstate__(self):
        # copy.deepcopy and pickling: the C++ objects are rebuilt on the next forward.
        state = self.__dict__.copy()
        state["_recipe"] = None
        state["_bound"] = None
        return state

    def _apply_op(self, x, groups):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"input must be a torch.Tensor, got {type(x).__name__}")
        if self._recipe is None:
            self._recipe = self._make_recipe()
        key = _Bound.key_of(self.weight, self.bias)
        if self._bound is None or self._bound.key != key:
            self._bound = _Bound(self._op_type, self.weight, self.bias, self._recipe)
        bound = self._bound
        grad = torch.is_grad_enabled()
        bound.sync_versions()
        bound.weight.requires_grad = grad and self.weight.requires_grad
        if bound.bias is not None:
            bound.bias.requires_grad = grad and self.bias.requires_grad
        need_dx = grad and x.requires_grad
        return _MxFunction.apply(x, self.weight, self.bias, bound, groups, need_dx,
                                 self.input_policy == "deferred")

    def extra_repr(self):
        return (f"recipe={self.recipe}, scale={self.scale}, input_policy={self.input_policy}, "
                f"weight_policy={self.weight_policy}, "
                f"reuse_quantized_weight={self.reuse_quantized_weight}")


class MxLinear(_MxModule):
    """nn.Linear with MXFP8 GEMMs: y = x . W^T + b for x [..., in_features] (CPU, fp32 or
    bf16; y has x's dtype). weight [out_features, in_features] and bias are torch
    Parameters (fp32 by default; .to(torch.bfloat16) works), initialized as nn.Linear's."""

    _op_type = _C.Linear

    def __init__(self, in_features, out_features, bias=True, *, recipe="e4m3", scale="rceil",
                 input_policy="quantized", weight_policy="quantized",
                 defer_backward_quant=False, reuse_quantized_weight=False):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self._init_options(recipe, scale, input_policy, weight_policy, defer_backward_quant,
                           reuse_quantized_weight)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return self._apply_op(x, None)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, " + super().extra_repr())


class MxGroupedLinear(_MxModule):
    """Mixture-of-experts linear: tokens sorted by expert, expert e computes
    Y_e = X_e . W[e]^T + b[e]. weight [num_experts, out_features, in_features], bias
    [num_experts, out_features]. Called as layer(x, group_list, group_list_type) with x
    [M, in_features] and group_list the E cumulative group ends ("cumsum") or sizes
    ("counts"), a sequence or an integer tensor."""

    _op_type = _C.GroupedLinear

    def __init__(self, num_experts, in_features, out_features, bias=False, *, recipe="e4m3",
                 scale="rceil", input_policy="quantized", weight_policy="quantized",
                 defer_backward_quant=False, reuse_quantized_weight=False):
        super().__init__()
        self.num_experts = num_experts
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(num_experts, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(num_experts, out_features)) if bias else None
        self._init_options(recipe, scale, input_policy, weight_policy, defer_backward_quant,
                           reuse_quantized_weight)
        self.reset_parameters()

    def reset_parameters(self):
        for e in range(self.num_experts):
            nn.init.kaiming_uniform_(self.weight[e], a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x, group_list, group_list_type="cumsum"):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"input must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 2:
            raise ValueError(f"input must be 2-D [tokens, features], got {list(x.shape)}")
        if isinstance(group_list, torch.Tensor):
            values = [int(v) for v in group_list.reshape(-1).tolist()]
        else:
            values = [int(v) for v in group_list]
        groups = _C.GroupList(values, group_list_type, int(x.shape[0]))
        return self._apply_op(x, groups)

    def extra_repr(self):
        return (f"num_experts={self.num_experts}, in_features={self.in_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}, "
                + super().extra_repr())


class _StepHook:
    """What attach() returns: remove() detaches the hook."""

    def __init__(self, remove):
        self._remove = remove

    def remove(self):
        self._remove()


def attach(optimizer):
    """Clears the weight-quant cache after every optimizer.step() (the quantized weights of
    one step are never read after it). Returns a handle whose remove() undoes it."""

    def clear(*_):
        _C.weight_cache_clear()

    if hasattr(optimizer, "register_step_post_hook"):  # torch >= 2.0
        handle = optimizer.register_step_post_hook(clear)
        return _StepHook(handle.remove)
    step = optimizer.step  # torch 1.x: wrap the bound method

    def wrapped(*args, **kwargs):
        result = step(*args, **kwargs)
        clear()
        return result

    optimizer.step = wrapped

    def remove():
        if optimizer.step is wrapped:
            del optimizer.step
    return _StepHook(remove)


def _from_linear(linear, options):
    mx = MxLinear(linear.in_features, linear.out_features, linear.bias is not None, **options)
    mx = mx.to(dtype=linear.weight.dtype)
    with torch.no_grad():
        mx.weight.copy_(linear.weight)
        if linear.bias is not None:
            mx.bias.copy_(linear.bias)
    mx.weight.requires_grad_(linear.weight.requires_grad)
    if linear.bias is not None:
        mx.bias.requires_grad_(linear.bias.requires_grad)
    mx.train(linear.training)
    return mx


def convert(model, **options):
    """Replaces every nn.Linear of model (in place, recursively) by an MxLinear with the
    same features, bias, dtype and values; options are MxLinear's keyword options.
    Returns model (a new MxLinear if model itself is an nn.Linear)."""
    if isinstance(model, nn.Linear):
        return _from_linear(model, options)
    for name, child in model.named_children():
        if isinstance(child, nn.Linear):
            setattr(model, name, _from_linear(child, options))
        else:
            convert(child, **options)
    return model


def weight_cache_stats():
    """Hits, misses, entries and bytes_held of the weight-quant cache."""
    return _C.weight_cache_stats()
