"""Real fenceproxy processes for the tests, and small HTTP servers beside them.

The binary is FENCEPROXY_BIN, or built once per test run from the
repository this directory is in (``go build ./cmd/fenceproxy``). Without
either the tests that need it are skipped, unless CI is set: then they fail.
Every listener binds 127.0.0.1 port 0; fenceproxy's ports are read from its
"fenceproxy started" log line.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

try:  # the installed package; else this checkout's source
    import fenceproxy  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

_build_lock = threading.Lock()
_built: Optional[str] = None
_tmp_dirs: List[str] = []


def in_ci() -> bool:
    return os.environ.get("CI", "") not in ("", "0", "false")


def skip_or_fail(test: unittest.TestCase, why: str) -> None:
    """Skip, or under CI fail: CI must run every test."""
    if in_ci():
        test.fail(why + " (CI is set: not skipped)")
    raise unittest.SkipTest(why)


def need_boto3(test: unittest.TestCase) -> None:
    try:
        import boto3  # noqa: F401
        import botocore  # noqa: F401
    except ImportError as e:
        skip_or_fail(test, "boto3 is not installed: %s" % e)


def fenceproxy_bin(test: unittest.TestCase) -> str:
    """FENCEPROXY_BIN, else a binary built from this repository once."""
    global _built
    path = os.environ.get("FENCEPROXY_BIN")
    if path:
        if not os.access(path, os.X_OK):
            test.fail("FENCEPROXY_BIN=%s is not an executable" % path)
        return path
    with _build_lock:
        if _built:
            return _built
        go = shutil.which("go")
        if not go or not os.path.exists(os.path.join(REPO, "go.mod")):
            skip_or_fail(test, "no FENCEPROXY_BIN, and no go toolchain and repository (%s) to build it" % REPO)
        d = tempfile.mkdtemp(prefix="fenceproxy-pytest-bin-")
        _tmp_dirs.append(d)
        out = os.path.join(d, "fenceproxy")
        t0 = time.monotonic()
        res = subprocess.run([go, "build", "-o", out, "./cmd/fenceproxy"], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if res.returncode != 0:
            test.fail("go build ./cmd/fenceproxy failed:\n" + res.stdout.decode(errors="replace"))
        sys.stderr.write("[built fenceproxy in %.1fs]\n" % (time.monotonic() - t0))
        _built = out
        return out


def cleanup() -> None:
    for d in _tmp_dirs:
        shutil.rmtree(d, ignore_errors=True)


atexit.register(cleanup)


class Fenceproxy:
    """One fenceproxy process: ``serve`` (plain mode in front of upstream)
    or ``demo`` (S3 pass mode in front of its in-memory S3 store, bucket
    "demo"). proxy_url and control_url are its listeners."""

    def __init__(self, test: unittest.TestCase, command: str = "serve", env: Optional[Dict[str, str]] = None):
        binary = fenceproxy_bin(test)
        self.data_dir = tempfile.mkdtemp(prefix="fenceproxy-pytest-data-")
        full = {k: v for k, v in os.environ.items() if not k.startswith("FENCEPROXY_")}
        full.update({
            "FENCEPROXY_LISTEN": "127.0.0.1:0",
            "FENCEPROXY_CONTROL_LISTEN": "127.0.0.1:0",
            "FENCEPROXY_DATA_DIR": self.data_dir,
            "FENCEPROXY_SHUTDOWN_TIMEOUT": "2s",
            "FENCEPROXY_MIN_FREE_SPACE": "0",
        })
        full.update(env or {})
        self.log: List[str] = []
        self.proc = subprocess.Popen([binary, command], env=full, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        started = threading.Event()
        self._addrs: Tuple[str, str] = ("", "")

        def read() -> None:
            assert self.proc.stderr is not None
            for raw in self.proc.stderr:
                line = raw.decode(errors="replace").rstrip("\n")
                self.log.append(line)
                if not started.is_set() and '"fenceproxy started"' in line:
                    try:
                        rec = json.loads(line)
                        self._addrs = (rec["listen"], rec["control_listen"])
                    except (ValueError, KeyError):
                        pass
                    started.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 30
        while not started.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                test.fail("fenceproxy %s did not start:\n%s" % (command, "\n".join(self.log[-30:])))
        if not self._addrs[0]:
            self.stop()
            test.fail("no listener addresses in the start-up line:\n" + "\n".join(self.log[-5:]))
        self.proxy_url = "http://" + self._addrs[0]
        self.control_url = "http://" + self._addrs[1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        shutil.rmtree(self.data_dir, ignore_errors=True)


class QuietServer(ThreadingHTTPServer):
    """A threading HTTP server that says nothing of clients that hang up."""

    daemon_threads = True

    def handle_error(self, request, client_address):  # type: ignore[no-untyped-def]
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class Recorded:
    def __init__(self, method: str, path: str, headers: Dict[str, str], body: bytes):
        self.method, self.path, self.headers, self.body = method, path, headers, body


class Backend:
    """A plain-mode backend: PUT stores the body in memory, GET returns it
    (404 when absent), DELETE removes it; every request is recorded."""

    def __init__(self) -> None:
        self.objects: Dict[str, bytes] = {}
        self.requests: List[Recorded] = []
        self.lock = threading.Lock()
        backend = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _answer(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _record(self, body: bytes) -> None:
                with backend.lock:
                    backend.requests.append(Recorded(self.command, self.path, dict(self.headers.items()), body))

            def do_PUT(self) -> None:
                body = self._body()
                self._record(body)
                with backend.lock:
                    backend.objects[self.path] = body
                self._answer(200)

            def do_GET(self) -> None:
                self._record(b"")
                with backend.lock:
                    data = backend.objects.get(self.path)
                self._answer(200, data) if data is not None else self._answer(404, b"not found")

            def do_DELETE(self) -> None:
                self._record(self._body())
                with backend.lock:
                    backend.objects.pop(self.path, None)
                self._answer(204)

            do_POST = do_PUT

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeServer:
    """A scripted HTTP server: handler(method, path, headers, body) returns
    (status, headers, body). Every request is recorded."""

    def __init__(self, handler) -> None:  # type: ignore[no-untyped-def]
        self.requests: List[Recorded] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                fake.requests.append(Recorded(self.command, self.path, dict(self.headers.items()), body))
                status, headers, out = handler(self.command, self.path, self.headers, body)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_PUT = do_POST = do_DELETE = _any

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
