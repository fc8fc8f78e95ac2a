"""The real `vllm` executable serving the tiny model with the plugin and no
other flags but `--dtype float32`, queried with the official openai client.

The dtype is tests/engine/test_llm_compiled.py's: that module runs first on
the same xdist worker (tests/conftest.py's SHARED_COMPILE_SCOPES), and this
server loads the graph it compiled."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import run_venv_command
from tests.engine.bad_requests import CASES, MODEL, BadRequest
from tests.engine.server_support import (
    InFlightStreams,
    Server,
    start_server,
    wait_for_status,
)
from vllm_bridge.patches.platform.serve_shutdown_status import STOPPING_MESSAGE

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def server(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    running = start_server(
        tiny_model, tmp_path_factory.mktemp("serve") / "serve.log", "--dtype", "float32"
    )
    yield running
    running.stop(signal.SIGKILL)


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused")


def test_completion(client: openai.OpenAI, tiny_model: Path):
    reply = client.completions.create(
        model=str(tiny_model), prompt="Hello world", max_tokens=8, temperature=0
    )
    assert reply.usage.completion_tokens == 8
    assert reply.choices[0].text


def test_chat_completion(client: openai.OpenAI, tiny_model: Path):
    reply = client.chat.completions.create(
        model=str(tiny_model),
        messages=[{"role": "user", "content": "Say something."}],
        max_tokens=8,
        temperature=0,
    )
    assert reply.choices[0].message.role == "assistant"
    assert reply.usage.completion_tokens > 0


def test_streamed_completion(client: openai.OpenAI, tiny_model: Path):
    stream = client.completions.create(
        model=str(tiny_model),
        prompt="The cat",
        max_tokens=8,
        temperature=0,
        stream=True,
    )
    pieces = [chunk.choices[0].text for chunk in stream if chunk.choices]
    assert len(pieces) >= 2
    assert "".join(pieces)


def test_bridge_is_the_platform_in_every_process(server: Server):
    log = server.log()
    # Each process writes with vLLM's process prefix.
    assert re.search(r"\(APIServer pid=\d+\).*vllm-bridge reconciled the config", log)
    assert re.search(r"\(EngineCore pid=\d+\).*vllm-bridge reconciled the config", log)
    assert re.search(r"\((Vllm)?Worker(-\d+)? pid=\d+\).*vllm-bridge worker ready", log)


def test_platform_stage_patches_reach_the_engine_core(server: Server):
    from vllm_bridge.patches.catalogue import REGISTRY

    stage_line = re.search(
        r"\(EngineCore pid=\d+\).*vllm-bridge platform stage in process \d+: "
        r"applied \[(.*)\], deferred until their module is imported \[(.*)\], "
        r"not needed here \[(.*)\]",
        server.log(),
    )
    assert stage_line, server.log()[-3000:]
    reached = ", ".join(stage_line.groups()).split(", ")
    for patch in REGISTRY.patches("platform"):
        assert patch.name in reached


def test_api_server_applied_the_shutdown_patch(server: Server):
    from vllm_bridge.patches.platform.async_llm_quiet_shutdown import PATCH

    assert re.search(
        rf"\(APIServer pid=\d+\).*vllm-bridge (applied deferred patch {PATCH.name}"
        rf"|platform stage in process \d+: applied \[[^]]*{PATCH.name})",
        server.log(),
    )


def test_vllm_bench_serve_client(server: Server, tiny_model: Path):
    """The benchmark client is a `vllm` process that loads platform plugins
    too."""
    proc = run_venv_command(
        "vllm",
        "bench",
        "serve",
        "--backend",
        "openai",
        "--base-url",
        server.base_url,
        "--model",
        str(tiny_model),
        "--dataset-name",
        "random",
        "--num-prompts",
        "4",
        "--random-input-len",
        "16",
        "--random-output-len",
        "8",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"Successful requests:\s+4", proc.stdout), proc.stdout[-3000:]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_request_gets_a_4xx_naming_the_problem(
    client: openai.OpenAI, server: Server, tiny_model: Path, case: BadRequest
):
    path = "/" + case.endpoint.replace(".", "/")
    if case.raw is None:
        # The official client's raw POST: its typed methods refuse some of
        # these bodies before sending them.
        body = {
            key: str(tiny_model) if value == MODEL else value
            for key, value in case.body.items()
        }
        with pytest.raises(openai.APIStatusError) as raised:
            client.post(path, body=body, cast_to=object)
        status, message = raised.value.status_code, str(raised.value.body)
    else:
        # Bytes that are not JSON cannot go through the openai client.
        reply = httpx.post(
            f"{server.base_url}/v1{path}",
            content=case.raw,
            headers={"content-type": "application/json"},
            timeout=60,
        )
        status, message = reply.status_code, reply.text
    assert status == case.status, message
    assert case.message in message
    after = client.completions.create(
        model=str(tiny_model), prompt="The cat", max_tokens=2, temperature=0
    )
    assert after.usage.completion_tokens == 2


def metric(server: Server, name: str) -> float:
    """The sum of a /metrics series over its label sets."""
    metrics = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    values = re.findall(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", metrics, re.M)
    assert values, (name, metrics[-2000:])
    return sum(float(value) for value in values)


def test_client_that_hangs_up_mid_stream_frees_its_request(
    client: openai.OpenAI, server: Server, tiny_model: Path
):
    generated_before = metric(server, "vllm:generation_tokens_total")
    stream = client.completions.create(
        model=str(tiny_model),
        prompt="The cat",
        max_tokens=2000,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    for _, _chunk in zip(range(3), stream, strict=False):
        pass
    assert metric(server, "vllm:num_requests_running") == 1
    stream.close()  # the client hangs up: the connection closes
    deadline = time.monotonic() + 30
    while (
        metric(server, "vllm:num_requests_running") > 0 and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert metric(server, "vllm:num_requests_running") == 0
    # Freed by an abort, not by running to its 2000 tokens.
    assert metric(server, "vllm:generation_tokens_total") - generated_before < 2000


def test_bad_requests_left_no_error_in_the_log(server: Server):
    """Runs after the bad requests and the hang-up (module order): a
    client's mistake is the client's, not a server error."""
    assert "Traceback" not in server.log()
    assert "ERROR" not in server.log()


def test_sigterm_lets_in_flight_requests_finish_and_exits_0(
    server: Server, tiny_model: Path
):
    """Last in this module: it stops the shared server (SIGTERM, as systemd
    and Kubernetes send; Ctrl-C's SIGINT takes the same handler). The
    shutdown_drain rule sets vLLM's --shutdown-timeout: at vLLM's default
    (0) these streams would be aborted."""
    streams = InFlightStreams(server, tiny_model, count=3, max_tokens=1500).start()
    server.process.send_signal(signal.SIGTERM)
    # A request that arrives while the streams drain is refused, and the
    # health check says so (serve-shutdown-status patch).
    refused = wait_for_status(f"{server.base_url}/health", 503)
    with pytest.raises(openai.APIStatusError) as new_request:
        openai.OpenAI(
            base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0
        ).completions.create(model=str(tiny_model), prompt="late", max_tokens=2)
    status = server.stop(signal.SIGTERM)
    log = server.log()
    assert status == 0, log[-3000:]
    assert "mode=drain" in log
    assert refused, log[-3000:]
    assert new_request.value.status_code == 503
    assert STOPPING_MESSAGE in str(new_request.value.body)
    for outcome in streams.join():
        assert outcome.error is None, outcome
        assert (outcome.finish_reason, outcome.tokens) == ("length", 1500)
    assert "Traceback" not in log
    assert "ERROR" not in log
