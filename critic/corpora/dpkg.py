"""Questions to Debian's package database (``dpkg-query``): which package owns a file, which version is
installed, which files a package ships.  The corpus builders record these beside the text they read.

``dpkg-query`` exits 0 when every pattern matched, 1 when some matched nothing (one stderr line each:
an answer, not a failure) and 2 on an error.  An error happens for real while apt or dpkg is installing
something: the database then has pending journal entries (``updates/``) that a reader cannot always
parse.  :func:`dpkg_query` retries an error a few times, waiting in between, and then raises
:class:`DpkgError` with dpkg-query's own message, so a builder never mistakes a busy database for "no
package owns this file".  ``DPKG_ADMINDIR`` in the environment points dpkg-query at another database.
"""

from __future__ import annotations

import shutil
import subprocess
import time

from ..document import DocumentError

__all__ = ["DpkgError", "dpkg_query", "have_dpkg"]

ATTEMPTS = 5
WAIT_SECONDS = 2.0


class DpkgError(DocumentError):
    """dpkg-query failed (not: found nothing) on every attempt."""


def have_dpkg() -> bool:
    """Whether this machine has a Debian package database to ask."""
    return shutil.which("dpkg-query") is not None


def dpkg_query(*args: str, attempts: int | None = None, wait: float | None = None) -> subprocess.CompletedProcess:
    """Run ``dpkg-query ARGS``; the completed process when it answered (exit 0, or 1 for patterns that
    matched nothing), else retry up to ``attempts`` times (default :data:`ATTEMPTS`), ``wait * k`` seconds
    (default :data:`WAIT_SECONDS`) before the k-th retry, and raise :class:`DpkgError` naming the command
    and dpkg-query's message."""
    attempts = ATTEMPTS if attempts is None else attempts
    wait = WAIT_SECONDS if wait is None else wait
    command = ["dpkg-query", *args]
    for attempt in range(1, attempts + 1):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode in (0, 1) and "error" not in done.stderr:
            return done
        if attempt < attempts:
            time.sleep(wait * attempt)
    shown = " ".join(command[:4]) + (" ..." if len(command) > 4 else "")
    message = " ".join(done.stderr.split()) or f"exit status {done.returncode}"
    raise DpkgError(f"`{shown}` failed {attempts} times (is apt or dpkg busy installing? run it again when it "
                    f"is done): {message}")
