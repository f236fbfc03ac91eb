"""Every route the API serves: each package's rows, concatenated. Find an endpoint here by its
package, then its row there (``routes.py`` in ``ops/``, ``hermes/``, ``openai/``).

A row is the route and its documentation (``endpoint.py``), so a package adds an endpoint
without touching this file, and both ``/openapi.json`` and discovery (``/v1/capabilities``,
which reads the router these rows fill) follow.
"""

from __future__ import annotations

from hermes_queue.api import openapi
from hermes_queue.api.endpoint import Endpoint
from hermes_queue.api.hermes import routes as hermes
from hermes_queue.api.openai import routes as openai
from hermes_queue.api.ops import routes as ops
from hermes_queue.api.ops.unsupported import placeholders

SERVED: list[Endpoint] = [*ops.ENDPOINTS, *openapi.ENDPOINTS, *hermes.ENDPOINTS, *openai.ENDPOINTS]

# Upstream endpoints not provided here answer 501 (``ops/unsupported.py``); a served row wins.
ROUTES: list[Endpoint] = [*SERVED, *placeholders(SERVED)]
