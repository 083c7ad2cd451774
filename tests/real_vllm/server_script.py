"""Import scripts/real_vllm/server.py (a script, not a package) by its path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SERVER_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "real_vllm" / "server.py"
MODULE_NAME = "real_vllm_server"


def load_server_module() -> ModuleType:
    if MODULE_NAME in sys.modules:
        return sys.modules[MODULE_NAME]
    spec = importlib.util.spec_from_file_location(MODULE_NAME, SERVER_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module
