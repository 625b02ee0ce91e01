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

Options mirror MindSpeed's MXFP8 matmul and grouped matmul:
  recipe                 "e4m3" (every operand E4M3) or "hybrid" (E5M2 gradients)
  scale                  E8M0 scale rule: "rceil" (default), "floor", "ceil", "even"
  input_policy,
  weight_policy          what the forward keeps for the backward: "quantized" (the
                         columnwise FP8 copy; the default) or "deferred" (a reference to
                         the high-precision tensor, quantized in the backward)
  defer_backward_quant   MindSpeed's --mxfp8-defer-backward-quant: both policies deferred
  reuse_quantized_weight MindSpeed's --fp8-reuse-quantized-weight: each weight is quantized
                         at most once per layout per optimizer step (attach() clears the
                         cache at every step)
Outputs and gradients do not depend on the policies or on reuse, bit for bit.
defer_backward_quant=True with an explicit "quantized" policy is a ValueError; the flags
(bias, defer_backward_quant, reuse_quantized_weight) must be bools (TypeError otherwise).

The weight cache (reuse_quantized_weight=True) is keyed by what identifies a weight now:
the parameter object the module holds, its storage, and torch's version counter, which
every in-place write through the parameter bumps (optimizer steps, load_state_dict,
`with torch.no_grad(): p.copy_(...)`). Only training forwards with gradients enabled use
the cache; forwards under torch.no_grad() or in eval mode quantize afresh and leave it
alone. A cache entry dies with its parameter, or when the module binds another one
(re-wrapped parameters, torch.nn.utils.parametrize), so the cache holds at most one
version per live parameter and layout.

The contract: writes through `p.data` (`p.data.copy_(...)`, `p.data.mul_(...)`, as EMA
helpers do) bypass torch's version counter, so mxtrain cannot see them. After such a write,
call mxtrain.torch.invalidate(module_or_parameter) before the next forward (or write
through the parameter under torch.no_grad() instead).

Forward and backward are once differentiable: a double backward (create_graph=True, then
differentiating the gradients, as gradient penalties do) raises autograd's error instead of
returning a wrong second derivative. Several threads may share one module: what a call
needs (grad mode, which gradients) travels with the call.
"""

import math

import numpy as np
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from . import _C

__all__ = ["MxLinear", "MxGroupedLinear", "attach", "convert", "invalidate",
           "weight_cache_stats"]

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


def _recipe(recipe, scale, input_policy, weight_policy, reuse_quantized_weight):
    if recipe not in ("e4m3", "hybrid"):
        raise ValueError(f"recipe '{recipe}' is not e4m3 or hybrid")
    return _C.Recipe("mxfp8", recipe, scale, input_policy, weight_policy,
                     reuse_quantized_weight)


def _epoch(p):
    """How many times invalidate() was called on p (writes its version counter missed)."""
    return getattr(p, "_mxtrain_epoch", 0)


class _Bound:
    """The C++ parameters and op of a module, over its torch parameters' memory.

    Bound to the parameter objects themselves: rebuilt when the module holds another object
    (a re-wrapped nn.Parameter, a parametrized weight computed anew), when an object's
    memory changes (module.to(dtype), param.data = ...) or after invalidate(). The C++
    version follows the bound object's torch ._version, which every in-place update through
    it (an optimizer step, load_state_dict) bumps, so that the weight cache never serves a
    stale quantization and a deferred weight changed between forward and backward is
    refused. The C++ parameters die with the bound (and the contexts of pending backwards),
    and the cache drops their entries then.
    """

    def __init__(self, op_type, weight, bias, recipe, name):
        for what, p in (("weight", weight), ("bias", bias)):
            # A copy would not see the optimizer's in-place updates.
            if p is not None and not p.is_contiguous():
                raise ValueError(f"{what} must be contiguous (mxtrain reads it in place)")
        self.weight_t = weight
        self.bias_t = bias
        self.key = self.key_of(weight, bias)
        self.weight = _C.Parameter(_borrow(weight, "weight"), f"{name}.weight")
        self.bias = None if bias is None else _C.Parameter(_borrow(bias, "bias"), f"{name}.bias")
        self.op = op_type(self.weight, self.bias, recipe)

    @staticmethod
    def key_of(weight, bias):
        def one(p):
            if p is None:
                return None
            return (p.data_ptr(), p.dtype, tuple(p.shape), tuple(p.stride()), p.device,
                    _epoch(p))
        return one(weight), one(bias)

    def matches(self, weight, bias):
        """Whether this binding is over these very objects, memory and epochs."""
        return (self.weight_t is weight and self.bias_t is bias
                and self.key == self.key_of(weight, bias))

    def sync_versions(self):
        # The versions belong to the tensors, not to a call: every thread writes the same.
        self.weight.version = self.weight_t._version
        if self.bias is not None:
            self.bias.version = self.bias_t._version

    def forget(self):
        _C.weight_cache_forget(self.weight)
        if self.bias is not None:
            _C.weight_cache_forget(self.bias)


_ONCE = ("mxtrain layers are once differentiable: trying to differentiate twice through an "
         "MxLinear / MxGroupedLinear (create_graph=True, then a backward through the "
         "gradients) is not supported")


class _MxFunction(torch.autograd.Function):
    """forward: y = op.forward(x); backward: (dx, dw, db) = op.backward(dy, op_ctx)."""

    @staticmethod
    def forward(ctx, x, weight, bias, bound, groups, call, deferred_input):
        xt = _borrow(x, "input")
        if groups is None:
            y, op_ctx = bound.op.forward(xt, **call)
        else:
            y, op_ctx = bound.op.forward(xt, groups, **call)
        ctx.bound = bound
        ctx.op_ctx = op_ctx
        if deferred_input and op_ctx.defined:
            # The C++ context references x's memory; saving x as well (free: the same
            # tensor) lets autograd refuse a backward after x changed in place.
            ctx.save_for_backward(x)
        return _to_torch(y)

    @staticmethod
    def backward(ctx, dy):
        # dX = dY . W and dW = dY^T . X: a second derivative through them is not zero even
        # when dy does not need a gradient, so once_differentiable must see one whenever an
        # input needs a gradient and the graph is being recorded (create_graph=True).
        if torch.is_grad_enabled() and not dy.requires_grad and any(ctx.needs_input_grad):
            dy = dy.detach().requires_grad_()
        return _MxFunction._backward_once(ctx, dy)

    @staticmethod
    @once_differentiable
    def _backward_once(ctx, dy):
        ctx.saved_tensors  # autograd's in-place check of a deferred input
        if ctx.op_ctx.spent:
            raise RuntimeError(
                "mxtrain: trying to backward through the graph a second time: the first "
                "backward freed what the MX layer's forward saved (mxtrain frees it even with "
                "retain_graph=True); run the forward again for another backward")
        if not ctx.op_ctx.defined:
            raise RuntimeError("mxtrain: the forward kept nothing for a backward "
                               "(no gradient was wanted)")
        bound = ctx.bound
        bound.sync_versions()
        dx, dw, db = bound.op.backward(_borrow(dy, "grad_output"), ctx.op_ctx)
        return _to_torch(dx), _to_torch(dw), _to_torch(db), None, None, None, None


def _check_flag(name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def _resolve_policies(input_policy, weight_policy, defer_backward_quant):
    """The two policies; None means "quantized", or "deferred" under defer_backward_quant."""
    defer = _check_flag("defer_backward_quant", defer_backward_quant)
    out = []
    for name, v in (("input_policy", input_policy), ("weight_policy", weight_policy)):
        if v is not None and v not in ("quantized", "deferred"):
            raise ValueError(f"{name} '{v}' is not quantized or deferred")
        if defer and v == "quantized":
            raise ValueError(f"defer_backward_quant=True defers both policies, but {name} is "
                             f"'quantized'; give one or the other")
        out.append("deferred" if defer else (v or "quantized"))
    return out


class _MxModule(nn.Module):
    def _init_options(self, recipe, scale, input_policy, weight_policy, defer_backward_quant,
                      reuse_quantized_weight):
        self.input_policy, self.weight_policy = _resolve_policies(
            input_policy, weight_policy, defer_backward_quant)
        self.recipe = recipe
        self.scale = scale
        self.reuse_quantized_weight = _check_flag("reuse_quantized_weight",
                                                  reuse_quantized_weight)
        self._recipe = self._make_recipe()  # validates the options now
        self._bound = None

    def _make_recipe(self):
        return _recipe(self.recipe, self.scale, self.input_policy, self.weight_policy,
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
        weight, bias = self.weight, self.bias  # read once: parametrized ones are made anew
        bound = self._bound  # read once: another thread may rebind meanwhile
        if bound is None or not bound.matches(weight, bias):
            if bound is not None:
                bound.forget()  # its entries can never hit again
            bound = _Bound(self._op_type, weight, bias, self._recipe, type(self).__name__)
            self._bound = bound
        bound.sync_versions()
        # Everything this call needs travels with it (never written into the shared bound):
        # which gradients, and whether the cache may serve it. Only a training forward that
        # records gradients uses the cache: an evaluation may run on swapped-in weights
        # (EMA) that a later training forward must not be served.
        grad = torch.is_grad_enabled()
        call = dict(input_requires_grad=grad and x.requires_grad,
                    weight_requires_grad=grad and weight.requires_grad,
                    bias_requires_grad=bias is not None and grad and bias.requires_grad,
                    use_weight_cache=grad and self.training)
        return _MxFunction.apply(x, weight, bias, bound, groups, call,
                                 self.input_policy == "deferred")

    def extra_repr(self):
        return (f"recipe={self.recipe}, scale={self.scale}, input_policy={self.input_policy}, "
                f"weight_policy={self.weight_policy}, "
                f"reuse_quantized_weight={self.reuse_quantized_weight}")


class MxLinear(_MxModule):
    """nn.Linear with MXFP8 GEMMs: y = x . W^T + b for x [..., in_features] (CPU, fp32 or
    bf16; y has x's dtype). weight [out_features, in_features] and bias are torch
    Parameters (fp32 by default; .to(torch.bfloat16) works), initialized as nn.Linear's.
    With reuse_quantized_weight=True, a write through weight.data (an EMA swap) must be
    followed by mxtrain.torch.invalidate(layer): torch's version counter does not see it
    (module docstring)."""

    _op_type = _C.Linear

    def __init__(self, in_features, out_features, bias=True, *, recipe="e4m3", scale="rceil",
                 input_policy=None, weight_policy=None, defer_backward_quant=False,
                 reuse_quantized_weight=False):
        super().__init__()
        bias = _check_flag("bias", bias)
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
    ("counts"), a sequence or an integer tensor. The weight cache's contract is
    MxLinear's: after a write through .data, call mxtrain.torch.invalidate(layer)."""

    _op_type = _C.GroupedLinear

    def __init__(self, num_experts, in_features, out_features, bias=False, *, recipe="e4m3",
                 scale="rceil", input_policy=None, weight_policy=None,
                 defer_backward_quant=False, reuse_quantized_weight=False):
        super().__init__()
        bias = _check_flag("bias", bias)
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


def invalidate(module_or_parameter):
    """Tells mxtrain that parameters changed in a way torch's version counter missed
    (writes through .data, as EMA helpers do): the next forward of every MX module that
    reads them quantizes them afresh. Takes a module (all its parameters, recursively, and
    its MX modules' bindings) or one parameter / tensor. Returns None."""
    if isinstance(module_or_parameter, nn.Module):
        for p in module_or_parameter.parameters():
            p._mxtrain_epoch = _epoch(p) + 1
        for m in module_or_parameter.modules():
            if isinstance(m, _MxModule) and m._bound is not None:
                m._bound.forget()
                m._bound = None
    elif isinstance(module_or_parameter, torch.Tensor):
        module_or_parameter._mxtrain_epoch = _epoch(module_or_parameter) + 1
    else:
        raise TypeError("invalidate takes an nn.Module or a parameter (torch.Tensor), got "
                        f"{type(module_or_parameter).__name__}")


def weight_cache_stats():
    """Hits, misses, entries and bytes_held of the weight-quant cache."""
    return _C.weight_cache_stats()
