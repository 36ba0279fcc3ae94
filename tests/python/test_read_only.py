"""Read-only numpy arrays (np.frombuffer over bytes, a memmap opened "r", an array whose writeable
flag is off) are inputs like any other. numpy 1.24's DLPack export refuses them, so nibble takes
numpy arrays by the buffer protocol, still without a copy: the C++ API gets the arrays' own
addresses (nibble._last_call_pointers(), nibble._last_build_pointers()), and the results are
those of the same values passed as torch tensors (which cross by DLPack). A read-only out= is
refused by name: nibble would write there."""

import numpy as np
import pytest
import torch

import nibble
from conftest import FIXTURES, LINEAR_PREFIX, MOE_FIXTURE, MOE_PREFIX, fixture_io, fixture_model

LINEAR_FIXTURE = "gptq_v1_sym_g128"


def read_only(array):
    """A read-only copy of ``array``, over a bytes object as np.frombuffer gives one."""
    out = np.frombuffer(np.ascontiguousarray(array).tobytes(), array.dtype).reshape(array.shape)
    assert not out.flags.writeable
    return out


def pointers():
    return nibble._nibble._last_call_pointers()


@pytest.fixture(scope="module")
def lin(runtime):
    return runtime.linear(nibble.Checkpoint.open(FIXTURES / LINEAR_FIXTURE), LINEAR_PREFIX)


@pytest.fixture(scope="module")
def moe(runtime):
    return runtime.moe(nibble.Checkpoint.open(FIXTURES / MOE_FIXTURE), MOE_PREFIX)


@pytest.fixture(scope="module")
def x7():
    return fixture_io(LINEAR_FIXTURE)["x_m7"][1]


def test_a_read_only_x_is_read_where_it_lies(lin, x7):
    expected = lin(torch.from_numpy(x7.copy())).numpy()
    x = read_only(x7)
    y = lin(x)
    assert pointers()[0] == x.ctypes.data
    assert isinstance(y, np.ndarray) and y.flags.writeable
    assert np.array_equal(y, expected)
    out = np.full((7, 384), np.nan, np.float32)
    assert lin(x, out=out) is out
    assert pointers() == (x.ctypes.data, out.ctypes.data)
    assert np.array_equal(out, expected)
    # float16 and leading dimensions take the same road.
    x16 = read_only(x7.astype(np.float16)[:6].reshape(2, 3, 512))
    y16 = lin(x16)
    assert pointers()[0] == x16.ctypes.data
    assert y16.shape == (2, 3, 384) and y16.dtype == np.float16
    assert np.array_equal(y16, lin(torch.from_numpy(x16.copy())).numpy())


def test_rows_of_a_read_only_buffer_are_read_in_place(lin, x7):
    wide = np.zeros((7, 600), np.float32)
    wide[:, 16:528] = x7
    x = read_only(wide)[:, 16:528]
    assert not x.flags.c_contiguous and not x.flags.writeable
    y = lin(x)
    assert pointers()[0] == x.ctypes.data
    assert np.array_equal(y, lin(torch.from_numpy(x7.copy())).numpy())


def test_a_memmap_opened_read_only(lin, x7, tmp_path):
    path = tmp_path / "x.f32"
    x7.tofile(path)
    x = np.memmap(path, np.float32, "r", shape=(7, 512))
    assert not x.flags.writeable
    y = lin(x)
    assert pointers()[0] == x.ctypes.data
    assert np.array_equal(y, lin(torch.from_numpy(x7.copy())).numpy())


def test_read_only_routing(moe):
    io = fixture_io(MOE_FIXTURE)
    x, ids, weights = (io[f"{name}_m7"][1] for name in ("x", "topk_ids", "topk_weights"))
    expected = moe.experts(*(torch.from_numpy(a.copy()) for a in (x, ids, weights))).numpy()
    x_ro, ids_ro, weights_ro = read_only(x), read_only(ids), read_only(weights)
    y = moe.experts(x_ro, ids_ro, weights_ro)
    assert pointers()[0] == x_ro.ctypes.data
    assert np.array_equal(y, expected)
    out = np.full((7, 256), np.nan, np.float32)
    assert moe.experts(x_ro, ids_ro, weights_ro, out=out) is out
    assert np.array_equal(out, expected)
    # The router's own routing from a read-only x.
    routed = moe(x_ro)
    assert pointers()[0] == x_ro.ctypes.data
    assert np.array_equal(routed, moe(torch.from_numpy(x.copy())).numpy())
    ids_out, weights_out = moe.route(x_ro)
    assert ids_out.flags.writeable and weights_out.flags.writeable


def linear_tensors(model, prefix):
    parts = ("qweight", "qzeros", "scales", "g_idx", "bias")
    return {part: read_only(model[f"{prefix}.{part}"][1]) for part in parts
            if f"{prefix}.{part}" in model}


@pytest.mark.parametrize("name, fmt", [
    ("gptq_v1_sym_g128", dict(method="gptq", checkpoint_format="gptq")),
    ("awq_gemm_g128", dict(method="awq")),
])
def test_linear_from_read_only_tensors(runtime, name, fmt):
    tensors = linear_tensors(fixture_model(name), LINEAR_PREFIX)
    lin = runtime.linear_from_tensors(**fmt, **tensors, bits=4, group_size=128, name=LINEAR_PREFIX)
    assert nibble._nibble._last_build_pointers() == {k: a.ctypes.data for k, a in tensors.items()}
    from_checkpoint = runtime.linear(nibble.Checkpoint.open(FIXTURES / name), LINEAR_PREFIX)
    x = torch.from_numpy(fixture_io(name)["x_m7"][1].copy())
    assert torch.equal(lin(x), from_checkpoint(x))


def test_moe_from_read_only_tensors(runtime):
    model, io = fixture_model(MOE_FIXTURE), fixture_io(MOE_FIXTURE)
    experts = [{part: linear_tensors(model, f"{MOE_PREFIX}.experts.{e}.{part}_proj")
                for part in ("gate", "up", "down")} for e in range(8)]
    router = read_only(model[f"{MOE_PREFIX}.gate.weight"][1])
    per_expert = runtime.moe_from_tensors("gptq", experts=experts, router=router, top_k=2,
                                          renormalize=True, name=MOE_PREFIX)
    imported = nibble._nibble._last_build_pointers()
    assert imported["router"] == router.ctypes.data
    assert imported["experts[3].up.scales"] == experts[3]["up"]["scales"].ctypes.data
    assert len(imported) == 1 + sum(len(t) for ex in experts for t in ex.values())
    for e, ex in enumerate(experts):
        for part, tensors in ex.items():
            for key, array in tensors.items():
                assert imported[f"experts[{e}].{part}.{key}"] == array.ctypes.data

    # Stacked [E, ...] tensors, gate's output channels then up's along the last dimension (gate
    # and up share one g_idx, along K).
    def stack(parts, key):
        if key == "g_idx":
            return read_only(np.stack([ex[parts[0]][key] for ex in experts]))
        return read_only(np.stack([np.concatenate([ex[p][key] for p in parts], axis=-1)
                                   for ex in experts]))

    keys = [k for k in ("qweight", "qzeros", "scales", "g_idx") if k in experts[0]["gate"]]
    w13 = {k: stack(("gate", "up"), k) for k in keys}
    w2 = {k: stack(("down",), k) for k in keys}
    stacked = runtime.moe_from_tensors("gptq", w13=w13, w2=w2, top_k=2, name=MOE_PREFIX)
    assert nibble._nibble._last_build_pointers() == {
        **{f"w13.{k}": a.ctypes.data for k, a in w13.items()},
        **{f"w2.{k}": a.ctypes.data for k, a in w2.items()}}

    from_checkpoint = runtime.moe(nibble.Checkpoint.open(FIXTURES / MOE_FIXTURE), MOE_PREFIX)
    x, ids, weights = (torch.from_numpy(io[f"{name}_m7"][1].copy())
                       for name in ("x", "topk_ids", "topk_weights"))
    expected = from_checkpoint.experts(x, ids, weights)
    assert torch.equal(per_expert.experts(x, ids, weights), expected)
    assert torch.equal(stacked.experts(x, ids, weights), expected)
    assert torch.equal(per_expert(x), from_checkpoint(x))


def test_a_read_only_dense_weight(runtime):
    weight = read_only(np.random.default_rng(4).standard_normal((48, 64), np.float32))
    bias = read_only(np.arange(48, dtype=np.float32))
    dense = runtime.dense(weight, bias, name="engine.router")
    assert nibble._nibble._last_build_pointers() == {"weight": weight.ctypes.data,
                                                     "weight bias": bias.ctypes.data}
    from_torch = runtime.dense(torch.from_numpy(weight.copy()), torch.from_numpy(bias.copy()))
    x = np.random.default_rng(5).standard_normal((3, 64), np.float32)
    assert np.array_equal(dense(x), from_torch(x))


def test_a_read_only_out_is_refused(lin, moe, x7):
    out = read_only(np.zeros((7, 384), np.float32))
    with pytest.raises(nibble.InvalidArgument) as e:
        lin(x7, out=out)
    assert "out is a read-only numpy array" in str(e.value) and LINEAR_PREFIX in str(e.value)
    assert not out.any()
    io = fixture_io(MOE_FIXTURE)
    routing = [io[f"{name}_m7"][1] for name in ("x", "topk_ids", "topk_weights")]
    with pytest.raises(nibble.InvalidArgument, match="out is a read-only numpy array"):
        moe.experts(*routing, out=read_only(np.zeros((7, 256), np.float32)))
    with pytest.raises(nibble.InvalidArgument, match="out is a read-only numpy array"):
        moe(routing[0], out=read_only(np.zeros((7, 256), np.float32)))


@pytest.mark.parametrize(
    "x, mentions",
    [
        (read_only(np.zeros((3, 511), np.float32)), "last dimension must be 512"),
        (read_only(np.zeros((3, 512), np.float64)), "x has dtype float64"),
        (read_only(np.zeros((3, 512), np.int32)), "x has dtype int32"),
        (read_only(np.zeros((512, 3), np.float32)).T, "contiguous"),
        (read_only(np.zeros((3, 512), np.float32))[::-1], "backwards"),
        (read_only(np.zeros((3, 512), bool)), "x has numpy dtype bool"),
        (read_only(np.zeros((3, 512), ">f4")), "x has numpy dtype >f4"),
        (np.zeros((3, 512), "M8[s]"), "x (numpy dtype datetime64[s])"),
        # A field of a record array steps by the record, 5 bytes: no whole float32 elements.
        (np.zeros((3, 512), [("v", "<f4"), ("tag", "i1")])["v"], "whole elements of 4 bytes"),
    ],
)
def test_numpy_arrays_are_checked_as_before(lin, x, mentions):
    with pytest.raises(nibble.InvalidArgument) as e:
        lin(x)
    assert mentions in str(e.value) and LINEAR_PREFIX in str(e.value)


def test_a_read_only_quantized_tensor_is_named(runtime):
    tensors = linear_tensors(fixture_model(LINEAR_FIXTURE), LINEAR_PREFIX)
    tensors["qzeros"] = read_only(tensors["qzeros"][:, :47])
    with pytest.raises(nibble.InvalidArgument, match="engine.q.qzeros"):
        runtime.linear_from_tensors("gptq", **tensors, name="engine.q")
    tensors = linear_tensors(fixture_model(LINEAR_FIXTURE), LINEAR_PREFIX)
    tensors["scales"] = read_only(tensors["scales"].astype(bool))
    with pytest.raises(nibble.InvalidArgument, match="scales has numpy dtype bool"):
        runtime.linear_from_tensors("gptq", **tensors)


def test_a_subclass_with_its_own_export_takes_the_protocol(lin, x7):
    class Exporting(np.ndarray):
        def __dlpack__(self, stream=None):
            raise BufferError("this array exports itself")

    with pytest.raises(nibble.InvalidArgument, match="this array exports itself"):
        lin(x7.view(Exporting))
