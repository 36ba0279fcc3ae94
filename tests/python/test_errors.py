"""Bad input raises a nibble.Error subclass naming the tensor, option, file or layer and what
was expected; nothing crashes. Every malformed checkpoint of tests/data/bad raises
CheckpointError with what its EXPECTED.json says a message must mention."""

import json

import numpy as np
import pytest
import torch

import nibble
from conftest import FIXTURES, LINEAR_PREFIX, MOE_PREFIX, PLUGIN_DIR, TEST_DATA, make_runtime


@pytest.fixture(scope="module")
def lin(runtime):
    return runtime.linear(nibble.Checkpoint.open(FIXTURES / "gptq_v1_sym_g128"), LINEAR_PREFIX)


@pytest.fixture(scope="module")
def moe(runtime):
    return runtime.moe(nibble.Checkpoint.open(FIXTURES / "moe_gptq_e8_top2"), MOE_PREFIX)


def test_the_error_kinds():
    for kind in (nibble.InvalidArgument, nibble.Unsupported, nibble.Unavailable,
                 nibble.CheckpointError):
        assert issubclass(kind, nibble.Error)
    assert issubclass(nibble.Error, RuntimeError)
    assert issubclass(nibble.InvalidArgument, ValueError)


class FakeDevice:
    """A DLPack producer on a GPU: refused from __dlpack_device__, before any export."""

    exported = False

    def __dlpack_device__(self):
        return (2, 1)

    def __dlpack__(self, stream=None):
        FakeDevice.exported = True
        raise AssertionError("exported")


@pytest.mark.parametrize(
    "x, mentions",
    [
        (torch.randn(3, 511), "last dimension must be 512"),
        (torch.randn(3, 512, dtype=torch.float64), "float64"),
        (torch.zeros(3, 512, dtype=torch.int32), "int32"),
        (torch.tensor(1.0), "scalar"),
        (torch.randn(512, 3).t(), "contiguous"),
        (torch.randn(4, 3, 512).transpose(0, 1), "contiguous"),
        ([[0.0] * 512], "list"),
        ("x", "str"),
        (FakeDevice(), "cuda:1"),
        (np.zeros((2, 512), np.float32)[::-1], "x"),
    ],
)
def test_bad_inputs(lin, x, mentions):
    with pytest.raises(nibble.InvalidArgument) as e:
        lin(x)
    assert mentions in str(e.value)
    assert LINEAR_PREFIX in str(e.value)
    assert not FakeDevice.exported


@pytest.mark.parametrize(
    "out, mentions",
    [
        (torch.empty(3, 383), "last dimension must be 384"),
        (torch.empty(4, 384), "expected [3, 384]"),
        (torch.empty(3, 384, dtype=torch.bfloat16), "bfloat16"),
        (torch.empty(384, 3).t(), "contiguous"),
        (np.empty((3, 384), np.float16), "float16"),
    ],
)
def test_bad_outputs(lin, out, mentions):
    with pytest.raises(nibble.InvalidArgument) as e:
        lin(torch.randn(3, 512), out=out)
    assert "out" in str(e.value) and mentions in str(e.value)


def test_gradients(lin):
    # x requiring grad is read detached; an out requiring grad is not written behind autograd.
    x = torch.randn(3, 512, requires_grad=True)
    assert torch.equal(lin(x), lin(x.detach()))
    assert not lin(x).requires_grad
    with pytest.raises(nibble.InvalidArgument, match="out requires grad"):
        lin(x, out=torch.empty(3, 384, requires_grad=True))


def test_output_over_its_input(lin):
    buffer = torch.randn(3, 1024)
    with pytest.raises(nibble.InvalidArgument, match="overlaps x"):
        lin(buffer[:, :512], out=buffer[:, 300:684])


def test_bad_routing(moe):
    x = torch.randn(4, 256)
    ids = torch.tensor([[0, 1]] * 4, dtype=torch.int32)
    w = torch.full((4, 2), 0.5)
    for args, mentions in (
        ((x, ids.float(), w), "topk_ids has dtype float32"),
        ((x, ids[:3], w), "topk_ids has shape [3, 2]; expected [4, 2]"),
        ((x, ids, w[:, :1]), "topk_weights has shape [4, 1]"),
        ((x, ids, w.long()), "topk_weights has dtype int64"),
        ((x[:, :255], ids, w), "last dimension must be 256"),
    ):
        with pytest.raises(nibble.InvalidArgument) as e:
            moe.experts(*args)
        assert mentions in str(e.value) and MOE_PREFIX in str(e.value)


def test_bad_options():
    for options, kind, mentions in (
        (dict(mode="w8a8"), nibble.InvalidArgument, "w8a8"),
        (dict(threads=-1), nibble.InvalidArgument, "threads"),
        (dict(threads=5000), nibble.InvalidArgument, "threads"),
        (dict(backend="a,,b"), nibble.InvalidArgument, "empty item"),
    ):
        with pytest.raises(kind, match=mentions):
            make_runtime(**options)
    with pytest.raises(nibble.InvalidArgument, match="key"):
        nibble.Runtime(config=str(FIXTURES / "gptq_v1_sym_g128" / "config.json"))


def test_a_backend_that_is_not_there():
    rt = make_runtime(backend="no_such_backend")
    ck = nibble.Checkpoint.open(FIXTURES / "gptq_v1_sym_g128")
    with pytest.raises(nibble.Unavailable, match="no_such_backend"):
        rt.linear(ck, LINEAR_PREFIX)


def test_no_kernel_for_the_mode():
    # npu_ref has no w4a8 linear kernel: a valid request it cannot run.
    rt = make_runtime(backend="npu_ref", mode="w4a8")
    with pytest.raises(nibble.Unsupported, match="no kernel can run"):
        rt.linear(nibble.Checkpoint.open(FIXTURES / "gptq_v1_sym_g128"), LINEAR_PREFIX)


def test_unknown_layers_and_bad_moe_options(runtime):
    ck = nibble.Checkpoint.open(FIXTURES / "moe_gptq_e8_top2")
    with pytest.raises(nibble.InvalidArgument, match="no linear layer 'nope'"):
        runtime.linear(ck, "nope")
    with pytest.raises(nibble.InvalidArgument, match="no MoE block"):
        runtime.moe(ck, "model.layers.1.mlp")
    with pytest.raises(nibble.InvalidArgument, match="top_k"):
        runtime.moe(ck, MOE_PREFIX, top_k=0)
    with pytest.raises(nibble.InvalidArgument, match="exceeds the 8 experts"):
        runtime.moe(ck, MOE_PREFIX, top_k=9)
    with pytest.raises(nibble.InvalidArgument, match="scoring"):
        runtime.moe(ck, MOE_PREFIX, scoring="tanh")


def bad_cases():
    with open(TEST_DATA / "bad" / "EXPECTED.json") as f:
        return json.load(f)


@pytest.mark.parametrize("case", bad_cases(), ids=lambda c: c["case"])
def test_malformed_checkpoints(runtime, case):
    path = TEST_DATA / "bad" / case["case"].rstrip("/")
    assert case["must_fail"]
    with pytest.raises(nibble.CheckpointError) as e:
        ck = nibble.Checkpoint.open(path)
        # What opening cannot see (values) fails when the layers are built.
        for layer in ck.linear_layers():
            runtime.linear(ck, layer.prefix)
        for block in ck.moe_blocks():
            runtime.moe(ck, block.prefix)
    message = str(e.value)
    for needle in case["message should mention"]:
        assert needle in message, f"{case['case']}: {message}"
    assert path.name in message or any(
        n in message for n in case["message should mention"] if "." in n)


def test_missing_checkpoint():
    with pytest.raises(nibble.CheckpointError, match="no checkpoint at"):
        nibble.Checkpoint.open("/nonexistent/model")


def test_a_broken_plugin_is_reported_not_raised(tmp_path):
    (tmp_path / "libnibble_broken.so").write_bytes(b"\x7fELF not really")
    rt = nibble.Runtime(plugin_dirs=[str(tmp_path), PLUGIN_DIR], use_default_plugin_dir=False)
    files = {f["path"]: f for f in rt.backends()["files"]}
    broken = files[str(tmp_path / "libnibble_broken.so")]
    assert not broken["loaded"] and broken["message"]
    assert any(b["available"] for b in rt.backends()["backends"])
