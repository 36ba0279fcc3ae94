"""Every conformance fixture through the Python package, on every available backend: the linear
fixtures through rt.linear(ck, ...) and the MoE fixture with the engine's routing and with the
block's own router, against the float64 outputs stored with them and against torch on the
dequantized weight, within the declared bound of the kernel that ran. Outputs start as NaN, so a
skipped element fails the check."""

import numpy as np
import pytest
import torch

import nibble
from conftest import (FIXTURES, LINEAR_FIXTURES, LINEAR_PREFIX, MOE_FIXTURE, MOE_PREFIX, BACKENDS,
                      as_float64, declared_bound, fixture_io, fixture_model, make_runtime,
                      relative_error)
from safetensors_reader import to_torch

MS = [1, 7, 33]
TAGS = {"": "f32", "bf16_": "bf16"}


def nan_output(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype)


def torch_reference(name, x):
    """x @ W^T + b in float64, W the fixture's exact dequantized weight."""
    io, model = fixture_io(name), fixture_model(name)
    w = torch.from_numpy(io["w_dequant"][1]).double()
    b = torch.from_numpy(model[LINEAR_PREFIX + ".bias"][1]).double()
    return x.double() @ w.T + b


@pytest.mark.parametrize("name", LINEAR_FIXTURES)
def test_linear_fixtures_torch(backend_runtime, name):
    rt = backend_runtime
    ck = nibble.Checkpoint.open(FIXTURES / name)
    lin = rt.linear(ck, LINEAR_PREFIX)
    assert (lin.in_features, lin.out_features) == (512, 384)
    assert lin.backend == rt.backend
    io = fixture_io(name)
    for m in MS:
        for tag, dt in TAGS.items():
            x = to_torch(*io[f"x_{tag}m{m}"])
            y = nan_output((m, 384), x.dtype)
            assert lin(x, out=y) is y
            assert torch.isfinite(y).all(), f"{name} {tag}m{m}: elements left unwritten"
            bound = declared_bound(rt, lin, dt)
            expected = io[f"y_{tag}m{m}"][1]
            assert relative_error(as_float64(y), expected) <= bound, f"{name} {tag}m{m}"
            assert relative_error(as_float64(y), torch_reference(name, x)) <= bound
            # Without out=: a new torch tensor of x's dtype.
            y2 = lin(x)
            assert isinstance(y2, torch.Tensor) and y2.dtype == x.dtype and y2.shape == (m, 384)
            assert torch.equal(y2, y)


@pytest.mark.parametrize("name", LINEAR_FIXTURES)
def test_linear_fixtures_numpy_and_float16(backend_runtime, name):
    rt = backend_runtime
    lin = rt.linear(nibble.Checkpoint.open(FIXTURES / name), LINEAR_PREFIX)
    io = fixture_io(name)
    for m in MS:
        x = io[f"x_m{m}"][1]
        y = lin(x)
        assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (m, 384)
        assert np.isfinite(y).all()
        assert relative_error(y, io[f"y_m{m}"][1]) <= declared_bound(rt, lin, "f32")
        # float16: the reference is computed from the rounded input.
        x16 = x.astype(np.float16)
        y16 = lin(x16)
        assert y16.dtype == np.float16 and np.isfinite(y16).all()
        ref = torch_reference(name, torch.from_numpy(x16.astype(np.float64)))
        assert relative_error(y16, ref) <= declared_bound(rt, lin, "f16")


W4A8_BACKENDS = [
    b["name"]
    for b in make_runtime().backends()["backends"]
    if b["available"] and any(k["op"] == "linear" and k["mode"] == "w4a8" for k in b["kernels"])
]


@pytest.mark.parametrize("backend", W4A8_BACKENDS)
@pytest.mark.parametrize("name", LINEAR_FIXTURES)
def test_linear_fixtures_w4a8(backend, name):
    rt = make_runtime(backend=backend, mode="w4a8", threads=2)
    lin = rt.linear(nibble.Checkpoint.open(FIXTURES / name), LINEAR_PREFIX)
    io = fixture_io(name)
    for m in MS:
        x = to_torch(*io[f"x_bf16_m{m}"])
        y = nan_output((m, 384), torch.bfloat16)
        lin(x, out=y)
        assert torch.isfinite(y).all()
        assert relative_error(as_float64(y), io[f"y_bf16_m{m}"][1]) <= declared_bound(
            rt, lin, "bf16")


def test_some_backend_runs_w4a8():
    # The w4a8 test above must run somewhere: cpu_amx declares w4a8 kernels.
    assert "cpu_amx" not in BACKENDS or "cpu_amx" in W4A8_BACKENDS


def test_moe_fixture_with_engine_routing(backend_runtime):
    rt = backend_runtime
    moe = rt.moe(nibble.Checkpoint.open(FIXTURES / MOE_FIXTURE), MOE_PREFIX)
    assert (moe.num_experts, moe.top_k, moe.hidden) == (8, 2, 256)
    io = fixture_io(MOE_FIXTURE)
    for m in MS:
        for tag, dt in TAGS.items():
            x = to_torch(*io[f"x_{tag}m{m}"])
            ids = torch.from_numpy(io[f"topk_ids_{tag}m{m}"][1])
            for norm in ["", "norenorm_"]:
                w = torch.from_numpy(io[f"topk_weights_{norm}{tag}m{m}"][1])
                y = nan_output((m, 256), x.dtype)
                assert moe.experts(x, ids, w, out=y) is y
                assert torch.isfinite(y).all()
                err = relative_error(as_float64(y), io[f"y_{norm}{tag}m{m}"][1])
                assert err <= declared_bound(rt, moe, dt), f"{tag}m{m} {norm}"
            # int64 ids, as torch.topk gives them, read the same.
            y64 = moe.experts(x, ids.long(), torch.from_numpy(io[f"topk_weights_{tag}m{m}"][1]))
            assert relative_error(as_float64(y64), io[f"y_{tag}m{m}"][1]) <= declared_bound(
                rt, moe, dt)


def test_moe_fixture_with_its_router(backend_runtime):
    rt = backend_runtime
    moe = rt.moe(nibble.Checkpoint.open(FIXTURES / MOE_FIXTURE), MOE_PREFIX)
    io = fixture_io(MOE_FIXTURE)
    for m in MS:
        for tag, dt in TAGS.items():
            x = to_torch(*io[f"x_{tag}m{m}"])
            ids, weights = moe.route(x)
            assert ids.dtype == torch.int32 and weights.dtype == torch.float32
            assert torch.equal(ids, torch.from_numpy(io[f"topk_ids_{tag}m{m}"][1]))
            assert np.allclose(weights.numpy(), io[f"topk_weights_{tag}m{m}"][1], rtol=1e-3)
            y = nan_output((m, 256), x.dtype)
            moe(x, out=y)
            assert torch.isfinite(y).all()
            assert relative_error(as_float64(y), io[f"y_{tag}m{m}"][1]) <= declared_bound(
                rt, moe, dt)
