"""The check every real provider makes before any network I/O.

The switch is `statewise.models.ALLOW_MODEL_REQUESTS`, read at call time (not import
time), so a test conftest can switch real requests off for the whole suite and one test
can switch them back on with `allow_model_requests(True)` or pytest's
`monkeypatch.setattr`. The package hands its namespace over with `bind_switch` when it
is imported; this module never imports the package, whose `__init__` imports the
providers that import this module.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

from statewise.exceptions import ModelRequestsDisabledError

_SWITCH = "ALLOW_MODEL_REQUESTS"
_namespace: MutableMapping[str, Any] = {_SWITCH: True}


def bind_switch(namespace: MutableMapping[str, Any]) -> None:
    """Read and write the switch in `namespace` (the `statewise.models` package's)."""
    global _namespace
    _namespace = namespace


def check_allow_model_requests(model_name: str) -> None:
    """Raise `ModelRequestsDisabledError` if real model requests are switched off."""
    if not _namespace.get(_SWITCH, True):
        raise ModelRequestsDisabledError(
            f"real model requests are disabled (statewise.models.ALLOW_MODEL_REQUESTS is "
            f"False); refusing to call {model_name}. Use TestModel, FunctionModel or "
            f"ReplayModel in tests, or set ALLOW_MODEL_REQUESTS = True."
        )


@contextmanager
def allow_model_requests(allow: bool = True) -> Iterator[None]:
    """Temporarily set `statewise.models.ALLOW_MODEL_REQUESTS`."""
    previous = _namespace.get(_SWITCH, True)
    _namespace[_SWITCH] = allow
    try:
        yield
    finally:
        _namespace[_SWITCH] = previous
