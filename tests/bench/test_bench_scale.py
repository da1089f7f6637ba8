"""`bench/bench_scale.py --quick` runs end to end (SQLite only: a few seconds) and prints
its table with every row, the cursor's ratio among them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench" / "bench_scale.py"


def test_bench_scale_quick_prints_its_table() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--only", "SQLite"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for row in ("list page at N/2 by cursor", "export", "fork", "Retention(", "session cache"):
        assert row in done.stdout, done.stdout
