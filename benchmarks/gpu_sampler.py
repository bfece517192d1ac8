"""The cuda token sampler alone (``Backend.sampler``) beside PyTorch sampling the same logits on the
same GPU, in the same process: median milliseconds per call over rows x vocabulary, for
temperature + top-p, top-k and plain temperature.

PyTorch's side is the Hugging Face recipe (``TopKLogitsWarper`` / ``TopPLogitsWarper``: a sort of
the vocabulary, a softmax, a cumulative sum, a mask, then ``torch.multinomial``), timed with CUDA
events like ours.  Both read logits already on the device and leave one id per row there; our
figure includes the copy of the ids to page-locked host memory the decode loop makes. ``host
ms``: the host's time to queue one call (what a decode loop pays per sampled token on the CPU).

    python benchmarks/gpu_sampler.py [--vocab 128256] [--rows 1 8 32] [--repeats 50]
"""

from __future__ import annotations

import argparse

import numpy as np

CASES = {  # name: (temperature, top_k, top_p)
    "T0.7 top-p0.9": (0.7, 0, 0.9),
    "T1 top-k50": (1.0, 50, 1.0),
    "T1": (1.0, 0, 1.0),
}


def torch_sample(torch, logits, temperature: float, top_k: int, top_p: float):
    z = logits.float() / temperature
    if top_k:
        kth = torch.topk(z, top_k, dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p < 1:
        s, idx = torch.sort(z, dim=-1)
        cum = s.softmax(-1).cumsum(-1)
        drop = cum <= 1 - top_p
        drop[:, -1] = False
        z = z.masked_fill(drop.scatter(1, idx, drop), float("-inf"))
    return torch.multinomial(z.softmax(-1), 1)


def timed(torch, fn, repeats: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    import torch

    import lightspeed as ls
    from lightspeed.backends.cuda.driver import DeviceArray
    from lightspeed.backends.cuda.executor import thread_stream

    sampler = ls.backends.get_backend("cuda").sampler()
    stream = thread_stream()
    rng = np.random.default_rng(0)
    print(f"sampler: cluster of {sampler.cluster} blocks a row; vocabulary {args.vocab}")
    print(f"{'case':<16} {'rows':>5} {'ours ms':>9} {'host ms':>8} {'torch ms':>9} {'ratio':>7}  same draw as host")
    from lightspeed.models.generate import sample_token

    for name, (t, k, p) in CASES.items():
        for rows in args.rows:
            x = (rng.standard_normal((rows, args.vocab)) * 3).astype(np.float32)
            dev = DeviceArray.from_host(x, stream)
            us = rng.random(rows)
            prm = np.array([[t, k, p, u] for u in us])
            ids = sampler.sample(dev, prm).result()["ids"]
            want = [sample_token(x[r].astype(np.float64), _Fixed(us[r]), temperature=t, top_k=k or None,
                                 top_p=p if p < 1 else None) for r in range(rows)]
            same = int(sum(int(a) == b for a, b in zip(ids, want)))

            xt = torch.from_numpy(x).cuda()
            ms_ours = _timed_ours(sampler, dev, prm, stream, args.repeats)
            ms_host = _host_ms(sampler, dev, prm, args.repeats)
            ms_torch = timed(torch, lambda xt=xt, t=t, k=k, p=p: torch_sample(torch, xt, t, k, p), args.repeats)
            print(f"{name:<16} {rows:>5} {ms_ours:>9.3f} {ms_host:>8.3f} {ms_torch:>9.3f} {ms_ours / ms_torch:>6.2f}x"
                  f"  {same}/{rows}")


class _Fixed:
    """A generator whose draw is a given uniform (the host sampler's reference for one u)."""

    def __init__(self, u: float):
        self.u = u

    def random(self) -> float:
        return self.u


def _host_ms(sampler, dev, prm, repeats: int) -> float:
    """Milliseconds of host time a call takes to queue its work (params upload, launch, copy and
    event), the median over ``repeats`` calls left unwaited until the end: what a decode loop pays
    on the host per sampled token, beside the kernel's GPU time."""
    import time

    times, pending = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        pending.append(sampler.sample(dev, prm))
        times.append((time.perf_counter() - t0) * 1e3)
    for p in pending:
        p.result()
    return float(np.median(times))


def _timed_ours(sampler, dev, prm, stream, repeats: int) -> float:
    """Milliseconds a call, the median of ``repeats`` (CUDA events around each)."""
    from lightspeed.backends.cuda import driver

    d = driver.device()
    sampler.sample(dev, prm).result()
    start, end = d.event(), d.event()
    times = []
    for _ in range(repeats):
        d.record(start, stream)
        sampler.sample(dev, prm)
        d.record(end, stream)
        times.append(d.elapsed(start, end) * 1e3)  # elapsed: seconds
    return float(np.median(times))


if __name__ == "__main__":
    main()
