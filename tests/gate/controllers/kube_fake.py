"""A fake Kubernetes API server at the network edge: real HTTP, the REST subset specgate uses.

No kube-apiserver can run here (neither PyPI nor Debian ship one, nor envtest's binaries), so
this server does what the real one does for custom resources, as far as specgate can see:
GET, PUT, PATCH (merge patch and JSON patch) of named objects; `metadata.resourceVersion`
required on PUT and a stale one answered 409; `?dryRun=All` validates and stores nothing;
the status subresource (a PUT of the object keeps its status, `/status` changes only status);
RBAC for one token (the example Roles: a verb on a resource not named there is a 403);
`metadata.generation` bumped on spec changes; structural defaults applied; and every object
validated against its CRD's openAPIV3Schema with unknown fields refused (422). CEL rules
(`x-kubernetes-validations`) are not evaluated.

Controllers are played by `reactors`: after each write of an object, each reactor may set
its status, as the gateway's controller or KServe's would.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.deploy import crds

Body = dict[str, Any]
# (group, version, plural) -> kind, for the kinds the fake serves.
KINDS = {
    ("gateway.networking.k8s.io", "v1", "httproutes"): "HTTPRoute",
    ("inference.networking.k8s.io", "v1", "inferencepools"): "InferencePool",
    ("serving.kserve.io", "v1alpha2", "llminferenceservices"): "LLMInferenceService",
    ("", "v1", "services"): "Service",
}
Reactor = Callable[["FakeApiServer", Body], None]


class FakeApiServer:
    """The store and its rules; `serve()` puts it behind HTTP."""

    def __init__(self) -> None:
        self.objects: dict[str, Body] = {}
        self.version = 100
        self.lock = threading.RLock()
        self.reactors: list[Reactor] = []
        # Called once before the next PUT is handled (a person's write racing specgate's).
        self.before_put: Callable[[], None] | None = None
        self.requests: list[tuple[str, str]] = []
        # RBAC for one bearer token: the rules of its Roles (None: everything is allowed).
        self.token: str | None = None
        self.rules: list[Body] = []

    # The store, as a test or a reactor uses it (no HTTP).

    def create(self, body: Body) -> Body:
        """Store a new object as `kubectl create` would (defaults, validation, versions)."""
        with self.lock:
            body = copy.deepcopy(body)
            self._default_and_validate(body)
            meta = body["metadata"]
            meta["generation"] = 1
            meta["resourceVersion"] = self._next()
            self.objects[path_of(body)] = body
            self._react(body)
            return copy.deepcopy(body)

    def read(self, path: str) -> Body:
        """Return a copy of the object at `path`."""
        with self.lock:
            return copy.deepcopy(self.objects[path])

    def set_status(self, path: str, status: Body) -> None:
        """Write an object's status (what a controller does through `/status`)."""
        with self.lock:
            body = copy.deepcopy(self.objects[path])
            body["status"] = status
            self._default_and_validate(body)
            body["metadata"]["resourceVersion"] = self._next()
            self.objects[path] = body

    def edit(self, path: str, change: Callable[[Body], None]) -> Body:
        """A person's `kubectl edit`: change the object and store it as a PUT would."""
        with self.lock:
            body = self.read(path)
            change(body)
            return self.put(path, body, dry_run=False)

    # The REST verbs.

    def put(self, path: str, body: Body, *, dry_run: bool, status: bool = False) -> Body:
        """Replace the object; raise ApiError as the API server answers."""
        with self.lock:
            old = self.objects.get(path)
            if old is None:
                raise ApiError(404, "NotFound", f"{path} not found")
            given = body.get("metadata", {}).get("resourceVersion")
            if not given:
                raise ApiError(422, "Invalid", "metadata.resourceVersion: must be specified")
            if given != old["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    "the object has been modified; please apply your changes to the latest"
                    " version and try again",
                )
            new = copy.deepcopy(body)
            if status:
                new = {**copy.deepcopy(old), "status": new.get("status")}
            else:
                new["status"] = copy.deepcopy(old.get("status"))
                if new["status"] is None:
                    new.pop("status")
            self._default_and_validate(new)
            meta = new["metadata"]
            meta["generation"] = old["metadata"]["generation"] + (
                new.get("spec") != old.get("spec")
            )
            if dry_run:
                return copy.deepcopy(new)
            meta["resourceVersion"] = self._next()
            self.objects[path] = new
            answer = copy.deepcopy(new)
            if not status:
                self._react(new)
            return answer

    def patch(self, path: str, patch: Any, content_type: str) -> Body:
        """Merge patch (RFC 7386) or JSON patch (RFC 6902), then store as a PUT would."""
        with self.lock:
            old = self.read(path)
            if content_type.startswith("application/merge-patch+json"):
                new = merge_patch(old, patch)
            elif content_type.startswith("application/json-patch+json"):
                new = json_patch(old, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType", f"{content_type} is not supported")
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            return self.put(path, new, dry_run=False)

    def _default_and_validate(self, body: Body) -> None:
        kind = KINDS.get(_key_of(body))
        if kind is None or kind == "Service":
            return
        apply_defaults(body, crds.schema_for(body["apiVersion"], kind))
        found = crds.errors(body)
        if found:
            raise ApiError(422, "Invalid", f"{kind} {body['metadata']['name']} is invalid: {found}")

    def _react(self, body: Body) -> None:
        for reactor in self.reactors:
            reactor(self, copy.deepcopy(body))

    def _next(self) -> str:
        self.version += 1
        return str(self.version)

    @contextmanager
    def serve(self) -> Iterator[Server]:
        """Listen on 127.0.0.1 until the block ends (or `server.stop()`)."""
        server = Server(self)
        thread = threading.Thread(target=server.http.serve_forever, daemon=True)
        thread.start()
        try:
            yield server
        finally:
            server.stop()
            thread.join(timeout=10)


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> Body:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


class Server:
    """The fake's HTTP face; `stop()` makes the API server unreachable."""

    def __init__(self, fake: FakeApiServer) -> None:
        handler = type("Handler", (_Handler,), {"fake": fake})
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self._stopped = False

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.http.shutdown()
            self.http.server_close()


class _Handler(BaseHTTPRequestHandler):
    fake: FakeApiServer

    def log_message(self, *args: Any) -> None:  # quiet
        return

    def do_GET(self) -> None:
        self._answer(lambda path, _q: self.fake.read(path))

    def do_PUT(self) -> None:
        def put(path: str, query: dict[str, list[str]]) -> Body:
            hook, self.fake.before_put = self.fake.before_put, None
            if hook is not None:
                hook()
            status = path.endswith("/status")
            return self.fake.put(
                path.removesuffix("/status"),
                self._json(),
                dry_run=query.get("dryRun") == ["All"],
                status=status,
            )

        self._answer(put)

    def do_PATCH(self) -> None:
        kind = self.headers.get("Content-Type", "")
        self._answer(lambda path, _q: self.fake.patch(path, self._json(), kind))

    def _authorize(self, path: str) -> None:
        if (
            self.fake.token is None
            or self.headers.get("Authorization") != f"Bearer {self.fake.token}"
        ):
            return
        parts = path.strip("/").split("/")
        group = "" if parts[0] == "api" else parts[1]
        at = parts.index("namespaces")
        resource, name = parts[at + 2], parts[at + 3]
        if parts[at + 4 :]:
            resource += "/" + parts[at + 4]
        verb = {"GET": "get", "PUT": "update", "PATCH": "patch"}[self.command]
        for rule in self.fake.rules:
            if (
                group in rule["apiGroups"]
                and resource in rule["resources"]
                and verb in rule["verbs"]
                and name in rule.get("resourceNames", [name])
            ):
                return
        raise ApiError(403, "Forbidden", f"cannot {verb} {resource}/{name}: not in the Role")

    def _json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"null")

    def _answer(self, act: Callable[[str, dict[str, list[str]]], Body]) -> None:
        url = urlparse(self.path)
        self.fake.requests.append((self.command, self.path))
        try:
            self._authorize(url.path)
            if url.path.removesuffix("/status") not in self.fake.objects:
                raise ApiError(404, "NotFound", f"{url.path} not found")
            code, body = 200, act(url.path, parse_qs(url.query))
        except ApiError as exc:
            code, body = exc.code, exc.status()
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def path_of(body: Body) -> str:
    """The REST path of an object."""
    group, version, plural = _key_of(body)
    root = f"/apis/{group}/{version}" if group else f"/api/{version}"
    meta = body["metadata"]
    return f"{root}/namespaces/{meta.get('namespace', 'default')}/{plural}/{meta['name']}"


def _key_of(body: Body) -> tuple[str, str, str]:
    group, _, version = body["apiVersion"].rpartition("/")
    for key, kind in KINDS.items():
        if key[:2] == (group, version) and kind == body["kind"]:
            return key
    raise ApiError(404, "NotFound", f"the fake serves no {body['apiVersion']} {body['kind']}")


def apply_defaults(node: Any, schema: Body) -> None:
    """Structural defaulting: a missing property with a `default` gets it, recursively."""
    if isinstance(node, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in node and "default" in sub:
                node[name] = copy.deepcopy(sub["default"])
            if name in node:
                apply_defaults(node[name], sub)
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):
        for item in node:
            apply_defaults(item, schema["items"])


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def json_patch(target: Body, ops: list[Body]) -> Body:
    """RFC 6902 add, replace, remove and test."""
    out = copy.deepcopy(target)
    for op in ops:
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")
        ]
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = (len(node) if last == "-" else int(last)) if isinstance(node, list) else last
        if op["op"] == "test" and node[key] != op["value"]:
            raise ApiError(422, "Invalid", f"test failed at {op['path']}")
        if op["op"] == "remove":
            del node[key]
        elif op["op"] == "add" and isinstance(node, list):
            node.insert(key, op["value"])
        elif op["op"] in ("add", "replace"):
            node[key] = op["value"]
    return out
