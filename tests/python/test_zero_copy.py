"""Tensors cross into nibble without a copy: the C++ forward gets the caller's own memory (the
addresses it was handed, nibble._last_call_pointers(), equal the tensors' data pointers) and,
with out=, writes into the caller's storage. Outputs without out= are of the input's library."""

import numpy as np
import pytest
import torch
import torch.utils.dlpack

import nibble
from conftest import FIXTURES, LINEAR_PREFIX, fixture_io
from safetensors_reader import to_torch


@pytest.fixture(scope="module")
def lin(runtime):
    return runtime.linear(nibble.Checkpoint.open(FIXTURES / "gptq_v1_sym_g128"), LINEAR_PREFIX)


@pytest.fixture(scope="module")
def x7():
    return to_torch(*fixture_io("gptq_v1_sym_g128")["x_m7"])


def pointers():
    return nibble._nibble._last_call_pointers()


def test_out_is_written_in_place(lin, x7):
    expected = lin(x7)
    y = torch.full((7, 384), float("nan"))
    storage = y.data_ptr()
    assert lin(x7, out=y) is y
    assert y.data_ptr() == storage
    assert pointers() == (x7.data_ptr(), storage)
    assert torch.equal(y, expected)


def test_numpy_out_is_written_in_place(lin, x7):
    x = x7.numpy()
    y = np.full((7, 384), np.nan, dtype=np.float32)
    assert lin(x, out=y) is y
    assert pointers() == (x.ctypes.data, y.ctypes.data)
    assert np.array_equal(y, lin(x7).numpy())


def test_rows_of_a_wider_buffer_are_read_where_they_are(lin, x7):
    # x[:, 16:528] of a [7, 600] buffer: row stride 600, no copy.
    wide = torch.randn(7, 600)
    wide[:, 16:528] = x7
    x = wide[:, 16:528]
    assert not x.is_contiguous()
    y = torch.full((7, 384), float("nan"))
    wide_out = torch.full((7, 500), float("nan"))
    out = wide_out[:, 50:434]
    lin(x, out=out)
    assert pointers() == (x.data_ptr(), out.data_ptr())
    assert torch.equal(out, lin(x7))
    assert torch.isnan(wide_out[:, :50]).all() and torch.isnan(wide_out[:, 434:]).all()
    del y


def test_leading_dimensions_fold_into_rows(lin, x7):
    x = torch.cat([x7, x7[:5]]).reshape(3, 4, 512)
    y = lin(x)
    assert y.shape == (3, 4, 384)
    assert pointers()[0] == x.data_ptr()
    assert torch.equal(y.reshape(12, 384), lin(x.reshape(12, 512)))
    # A 1-D x is one row, and y is 1-D too.
    assert torch.equal(lin(x7[0]), lin(x7[:1])[0])


def test_legacy_capsules_in_and_out(lin, x7):
    y = torch.full((7, 384), float("nan"))
    capsule_x = torch.utils.dlpack.to_dlpack(x7)
    capsule_y = torch.utils.dlpack.to_dlpack(y)
    lin(capsule_x, out=capsule_y)
    assert pointers() == (x7.data_ptr(), y.data_ptr())
    assert torch.equal(y, lin(x7))
    # A capsule is consumed once.
    with pytest.raises(nibble.InvalidArgument, match="already consumed"):
        lin(capsule_x)


def test_other_producers_get_a_nibble_tensor(lin, x7):
    # A legacy capsule or any other __dlpack__ object: a nibble.Tensor, which torch and numpy
    # take without a copy.
    y = lin(torch.utils.dlpack.to_dlpack(x7))
    assert isinstance(y, nibble.Tensor) and y.shape == (7, 384) and y.dtype == "float32"
    as_torch = torch.from_dlpack(y)
    assert torch.equal(as_torch, lin(x7))
    as_numpy = np.from_dlpack(y)
    assert as_numpy.ctypes.data == as_torch.data_ptr()
    del y  # the memory lives on in its consumers
    assert np.array_equal(as_torch.numpy(), as_numpy)


def test_nibble_tensor_in_nibble_tensor_out(lin, x7):
    x = nibble.Tensor([7, 512], "float32", x7.numpy().tobytes())
    y = lin(x)
    assert torch.from_dlpack(x).data_ptr() == pointers()[0]
    assert isinstance(y, nibble.Tensor)
    assert np.array_equal(np.frombuffer(y.tobytes(), np.float32).reshape(7, 384),
                          lin(x7).numpy())


def test_every_output_element_is_written(runtime):
    moe = runtime.moe(nibble.Checkpoint.open(FIXTURES / "moe_gptq_e8_top2"),
                      "model.layers.0.mlp")
    x = torch.randn(5, 256)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        y = torch.full((5, 256), float("nan"), dtype=dtype)
        moe(x.to(dtype), out=y)
        assert torch.isfinite(y).all()
        assert pointers()[1] == y.data_ptr()
