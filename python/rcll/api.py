"""The old name of the one service object: every interface now goes through rcll.memory.Memory.

Kept so code written against `rcll.api.Service` still imports while it moves to `from rcll import Memory`.
"""

from rcll.memory import Memory as Service

__all__ = ["Service"]
