"""An HTTP client for tests that talk to a real Prefect server's REST API directly.

Prefect answers 503 when SQLite is busy (``is_client_retryable_exception`` in
``prefect/server/api/server.py``) and its own client retries such answers with a backoff;
a bare ``httpx.Client`` would fail a test on a busy machine for what is the server asking
to be asked again. This client retries 503 the same way, so a test fails only on real
answers.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

RETRIED = frozenset({429, 502, 503})


class PrefectApi(httpx.Client):
    """``httpx.Client`` on a Prefect API URL that retries busy answers (429, 502, 503)."""

    def __init__(self, base_url: str, *, attempts: int = 8, timeout: float = 30) -> None:
        super().__init__(base_url=base_url, timeout=timeout, trust_env=False)
        self._attempts = attempts

    def request(self, method: str, url: httpx.URL | str, **kwargs: Any) -> httpx.Response:
        delay = 0.5
        for _ in range(self._attempts - 1):
            response = super().request(method, url, **kwargs)
            if response.status_code not in RETRIED:
                return response
            time.sleep(delay)
            delay = min(delay * 2, 8)
        return super().request(method, url, **kwargs)
