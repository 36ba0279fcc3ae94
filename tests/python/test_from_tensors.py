"""Layers from an engine's tensors: the fixtures' tensors, read from model.safetensors as torch
tensors, through rt.linear_from_tensors and rt.moe_from_tensors on every available backend. They
must pick the kernel the checkpoint path picks and compute the same output, within the declared
bound of the float64 reference."""

import torch

import nibble
from conftest import (FIXTURES, LINEAR_PREFIX, MOE_FIXTURE, MOE_PREFIX, as_float64,
                      declared_bound, fixture_io, fixture_model, relative_error)
from safetensors_reader import to_torch

FORMATS = {
    "gptq_v1_sym_g128": dict(method="gptq", checkpoint_format="gptq", sym=True),
    "awq_gemm_g128": dict(method="awq"),
}


def layer_tensors(model, prefix, with_g_idx=True):
    out = {}
    for part in ("qweight", "qzeros", "scales", "g_idx", "bias"):
        key = f"{prefix}.{part}"
        if key in model and (part != "g_idx" or with_g_idx):
            out[part] = to_torch(*model[key])
    return out


def test_linear_from_tensors_matches_the_checkpoint_layer(backend_runtime):
    rt = backend_runtime
    for name, fmt in FORMATS.items():
        model, io = fixture_model(name), fixture_io(name)
        lin = rt.linear_from_tensors(**fmt, **layer_tensors(model, LINEAR_PREFIX), bits=4,
                                     group_size=128, name=LINEAR_PREFIX)
        from_checkpoint = rt.linear(nibble.Checkpoint.open(FIXTURES / name), LINEAR_PREFIX)
        assert (lin.backend, lin.kernel) == (from_checkpoint.backend, from_checkpoint.kernel)
        assert (lin.in_features, lin.out_features) == (512, 384)
        for m in (1, 7, 33):
            for tag, dt in (("", "f32"), ("bf16_", "bf16")):
                x = to_torch(*io[f"x_{tag}m{m}"])
                y = torch.full((m, 384), float("nan"), dtype=x.dtype)
                lin(x, out=y)
                assert torch.isfinite(y).all()
                assert relative_error(as_float64(y), io[f"y_{tag}m{m}"][1]) <= declared_bound(
                    rt, lin, dt)
                assert torch.equal(y, from_checkpoint(x)), f"{name} {tag}m{m}"


def test_linear_from_tensors_names_a_bad_tensor(runtime):
    model = fixture_model("gptq_v1_sym_g128")
    t = layer_tensors(model, LINEAR_PREFIX)
    t["qzeros"] = t["qzeros"][:, :47].contiguous()
    try:
        runtime.linear_from_tensors("gptq", **t, name="engine.q")
    except nibble.InvalidArgument as e:
        assert "engine.q.qzeros" in str(e)
    else:
        raise AssertionError("a qzeros of the wrong shape was accepted")
    t = layer_tensors(model, LINEAR_PREFIX)
    for kwargs, mentions in (
        (dict(bits=3), "bits"),
        (dict(checkpoint_format="marlin"), "marlin"),
        (dict(group_size=0), "group_size"),
    ):
        try:
            runtime.linear_from_tensors("gptq", **t, **kwargs)
        except nibble.InvalidArgument as e:
            assert mentions in str(e)
        else:
            raise AssertionError(f"{kwargs} was accepted")
    try:
        runtime.linear_from_tensors("gptq", qweight=t["qweight"], qzeros=[1, 2], scales=t["scales"])
    except nibble.InvalidArgument as e:
        assert "qzeros" in str(e) and "list" in str(e)
    else:
        raise AssertionError("a list was accepted as a tensor")


def expert_tensors(model, e):
    p = f"{MOE_PREFIX}.experts.{e}"
    return {part: layer_tensors(model, f"{p}.{part}_proj") for part in ("gate", "up", "down")}


def stacked_tensors(model):
    experts = [expert_tensors(model, e) for e in range(8)]

    def stack(parts, keys, cat_dim):
        out = {}
        for key in keys:
            per_expert = []
            for ex in experts:
                if len(parts) == 2 and key != "g_idx":
                    per_expert.append(torch.cat([ex[p][key] for p in parts], dim=cat_dim))
                else:
                    per_expert.append(ex[parts[0]][key])
            out[key] = torch.stack(per_expert)
        return out

    keys = ("qweight", "qzeros", "scales", "g_idx")
    # Gate's output channels, then up's: along N, the last dimension of every GPTQ tensor.
    return stack(("gate", "up"), keys, -1), stack(("down",), keys, -1)


def test_moe_from_tensors_per_expert_and_stacked(backend_runtime):
    rt = backend_runtime
    model, io = fixture_model(MOE_FIXTURE), fixture_io(MOE_FIXTURE)
    router = to_torch(*model[MOE_PREFIX + ".gate.weight"])
    per_expert = rt.moe_from_tensors("gptq", experts=[expert_tensors(model, e) for e in range(8)],
                                     router=router, top_k=2, renormalize=True, name=MOE_PREFIX)
    w13, w2 = stacked_tensors(model)
    stacked = rt.moe_from_tensors("gptq", w13=w13, w2=w2, top_k=2, name=MOE_PREFIX)
    from_checkpoint = rt.moe(nibble.Checkpoint.open(FIXTURES / MOE_FIXTURE), MOE_PREFIX)
    for moe in (per_expert, stacked):
        assert (moe.backend, moe.kernel) == (from_checkpoint.backend, from_checkpoint.kernel)
        assert (moe.num_experts, moe.top_k, moe.hidden) == (8, 2, 256)
    for m in (1, 7, 33):
        for tag, dt in (("", "f32"), ("bf16_", "bf16")):
            x = to_torch(*io[f"x_{tag}m{m}"])
            ids = torch.from_numpy(io[f"topk_ids_{tag}m{m}"][1])
            w = torch.from_numpy(io[f"topk_weights_{tag}m{m}"][1])
            expected = io[f"y_{tag}m{m}"][1]
            reference = from_checkpoint.experts(x, ids, w)
            for moe in (per_expert, stacked):
                y = torch.full((m, 256), float("nan"), dtype=x.dtype)
                moe.experts(x, ids, w, out=y)
                assert torch.isfinite(y).all()
                assert relative_error(as_float64(y), expected) <= declared_bound(rt, moe, dt)
                assert torch.equal(y, reference)
            routed = per_expert(x)
            assert relative_error(as_float64(routed), expected) <= declared_bound(
                rt, per_expert, dt)
    # Without a router, only the engine's routing runs.
    try:
        stacked(to_torch(*io["x_m1"]))
    except nibble.InvalidArgument as e:
        assert "router" in str(e)
    else:
        raise AssertionError("a block without a router routed")
