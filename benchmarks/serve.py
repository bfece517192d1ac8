"""Concurrent streaming clients against ``lightspeed serve`` and, when installed, llama.cpp's own
server (``llama_cpp.server`` from the llama-cpp-python wheel in ../shared/wheels, plus its server
extras), same GGUF file, same machine, one after the other in one run.  llama-cpp-python's server
runs one request at a time (concurrent ones queue: ``--interrupt_requests False``; by default a new
request would cut the running one off).

    python benchmarks/serve.py [--clients 1,4,16] [--tokens 32] [--backend native] [--no-peer]
                               [--temperature T [--top-p P]] [--system TEXT] [--no-prefix-cache]

Each client streams one chat completion (greedy, or sampled with ``--temperature``/``--top-p``,
client i with seed i; ``--tokens`` tokens, a different short prompt per client) and records its
time to first token and its end; the table gives, per server and client count: requests, wall
time, generated tokens per second over all clients, mean and worst TTFT, and mean time per output
token as each client saw it.  ``--system``: every client's chat begins with that system message (a
shared prefix: lightspeed's prefix cache, llama.cpp's prompt cache); the warm-up request asks a
question no measured client asks, after the same system message (so every measured run finds it
cached, as a server that has answered once does).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ROOT.parent / "shared" / "wheels"


def wait_url(proc: subprocess.Popen, pattern: str, timeout: float = 600) -> str:
    deadline, seen = time.time() + timeout, []
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        m = re.search(pattern, line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return m.group(1)
    proc.kill()
    raise SystemExit("server did not start:\n" + "".join(seen[-20:]))


def start_lightspeed(weights: str, backend: str, clients: int, extra: tuple[str, ...] = ()
                     ) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "lightspeed", "serve", "llama", "--weights", weights,
                             "--backend", backend, "--port", "0", "--max-batch", str(clients),
                             "--max-queue", str(clients), *extra],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    return proc, wait_url(proc, r"at (http://127\.0\.0\.1:\d+)/v1")


def cpu_variants_without_amx() -> str:
    """A folder of the portable wheel's CPU backends without the AMX one: ggml picks the best
    variant the CPU reports, and on this VM the Sapphire Rapids (AMX) one dies with an illegal
    instruction on the server's batched prompt matmuls (the OS does not grant AMX state), so the
    server gets the best AVX-512 one instead (as decode-only runs do in effect)."""
    import importlib.util
    import tempfile

    src = Path(importlib.util.find_spec("llama_cpp").origin).parent.parent / "bin"
    out = Path(tempfile.mkdtemp(prefix="ggml-cpu-"))
    for lib in src.glob("libggml-cpu-*.so"):
        if "sapphirerapids" not in lib.name:
            (out / lib.name).symlink_to(lib)
    return str(out)


def start_llama_cpp(weights: str, threads: int, port: int = 18099) -> tuple[subprocess.Popen, str]:
    code = ("import ctypes, os, llama_cpp; "
            "g = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), 'lib', 'libggml.so.0')); "
            "g.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]; "
            f"g.ggml_backend_load_all_from_path({cpu_variants_without_amx()!r}.encode()); "
            "import sys; from llama_cpp.server.__main__ import main; "
            f"sys.argv = ['llama_cpp.server', '--model', {weights!r}, '--n_threads', '{threads}', "
            f"'--port', '{port}', '--n_ctx', '2048', '--interrupt_requests', 'False']; main()")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    return proc, wait_url(proc, r"Uvicorn running on (http://[\w.]+:\d+)")


def one_client(url: str, i: int, tokens: int, out: list, sampling: dict | None = None, system: str | None = None,
               question: str | None = None) -> None:
    import httpx

    messages = [{"role": "user", "content": question or f"Tell me fact number {i} about the sea."}]
    if system:
        messages.insert(0, {"role": "system", "content": system})
    body = {"model": "llama", "messages": messages, "max_tokens": tokens, "temperature": 0, "stream": True,
            **(dict(sampling, seed=i) if sampling else {})}
    t0 = time.perf_counter()
    first, n = None, 0
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                n += 1  # a chunk per token (llama.cpp's server sends no usage in streams)
                if first is None:
                    first = time.perf_counter()
    end = time.perf_counter()
    if n == 0:
        raise RuntimeError(f"client {i}: the stream carried no text")
    out.append((first - t0, end - t0, n))


def run_clients(url: str, clients: int, tokens: int, sampling: dict | None = None, system: str | None = None,
                question: str | None = None) -> dict:
    results: list = []
    threads = [threading.Thread(target=one_client, args=(url, i, tokens, results, sampling, system, question))
               for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    total = sum(n for _, _, n in results)
    ttfts = [f for f, _, _ in results]
    tpots = [(e - f) / (n - 1) for f, e, n in results if n > 1]
    return dict(clients=clients, wall=wall, tokens=total, tps=total / wall, ttft=sum(ttfts) / len(ttfts),
                ttft_max=max(ttfts), tpot=sum(tpots) / len(tpots) if tpots else float("nan"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", default=None, help="a GGUF file (default: SmolLM2's, fetched)")
    ap.add_argument("--backend", default="native")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--temperature", type=float, default=0.0, help="> 0: sampled requests (client i seeded i)")
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--system", default=None, help="a system message every client sends (both servers)")
    ap.add_argument("--no-prefix-cache", action="store_true", help="lightspeed serve --no-prefix-cache")
    args = ap.parse_args()
    sampling = None
    if args.temperature > 0:
        sampling = {"temperature": args.temperature, **({"top_p": args.top_p} if args.top_p is not None else {})}
    counts = [int(c) for c in args.clients.split(",")]
    weights = args.weights
    if weights is None:
        sys.path.insert(0, str(ROOT / "src"))
        from lightspeed.weights import default_weights

        weights = str(default_weights("llama", progress=True))
    extra = ("--no-prefix-cache",) if args.no_prefix_cache else ()
    label = "lightspeed " + args.backend + (" (no prefix cache)" if args.no_prefix_cache else "")
    servers = [(label, lambda: start_lightspeed(weights, args.backend, max(counts), extra))]
    if not args.no_peer:
        # looked up, not imported: loading llama.cpp into this (client) process slowed the server
        # under test ~4x on 2 cores (its threads compete with it)
        import importlib.util

        missing = [m for m in ("llama_cpp", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
                   if importlib.util.find_spec(m) is None]
        if not missing:
            servers.append(("llama.cpp server", lambda: start_llama_cpp(weights, os.cpu_count() or 2)))
        else:
            print(f"(llama.cpp's server is not installed: no {missing}; pip install {WHEELS}/llama_cpp_python-*.whl "
                  "'fastapi' 'sse-starlette' 'starlette-context' 'pydantic-settings')", file=sys.stderr)
    rows = []
    for name, start in servers:
        proc, url = start()
        try:
            # warm up on a question no measured client asks (a server's prompt cache would
            # otherwise give the first measured client its prompt's pages), with the system message
            # (its pages cached for every measured run alike: a server's steady state)
            run_clients(url, 1, 4, system=args.system, question="Say hello.")
            for c in counts:
                rows.append((name, run_clients(url, c, args.tokens, sampling, args.system)))
        except Exception as e:  # a peer that fails is reported, the others' rows stay
            print(f"{name}: failed: {type(e).__name__}: {e}", file=sys.stderr)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    how = "greedy" if sampling is None else ", ".join(f"{k} {v}" for k, v in sampling.items())
    system = f", a {len(args.system.split())}-word system message" if args.system else ""
    print(f"\n{Path(weights).name}, {args.tokens} tokens per client, {how}{system}, streamed, {os.cpu_count()} cores\n")
    print("| server | clients | wall s | tokens | tok/s (all clients) | TTFT mean ms | TTFT max ms | TPOT ms |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['clients']} | {r['wall']:.2f} | {r['tokens']} | {r['tps']:.1f} | {r['ttft'] * 1e3:.0f} | "
              f"{r['ttft_max'] * 1e3:.0f} | {r['tpot'] * 1e3:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
