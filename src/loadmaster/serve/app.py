"""The FastAPI app: the JSON API over a demo cluster, the dashboard's static files, and the stepping task.

``create_app(demo)`` returns an app whose lifespan starts a background task
that calls :meth:`Demo.tick` every ``step_interval_s`` wall seconds (off the
event loop, under the demo's lock), so simulated time moves at the demo's
speed while requests are served. Every ``/api`` route but ``/api/health``
needs a bearer token; roles are checked in the route, on the server. ``/metrics``
serves the demo's telemetry in dcgm-exporter's format to an operator token, so
a Prometheus can scrape it (``authorization`` in its scrape config).
"""

import asyncio
import contextlib
import dataclasses
import functools
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from loadmaster.serve import views
from loadmaster.serve.auth import Authenticator, AuthError, Principal, require_operator
from loadmaster.serve.dashboard import Dashboard
from loadmaster.serve.reclaimloop import ReclaimLoop
from loadmaster.serve.state import StateStore
from loadmaster.telemetry.exposition import CONTENT_TYPE, latest_values, render

STATIC = Path(str(resources.files("loadmaster.serve") / "static"))


def plotly_js() -> Path:
    """plotly.js as the ``plotly`` pip package ships it (no front-end build, no CDN)."""
    import plotly  # noqa: PLC0415 - only needed to locate the file, once

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


async def _principal(request: Request, authorization: Annotated[str | None, Header()] = None) -> Principal:
    """The caller, from the sign-in proxy's headers or its bearer token (401 without either)."""
    auth: Authenticator = request.app.state.auth
    client = request.client.host if request.client is not None else None
    return auth.authenticate(authorization, request.headers, client)


Who = Annotated[Principal, Depends(_principal)]
"""A route parameter that is the authenticated caller."""


class SpeedChange(BaseModel):
    """Body of ``POST /api/operator/speed``."""

    speed: float = Field(ge=0, description="simulated seconds per wall second; 0 pauses")


class Layout(BaseModel):
    """Body of ``PUT /api/me/layout``: one user's saved view of the cluster."""

    model_config = ConfigDict(extra="forbid")

    colour: Literal["state", "owner", "util", "sm", "memory", "power", "temp"] = "state"
    layout: Literal["hierarchy", "user"] = "hierarchy"
    collapsed: list[str] = Field(default_factory=list, max_length=10_000)
    """Keys of the collapsed groups (pool, zone, rack)."""


class Settings(BaseModel):
    """Body of ``PUT /api/me/settings``: one user's preferences, kept on the server."""

    model_config = ConfigDict(extra="forbid")

    metric: Literal["util", "sm", "memory", "power", "temp"] = "util"
    """The metric job pages open with."""
    time_range_s: float = Field(default=3 * 3600.0, gt=0, le=90 * 86400.0)
    """The time range charts open with."""
    page_size: int = Field(default=50, ge=10, le=1000)
    """Rows per page of long tables."""


CacheKey = tuple[str, str, float | None]
"""(metric, viewer, frame time or None for live)."""


class _SnapshotCache:
    """Encoded snapshots by (metric, viewer, time), rebuilt by the stepper, so requests only read.

    A request finds its snapshot here, encoded, and returns it without taking
    the demo's lock; only the first request for a key builds it. After each
    tick the stepper rebuilds every live entry asked for in the last
    ``keep_s`` seconds, so the page sees the state at most one tick old and a
    tick never shows up in the API's latency.
    """

    def __init__(self, keep_s: float = 30.0) -> None:
        self.keep_s = keep_s
        self._entries: dict[CacheKey, tuple[bytes, Callable[[], Any], float]] = {}
        self._guard = threading.Lock()

    def peek(self, key: CacheKey) -> bytes | None:
        with self._guard:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries[key] = (found[0], found[1], time.monotonic())
            return found[0]

    def build(self, demo: Dashboard, key: CacheKey, make: Callable[[], Any]) -> bytes:
        with demo.lock:
            encoded = json.dumps(make(), separators=(",", ":")).encode()
        with self._guard:
            self._entries[key] = (encoded, make, time.monotonic())
        return encoded

    def refresh(self, demo: Dashboard) -> None:
        """Rebuild the live entries used lately; forget the rest (past frames are kept until unused)."""
        now = time.monotonic()
        with self._guard:
            for key in [k for k, (_, _, used) in self._entries.items() if now - used > self.keep_s]:
                del self._entries[key]
            live = [(k, make) for k, (_, make, _) in self._entries.items() if k[2] is None]
        for key, make in live:
            with demo.lock:
                encoded = json.dumps(make(), separators=(",", ":")).encode()
            with self._guard:
                if key in self._entries:
                    self._entries[key] = (encoded, make, self._entries[key][2])


def create_app(
    demo: Dashboard,
    *,
    step_interval_s: float = 0.5,
    run_stepper: bool = True,
    auth: Authenticator | None = None,
    state: StateStore | None = None,
    reclaim: ReclaimLoop | None = None,
) -> FastAPI:
    """The API and dashboard over ``demo``; with ``run_stepper`` simulated time advances while it serves.

    ``auth`` says who a request is (default: the demo's generated tokens); ``state`` keeps layouts,
    settings and the reclaim ledger (default: in memory, lost on exit); ``reclaim`` runs the reclaim
    policy after every step of the stepper and records its decisions in ``state``'s ledger.
    """

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(_stepper(demo, cache, step_interval_s, reclaim)) if run_stepper else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    cache = _SnapshotCache()
    app = FastAPI(title="loadmaster", summary="GPU cluster dashboard API", lifespan=lifespan)
    app.state.demo = demo
    app.state.auth = auth if auth is not None else demo.tokens
    app.state.store = state if state is not None else StateStore(":memory:")
    app.state.reclaim = reclaim
    _errors(app)
    _routes(app, demo, cache)
    _state_routes(app, app.state.store)
    if reclaim is not None:
        _reclaim_routes(app, demo, reclaim)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _state_routes(app: FastAPI, store: StateStore) -> None:
    """Each user's saved layout and settings, kept on the server so they follow the user to any browser
    and survive a restart; the reclaim ledger for operators."""

    @app.get("/api/me/layout")
    def get_layout(who: Who) -> dict[str, Any]:
        return store.layout(who.name) or {}

    @app.put("/api/me/layout")
    def put_layout(who: Who, layout: Layout) -> Layout:
        store.save_layout(who.name, layout.model_dump())
        return layout

    @app.get("/api/me/settings")
    def get_settings(who: Who) -> dict[str, Any]:
        return store.settings(who.name) or Settings().model_dump()

    @app.put("/api/me/settings")
    def put_settings(who: Who, settings: Settings) -> Settings:
        store.save_settings(who.name, settings.model_dump())
        return settings

    @app.get("/api/operator/ledger")
    def ledger(who: Who, job: str | None = None, limit: int = 200) -> dict[str, Any]:
        """Reclaim actions, newest first: who (actor), what, to which job, when and why."""
        require_operator(who)
        rows = store.ledger(limit=max(1, min(limit, 5000)), job=job)
        return {"entries": [dataclasses.asdict(e) for e in rows]}


def _reclaim_routes(app: FastAPI, demo: Dashboard, reclaim: ReclaimLoop) -> None:
    @app.post("/api/operator/reclaim/{job_id:path}/{what}")
    def reclaim_action(who: Who, job_id: str, what: str) -> dict[str, Any]:
        """An operator exempts a job from reclaim, approves its pending action, or undoes an exemption."""
        require_operator(who)
        with demo.lock:
            entry = reclaim.operator(demo, job_id, what, who.name)
        return dataclasses.asdict(entry)


async def _stepper(
    demo: Dashboard, cache: _SnapshotCache, interval_s: float, reclaim: ReclaimLoop | None = None
) -> None:
    """Advance the demo by the wall time that really passed, every ``interval_s``; run the reclaim
    policy; refresh the cache."""

    def step(wall_s: float) -> None:
        demo.tick(wall_s)
        if reclaim is not None:
            with demo.lock:
                reclaim.step(demo)
        cache.refresh(demo)

    last = time.monotonic()
    while True:
        await asyncio.sleep(interval_s)
        now = time.monotonic()
        await asyncio.to_thread(step, now - last)
        last = now


def _errors(app: FastAPI) -> None:
    @app.exception_handler(AuthError)
    async def auth_error(_: Request, exc: AuthError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse({"detail": str(exc)}, status_code=exc.status, headers=headers)

    @app.exception_handler(views.NotFoundError)
    async def not_found(_: Request, exc: views.NotFoundError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)


def _routes(app: FastAPI, demo: Dashboard, cache: _SnapshotCache) -> None:

    def body(payload: Any) -> Response:
        return Response(json.dumps(payload, separators=(",", ":")), media_type="application/json")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/vendor/plotly.min.js", include_in_schema=False)
    def plotly() -> FileResponse:
        return FileResponse(
            plotly_js(), media_type="text/javascript", headers={"Cache-Control": "max-age=86400"}
        )

    @app.get("/api/health")
    def health() -> dict[str, Any]:
        """No token needed: liveness, and the trivial baseline of the scale benchmark."""
        return {"ok": True}

    @app.get("/api/me")
    def me(who: Who) -> Response:
        with demo.lock:
            return body(views.me_view(demo, who))

    @app.get("/api/time")
    def clock(who: Who) -> dict[str, Any]:
        with demo.lock:
            return {"now_s": demo.now_s, "oldest_s": demo.oldest_s, "speed": demo.speed,
                    "paused": demo.paused, "version": demo.sim.version}  # fmt: skip

    @app.get("/api/cluster")
    async def cluster(who: Who, metric: str = "util", at: float | None = None) -> Response:
        viewer = "*operator*" if who.is_operator else who.name
        # A past time is snapped to the scrubber's frame grid so that the cache can serve it.
        at_s = None if at is None or at >= demo.now_s else max(at, demo.oldest_s)
        frame = None if at_s is None else demo.sim.frame_at(at_s).time_s
        key = (metric, viewer, frame)
        payload = cache.peek(key)
        if payload is None:
            make = functools.partial(views.snapshot, demo, who, metric, at_s)
            payload = await run_in_threadpool(cache.build, demo, key, make)
        return Response(payload, media_type="application/json")

    @app.get("/api/nodes")
    def nodes(who: Who) -> Response:
        with demo.lock:
            return body(views.nodes_view(demo))

    @app.get("/api/nodes/{name}")
    def node(who: Who, name: str) -> Response:
        with demo.lock:
            return body(views.node_view(demo, who, name))

    @app.get("/api/jobs")
    def jobs(who: Who, scope: str = "mine") -> Response:
        with demo.lock:
            return body(views.jobs_view(demo, who, scope))

    @app.get("/api/jobs/{job_id:path}/telemetry")
    def job_telemetry(
        who: Who, job_id: str, metric: str = "util", window_s: float = 3 * 3600.0, step_s: float = 60.0
    ) -> Response:
        with demo.lock:
            return body(
                views.job_telemetry(demo, who, job_id, metric_key=metric, window_s=window_s, step_s=step_s)
            )

    @app.get("/api/jobs/{job_id:path}/findings")
    def job_findings(who: Who, job_id: str) -> Response:
        """Diagnostics findings of the job's telemetry (same access as the job: owner or operator)."""
        with demo.lock:
            return body(views.job_findings(demo, who, job_id))

    @app.get("/api/jobs/{job_id:path}")
    def job(who: Who, job_id: str) -> Response:
        """One job; a live cluster's ids hold a slash (``namespace/name``), so this route comes last."""
        with demo.lock:
            return body(views.job_view(demo, who, job_id))

    @app.get("/api/queue")
    def queue(who: Who) -> Response:
        with demo.lock:
            return body(views.queue_view(demo, who))

    @app.get("/api/operator/summary")
    def operator_summary(who: Who) -> Response:
        require_operator(who)
        with demo.lock:
            return body(views.operator_summary(demo))

    @app.get("/api/operator/reclaim")
    def operator_reclaim(who: Who) -> Response:
        """Idle and under-used allocated GPUs per job and user, with the operator's action."""
        require_operator(who)
        with demo.lock:
            return body(views.reclaim_view(demo))

    @app.get("/metrics")
    def metrics(who: Who) -> Response:
        """The demo's telemetry as dcgm-exporter's text exposition, for Prometheus (operator token:
        the series carry every user's job labels)."""
        require_operator(who)
        with demo.lock:
            latest = latest_values(demo.store)
        return Response(render(latest), media_type=CONTENT_TYPE)

    @app.post("/api/operator/speed")
    def speed(who: Who, change: SpeedChange) -> dict[str, Any]:
        require_operator(who)
        demo.set_speed(change.speed)
        return {"speed": demo.speed, "paused": demo.paused}
