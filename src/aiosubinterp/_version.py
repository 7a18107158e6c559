"""The one place the version number is written.

pyproject.toml reads it (``dynamic = ["version"]``, setuptools' ``attr:``,
which parses this file without importing the package), and
``aiosubinterp.__version__`` imports it on first access. Not
``importlib.metadata``: that import costs ~40 ms on 3.13 (88 modules), and
every worker interpreter imports this package; a module holding one string
costs nothing until asked for, and always tells the version of the code that
is running, even in an editable install whose metadata is stale.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
