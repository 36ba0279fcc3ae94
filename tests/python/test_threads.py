"""Eight Python threads calling one layer at once get the results one thread gets, bit for bit:
the forwards run concurrently (each releases the GIL) on one prepared weight."""

import threading

import torch

import nibble
from conftest import FIXTURES, LINEAR_PREFIX, MOE_PREFIX

THREADS = 8
CALLS = 40


def run_in_threads(work):
    results = [None] * THREADS
    errors = []
    start = threading.Barrier(THREADS)

    def worker(i):
        try:
            start.wait()
            results[i] = work(i)
        except Exception as e:  # reported below, with the thread
            errors.append((i, e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def test_linear_from_eight_threads(runtime):
    lin = runtime.linear(nibble.Checkpoint.open(FIXTURES / "awq_gemm_g128"), LINEAR_PREFIX)
    gen = torch.Generator().manual_seed(7)
    inputs = [torch.randn(1 + 3 * i, 512, generator=gen).to(torch.bfloat16 if i % 2 else
                                                            torch.float32)
              for i in range(THREADS)]
    expected = [lin(x) for x in inputs]

    def work(i):
        out = torch.empty_like(expected[i])
        same = True
        for _ in range(CALLS):
            out.fill_(float("nan"))
            lin(inputs[i], out=out)
            same = same and torch.equal(out, expected[i])
        return same

    assert run_in_threads(work) == [True] * THREADS


def test_moe_from_eight_threads(runtime):
    moe = runtime.moe(nibble.Checkpoint.open(FIXTURES / "moe_gptq_e8_top2"), MOE_PREFIX)
    gen = torch.Generator().manual_seed(8)
    inputs = [torch.randn(2 + i, 256, generator=gen) for i in range(THREADS)]
    expected = [moe(x) for x in inputs]
    routed = [moe.route(x) for x in inputs]

    def work(i):
        return all(torch.equal(moe(inputs[i]), expected[i]) and
                   torch.equal(moe.experts(inputs[i], *routed[i]), expected[i])
                   for _ in range(CALLS // 4))

    assert run_in_threads(work) == [True] * THREADS
