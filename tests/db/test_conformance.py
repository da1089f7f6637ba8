"""Every conformance case against every registered backend."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from statewise.db.testing import Harness, all_cases


@pytest.mark.parametrize("case", all_cases(), ids=lambda c: c.__name__)
def test_conformance(harness: Harness, case: Callable[[Harness], None]) -> None:
    case(harness)
