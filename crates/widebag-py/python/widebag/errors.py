"""widebag's exceptions, with the command line's messages (its exit codes in brackets)."""


class WidebagError(Exception):
    """Any failure widebag reports."""


class ConfigError(WidebagError, ValueError):
    """A bad key, value or argument (the command line's exit 2); the message names the key."""


class DataError(WidebagError, ValueError):
    """Bad rows: the message names the matrix, the row and the column."""


class DoesNotFit(WidebagError):
    """The run does not fit its budget or the device (exit 3). ``plan`` carries the plan, with
    its suggestions, when a plan was made."""

    def __init__(self, message, plan=None):
        super().__init__(message)
        self.plan = plan


class RunFailed(WidebagError, RuntimeError):
    """Training or reading a run failed (exit 1)."""
