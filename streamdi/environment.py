"""The environment as the settings tree reads it: every variable name a setting answers to, which
are required, which names only look like settings (typos), and validation of a given environment
(a compose service's) without touching the process's own.

Names are built by walking the pydantic models of :class:`~streamdi.settings.StreamdiSettings`,
so a field added to a section is known here without a list to maintain.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from streamdi.errors import ConfigurationError
from streamdi.settings import StreamdiSettings, validation_problems

DELIMITER = "__"


def _walk(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, FieldInfo]]:
    for name, field in model.model_fields.items():
        env = f"{prefix}{DELIMITER}{name}".upper() if prefix else name.upper()
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _walk(annotation, env)
        else:
            yield env, field


def setting_fields(root: type[BaseModel] = StreamdiSettings) -> dict[str, FieldInfo]:
    """Every setting by its environment name (``KAFKA__BOOTSTRAP_SERVERS``) and its field."""
    return dict(_walk(root, ""))


def setting_names(root: type[BaseModel] = StreamdiSettings) -> frozenset[str]:
    """The environment names the settings tree reads."""
    return frozenset(setting_fields(root))


def required_settings(root: type[BaseModel] = StreamdiSettings) -> frozenset[str]:
    """Settings without a default: every run must set them."""
    return frozenset(name for name, field in setting_fields(root).items() if field.is_required())


def _sections(root: type[BaseModel]) -> frozenset[str]:
    return frozenset(name.split(DELIMITER)[0] for name in setting_fields(root) if DELIMITER in name)


def unknown_settings(
    environ: Mapping[str, str], root: type[BaseModel] = StreamdiSettings
) -> list[tuple[str, str]]:
    """Variables named like a setting (``SECTION__...`` of a known section) that no setting
    reads, each with what was probably meant: a typo would otherwise be ignored silently."""
    known = setting_names(root)
    sections = _sections(root)
    problems = []
    for name in sorted(environ):
        upper = name.upper()
        section = upper.split(DELIMITER)[0]
        if DELIMITER not in upper or section not in sections or upper in known:
            continue
        close = difflib.get_close_matches(upper, sorted(known), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        problems.append((name, f"not a streamdi setting{hint} (streamdi config show lists them)"))
    return problems


#: Variables read outside the settings tree before it knew them, and the settings they became.
RENAMED_VARIABLES: dict[str, str] = {
    "STREAMDI_KERNEL_CACHE": "ENGINE__KERNEL_CACHE",
    "STREAMDI_SWITCH_INTERVAL_S": "API__SWITCH_INTERVAL_S",
}


def renamed_settings(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """Variables of ``environ`` that streamdi read under an older name, each with its new name:
    they are no longer read, so a run that sets one should fail rather than ignore it."""
    return [
        (name, f"renamed: set {RENAMED_VARIABLES[name]} instead (it is no longer read)")
        for name in sorted(environ)
        if name in RENAMED_VARIABLES
    ]


def _nested(environ: Mapping[str, str], known: frozenset[str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for name, value in environ.items():
        if name.upper() not in known:
            continue
        *path, leaf = name.lower().split(DELIMITER)
        node = tree
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def settings_from(environ: Mapping[str, str]) -> StreamdiSettings:
    """The settings ``environ`` alone describes (the process's environment is not read), as a
    service started with exactly that environment would build them. Raises
    :class:`ConfigurationError` naming every unknown or bad variable."""
    problems = unknown_settings(environ)
    values = _nested(environ, setting_names())
    try:
        settings = _OnlyGiven(**values)
    except Exception as exc:
        from pydantic import ValidationError

        if not isinstance(exc, ValidationError):
            raise
        problems.extend(validation_problems(exc))
    if problems:
        raise ConfigurationError(problems)
    return settings


class _OnlyGiven(StreamdiSettings):
    """The settings tree reading its arguments only (no environment, no files)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)
