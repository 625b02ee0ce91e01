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
defer_backward_quant=True with an explicit "quantized" policy is a ValueError. An argument
of the wrong type is a TypeError (the flags bias, defer_backward_quant and
reuse_quantized_weight take bools only, the counts ints), one of the wrong value a
ValueError, each naming the argument; mxtrain._validate holds the checks.

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

Expert parallelism over torch.distributed (MXFP8 token dispatch and combine, an expert
linear sharded over ranks) is in mxtrain.distributed, re-exported here: dispatch_mxfp8,
combine_mxfp8_bwd, ExpertParallelGroupedLinear, exchange_splits, pack_mxfp8_rows,
unpack_mxfp8_rows, packed_row_bytes.

Forward and backward are once differentiable: a double backward (create_graph=True, then
differentiating the gradients, as gradient penalties do) raises autograd's error instead of
returning a wrong second derivative. Several threads may share one module: what a call
needs (grad mode, which gradients) travels with the call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from . import _C, GroupListLike
from . import _validate as _check

# Re-exported (mxtrain.distributed imports this module only when a layer is built).
from .distributed import (
    ExpertParallelGroupedLinear,
    combine_mxfp8_bwd,
    dispatch_mxfp8,
    exchange_splits,
    pack_mxfp8_rows,
    packed_row_bytes,
    unpack_mxfp8_rows,
)

__all__ = ["MxLinear", "MxGroupedLinear", "StepHookHandle", "attach", "convert",
           "invalidate", "weight_cache_stats",
           # expert parallelism over torch.distributed (mxtrain.distributed)
           "dispatch_mxfp8", "combine_mxfp8_bwd", "ExpertParallelGroupedLinear",
           "exchange_splits", "pack_mxfp8_rows", "unpack_mxfp8_rows", "packed_row_bytes"]

_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16"}

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def _borrow(t: torch.Tensor, what: str) -> _C.Tensor:
    """A C++ tensor over t's memory (t made contiguous if it is not), keeping t alive."""
    if t.device.type != "cpu":
        raise ValueError(f"{what} is on {t.device}; mxtrain runs on CPU tensors")
    if t.dtype not in _DTYPES:
        raise ValueError(f"{what} is {t.dtype}; mxtrain takes torch.float32 or torch.bfloat16")
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return _C.Tensor.borrow(t.data_ptr(), _DTYPES[t.dtype], list(t.shape), t)


def _to_torch(t: _C.Tensor) -> torch.Tensor:
    """A torch tensor over a C++ tensor's buffer (no copy; the buffer lives with it)."""
    a = np.asarray(t)
    if t.dtype == "bf16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


class _Options:
    """A layer's options, checked (each by mxtrain._validate) and resolved once."""

    def __init__(self, recipe: str = "e4m3", scale: str = "rceil",
                 input_policy: str | None = None, weight_policy: str | None = None,
                 defer_backward_quant: bool = False,
                 reuse_quantized_weight: bool = False,
                 hp_gemms: tuple[str, ...] | list[str] | str = (),
                 hp_precision: str = "bf16") -> None:
        self.recipe = _check.recipe(recipe)
        self.hp_gemms = _check.gemms(hp_gemms)
        self.hp_precision = _check.hp_precision(hp_precision)
        self.scale = _check.scale_rule(scale)
        defer = _check.flag("defer_backward_quant", defer_backward_quant)
        policies = []
        # A role an HP GEMM reads is saved in high precision and takes no policy (the
        # library refuses one), so its default is left unset.
        for name, v, reader in (("input_policy", input_policy, "wgrad"),
                                ("weight_policy", weight_policy, "dgrad")):
            v = _check.policy(name, v)
            if defer and v == "quantized":
                raise ValueError(f"defer_backward_quant=True defers both policies, but {name} "
                                 f"is 'quantized'; give one or the other")
            default = None if reader in self.hp_gemms else "quantized"
            policies.append("deferred" if defer else (v or default))
        self.input_policy, self.weight_policy = policies
        self.reuse_quantized_weight = _check.flag("reuse_quantized_weight",
                                                  reuse_quantized_weight)
        # The library checks the combination now, not at the first forward: a contradiction
        # is its Error, a ValueError in Python. The layer keeps the recipe it made.
        self.cxx_recipe = _recipe(self)


_OPTION_NAMES = ("recipe", "scale", "input_policy", "weight_policy", "defer_backward_quant",
                 "reuse_quantized_weight", "hp_gemms", "hp_precision")


def _recipe(o: Any) -> _C.Recipe:
    """The C++ recipe of checked options (an _Options or a layer holding them)."""
    return _C.Recipe("mxfp8", o.recipe, o.scale, o.input_policy, o.weight_policy,
                     o.reuse_quantized_weight, ",".join(o.hp_gemms) or None,
                     o.hp_precision if o.hp_gemms else None)


def _epoch(p: torch.Tensor) -> int:
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

    def __init__(self, op_type: type, weight: torch.Tensor, bias: torch.Tensor | None,
                 recipe: _C.Recipe, name: str) -> None:
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
    def key_of(weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[Any, Any]:
        def one(p: torch.Tensor | None) -> tuple[Any, ...] | None:
            if p is None:
                return None
            return (p.data_ptr(), p.dtype, tuple(p.shape), tuple(p.stride()), p.device,
                    _epoch(p))
        return one(weight), one(bias)

    def matches(self, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
        """Whether this binding is over these very objects, memory and epochs."""
        return (self.weight_t is weight and self.bias_t is bias
                and self.key == self.key_of(weight, bias))

    def sync_versions(self) -> None:
        # The versions belong to the tensors, not to a call: every thread writes the same.
        self.weight.version = self.weight_t._version
        if self.bias is not None and self.bias_t is not None:
            self.bias.version = self.bias_t._version

    def forget(self) -> None:
        _C.weight_cache_forget(self.weight)
        if self.bias is not None:
            _C.weight_cache_forget(self.bias)


_ONCE = ("mxtrain layers are once differentiable: trying to differentiate twice through an "
         "MxLinear / MxGroupedLinear (create_graph=True, then a backward through the "
         "gradients) is not supported")


class _MxFunction(torch.autograd.Function):
    """forward: y = op.forward(x); backward: (dx, dw, db) = op.backward(dy, op_ctx)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                bound: _Bound, groups: _C.GroupList | None,
                call: dict[str, bool]) -> torch.Tensor:
        xt = _borrow(x, "input")
        if groups is None:
            y, op_ctx = bound.op.forward(xt, **call)
        else:
            y, op_ctx = bound.op.forward(xt, groups, **call)
        ctx.bound = bound
        ctx.op_ctx = op_ctx
        if op_ctx.defined and op_ctx.input_policy == "deferred":
            # The C++ context references x's memory (a deferred policy, or auto's choice);
            # saving x as well (free: the same tensor) lets autograd refuse a backward
            # after x changed in place.
            ctx.save_for_backward(x)
        return _to_torch(y)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        # dX = dY . W and dW = dY^T . X: a second derivative through them is not zero even
        # when dy does not need a gradient, so once_differentiable must see one whenever an
        # input needs a gradient and the graph is being recorded (create_graph=True).
        if torch.is_grad_enabled() and not dy.requires_grad and any(ctx.needs_input_grad):
            dy = dy.detach().requires_grad_()
        return _MxFunction._backward_once(ctx, dy)

    @staticmethod
    @once_differentiable
    def _backward_once(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        _ = ctx.saved_tensors  # reading them is autograd's in-place check of a deferred input
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
        grads = tuple(None if g is None else _to_torch(g) for g in (dx, dw, db))
        return (*grads, None, None, None)


class _MxModule(nn.Module):
    _op_type: type

    weight: torch.Tensor  # an nn.Parameter, or what a parametrization makes
    bias: torch.Tensor | None

    recipe: str
    scale: str
    input_policy: str | None
    weight_policy: str | None
    reuse_quantized_weight: bool
    hp_gemms: tuple[str, ...]
    hp_precision: str

    def _init_options(self, options: _Options) -> None:
        self.recipe = options.recipe
        self.scale = options.scale
        self.input_policy = options.input_policy
        self.weight_policy = options.weight_policy
        self.reuse_quantized_weight = options.reuse_quantized_weight
        self.hp_gemms = options.hp_gemms
        self.hp_precision = options.hp_precision
        self._recipe: _C.Recipe | None = options.cxx_recipe
        self._bound: _Bound | None = None

    def _make_recipe(self) -> _C.Recipe:
        return _recipe(self)

    def __getstate__(self) -> dict[str, Any]:
        # copy.deepcopy and pickling: the C++ objects are rebuilt on the next forward.
        state = self.__dict__.copy()
        state["_recipe"] = None
        state["_bound"] = None
        return state

    def _apply_op(self, x: torch.Tensor, groups: _C.GroupList | None) -> torch.Tensor:
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
        return _MxFunction.apply(x, weight, bias, bound, groups, call)

    def extra_repr(self) -> str:
        return (f"recipe={self.recipe}, scale={self.scale}, input_policy={self.input_policy}, "
                f"weight_policy={self.weight_policy}, "
                f"reuse_quantized_weight={self.reuse_quantized_weight}"
                + (f", hp_gemms={self.hp_gemms}, hp_precision={self.hp_precision}"
                   if self.hp_gemms else ""))


def _check_input(x: Any) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"input must be a torch.Tensor, got {_check.describe(x)}")
    return x


class MxLinear(_MxModule):
    """nn.Linear with MXFP8 GEMMs: y = x . W^T + b.

    Forward and backward are the C++ mxtrain::Linear on CPU tensors, fp32 or bf16; outputs
    and gradients do not depend on the policies or on reuse_quantized_weight, bit for bit.

    Parameters
    ----------
    in_features : int
        The size of each input row, >= 0.
    out_features : int
        The size of each output row, >= 0.
    bias : bool
        Whether the layer has a bias [out_features].
    recipe : {"e4m3", "hybrid"}
        "e4m3": every operand E4M3; "hybrid": E5M2 gradients.
    scale : {"rceil", "floor", "ceil", "even"}
        The E8M0 scale rule (NUMERICS.md section 4).
    input_policy, weight_policy : {"quantized", "deferred", "auto"}, optional
        What the forward keeps of the input / weight for the backward: the columnwise FP8
        copy ("quantized"), a reference to the high-precision tensor, quantized in the
        backward ("deferred"), or per call whichever holds less ("auto": the weight is
        referenced, since the parameter lives anyway; a torch input is quantized, since
        mxtrain cannot see what else keeps it). Default "quantized", or "deferred" under
        defer_backward_quant; unset for a role an HP GEMM reads.
    defer_backward_quant : bool
        MindSpeed's ``--mxfp8-defer-backward-quant``: both policies "deferred"; an
        explicit "quantized" policy with it is a ValueError.
    reuse_quantized_weight : bool
        MindSpeed's ``--fp8-reuse-quantized-weight``: the weight is quantized at most once
        per layout per optimizer step (see :func:`attach`). After a write through
        ``weight.data`` (an EMA swap), call :func:`invalidate`: torch's version counter
        does not see it.
    hp_gemms : tuple of {"fprop", "dgrad", "wgrad"}
        GEMMs run in high precision (hp_precision) instead of MXFP8, as TE's
        ``override_linear_precision`` and torchao's ``wgrad_with_hp``; not all three.
    hp_precision : {"bf16", "fp32"}
        The compute type of the hp_gemms.

    Attributes
    ----------
    weight : torch.nn.Parameter
        [out_features, in_features], fp32 (``.to(torch.bfloat16)`` works), initialized as
        nn.Linear's.
    bias : torch.nn.Parameter or None
        [out_features].

    Raises
    ------
    TypeError
        An argument of the wrong type (a str for in_features, an int for bias, ...).
    ValueError
        A negative feature count, an unknown recipe, scale rule, policy or GEMM, or a
        contradiction: defer_backward_quant=True with a "quantized" policy, a policy for
        a role an HP GEMM reads, all three GEMMs in high precision.

    Examples
    --------
    >>> layer = MxLinear(1024, 4096, recipe="e4m3", input_policy="deferred")
    >>> y = layer(torch.randn(8, 1024))
    """

    _op_type = _C.Linear

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 recipe: str = "e4m3", scale: str = "rceil", input_policy: str | None = None,
                 weight_policy: str | None = None, defer_backward_quant: bool = False,
                 reuse_quantized_weight: bool = False,
                 hp_gemms: tuple[str, ...] | list[str] | str = (),
                 hp_precision: str = "bf16") -> None:
        super().__init__()
        in_features = _check.integer("in_features", in_features)
        out_features = _check.integer("out_features", out_features)
        bias = _check.flag("bias", bias)
        options = _Options(recipe, scale, input_policy, weight_policy, defer_backward_quant,
                           reuse_quantized_weight, hp_gemms, hp_precision)
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        self._init_options(options)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initializes weight and bias as nn.Linear does."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y = x . W^T + b.

        Parameters
        ----------
        x : torch.Tensor
            [..., in_features], CPU, torch.float32 or torch.bfloat16.

        Returns
        -------
        torch.Tensor
            [..., out_features], x's dtype.

        Raises
        ------
        TypeError
            x is not a torch.Tensor.
        ValueError
            x not on the CPU, of another dtype, of rank < 2 or with another feature count.
        """
        return self._apply_op(_check_input(x), None)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, " + super().extra_repr())


class MxGroupedLinear(_MxModule):
    """Mixture-of-experts linear: tokens sorted by expert, expert e computes
    Y_e = X_e . W[e]^T + b[e].

    Forward and backward are the C++ mxtrain::GroupedLinear on CPU tensors, fp32 or bf16.
    Called as ``layer(x, group_list, group_list_type)``.

    Parameters
    ----------
    num_experts : int
        E, the number of experts, >= 1.
    in_features : int
        The size of each token's input row, >= 0.
    out_features : int
        The size of each token's output row, >= 0.
    bias : bool
        Whether the layer has a bias [num_experts, out_features].
    recipe : {"e4m3", "hybrid"}
        "e4m3": every operand E4M3; "hybrid": E5M2 gradients.
    scale : {"rceil", "floor", "ceil", "even"}
        The E8M0 scale rule (NUMERICS.md section 4).
    input_policy, weight_policy : {"quantized", "deferred", "auto"}, optional
        What the forward keeps of the input / weight for the backward: the columnwise FP8
        copy ("quantized"), a reference to the high-precision tensor, quantized in the
        backward ("deferred"), or per call whichever holds less ("auto": the weight is
        referenced, since the parameter lives anyway; a torch input is quantized, since
        mxtrain cannot see what else keeps it). Default "quantized", or "deferred" under
        defer_backward_quant; unset for a role an HP GEMM reads.
    defer_backward_quant : bool
        MindSpeed's ``--mxfp8-defer-backward-quant``: both policies "deferred"; an
        explicit "quantized" policy with it is a ValueError.
    reuse_quantized_weight : bool
        MindSpeed's ``--fp8-reuse-quantized-weight``: the weight is quantized at most once
        per layout per optimizer step (see :func:`attach`). After a write through
        ``weight.data`` (an EMA swap), call :func:`invalidate`: torch's version counter
        does not see it.
    hp_gemms : tuple of {"fprop", "dgrad", "wgrad"}
        GEMMs run in high precision (hp_precision) instead of MXFP8, as TE's
        ``override_linear_precision`` and torchao's ``wgrad_with_hp``; not all three.
    hp_precision : {"bf16", "fp32"}
        The compute type of the hp_gemms.

    Attributes
    ----------
    weight : torch.nn.Parameter
        [num_experts, out_features, in_features], each expert initialized as nn.Linear's.
    bias : torch.nn.Parameter or None
        [num_experts, out_features].

    Raises
    ------
    TypeError
        An argument of the wrong type.
    ValueError
        A count out of range, an unknown recipe, scale rule or policy, or
        defer_backward_quant=True with a "quantized" policy.

    Examples
    --------
    >>> experts = MxGroupedLinear(8, 1024, 2816)
    >>> y = experts(x_sorted_by_expert, group_list, group_list_type="counts")
    """

    _op_type = _C.GroupedLinear

    def __init__(self, num_experts: int, in_features: int, out_features: int,
                 bias: bool = False, *, recipe: str = "e4m3", scale: str = "rceil",
                 input_policy: str | None = None, weight_policy: str | None = None,
                 defer_backward_quant: bool = False,
                 reuse_quantized_weight: bool = False,
                 hp_gemms: tuple[str, ...] | list[str] | str = (),
                 hp_precision: str = "bf16") -> None:
        super().__init__()
        num_experts = _check.integer("num_experts", num_experts, minimum=1)
        in_features = _check.integer("in_features", in_features)
        out_features = _check.integer("out_features", out_features)
        bias = _check.flag("bias", bias)
        options = _Options(recipe, scale, input_policy, weight_policy, defer_backward_quant,
                           reuse_quantized_weight, hp_gemms, hp_precision)
        self.num_experts = num_experts
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(num_experts, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(num_experts, out_features)) if bias else None
        self._init_options(options)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initializes each expert's weight, and the bias, as nn.Linear does."""
        for e in range(self.num_experts):
            nn.init.kaiming_uniform_(self.weight[e], a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor, group_list: GroupListLike | torch.Tensor,
                group_list_type: str = "cumsum") -> torch.Tensor:
        """The rows of group e of the output are x_e . W[e]^T + b[e].

        Parameters
        ----------
        x : torch.Tensor
            [M, in_features] tokens sorted by expert, CPU, torch.float32 or torch.bfloat16.
        group_list : sequence of int, or 1-D integer array or tensor
            The num_experts groups: cumulative ends ("cumsum") or sizes ("counts").
        group_list_type : {"cumsum", "counts"}
            How group_list is written.

        Returns
        -------
        torch.Tensor
            [M, out_features], x's dtype.

        Raises
        ------
        TypeError
            x is not a torch.Tensor, or group_list does not hold ints.
        ValueError
            x not 2-D, a group_list that does not sum to M or does not have num_experts
            groups, an unknown group_list_type.
        """
        x = _check_input(x)
        gtype = _check.group_list_type(group_list_type)
        values = _check.group_values("group_list", group_list)
        if x.dim() != 2:
            raise ValueError(f"input must be 2-D [tokens, features], got {list(x.shape)}")
        groups = _C.GroupList(values, gtype, int(x.shape[0]))
        return self._apply_op(x, groups)

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, in_features={self.in_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}, "
                + super().extra_repr())


class StepHookHandle:
    """What :func:`attach` returns: ``remove()`` detaches the hook."""

    def __init__(self, remove: Callable[[], None]) -> None:
        self._remove = remove

    def remove(self) -> None:
        """Stops clearing the cache after the optimizer's steps."""
        self._remove()


def attach(optimizer: torch.optim.Optimizer) -> StepHookHandle:
    """Clears the weight-quant cache after every ``optimizer.step()``.

    The quantized weights of one step are never read after it, so the cache that
    ``reuse_quantized_weight=True`` fills is emptied at each step.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        The optimizer of the model's MX layers (any object with a ``step`` method).

    Returns
    -------
    StepHookHandle
        ``remove()`` undoes the attachment.

    Raises
    ------
    TypeError
        optimizer has no ``step`` method.
    """
    if not callable(getattr(optimizer, "step", None)):
        raise TypeError("optimizer must be a torch.optim.Optimizer (an object with a step "
                        f"method), got {_check.describe(optimizer)}")

    def clear(*_: Any) -> None:
        _C.weight_cache_clear()

    if hasattr(optimizer, "register_step_post_hook"):  # torch >= 2.0
        handle = optimizer.register_step_post_hook(clear)
        return StepHookHandle(handle.remove)
    step = optimizer.step  # torch 1.x: wrap the bound method

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = step(*args, **kwargs)
        clear()
        return result

    optimizer.step = wrapped

    def remove() -> None:
        if optimizer.step is wrapped:
            del optimizer.step
    return StepHookHandle(remove)


def _from_linear(linear: nn.Linear, options: dict[str, Any]) -> MxLinear:
    mx = MxLinear(linear.in_features, linear.out_features, linear.bias is not None, **options)
    mx = mx.to(dtype=linear.weight.dtype)
    with torch.no_grad():
        mx.weight.copy_(linear.weight)
        if mx.bias is not None and linear.bias is not None:
            mx.bias.copy_(linear.bias)
    mx.weight.requires_grad_(linear.weight.requires_grad)
    if mx.bias is not None and linear.bias is not None:
        mx.bias.requires_grad_(linear.bias.requires_grad)
    mx.train(linear.training)
    return mx


def _replace_linears(model: nn.Module, options: dict[str, Any]) -> None:
    for name, child in model.named_children():
        if isinstance(child, nn.Linear):
            setattr(model, name, _from_linear(child, options))
        else:
            _replace_linears(child, options)


def convert(model: ModuleT, **options: Any) -> ModuleT | MxLinear:
    """Replaces every nn.Linear of model, in place and recursively, by an MxLinear.

    Each MxLinear has the nn.Linear's features, bias, dtype, values, requires_grad and
    training mode.

    Parameters
    ----------
    model : torch.nn.Module
        The model; its nn.Linear children (at any depth) are replaced.
    **options
        MxLinear's keyword options: recipe, scale, input_policy, weight_policy,
        defer_backward_quant, reuse_quantized_weight. Checked once, before any layer is
        replaced, even when model holds no nn.Linear.

    Returns
    -------
    torch.nn.Module
        model, or a new MxLinear if model itself is an nn.Linear.

    Raises
    ------
    TypeError
        model is not an nn.Module, an option is unknown or of the wrong type.
    ValueError
        An option of the wrong value.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {_check.describe(model)}")
    unknown = sorted(set(options) - set(_OPTION_NAMES))
    if unknown:
        raise TypeError(f"convert got an unknown option '{unknown[0]}'; MxLinear's options "
                        f"are {', '.join(_OPTION_NAMES)}")
    _Options(**options)  # every option checked here, once, before any layer is replaced
    if isinstance(model, nn.Linear):
        return _from_linear(model, options)
    _replace_linears(model, options)
    return model


def invalidate(module_or_parameter: nn.Module | torch.Tensor) -> None:
    """Tells mxtrain that parameters changed in a way torch's version counter missed.

    Writes through ``.data`` (as EMA helpers do) bypass the version counter: after one,
    the next forward of every MX module that reads the parameters quantizes them afresh.

    Parameters
    ----------
    module_or_parameter : torch.nn.Module or torch.Tensor
        A module (all its parameters, recursively, and its MX modules' bindings) or one
        parameter / tensor.

    Raises
    ------
    TypeError
        Neither a module nor a tensor.
    """
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


def weight_cache_stats() -> dict[str, int]:
    """The weight-quant cache's figures.

    Returns
    -------
    dict
        ``hits``, ``misses``, ``entries`` and ``bytes_held``.
    """
    return _C.weight_cache_stats()
