"""A real `vllm serve` process on localhost, for the OpenAI-API tests."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import VENV_BIN

START_TIMEOUT_S = 600


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: signal.Signals, timeout_s: float = 120) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout_s)


def start_server(model: Path, log_path: Path, *extra: str) -> Server:
    """`vllm serve MODEL` with no tuning flags; returns once /health answers."""
    port = free_port()
    log_file = log_path.open("w")
    process = subprocess.Popen(
        [
            str(VENV_BIN / "vllm"),
            "serve",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *extra,
        ],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    server = Server(process, port, log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"vllm serve exited {process.returncode}:\n{server.log()[-4000:]}"
            )
        try:
            with urllib.request.urlopen(
                f"{server.base_url}/health", timeout=2
            ) as reply:
                if reply.status == 200:
                    return server
        except OSError:
            time.sleep(1)
    server.stop(signal.SIGKILL)
    raise TimeoutError(
        f"vllm serve not healthy in {START_TIMEOUT_S}s:\n{server.log()[-4000:]}"
    )
