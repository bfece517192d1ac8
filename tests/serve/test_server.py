"""``lightspeed serve`` as a real process on a loopback port, driven by the official ``openai``
client (streamed and not) and by raw HTTP for the error cases.  The model is the random llama
(``--random``, seed 0) on the cpu backend; the expected text comes from the same model generated
in this process on the reference backend (an independent runtime)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


def start_server(*extra: str) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "lightspeed", "serve", "llama", "--random", "--backend", "cpu",
                             "--port", "0", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    deadline = time.time() + 240
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
            return proc, m.group(1)
    proc.kill()
    raise AssertionError("server did not start:\n" + "".join(lines))


@pytest.fixture(scope="module")
def server():
    proc, url = start_server("--max-batch", "2", "--max-queue", "1", "--max-context", "512", "--grace", "2")
    yield url
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def reference():
    """Greedy completions of the random llama on the reference backend: prompt text -> new ids."""
    from lightspeed.models.generate import Generator
    from lightspeed.models.run import load_text_model

    tm = load_text_model("llama", random=True, seed=0, progress=False)
    gen = Generator(tm.model, tm.tensors, backend="reference")

    def complete(prompt: str, n: int) -> str:
        ids = gen.generate(tm.tokenizer.encode(prompt), n, stop_ids=()).new_ids
        return tm.tokenizer.decode(ids, skip_special=True)

    return complete


def client(url: str):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def chat_prompt(user: str) -> str:
    return f"user: {user}\nassistant:"  # the transcript a model without a chat template gets


def test_models_and_health(server):
    assert [m.id for m in client(server).models.list().data] == ["llama"]
    assert httpx.get(server + "/health").json()["status"] == "ok"


def test_completion_is_the_reference_text(server, reference):
    c = client(server)
    r = c.completions.create(model="llama", prompt="The capital of France is", max_tokens=12, temperature=0)
    assert r.choices[0].text == reference("The capital of France is", 12)
    assert r.choices[0].finish_reason == "length"
    n = len(b"The capital of France is") + 1  # the byte tokenizer's ids and its BOS
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (n, 12, n + 12)


def test_chat_streamed_equals_unstreamed_and_reference(server, reference):
    c = client(server)
    msgs = [{"role": "user", "content": "Hello there"}]
    whole = c.chat.completions.create(model="llama", messages=msgs, max_tokens=10, temperature=0)
    assert whole.choices[0].message.content == reference(chat_prompt("Hello there"), 10)
    parts, reasons, usage = [], [], None
    for chunk in c.chat.completions.create(model="llama", messages=msgs, max_tokens=10, temperature=0, stream=True,
                                           stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            parts.append(ch.delta.content or "")
            reasons.append(ch.finish_reason)
    assert "".join(parts) == whole.choices[0].message.content
    assert reasons[-1] == "length" and all(r is None for r in reasons[:-1])
    assert usage is not None and usage.completion_tokens == 10 and usage.prompt_tokens == whole.usage.prompt_tokens


def test_logprobs_are_a_distribution(server):
    r = client(server).chat.completions.create(model="llama", messages=[{"role": "user", "content": "x"}],
                                               max_tokens=3, temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == 3
    for entry in content:
        tops = [t.logprob for t in entry.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True) and all(t <= 0 for t in tops)
        assert abs(entry.logprob - tops[0]) < 1e-9  # greedy: the chosen token is the most likely one


def test_stop_string_cuts_the_text(server, reference):
    full = reference("Once upon a time", 16)
    stop = full[5:7]
    want = full[:full.index(stop)]
    r = client(server).completions.create(model="llama", prompt="Once upon a time", max_tokens=16, temperature=0,
                                          stop=[stop])
    assert r.choices[0].text == want and r.choices[0].finish_reason == "stop"
    streamed = "".join(ch.choices[0].text for ch in client(server).completions.create(
        model="llama", prompt="Once upon a time", max_tokens=16, temperature=0, stop=stop, stream=True) if ch.choices)
    assert streamed == want


def test_seeded_sampling_repeats(server):
    c = client(server)
    a, b = (c.completions.create(model="llama", prompt="abc", max_tokens=8, temperature=0.9, top_p=0.9,
                                 seed=7, extra_body={"top_k": 40}).choices[0].text for _ in range(2))
    assert a == b


def test_a_repeated_prefix_is_read_from_the_prefix_cache(server, reference):
    """Two completions whose prompts share their first 100 bytes (101 tokens with the BOS): the
    second reads the three whole 32-token pages the first wrote (usage's
    ``prompt_tokens_details.cached_tokens`` 96, also in /metrics) and its text is still the
    reference's; the first read none."""
    c = client(server)
    head = "The sea covers most of the planet, and its tides follow the moon; sailors knew this long ago. "
    head = (head * 2)[:100]
    before = _metric(server, "lightspeed_prompt_tokens_cached_total")
    first = c.completions.create(model="llama", prompt=head + "One", max_tokens=6, temperature=0)
    second = c.completions.create(model="llama", prompt=head + "Two", max_tokens=6, temperature=0)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == 96
    assert second.choices[0].text == reference(head + "Two", 6)
    assert _metric(server, "lightspeed_prompt_tokens_cached_total") == before + 96


def test_no_prefix_cache_computes_every_prompt():
    """``--no-prefix-cache``: the same two requests read nothing from the cache."""
    proc, url = start_server("--max-batch", "1", "--no-prefix-cache")
    try:
        c = client(url)
        head = ("The sea covers most of the planet, and its tides follow the moon. " * 2)[:100]
        for tail in ("One", "Two"):
            r = c.completions.create(model="llama", prompt=head + tail, max_tokens=2, temperature=0)
            assert r.usage.prompt_tokens_details.cached_tokens == 0
        assert _metric(url, "lightspeed_prompt_tokens_cached_total") == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _metric(url: str, name: str) -> float:
    """A counter's value from GET /metrics."""
    text = httpx.get(url + "/metrics").text
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(name + " ")))


def test_batch_invariance(server):
    """Each request's greedy text is the same alone and beside others."""
    c = client(server)
    prompts = ["one two three", "The quick brown fox", "lorem ipsum dolor sit amet, consectetur"]
    alone = [c.completions.create(model="llama", prompt=p, max_tokens=24, temperature=0).choices[0].text
             for p in prompts]
    together: list[str | None] = [None] * len(prompts)

    def run(i: int) -> None:
        together[i] = "".join(ch.choices[0].text for ch in client(server).completions.create(
            model="llama", prompt=prompts[i], max_tokens=24, temperature=0, stream=True) if ch.choices)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert together == alone


@pytest.mark.skipif(not __import__("lightspeed.backends", fromlist=["get_backend"]).get_backend("native").available(),
                    reason="no C compiler")
def test_sixteen_concurrent_requests_get_their_solo_tokens():
    """On native (one batched step for all requests, batch-invariant kernels): 16 concurrent
    greedy requests each get exactly the tokens they get alone, and the text of the batch-1
    prefill + decode programs (``lightspeed run``'s path) for the same prompt."""
    from lightspeed.models.generate import Generator
    from lightspeed.models.run import load_text_model

    proc, url = start_server("--backend", "native", "--max-batch", "16", "--max-queue", "16", "--max-context", "256")
    try:
        c = client(url)
        prompts = [f"request {i}: " + "abcdefghij"[: i % 10] * (1 + i % 4) for i in range(16)]
        alone = [c.completions.create(model="llama", prompt=p, max_tokens=20, temperature=0) for p in prompts]
        together: list = [None] * len(prompts)

        def run(i: int) -> None:
            together[i] = client(url).completions.create(model="llama", prompt=prompts[i], max_tokens=20,
                                                         temperature=0, logprobs=0)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert [t.choices[0].text for t in together] == [a.choices[0].text for a in alone]
        assert all(t.usage.completion_tokens == 20 for t in together)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    tm = load_text_model("llama", random=True, seed=0, progress=False)
    gen = Generator(tm.model, tm.tensors, backend="native")
    for p, a in zip(prompts, alone):
        ids = gen.generate(tm.tokenizer.encode(p), 20, stop_ids=()).new_ids
        assert a.choices[0].text == tm.tokenizer.decode(ids, skip_special=True), p


def post(url: str, body, **kw):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(url, content=data, headers={"Content-Type": "application/json"}, timeout=30, **kw)


@pytest.mark.parametrize("body, status, param", [
    (b"{not json", 400, None),
    (b"[1, 2]", 400, None),
    ({"prompt": "hi", "max_tokens": "8"}, 422, "max_tokens"),
    ({"prompt": "hi", "max_tokens": 0}, 422, "max_tokens"),
    ({"prompt": "hi", "temperature": -1}, 422, "temperature"),
    ({"prompt": "hi", "top_p": 0}, 422, "top_p"),
    ({"prompt": "hi", "stream": "yes"}, 422, "stream"),
    ({"prompt": "hi", "n": 2}, 422, "n"),
    ({"prompt": "hi", "stop": [1]}, 422, "stop"),
    ({"prompt": 5}, 422, "prompt"),
    ({"prompt": "hi", "max_tokens": 600}, 400, "max_tokens"),
    ({"prompt": "x" * 600}, 400, "prompt"),
])
def test_completion_errors(server, body, status, param):
    r = post(server + "/v1/completions", body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"]
    if param == "max_tokens" and status == 400:
        assert "512" in err["message"]  # the limits are in the message


@pytest.mark.parametrize("body, param", [
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, "top_logprobs"),
])
def test_chat_errors(server, body, param):
    r = post(server + "/v1/chat/completions", body)
    assert r.status_code == 422 and r.json()["error"]["param"] == param


def test_unknown_route_and_method(server):
    assert httpx.get(server + "/v1/nothing").status_code == 404
    assert httpx.get(server + "/v1/completions").status_code == 405


def _active(url: str) -> int:
    return httpx.get(url + "/health").json()["active"]


def _wait_idle(url: str, seconds: float = 20) -> float:
    t0 = time.time()
    while _active(url) or httpx.get(url + "/health").json()["queued"]:
        assert time.time() - t0 < seconds, "requests still active"
        time.sleep(0.05)
    return time.time() - t0


def test_disconnect_frees_the_slot(server):
    long = {"prompt": "go", "max_tokens": 500, "temperature": 0, "stream": True}
    with httpx.stream("POST", server + "/v1/completions", json=long, timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                break  # one token arrived: the request is running; now hang up
    assert _wait_idle(server) < 5
    metrics = httpx.get(server + "/metrics").text
    assert re.search(r'lightspeed_requests_total\{outcome="cancelled"\} [1-9]', metrics)


def test_queue_full_is_429_with_retry_after(server):
    """2 running + 1 queued fill this server (--max-batch 2 --max-queue 1): the next gets 429."""
    long = {"prompt": "go", "max_tokens": 500, "temperature": 0, "stream": True}
    streams = [httpx.stream("POST", server + "/v1/completions", json=long, timeout=30) for _ in range(3)]
    opened = []
    try:
        for s in streams:
            opened.append(s.__enter__())
            assert opened[-1].status_code == 200
        r = post(server + "/v1/completions", {"prompt": "hi", "max_tokens": 2})
        assert r.status_code == 429 and r.headers["Retry-After"] == "1"
        assert r.json()["error"]["type"] == "rate_limit_error"
    finally:
        for s in streams[:len(opened)]:
            s.__exit__(None, None, None)
    _wait_idle(server)
    r = post(server + "/v1/completions", {"prompt": "hi", "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200


def test_sigterm_ends_streams_and_exits():
    proc, url = start_server("--grace", "1")
    try:
        body = {"prompt": "go", "max_tokens": 2000, "temperature": 0, "stream": True}
        signalled = got_done = False
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
            for line in r.iter_lines():
                if line.startswith("data: {") and not signalled:
                    proc.send_signal(signal.SIGTERM)  # once: a second signal forces the exit
                    signalled = True  # read on to the end of the stream
                if line == "data: [DONE]":
                    got_done = True
        assert got_done  # the stream was ended properly, not cut
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
