"""The import path Ray Serve is given: ``serve run serve_app:app``, and ``serve_config.yaml``'s applications.

The run API, its Serve deployments and their configuration live in ``actors.api.app``; this module only names
the application builder where Serve's users expect it. Nothing imports it (``make lint`` checks).
"""

from actors.api.app import app

__all__ = ["app"]
