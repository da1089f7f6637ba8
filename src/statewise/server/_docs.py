"""`/openapi.json`, `/docs` (Swagger UI) and `/redoc`, served without any CDN and behind
the same API keys as the API.

The Swagger UI and ReDoc files come from the `fastapi-offline` package (part of the
`server` extra). With API keys configured, `/openapi.json` answers 401 without a valid key;
`/docs` and `/redoc` answer 401 too, with a page that asks for the key (or takes the one
the web page at `/` stored), fetches the schema with it and sends it on every "Try it out"
request. `public_docs=True` (`statewise serve --public-docs`) serves all three to anyone.
"""

from __future__ import annotations

import copy
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from statewise.server._auth import Authenticator
from statewise.server._errors import Problem
from statewise.server._registry import Registry
from statewise.server._schema import ProblemDetails, link_state, state_components

ASSETS_URL = "/docs-assets"


def _assets_dir() -> Path | None:
    try:
        return Path(str(resources.files("fastapi_offline") / "static"))
    except ModuleNotFoundError:
        return None


def build_openapi(app: FastAPI, registry: Registry, keys: Authenticator) -> dict[str, Any]:
    """FastAPI's schema, plus the problem document, the typed session state and (with API
    keys) the bearer security scheme."""
    schema: dict[str, Any] = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
    )
    schema = link_state(schema)
    _drop_fastapi_validation_errors(schema)
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    problem = ProblemDetails.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(problem.pop("$defs", {}))
    schemas["Problem"] = problem
    schemas.update(state_components(registry))
    typed_run_paths(schema, registry)
    if keys.enabled:
        components["securitySchemes"] = {
            "apiKey": {
                "type": "http",
                "scheme": "bearer",
                "description": "An API key: `Authorization: Bearer <key>`",
            }
        }
        for path, item in schema.get("paths", {}).items():
            for operation in item.values():
                if path.startswith("/v1/"):
                    operation["security"] = [{"apiKey": []}]
    return schema


RUNS_PATH = "/v1/{kind}/{name}/runs"


def typed_run_paths(schema: dict[str, Any], registry: Registry) -> None:
    """A served object with an `output_schema` gets its own run path in the schema (the
    templated route serves it): `POST /v1/agents/triage/runs` answers a `RunResult`
    whose `content` is that schema, so a generated client has a typed field for it."""
    generic = schema.get("paths", {}).get(RUNS_PATH, {}).get("post")
    schemas = schema.get("components", {}).get("schemas", {})
    if generic is None or "RunResult" not in schemas:
        return
    for served in registry.all():
        spec = getattr(served.obj, "output_spec", None)
        if spec is None:
            continue
        camel = "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", served.name) if p)
        output = f"Output{camel}"
        answer = copy.deepcopy(spec.json_schema)
        for name, sub in answer.pop("$defs", {}).items():
            schemas[f"{output}_{name}"] = _rehome(sub, output)
        schemas[output] = _rehome(answer, output)
        result = copy.deepcopy(schemas["RunResult"])
        result["title"] = f"RunResult{camel}"
        result["properties"]["content"] = {
            "anyOf": [{"$ref": f"#/components/schemas/{output}"}, {"type": "null"}],
            "description": f"The answer of {served.kind_name} {served.name!r}, "
            "validated against its output_schema (null while the run is paused)",
        }
        schemas[f"RunResult{camel}"] = result
        operation = copy.deepcopy(generic)
        operation["operationId"] = f"run_{served.kind}_{re.sub(r'[^A-Za-z0-9]+', '_', served.name)}"
        operation["summary"] = f"Run {served.kind_name} {served.name} (typed answer)"
        operation["parameters"] = [
            p for p in operation.get("parameters", []) if p.get("name") not in ("kind", "name")
        ]
        body = operation["responses"]["200"]["content"]["application/json"]
        body["schema"] = {"$ref": f"#/components/schemas/RunResult{camel}"}
        schema["paths"][f"/v1/{served.kind}/{served.name}/runs"] = {"post": operation}


def _rehome(node: Any, prefix: str) -> Any:
    """A pydantic schema's local `$defs` references, pointed at components."""
    if isinstance(node, dict):
        out = {k: _rehome(v, prefix) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = f"#/components/schemas/{prefix}_{ref.rsplit('/', 1)[-1]}"
        return out
    if isinstance(node, list):
        return [_rehome(v, prefix) for v in node]
    return node


def _drop_fastapi_validation_errors(schema: dict[str, Any]) -> None:
    """FastAPI declares its own 422 body on every route with parameters. Routes that can
    answer 422 declare it with the problem schema; on the others (whose only parameter is
    the optional Authorization header) it cannot happen, so it goes."""
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            responses = operation.get("responses", {})
            if "HTTPValidationError" in json.dumps(responses.get("422", {})):
                del responses["422"]
    schemas = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<link rel="icon" href="__ASSETS__/favicon.png">
__CSS__
<style>
  #key { font: 14px system-ui, sans-serif; margin: 24px auto; max-width: 640px; }
  #key input { font: inherit; padding: 4px 8px; width: 22em; }
  #key .msg { color: #b00020; margin-left: 8px; }
</style>
</head>
<body>
<form id="key" hidden>
  <p>This server needs an API key to show its API.</p>
  <label>API key <input name="key" type="password" autocomplete="off" required></label>
  <button type="submit">Show the API</button><span class="msg"></span>
</form>
<div id="ui"></div>
<script src="__ASSETS__/__JS__"></script>
<script>
(() => {
  const KEY = "statewise.key";  // the same key the web page at / stores
  const config = __CONFIG__;
  const form = document.getElementById("key");
  const withKey = (headers) => {
    const key = localStorage.getItem(KEY);
    if (key && !headers.Authorization) headers.Authorization = "Bearer " + key;
    return headers;
  };
  async function load() {
    const r = await fetch(config.openapi_url, { headers: withKey({}) });
    if (r.status === 401) {
      form.hidden = false;
      form.querySelector(".msg").textContent = localStorage.getItem(KEY)
        ? "that key is not valid here" : "";
      return;
    }
    form.hidden = true;
    const spec = await r.json();
    if (config.mode === "redoc") {
      Redoc.init(spec, {}, document.getElementById("ui"));
    } else {
      window.ui = SwaggerUIBundle({
        spec, dom_id: "#ui", deepLinking: true, showExtensions: true,
        requestInterceptor: (req) => { withKey(req.headers); return req; },
      });
    }
  }
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    localStorage.setItem(KEY, new FormData(form).get("key").trim());
    load();
  });
  load();
})();
</script>
</body>
</html>
"""


def _page(title: str, mode: str) -> str:
    # Relative URLs: the page works wherever the app is mounted (a prefix, a proxy).
    assets = ASSETS_URL.lstrip("/")
    css = f'<link rel="stylesheet" href="{assets}/swagger-ui.css">' if mode == "swagger" else ""
    js = "swagger-ui-bundle.js" if mode == "swagger" else "redoc.standalone.js"
    config = json.dumps({"openapi_url": "openapi.json", "mode": mode})
    return (
        _PAGE.replace("__TITLE__", f"{title} - API docs")
        .replace("__CSS__", css)
        .replace("__ASSETS__", assets)
        .replace("__JS__", js)
        .replace("__CONFIG__", config)
    )


def install_docs(
    app: FastAPI, registry: Registry, keys: Authenticator, *, public_docs: bool
) -> None:
    """Serve `/openapi.json`, `/docs` and `/redoc` (create the app with `openapi_url=None,
    docs_url=None, redoc_url=None`)."""
    cached: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if "schema" not in cached:
            cached["schema"] = build_openapi(app, registry, keys)
        schema: dict[str, Any] = cached["schema"]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    guarded = keys.enabled and not public_docs
    assets = _assets_dir()
    if assets is not None:
        app.mount(ASSETS_URL, StaticFiles(directory=assets), name="docs-assets")

    def allowed(request: Request) -> bool:
        if not guarded:
            return True
        keys.principal(request)  # raises the 401 problem
        return True

    @app.get("/openapi.json", include_in_schema=False)
    def openapi_json(request: Request) -> JSONResponse:
        allowed(request)
        root = request.scope.get("root_path", "")
        if not root:
            return JSONResponse(openapi())
        # Mounted under a prefix (or behind a proxy that strips one): "Try it out" and
        # generated clients call the API there.
        return JSONResponse({**openapi(), "servers": [{"url": root}]})

    def page(mode: str, request: Request) -> Response:
        status = 200
        try:
            allowed(request)
        except Problem:
            # A browser cannot send the key when it opens the page: answer 401 with a page
            # that asks for it; anything else gets the problem document.
            if "text/html" not in request.headers.get("accept", ""):
                raise
            status = 401
        if assets is None:
            raise Problem(
                503,
                "the API docs need the fastapi-offline package: pip install 'statewise[server]'",
                title="API docs unavailable",
            )
        return HTMLResponse(
            _page(app.title, mode),
            status_code=status,
            headers={"Cache-Control": "no-cache"},
        )

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> Response:
        return page("swagger", request)

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> Response:
        return page("redoc", request)
