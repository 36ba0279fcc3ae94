#!/usr/bin/env python3
"""What a call from Python costs beyond the C++ call: a small layer (256x256, 4-bit GPTQ, group
128, w4a16, M = 1, one thread) called N times as lin(x, out=y) from Python, and N times from C++
on the same tensors (nibble._nibble._bench_cpp_loop) in the same run, interleaved; prints the
median time per call of each and the difference in microseconds.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [--calls N] [--reps R]
"""

import argparse
import statistics
import time

import numpy as np

import nibble
from nibble import _nibble


def small_layer(runtime, k, n, seed=1):
    """A random GPTQ v1 symmetric layer [n, k], built from tensors as an engine would."""
    rng = np.random.default_rng(seed)
    groups = k // 128
    qweight = rng.integers(-(2**31), 2**31, size=(k // 8, n), dtype=np.int64).astype(np.int32)
    qzeros = np.full((groups, n // 8), 0x77777777, dtype=np.int32)  # v1 stores zero 8 as 7
    scales = (rng.random((groups, n)) * 0.02 + 0.001).astype(np.float16)
    return runtime.linear_from_tensors("gptq", qweight=qweight, qzeros=qzeros, scales=scales,
                                       bits=4, group_size=128, name="bench.linear")


def per_call_us(seconds, calls):
    return seconds / calls * 1e6


def python_loop(lin, x, y, calls):
    start = time.perf_counter()
    for _ in range(calls):
        lin(x, out=y)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000, help="calls per repetition")
    parser.add_argument("--reps", type=int, default=15, help="repetitions (medians reported)")
    parser.add_argument("--size", type=int, default=256, help="K = N")
    parser.add_argument("--backend", default="auto")
    args = parser.parse_args()

    rt = nibble.Runtime(backend=args.backend, threads=1)
    lin = small_layer(rt, args.size, args.size)
    inputs = {}
    try:
        import torch

        inputs["torch"] = (torch.randn(1, args.size), torch.empty(1, args.size))
    except ImportError:
        pass
    inputs["numpy"] = (np.random.default_rng(2).standard_normal((1, args.size), np.float32),
                       np.empty((1, args.size), np.float32))
    print(f"layer {args.size}x{args.size} w4a16 on {lin.backend}/{lin.kernel}, M = 1, 1 thread, "
          f"{args.calls} calls x {args.reps} repetitions")
    for library, (x, y) in inputs.items():
        for _ in range(3):  # warm up: workspace, caches, branch predictors
            python_loop(lin, x, y, args.calls // 10)
            _nibble._bench_cpp_loop(lin, x, y, args.calls // 10)
        py, cpp = [], []
        for _ in range(args.reps):
            py.append(per_call_us(python_loop(lin, x, y, args.calls), args.calls))
            cpp.append(per_call_us(_nibble._bench_cpp_loop(lin, x, y, args.calls), args.calls))
        py_us, cpp_us = statistics.median(py), statistics.median(cpp)
        print(f"{library:>6}: python lin(x, out=y) {py_us:7.2f} us/call   C++ forward "
              f"{cpp_us:7.2f} us/call   python adds {py_us - cpp_us:5.2f} us/call "
              f"(ratio {py_us / cpp_us:.2f})")


if __name__ == "__main__":
    main()
