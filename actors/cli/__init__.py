"""The ``raydag`` command: ``entry`` (the script: ``run`` and ``continue`` on a raydag that is up read their own
arguments, without typer or rich; the rest goes to ``main``), ``main`` (the commands, typer: demo, run, serve,
batch, …), ``arguments`` (what ``run``'s arguments mean), ``client`` (one request to a raydag's API),
``plain`` (terminal output without rich), ``batch`` (a file of
runs, driven with bounded concurrency), ``report`` (a run as the terminal shows it, and its exit code),
``problems`` (a refusal as the terminal shows it: the API's, or the supervisor's, with every member),
``approvals`` (a person's decisions on a run's writes), ``reviews`` (on its plans) and ``questions`` (answers to
its planner), all through the API; ``background`` (``raydag up``, ``raydag down``: a raydag serving the home in
the background, which ``run`` and ``batch`` attach to).

Nothing imports this package but the ``raydag`` entry point (``pyproject.toml``) and its tests.
"""
