"""The dashboard's Jinja2 environment (shared by the pages and the login)."""
from __future__ import annotations

from pathlib import Path

from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from service.core.json_input import encodable
from service.devices import device_kind, device_label

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).resolve().parent.parent / "templates"))


def _printable(value):
    """Every `{{ … }}` goes out through here: text stored before the API refused lone surrogates
    (a published config's) is shown with U+FFFD instead of making the page fail to encode."""
    if isinstance(value, Markup):
        return Markup(encodable(str(value)))
    return encodable(value) if isinstance(value, str) else value


TEMPLATES.env.finalize = _printable
TEMPLATES.env.filters["ms"] = lambda v: "—" if v is None else f"{v:.4f}"
TEMPLATES.env.filters["cfg"] = lambda c: "—" if not c else ", ".join(f"{k}={v}" for k, v in c.items())
TEMPLATES.env.filters["pct"] = lambda v: f"{100 * (v or 0):.0f}%"
TEMPLATES.env.filters["dt"] = lambda d: "—" if d is None else d.strftime("%Y-%m-%d %H:%M:%S")
TEMPLATES.env.filters["device_kind"] = device_kind
TEMPLATES.env.filters["device_label"] = device_label
