"""The CLI's side of the REST control plane: ``cdcflow status|pause|resume|workers|offsets --url``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from cdcflow.errors import CdcflowError

__all__ = [
    "ControlPlaneClient",
    "ControlPlaneError",
    "ControlPlaneForbiddenError",
    "ControlPlaneUnauthorizedError",
    "Credentials",
    "MissingPasswordError",
]


class ControlPlaneError(CdcflowError):
    """A worker's REST API refused a request or could not be reached."""


class ControlPlaneUnauthorizedError(ControlPlaneError):
    """401: the worker wants credentials (or a client certificate) and got none, or wrong ones."""


class ControlPlaneForbiddenError(ControlPlaneError):
    """403: the credentials are right, and their role (viewer) may not do this."""


class MissingPasswordError(ControlPlaneError):
    """``--user NAME`` with no password: not in ``$CDCFLOW_REST_PASSWORD``, and no terminal to ask on."""


@dataclass(frozen=True)
class Credentials:
    """How the client proves who it is: a user (HTTP basic), a bearer token, or neither; and
    for HTTPS the CA that signed the worker's certificate and this client's own certificate."""

    user: str | None = None
    password: str | None = None
    token: str | None = None
    cacert: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None

    def __repr__(self) -> str:  # never shows the password or the token
        return f"Credentials(user={self.user!r}, token={'***' if self.token else None}, cacert={self.cacert!r})"

    def request_options(self) -> dict[str, Any]:
        """What ``requests`` takes for these credentials."""
        options: dict[str, Any] = {}
        if self.user is not None:
            options["auth"] = (self.user, self.password or "")
        elif self.token is not None:
            options["headers"] = {"Authorization": f"Bearer {self.token}"}
        if self.cacert is not None:
            options["verify"] = str(self.cacert)
        if self.client_cert is not None:
            cert = str(self.client_cert)
            options["cert"] = (cert, str(self.client_key)) if self.client_key is not None else cert
        return options


@dataclass(frozen=True)
class ControlPlaneClient:
    url: str
    timeout_s: float = 60.0
    credentials: Credentials = Credentials()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON answer of a 2xx; anything else raises, with the worker's own reason."""
        address = self.url.rstrip("/") + path
        try:
            response = requests.request(
                method, address, timeout=self.timeout_s, **self.credentials.request_options(), **kwargs
            )
        except requests.exceptions.SSLError as exc:
            raise ControlPlaneError(
                f"cannot reach the worker at {self.url} over TLS: {exc} (--cacert names the CA that signed the "
                "worker's certificate; --cert and --key this client's, when the group asks for one)"
            ) from exc
        except requests.RequestException as exc:
            raise ControlPlaneError(f"cannot reach the worker at {self.url}: {exc}") from exc
        try:
            body = response.json()
        except ValueError:
            body = {"error": response.text.strip()[:500]}
        if not response.ok:
            reason = body.get("error", body) if isinstance(body, dict) else body
            message = f"{method} {address}: {response.status_code}: {reason}"
            if response.status_code == 401:
                raise ControlPlaneUnauthorizedError(
                    message + " (give --user NAME with $CDCFLOW_REST_PASSWORD, or --token / $CDCFLOW_REST_TOKEN)"
                )
            if response.status_code == 403:
                raise ControlPlaneForbiddenError(message)
            raise ControlPlaneError(message)
        return body
