"""The flow-run link APE prints: one that opens in a fresh browser, in the UI the server opens.

Why not Prefect's own ``url_for``: it always builds the classic (V1) UI's route
``/runs/flow-run/<id>``. A Prefect 3 server opens its new (V2) UI on its front page by
default, so after logging in there a user met the other UI behind APE's links; and on a
server that requires credentials (APE's does), the classic UI's flow-run page in a browser
that has not logged in yet shows "Page not found" and "Authentication failed." with no login
form, while the V2 UI's flow-run page sends that browser to its login form and, once the
password is in, back to the flow run. So where the server says V2 is its default UI (its
``/ui-settings`` answer, which the UI itself reads before any login), the link is the V2
route under the server's V2 base (``/v2/runs/flow-run/<id>``); anywhere else (Prefect Cloud,
a server that defaults to V1, one that does not answer) it stays Prefect's own link.
"""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

import httpx
from prefect.settings import get_current_settings
from prefect.utilities.urls import url_for
from pydantic import BaseModel, ConfigDict, ValidationError

FLOW_RUN_ROUTE = "/runs/flow-run/"
UI_SETTINGS_TIMEOUT_S = 3.0


class UiSettings(BaseModel):
    """The part of a Prefect server's ``/ui-settings`` answer the link needs. Its other fields
    (API URL, CSRF, auth, flags) are the server's business and change between Prefect
    versions, so they are ignored rather than refused."""

    model_config = ConfigDict(extra="ignore")

    default_ui: str | None = None
    available_uis: list[str] = []
    v2_base_url: str | None = None


def flow_run_link(flow_run_id: str | None) -> str | None:
    """The flow run's page in the Prefect UI the server opens by default, or None where
    there is no UI (Prefect's temporary server), never a link that starts with "None"."""

    if not flow_run_id:
        return None
    link = url_for("flow-run", obj_id=str(flow_run_id))  # the classic UI's route, as Prefect links it
    if not link or not link.startswith(("http://", "https://")):
        return None
    settings = get_current_settings()
    ui_url = (settings.ui_url or "").rstrip("/")
    api_url = settings.api.url or ""
    if not ui_url or link != f"{ui_url}{FLOW_RUN_ROUTE}{flow_run_id}" or api_url.startswith(settings.cloud.api_url):
        return link  # Prefect Cloud, or a UI URL this module does not know how to read
    v2_base = v2_base_url(ui_url)
    if v2_base is None:
        return link
    parts = urlsplit(ui_url)
    return f"{parts.scheme}://{parts.netloc}{v2_base.rstrip('/')}{FLOW_RUN_ROUTE}{flow_run_id}"


@functools.lru_cache(maxsize=8)
def v2_base_url(ui_url: str) -> str | None:
    """The path of the V2 UI on the server whose UI is at ``ui_url``, when that server opens
    V2 by default; None when it opens the classic UI or does not say (asked once a process)."""
    try:
        # trust_env=False: a proxy from the environment must not intercept loopback calls
        response = httpx.get(f"{ui_url}/ui-settings", timeout=UI_SETTINGS_TIMEOUT_S, trust_env=False)
        response.raise_for_status()
        settings = UiSettings.model_validate_json(response.content)
    except (httpx.HTTPError, httpx.InvalidURL, ValidationError):
        return None
    if settings.default_ui != "v2" or "v2" not in settings.available_uis or not settings.v2_base_url:
        return None
    return settings.v2_base_url if settings.v2_base_url.startswith("/") else None
