"""RCLL: a PostgreSQL-native memory engine for fleets of AI agents.

    from rcll import Memory

    with Memory() as memory:                       # the embedded database; Memory(dsn=...) for any PostgreSQL
        memory.retain("We deploy with Argo CD since March.", room="deployment")
        for fact in memory.recall("how do we deploy?").facts:
            print(fact.text)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rcll.sqlsource import extension_version

if TYPE_CHECKING:
    from rcll.memory import Memory
    from rcll.request import RecallRequest
    from rcll.settings import Settings

__version__ = extension_version()
__all__ = ["Memory", "RecallRequest", "Settings", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Memory":
        # Deferred: PostgreSQL backends import rcll.models (plpython3u) and must not load the client.
        from rcll.memory import Memory

        return Memory
    if name == "RecallRequest":
        from rcll.request import RecallRequest  # deferred, as Memory

        return RecallRequest
    if name == "Settings":
        from rcll.settings import Settings  # deferred, as Memory

        return Settings
    raise AttributeError(f"module 'rcll' has no attribute {name!r}")
