"""nibble: GPTQ- and AWQ-quantized linear and Mixture-of-Experts layers on pluggable backends.

::

    import nibble
    rt = nibble.Runtime()                                   # loads the backend plugins
    ck = nibble.Checkpoint.open("model_dir")                # config.json + safetensors
    q = rt.linear(ck, "model.layers.0.self_attn.q_proj")
    y = q(x)                                                # x: torch, numpy or any DLPack tensor

Tensors cross without a copy (by DLPack; numpy arrays, read-only ones too, by the buffer
protocol); a forward releases the GIL. ``nibble.torch`` (imported on demand, it needs torch) has
``QuantLinear``, ``replace_linear`` and the ``torch.ops.nibble`` custom ops. See docs/python.md.
"""

from ._nibble import (  # noqa: F401
    CheckpointError,
    Checkpoint,
    Error,
    InvalidArgument,
    LayerInfo,
    LinearLayer,
    MoeInfo,
    MoeLayer,
    Runtime,
    Tensor,
    Unavailable,
    Unsupported,
    __version__,
)

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "Error",
    "InvalidArgument",
    "LayerInfo",
    "LinearLayer",
    "MoeInfo",
    "MoeLayer",
    "Runtime",
    "Tensor",
    "Unavailable",
    "Unsupported",
]
