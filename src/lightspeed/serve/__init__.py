"""``lightspeed serve``: an OpenAI-compatible HTTP server for the text models (docs/serve.md).

:mod:`.engine` runs the requests (a worker thread, a bounded queue, requests interleaved at token
boundaries); :mod:`.app` is the ASGI app (Starlette) answering the OpenAI routes; :func:`serve`
loads and compiles a model as ``lightspeed run`` does and runs the app on uvicorn, shutting down
gracefully on SIGTERM / SIGINT (no new requests; those in flight get ``grace_s`` to finish, then
are cancelled).  Needs the ``serve`` extra (``pip install 'lightspeed[serve]'``).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["ServeOptions", "serve", "served_model"]


@dataclass
class ServeOptions:
    """What ``lightspeed serve`` was asked for (``lightspeed.cli`` checks the values)."""

    model: str
    weights: str | None = None
    random: bool = False
    backend: str = "cpu"
    dtype: str = "float32"
    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 8
    max_queue: int = 64
    max_context: int = 2048
    max_tokens: int = 256
    search_budget: int = 3
    seed: int = 0
    system: str | None = None
    prefix_cache: bool = True  # whole KV pages of a prefix an earlier request wrote are reused
    grace_s: float = 5.0
    name: str | None = None  # the model id clients see (default: the family name)


def served_model(opts: ServeOptions, family: str, say: Any = None) -> Any:
    """Load and compile ``family`` as ``lightspeed run`` does; the :class:`~.app.ServedModel`."""
    from ..models import run as library
    from ..search import SearchOptions
    from .app import ServedModel
    from .engine import Engine

    tm = library.load_text_model(family, opts.weights, opts.random, opts.seed, dtype=opts.dtype,
                                 lazy=library.blocks_for(opts.backend))
    limit = tm.model.config.max_position_embeddings
    if limit is not None and opts.max_context > limit:
        raise library.RunError(f"--max-context {opts.max_context} exceeds the model's {limit} positions")
    search = SearchOptions(budget=opts.search_budget, seed=opts.seed)

    def make() -> Any:  # on the engine's thread: the programs are compiled where they run
        if tm.model.supports_paged:  # one batched step for all requests, over a paged KV cache
            return library.compile_batcher(tm, opts.backend, search, max_batch=opts.max_batch,
                                           max_context=opts.max_context, say=say or library.say,
                                           prefix_cache=opts.prefix_cache)
        # each request's own prefill and decode calls, interleaved
        return library.compile_generator(tm, opts.backend, search, say=say or library.say)

    tok = tm.tokenizer
    stops = set() if tm.random else set(tm.model.config.eos_token_ids) | set(tok.eos_ids)
    engine = Engine(make, tok, max_batch=opts.max_batch, max_queue=opts.max_queue, max_context=opts.max_context,
                    stop_ids=sorted(stops))

    def render_chat(messages: list[dict[str, str]]) -> str:
        if opts.system and not any(m["role"] == "system" for m in messages):
            messages = [{"role": "system", "content": opts.system}, *messages]
        if tok.chat_template:
            return tok.apply_chat_template(messages)
        # no template (a base model, the random models' byte tokenizer): a plain transcript
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"

    return ServedModel(opts.name or family, engine, tok, render_chat, opts.max_tokens, int(time.time()))


def serve(opts: ServeOptions, family: str) -> int:
    """Run the server until SIGTERM / SIGINT; returns the exit status."""
    import uvicorn

    from ..models import run as library
    from .app import build_app

    # the port first: a taken one fails before minutes of loading; port 0 picks a free one
    sock = socket.socket(socket.AF_INET6 if ":" in opts.host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((opts.host, opts.port))
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {opts.host}:{opts.port}: {e.strerror or e}") from None
    port = sock.getsockname()[1]
    served = served_model(opts, family)
    app = build_app(served)

    class Server(uvicorn.Server):
        _draining = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            # stop admitting at once, let the streams in flight end (or cancel them after grace_s),
            # then let uvicorn close the connections
            if not self._draining:
                self._draining = True
                library.say(f"lightspeed serve: shutting down (in-flight requests get {opts.grace_s:g} s)")
                import threading

                def drain() -> None:
                    served.engine.stop(opts.grace_s)
                    self.should_exit = True  # a clean exit (status 0), not uvicorn's re-raised signal

                threading.Thread(target=drain, daemon=True).start()
            else:
                super().handle_exit(sig, frame)

    config = uvicorn.Config(app, host=opts.host, port=opts.port, log_level="warning",
                            timeout_graceful_shutdown=int(opts.grace_s) + 5)
    server = Server(config)
    library.say(f"lightspeed serve: {served.id} on {opts.backend} at http://{opts.host}:{port}/v1 "
                f"(batch {opts.max_batch}, queue {opts.max_queue}, context {opts.max_context})")
    server.run(sockets=[sock])
    served.engine.stop(0)
    return 0
