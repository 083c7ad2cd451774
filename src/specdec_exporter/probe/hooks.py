"""Every vLLM name the probe relies on, written once, and the two ways to check them.

Standard library only: this module runs inside vLLM (the probe's start-up check, ``check_imported``)
and in the compatibility script, which reads vLLM wheels' sources without importing vLLM
(``check_source``). Each expectation belongs to one split; a mismatch switches off only that split.

Kinds of expectation:

- ``parameters``: a function or method whose parameter names (``self`` left out) start with
  ``names``, in that order (a parameter vLLM appends later does not break the probe, which passes
  every argument through);
- ``attributes``: a class whose instances carry ``names``: dataclass fields, or attributes that
  its ``__init__`` assigns (``self.name = ...``).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

TEMPERATURE_SPLIT: Final = "temperature"
"""Acceptance, TTFT and TPOT per temperature bucket: the wrapped output-processor method."""
BATCH_SPLIT: Final = "batch"
"""Acceptance per running-batch bucket: the stat logger's ``record()``."""
SPLITS: Final = (TEMPERATURE_SPLIT, BATCH_SPLIT)

Kind = Literal["parameters", "attributes"]


@dataclass(frozen=True, slots=True)
class Expectation:
    """One vLLM name and what the probe needs of it."""

    split: str
    module: str
    qualname: str
    """``Class`` or ``Class.method`` inside ``module``."""
    kind: Kind
    names: tuple[str, ...]
    public: bool
    """Part of vLLM's plugin interface (``StatLoggerBase``) rather than private internals."""

    @property
    def where(self) -> str:
        return f"{self.module}.{self.qualname}"


OUTPUT_PROCESSOR_MODULE: Final = "vllm.v1.engine.output_processor"
OUTPUT_PROCESSOR_CLASS: Final = "OutputProcessor"
FINISHED_METHOD: Final = "_update_stats_from_finished"
"""Called once per finished sequence with the request state that holds both the temperature and
the per-sequence speculative figures: the probe wraps it."""
LOGGERS_MODULE: Final = "vllm.v1.metrics.loggers"
STAT_LOGGER_BASE: Final = "StatLoggerBase"

EXPECTATIONS: Final[tuple[Expectation, ...]] = (
    Expectation(
        TEMPERATURE_SPLIT,
        OUTPUT_PROCESSOR_MODULE,
        f"{OUTPUT_PROCESSOR_CLASS}.{FINISHED_METHOD}",
        "parameters",
        ("req_state", "finish_reason", "iteration_stats"),
        public=False,
    ),
    Expectation(
        TEMPERATURE_SPLIT,
        OUTPUT_PROCESSOR_MODULE,
        "RequestState",
        "attributes",
        ("temperature", "spec_decode_metrics", "stats"),
        public=False,
    ),
    Expectation(
        TEMPERATURE_SPLIT,
        "vllm.v1.metrics.stats",
        "RequestSpecDecodeMetrics",
        "attributes",
        ("num_spec_tokens", "histogram", "num_draft_tokens"),
        public=False,
    ),
    Expectation(
        TEMPERATURE_SPLIT,
        "vllm.v1.metrics.stats",
        "RequestStateStats",
        "attributes",
        ("num_generation_tokens", "first_token_latency", "first_token_ts", "last_token_ts"),
        public=False,
    ),
    Expectation(
        BATCH_SPLIT,
        LOGGERS_MODULE,
        f"{STAT_LOGGER_BASE}.record",
        "parameters",
        ("scheduler_stats", "iteration_stats", "mm_cache_stats", "engine_idx"),
        public=True,
    ),
    Expectation(
        BATCH_SPLIT,
        "vllm.v1.metrics.stats",
        "SchedulerStats",
        "attributes",
        ("num_running_reqs", "spec_decoding_stats"),
        public=False,
    ),
    Expectation(
        BATCH_SPLIT,
        "vllm.v1.spec_decode.metrics",
        "SpecDecodingStats",
        "attributes",
        ("num_drafts", "num_draft_tokens", "num_accepted_tokens"),
        public=False,
    ),
)


# --- against imported objects (inside vLLM) --------------------------------------------------


def check_imported(
    expectations: Iterable[Expectation] = EXPECTATIONS,
    import_module: Callable[[str], object] = importlib.import_module,
) -> dict[str, list[str]]:
    """Split -> what is missing (empty list: the split can work). Never raises."""
    problems: dict[str, list[str]] = {split: [] for split in SPLITS}
    for expectation in expectations:
        problem = _check_one_imported(expectation, import_module)
        if problem is not None:
            problems.setdefault(expectation.split, []).append(problem)
    return problems


def _check_one_imported(
    expectation: Expectation, import_module: Callable[[str], object]
) -> str | None:
    try:
        target: object = import_module(expectation.module)
    except Exception as exc:
        return f"{expectation.module}: cannot import ({type(exc).__name__})"
    for part in expectation.qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            return f"{expectation.where}: missing"
    if expectation.kind == "parameters":
        if not callable(target):
            return f"{expectation.where}: not a function"
        try:
            parameters = [name for name in inspect.signature(target).parameters if name != "self"]
        except (TypeError, ValueError):
            return f"{expectation.where}: no signature"
        return _compare_parameters(expectation, parameters)
    if not isinstance(target, type):
        return f"{expectation.where}: not a class"
    return _compare_attributes(expectation, _instance_attributes(target))


def _instance_attributes(cls: type) -> set[str]:
    names: set[str] = set()
    if dataclasses.is_dataclass(cls):
        names.update(field.name for field in dataclasses.fields(cls))
    init = getattr(cls, "__init__", None)
    code = getattr(init, "__code__", None)
    if code is not None:
        names.update(code.co_names)  # attribute stores (self.x = ...) name x here
    return names


# --- against source text (the compatibility script, without importing vLLM) -----------------


def check_source(
    expectation: Expectation, read_module_source: Callable[[str], str | None]
) -> str | None:
    """What is missing for one expectation, from the text of its module (None: all there).

    ``read_module_source("vllm.v1.metrics.stats")`` returns that module's text, or None when the
    wheel has no such file.
    """
    text = read_module_source(expectation.module)
    if text is None:
        return f"{expectation.module}: no such module"
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return f"{expectation.module}: cannot parse"
    class_name, _, member = expectation.qualname.partition(".")
    cls = _find_class(tree.body, class_name)
    if cls is None:
        return f"{expectation.module}.{class_name}: missing"
    if expectation.kind == "parameters":
        function = _find_function(cls.body, member)
        if function is None:
            return f"{expectation.where}: missing"
        arguments = function.args
        parameters = [
            arg.arg for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)
        ]
        return _compare_parameters(expectation, [name for name in parameters if name != "self"])
    return _compare_attributes(expectation, _source_attributes(cls))


def _find_class(body: Iterable[ast.stmt], name: str) -> ast.ClassDef | None:
    for node in body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _find_function(
    body: Iterable[ast.stmt], name: str
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    return None


def _source_attributes(cls: ast.ClassDef) -> set[str]:
    """Annotated class-level names (dataclass fields) and ``self.x`` assigned in ``__init__``."""
    names = {
        node.target.id
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }
    init = _find_function(cls.body, "__init__")
    if init is not None:
        for node in ast.walk(init):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets = [node.target]
            names.update(
                target.attr
                for target in targets
                if isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            )
    return names


# --- shared comparison ---------------------------------------------------------------------


def _compare_parameters(expectation: Expectation, parameters: list[str]) -> str | None:
    expected = list(expectation.names)
    if parameters[: len(expected)] == expected:
        return None
    return (
        f"{expectation.where}: parameters ({', '.join(parameters)}), "
        f"expected ({', '.join(expected)}, ...)"
    )


def _compare_attributes(expectation: Expectation, present: set[str]) -> str | None:
    missing = [name for name in expectation.names if name not in present]
    if not missing:
        return None
    return f"{expectation.where}: no attribute {', '.join(missing)}"


def by_split(
    expectations: Iterable[Expectation] = EXPECTATIONS,
) -> Mapping[str, tuple[Expectation, ...]]:
    """Split -> its expectations, in the order above."""
    grouped: dict[str, list[Expectation]] = {split: [] for split in SPLITS}
    for expectation in expectations:
        grouped.setdefault(expectation.split, []).append(expectation)
    return {split: tuple(items) for split, items in grouped.items()}
