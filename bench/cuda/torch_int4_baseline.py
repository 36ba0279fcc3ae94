# PyTorch's own int4 weight-only matmul (aten._weight_int4pack_mm, group 128) and cuBLAS bf16
# (F.linear) on the same shapes, CUDA events, weights rotated over 16 copies (beyond L2); one JSON
# line per case, all of them to argv[1]. Timing only: the int4 weights are random. Usage:
#   python3 bench/cuda/torch_int4_baseline.py out.json
import json, sys, torch
torch.manual_seed(0)
dev = "cuda"
print("torch", torch.__version__, torch.cuda.get_device_name(), flush=True)
shapes = [(4096, 4096), (4096, 14336), (14336, 4096)]
Ms = [1, 2, 4, 8, 16, 256, 1024]
G = 128
copies = 16
iters = 200
def timeit(fn, n):
    for i in range(10): fn(i)
    torch.cuda.synchronize()
    s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
    best = []
    for rep in range(3):
        s.record()
        for i in range(n): fn(i)
        e.record(); e.synchronize()
        best.append(s.elapsed_time(e) * 1000 / n)
    best.sort(); return best[1]
out = []
for K, N in shapes:
    wq = torch.randint(0, 16, (N, K), dtype=torch.int32, device=dev)
    packed_u8 = ((wq[:, ::2] << 4) | wq[:, 1::2]).to(torch.uint8)
    try:
        packed = [torch.ops.aten._convert_weight_to_int4pack(packed_u8, 8) for _ in range(copies)]
    except Exception as ex:
        print("int4pack failed:", ex, flush=True); packed = None
    sz = torch.empty(K // G, N, 2, dtype=torch.bfloat16, device=dev)
    sz[..., 0] = (torch.rand(K // G, N, device=dev) * 0.01 + 0.001).to(torch.bfloat16)
    sz[..., 1] = 0
    szs = [sz.clone() for _ in range(copies)]
    wb = [torch.randn(N, K, dtype=torch.bfloat16, device=dev) for _ in range(copies)]
    for M in Ms:
        x = torch.randn(M, K, dtype=torch.bfloat16, device=dev)
        t_blas = timeit(lambda i: torch.nn.functional.linear(x, wb[i % copies]), iters)
        t_int4 = None
        if packed is not None:
            try:
                t_int4 = timeit(lambda i: torch.ops.aten._weight_int4pack_mm(x, packed[i % copies], G, szs[i % copies]), iters)
            except Exception as ex:
                print("int4 mm failed:", ex, flush=True)
        r = {"K": K, "N": N, "M": M, "cublas_us": round(t_blas, 2), "torch_int4_us": None if t_int4 is None else round(t_int4, 2)}
        print(json.dumps(r), flush=True); out.append(r)
    del wb, packed; torch.cuda.empty_cache()
json.dump(out, open(sys.argv[1], "w"), indent=1)
