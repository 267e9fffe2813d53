"""A small Kubernetes REST client: GET and PUT (with server dry-run) of named objects.

specgate touches only the few objects a traffic link names, so it speaks the REST subset it
needs over httpx instead of pulling in a full client. Configuration comes from the pod's
service account when running in a cluster, else from a kubeconfig (token or client
certificate; exec plugins are not supported and say so).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from gate.errors import ConfigError, GateError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
Body = dict[str, Any]


class KubeError(GateError):
    """The API server answered with an error for one object."""

    status_code = 502
    code = "kube_error"

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class KubeUnreachable(GateError):
    """The API server could not be reached (connection, TLS or timeout)."""

    status_code = 503
    code = "kube_unreachable"


@dataclass(frozen=True)
class ObjectRef:
    """One named object: where it lives in the REST tree."""

    group: str
    version: str
    plural: str
    namespace: str
    name: str

    @property
    def path(self) -> str:
        """The object's URL path."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{root}/namespaces/{self.namespace}/{self.plural}/{self.name}"

    def describe(self) -> str:
        """Say which object, e.g. for an audit reason."""
        return f"{self.plural}/{self.name} in {self.namespace}"


class KubeApi:
    """GET and PUT named objects on one API server."""

    def __init__(self, client: httpx.Client) -> None:
        self._client = client

    def get(self, ref: ObjectRef) -> Body | None:
        """Return the object, or None when it does not exist."""
        response = self._send("GET", ref.path)
        if response.status_code == 404:
            return None
        return self._body(ref, response)

    def replace(self, ref: ObjectRef, body: Body, *, dry_run: bool) -> Body:
        """PUT the object (its metadata.resourceVersion makes a stale write a 409)."""
        params = {"dryRun": "All"} if dry_run else {}
        return self._body(ref, self._send("PUT", ref.path, json=body, params=params))

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return self._client.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise KubeUnreachable(f"the Kubernetes API server is unreachable: {exc}") from exc

    @staticmethod
    def _body(ref: ObjectRef, response: httpx.Response) -> Body:
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise KubeError(
                f"{ref.describe()}: HTTP {response.status_code}: {message}",
                status=response.status_code,
            )
        try:
            body: Body = response.json()
        except ValueError:  # an answer that is not the API server's (an auth proxy's page)
            raise KubeError(
                f"{ref.describe()}: HTTP {response.status_code} with a body that is not JSON",
                status=response.status_code,
            ) from None
        return body


def connect(kubeconfig: Path | None = None, *, timeout_s: float = 10.0) -> KubeApi:
    """Return a client from the pod's service account, else from a kubeconfig."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    if kubeconfig is None and host and (SERVICE_ACCOUNT / "token").is_file():
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        token = (SERVICE_ACCOUNT / "token").read_text().strip()
        return KubeApi(
            httpx.Client(
                base_url=f"https://{host}:{port}",
                headers={"Authorization": f"Bearer {token}"},
                verify=str(SERVICE_ACCOUNT / "ca.crt"),
                timeout=timeout_s,
            )
        )
    path = kubeconfig or Path(os.environ.get("KUBECONFIG") or Path.home() / ".kube" / "config")
    return KubeApi(_from_kubeconfig(path, timeout_s))


def _from_kubeconfig(path: Path, timeout_s: float) -> httpx.Client:
    """Return a client for the kubeconfig's current context; any fault in it (a missing
    entry or file, bad base64, a bad certificate) is a ConfigError, so links hold."""
    try:
        return _client_from(path, timeout_s)
    except ConfigError:
        raise
    except Exception as exc:  # every other fault of the file is the same: unusable
        raise ConfigError(f"cannot use the kubeconfig {path}: {exc!r}") from exc


def _client_from(path: Path, timeout_s: float) -> httpx.Client:
    config = yaml.safe_load(path.read_text())
    context = _named(config, "contexts", config["current-context"])["context"]
    cluster = _named(config, "clusters", context["cluster"])["cluster"]
    user = _named(config, "users", context["user"])["user"]
    if "exec" in user or "auth-provider" in user:
        raise ConfigError(f"{path}: exec and auth-provider users are not supported; use a token")
    headers = {}
    token = user.get("token") or (
        Path(user["tokenFile"]).read_text().strip() if "tokenFile" in user else None
    )
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(
        base_url=cluster["server"],
        headers=headers,
        verify=_verify(cluster),
        cert=_cert(user),
        timeout=timeout_s,
    )


def _named(config: dict[str, Any], section: str, name: str) -> dict[str, Any]:
    entry: dict[str, Any] | None = next((e for e in config[section] if e["name"] == name), None)
    if entry is None:
        raise ConfigError(f"the kubeconfig's {section} have no entry named {name!r}")
    return entry


def _verify(cluster: dict[str, Any]) -> bool | str:
    if cluster.get("insecure-skip-tls-verify"):
        return False
    if "certificate-authority-data" in cluster:
        return _spill(cluster["certificate-authority-data"])
    if "certificate-authority" in cluster:
        return str(cluster["certificate-authority"])
    return True


def _cert(user: dict[str, Any]) -> tuple[str, str] | None:
    if "client-certificate-data" in user:
        return _spill(user["client-certificate-data"]), _spill(user["client-key-data"])
    if "client-certificate" in user:
        return user["client-certificate"], user["client-key"]
    return None


_SPILLED: dict[str, str] = {}  # inline certificate data -> its file, one per process


def _spill(data: str) -> str:
    # httpx reads certificates from files: write the kubeconfig's inline ones to private
    # files once per process (the traffic job connects every pass), removed at exit.
    if data not in _SPILLED:
        handle, name = tempfile.mkstemp(prefix="specgate-kube-", suffix=".pem")
        with os.fdopen(handle, "wb") as out:
            out.write(base64.b64decode(data))
        atexit.register(_remove, name)
        _SPILLED[data] = name
    return _SPILLED[data]


def _remove(name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name)
