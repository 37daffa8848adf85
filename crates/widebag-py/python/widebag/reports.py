"""``explain`` and ``plan``: the ledger and the plan as dicts with the keys of the command line's
``--json`` output, shown as the table the terminal prints."""

import json

from . import _native
from .config import Config
from .errors import ConfigError, DoesNotFit, RunFailed

__all__ = ["Ledger", "Plan", "explain", "plan"]


class _Report(dict):
    """A report: the ``--json`` object's keys, and the terminal's table as ``table``."""

    def __init__(self, data, table):
        super().__init__(data)
        self.table = table

    def __repr__(self):
        return self.table

    def _repr_pretty_(self, printer, cycle):
        printer.text(self.table)


class Ledger(_Report):
    """Where every byte of one training step goes (``widebag explain``)."""


class Plan(_Report):
    """The batch size, optimizers and remedies that fit a budget (``widebag plan``)."""


def _device(device):
    return [] if device is None else ["--device", device]


def explain(config=None, device=None):
    """The memory ledger of ``config``'s training step, predicted (``widebag explain``)."""
    config = config or Config()
    data, table = _native.explain(["widebag", "explain", *config.args(), *_device(device), "--json"])
    return Ledger(json.loads(data), table)


def plan(config=None, budget=None, device=None, keep_accuracy=False):
    """The plan that fits ``budget`` (``"8GiB"``; else ``plan.budget``, else the device's memory).

    Raises ``widebag.DoesNotFit`` (with ``.plan``, its suggestions among its keys) when nothing
    fits."""
    config = config or Config()
    argv = ["widebag", "plan", *config.args(), *_device(device), "--json"]
    if budget is not None:
        argv += ["--budget", str(budget)]
    if keep_accuracy:
        argv.append("--keep-accuracy")
    data, table, refused = _native.plan(argv)
    report = Plan(json.loads(data), table)
    if refused is not None:
        code, message = refused
        if code == 3:
            raise DoesNotFit(message, plan=report)
        if code == 2:
            raise ConfigError(message)
        raise RunFailed(message)
    return report
