"""nibble layers in PyTorch: :class:`QuantLinear` (a ``torch.nn.Module``), :func:`replace_linear`
(swap a model's GPTQ/AWQ linear modules for nibble layers) and two custom ops, so that a traced
graph keeps the nibble calls::

    nibble::linear(int layer, Tensor x) -> Tensor
    nibble::moe_experts(int layer, Tensor x, Tensor topk_ids, Tensor topk_weights) -> Tensor

``layer`` is a handle from :func:`register_layer`: an int naming a live nibble layer in this
process. A graph traced with these ops runs in the process that traced it, while its layers live;
saved and loaded elsewhere, its handles name nothing (the op raises ``nibble.InvalidArgument``).

Importing this module needs torch; ``import nibble`` does not.
"""

import itertools
import threading
import weakref

import torch

from . import _nibble

__all__ = ["QuantLinear", "register_layer", "replace_linear", "HAS_CUSTOM_OPS"]

# Handles to live layers. Weak: a layer lives as long as the modules (or the caller) holding it.
_layers = {}
_layers_lock = threading.Lock()
_next_handle = itertools.count(1)


def register_layer(layer):
    """An int handle for a nibble ``LinearLayer`` or ``MoeLayer``, for the ``torch.ops.nibble``
    ops; valid while the layer lives."""
    if not isinstance(layer, (_nibble.LinearLayer, _nibble.MoeLayer)):
        raise _nibble.InvalidArgument(
            f"register_layer: expected a nibble.LinearLayer or nibble.MoeLayer, got "
            f"{type(layer).__qualname__}"
        )
    with _layers_lock:
        handle = next(_next_handle)
        _layers[handle] = weakref.ref(layer)
    weakref.finalize(layer, _forget, handle)
    return handle


def _forget(handle):
    with _layers_lock:
        _layers.pop(handle, None)


def _layer(handle, kind):
    with _layers_lock:
        ref = _layers.get(handle)
    layer = ref() if ref is not None else None
    if layer is None:
        raise _nibble.InvalidArgument(
            f"nibble layer handle {handle} names no live layer in this process (a graph traced "
            f"with nibble ops runs only where its layers live)"
        )
    if not isinstance(layer, kind):
        raise _nibble.InvalidArgument(
            f"nibble layer handle {handle} is a {type(layer).__qualname__}, not a "
            f"{kind.__qualname__}"
        )
    return layer


def _linear_cpu(layer, x):
    # DLPack refuses tensors that require grad; nibble layers compute no gradients.
    return _layer(layer, _nibble.LinearLayer)(x.detach())


def _moe_experts_cpu(layer, x, topk_ids, topk_weights):
    return _layer(layer, _nibble.MoeLayer).experts(
        x.detach(), topk_ids.detach(), topk_weights.detach()
    )


# torch.library (torch >= 1.12) registers the ops; where it is missing the modules call the
# layers directly, and tracing records no nibble op.
HAS_CUSTOM_OPS = hasattr(torch, "library") and hasattr(torch.library, "Library")
if HAS_CUSTOM_OPS:
    _library = torch.library.Library("nibble", "DEF")
    _library.define("linear(int layer, Tensor x) -> Tensor")
    _library.define(
        "moe_experts(int layer, Tensor x, Tensor topk_ids, Tensor topk_weights) -> Tensor"
    )
    _library.impl("linear", _linear_cpu, "CPU")
    _library.impl("moe_experts", _moe_experts_cpu, "CPU")


class QuantLinear(torch.nn.Module):
    """A nibble linear layer as a ``torch.nn.Module``: ``forward(x)`` for x ``[..., in_features]``
    (float32, bfloat16 or float16 on the CPU) returns ``[..., out_features]`` of x's dtype,
    through ``torch.ops.nibble.linear``. Inference only: no gradients flow through it."""

    def __init__(self, layer):
        super().__init__()
        if not isinstance(layer, _nibble.LinearLayer):
            raise _nibble.InvalidArgument(
                f"QuantLinear: expected a nibble.LinearLayer, got {type(layer).__qualname__}"
            )
        self.layer = layer
        self.in_features = layer.in_features
        self.out_features = layer.out_features
        self.handle = register_layer(layer)

    @classmethod
    def from_checkpoint(cls, runtime, checkpoint, prefix):
        """The layer ``prefix`` of a ``nibble.Checkpoint``, built by ``runtime``."""
        return cls(runtime.linear(checkpoint, prefix))

    @classmethod
    def from_tensors(cls, runtime, method="gptq", **tensors_and_format):
        """A layer from the tensors an engine or a quantized model holds; the arguments are
        ``Runtime.linear_from_tensors``'s (qweight, qzeros, scales, g_idx, bias, bits,
        group_size, checkpoint_format, sym, name)."""
        return cls(runtime.linear_from_tensors(method, **tensors_and_format))

    def forward(self, x):
        if HAS_CUSTOM_OPS:
            return torch.ops.nibble.linear(self.handle, x)
        return self.layer(x.detach())

    def extra_repr(self):
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"backend={self.layer.backend}, kernel={self.layer.kernel}"
        )


def _quantized_tensors(module):
    """The checkpoint tensors and bit width a GPTQ/AWQ module holds, or None for any other
    module."""
    tensors = {k: getattr(module, k, None) for k in ("qweight", "qzeros", "scales")}
    if not all(isinstance(t, torch.Tensor) for t in tensors.values()):
        return None
    # AutoGPTQ and GPTQModel call it bits, AutoAWQ w_bit.
    bits = getattr(module, "bits", getattr(module, "w_bit", None))
    if not isinstance(bits, int):
        return None
    return tensors, bits


def _method(module, qweight, scales, bits):
    """GPTQ or AWQ, from the packing: GPTQ packs qweight along K ([K * bits / 32, N]), AWQ along N
    ([K, N * bits / 32]); scales are [groups, N] in both."""
    n = scales.shape[-1]
    if qweight.shape[-1] == n:
        return "gptq"
    if qweight.shape[-1] * 32 // bits == n:
        return "awq"
    raise _nibble.InvalidArgument(
        f"{type(module).__qualname__}: qweight {list(qweight.shape)} with scales "
        f"{list(scales.shape)} at {bits} bits is packed neither as GPTQ ([K*bits/32, N]) nor as "
        f"AWQ ([K, N*bits/32])"
    )


def _gptq_format(module):
    """The zero-point convention of a GPTQ module's qzeros in memory: GPTQModel converts v1
    checkpoints to v2 when it loads them for a kernel class marked REQUIRES_FORMAT_V2;
    AutoGPTQ and the rest keep the checkpoint's (v1, "gptq")."""
    return "gptq_v2" if getattr(type(module), "REQUIRES_FORMAT_V2", False) else "gptq"


def replace_linear(module, runtime, *, method=None, checkpoint_format=None):
    """Replace every GPTQ/AWQ linear module inside ``module`` with a :class:`QuantLinear` built by
    ``runtime`` from the module's own tensors, and return ``{name: replaced module}``.

    A module counts when it holds tensors ``qweight``, ``qzeros`` and ``scales`` and an int
    ``bits`` (or AutoAWQ's ``w_bit``), as AutoGPTQ, GPTQModel and AutoAWQ modules do; ``g_idx``,
    ``bias``, ``group_size`` (default 128; ``-1`` or K for one group) and ``sym`` are read when
    present. GPTQ and AWQ are told apart by the packing (see ``_method``) unless ``method`` is
    given; GPTQ's zero-point convention comes from ``checkpoint_format`` or, when it is None, from
    the module's class (``_gptq_format``). The tensors must be in CPU memory.
    """
    found = []
    for name, child in module.named_modules():
        if child is module:
            continue
        q = _quantized_tensors(child)
        if q is not None:
            found.append((name, child, q))
    replaced = {}
    for name, child, (tensors, bits) in found:
        m = method or _method(child, tensors["qweight"], tensors["scales"], bits)
        fmt = checkpoint_format or (_gptq_format(child) if m == "gptq" else "gemm")
        bias = getattr(child, "bias", None)
        g_idx = getattr(child, "g_idx", None) if m == "gptq" else None
        group_size = getattr(child, "group_size", 128)
        new = QuantLinear.from_tensors(
            runtime,
            m,
            qweight=tensors["qweight"].detach(),
            qzeros=tensors["qzeros"].detach(),
            scales=tensors["scales"].detach(),
            g_idx=g_idx.detach() if isinstance(g_idx, torch.Tensor) else None,
            bias=bias.detach() if isinstance(bias, torch.Tensor) else None,
            bits=bits,
            group_size=int(group_size),
            checkpoint_format=fmt,
            sym=bool(getattr(child, "sym", True)),
            name=name,
        )
        parent_name, _, attr = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        setattr(parent, attr, new)
        replaced[name] = child
    return replaced
