"""A real `vllm serve` process on localhost, for the OpenAI-API tests."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import openai

from tests.conftest import VENV_BIN, child_environ

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


def start_server(
    model: Path,
    log_path: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    launcher: tuple[str, ...] = (),
    unset: tuple[str, ...] = (),
) -> Server:
    """`vllm serve MODEL` with no tuning flags (``env`` adds variables,
    ``unset`` removes some, ``launcher`` is a command that runs it, e.g. in
    a namespace); returns once /health answers."""
    port = free_port()
    log_file = log_path.open("w")
    process = subprocess.Popen(
        [
            *launcher,
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
        env=child_environ(env, unset),
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


def wait_for_status(url: str, status: int, timeout_s: float = 10) -> bool:
    """Whether GET ``url`` answers ``status`` within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == status:
                    return True
        except urllib.error.HTTPError as error:
            if error.code == status:
                return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


@dataclass
class StreamOutcome:
    tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None
    ended_at: float = 0.0


class InFlightStreams:
    """Streaming completions running in threads, through the official openai
    client; ``start`` returns once every stream has received a token."""

    def __init__(self, server: Server, model: Path, count: int, max_tokens: int):
        self.client = openai.OpenAI(
            base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0
        )
        self.model = str(model)
        self.max_tokens = max_tokens
        self.outcomes = [StreamOutcome() for _ in range(count)]
        self._first_token = [threading.Event() for _ in range(count)]
        self._threads = [
            threading.Thread(target=self._run, args=(index,), daemon=True)
            for index in range(count)
        ]

    def _run(self, index: int) -> None:
        outcome = self.outcomes[index]
        try:
            stream = self.client.completions.create(
                model=self.model,
                prompt="The cat",
                max_tokens=self.max_tokens,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
            for chunk in stream:
                if chunk.usage is not None:
                    # Exact: a chunk may carry several tokens when the
                    # server falls behind.
                    outcome.tokens = chunk.usage.completion_tokens
                elif chunk.choices:
                    outcome.tokens += 1  # a lower bound until the usage chunk
                if chunk.choices:
                    outcome.finish_reason = chunk.choices[0].finish_reason
                self._first_token[index].set()
        except openai.APIError as error:
            outcome.error = str(error)
        finally:
            outcome.ended_at = time.monotonic()
            self._first_token[index].set()

    def start(self, timeout_s: float = 120) -> InFlightStreams:
        for thread in self._threads:
            thread.start()
        for event in self._first_token:
            if not event.wait(timeout_s):
                raise TimeoutError(f"no token within {timeout_s}s")
        return self

    def join(self, timeout_s: float = 120) -> list[StreamOutcome]:
        for thread in self._threads:
            thread.join(timeout_s)
        return self.outcomes


def assert_greedy_text_is_transformers(
    server: Server, model: Path, hf_greedy: list[list[int]], prompts: list[str]
) -> None:
    """The server's greedy completion of each prompt (all MAX_TOKENS of it)
    is the text of Hugging Face transformers' greedy tokens. The prompts go
    in at once, as a server's clients send them: one batch of steps, where
    one request after another would take a step per token each (slow where
    the workers' collectives wait on a busy machine)."""
    from concurrent.futures import ThreadPoolExecutor

    from transformers import AutoTokenizer

    from tests.conftest import MAX_TOKENS

    tokenizer = AutoTokenizer.from_pretrained(model)
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused")

    def complete(prompt: str) -> str:
        completion = client.completions.create(
            model=str(model),
            prompt=prompt,
            max_tokens=MAX_TOKENS,
            temperature=0.0,
            extra_body={"min_tokens": MAX_TOKENS},
        )
        return completion.choices[0].text

    with ThreadPoolExecutor(len(prompts)) as pool:
        texts = list(pool.map(complete, prompts))
    assert texts == [tokenizer.decode(expected) for expected in hf_greedy]
