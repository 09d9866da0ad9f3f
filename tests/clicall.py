"""The CLI in this process: `rcll ARGS` as rcll.cli.main runs it, with its stdin, stdout and
stderr captured and its environment set for the call - what a child process would see, without
a new interpreter and a fresh load of the models for each verb. One test still runs the real
`python -m rcll.cli` (tests/test_memory_api.py) so the entry point itself stays covered."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping

from rcll import cli


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved, wanted = dict(os.environ), dict(env)
    os.environ.clear()
    os.environ.update(wanted)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def rcll(*args: str, env: Mapping[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `rcll ARGS`; env replaces the whole environment for the call (default: this one).
    An exception that escapes main() becomes exit status 1 with its traceback on stderr, as the
    interpreter would print it."""
    out, err = io.StringIO(), io.StringIO()
    source = io.TextIOWrapper(io.BytesIO((stdin or "").encode()), encoding="utf-8")
    argv = ["rcll", *args]
    with _environment(os.environ if env is None else env), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        saved_stdin, saved_argv = sys.stdin, sys.argv
        sys.stdin, sys.argv = source, argv
        try:
            code = cli.main(list(args))
        except SystemExit as e:                  # argparse's usage errors
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, int) and e.code is not None:
                print(e.code, file=sys.stderr)
        except Exception:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdin, sys.argv = saved_stdin, saved_argv
            sys.stdout.flush()
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
