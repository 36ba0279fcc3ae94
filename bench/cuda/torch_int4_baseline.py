# PyTorch's own int4 weight-only matmul (aten._weight_int4pack_mm, group 128) and cuBLAS bf16
# (F.linear) on the same shapes, CUDA events, weights rotated over 16 copies (beyond L2); one JSON
# line per case, all of them to argv[1]. Timing only: the int4 weights are random. Usage:
#   python3 bench/cuda/torch_int4_baseline.py out.json
import json
import sys

import torch

SHAPES = [(4096, 4096), (4096, 14336), (14336, 4096)]  # (K, N)
ROWS = [1, 2, 4, 8, 16, 256, 1024]
GROUP = 128
COPIES = 16
CALLS = 200


def microseconds_per_call(fn, calls):
    """The median of three timed runs of `calls` calls of fn(i), after ten untimed ones."""
    for i in range(10):
        fn(i)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    runs = []
    for _ in range(3):
        start.record()
        for i in range(calls):
            fn(i)
        end.record()
        end.synchronize()
        runs.append(start.elapsed_time(end) * 1000 / calls)
    return sorted(runs)[1]


def int4_copies(K, N):
    """COPIES packed int4 weights of random codes, or None where this PyTorch cannot pack them."""
    codes = torch.randint(0, 16, (N, K), dtype=torch.int32, device="cuda")
    packed_u8 = ((codes[:, ::2] << 4) | codes[:, 1::2]).to(torch.uint8)
    try:
        return [torch.ops.aten._convert_weight_to_int4pack(packed_u8, 8) for _ in range(COPIES)]
    except (RuntimeError, AttributeError) as e:  # an op this PyTorch lacks
        print("int4 packing failed:", e, flush=True)
        return None


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: torch_int4_baseline.py OUT.json")
    torch.manual_seed(0)
    print("torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
    results = []
    for K, N in SHAPES:
        packed = int4_copies(K, N)
        scales_zeros = torch.empty(K // GROUP, N, 2, dtype=torch.bfloat16, device="cuda")
        scales_zeros[..., 0] = torch.rand(K // GROUP, N, device="cuda") * 0.01 + 0.001
        scales_zeros[..., 1] = 0
        sz = [scales_zeros.clone() for _ in range(COPIES)]
        dense = [torch.randn(N, K, dtype=torch.bfloat16, device="cuda") for _ in range(COPIES)]
        for M in ROWS:
            x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
            cublas = microseconds_per_call(
                lambda i: torch.nn.functional.linear(x, dense[i % COPIES]), CALLS)
            int4 = None
            if packed is not None:
                try:
                    int4 = microseconds_per_call(
                        lambda i: torch.ops.aten._weight_int4pack_mm(
                            x, packed[i % COPIES], GROUP, sz[i % COPIES]), CALLS)
                except (RuntimeError, AttributeError) as e:  # an op this PyTorch lacks
                    print("int4 matmul failed:", e, flush=True)
            case = {"K": K, "N": N, "M": M, "cublas_us": round(cublas, 2),
                    "torch_int4_us": None if int4 is None else round(int4, 2)}
            print(json.dumps(case), flush=True)
            results.append(case)
        del dense, packed
        torch.cuda.empty_cache()
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv)
