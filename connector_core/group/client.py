"""The CLI's side of the REST control plane: ``cdcflow status|pause|resume|workers|offsets --url``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from cdcflow.errors import CdcflowError

__all__ = ["ControlPlaneClient", "ControlPlaneError"]


class ControlPlaneError(CdcflowError):
    """A worker's REST API refused a request or could not be reached."""


@dataclass(frozen=True)
class ControlPlaneClient:
    url: str
    timeout_s: float = 60.0

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON answer of a 2xx; anything else raises, with the worker's own reason."""
        address = self.url.rstrip("/") + path
        try:
            response = requests.request(method, address, timeout=self.timeout_s, **kwargs)
        except requests.RequestException as exc:
            raise ControlPlaneError(f"cannot reach the worker at {self.url}: {exc}") from exc
        try:
            body = response.json()
        except ValueError:
            body = {"error": response.text.strip()[:500]}
        if not response.ok:
            reason = body.get("error", body) if isinstance(body, dict) else body
            raise ControlPlaneError(f"{method} {address}: {response.status_code}: {reason}")
        return body
