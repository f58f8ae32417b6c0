"""Shared fixtures for end-to-end tests of the TensorFold binary: paths, tokenizer, a running server."""
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from e2e_util import MODEL_ID

# Repo root is two levels above tests/e2e/.
REPO_ROOT = Path(__file__).resolve().parents[2]
# Small context so the "prompt too long" refusal is cheap to trigger.
SERVER_CONTEXT = 512
HEALTH_TIMEOUT_S = 120.0


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


# tf_bin and model_path return str: other e2e tests use them as plain strings.
@pytest.fixture(scope="session")
def tf_bin():
    p = Path(os.environ.get("TF_BIN") or REPO_ROOT / "build" / "cpu-release" / "tensorfold")
    if not (p.is_file() and os.access(p, os.X_OK)):
        pytest.skip(f"tensorfold binary not found at {p} (build it or set TF_BIN)")
    return str(p)


@pytest.fixture(scope="session")
def model_path():
    p = Path(os.environ.get("TF_MODEL") or REPO_ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not p.exists():
        pytest.skip(f"model not found at {p} (set TF_MODEL)")
    return str(p)


@pytest.fixture(scope="session")
def tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    path = REPO_ROOT / "tests" / "fixtures" / "smollm2" / "tokenizer.json"
    if not path.is_file():
        pytest.skip(f"tokenizer fixture missing: {path}")
    return tokenizers.Tokenizer.from_file(str(path))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"<cannot read log {path}: {e}>"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class ServerHandle:
    base_url: str
    port: int
    proc: subprocess.Popen
    log_path: Path
    cmd: list = field(default_factory=list)
    log_file: object = None

    def log_tail(self, lines: int = 40) -> str:
        return _log_tail(self.log_path, lines)

    def stop(self) -> None:
        """SIGTERM, then kill after 10 s; safe to call more than once."""
        _stop(self.proc)
        if self.log_file is not None and not self.log_file.closed:
            self.log_file.close()


def _health_ok(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def launch_server(tf_bin: str, model_path: str, log_path: Path, extra_args=()) -> ServerHandle:
    """Start `tensorfold serve` on a free port and wait for /health; fails the test with the log tail otherwise."""
    port = _free_port()
    cmd = [tf_bin, "serve", model_path, "--host", "127.0.0.1", "--port", str(port),
           "--name", MODEL_ID, *[str(a) for a in extra_args]]
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    handle = ServerHandle(f"http://127.0.0.1:{port}", port, proc, log_path, cmd, log)
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    try:
        while not _health_ok(handle.base_url):
            if proc.poll() is not None:
                pytest.fail(f"server exited with code {proc.returncode} before /health was 200\n"
                            f"command: {' '.join(cmd)}\n--- log tail ---\n{handle.log_tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"server /health not 200 after {HEALTH_TIMEOUT_S:.0f} s\n"
                            f"command: {' '.join(cmd)}\n--- log tail ---\n{handle.log_tail()}")
            time.sleep(0.05)
    except BaseException:
        handle.stop()
        raise
    return handle


@pytest.fixture(scope="session")
def server(tf_bin, model_path, tmp_path_factory) -> ServerHandle:
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    handle = launch_server(tf_bin, model_path, log_path, ["--context", SERVER_CONTEXT])
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="session")
def start_server(tf_bin, model_path, tmp_path_factory):
    """Factory: start_server(*extra_args) launches another server with those flags; all are stopped at session end."""
    started = []

    def start(*extra_args) -> ServerHandle:
        log_path = tmp_path_factory.mktemp("extra_server") / "server.log"
        handle = launch_server(tf_bin, model_path, log_path, extra_args)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.stop()


@pytest.fixture(scope="session")
def client(server: ServerHandle):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0, timeout=120)
