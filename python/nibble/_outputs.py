"""Where a layer's output goes when the caller passes no ``out=``.

The output is of the input's library, so code written for torch gets torch back and code written
for numpy gets numpy back; any other DLPack producer (or a DLPack capsule) gets a
:class:`nibble.Tensor`, which ``torch.from_dlpack``, ``numpy.from_dlpack`` and most array libraries
take without a copy. torch and numpy are looked up in ``sys.modules`` only: if the input is a
torch tensor, torch is already imported, and nibble never imports either itself.
"""

import sys

from . import _nibble


def new_output(like, shape, dtype):
    """An uninitialised CPU tensor of ``shape`` and ``dtype`` (a name such as ``"float32"``) from
    the library of ``like``."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(like, torch.Tensor):
        return torch.empty(shape, dtype=getattr(torch, dtype))
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(like, numpy.ndarray):
        return numpy.empty(shape, dtype=dtype)
    return _nibble.Tensor(list(shape), dtype)
