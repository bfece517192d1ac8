"""The HTTP side of ``lightspeed serve``: an OpenAI-compatible ASGI app (Starlette) over an
:class:`~.engine.Engine`.

Routes: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (server-sent events with
``"stream": true``, else one JSON body; usage counts in both), ``GET /v1/models``, ``GET /health``
and Prometheus text at ``GET /metrics``.  Errors use OpenAI's shape (``{"error": {"message", "type",
"param", "code"}}``): 400 for a body that is not a JSON object or a prompt that does not fit, 422
for a field of the wrong type or range (the field named in ``param``), 429 with ``Retry-After``
when the queue is full, 503 while shutting down.  A client that disconnects cancels its request
at the next token boundary.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .engine import Engine, Event, QueueFull, Request, ShuttingDown

__all__ = ["build_app", "ServedModel", "ApiError", "parse_chat", "parse_completion"]

MAX_STOPS = 4  # OpenAI's limit on stop strings
MAX_TOP_LOGPROBS = 20


class ApiError(Exception):
    """An error answered as OpenAI does: status, message, the offending parameter."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error",
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind
        self.headers = dict(headers or {})


@dataclass
class ServedModel:
    """What the app serves: its id (the name clients send), the engine, the tokenizer, how a
    chat is turned into prompt text (the model's template), and the default completion length."""

    id: str
    engine: Engine
    tokenizer: Any
    render_chat: Callable[[list[dict[str, str]]], str]
    default_max_tokens: int = 256
    created: int = 0


# ---------------------------------------------------------------------- request bodies
def _field(body: Mapping[str, Any], name: str, kinds: tuple[type, ...], what: str, default: Any = None,
           lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> Any:
    """``body[name]`` checked: one of ``kinds`` (bool is never an int or a number here), within
    [lo, hi] (``lo_open``: above lo); absent or null gives ``default``."""
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds):
        raise ApiError(422, f"'{name}' must be {what}, got {json.dumps(v)[:60]}", name)
    if lo is not None and (v <= lo if lo_open else v < lo) or hi is not None and v > hi:
        raise ApiError(422, f"'{name}' must be {what}, got {v}", name)
    return v


def _sampling(body: Mapping[str, Any]) -> dict[str, Any]:
    n = _field(body, "n", (int,), "1 (one choice per request)", 1)
    if n != 1:
        raise ApiError(422, "'n' must be 1: lightspeed serve returns one choice per request", "n")
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= MAX_STOPS:
        stops = tuple(stop)
    else:
        raise ApiError(422, f"'stop' must be a string or a list of at most {MAX_STOPS} strings", "stop")
    if any(s == "" for s in stops):
        raise ApiError(422, "'stop' strings must not be empty", "stop")
    return dict(
        temperature=float(_field(body, "temperature", (int, float), "a number in [0, 2]", 1.0, 0, 2)),
        top_p=_field(body, "top_p", (int, float), "a number in (0, 1]", None, 0, 1, lo_open=True),
        top_k=_field(body, "top_k", (int,), "an integer >= 1", None, 1),
        seed=_field(body, "seed", (int,), "an integer", None),
        stop=stops,
        stream=_field(body, "stream", (bool,), "true or false", False),
    )


def _max_tokens(body: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        v = _field(body, name, (int,), "an integer >= 1", None, 1)
        if v is not None:
            return v
    return None


def _include_usage(body: Mapping[str, Any]) -> bool:
    opts = body.get("stream_options")
    if opts is None:
        return False
    if not isinstance(opts, dict):
        raise ApiError(422, "'stream_options' must be an object", "stream_options")
    return bool(_field(opts, "include_usage", (bool,), "true or false", False))


def _text_of(content: Any, where: str) -> str:
    """A message's content: a string, or a list of text parts ({"type": "text", "text": ...})."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise ApiError(422, f"'{where}' parts must be text parts ({{\"type\": \"text\", \"text\": ...}}); "
                                    "this model reads text only", where)
            parts.append(part["text"])
        return "".join(parts)
    raise ApiError(422, f"'{where}' must be a string or a list of text parts", where)


def parse_chat(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a chat completion request, checked."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(422, "'messages' must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(422, f"'messages[{i}]' must be an object with a string 'role'", f"messages[{i}].role")
        if m["role"] not in ("system", "developer", "user", "assistant"):
            raise ApiError(422, f"'messages[{i}].role' must be system, developer, user or assistant, got "
                                f"{m['role']!r}", f"messages[{i}].role")
        role = "system" if m["role"] == "developer" else m["role"]
        out.append({"role": role, "content": _text_of(m.get("content"), f"messages[{i}].content")})
    logprobs = _field(body, "logprobs", (bool,), "true or false", False)
    top = _field(body, "top_logprobs", (int,), f"an integer in [0, {MAX_TOP_LOGPROBS}]", None, 0, MAX_TOP_LOGPROBS)
    if top is not None and not logprobs:
        raise ApiError(422, "'top_logprobs' needs 'logprobs': true", "top_logprobs")
    return dict(messages=out, max_tokens=_max_tokens(body, "max_completion_tokens", "max_tokens"),
                logprobs=(top or 0) if logprobs else None, include_usage=_include_usage(body), **_sampling(body))


def parse_completion(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a (legacy) completion request, checked: one prompt string."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise ApiError(422, "'prompt' must be a non-empty string (one prompt per request)", "prompt")
    logprobs = _field(body, "logprobs", (int,), f"an integer in [0, {MAX_TOP_LOGPROBS}]", None, 0, MAX_TOP_LOGPROBS)
    echo = _field(body, "echo", (bool,), "true or false", False)
    if echo:
        raise ApiError(422, "'echo' is not supported", "echo")
    return dict(prompt=prompt, max_tokens=_max_tokens(body, "max_tokens"), logprobs=logprobs,
                include_usage=_include_usage(body), **_sampling(body))


# ---------------------------------------------------------------------- the app
def build_app(served: ServedModel, *, retry_after_s: int = 1) -> Any:
    """The Starlette app serving ``served``."""
    from starlette.applications import Starlette
    from starlette.requests import Request as HttpRequest
    from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
    from starlette.routing import Route

    engine, tok = served.engine, served.tokenizer

    def error(e: ApiError) -> Response:
        return JSONResponse({"error": {"message": e.message, "type": e.kind, "param": e.param, "code": e.status}},
                            status_code=e.status, headers=e.headers)

    async def body_of(request: HttpRequest) -> dict[str, Any]:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the request body is not valid JSON: {e}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        return body

    def make_request(prompt_ids: list[int], fields: dict[str, Any]) -> Request:
        n = len(prompt_ids)
        room = engine.max_context - n
        if room < 1:
            raise ApiError(400, f"the prompt is {n} tokens; this server takes at most {engine.max_context - 1} "
                                f"prompt tokens ({engine.max_context} tokens of context, prompt and completion)",
                           "messages" if "messages" in fields else "prompt")
        want = fields["max_tokens"]
        if want is not None and want > room:
            raise ApiError(400, f"the prompt is {n} tokens and max_tokens is {want}: {n + want} tokens exceed this "
                                f"server's context of {engine.max_context} (at most {room} completion tokens "
                                f"for this prompt)", "max_tokens")
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        req = Request(prompt_ids, want if want is not None else min(served.default_max_tokens, room),
                      temperature=fields["temperature"], top_k=fields["top_k"], top_p=fields["top_p"],
                      seed=fields["seed"], stop=fields["stop"], logprobs=fields["logprobs"],
                      notify=lambda: loop.call_soon_threadsafe(wake.set), wake=wake)
        try:
            engine.submit(req)
        except QueueFull as e:
            raise ApiError(429, f"server busy: {e}; retry later", kind="rate_limit_error",
                           headers={"Retry-After": str(retry_after_s)}) from None
        except ShuttingDown as e:
            raise ApiError(503, str(e), kind="server_error") from None
        return req

    async def events(req: Request) -> AsyncIterator[Event]:
        """The request's events as the worker reports them; cancels it if the consumer goes away."""
        try:
            while True:
                await req.wake.wait()
                req.wake.clear()
                while req.events:
                    ev = req.events.popleft()
                    yield ev
                    if ev.finish is not None:
                        return
        finally:
            req.cancel()  # a no-op once finished; else the worker drops it at the next token boundary

    async def collect(request: HttpRequest, req: Request) -> tuple[str, str, list[dict[str, Any]]]:
        """Every event of ``req`` for a non-streamed answer; a client that goes away cancels it."""
        text, probs = [], []
        gen = events(req)
        watcher = asyncio.create_task(_watch_disconnect(request, req))
        try:
            async for ev in gen:
                if ev.error is not None:
                    raise ApiError(500, f"generation failed: {ev.error}", kind="server_error")
                text.append(ev.text)
                probs.extend(ev.logprobs)
                if ev.finish is not None:
                    return "".join(text), ev.finish, probs
            raise ApiError(500, "generation ended without a finish", kind="server_error")
        finally:
            watcher.cancel()
            await gen.aclose()

    def usage(req: Request) -> dict[str, int]:
        return {"prompt_tokens": len(req.prompt_ids), "completion_tokens": req.completion_tokens,
                "total_tokens": len(req.prompt_ids) + req.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": req.cached_tokens}}

    def chat_logprobs(probs: list[dict[str, Any]]) -> dict[str, Any]:
        def entry(p: dict[str, Any]) -> dict[str, Any]:
            return {"token": p["token"], "logprob": p["logprob"], "bytes": list(p["token"].encode()),
                    "top_logprobs": [{"token": t["token"], "logprob": t["logprob"], "bytes": list(t["token"].encode())}
                                     for t in p.get("top", [])]}
        return {"content": [entry(p) for p in probs]}

    def completion_logprobs(probs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"tokens": [p["token"] for p in probs], "token_logprobs": [p["logprob"] for p in probs],
                "top_logprobs": [{t["token"]: t["logprob"] for t in p.get("top", [])} for p in probs],
                "text_offset": []}

    def finish_reason(reason: str) -> str:
        return reason if reason in ("stop", "length") else "stop"  # cancelled streams end as stopped

    async def respond(request: HttpRequest, req: Request, fields: dict[str, Any], chat_api: bool) -> Response:
        """The answer to ``req``: one JSON body, or an SSE stream of chunks (the chat API's chunks
        carry deltas and open with the assistant role; the completion API's carry text)."""
        prefix, whole, part = (("chatcmpl", "chat.completion", "chat.completion.chunk") if chat_api
                               else ("cmpl", "text_completion", "text_completion"))
        head = {"id": f"{prefix}-{uuid.uuid4().hex[:24]}", "created": int(time.time()), "model": served.id,
                "system_fingerprint": "lightspeed"}
        fmt = chat_logprobs if chat_api else completion_logprobs

        def choice(text: str, probs: list[dict[str, Any]], reason: str | None, streamed: bool) -> dict[str, Any]:
            if not chat_api:
                body: dict[str, Any] = {"text": text}
            elif streamed:
                body = {"delta": {"content": text} if text else {}}
            else:
                body = {"message": {"role": "assistant", "content": text}}
            return {"index": 0, **body, "logprobs": fmt(probs) if fields["logprobs"] is not None else None,
                    "finish_reason": finish_reason(reason) if reason else None}

        if not fields["stream"]:
            try:
                text, reason, probs = await collect(request, req)
            except ApiError as e:
                return error(e)
            return JSONResponse({**head, "object": whole, "choices": [choice(text, probs, reason, False)],
                                 "usage": usage(req)})

        async def stream() -> AsyncIterator[str]:
            chunk = {**head, "object": part}
            if chat_api:
                first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                         "finish_reason": None}
                yield _sse({**chunk, "choices": [first]})
            async for ev in events(req):
                if ev.error is not None:
                    yield _sse({"error": {"message": f"generation failed: {ev.error}", "type": "server_error"}})
                    break
                if ev.text or ev.logprobs or ev.finish is not None:
                    yield _sse({**chunk, "choices": [choice(ev.text, ev.logprobs, ev.finish, True)]})
            if fields["include_usage"]:
                yield _sse({**chunk, "choices": [], "usage": usage(req)})
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def chat(request: HttpRequest) -> Response:
        try:
            fields = parse_chat(await body_of(request))
            req = make_request(tok.encode(served.render_chat(fields["messages"])), fields)
        except ApiError as e:
            return error(e)
        return await respond(request, req, fields, chat_api=True)

    async def completions(request: HttpRequest) -> Response:
        try:
            fields = parse_completion(await body_of(request))
            req = make_request(tok.encode(fields["prompt"]), fields)
        except ApiError as e:
            return error(e)
        return await respond(request, req, fields, chat_api=False)

    async def models(request: HttpRequest) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": served.id, "object": "model", "created": served.created, "owned_by": "lightspeed"}]})

    async def health(request: HttpRequest) -> Response:
        return JSONResponse({"status": "ok", "model": served.id, "active": engine.active, "queued": engine.queue_depth})

    async def metrics(request: HttpRequest) -> Response:
        snap = engine.snapshot()
        lines = ["# HELP lightspeed_requests_total Requests by outcome (finish reason, or the HTTP status "
                 "refusing it).",
                 "# TYPE lightspeed_requests_total counter"]
        lines += [f'lightspeed_requests_total{{outcome="{k}"}} {v}' for k, v in sorted(snap["requests"].items())]
        lines += ["# TYPE lightspeed_prompt_tokens_total counter",
                  f"lightspeed_prompt_tokens_total {snap['prompt_tokens']}",
                  "# HELP lightspeed_prompt_tokens_cached_total Prompt tokens read from the prefix cache.",
                  "# TYPE lightspeed_prompt_tokens_cached_total counter",
                  f"lightspeed_prompt_tokens_cached_total {snap['cached_tokens']}",
                  "# TYPE lightspeed_generated_tokens_total counter",
                  f"lightspeed_generated_tokens_total {snap['completion_tokens']}",
                  "# HELP lightspeed_queue_depth Requests waiting for a slot.", "# TYPE lightspeed_queue_depth gauge",
                  f"lightspeed_queue_depth {snap['queue']}",
                  "# HELP lightspeed_active_requests Requests being generated.",
                  "# TYPE lightspeed_active_requests gauge", f"lightspeed_active_requests {snap['active']}",
                  "# TYPE lightspeed_time_to_first_token_seconds histogram", *snap["ttft"],
                  "# TYPE lightspeed_time_per_output_token_seconds histogram", *snap["tpot"]]
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    async def not_found(request: HttpRequest, exc: Exception) -> Response:
        return error(ApiError(404, f"no route {request.method} {request.url.path}", kind="not_found_error"))

    async def bad_method(request: HttpRequest, exc: Exception) -> Response:
        return error(ApiError(405, f"{request.method} is not allowed on {request.url.path}"))

    routes = [Route("/v1/chat/completions", chat, methods=["POST"]),
              Route("/v1/completions", completions, methods=["POST"]),
              Route("/v1/models", models, methods=["GET"]),
              Route("/health", health, methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"])]
    return Starlette(routes=routes, exception_handlers={404: not_found, 405: bad_method})


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def _watch_disconnect(request: Any, req: Request) -> None:
    """Cancel ``req`` when the client of a non-streamed request goes away."""
    while not req.cancelled.is_set():
        if await request.is_disconnected():
            req.cancel()
            return
        await asyncio.sleep(0.05)
