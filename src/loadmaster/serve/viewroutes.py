"""Operator routes of the charts and group views: ``app.include_router(viewroutes.router)``.

A router of its own, so the app's route modules stay small: it reads the dashboard and the
authenticator from ``app.state`` (``demo`` and ``auth``, as :func:`~loadmaster.serve.app.create_app`
sets them), checks the operator role on the server, and holds the dashboard's lock while a view
reads it, like every other route.

* ``GET /api/operator/history?window_s=`` :func:`~loadmaster.serve.views.pool_history`: allocation,
  utilisation and queue length per pool over the kept history (or its newest ``window_s``).
* ``GET /api/operator/groups`` :func:`~loadmaster.serve.views.groups_view`: each group's usage,
  demand, quota and borrowing.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import Response

from loadmaster.serve import views
from loadmaster.serve.auth import Authenticator, Principal, require_operator
from loadmaster.serve.dashboard import Dashboard

router = APIRouter()


def _operator(request: Request, authorization: Annotated[str | None, Header()] = None) -> Principal:
    """The caller (401 without a valid token or trusted proxy headers), who must be an operator (403)."""
    auth: Authenticator = request.app.state.auth
    client = request.client.host if request.client is not None else None
    who = auth.authenticate(authorization, request.headers, client)
    require_operator(who)
    return who


Operator = Annotated[Principal, Depends(_operator)]


def _json(payload: Any) -> Response:
    return Response(json.dumps(payload, separators=(",", ":")), media_type="application/json")


@router.get("/api/operator/history")
def history(
    request: Request,
    who: Operator,
    window_s: Annotated[float | None, Query(gt=0, description="newest seconds; all kept if absent")] = None,
) -> Response:
    """Allocation, utilisation and queue length per pool over time, for the operator's charts."""
    demo: Dashboard = request.app.state.demo
    with demo.lock:
        return _json(views.pool_history(demo, window_s))


@router.get("/api/operator/groups")
def groups(request: Request, who: Operator) -> Response:
    """Each group's usage, demand, quota and borrowing (Kueue cohorts, Slurm's sshare)."""
    demo: Dashboard = request.app.state.demo
    with demo.lock:
        return _json(views.groups_view(demo))
