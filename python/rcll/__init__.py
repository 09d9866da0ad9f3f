"""RCLL: a PostgreSQL-native memory engine for fleets of AI agents."""

from rcll.sqlsource import extension_version

__version__ = extension_version()
__all__ = ["__version__"]
