"""The error raised for unreadable, corrupt or mismatched weight files and failed downloads."""

from __future__ import annotations

from ..errors import LightspeedError

__all__ = ["WeightError"]


class WeightError(LightspeedError, ValueError):
    """A weight file that is missing, truncated, corrupt or does not match its config; or a failed fetch.

    The message names the file and, where one is to blame, the tensor."""
