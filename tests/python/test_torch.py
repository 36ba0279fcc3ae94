"""nibble.torch: QuantLinear from a checkpoint layer and from tensors, replace_linear on modules
shaped as AutoGPTQ's and AutoAWQ's, and the torch.ops.nibble custom ops, which torch.jit.trace
keeps in its graph."""

import numpy as np
import pytest
import torch

import nibble
import nibble.torch as nt
from conftest import (FIXTURES, LINEAR_PREFIX, MOE_FIXTURE, MOE_PREFIX, as_float64,
                      declared_bound, fixture_io, fixture_model, relative_error)
from safetensors_reader import to_torch


def unpack(packed, bits, dim):
    """Unpack int32 words into their bits-wide fields, low bits first, along `dim`."""
    per_word = 32 // bits
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)
    fields = (packed.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
    fields = fields.reshape(*packed.shape, per_word)
    if dim == 0:
        return fields.permute(0, 2, 1).reshape(packed.shape[0] * per_word, packed.shape[1])
    return fields.reshape(packed.shape[0], packed.shape[1] * per_word)


AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]


class AutoGptqLikeLinear(torch.nn.Module):
    """A module holding a GPTQ v1 layer as AutoGPTQ's QuantLinear does, with a forward that
    dequantizes in torch (float64) as AutoGPTQ's torch kernel does."""

    def __init__(self, t, bits=4, group_size=128):
        super().__init__()
        self.bits, self.group_size = bits, group_size
        for k, v in t.items():
            self.register_buffer(k, v)

    def forward(self, x):
        q = unpack(self.qweight, self.bits, 0).double()  # [K, N]
        z = unpack(self.qzeros, self.bits, 1).double() + 1  # v1 stores zero - 1
        g = self.g_idx.long()
        w = self.scales.double()[g] * (q - z[g])
        return (x.double() @ w + self.bias.double()).to(x.dtype)


class AutoAwqLikeLinear(torch.nn.Module):
    """A module holding an AWQ GEMM layer as AutoAWQ's WQLinear_GEMM does (w_bit, no g_idx)."""

    def __init__(self, t, w_bit=4, group_size=128):
        super().__init__()
        self.w_bit, self.group_size = w_bit, group_size
        for k, v in t.items():
            self.register_buffer(k, v)

    def forward(self, x):
        order = torch.tensor(AWQ_REVERSE_ORDER)

        def columns(packed):
            fields = unpack(packed, self.w_bit, 1)
            rows, n = fields.shape
            return fields.reshape(rows, n // 8, 8)[:, :, order].reshape(rows, n)

        q = columns(self.qweight).double()  # [K, N]
        z = columns(self.qzeros).double()  # [G, N]
        g = torch.arange(q.shape[0]) // self.group_size
        w = self.scales.double()[g] * (q - z[g])
        return (x.double() @ w + self.bias.double()).to(x.dtype)


def checkpoint_tensors(name):
    model = fixture_model(name)
    return {k.rsplit(".", 1)[1]: to_torch(*v) for k, v in model.items()
            if k.startswith(LINEAR_PREFIX + ".")}


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = torch.nn.Module()
        self.attn.q_proj = AutoGptqLikeLinear(checkpoint_tensors("gptq_v1_sym_g128"))
        self.awq = AutoAwqLikeLinear(checkpoint_tensors("awq_gemm_g128"))
        self.norm = torch.nn.LayerNorm(512)

    def forward(self, x):
        h = self.norm(x)
        return self.attn.q_proj(h), self.awq(h)


def test_the_torch_dequantizers_reproduce_the_fixtures():
    # The modules replace_linear is tested on compute the fixtures' float64 outputs themselves.
    for module, name in ((AutoGptqLikeLinear(checkpoint_tensors("gptq_v1_sym_g128")),
                          "gptq_v1_sym_g128"),
                         (AutoAwqLikeLinear(checkpoint_tensors("awq_gemm_g128")), "awq_gemm_g128")):
        io = fixture_io(name)
        y = module(torch.from_numpy(io["x_m7"][1]).double())
        # The stored outputs are float64 results rounded to float32.
        assert relative_error(y.numpy(), io["y_m7"][1]) < 1e-6


def test_replace_linear(backend_runtime):
    rt = backend_runtime
    model = TwoLayers()
    x = torch.randn(5, 512)
    with torch.no_grad():
        before = model(x)
    replaced = nt.replace_linear(model, rt)
    assert sorted(replaced) == ["attn.q_proj", "awq"]
    assert isinstance(replaced["attn.q_proj"], AutoGptqLikeLinear)
    assert isinstance(model.attn.q_proj, nt.QuantLinear) and isinstance(model.awq, nt.QuantLinear)
    assert isinstance(model.norm, torch.nn.LayerNorm)
    after = model(x)  # with autograd on: the layer takes x detached
    for b, a, layer in zip(before, after, (model.attn.q_proj.layer, model.awq.layer)):
        assert a.shape == (5, 384)
        assert relative_error(as_float64(a), as_float64(b)) <= declared_bound(rt, layer, "f32")
    assert nt.replace_linear(model, rt) == {}


def test_replace_linear_tells_gptq_from_awq_by_packing(runtime):
    gptq = AutoGptqLikeLinear(checkpoint_tensors("gptq_v1_sym_g128"))
    assert nt._method(gptq, gptq.qweight, gptq.scales, 4) == "gptq"
    awq = AutoAwqLikeLinear(checkpoint_tensors("awq_gemm_g128"))
    assert nt._method(awq, awq.qweight, awq.scales, 4) == "awq"
    odd = AutoGptqLikeLinear(dict(checkpoint_tensors("gptq_v1_sym_g128")))
    odd.qweight = odd.qweight[:, :100]
    with pytest.raises(nibble.InvalidArgument, match="packed neither"):
        nt.replace_linear(torch.nn.Sequential(odd), runtime)


def test_quant_linear_from_a_checkpoint(runtime):
    ck = nibble.Checkpoint.open(FIXTURES / "gptq_v1_sym_g128")
    q = nt.QuantLinear.from_checkpoint(runtime, ck, LINEAR_PREFIX)
    io = fixture_io("gptq_v1_sym_g128")
    x = to_torch(*io["x_bf16_m33"])
    y = q(x)
    assert y.dtype == torch.bfloat16 and y.shape == (33, 384)
    assert relative_error(as_float64(y), io["y_bf16_m33"][1]) <= declared_bound(
        runtime, q.layer, "bf16")
    assert "in_features=512, out_features=384" in repr(q)


@pytest.mark.skipif(not nt.HAS_CUSTOM_OPS, reason="this torch has no torch.library")
def test_traced_linear_keeps_the_nibble_op(runtime):
    tensors = checkpoint_tensors("awq_gemm_g128")
    q = nt.QuantLinear.from_tensors(runtime, "awq", **tensors, name="q")
    model = torch.nn.Sequential(torch.nn.LayerNorm(512), q, torch.nn.ReLU())
    x = torch.randn(3, 512)
    with torch.no_grad():
        traced = torch.jit.trace(model, x)
        assert "nibble::linear" in str(traced.inlined_graph)
        for m in (1, 3, 9):  # the traced op runs the layer at any M, not the traced one's
            x = torch.randn(m, 512)
            assert torch.equal(traced(x), model(x))


class RoutedExperts(torch.nn.Module):
    def __init__(self, moe):
        super().__init__()
        self.moe = moe
        self.handle = nt.register_layer(moe)

    def forward(self, x, ids, weights):
        return torch.ops.nibble.moe_experts(self.handle, x, ids, weights)


@pytest.mark.skipif(not nt.HAS_CUSTOM_OPS, reason="this torch has no torch.library")
def test_traced_moe_keeps_the_nibble_op(runtime):
    moe = runtime.moe(nibble.Checkpoint.open(FIXTURES / MOE_FIXTURE), MOE_PREFIX)
    module = RoutedExperts(moe)
    io = fixture_io(MOE_FIXTURE)
    x = to_torch(*io["x_m7"])
    ids = torch.from_numpy(io["topk_ids_m7"][1])
    w = torch.from_numpy(io["topk_weights_m7"][1])
    traced = torch.jit.trace(module, (x, ids, w))
    assert "nibble::moe_experts" in str(traced.graph)
    y = traced(x, ids, w)
    assert torch.equal(y, moe.experts(x, ids, w))
    assert relative_error(as_float64(y), io["y_m7"][1]) <= declared_bound(runtime, moe, "f32")


def test_a_dead_handle_names_itself(runtime):
    lin = runtime.linear(nibble.Checkpoint.open(FIXTURES / "gptq_v1_sym_g128"), LINEAR_PREFIX)
    handle = nt.register_layer(lin)
    del lin
    with pytest.raises(Exception, match=f"handle {handle} names no live layer"):
        torch.ops.nibble.linear(handle, torch.randn(1, 512))
    with pytest.raises(nibble.InvalidArgument, match="expected a nibble.LinearLayer"):
        nt.register_layer(object())
