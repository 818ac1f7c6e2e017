"""The PyTorch peer of benches/overhead: the same MLP, plain vs the ways Python users attribute
or release memory. Prints one tab-separated line per comparison:
name, A ns/iter, B ns/iter, median B/A, q1, q3 (same interleaving as the Rust side)."""
import gc
import time

import torch
from torch.profiler import ProfilerActivity, profile

torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(512, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 512),
)
x = torch.randn(1, 512)


def plain(n):
    for _ in range(n):
        y = model(x)
        del y


def profiled(n):
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
        plain(n)


def seed_loop(n):
    for _ in range(n):
        y = model(x)
        del y
        gc.collect()
        torch.cuda.empty_cache()


def per_iter(f, n):
    t = time.perf_counter_ns()
    f(n)
    return (time.perf_counter_ns() - t) / n


def quantile(v, p):
    s = sorted(v)
    return s[int((len(s) - 1) * p + 0.5)]


def interleave(rounds, n, a, b):
    per_iter(a, n)
    per_iter(b, n)
    pairs = []
    for r in range(rounds):
        if r % 2 == 0:
            ta = per_iter(a, n)
            pairs.append((ta, per_iter(b, n)))
        else:
            tb = per_iter(b, n)
            pairs.append((per_iter(a, n), tb))
    ratios = [b / a for a, b in pairs]
    return (quantile([p[0] for p in pairs], 0.5), quantile([p[1] for p in pairs], 0.5),
            quantile(ratios, 0.5), quantile(ratios, 0.25), quantile(ratios, 0.75))


def row(name, stats):
    print("\t".join([name] + [f"{v:.4f}" for v in stats]), flush=True)


with torch.no_grad():
    v = torch.__version__
    row(f"PyTorch {v} MLP: plain vs profile(profile_memory=True)", interleave(11, 300, plain, profiled))
    row(f"PyTorch {v} MLP: plain vs del + gc.collect + empty_cache", interleave(5, 20, plain, seed_loop))
