"""The check every real provider makes before any network I/O.

It reads `statewise.models.ALLOW_MODEL_REQUESTS` at call time (not import time), so a test
conftest can switch real requests off for the whole suite and one test can switch them
back on with `allow_model_requests(True)` or pytest's `monkeypatch.setattr`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from statewise.exceptions import ModelRequestsDisabledError


def check_allow_model_requests(model_name: str) -> None:
    """Raise `ModelRequestsDisabledError` if real model requests are switched off."""
    package = sys.modules.get("statewise.models")
    if package is not None and not getattr(package, "ALLOW_MODEL_REQUESTS", True):
        raise ModelRequestsDisabledError(
            f"real model requests are disabled (statewise.models.ALLOW_MODEL_REQUESTS is "
            f"False); refusing to call {model_name}. Use TestModel, FunctionModel or "
            f"ReplayModel in tests, or set ALLOW_MODEL_REQUESTS = True."
        )


@contextmanager
def allow_model_requests(allow: bool = True) -> Iterator[None]:
    """Temporarily set `statewise.models.ALLOW_MODEL_REQUESTS`."""
    import statewise.models as package

    previous = package.ALLOW_MODEL_REQUESTS
    package.ALLOW_MODEL_REQUESTS = allow
    try:
        yield
    finally:
        package.ALLOW_MODEL_REQUESTS = previous
