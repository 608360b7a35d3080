"""The FastAPI app: the JSON API over a demo cluster, the dashboard's static files, and the stepping task.

``create_app(demo)`` returns an app whose lifespan starts a background task
that calls :meth:`Demo.tick` every ``step_interval_s`` wall seconds (off the
event loop, under the demo's lock), so simulated time moves at the demo's
speed while requests are served.

Routes are grouped in routers by who may call them, and the check is the
router's dependency, not a call in each route, so a route added to a router
cannot forget it: :data:`public` (the page, plotly.js, ``/api/health``),
:data:`users` (any signed-in caller: a bearer token or the sign-in proxy's
headers, else 401) and :data:`operators` (the operator role, else 403).
``/metrics`` serves the demo's telemetry in dcgm-exporter's format to an
operator token, so a Prometheus can scrape it (``authorization`` in its scrape
config). The OpenAPI document (``/openapi.json``) needs a token like the rest of
the API and declares the bearer scheme; the interactive ``/docs`` page is off
(it loads its script from a CDN, which a cluster's dashboard cannot assume).
"""

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Security
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from loadmaster.serve import views
from loadmaster.serve.auth import Authenticator, AuthError, Principal, require_operator
from loadmaster.serve.dashboard import Dashboard
from loadmaster.serve.reclaimloop import ReclaimLoop, check_operator_action, operator_entry
from loadmaster.serve.state import StateStore
from loadmaster.telemetry.exposition import CONTENT_TYPE, latest_values, render

LOG = logging.getLogger("loadmaster.serve")

STATIC = Path(str(resources.files("loadmaster.serve") / "static"))


def plotly_js() -> Path:
    """plotly.js as the ``plotly`` pip package ships it (no front-end build, no CDN)."""
    import plotly  # noqa: PLC0415 - only needed to locate the file, once

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


BEARER = HTTPBearer(
    auto_error=False,
    description="A token from the tokens file (or the demo's printout); behind a sign-in proxy, its headers",
)
"""Declares the bearer scheme in the OpenAPI document; the check itself is :func:`_principal`'s."""


async def _principal(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)]
) -> Principal:
    """The caller, from the sign-in proxy's headers or its bearer token (401 without either)."""
    auth: Authenticator = request.app.state.auth
    client = request.client.host if request.client is not None else None
    return auth.authenticate(request.headers.get("authorization"), request.headers, client)


Who = Annotated[Principal, Depends(_principal)]
"""A route parameter that is the authenticated caller (401 otherwise)."""


async def _operator(who: Who) -> Principal:
    """The caller, who must hold the operator role (403 otherwise)."""
    require_operator(who)
    return who


Operator = Annotated[Principal, Depends(_operator)]
"""A route parameter that is the authenticated operator (401 unauthenticated, 403 a user)."""


def _board(request: Request) -> Dashboard:
    board: Dashboard = request.app.state.demo
    return board


def _store(request: Request) -> StateStore:
    store: StateStore = request.app.state.store
    return store


Board = Annotated[Dashboard, Depends(_board)]
"""The cluster being shown (the demo's simulator or a live cluster)."""
Store = Annotated[StateStore, Depends(_store)]
"""Layouts, settings and the reclaim ledger."""


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
    policy after every step of the stepper and records its decisions in ``state``'s ledger (None: the
    operators' actions are only recorded, for the scheduler to read back and carry out).
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
    app = FastAPI(
        title="loadmaster",
        summary="GPU cluster dashboard API",
        lifespan=lifespan,
        openapi_url=None,  # served by `users` below, behind a token
        docs_url=None,
        redoc_url=None,
    )
    app.state.demo = demo
    app.state.cache = cache
    app.state.auth = auth if auth is not None else demo.tokens
    app.state.store = state if state is not None else StateStore(":memory:")
    app.state.reclaim = reclaim
    _errors(app)
    app.include_router(public)
    app.include_router(users)
    app.include_router(operators)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


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
        try:
            await asyncio.to_thread(step, now - last)
        except Exception:  # one failed refresh (Prometheus or the API away) must not end the stepper
            LOG.exception("refreshing the dashboard failed; trying again in %.1f s", interval_s)
        last = now


def _errors(app: FastAPI) -> None:
    @app.exception_handler(AuthError)
    async def auth_error(_: Request, exc: AuthError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse({"detail": str(exc)}, status_code=exc.status, headers=headers)

    @app.exception_handler(views.NotFoundError)
    async def not_found(_: Request, exc: views.NotFoundError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)


def _body(payload: Any) -> Response:
    return Response(json.dumps(payload, separators=(",", ":")), media_type="application/json")


# ---------------------------------------------------------------------------------------------- public
public = APIRouter()
"""Routes anyone may call: the page, its script, liveness."""


@public.get("/", include_in_schema=False)
def index() -> FileResponse:
    return FileResponse(STATIC / "index.html")


@public.get("/vendor/plotly.min.js", include_in_schema=False)
def plotly() -> FileResponse:
    return FileResponse(plotly_js(), media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})


@public.get("/api/health")
def health() -> dict[str, Any]:
    """No token needed: liveness, and the trivial baseline of the scale benchmark."""
    return {"ok": True}


# ----------------------------------------------------------------------------------------------- users
users = APIRouter(dependencies=[Depends(_principal)])
"""Routes for any signed-in caller (401 otherwise); what each may see is decided in :mod:`views`."""


@users.get("/openapi.json", include_in_schema=False)
def openapi(request: Request) -> dict[str, Any]:
    """The API's OpenAPI document (its security scheme included), to signed-in callers only."""
    document: dict[str, Any] = request.app.openapi()
    return document


@users.get("/api/me")
def me(who: Who, demo: Board) -> Response:
    with demo.lock:
        return _body(views.me_view(demo, who))


@users.get("/api/time")
def clock(demo: Board) -> dict[str, Any]:
    with demo.lock:
        return {"now_s": demo.now_s, "oldest_s": demo.oldest_s, "speed": demo.speed,
                "paused": demo.paused, "version": demo.sim.version}  # fmt: skip


@users.get("/api/cluster")
async def cluster(
    request: Request, who: Who, demo: Board, metric: str = "util", at: float | None = None
) -> Response:
    cache: _SnapshotCache = request.app.state.cache
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


@users.get("/api/nodes")
def nodes(demo: Board) -> Response:
    with demo.lock:
        return _body(views.nodes_view(demo))


@users.get("/api/nodes/{name}")
def node(who: Who, demo: Board, name: str) -> Response:
    with demo.lock:
        return _body(views.node_view(demo, who, name))


@users.get("/api/jobs")
def jobs(who: Who, demo: Board, scope: str = "mine") -> Response:
    with demo.lock:
        return _body(views.jobs_view(demo, who, scope))


@users.get("/api/jobs/{job_id:path}/telemetry")
def job_telemetry(  # noqa: PLR0917 - the route's query parameters
    who: Who,
    demo: Board,
    job_id: str,
    metric: str = "util",
    window_s: float = 3 * 3600.0,
    step_s: float = 60.0,
) -> Response:
    with demo.lock:
        return _body(
            views.job_telemetry(demo, who, job_id, metric_key=metric, window_s=window_s, step_s=step_s)
        )


@users.get("/api/jobs/{job_id:path}/findings")
def job_findings(who: Who, demo: Board, job_id: str) -> Response:
    """Diagnostics findings of the job's telemetry (same access as the job: owner or operator)."""
    with demo.lock:
        return _body(views.job_findings(demo, who, job_id))


@users.get("/api/jobs/{job_id:path}")
def job(who: Who, demo: Board, job_id: str) -> Response:
    """One job; a live cluster's ids hold a slash (``namespace/name``), so this route comes last."""
    with demo.lock:
        return _body(views.job_view(demo, who, job_id))


@users.get("/api/queue")
def queue(who: Who, demo: Board) -> Response:
    with demo.lock:
        return _body(views.queue_view(demo, who))


@users.get("/api/me/reclaim")
def my_reclaim(who: Who, store: Store, limit: int = 50) -> dict[str, Any]:
    """The reclaim ledger of the caller's jobs (and of the namespaces granted to them), newest first:
    how an owner learns that a job was found idle, what will happen and when."""
    rows = store.ledger(
        limit=max(1, min(limit, 500)), owners=(who.name,), namespaces=tuple(sorted(who.namespaces))
    )
    return {"entries": [dataclasses.asdict(e) for e in rows]}


@users.get("/api/me/layout")
def get_layout(who: Who, store: Store) -> dict[str, Any]:
    """The caller's saved layout, kept on the server so it follows them to any browser and survives a
    restart."""
    return store.layout(who.name) or {}


@users.put("/api/me/layout")
def put_layout(who: Who, store: Store, layout: Layout) -> Layout:
    store.save_layout(who.name, layout.model_dump())
    return layout


@users.get("/api/me/settings")
def get_settings(who: Who, store: Store) -> dict[str, Any]:
    return store.settings(who.name) or Settings().model_dump()


@users.put("/api/me/settings")
def put_settings(who: Who, store: Store, settings: Settings) -> Settings:
    store.save_settings(who.name, settings.model_dump())
    return settings


# ------------------------------------------------------------------------------------------- operators
operators = APIRouter(dependencies=[Depends(_operator)])
"""Routes for operators only: 401 unauthenticated, 403 for a user, checked before the route runs."""


@operators.get("/api/operator/summary")
def operator_summary(demo: Board) -> Response:
    with demo.lock:
        return _body(views.operator_summary(demo))


@operators.get("/api/operator/reclaim")
def operator_reclaim(demo: Board) -> Response:
    """Idle and under-used allocated GPUs per job and user, with the operator's action."""
    with demo.lock:
        return _body(views.reclaim_view(demo))


@operators.get("/api/operator/history")
def operator_history(
    demo: Board,
    window_s: Annotated[float | None, Query(gt=0, description="newest seconds; all kept if absent")] = None,
) -> Response:
    """Allocation, utilisation and queue length per pool over time, for the operator's charts."""
    with demo.lock:
        return _body(views.pool_history(demo, window_s))


@operators.get("/api/operator/groups")
def operator_groups(demo: Board) -> Response:
    """Each group's usage, demand, quota and borrowing (Kueue cohorts, Slurm's sshare)."""
    with demo.lock:
        return _body(views.groups_view(demo))


@operators.get("/metrics")
def metrics(demo: Board) -> Response:
    """The demo's telemetry as dcgm-exporter's text exposition, for Prometheus (operator token: the
    series carry every user's job labels)."""
    with demo.lock:
        latest = latest_values(demo.store)
    return Response(render(latest), media_type=CONTENT_TYPE)


@operators.post("/api/operator/speed")
def speed(demo: Board, change: SpeedChange) -> dict[str, Any]:
    demo.set_speed(change.speed)
    return {"speed": demo.speed, "paused": demo.paused}


@operators.get("/api/operator/ledger")
def ledger(store: Store, job: str | None = None, limit: int = 200) -> dict[str, Any]:
    """Reclaim actions, newest first: who (actor), what, to which job, when and why."""
    rows = store.ledger(limit=max(1, min(limit, 5000)), job=job)
    return {"entries": [dataclasses.asdict(e) for e in rows]}


@operators.post("/api/operator/ledger/{entry_id}/{what}")
def ledger_action(  # noqa: PLR0917 - dependencies and path parameters
    request: Request, who: Operator, demo: Board, store: Store, entry_id: int, what: str
) -> dict[str, Any]:
    """An operator approves the notice of entry ``entry_id``, exempts its job, or undoes it (an exemption,
    an approval, a mark). With a reclaim loop in this process the loop applies it at once; else the
    entry is recorded for the scheduler (``kube run --reclaim``), which reads the ledger back."""
    entry = store.entry(entry_id)
    if entry is None:
        raise views.NotFoundError(f"no ledger entry {entry_id}")
    refused = check_operator_action(entry, what)
    if refused is not None:
        raise views.NotFoundError(refused)
    loop: ReclaimLoop | None = request.app.state.reclaim
    if loop is not None:
        with demo.lock:
            made = loop.operator(demo, entry.job, what, who.name, ref=entry)
    else:
        made = store.record(operator_entry(entry, what, who.name, demo.now_s))
    return dataclasses.asdict(made)


@operators.post("/api/operator/reclaim/{job_id:path}/{what}")
def reclaim_action(request: Request, who: Operator, demo: Board, job_id: str, what: str) -> dict[str, Any]:
    """An operator exempts a job from reclaim, approves its pending action, or undoes an exemption."""
    loop: ReclaimLoop | None = request.app.state.reclaim
    if loop is None:
        raise views.NotFoundError("no reclaim loop runs in this server: act on ledger entries instead")
    with demo.lock:
        entry = loop.operator(demo, job_id, what, who.name)
    return dataclasses.asdict(entry)
