#!/usr/bin/env python3
"""PyTorch eager and torch.compile on the workloads of `kfuse_compare --device` (bench/device_bench.cpp).

    python3 bench/torch_gpu.py --device cuda [--quick] [--json torch.json]
    kfuse_compare --device cuda [--quick] --torch-json torch.json   # shows them side by side

Times are microseconds per evaluation: CUDA events around a loop on cuda, plain timers with no
synchronisation needed on cpu. The workload names (and sizes, --quick alike) must match
device_bench.cpp's, since the report joins on them.
"""
import argparse
import json
import time

import torch


def workloads(small):
    R, S = (2048, 1024) if small else (32768, 4096)
    E = (1 << 22) if small else (1 << 26)
    C = 1024 if small else 4096
    G = 1024 if small else 4096
    NB, BG = (4, 256) if small else (16, 1024)

    def chain(x):
        for _ in range(5):
            x = torch.exp(x * 0.5) - 1.0
        return x

    return [
        (f"log_softmax [{R},512]", [(R, 512)], lambda x: torch.log_softmax(x, -1)),
        (f"layer_norm [{R},512] w,b", [(R, 512), (512,), (512,)],
         lambda x, w, b: torch.nn.functional.layer_norm(x, (512,), w, b)),
        (f"softmax [{S},1024]", [(S, 1024)], lambda x: torch.softmax(x, -1)),
        (f"relu(a*b+c) {E >> 20}M", [(E,), (E,), (E,)], lambda a, b, c: torch.relu(a * b + c)),
        (f"sum axis 0 [{C},{C}]", [(C, C)], lambda x: x.sum(0)),
        (f"x - mean(x,0) [{C},{C}]", [(C, C)], lambda x: x - x.mean(0, keepdim=True)),
        ("10-op chain [8]", [(8,)], chain),
        # fp32 GEMM as kfuse computes it: no TF32 (torch's default for matmul, set in main()).
        (f"matmul [{G},{G}]x[{G},{G}]", [(G, G), (G, G)], lambda a, b: a @ b),
        (f"gelu(x@W+b) [{G},{G}]", [(G, G), (G, G), (G,)],
         lambda x, w, b: torch.nn.functional.gelu(x @ w + b)),
        (f"matmul x^T [{G},{G}]", [(G, G), (G, G)], lambda a, b: a.t() @ b),
        (f"matmul batched [{NB},{BG},{BG}]", [(NB, BG, BG), (NB, BG, BG)], lambda a, b: a @ b),
    ]


def time_us(fn, args, device, min_s):
    fn(*args)  # warm (and compile)
    n = 1
    while True:
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(n):
                fn(*args)
            end.record()
            end.synchronize()
            s = start.elapsed_time(end) * 1e-3
        else:
            t0 = time.perf_counter()
            for _ in range(n):
                fn(*args)
            s = time.perf_counter() - t0
        if s >= min_s or n >= 1 << 20:
            return s / n * 1e6
        n *= max(2, int(min_s / max(s, 1e-9) * 1.2))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    ap.add_argument("--json", help="write {workload: {eager_us, compile_us}} here")
    a = ap.parse_args()
    min_s = 0.05 if a.quick else 0.5
    torch.backends.cuda.matmul.allow_tf32 = False
    out = {}
    for name, shapes, fn in workloads(a.quick):
        args = [torch.randn(s, device=a.device) for s in shapes]
        row = {"eager_us": time_us(fn, args, a.device, min_s)}
        if not a.no_compile:
            try:
                row["compile_us"] = time_us(torch.compile(fn), args, a.device, min_s)
            except Exception as e:  # no compiler toolchain: report eager only
                row["compile_error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
        out[name] = row
        print(f"{name:32s} eager {row['eager_us']:10.1f} us   compile {row.get('compile_us', float('nan')):10.1f} us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
