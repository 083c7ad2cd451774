"""Import paths for the end-to-end harness: the generators in tools/ and the tool helpers."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
for folder in (REPO_ROOT / "tools", REPO_ROOT / "tests" / "artifacts", Path(__file__).parent):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
