"""Shared fixtures of the Python package's tests: where the fixtures and plugins are, a Runtime
per backend, the float64 reference tensors stored with the conformance fixtures, and the error
measure and bounds the conformance kit uses."""

import os
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import nibble  # noqa: E402
import safetensors_reader  # noqa: E402

FIXTURES = pathlib.Path(os.environ["NIBBLE_FIXTURES_DIR"])
TEST_DATA = pathlib.Path(os.environ["NIBBLE_TEST_DATA"])
PLUGIN_DIR = os.environ["NIBBLE_PLUGIN_DIR"]
LINEAR_FIXTURES = ["gptq_v1_sym_g128", "awq_gemm_g128"]
MOE_FIXTURE = "moe_gptq_e8_top2"
LINEAR_PREFIX = "model.layers.0.self_attn.q_proj"
MOE_PREFIX = "model.layers.0.mlp"

# The tests must not depend on the caller's NIBBLE_* settings.
for _var in ("NIBBLE_BACKEND", "NIBBLE_PLUGIN_PATH", "NIBBLE_THREADS", "NIBBLE_MODE",
             "NIBBLE_PLUGINS", "NIBBLE_CONFIG"):
    os.environ.pop(_var, None)


def make_runtime(**options):
    """A Runtime on the build tree's plugins only."""
    return nibble.Runtime(plugin_dirs=[PLUGIN_DIR], use_default_plugin_dir=False, **options)


def available_backends():
    rt = make_runtime()
    return [b["name"] for b in rt.backends()["backends"] if b["available"]]


BACKENDS = available_backends()


@pytest.fixture(scope="session")
def runtime():
    return make_runtime(threads=2)


@pytest.fixture(scope="session", params=BACKENDS)
def backend_runtime(request):
    """A Runtime that runs every layer on one backend (strict), for each available backend."""
    return make_runtime(backend=request.param, threads=2)


def fixture_io(name):
    return safetensors_reader.read(FIXTURES / name / "io.safetensors")


def fixture_model(name):
    return safetensors_reader.read(FIXTURES / name / "model.safetensors")


def declared_bound(rt, layer, dtype):
    """The error bound the kernel running ``layer`` declares for activations of ``dtype``
    ("f32", "f16" or "bf16")."""
    for b in rt.backends()["backends"]:
        if b["name"] == layer.backend:
            for k in b["kernels"]:
                if k["name"] == layer.kernel:
                    return k["error_bound"][dtype]
    raise AssertionError(f"kernel {layer.backend}/{layer.kernel} is not in backends()")


def relative_error(y, ref):
    """||y - ref|| / ||ref|| in float64, the conformance kit's measure."""
    y = np.asarray(y, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


def as_float64(t):
    """A torch tensor or numpy array as a float64 numpy array."""
    if hasattr(t, "detach"):
        return t.detach().double().numpy()
    return np.asarray(t, dtype=np.float64)
