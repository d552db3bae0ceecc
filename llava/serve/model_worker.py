"""A model worker: loads one checkpoint and answers generation requests for it.

    python -m llava.serve.model_worker --model-path CKPT [--host 127.0.0.1] [--port 21002]
        [--worker-address http://localhost:21002] [--controller-address http://localhost:21001]
        [--model-base BASE] [--model-name NAME] [--device cuda] [--limit-model-concurrency 5]
        [--stream-interval 1] [--no-register] [--load-8bit | --load-4bit] [--use-flash-attn]
        [--heartbeat-interval 15] [--max-image-megapixels 25] [--max-upload-mb 20] [--max-images 8]
        [--max-request-mb 32] [--max-waiting-requests 16] [--max-pending-mb 256]
        [--limit-concurrency 256] [--timeout-keep-alive 5] [--body-timeout 60]

Upstream's endpoints (POST, JSON): ``/worker_generate_stream`` streams NUL-separated
``{"text", "error_code"}`` chunks (see :mod:`llava.serve.protocol`); ``/worker_get_status`` ->
``{model_names, speed, queue_length}``. Added: ``/worker_get_compressor_view`` {images: [base64], prompt?} -> the
compressor panel's JSON (:mod:`llava.serve.panels`, with a reducer also its kept positions for ``prompt``;
``{"available": false}`` for projectors without a view; 400 ``{"error"}`` for a bad image).

At most ``--limit-model-concurrency`` requests run at once; the others wait (and count in
``queue_length``). At most ``--max-waiting-requests`` more may wait, and all held requests together carry at
most ``--max-pending-mb`` of body: a request beyond either bound is refused at once, before its body is read,
with HTTP 503 and upstream's error JSON ``{"text": "...", "error_code": 1}``. The worker registers with the controller once it is listening, then sends a
heartbeat
every ``--heartbeat-interval`` seconds and registers again whenever the controller has forgotten it.
Without ``--worker-address`` the worker announces ``http://<host>:<port>`` (``localhost`` for 127.0.0.1).
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # started as a file: run as ``python -m llava.serve.<name>``
    import os  # noqa: E401
    import sys
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    from llava.serve import run_as_module
    run_as_module(__file__)

import argparse
import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import iterate_in_threadpool

from llava import net
from llava.constants import WORKER_HEART_BEAT_INTERVAL
from llava.endpoints import join_url
from llava.numeric import check_seconds
from llava.utils import UserError, cli_main, setup_logging

from .admission import WorkerRefused, worker_origin
from .flags import (
    COUNT,
    COUNT_OR_ZERO,
    MIB,
    SECONDS,
    add_bind_flags,
    add_flag,
    add_image_limit_flags,
    add_model_flags,
    add_request_limit_flags,
    add_server_limit_flags,
    check_bind,
    image_limits,
    model_device,
    model_fast,
    request_limit,
    server_limits,
)
from .protocol import WORKER_ERROR, sentence
from .webapi import DEFAULT_MAX_REQUEST_BYTES, PendingLimit, bad_request, read_body, uvicorn_server

if TYPE_CHECKING:
    from .engine import ModelEngine

logger = logging.getLogger(__name__)

#: The compressor panel's endpoint.
VIEW_ROUTE = "/worker_get_compressor_view"

#: Seconds to wait for the server to start listening before registering anyway.
_STARTUP_WAIT = 120.0
#: Seconds, in all, for one call to the controller (registration, heartbeat).
CONTROLLER_TIMEOUT = 10.0
#: Defaults of ``--max-waiting-requests`` and ``--max-pending-mb``.
DEFAULT_MAX_WAITING = 16
DEFAULT_MAX_PENDING_BYTES = 256 * 1024 * 1024


class ConcurrencyGate:
    """Lets at most ``limit`` requests use the model at once and counts those running or waiting."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit_model_concurrency must be at least 1, got {limit}")
        self.limit = limit
        self._semaphore = asyncio.Semaphore(limit)
        self.running = 0
        self.waiting = 0

    @property
    def queue_length(self) -> int:
        return self.running + self.waiting

    async def __aenter__(self) -> ConcurrencyGate:
        self.waiting += 1
        try:
            await self._semaphore.acquire()
        finally:
            self.waiting -= 1
        self.running += 1
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.running -= 1
        self._semaphore.release()


class ModelWorker:
    """Registration and heartbeats of one :class:`ModelEngine` with a controller.

    Args:
        engine: The loaded model.
        controller_address: e.g. ``http://localhost:21001``.
        worker_address: The URL the controller and web servers use to reach this worker.
        limit_model_concurrency: Requests allowed to use the model at once.
        heartbeat_interval: Seconds between heartbeats.
    """

    def __init__(
        self,
        engine: ModelEngine,
        controller_address: str,
        worker_address: str,
        *,
        limit_model_concurrency: int = 5,
        heartbeat_interval: float = WORKER_HEART_BEAT_INTERVAL,
    ) -> None:
        check_seconds(heartbeat_interval, "heartbeat_interval (--heartbeat-interval)")
        self.engine = engine
        self.controller_address = controller_address.rstrip("/")
        self.worker_address = worker_address.rstrip("/")
        self.gate = ConcurrencyGate(limit_model_concurrency)
        self.heartbeat_interval = float(heartbeat_interval)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def status(self) -> dict[str, Any]:
        return self.engine.status(self.gate.queue_length)

    def _call_controller(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        url = join_url(self.controller_address, path, "--controller-address")
        response = net.request("POST", url, json=payload, deadline=CONTROLLER_TIMEOUT,
                               max_bytes=64 * 1024, max_redirects=0)
        data = response.json()
        if not isinstance(data, dict):
            raise ValueError(f"HTTP {response.status}, not a JSON object")
        if response.status != 200:
            raise ValueError(f"HTTP {response.status}: {data.get('error', data)}")
        return data

    def register(self) -> bool:
        """Announce this worker to the controller (which then asks this worker for its status); False (logged)
        if the controller cannot be reached or does not list the worker."""
        payload = {"worker_name": self.worker_address, "check_heart_beat": True, "worker_status": self.status()}
        try:
            answer = self._call_controller("/register_worker", payload)
        except (net.NetError, ValueError) as error:
            logger.error("cannot register with the controller at %s: %s", self.controller_address, error)
            return False
        if answer.get("registered") is False:
            logger.error("the controller at %s did not register %s: %s", self.controller_address, self.worker_address,
                         answer.get("error", "no reason given"))
            return False
        logger.info("registered %s as %s", self.engine.model_name, self.worker_address)
        return True

    def send_heartbeat(self) -> None:
        """One heartbeat; registers again if the controller no longer knows this worker."""
        payload = {"worker_name": self.worker_address, "queue_length": self.gate.queue_length}
        try:
            known = bool(self._call_controller("/receive_heart_beat", payload).get("exist"))
        except (net.NetError, ValueError) as error:
            logger.warning("heartbeat to %s failed: %s", self.controller_address, error)
            return
        if not known:
            self.register()

    def start(self, ready: Callable[[], bool] = lambda: True) -> None:
        """Start the heartbeat thread; it registers as soon as ``ready()`` (the server is listening)."""

        def run() -> None:
            waited = 0.0
            while not ready() and waited < _STARTUP_WAIT and not self._stop.wait(0.1):
                waited += 0.1
            registered = self.register()
            while not self._stop.wait(self.heartbeat_interval):
                if registered:
                    self.send_heartbeat()
                else:
                    registered = self.register()

        self._thread = threading.Thread(target=run, name="worker-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


def busy_answer(message: str) -> tuple[int, dict[str, Any]]:
    """A request refused because the worker holds as many as it accepts: HTTP 503 with upstream's error JSON
    (and ``error``, which the compressor-view clients read)."""
    return 503, {"text": sentence(message), "error_code": WORKER_ERROR, "error": sentence(message)}


def create_app(engine: ModelEngine, gate: ConcurrencyGate, *, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
               max_waiting: int = DEFAULT_MAX_WAITING, max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES) -> FastAPI:
    """The worker's FastAPI app.

    Args:
        engine: The loaded model.
        gate: Bounds how many requests use ``engine`` at once.
        max_request_bytes: Largest body accepted (a larger one gets a 413 answer).
        max_waiting: Requests that may wait for the gate besides those running; more are refused at once (503).
        max_pending_bytes: Body bytes of all held requests together; a request beyond it is refused at once (503).
    """
    if max_waiting < 0:
        raise UserError(f"--max-waiting-requests must be at least 0, got {max_waiting}")
    app = FastAPI(title=f"LLaVA model worker ({engine.model_name})")
    app.add_middleware(
        PendingLimit, paths=("/worker_generate_stream", VIEW_ROUTE),
        max_requests=gate.limit + max_waiting, max_bytes=max_pending_bytes, max_request_bytes=max_request_bytes,
        refusal=busy_answer,
    )

    @app.post("/worker_generate_stream")
    async def worker_generate_stream(request: Request) -> Any:
        params = await read_body(request, max_bytes=max_request_bytes)
        if isinstance(params, JSONResponse):
            return params

        async def chunks() -> AsyncIterator[bytes]:
            async with gate:
                stream = engine.generate_stream(params)
                try:
                    async for chunk in iterate_in_threadpool(stream):
                        yield chunk.encode()
                finally:
                    # A client that went away stops the generation (the thread step has finished here).
                    stream.close()

        return StreamingResponse(chunks())

    @app.post("/worker_get_status")
    async def worker_get_status() -> Any:
        return engine.status(gate.queue_length)

    async def worker_get_compressor_view(request: Request) -> Any:
        params = await read_body(request, "images", max_bytes=max_request_bytes)
        if isinstance(params, JSONResponse):
            return params
        async with gate:
            try:
                return await run_in_threadpool(engine.compressor_view, params)
            except ValueError as error:
                return bad_request(sentence(str(error)))
            except Exception as error:
                logger.exception("the compressor view failed")
                message = f"the compressor view failed ({type(error).__name__}: {error})"
                return JSONResponse({"error": message}, status_code=500)

    app.add_api_route(VIEW_ROUTE, worker_get_compressor_view, methods=["POST"])

    return app


def default_worker_address(host: str, port: int) -> str:
    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::", "") else host
    return f"http://{shown}:{port}"


def _check_addresses(controller_address: str, worker_address: str) -> None:
    """Refuse addresses the controller could not use, before the model loads.

    Raises:
        UserError: For a controller URL that is not http(s), or a worker address that is not a bare origin.
    """
    try:
        net.origin_of(controller_address)
    except net.NetError as error:
        raise UserError(f"--controller-address: {error}; give e.g. http://localhost:21001") from None
    try:
        worker_origin(worker_address, None)
    except WorkerRefused as error:
        raise UserError(f"--worker-address: {error}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llava.serve.model_worker", description=__doc__.splitlines()[0])
    add_bind_flags(parser, 21002)
    add_flag(parser, "--worker-address", "--worker", type=str, default=None,
             help="URL announced to the controller (default http://<host>:<port>)")
    add_flag(parser, "--controller-address", "--controller", type=str, default="http://localhost:21001")
    add_model_flags(parser)
    add_flag(parser, "--multi-modal", action="store_true",
             help="accepted for compatibility; image support is detected from the checkpoint")
    add_flag(parser, "--stream-interval", type=COUNT, default=1, help="send a chunk every this many decoded pieces")
    add_flag(parser, "--no-register", action="store_true", help="do not register with a controller")
    add_flag(parser, "--heartbeat-interval", type=SECONDS, default=WORKER_HEART_BEAT_INTERVAL,
             help="seconds between heartbeats to the controller")
    add_image_limit_flags(parser)
    add_request_limit_flags(parser)
    add_flag(parser, "--max-waiting-requests", type=COUNT_OR_ZERO, default=DEFAULT_MAX_WAITING,
             help="requests that may wait besides the running ones; more get HTTP 503 at once")
    add_flag(parser, "--max-pending-mb", type=MIB, default=DEFAULT_MAX_PENDING_BYTES / 2**20,
             help="request bodies (MiB) the worker holds at once; a request beyond that gets HTTP 503 at once")
    add_server_limit_flags(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Parse ``argv`` (default ``sys.argv[1:]``), load the model and serve until interrupted."""
    args = build_parser().parse_args(argv)
    setup_logging(logging.INFO)
    logger.info("args: %s", args)
    # Every flag is checked before the (slow) model load.
    device = model_device(args)
    fast = model_fast(args, device)
    max_request_bytes, limits, server = request_limit(args), image_limits(args), server_limits(args)
    if not args.max_pending_mb >= args.max_request_mb:
        raise UserError(f"--max-pending-mb must be at least --max-request-mb ({args.max_request_mb:g}), got {args.max_pending_mb:g}")
    check_bind(args.host, args.port)
    worker_address = args.worker_address or default_worker_address(args.host, args.port)
    if not args.no_register:
        _check_addresses(args.controller_address, worker_address)
    from .engine import ModelEngine  # transformers and the model code: only once every flag is checked

    engine = ModelEngine.load(
        args.model_path, args.model_base, args.model_name, load_8bit=args.load_8bit, load_4bit=args.load_4bit,
        device=device, fast=fast, use_flash_attn=args.use_flash_attn,
        image_limits=limits, stream_interval=args.stream_interval, reducer=args.reducer,
    )
    worker = ModelWorker(
        engine, args.controller_address, worker_address,
        limit_model_concurrency=args.limit_model_concurrency, heartbeat_interval=args.heartbeat_interval,
    )
    app = create_app(engine, worker.gate, max_request_bytes=max_request_bytes, max_waiting=args.max_waiting_requests,
                     max_pending_bytes=int(args.max_pending_mb * 2**20))
    uvicorn = uvicorn_server(app, args.host, args.port, server)
    if not args.no_register:
        worker.start(ready=lambda: uvicorn.started)
    try:
        uvicorn.run()
    finally:
        worker.stop()


if __name__ == "__main__":
    raise SystemExit(cli_main(main))
