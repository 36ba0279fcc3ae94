"""A small reader of .safetensors files for the tests (the fixtures' inputs, expected outputs and
checkpoint tensors): the 8-byte header length, the JSON header, then each tensor's bytes as a
numpy array. BF16 comes back as uint16 bit patterns (numpy has no bfloat16); bf16_to_float32
and to_torch convert them."""

import json
import struct

import numpy as np

_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": np.uint16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
}


def read(path):
    """{name: (dtype name, numpy array)} for every tensor of the file at ``path``."""
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    base = 8 + header_len
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[base + begin : base + end], dtype=_DTYPES[info["dtype"]])
        out[name] = (info["dtype"], array.reshape(info["shape"]).copy())
    return out


def bf16_to_float32(bits):
    """uint16 bfloat16 bit patterns as float32 values."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def to_torch(dtype, array):
    """A tensor file entry as a torch tensor of its own dtype (BF16 as torch.bfloat16)."""
    import torch

    if dtype == "BF16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)
