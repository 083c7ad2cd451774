"""Puts tools/ (the generators) and this folder on the import path for the artifact tests."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
for folder in (REPO_ROOT / "tools", Path(__file__).parent):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
