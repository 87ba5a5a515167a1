"""Build KenLM's estimation tools (``lmplz``, ``build_binary``) from the PyPI source distribution.

The ``kenlm`` wheel only contains the query module; estimating a model needs ``lmplz``.  Its C++
sources ship in the PyPI sdist (``kenlm==0.3.0``), so :func:`setup_kenlm` downloads that sdist with
pip, configures it with cmake and builds the two targets into a cache folder:

* default ``~/.cache/critic/kenlm/bin``;
* ``CRITIC_KENLM_BIN`` (environment) names a folder holding ready ``lmplz`` / ``build_binary``
  and overrides the cache (nothing is built then).

It needs a C++ toolchain, cmake and Debian's ``libboost-program-options-dev libboost-system-dev
libboost-thread-dev libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev``.  The step is idempotent:
when the binaries are already there it returns at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from critic.io import user_cache

__all__ = [
    "KENLM_VERSION",
    "KenLMNotBuilt",
    "default_cache_dir",
    "find_kenlm_bin",
    "setup_kenlm",
]

KENLM_VERSION = "0.3.0"
_TOOLS = ("lmplz", "build_binary")
_APT_HINT = (
    "apt-get install cmake g++ libboost-program-options-dev libboost-system-dev "
    "libboost-thread-dev libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev"
)


class KenLMNotBuilt(RuntimeError):
    """Raised when ``lmplz`` is needed but has not been built (run ``critic setup kenlm``)."""


def default_cache_dir() -> Path:
    """The folder the tools are built into: ``$XDG_CACHE_HOME/critic/kenlm`` or ``~/.cache/critic/kenlm``."""
    return user_cache("kenlm")


def _has_tools(folder: Path) -> bool:
    return all((folder / t).is_file() and os.access(folder / t, os.X_OK) for t in _TOOLS)


def find_kenlm_bin(required: bool = True) -> Path | None:
    """Folder holding ``lmplz`` and ``build_binary``.

    Looks at ``$CRITIC_KENLM_BIN``, then the cache folder, then ``PATH``.  Raises
    :class:`KenLMNotBuilt` (or returns None when ``required`` is false) if none has them.
    """
    env = os.environ.get("CRITIC_KENLM_BIN")
    if env:
        if _has_tools(Path(env)):
            return Path(env)
        if required:
            raise KenLMNotBuilt(f"CRITIC_KENLM_BIN={env} does not hold executable {' and '.join(_TOOLS)}")
        return None
    cached = default_cache_dir() / "bin"
    if _has_tools(cached):
        return cached
    on_path = shutil.which("lmplz")
    if on_path and _has_tools(Path(on_path).parent):
        return Path(on_path).parent
    if required:
        raise KenLMNotBuilt("KenLM's lmplz is not built: run `critic setup kenlm` (see docs/critics/metrics.md)")
    return None


def _run(cmd: list[str], cwd: Path, log) -> None:
    log(f"$ {' '.join(cmd)}")
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{tail}")


def _download_sdist(dest: Path, log) -> Path:
    _run(
        # ``--no-binary kenlm`` (not ``:all:``, which would also build cmake from source for the
        # build environment); ``--no-build-isolation`` so preparing metadata needs nothing new.
        [sys.executable, "-m", "pip", "download", "--no-binary", "kenlm", "--no-deps",
         "--no-build-isolation", f"kenlm=={KENLM_VERSION}", "-d", str(dest)],
        dest,
        log,
    )
    found = sorted(dest.glob("kenlm-*.tar.gz"))
    if not found:
        raise RuntimeError(f"pip download left no kenlm sdist in {dest}")
    return found[0]


def setup_kenlm(
    cache_dir: str | os.PathLike | None = None,
    *,
    sdist: str | os.PathLike | None = None,
    force: bool = False,
    jobs: int | None = None,
    log=None,
) -> Path:
    """Build ``lmplz`` and ``build_binary`` (idempotent); return the folder holding them.

    ``sdist`` is a local ``kenlm-0.3.0.tar.gz`` (otherwise pip downloads it from the package index).
    With ``CRITIC_KENLM_BIN`` set and valid, nothing is built.
    """
    log = log or (lambda msg: print(msg, file=sys.stderr))
    if cache_dir is None and not force:
        ready = find_kenlm_bin(required=False)
        if ready is not None:
            return ready
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    bin_dir = cache / "bin"
    if _has_tools(bin_dir) and not force:
        return bin_dir
    if shutil.which("cmake") is None:
        raise RuntimeError(f"cmake is missing; install the build dependencies: {_APT_HINT}")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kenlm-build-", dir=cache) as tmp:
        tmp = Path(tmp)
        archive = Path(sdist) if sdist is not None else _download_sdist(tmp, log)
        with tarfile.open(archive) as tar:
            tar.extractall(tmp / "src", filter="data")
        roots = [p for p in (tmp / "src").iterdir() if (p / "CMakeLists.txt").is_file()]
        if not roots:
            raise RuntimeError(f"{archive} has no CMakeLists.txt at its top level")
        build = tmp / "build"
        build.mkdir()
        try:
            _run(["cmake", str(roots[0]), "-DCMAKE_BUILD_TYPE=Release"], build, log)
            _run(["make", f"-j{jobs or os.cpu_count() or 2}", *_TOOLS], build, log)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\nBuild dependencies: {_APT_HINT}") from None
        bin_dir.mkdir(parents=True, exist_ok=True)
        for tool in _TOOLS:
            shutil.copy2(build / "bin" / tool, bin_dir / tool)
    log(f"KenLM tools ready in {bin_dir}")
    return bin_dir
