"""The daemon's HTTP side: listener, WSGI application, status page, JSON API, recent detections.

The runtime builds these in its composition root:

- ``DetectionStore`` + ``StatusPageSink`` (``store.py``): recent detections, persisted;
- ``Liveness`` and a ``StatusProvider`` implementation (``status.py``);
- ``WebApp`` (``app.py``) over those, with optional ``BasicAuth`` (``auth.py``);
- ``WebServer`` (``server.py``) serving it, with optional TLS, from ``WebSettings``
  (``settings.py``, the ``[web]`` table of the config).
"""

from __future__ import annotations

__all__: list[str] = []
