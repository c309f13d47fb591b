"""The repository's docker-compose.yml and Dockerfile as data, for the checks that run without a
Docker engine (tests/unit/ops) and the integration test that runs the compose environment against
the embedded services (tests/integration/ops).

Compose interpolation is resolved as ``docker compose`` does for the forms the file uses:
``${NAME}``, ``${NAME:-default}``, ``${NAME-default}`` and ``$$`` (a literal ``$``), with the
variables of ``environ`` (empty by default: the file's own defaults).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"

_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}")


def interpolate(text: str, environ: Mapping[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, default = match.group(1), match.group(2), match.group(3)
        given = environ.get(name)
        if op == ":-" and not given:
            return default
        if op == "-" and given is None:
            return default
        return given or ""

    return _VARIABLE.sub(value, text)


def _resolve(node: Any, environ: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, environ)
    if isinstance(node, list):
        return [_resolve(v, environ) for v in node]
    if isinstance(node, dict):
        return {k: _resolve(v, environ) for k, v in node.items()}
    return node


def load_compose(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The compose file, parsed (YAML merge keys applied) and interpolated."""
    raw = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(raw, dict)
    resolved: dict[str, Any] = _resolve(raw, environ or {})
    return resolved


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's environment (mapping or ``KEY=VALUE`` list form) as strings."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = [item.split("=", 1) for item in env]
        return {k: v for k, v in pairs}
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def command(service: Mapping[str, Any]) -> list[str]:
    cmd = service.get("command") or []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


def dockerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Dockerfile, continuation lines joined."""
    lines: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        word, _, rest = full.partition(" ")
        lines.append((word.upper(), rest.strip()))
    return lines


def dockerfile_env() -> dict[str, str]:
    """The ``ENV`` values the image sets (``KEY=VALUE`` forms)."""
    env: dict[str, str] = {}
    for word, rest in dockerfile_instructions():
        if word == "ENV":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                env[key] = value
    return env
