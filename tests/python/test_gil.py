"""A forward releases the GIL while the C++ forward runs: other Python threads run meanwhile.

How it is seen: a worker thread reads a counter that the main thread keeps incrementing, makes one
long call, and reads the counter again. The switch interval is raised far above the call's length,
so the interpreter never makes a thread that holds the GIL give it up: the main thread can count
between the worker's two reads only if the call released the GIL. Held through the call, the count
between the reads is exactly zero however loaded the machine is; released, the main thread counts
on through a call of a tenth of a second or more (the sizes below take that long on a two-core
machine, and far less would do: one count is enough)."""

import sys
import threading

import numpy as np
import pytest

import nibble
from conftest import FIXTURES, MOE_FIXTURE, MOE_PREFIX, make_runtime

# Far beyond any call below: until then, a thread that holds the GIL keeps it unless it blocks or
# releases it.
SWITCH_INTERVAL_S = 60.0
# Sizes that make one call last 0.14-0.15 s on a 2-vCPU machine (cpu_amx, one thread).
LINEAR_K = LINEAR_N = 4096
LINEAR_ROWS = 2048
MOE_ROWS = 16384


def counts_during(call):
    """How many times the main thread counted while a worker thread was inside ``call()``."""
    count = 0
    during = []
    errors = []
    returned = threading.Event()

    def worker():
        try:
            before = count
            call()
            during.append(count - before)
        except BaseException as e:  # reported below, in the main thread
            errors.append(e)
        finally:
            returned.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        thread = threading.Thread(target=worker)
        thread.start()
        # Each wait gives the GIL up, so the worker gets it back as soon as its call returns.
        while not returned.wait(0.0002):
            count += 1
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    return during[0]


@pytest.fixture(scope="module")
def rt():
    # One backend thread: the other core is the main thread's.
    return make_runtime(threads=1)


def big_linear(rt, k, n):
    """A random 4-bit GPTQ layer [n, k], group 128, from tensors as an engine holds them."""
    rng = np.random.default_rng(1)
    qweight = rng.integers(0, 2**32, size=(k // 8, n), dtype=np.uint32).view(np.int32)
    qzeros = np.full((k // 128, n // 8), 0x77777777, dtype=np.int32)  # v1 stores zero 8 as 7
    scales = (rng.random((k // 128, n)) * 0.02 + 0.001).astype(np.float16)
    return rt.linear_from_tensors("gptq", qweight=qweight, qzeros=qzeros, scales=scales, bits=4,
                                  group_size=128, name="big")


def test_linear_forward_releases_the_gil(rt):
    lin = big_linear(rt, LINEAR_K, LINEAR_N)
    x = np.random.default_rng(2).standard_normal((LINEAR_ROWS, LINEAR_K), np.float32)
    y = np.empty((LINEAR_ROWS, LINEAR_N), np.float32)
    assert counts_during(lambda: lin(x, out=y)) > 0


def test_moe_forwards_release_the_gil(rt):
    moe = rt.moe(nibble.Checkpoint.open(FIXTURES / MOE_FIXTURE), MOE_PREFIX)
    x = np.random.default_rng(3).standard_normal((MOE_ROWS, 256), np.float32)
    y = np.empty((MOE_ROWS, 256), np.float32)
    assert counts_during(lambda: moe(x, out=y)) > 0
    ids, weights = moe.route(x)
    assert counts_during(lambda: moe.experts(x, ids, weights, out=y)) > 0
