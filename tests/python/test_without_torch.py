"""`import nibble` works where neither torch nor numpy can be imported: outputs come back as
nibble.Tensor, inputs can be made from any buffer, and nibble.torch says what it needs."""

import os
import subprocess
import sys
import textwrap

from conftest import FIXTURES, LINEAR_PREFIX, PLUGIN_DIR

PROGRAM = textwrap.dedent(
    f"""
    import sys
    sys.modules["torch"] = None   # any import of them now raises ImportError
    sys.modules["numpy"] = None
    import array, math, random
    import nibble
    rt = nibble.Runtime(plugin_dirs=[{PLUGIN_DIR!r}], use_default_plugin_dir=False, threads=1)
    ck = nibble.Checkpoint.open({str(FIXTURES / "gptq_v1_sym_g128")!r})
    lin = rt.linear(ck, {LINEAR_PREFIX!r})
    random.seed(3)
    values = [random.gauss(0, 1) for _ in range(2 * 512)]
    x = nibble.Tensor([2, 512], "float32", array.array("f", values))
    y = lin(x)
    assert isinstance(y, nibble.Tensor) and y.shape == (2, 384), y
    rows = y.tolist()
    assert len(rows) == 2 and all(len(r) == 384 and all(math.isfinite(v) for v in r) for r in rows)
    out = nibble.Tensor([2, 384])
    assert lin(x, out=out) is out and out.tolist() == rows
    try:
        import nibble.torch
    except ImportError:
        print("ok")
    """
)


def test_import_without_torch_and_numpy():
    result = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                            env=dict(os.environ), timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
