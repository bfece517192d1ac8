"""Chat templates from weight files, rendered with limits.

A template is code that came with a model file, so it runs in jinja's immutable sandbox (the
environment transformers renders chat templates in) and within limits: a render that runs past
:data:`MAX_SECONDS`, writes more than :data:`MAX_CHARS` or builds a value past that size (``'x' *
10**9``, ``10 ** 10 ** 10``, ``'x'.center(10**9)``) stops with a :class:`WeightError` naming the file.
The time limit is enforced line by line inside the template's compiled code (a trace function on
this thread during the render), so a loop that writes nothing stops too.

:meth:`ChatTemplate.check` dry-runs a one-message conversation when the tokenizer is built: a
template that does not compile, breaks a limit or escapes the sandbox is known broken at load,
and reported when it is used (so ``lightspeed run --no-chat`` still runs the model).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from typing import Any

from ..errors import UnsupportedError
from .errors import WeightError

__all__ = ["ChatTemplate", "ChatTemplateLimitError", "MAX_SECONDS", "MAX_CHARS"]

MAX_SECONDS = 2.0  # one render's time
MAX_CHARS = 1 << 20  # one render's output, and the largest string, list or number a template may build
_DRY_RUN = [{"role": "user", "content": "Hello"}]


class _Limit(Exception):
    """A render broke one of the limits (raised inside the render)."""


class ChatTemplateLimitError(WeightError):
    """A chat template broke a limit (time, size) or the sandbox: it is unusable whatever the
    conversation."""


def _environment() -> Any:
    try:
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:
        raise UnsupportedError("chat templates need jinja2: pip install 'lightspeed[models]'") from e
    from jinja2.exceptions import TemplateError

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**"])

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and isinstance(right, int) and isinstance(left, (int, float)) \
                    and abs(right) > 64 and abs(left) > 1:
                raise _Limit(f"{left!r} ** {right!r} is too large")
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_CHARS:
                        raise _Limit(f"a value of {len(seq) * n} items (more than {MAX_CHARS})")
            return super().call_binop(context, operator, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            for v in (*args, *kwargs.values()):
                if isinstance(v, int) and not isinstance(v, bool) and v > MAX_CHARS:
                    raise _Limit(f"a call with the argument {v} (more than {MAX_CHARS})")
            return super().call(__context, __obj, *args, **kwargs)

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class ChatTemplate:
    """A compiled chat template of the file ``where`` (named in every error)."""

    def __init__(self, source: str, where: str):
        self.where = where
        env = _environment()
        from jinja2.exceptions import TemplateSyntaxError

        try:
            self._template = env.from_string(source)
        except TemplateSyntaxError as e:
            raise WeightError(f"{where}: the chat template does not compile (line {e.lineno}: {e.message})") from None

    def render(self, **context: Any) -> str:
        """The template's text for ``context`` (``messages``, ``add_generation_prompt``, ...)."""
        from jinja2.exceptions import SecurityError, TemplateError

        code = self._template.root_render_func.__code__.co_filename
        deadline = time.monotonic() + MAX_SECONDS

        def local(frame: Any, event: str, arg: Any) -> Any:
            if time.monotonic() > deadline:
                raise _Limit(f"rendering took more than {MAX_SECONDS} s")
            return local

        def tracer(frame: Any, event: str, arg: Any) -> Any:
            return local if frame.f_code.co_filename == code else None

        previous = sys.gettrace()
        sys.settrace(tracer)
        try:
            out, n = [], 0
            for chunk in self._template.generate(**context):
                n += len(chunk)
                if n > MAX_CHARS:
                    raise _Limit(f"the output is longer than {MAX_CHARS} characters")
                out.append(chunk)
            return "".join(out)
        except _Limit as e:
            raise ChatTemplateLimitError(f"{self.where}: the chat template stopped: {e}") from None
        except SecurityError as e:
            raise ChatTemplateLimitError(f"{self.where}: the chat template tried something the sandbox forbids: "
                                         f"{e}") from None
        except TemplateError as e:
            raise WeightError(f"{self.where}: the chat template failed: {e}") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError, RecursionError) as e:
            raise WeightError(f"{self.where}: the chat template failed: {type(e).__name__}: {e}") from None
        finally:
            sys.settrace(previous)

    def check(self) -> None:
        """Dry-run a one-message conversation: a limit broken or the sandbox escaped is an error;
        a template that refuses this conversation on purpose (``raise_exception``) is not."""
        try:
            self.render(messages=_DRY_RUN, add_generation_prompt=True, bos_token="", eos_token="")
        except ChatTemplateLimitError:
            raise
        except WeightError:
            return  # the template's own objection to the sample conversation, not a broken template
