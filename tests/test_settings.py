"""Every `BLOCKTUNE_*` variable that blocktune reads is a field of one settings object, and documented.

The settings objects: compiler/knobs.py (the compiler), tuner/settings.py (a tuning run),
service/core/config.py (the service), client/settings.py (the client), and db/engine.py's
BLOCKTUNE_DATABASE_URL (the database's default, also the service's `database_url`)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = ("compiler", "jobspec", "tuner", "service", "db", "client")
NAME = re.compile(r"BLOCKTUNE_[A-Z0-9_]*[A-Z0-9]")


def _read_anywhere() -> dict[str, list[str]]:
    """Variable → the production files that name it."""
    out: dict[str, list[str]] = {}
    for pkg in PRODUCTION:
        for path in (ROOT / pkg).rglob("*.py"):
            for name in set(NAME.findall(path.read_text())):
                out.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return out


def _declared() -> dict[str, str]:
    """Variable → the settings object that declares it."""
    from client import settings as client_settings
    from compiler import knobs
    from db import engine
    from service.core.config import Settings
    from tuner.settings import TunerSettings

    out: dict[str, str] = {}
    groups = [g for g in vars(knobs).values() if isinstance(g, knobs.base_knobs)]
    assert {knobs.codegen, knobs.cache, knobs.runtime, knobs.tools, knobs.autotuning} <= set(groups)
    for group in groups:
        for knob in group.knob_descriptors.values():
            for name in knob.names:
                out[name] = "compiler.knobs"
    for field in TunerSettings.model_fields:
        out[f"BLOCKTUNE_{field.upper()}"] = "tuner.settings"
    for field in Settings.model_fields:
        out[f"BLOCKTUNE_{field.upper()}"] = "service.core.config"
    for name in NAME.findall(Path(client_settings.__file__).read_text()):
        out.setdefault(name, "client.settings")
    out.setdefault(engine.ENV_VAR, "db.engine")
    return out


def test_every_variable_read_is_declared_in_a_settings_object():
    declared = _declared()
    stray = {name: files for name, files in _read_anywhere().items() if name not in declared}
    assert stray == {}, f"read but in no settings object: {stray}"


def test_every_declared_variable_is_documented():
    docs = "".join((ROOT / "docs" / name).read_text() for name in ("contracts.md", "deploy.md"))
    docs += (ROOT / "client" / "settings.py").read_text() + (ROOT / "tuner" / "settings.py").read_text()
    missing = sorted(name for name in _declared() if name not in docs)
    assert missing == [], f"declared but documented nowhere: {missing}"


def test_the_client_reads_its_switches_at_each_use(monkeypatch):
    from client.settings import settings

    monkeypatch.setenv("BLOCKTUNE_SERVICE_URL", "http://svc:8000/")
    monkeypatch.setenv("BLOCKTUNE_LOOKUP_TIMEOUT", "0.25")
    monkeypatch.setenv("BLOCKTUNE_PUBLISH", "yes")
    assert (settings.service_url, settings.lookup_timeout_s, settings.publish) == ("http://svc:8000", 0.25, True)
    monkeypatch.setenv("BLOCKTUNE_LOOKUP_TIMEOUT", "soon")          # not a number: the default
    monkeypatch.setenv("BLOCKTUNE_PUBLISH", "0")
    monkeypatch.delenv("BLOCKTUNE_SERVICE_URL")
    assert (settings.service_url, settings.lookup_timeout_s, settings.publish) == (None, 0.5, False)


def test_the_tuner_settings_refuse_nonsense(monkeypatch):
    import pydantic
    import pytest

    from tuner.settings import tuner_settings

    monkeypatch.setenv("BLOCKTUNE_COMPILE_WORKERS", "3")
    monkeypatch.setenv("BLOCKTUNE_TUNER_CUBIN", "off")
    got = tuner_settings()
    assert (got.compile_workers, got.tuner_cubin, got.compile_cpu_s) == (3, False, 300)
    monkeypatch.setenv("BLOCKTUNE_COMPILE_CPU_S", "-1")
    with pytest.raises(pydantic.ValidationError, match="compile_cpu_s"):
        tuner_settings()
