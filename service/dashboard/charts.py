"""Charts rendered on the server as SVG (the dashboard needs no JavaScript library and no CDN).

Every point is an element with a class and data attributes, and a <title> for the tooltip, so
the charts are testable: `circle.trial-point` is one ok trial.
"""
from __future__ import annotations

import math
from html import escape
from typing import Any, Iterable, Sequence

W, H = 640, 300
ML, MR, MT, MB = 64, 16, 16, 44


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    out, v = [], start
    while v <= hi + step * 1e-9 and len(out) < 50:
        out.append(round(v, 12))
        v += step
    return out


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if float(v).is_integer() and a < 1e9:
        return str(int(v))
    if a >= 1000 or a < 0.001:
        return f"{v:.2e}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.3g}"
    return f"{v:.3f}".rstrip("0")


class _Frame:
    """Maps data to pixels; y is linear in ms, x linear (or log2 when asked)."""

    def __init__(self, xlo, xhi, ylo, yhi, *, xlog=False, w=W, h=H):
        self.xlog = xlog
        if xlog:
            xlo, xhi = math.log2(xlo), math.log2(xhi)
        if xhi == xlo:
            xlo, xhi = xlo - 1, xhi + 1
        if yhi == ylo:
            pad = abs(yhi) * 0.1 or 1.0
            ylo, yhi = ylo - pad, yhi + pad
        pad = (yhi - ylo) * 0.08
        self.ylo, self.yhi = max(0.0, ylo - pad) if ylo >= 0 else ylo - pad, yhi + pad
        xpad = (xhi - xlo) * 0.04
        self.xlo, self.xhi = xlo - xpad, xhi + xpad
        self.w, self.h = w, h

    def x(self, v: float) -> float:
        if self.xlog:
            v = math.log2(v)
        return ML + (v - self.xlo) / (self.xhi - self.xlo) * (self.w - ML - MR)

    def y(self, v: float) -> float:
        return self.h - MB - (v - self.ylo) / (self.yhi - self.ylo) * (self.h - MT - MB)


def _axes(f: _Frame, xlabel: str, ylabel: str, xticks: Iterable[tuple[float, str]]) -> list[str]:
    out = [f'<rect class="plot-area" x="{ML}" y="{MT}" width="{f.w - ML - MR}" height="{f.h - MT - MB}" '
           f'fill="#fff" stroke="#ccc"/>']
    for t in _nice_ticks(f.ylo, f.yhi):
        y = f.y(t)
        if MT - 0.5 <= y <= f.h - MB + 0.5:
            out.append(f'<line x1="{ML}" x2="{f.w - MR}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
            out.append(f'<text x="{ML - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{_fmt(t)}</text>')
    for xv, label in xticks:
        x = f.x(xv)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{f.h - MB}" y2="{f.h - MB + 4}" stroke="#888"/>')
        out.append(f'<text x="{x:.1f}" y="{f.h - MB + 16}" text-anchor="middle" font-size="11">{escape(label)}</text>')
    out.append(f'<text x="{(ML + f.w - MR) / 2:.0f}" y="{f.h - 6}" text-anchor="middle" font-size="12">{escape(xlabel)}</text>')
    out.append(f'<text x="14" y="{(MT + f.h - MB) / 2:.0f}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 14 {(MT + f.h - MB) / 2:.0f})">{escape(ylabel)}</text>')
    return out


def _svg(body: list[str], cls: str, title: str, w=W, h=H) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {cls}" viewBox="0 0 {w} {h}" width="{w}" '
            f'height="{h}" role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>'
            + "".join(body) + "</svg>")


def _empty(cls: str, title: str, msg: str) -> str:
    return _svg([f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle" font-size="14" fill="#888">{escape(msg)}</text>'],
                cls, title)


def _cfg_text(cfg: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in cfg.items())


def trials_chart(trials: Sequence[Any]) -> str:
    """Time of each trial (ok trials as points) by trial number, with the best-so-far step line;
    failed trials are marked as crosses along the bottom."""
    title = "Trial time (ms) by trial number, with the best so far"
    ok = [t for t in trials if t.status == "ok" and t.median_ms is not None]
    if not trials:
        return _empty("trials-chart", title, "no trials yet")
    numbers = [t.number for t in trials]
    ys = [t.median_ms for t in ok] or [0.0, 1.0]
    f = _Frame(min(numbers), max(numbers), min(ys), max(ys))
    xt = [(v, str(int(v))) for v in _nice_ticks(min(numbers), max(numbers)) if float(v).is_integer()]
    body = _axes(f, "trial number", "median time (ms)", xt)
    # best-so-far line
    best, pts = None, []
    for t in sorted(ok, key=lambda t: t.number):
        if best is None or t.median_ms < best:
            if best is not None:
                pts.append(f"{f.x(t.number):.1f},{f.y(best):.1f}")
            best = t.median_ms
        pts.append(f"{f.x(t.number):.1f},{f.y(best):.1f}")
    if pts:
        last = max(numbers)
        pts.append(f"{f.x(last):.1f},{f.y(best):.1f}")
        body.append(f'<polyline class="best-line" fill="none" stroke="#d62728" stroke-width="2" points="{" ".join(pts)}"/>')
    for t in ok:
        body.append(f'<circle class="trial-point" data-number="{t.number}" data-ms="{t.median_ms}" '
                    f'cx="{f.x(t.number):.1f}" cy="{f.y(t.median_ms):.1f}" r="4" fill="#1f77b4" fill-opacity="0.8">'
                    f'<title>trial {t.number}: {t.median_ms:.4f} ms — {escape(_cfg_text(t.config))}</title></circle>')
    yb = H - MB - 6
    for t in trials:
        if t.status != "ok":
            x = f.x(t.number)
            body.append(f'<path class="trial-failed" data-number="{t.number}" d="M{x - 4:.1f},{yb - 4:.1f}L{x + 4:.1f},'
                        f'{yb + 4:.1f}M{x - 4:.1f},{yb + 4:.1f}L{x + 4:.1f},{yb - 4:.1f}" stroke="#999" stroke-width="1.5">'
                        f'<title>trial {t.number}: {escape(t.status)}</title></path>')
    return _svg(body, "trials-chart", title)


def param_charts(trials: Sequence[Any], w: int = 420, h: int = 260) -> list[tuple[str, str]]:
    """One chart per config parameter: time of each ok trial against that parameter's value."""
    ok = [t for t in trials if t.status == "ok" and t.median_ms is not None]
    params: list[str] = []
    for t in trials:
        for k in (t.config or {}):
            if k not in params:
                params.append(k)
    out = []
    for p in params:
        pts = [(t, t.config.get(p)) for t in ok if p in (t.config or {})]
        title = f"median time (ms) against {p}"
        if not pts:
            out.append((p, _empty("param-chart", title, "no successful trials")))
            continue
        vals = [v for _, v in pts]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)
        ys = [t.median_ms for t, _ in pts]
        if numeric:
            lo, hi = min(vals), max(vals)
            xlog = lo > 0 and hi / lo >= 8
            f = _Frame(lo, hi, min(ys), max(ys), xlog=xlog, w=w, h=h)
            distinct = sorted(set(vals))
            ticks = distinct if len(distinct) <= 8 else (
                [2 ** e for e in range(math.ceil(math.log2(lo)), math.floor(math.log2(hi)) + 1)] if xlog
                else _nice_ticks(lo, hi))
            xt = [(v, _fmt(v)) for v in ticks]
            xpos = {v: v for v in distinct}
        else:
            cats = sorted({str(v) for v in vals})
            f = _Frame(0, len(cats) - 1, min(ys), max(ys), w=w, h=h)
            xt = [(i, c) for i, c in enumerate(cats)]
            xpos = {v: cats.index(str(v)) for v in vals}
        body = _axes(f, p + (" (log2 scale)" if numeric and f.xlog else ""), "median time (ms)", xt)
        for t, v in pts:
            body.append(f'<circle class="param-point" data-param="{escape(p)}" data-number="{t.number}" '
                        f'cx="{f.x(xpos[v]):.1f}" cy="{f.y(t.median_ms):.1f}" r="4" fill="#2ca02c" fill-opacity="0.7">'
                        f'<title>trial {t.number}: {escape(p)}={escape(str(v))}, {t.median_ms:.4f} ms</title></circle>')
        out.append((p, _svg(body, "param-chart", title, w, h)))
    return out
