"""The ``raydag`` command: ``main`` (the commands: demo, run, serve, batch, report, …), ``batch`` (a file of
runs, driven with bounded concurrency) and ``report`` (a run as the terminal shows it, and its exit code).

Nothing imports this package but the ``raydag`` entry point (``pyproject.toml``) and its tests.
"""
