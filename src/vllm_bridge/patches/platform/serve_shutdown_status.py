"""What `vllm serve` tells its clients and its supervisor when it stops:
503 to every new request (and to /health) once a shutdown has begun, and
exit status 1, within a second, when its engine core or a worker died."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from vllm_bridge.compat import SUPPORTED_VLLM
from vllm_bridge.log import get_logger
from vllm_bridge.patching.spec import Patch

POLL_INTERVAL_S = 0.2
# How long a dead engine's output handler may take to hand the error to
# every request before the server's shutdown begins.
ERROR_HANDOFF_S = 1.0
EXIT_MESSAGE = (
    "vllm-bridge: error: the engine stopped while serving (a worker or the "
    "engine-core process died; the log above names the cause). vllm serve "
    "exits with status 1 so that a supervisor (systemd Restart=on-failure, "
    "Kubernetes) restarts it."
)
STOPPING_MESSAGE = (
    "The server is shutting down and takes no new requests; send this "
    "request to another instance or retry once it is back."
)
# One API server per process (vLLM's single-server path): the flag is the
# process's.
STOPPING = threading.Event()

logger = get_logger("serve_shutdown")


class RefuseWhileStopping:
    """ASGI middleware: once the shutdown has begun, every new request
    (including /health, so that load balancers stop routing here) gets 503;
    requests already in flight are past it and finish (or are aborted)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not STOPPING.is_set():
            await self.app(scope, receive, send)
            return
        from starlette.responses import JSONResponse

        response = JSONResponse(
            {
                "error": {
                    "message": STOPPING_MESSAGE,
                    "type": "ServiceUnavailableError",
                    "param": None,
                    "code": 503,
                }
            },
            status_code=503,
            headers={"Connection": "close", "Retry-After": "5"},
        )
        await response(scope, receive, send)


MIDDLEWARE = f"{__name__}.{RefuseWhileStopping.__name__}"


class EngineDeathWatch:
    """Tells a shutdown the user asked for (the engine alive when it began)
    from a dead engine (the engine already errored when its shutdown
    began), and starts vLLM's own shutdown path as soon as the engine dies.
    """

    def __init__(self, engine_client: Any) -> None:
        self.engine_client = engine_client
        self.shutdown_began = False
        self.died = False
        shutdown = engine_client.shutdown

        @functools.wraps(shutdown)
        def recording_shutdown(*args: Any, **kwargs: Any) -> None:
            if not self.shutdown_began:
                self.shutdown_began = True
                self.died = bool(engine_client.errored)
                STOPPING.set()
            shutdown(*args, **kwargs)

        engine_client.shutdown = recording_shutdown

    async def watch(self) -> None:
        import vllm.envs

        if vllm.envs.VLLM_KEEP_ALIVE_ON_ENGINE_DEATH:
            return  # the user asked the server to outlive its engine
        while not self.shutdown_began:
            if self.engine_client.errored:
                logger.error(
                    "vllm-bridge: the engine died while serving; stopping the server"
                )
                # vLLM marks the engine dead before its output handler has
                # failed the requests in flight with the engine's death;
                # a shutdown begun in between aborts them instead.
                handler = getattr(self.engine_client, "output_handler", None)
                if isinstance(handler, asyncio.Task):
                    await asyncio.wait({handler}, timeout=ERROR_HANDOFF_S)
                # The handler vLLM's HTTP server installed for SIGTERM runs
                # its whole shutdown; vLLM's own watchdog would take up to 5 s.
                signal.raise_signal(signal.SIGTERM)
                return
            await asyncio.sleep(POLL_INTERVAL_S)


async def _exit_if_engine_died(
    shutdown: Awaitable[Any], death_watch: EngineDeathWatch
) -> None:
    await shutdown
    if death_watch.died:
        raise SystemExit(EXIT_MESSAGE)


def report_shutdown_status(
    original: Callable[..., Awaitable[Any]],
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(original)
    async def build_and_serve(
        engine_client: Any,
        listen_address: Any,
        sock: Any,
        args: Any,
        *rest: Any,
        **kw: Any,
    ) -> Any:
        STOPPING.clear()
        # vLLM's --middleware list: build_app adds each to the app.
        if MIDDLEWARE not in args.middleware:
            args.middleware = [*args.middleware, MIDDLEWARE]
        death_watch = EngineDeathWatch(engine_client)
        watch_task = asyncio.create_task(death_watch.watch())
        try:
            shutdown = await original(
                engine_client, listen_address, sock, args, *rest, **kw
            )
        finally:
            watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch_task
        # The caller awaits this after it has shut the engine client down,
        # when the verdict is known.
        return _exit_if_engine_died(shutdown, death_watch)

    return build_and_serve


PATCH = Patch(
    name="serve-shutdown-status",
    target="vllm.entrypoints.launchers.api_server.entry:build_and_serve",
    stage="platform",
    kind="wrap",
    new=report_shutdown_status,
    why=(
        "When a worker or the engine-core process dies (OOM killer, a crash "
        "in a kernel), `vllm serve` fails the in-flight requests and then "
        "exits with status 0, up to 5 s later (its watchdog's period): "
        "systemd's Restart=on-failure and Kubernetes' restartPolicy "
        "OnFailure take that for a clean stop and leave the service down. "
        "While a SIGTERM drains, new requests get HTTP 500 ('cannot schedule "
        "new futures after shutdown') with a traceback in the log, and "
        "/health still answers 200, so load balancers keep sending traffic."
    ),
    how=(
        "The wrapped build_and_serve adds a middleware (through vLLM's "
        "--middleware list) that answers 503 with Retry-After to every new "
        "request once the engine client's shutdown has begun; records "
        "whether the engine had already errored when that shutdown began (a "
        "dead engine) or not (a requested shutdown); polls the engine every "
        "0.2 s while serving and on its death raises SIGTERM to start vLLM's "
        "own shutdown path; the shutdown it returns ends with SystemExit(1) "
        "and one line when the engine had died. VLLM_KEEP_ALIVE_ON_ENGINE_DEATH "
        "keeps vLLM's behaviour on a death."
    ),
    upstream=(
        "none yet: to be reported to vLLM (the API server should exit "
        "non-zero after an engine death and refuse new requests with 503 "
        "while it drains)"
    ),
    remove_when=(
        "`vllm serve` exits non-zero when its engine dies and answers 503 "
        "while it drains"
    ),
    vllm_versions=SUPPORTED_VLLM,
    fingerprint="641890293f037488",
)
