"""High availability: a Patroni cluster loses its leader under writers and readers, and nothing
acknowledged is lost (rcll.hacluster; the long drills are bench/failover.py)."""

from __future__ import annotations

import psycopg
import pytest

from rcll.db import standby_dsn, writer_dsn
from rcll.errors import Code, from_database


def test_a_multi_host_dsn_writes_on_the_primary_and_recall_may_prefer_a_standby() -> None:
    two = "host=a,b port=5432,5433 dbname=rcll"
    assert "target_session_attrs=read-write" in writer_dsn(two)
    assert writer_dsn("host=a port=5432 dbname=rcll") == "host=a port=5432 dbname=rcll"   # one host: as given
    assert writer_dsn(f"{two} target_session_attrs=primary") == f"{two} target_session_attrs=primary"
    assert "target_session_attrs=prefer-standby" in standby_dsn(two)


def test_a_session_the_server_ends_is_unavailable_and_retryable(dsn: str) -> None:
    # What a write in flight meets when a failover demotes its primary: the session is ended
    # (57P01). It is RC010, as a lost connection is: the client retries the same document.
    with psycopg.connect(dsn, autocommit=True) as conn:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError) as caught:
            conn.execute("SELECT rcll.create_bank('never')")
    mapped = from_database(caught.value)
    assert mapped is not None and mapped.code is Code.UNAVAILABLE
