"""Other real renderings of a vLLM /metrics page, built from a real capture by vLLM's rendering
rules: several DP engines, the multiprocess rendering, underscore names, OpenMetrics.
"""

from __future__ import annotations

import re
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
V033 = FIXTURES / "vllm-0.33.0"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"

_SAMPLE = re.compile(r"^(?P<name>[^{\s#]+)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?P<rest>.*)$")


def capture(tag: str) -> str:
    return (V033 / f"spec_ngram_k4.{tag}.prom").read_text()


def with_engines(text: str, engines: int) -> str:
    """Engine i repeats engine 0's series with every value multiplied by (i + 1)."""
    out = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if line.startswith("#") or match is None or 'engine="0"' not in line:
            out.append(line)
            continue
        for index in range(engines):
            value = float(match["value"]) * (index + 1)
            labels = match["labels"].replace('engine="0"', f'engine="{index}"')
            out.append(f"{match['name']}{{{labels}}} {value!r}{match['rest']}")
    return "\n".join(out) + "\n"


def _families(text: str) -> list[list[str]]:
    """Split into families: each starts at its first comment line."""
    families: list[list[str]] = []
    previous_comment = False
    for line in text.splitlines():
        is_comment = line.startswith("#")
        if is_comment and not previous_comment:
            families.append([])
        if not families:
            families.append([])
        families[-1].append(line)
        previous_comment = is_comment
    return families


def _family_name(family: list[str]) -> str:
    return family[0].split()[2]


def multiprocess(text: str) -> str:
    """As prometheus_client's multiprocess collector renders it: no `_created` families, no
    process/python families, labels in another order, histogram `_sum` before `_bucket`."""
    out = []
    for family in _families(text):
        name = _family_name(family)
        if name.endswith("_created") or name.startswith(("process_", "python_")):
            continue
        comments = [line for line in family if line.startswith("#")]
        samples = [_reverse_labels(line) for line in family if not line.startswith("#")]
        sums = [line for line in samples if "_sum{" in line or "_sum " in line]
        others = [line for line in samples if line not in sums]
        out += comments + sums + others
    return "\n".join(out) + "\n"


def _reverse_labels(line: str) -> str:
    match = _SAMPLE.match(line)
    if match is None or not match["labels"]:
        return line
    pairs = re.findall(r'\w+="(?:[^"\\]|\\.)*"', match["labels"])
    return f"{match['name']}{{{','.join(reversed(pairs))}}} {match['value']}{match['rest']}"


def underscore(text: str) -> str:
    """Sample names `vllm_...` while `# TYPE`/`# HELP` keep `vllm:` (prometheus_client >= 0.23)."""
    return re.sub(r"^vllm:", "vllm_", text, flags=re.MULTILINE)


def openmetrics(text: str) -> str:
    """OpenMetrics: TYPE/HELP on the base name, integer values, no `_created`, `# EOF`."""
    out = []
    for family in _families(text):
        if _family_name(family).endswith("_created"):
            continue
        out += [_openmetrics_line(line, _family_name(family)) for line in family]
    return "\n".join(out) + "\n# EOF\n"


def _openmetrics_line(line: str, family: str) -> str:
    if line.startswith(("# HELP", "# TYPE")) and family.endswith("_total"):
        parts = line.split(" ", 3)
        parts[2] = parts[2].removesuffix("_total")
        return " ".join(parts)
    match = _SAMPLE.match(line)
    if match and not line.startswith("#") and match["value"].endswith(".0"):
        labels = f"{{{match['labels']}}}" if match["labels"] else ""
        return f"{match['name']}{labels} {match['value'][:-2]}{match['rest']}"
    return line


def with_models(text: str, names: list[str]) -> str:
    """The exposition plus one engine of every spec series and generation tokens for each name
    (a hostile or broken front end: vLLM serves one model per server)."""
    lines = []
    for name in names:
        labels = f'engine="0",model_name="{name}"'
        lines += [
            f"vllm:spec_decode_num_drafts_total{{{labels}}} 10.0",
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} 40.0",
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} 20.0",
            *(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{p}"}}'
                f" {8 - 2 * p}.0"
                for p in range(4)
            ),
            f"vllm:generation_tokens_total{{{labels}}} 30.0",
        ]
    return text + "\n".join(lines) + "\n"
