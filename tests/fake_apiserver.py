"""A small Kubernetes API server on loopback for the cluster-action tests: the real `kubernetes`
client talks HTTP to it. It serves the few endpoints the launcher uses (CRD discovery, ConfigMaps,
the three job custom resources, pods), enforces bearer-token auth (401), forbidden namespaces (403),
unknown resources (404), duplicates (409), the CRD schemas (422) and dryRun=All, and records what
it stored. Pod logs are served as the real server does: `pods/<name>/log` with `container`,
`sinceSeconds`, `tailLines`, `timestamps` and `follow` (streamed until the pod goes), 404 for a pod
that does not exist, 403 where `pods/log` is forbidden."""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import yaml

from k8s_schema import crd_errors

CRDS = {
    "hyperpod": ("sagemaker.amazonaws.com", "v1", "hyperpodpytorchjobs", "HyperPodPyTorchJob",
                 "hyperpodpytorchjob.schema.yaml"),
    "kubeflow": ("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", "pytorchjob.schema.yaml"),
    "trainjob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob", "trainjob.v2.3.0.schema.json"),
}
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def status(code: int, reason: str, message: str, causes=None) -> dict:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    if causes:
        body["details"] = {"causes": causes}
    return body


class FakeApiServer:
    def __init__(self, crds=("hyperpod", "kubeflow", "trainjob"), forbidden_namespaces=(), token="t0k3n", user="tester"):
        self.crds = {CRDS[c][2]: CRDS[c] for c in crds}
        self.forbidden, self.token, self.user = set(forbidden_namespaces), token, user
        self.store: dict[tuple[str, str, str], dict] = {}  # (resource plural, namespace, name) -> object
        self.pods: list[dict] = []
        self.logs: dict[str, list[tuple[float, str]]] = {}  # pod name -> (time, line) of its `pytorch` container
        self.forbid_logs = False
        self.requests: list[tuple[str, str]] = []
        self.fail_creates: set[str] = set()  # plurals whose creation is answered with a 500
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def kubeconfig(self, path, namespace="team-a", token=None) -> str:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": self.user, "user": {"token": token or self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": self.user, "namespace": namespace}}]}))
        return str(path)

    # --- pods, as a test drives them ----------------------------------------------------------------
    def add_pod(self, name: str, job: str, phase: str = "Running", labels: dict | None = None,
                container: str = "pytorch") -> None:
        created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.pods.append({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": created,
                                       "labels": {"HPJob": job, **(labels or {})}},
                          "spec": {"containers": [{"name": container, "image": "x"}], "nodeName": f"node-{name}"},
                          "status": {"phase": phase, "containerStatuses": [
                              {"name": container, "restartCount": 0, "ready": True, "image": "x", "imageID": "x"}]}})
        self.logs[name] = []

    def remove_pod(self, name: str) -> None:
        self.pods = [p for p in self.pods if p["metadata"]["name"] != name]
        self.logs.pop(name, None)

    def log(self, pod: str, *lines: str) -> None:
        self.logs[pod] += [(time.time(), line) for line in lines]

    def names(self, plural: str) -> list[str]:
        return sorted(name for (p, _, name) in self.store if p == plural)

    # --- request handling --------------------------------------------------------------------------
    def _route(self, method: str, path: str, query: dict, body: dict | None) -> tuple[int, dict]:
        if m := re.fullmatch(r"/apis/([^/]+)/([^/]+)", path):
            group, version = m.groups()
            resources = [{"name": p, "singularName": k.lower(), "namespaced": True, "kind": k,
                          "verbs": ["create", "delete", "get", "list", "update"]}
                         for p, (g, v, _, k, _) in self.crds.items() if (g, v) == (group, version)]
            if not resources:
                return 404, status(404, "NotFound", "the server could not find the requested resource")
            return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
                         "resources": resources}
        if m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log", path):
            return self._log(*m.groups(), query)
        m = (re.fullmatch(r"/api/v1/namespaces/([^/]+)/(configmaps|pods)(?:/([^/]+))?", path)
             or re.fullmatch(r"/apis/[^/]+/[^/]+/namespaces/([^/]+)/([^/]+)(?:/([^/]+))?", path))
        if not m or (path.startswith("/apis/") and m.group(2) not in self.crds):
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        namespace, plural, name = m.groups()
        verb = {"POST": "create", "PUT": "update", "DELETE": "delete", "GET": "get" if name else "list"}[method]
        if namespace in self.forbidden:
            group = self.crds[plural][0] if plural in self.crds else ""
            return 403, status(403, "Forbidden", f'{plural} is forbidden: User "{self.user}" cannot {verb} resource '
                                                 f'"{plural}" in API group "{group}" in the namespace "{namespace}"')
        wanted = dict(term.split("=", 1) for term in query.get("labelSelector", [""])[0].split(",") if term)

        def selected(obj: dict) -> bool:
            return all((obj["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())

        if plural == "pods":
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": list(filter(selected, self.pods))}
        key = (plural, namespace, name or (body or {}).get("metadata", {}).get("name"))
        dry_run = query.get("dryRun") == ["All"]
        if verb == "get":
            return (200, self.store[key]) if key in self.store else (404, status(404, "NotFound", f'{plural} "{name}" not found'))
        if verb == "list":  # labelSelector: comma-separated key=value terms
            items = [obj for (p, ns, _), obj in self.store.items() if p == plural and ns == namespace and selected(obj)]
            return 200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items}
        if verb == "delete":
            if key not in self.store:
                return 404, status(404, "NotFound", f'{plural} "{name}" not found')
            del self.store[key]
            return 200, status(200, "", "deleted") | {"status": "Success"}
        if plural in self.fail_creates:
            return 500, status(500, "InternalError", "injected failure")
        invalid = self._validate(plural, body)
        if invalid:
            return 422, status(422, "Invalid", f"{plural} \"{key[2]}\" is invalid", invalid)
        if verb == "create" and key in self.store:
            return 409, status(409, "AlreadyExists", f'{plural} "{key[2]}" already exists')
        if verb == "update" and key not in self.store:
            return 404, status(404, "NotFound", f'{plural} "{key[2]}" not found')
        if not dry_run:
            if verb == "create":
                body.setdefault("metadata", {})["creationTimestamp"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            self.store[key] = body
        return (201 if verb == "create" else 200), body

    def _log(self, namespace: str, pod: str, query: dict):
        if namespace in self.forbidden or self.forbid_logs:
            return 403, status(403, "Forbidden", f'pods "{pod}" is forbidden: User "{self.user}" cannot get resource '
                                                 f'"pods/log" in API group "" in the namespace "{namespace}"')
        if pod not in self.logs:
            return 404, status(404, "NotFound", f'pods "{pod}" not found')
        container = next(p["spec"]["containers"][0]["name"] for p in self.pods if p["metadata"]["name"] == pod)
        if query.get("container", [container]) != [container]:
            return 400, status(400, "BadRequest", f"container {query['container'][0]} is not valid for pod {pod}")
        return 200, {"pod": pod, "query": query}  # the handler renders (or streams) the text

    def _lines(self, pod: str, query: dict, after: int = 0) -> tuple[list[str], int]:
        entries = self.logs.get(pod, [])
        since = float(query["sinceSeconds"][0]) if "sinceSeconds" in query else None
        chosen = [(t, line) for t, line in entries[after:] if since is None or t >= time.time() - since]
        if "tailLines" in query and not after:
            chosen = chosen[-int(query["tailLines"][0]):]
        stamp = query.get("timestamps") == ["true"]
        text = [(datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z ") if stamp else "") + line
                for t, line in chosen]
        return text, len(entries)

    def _validate(self, plural: str, body: dict) -> list[dict]:
        name = body.get("metadata", {}).get("name", "")
        if not NAME.match(name) or len(name) > 253:
            return [{"field": "metadata.name", "message": f"Invalid value: {name!r}", "reason": "FieldValueInvalid"}]
        if plural == "configmaps":
            bad = [k for k, v in (body.get("data") or {}).items() if not isinstance(v, str)]
            return [{"field": f"data[{k}]", "message": "must be a string", "reason": "FieldValueInvalid"} for k in bad]
        return [{"field": field, "message": message, "reason": "FieldValueInvalid"}
                for field, message in crd_errors(body, self.crds[plural][4])]

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                url = urlparse(self.path)
                server.requests.append((self.command, self.path))
                if self.headers.get("Authorization") != f"Bearer {server.token}":
                    code, body = 401, status(401, "Unauthorized", "Unauthorized")
                else:
                    length = int(self.headers.get("Content-Length") or 0)
                    payload = json.loads(self.rfile.read(length)) if length else None
                    code, body = server._route(self.command, url.path, parse_qs(url.query), payload)
                if code == 200 and set(body) == {"pod", "query"}:
                    return self._serve_log(body["pod"], body["query"])
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _serve_log(self, pod: str, query: dict):
                lines, seen = server._lines(pod, query)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                if query.get("follow") != ["true"]:
                    data = "".join(line + "\n" for line in lines).encode()
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.end_headers()  # HTTP/1.0 without a length: the body ends when the connection closes
                while True:  # stream new lines until the pod goes
                    self.wfile.write("".join(line + "\n" for line in lines).encode())
                    self.wfile.flush()
                    if pod not in server.logs:
                        break
                    time.sleep(0.05)
                    lines, seen = server._lines(pod, query, after=seen)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, *args):
                pass

        return Handler
