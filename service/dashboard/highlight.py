"""Job specs and kernel sources shown readably: the kernel's Python source highlighted (Pygments,
on the server: no script, no CDN), the rest of the spec as YAML."""
from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any

import yaml
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer, YamlLexer

_FORMATTER = HtmlFormatter(cssclass="highlight", linenos="table", wrapcode=True)


def python(source: str) -> Markup:
    """`source` as highlighted HTML with line numbers (Pygments escapes the text)."""
    return Markup(highlight(source, PythonLexer(), _FORMATTER))


@lru_cache(maxsize=1)
def stylesheet() -> str:
    return _FORMATTER.get_style_defs(".highlight")


def spec_parts(spec: dict[str, Any] | None) -> dict[str, Any]:
    """The kernel's name and source, a reference kernel's own source (when it has one), and the
    rest of the spec as highlighted YAML in the spec's own order."""
    rest = copy.deepcopy(spec or {})
    kernel = rest.pop("kernel", None) or {}
    ref = rest.get("reference") or {}
    ref_source = ref.pop("source", None) if isinstance(ref, dict) else None
    text = yaml.safe_dump(rest, sort_keys=False, default_flow_style=None, allow_unicode=True, width=100)
    return {"kernel_name": kernel.get("name"),
            "source": python(kernel["source"]) if kernel.get("source") else None,
            "reference_source": python(ref_source) if ref_source else None,
            "yaml": Markup(highlight(text, YamlLexer(), HtmlFormatter(cssclass="highlight")))}
