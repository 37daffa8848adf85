"""widebag from Python: plan, explain and train models over very wide sparse inputs and outputs
(SciPy matrices in, NumPy arrays out), with the command line's own code, keys and run
directories.

    import widebag
    config = widebag.Config("configs/gowalla.toml")
    print(widebag.explain(config))          # where every byte of a step goes
    run = widebag.train(config, data=X_train, test=X_test)
    ids, scores = run.predict(X_train, top_k=20)
"""

from ._native import __version__
from .config import Config
from .errors import ConfigError, DataError, DoesNotFit, RunFailed, WidebagError
from .reports import Ledger, Plan, explain, plan
from .run import Run, load, train

__all__ = [
    "Config",
    "ConfigError",
    "DataError",
    "DoesNotFit",
    "Ledger",
    "Plan",
    "Run",
    "RunFailed",
    "WidebagError",
    "__version__",
    "explain",
    "load",
    "plan",
    "train",
]
