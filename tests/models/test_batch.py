"""The paged batched step (models/batch.py): many sequences in one program call over a paged KV
cache.  References: the same model's batch-1 prefill + decode programs (the path ``lightspeed run``
takes) on the reference backend, which the paged logits must match at every token; on native a
sequence's logits must be bit for bit the same alone and beside others (batch invariance)."""

from __future__ import annotations

import numpy as np
import pytest

from lightspeed.backends import get_backend
from lightspeed.errors import InputError, UnsupportedError
from lightspeed.models import from_hf_config
from lightspeed.models.batch import PagedBatcher
from lightspeed.models.generate import Generator
from tests.models.tiny import hf_model

NATIVE = get_backend("native").available()
LENGTHS = (7, 1, 40, 13, 70)  # one page, a single token, two pages, a chunk boundary, three pages


def _prompts(seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(3, 256, n)] for n in LENGTHS]


@pytest.fixture(scope="module", params=["llama", "qwen3", "gemma3"])
def family(request):
    _, cfg, sd = hf_model(request.param)
    return request.param, from_hf_config(cfg), sd


def test_paged_step_matches_the_batch1_programs(family):
    """Five sequences of different lengths run together (prompt chunks of 5 rows beside the
    others' decode rows, the pool growing from 2 pages) give the logits of each one's own prefill
    + decode calls at every token, and the same greedy tokens; every page comes back."""
    name, model, sd = family
    gen = Generator(model, sd, backend="reference")
    batcher = PagedBatcher(model, sd, backend="reference", max_rows=12, chunk=5, max_context=128, pages=2)
    prompts = _prompts()
    want = [gen.generate(p, 20, keep_logits=True, stop_ids=()) for p in prompts]
    got = batcher.generate(prompts, 20, keep_logits=True, stop_ids=())
    for w, g in zip(want, got):
        assert g.new_ids == w.new_ids, name
        ref = np.array(w.logits)
        np.testing.assert_allclose(np.array(g.logits), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert batcher.n_pages > 2 and batcher.pages_in_use == 0


@pytest.mark.skipif(not NATIVE, reason="no C compiler")
def test_native_rows_do_not_depend_on_the_batch(family):
    """On native a sequence's logits are bit for bit the same alone and in a batch of five
    (other lengths, other page-table widths, prompt chunks beside decode rows)."""
    name, model, sd = family
    batcher = PagedBatcher(model, sd, backend="native", max_rows=12, chunk=5, max_context=128, pages=2)
    prompts = _prompts(1)
    alone = [batcher.generate([p], 20, keep_logits=True, stop_ids=())[0] for p in prompts]
    together = batcher.generate(prompts, 20, keep_logits=True, stop_ids=())
    for a, t in zip(alone, together):
        assert t.new_ids == a.new_ids, name
        for x, y in zip(a.logits, t.logits):
            assert np.array_equal(x, y), name


@pytest.mark.skipif(not NATIVE, reason="no C compiler")
def test_sampled_rows_are_drawn_together_with_each_sequences_own_draws(monkeypatch):
    """Sampled sequences in one batch: their rows go to the backend's sampler in one call, each
    with its own generator's draw, and give the tokens each sequence samples alone and the host
    sampler (numpy) gives; greedy and repetition-penalty rows beside them stay on the host."""
    from lightspeed.models import batch as batch_mod

    _, cfg, sd = hf_model("llama")
    model = from_hf_config(cfg)
    batcher = PagedBatcher(model, sd, backend="native", max_rows=12, chunk=5, max_context=128, pages=2)
    prompts = _prompts(2)[:4]
    opts = [dict(temperature=0.9, top_p=0.8, seed=1), dict(temperature=0.0), dict(temperature=1.2, top_k=20, seed=2),
            dict(temperature=0.7, repetition_penalty=1.2, seed=3)]
    real = batch_mod.token_sampler("native")
    rows_per_call = []

    class Counting:
        def sample(self, logits, params):
            rows_per_call.append(len(params))
            return real.sample(logits, params)

    monkeypatch.setattr(batch_mod, "token_sampler", lambda backend: Counting())
    seqs = [batcher.start(p, 12, stop_ids=(), **o) for p, o in zip(prompts, opts)]
    while any(not s.done for s in seqs):
        batcher.step([s for s in seqs if not s.done])
    together = [s.new_ids for s in seqs]
    assert max(rows_per_call) == 2  # the two sampled sequences' rows in one call
    alone = [batcher.generate([p], 12, stop_ids=(), **o)[0].new_ids for p, o in zip(prompts, opts)]
    monkeypatch.setattr(batch_mod, "token_sampler", lambda backend: None)
    from lightspeed.models import generate as gen_mod
    monkeypatch.setattr(gen_mod, "token_sampler", lambda backend: None)
    host = [batcher.generate([p], 12, stop_ids=(), **o)[0].new_ids for p, o in zip(prompts, opts)]
    assert together == alone == host


@pytest.mark.skipif(not NATIVE, reason="no C compiler")
def test_a_device_step_brings_back_token_ids_only(monkeypatch):
    """Where outputs live in device memory (cuda; here native told so) the paged program also
    gives each logit row's argmax and a step fetches token ids: the greedy rows' argmaxes, the
    sampled rows' draws (the sampler on the logits where they lie); the logits come back only for
    rows that need them (here a repetition penalty).  The tokens equal the host path's."""
    from lightspeed.models import batch as batch_mod

    _, cfg, sd = hf_model("llama")
    model = from_hf_config(cfg)
    prompts = _prompts(3)[:4]
    opts = [dict(temperature=0.0), dict(temperature=0.9, top_p=0.8, seed=1), dict(temperature=1.2, top_k=20, seed=2),
            dict(temperature=0.7, repetition_penalty=1.2, seed=3)]

    def run(batcher, which):
        seqs = [batcher.start(prompts[i], 10, stop_ids=(), **opts[i]) for i in which]
        while any(not s.done for s in seqs):
            batcher.step([s for s in seqs if not s.done])
        return [s.new_ids for s in seqs]

    def batcher():
        return PagedBatcher(model, sd, backend="native", max_rows=12, chunk=5, max_context=128, pages=2)

    on_host = run(batcher(), range(4))
    monkeypatch.setattr(type(get_backend("native")), "device_memory", True)
    device = batcher()
    assert "next_token" in device.program.output_names
    fetched, sampled = [], []
    launch = type(device.program).launch
    monkeypatch.setattr(type(device.program), "launch",
                        lambda self, *a, **k: fetched.append(tuple(k.get("fetch", ()))) or launch(self, *a, **k))
    real = batch_mod.token_sampler("native")

    class Counting:
        def sample(self, logits, params):
            sampled.append(len(params))
            return real.sample(logits, params)

    monkeypatch.setattr(batch_mod, "token_sampler", lambda backend: Counting())
    assert run(device, range(4)) == on_host
    assert ("next_token", "logits") in fetched and sampled  # the penalty row's logits; the sampled rows
    fetched.clear()
    sampled.clear()
    assert run(device, [0]) == on_host[:1]  # greedy alone: ids only, no sampler
    assert set(fetched) == {("next_token",)} and not sampled


@pytest.mark.skipif(not NATIVE, reason="no C compiler")
def test_few_and_many_rows_run_their_own_paged_program(monkeypatch):
    """Where a backend declares many-rows kernels (cuda's tensor-core tiles; here native told so,
    on a device as well) the paged program is one unless batch invariance is given up
    (``batch_invariant=False``); then it is two, searched at one row and at 8: a step of fewer
    than 8 rows launches the first, a busier one the second, both reading the same resident
    weights; the tokens equal one program's."""
    from lightspeed.backends.cuda.backend import MATMUL_MMA
    from lightspeed.search import BucketedProgram, SearchOptions

    _, cfg, sd = hf_model("llama")
    model = from_hf_config(cfg)
    prompts = _prompts(4)[:4]
    be = type(get_backend("native"))
    monkeypatch.setattr(be, "device_memory", True)
    plain = PagedBatcher(model, sd, backend="native", max_rows=12, chunk=5, max_context=128, pages=2)
    want = plain.generate(prompts, 8, stop_ids=()) + plain.generate(prompts[:1], 8, stop_ids=())
    monkeypatch.setattr(be, "ops", (*be.ops, MATMUL_MMA))  # declared, never offered: no rule makes it
    one = PagedBatcher(model, sd, backend="native", max_rows=12, chunk=5, max_context=128, pages=2,
                       search=SearchOptions(budget=3, seed=1))
    assert not isinstance(one.program, BucketedProgram)  # batch invariant by default: one program
    split = PagedBatcher(model, sd, backend="native", max_rows=12, chunk=5, max_context=128, pages=2,
                         search=SearchOptions(budget=3, seed=1), batch_invariant=False)
    assert isinstance(split.program, BucketedProgram) and len(split.program.buckets) == 2
    (few_rows, few), (many_rows, many) = split.program.buckets
    assert few_rows == {"s": (1, 7)} and many_rows["s"][0] == 8
    assert few._resident is many._resident is split.program._resident  # the weights held once
    rows = {id(few): [], id(many): []}
    for prog in (few, many):
        launch = prog.launch
        monkeypatch.setattr(prog, "launch", lambda inputs, _l=launch, _p=prog, **k: rows[id(_p)].append(
            len(inputs["input_ids"])) or _l(inputs, **k))
    got = split.generate(prompts, 8, stop_ids=()) + split.generate(prompts[:1], 8, stop_ids=())
    assert [g.new_ids for g in got] == [w.new_ids for w in want]
    assert rows[id(few)] and max(rows[id(few)]) < 8 and rows[id(many)] and min(rows[id(many)]) >= 8


@pytest.mark.skipif(not NATIVE, reason="no C compiler")
def test_a_pipelined_step_gives_the_same_tokens_as_waiting_for_each(monkeypatch):
    """On a device (native told so) a step of greedy decode rows queues the next one on its own
    token ids; the next step takes it when its rows are those, else drops it (a sequence that
    hit its stop token, a new prompt joining, one that reached its length, a sampled row).
    Every sequence's tokens equal the unpipelined batcher's, and most steps ran ahead."""
    _, cfg, sd = hf_model("llama")
    model = from_hf_config(cfg)
    monkeypatch.setattr(type(get_backend("native")), "device_memory", True)
    prompts = _prompts(5)[:4]

    def run(pipeline: bool, stops=()):
        b = PagedBatcher(model, sd, backend="native", max_rows=12, chunk=5, max_context=128, pages=2,
                         pipeline=pipeline)
        fed_ahead = []
        launch = b.program.launch
        last = {}

        def spy(inputs, **k):
            fed_ahead.append(inputs["input_ids"] is last.get("ids"))
            out = launch(inputs, **k)
            last["ids"] = out.value("next_token")
            return out
        b.program.launch = spy
        seqs = [b.start(p, n, stop_ids=stops) for p, n in zip(prompts[:3], (24, 5, 24))]
        for k in range(60):
            live = [s for s in seqs if not s.done]
            if not live:
                break
            if k == 16:  # a new prompt joins, and a sampled sequence
                seqs.append(b.start(prompts[3], 6, stop_ids=stops))
                seqs.append(b.start(prompts[0], 4, stop_ids=stops, temperature=0.8, seed=3))
            b.step([s for s in seqs if not s.done])
        assert all(s.done for s in seqs) and b.pages_in_use == 0
        return [s.new_ids for s in seqs], fed_ahead

    want, plain = run(False)
    assert not any(plain)
    stop = want[0][4]  # the first sequence's fifth token ends it (and any other that draws it)
    want_stopped, _ = run(False, (stop,))
    for stops, expect in (((), want), ((stop,), want_stopped)):
        got, fed = run(True, stops)
        assert got == expect
        assert sum(fed) >= 10, fed  # steps queued on the device's ids (15 of 32 launches without the stop)


CUDA = get_backend("cuda").available()


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU here")
def test_cuda_paged_steps_give_the_reference_tokens_pipelined_or_not():
    """The paged program on the GPU (its few-rows and many-rows buckets, token ids fetched, the
    next step queued on the device's ids): the greedy tokens of the reference backend's paged
    steps, with a prompt joining mid-way and a stop token, pipelined or not."""
    _, cfg, sd = hf_model("llama")
    model = from_hf_config(cfg)
    prompts = _prompts(6)[:4]

    def run(backend: str, **kw) -> list[list[int]]:
        b = PagedBatcher(model, sd, backend=backend, max_rows=12, chunk=5, max_context=128, pages=2, **kw)
        seqs = [b.start(p, 16, stop_ids=()) for p in prompts[:3]]
        for k in range(80):
            live = [s for s in seqs if not s.done]
            if not live:
                break
            if k == 12:
                seqs.append(b.start(prompts[3], 8, stop_ids=()))
            b.step([s for s in seqs if not s.done])
        assert all(s.done for s in seqs) and b.pages_in_use == 0
        return [s.new_ids for s in seqs]

    want = run("reference")
    assert run("cuda") == want
    assert run("cuda", pipeline=False) == want


def test_pages_follow_the_sequences():
    """Pages are taken as a sequence grows (one per 32 positions), given back when it ends or is
    cancelled, and reused; the pool doubles when it runs out, keeping the pages in use."""
    _, cfg, sd = hf_model("llama")
    model = from_hf_config(cfg)
    b = PagedBatcher(model, sd, backend="reference", max_rows=8, chunk=8, max_context=128, pages=1)
    a = b.start(list(range(3, 40)), 30, stop_ids=())  # 37 prompt tokens: 2 pages once fed
    c = b.start([5, 6, 7], 4, stop_ids=())
    while a.prefilling:
        b.step([a, c])
    assert len(a.pages) == 2 and len(c.pages) == 1
    kept = np.asarray(b.pools[0][0])[a.pages[0]].copy()  # positions 0-31: written once
    size = b.n_pages
    e = b.start(list(range(100, 190)), 2, stop_ids=())  # 90 prompt tokens: 3 more pages, the pool grows
    while e.prefilling:
        b.step([a, c, e])
    assert b.n_pages > size and np.array_equal(np.asarray(b.pools[0][0])[a.pages[0]], kept)
    while not c.done:
        b.step([a, c])
    assert c.pages == [] and c.stop_reason == "max_tokens"
    before = b.pages_in_use
    a.cancel()
    assert a.stop_reason == "cancelled" and a.pages == [] and b.pages_in_use == before - 2
    e.cancel()
    assert b.pages_in_use == 0
    d = b.start([9, 10], 3, stop_ids=())
    b.step([d])
    assert len(d.pages) == 1 and b.pages_in_use == 1
    assert not b.trim()  # a page is in use: the pool stays
    d.cancel()
    assert b.trim() and b.n_pages == 1 and b.free == [0]
    assert b.generate([[5, 6, 7]], 3, stop_ids=())[0].new_ids == \
        PagedBatcher(model, sd, backend="reference", pages=1).generate([[5, 6, 7]], 3, stop_ids=())[0].new_ids


@pytest.mark.skipif(not NATIVE, reason="no C compiler")
def test_a_shared_prefix_is_read_from_the_cache_bit_for_bit():
    """A sequence whose prompt begins with another's (70 shared tokens: two whole pages) takes
    those two pages from the prefix cache (``cached`` 64; the pages the same) once the other has
    written them, and its logits are bit for bit those of a batcher without the cache (native:
    batch invariant).  A prompt of exactly two pages takes one (its last token's page is
    computed).  A sequence that ends leaves its indexed pages idle, not in use."""
    _, cfg, sd = hf_model("llama")
    model = from_hf_config(cfg)
    rng = np.random.default_rng(5)
    shared = [int(t) for t in rng.integers(3, 256, 70)]
    prompts = [shared + [int(t) for t in rng.integers(3, 256, n)] for n in (9, 4)] + [shared[:64]]
    plain = PagedBatcher(model, sd, backend="native", max_rows=12, chunk=5, max_context=256, pages=2,
                         prefix_cache=False)
    want = [plain.generate([p], 12, keep_logits=True, stop_ids=())[0] for p in prompts]
    b = PagedBatcher(model, sd, backend="native", max_rows=12, chunk=5, max_context=256, pages=2)
    first = b.start(prompts[0], 12, keep_logits=True, stop_ids=())
    while first.prefilling:
        b.step([first])
    held = first.pages[:2]
    second = b.start(prompts[1], 12, keep_logits=True, stop_ids=())
    b.step([first, second])  # second joins while first decodes: its first 64 rows are cached
    assert second.cached == 64 and second.pages[:2] == held and b.pages_cached >= 2
    while not (first.done and second.done):
        b.step([s for s in (first, second) if not s.done])
    assert b.pages_in_use == 0 and b.pages_cached >= 2
    third = b.generate([prompts[2]], 12, keep_logits=True, stop_ids=())[0]
    for w, g in zip(want, [first.result(), second.result(), third]):
        assert g.new_ids == w.new_ids
        assert all(np.array_equal(x, y) for x, y in zip(w.logits, g.logits))


@pytest.mark.skipif(not NATIVE, reason="no C compiler")
def test_prompts_arriving_together_compute_their_shared_pages_once():
    """Three prompts with the same first 70 tokens started together: the first computes the two
    whole shared pages, the others wait for them (no prompt rows of theirs in those steps) and take
    them (``cached`` 64, the same pages), with the logits of a batcher without the cache bit for
    bit.  A prompt waiting for a sequence that is cancelled computes the page itself."""
    _, cfg, sd = hf_model("llama")
    model = from_hf_config(cfg)
    rng = np.random.default_rng(9)
    shared = [int(t) for t in rng.integers(3, 256, 70)]
    prompts = [shared + [int(t) for t in rng.integers(3, 256, n)] for n in (5, 11, 2)]
    plain = PagedBatcher(model, sd, backend="native", max_rows=16, chunk=8, max_context=256, pages=2,
                         prefix_cache=False)
    want = plain.generate(prompts, 10, keep_logits=True, stop_ids=())
    b = PagedBatcher(model, sd, backend="native", max_rows=16, chunk=8, max_context=256, pages=2)
    seqs = [b.start(p, 10, keep_logits=True, stop_ids=()) for p in prompts]
    b.step(seqs)
    assert [s.fed for s in seqs] == [8, 0, 0]  # the others wait for the first's page 0
    shared_pages = None
    while not all(s.done for s in seqs):
        b.step([s for s in seqs if not s.done])
        if shared_pages is None and seqs[1].cached == seqs[2].cached == 64:  # (a page at a time: 32, then 64)
            shared_pages = seqs[0].pages[:2]
            assert all(s.pages[:2] == shared_pages for s in seqs)
    assert shared_pages is not None and [s.cached for s in seqs] == [0, 64, 64]
    for w, s in zip(want, seqs):
        g = s.result()
        assert g.new_ids == w.new_ids and all(np.array_equal(x, y) for x, y in zip(w.logits, g.logits))
    firsts = [b.start(p, 2, stop_ids=()) for p in ([int(t) for t in rng.integers(3, 256, 80)],) * 2]
    b.step(firsts)
    assert firsts[0].fed == 8 and firsts[1].fed == 0  # the second waits for the first's page
    firsts[0].cancel()
    b.step(firsts[1:])
    assert firsts[1].fed == 8 and firsts[1].cached == 0


def test_idle_cached_pages_are_evicted_before_the_pool_grows():
    """With every page idle in the prefix index and none free, a new sequence takes the least
    recently used idle pages that no indexed page follows (the pool does not grow), and a prompt
    whose pages went is computed again (it gets the uncached tokens); trim empties the index."""
    _, cfg, sd = hf_model("llama")
    model = from_hf_config(cfg)
    b = PagedBatcher(model, sd, backend="reference", max_rows=8, chunk=8, max_context=256, pages=4)
    a_prompt = list(range(3, 100))  # 97 tokens: pages 0-2 whole and indexed, page 3 partly written
    b.generate([a_prompt], 2, stop_ids=())
    assert b.pages_in_use == 0 and b.pages_cached == 3 and len(b.free) == 1
    other = b.start([200 + (t % 50) for t in range(70)], 2, stop_ids=())  # 3 pages: the free one, two idle ones
    while not other.done:
        b.step([other])
    # no growth: a's pages 2 and 1 went (in that order: page 1 had page 2 after it); a's page 0
    # and other's two whole pages are indexed
    assert b.n_pages == 4 and b.pages_cached == 3 and b.pages_in_use == 0
    again = b.start(a_prompt, 2, stop_ids=())
    b.step([again])
    assert again.cached == 32  # only a's first page was left
    while not again.done:
        b.step([again])
    plain = PagedBatcher(model, sd, backend="reference", max_rows=8, chunk=8, max_context=128, pages=4,
                         prefix_cache=False)
    assert again.new_ids == plain.generate([a_prompt], 2, stop_ids=())[0].new_ids
    b.generate([list(range(3, 200))], 2, stop_ids=())  # 199 tokens: the pool grows
    assert b.n_pages > 4 and b.trim() and b.pages_cached == 0 and b.n_pages == 4


def test_bad_requests_are_refused():
    _, cfg, sd = hf_model("llama")
    model = from_hf_config(cfg)
    b = PagedBatcher(model, sd, backend="reference", max_rows=4, chunk=2, max_context=16, pages=1)
    with pytest.raises(InputError, match="empty"):
        b.start([], 4)
    with pytest.raises(InputError, match="outside the vocabulary"):
        b.start([1, 999], 4)
    with pytest.raises(InputError, match="exceed the context of 16"):
        b.start(list(range(10)), 7)
    with pytest.raises(ValueError, match="max_new_tokens"):
        b.start([1], 0)
    with pytest.raises(ValueError, match="temperature"):
        b.start([1], 2, temperature=-1.0)
    with pytest.raises(ValueError, match="max_rows"):
        PagedBatcher(model, sd, backend="reference", max_rows=65)
    seqs = [b.start([3 + i], 2, stop_ids=()) for i in range(5)]
    for s in seqs:
        b.step([s])  # each fed its one prompt token: now decoding
    with pytest.raises(InputError, match="at most 4 sequences"):
        b.step(seqs)


def test_a_family_without_a_paged_step_says_so():
    from lightspeed.models.run import load_text_model

    tm = load_text_model("gemma4_moe", random=True, seed=0, progress=False)
    assert not tm.model.supports_paged
    with pytest.raises(UnsupportedError, match="no paged"):
        tm.model.paged_graph()
