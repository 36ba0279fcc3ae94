"""Runtime and Checkpoint: backends() says what `nibble backends --json` says, options resolve
as the CLI's do, checkpoints list their layers with the C++ fields, explain() tells the
placement."""

import json
import os
import subprocess

import nibble
from conftest import FIXTURES, LINEAR_PREFIX, MOE_PREFIX, PLUGIN_DIR, declared_bound, make_runtime


def test_backends_is_what_the_cli_says():
    cli = os.environ["NIBBLE_CLI"]
    printed = subprocess.run(
        [cli, "backends", "--json", "--plugin-dir", PLUGIN_DIR, "--no-default-plugin-dir"],
        capture_output=True, text=True, check=True).stdout
    assert make_runtime().backends() == json.loads(printed)


def test_backends_lists_kernels_with_bounds():
    report = make_runtime().backends()
    assert report["searched_dirs"] == [PLUGIN_DIR] or PLUGIN_DIR in report["searched_dirs"][0]
    names = {b["name"] for b in report["backends"]}
    assert {"cpu_amx", "npu_ref", "gpu_ref"} <= names
    for b in report["backends"]:
        for k in b["kernels"]:
            assert k["op"] in ("linear", "dense", "moe")
            assert set(k["error_bound"]) == {"f32", "f16", "bf16"}


def test_paths_may_be_path_objects():
    import pathlib

    rt = nibble.Runtime(plugin_dirs=[pathlib.Path(PLUGIN_DIR)], use_default_plugin_dir=False)
    assert any(b["available"] for b in rt.backends()["backends"])


def test_options_resolve_as_the_cli_does(monkeypatch):
    rt = make_runtime(backend="npu_ref", threads=3, mode="w4a8")
    assert (rt.backend, rt.threads, rt.mode) == ("npu_ref", 3, "w4a8")
    monkeypatch.setenv("NIBBLE_BACKEND", "gpu_ref")
    monkeypatch.setenv("NIBBLE_THREADS", "2")
    rt = make_runtime()
    assert (rt.backend, rt.threads, rt.mode) == ("gpu_ref", 2, "w4a16")
    rt = make_runtime(backend="npu_ref")  # an argument over the environment
    assert rt.backend == "npu_ref"
    ck = nibble.Checkpoint.open(FIXTURES / "gptq_v1_sym_g128")
    assert rt.linear(ck, LINEAR_PREFIX).backend == "npu_ref"


def test_checkpoint_lists_its_layers():
    ck = nibble.Checkpoint.open(FIXTURES / "gptq_v1_sym_g128")
    (layer,) = ck.linear_layers()
    assert (layer.prefix, layer.kind, layer.scheme) == (LINEAR_PREFIX, "quantized", "gptq_v1")
    assert (layer.K, layer.N, layer.bits, layer.group_size) == (512, 384, 4, 128)
    assert layer.has_bias and layer.symmetric and not layer.act_order and layer.dtype == "F16"
    assert ck.quant_config["bits"] == 4 and ck.config["model_type"] == "nibble_layer_fixture"
    assert ck.moe_blocks() == []
    moe_ck = nibble.Checkpoint.open(FIXTURES / "moe_gptq_e8_top2" / "model.safetensors")
    (block,) = moe_ck.moe_blocks()
    assert (block.prefix, block.style, block.num_experts, block.hidden, block.intermediate) == (
        MOE_PREFIX, "qwen", 8, 256, 384)
    assert (block.top_k, block.norm_topk_prob, block.scoring) == (2, True, "softmax")
    assert block.router_prefix == MOE_PREFIX + ".gate"
    assert [l.prefix for l in moe_ck.linear_layers()] == [MOE_PREFIX + ".gate"]
    assert moe_ck.linear_layers()[0].kind == "dense"


def test_explain_tells_the_placement():
    rt = make_runtime(backend="npu_ref,*")
    ck = nibble.Checkpoint.open(FIXTURES / "gptq_v1_sym_g128")
    lin = rt.linear(ck, LINEAR_PREFIX)
    text = lin.explain()
    assert text.startswith(f"{LINEAR_PREFIX} [linear]: npu_ref/linear_antiquant\n")
    assert "alternatives:" in text and "cpu_amx/" in text
    # A backend that cannot take the layer is passed over, with its reason.
    rt = make_runtime(backend="npu_ref,*", mode="w4a8")
    text = rt.linear(ck, LINEAR_PREFIX).explain()
    assert "passed over:" in text and "npu_ref" in text.split("passed over:")[1]
    moe = make_runtime().moe(nibble.Checkpoint.open(FIXTURES / "moe_gptq_e8_top2"), MOE_PREFIX)
    text = moe.explain()
    assert "[router]" in text and "[experts]" in text


def test_dense_layer_from_a_weight(runtime):
    import torch

    w = torch.randn(16, 64, dtype=torch.float64)
    b = torch.randn(16, dtype=torch.float64)
    lin = runtime.dense(w.float(), b.float(), name="router")
    x = torch.randn(5, 64)
    ref = x.double() @ w.T + b
    y = lin(x)
    assert float((y.double() - ref).norm() / ref.norm()) <= declared_bound(runtime, lin, "f32")
    assert lin.name == "router" and (lin.in_features, lin.out_features) == (64, 16)
