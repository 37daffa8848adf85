"""``Config``: a TOML file (or the built-in quickstart) and ``key=value`` overrides, loaded and
validated by the command line's own loader, so the keys, defaults and errors are the CLI's."""

import json
import math
import os

from . import _native

__all__ = ["Config"]


def _toml_value(value):
    """``value`` as a TOML literal, as ``--set key=value`` takes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, os.PathLike):
        return json.dumps(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"{value!r}: a TOML value must be a bool, number, string or list")


def _flatten(prefix, settings, out):
    for key, value in settings.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            _flatten(dotted, value, out)
        else:
            out.append((dotted, value))


class Config:
    """A widebag configuration.

    ``Config()`` is the quickstart; ``Config(train={"epochs": 5})`` or
    ``Config(**{"train.epochs": 5})`` sets keys; ``Config.from_toml(path)`` reads a file. Every
    change is validated at once: a bad key or value raises ``widebag.ConfigError`` (a
    ``ValueError``) naming the key.
    """

    def __init__(self, path=None, **settings):
        self.path = os.fspath(path) if path is not None else None
        self.overrides = []
        pairs = []
        _flatten("", settings, pairs)
        for key, value in pairs:
            self.overrides.append(f"{key}={_toml_value(value)}")
        self._text = _native.load_config(self.path, self.overrides)

    @classmethod
    def from_toml(cls, path):
        """The configuration of the TOML file at ``path``."""
        return cls(path)

    def set(self, key, value):
        """Sets ``key`` (dotted: ``"train.epochs"``) to ``value``, validated; returns ``self``."""
        overrides = self.overrides + [f"{key}={_toml_value(value)}"]
        self._text = _native.load_config(self.path, overrides)
        self.overrides = overrides
        return self

    def unset(self, key):
        """Unsets an optional key (``data.test_path``), as ``--set key=`` does; returns ``self``."""
        overrides = self.overrides + [f"{key}="]
        self._text = _native.load_config(self.path, overrides)
        self.overrides = overrides
        return self

    def get(self, key):
        """The value of ``key`` (dotted), as the loaded configuration has it (``None`` for an
        optional key that is unset); ``KeyError`` for a key configurations do not have."""
        if key not in _native.known_keys():
            raise KeyError(key)
        node = self.to_dict()
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def to_toml(self):
        """The whole configuration, every key resolved, as TOML."""
        return self._text

    def to_dict(self):
        """The whole configuration as nested dicts."""
        try:
            import tomllib
        except ImportError:  # Python < 3.11: read through the same loader as JSON-able TOML
            return _parse_simple_toml(self._text)
        return tomllib.loads(self._text)

    def copy(self):
        c = Config.__new__(Config)
        c.path, c.overrides, c._text = self.path, list(self.overrides), self._text
        return c

    def args(self):
        """The command line's arguments for this configuration (``--config``, ``--set``)."""
        out = []
        if self.path is not None:
            out += ["--config", self.path]
        for o in self.overrides:
            out += ["--set", o]
        return out

    @staticmethod
    def keys():
        """Every key a configuration has, dotted."""
        return list(_native.known_keys())

    def __repr__(self):
        shown = ", ".join(self.overrides)
        return f"Config({self.path or 'quickstart'}{', ' if shown else ''}{shown})"


def _parse_simple_toml(text):
    """The TOML widebag writes (tables of scalars and arrays), read without tomllib."""
    root, table = {}, None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            table = root
            for part in line[1:-1].split("."):
                table = table.setdefault(part.strip(), {})
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value.strip('"')
        (table if table is not None else root)[key.strip()] = parsed
    return root
