"""How long the ``raydag`` command takes before it does anything: the commands a person types all day that only
speak HTTP (``raydag runs``, ``inbox``, ``approvals``…) pay the command's start and nothing else; and
``raydag run C-102`` attached to a ``raydag serve`` that is up (named by ``--url``, or found in the home it
serves) beside the same command cold.

Each sample is a new process, as at a terminal: ``raydag --help``, ``raydag inbox --help``, and ``raydag runs``
against a loopback port nothing listens on (it starts, asks, and says it cannot reach the API). With
``BENCH_CLI_BEFORE=REV`` (a commit), the same commands of that commit's checkout (a git worktree in a temporary
folder, on this checkout's interpreter and packages) alternate with this one's, sample by sample, so both
arms see the same machine; the table gives each arm's median and their ratio. The attached run found in the home
is run with both checkouts' code too, alternating, against one ``raydag serve``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from bench._smoke import SMOKE, sized
from bench._stats import HEADER, row, summary

SAMPLES = sized(int(os.environ.get("BENCH_CLI_SAMPLES", "7")), 1)
REPO = Path(__file__).resolve().parent.parent


def _free_loopback_url() -> str:
    """A loopback URL on a port bound and released just now: nothing answers there (``raydag runs``'s arm), or
    a server of the benchmark's own will (``raydag serve``'s)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def _commands(url: str) -> dict[str, list[str]]:
    return {
        "raydag --help": ["--help"],
        "raydag inbox --help": ["inbox", "--help"],
        "raydag runs (API unreachable)": ["runs", "--url", url, "--api-key", "k"],
    }


def _launcher(checkout: Path) -> str:
    """Python code that runs ``checkout``'s ``raydag`` as its console script does: the entry point its
    ``pyproject.toml`` names (``actors.cli.main:main`` before the command had a lean one)."""
    import tomllib

    entry = tomllib.loads((checkout / "pyproject.toml").read_text())["project"]["scripts"]["raydag"]
    module, function = entry.split(":")
    return f"import sys; from {module} import {function} as main; sys.argv[0] = 'raydag'; sys.exit(main())"


def _elapsed_ms(checkout: Path, args: list[str]) -> float:
    """One run of the command from ``checkout`` (its code first on the path), in ms of wall time."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    code = _launcher(checkout)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code, *args], cwd=checkout, env=env, capture_output=True, check=False
    )
    return (time.perf_counter() - started) * 1000


DEV_KEY = "dev-key-tenant-demo"
"""A development key of the demo tenant: what a person on the machine's own ``raydag serve`` uses."""
RUN_SAMPLES = sized(int(os.environ.get("BENCH_CLI_RUN_SAMPLES", "3")), 1)
COLD_SAMPLES = sized(int(os.environ.get("BENCH_CLI_COLD_SAMPLES", str(RUN_SAMPLES))), 1)
"""The cold arm's samples (~15 s each): fewer than the attached arms' when their spread is what is measured."""


def _raydag(*args: str, env: dict[str, str]) -> float:
    """``raydag ARGS`` from this checkout, in ms of wall time; it must succeed."""
    started = time.perf_counter()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "raydag"), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"raydag {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return elapsed


def _attached_from(checkout: Path, env: dict[str, str]) -> float:
    """``raydag run C-102`` of ``checkout``'s code (first on the path, as ``_elapsed_ms`` runs it), found in
    the home of ``env``, in ms of wall time; it must succeed."""
    code = _launcher(checkout)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, "run", "C-102"],
        cwd=checkout,
        env={**env, "PYTHONPATH": str(checkout)},
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0 or "made by the raydag" not in done.stderr:
        raise RuntimeError(f"{checkout}: raydag run C-102 did not attach:\n{done.stderr[-2000:]}")
    return elapsed


ATTACHED_URL = "attached (--url, raydag serve up)"
ATTACHED_HOME = "attached (found in RAYDAG_HOME, raydag serve up)"
COLD = "cold (--no-attach: starts Ray and the rest)"


def _run_arms(checkouts: dict[str, Path]) -> dict[str, list[float]]:
    """``raydag run C-102`` attached to a ``raydag serve`` that is up, named (``--url``) or found in the
    home it serves, and found in the home with each of ``checkouts``' code (this one and the commit before,
    when ``BENCH_CLI_BEFORE`` names it), alternating sample by sample; then the same command cold
    (``--no-attach``: it starts Ray, the tool server and its supervisor, and stops them), on one database."""
    import httpx

    from bench._harness import fresh_database

    found: dict[str, list[float]] = {ATTACHED_URL: [], ATTACHED_HOME: [], COLD: []}
    with ExitStack() as stack:
        dsn = stack.enter_context(fresh_database())
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="raydag-cli-run-")))
        url = _free_loopback_url()
        env = {
            key: value for key, value in os.environ.items() if not key.startswith(("RAYDAG_", "RAY_ADDRESS"))
        }
        env.update(RAYDAG_HOME=str(home), RAYDAG_DATABASE_URL=dsn, RAY_USAGE_STATS_ENABLED="0")
        serving = subprocess.Popen(
            [str(Path(sys.executable).parent / "raydag"), "serve"],
            env={**env, "RAYDAG_PORT": url.rsplit(":", 1)[1]},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        stack.callback(serving.wait, 60)
        stack.callback(serving.terminate)
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or serving.poll() is not None:
                raise RuntimeError("raydag serve did not become ready")
            time.sleep(0.5)
        for _ in range(RUN_SAMPLES):  # the attached arms alternate, sample by sample
            found[ATTACHED_URL].append(_raydag("run", "C-102", "--url", url, "--api-key", DEV_KEY, env=env))
            found[ATTACHED_HOME].append(_raydag("run", "C-102", env=env))
            for arm, checkout in checkouts.items():
                found.setdefault(f"{ATTACHED_HOME}, {arm}", []).append(_attached_from(checkout, env))
        # The cold arm after them: a cold run's Ray loads both cores for seconds after it ends.
        for _ in range(COLD_SAMPLES):
            found[COLD].append(_raydag("run", "C-102", "--no-attach", env=env))
    return found


def main() -> None:
    before = os.environ.get("BENCH_CLI_BEFORE")
    with ExitStack() as stack:
        arms = {"this checkout": REPO}
        if before and not SMOKE:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="raydag-cli-before-")))
            subprocess.run(["git", "worktree", "add", "--detach", str(folder), before], cwd=REPO, check=True)
            stack.callback(
                subprocess.run, ["git", "worktree", "remove", "--force", str(folder)], cwd=REPO, check=False
            )
            arms[f"before ({before})"] = folder
        commands = _commands(_free_loopback_url())
        found: dict[tuple[str, str], list[float]] = {}
        for _ in range(SAMPLES):
            for command, args in commands.items():
                for arm, checkout in arms.items():
                    found.setdefault((command, arm), []).append(_elapsed_ms(checkout, args))
        runs = _run_arms(arms)  # while the commit before's checkout is there
    print("\n### The command's start (`python -m bench cli`)\n")
    print(HEADER)
    for (command, arm), samples in found.items():
        print(row(f"{command}, {arm}", samples))
    if len(arms) == 2:
        print("\n| command | this checkout / before (medians) |\n|---|---|")
        names = list(arms)
        for command in commands:
            ratio = (
                summary(found[(command, names[0])])["median"] / summary(found[(command, names[1])])["median"]
            )
            print(f"| {command} | {ratio:.2f} |")
    print("\n### `raydag run C-102`: attached to a raydag that is up, and cold (`python -m bench cli`)\n")
    print(HEADER)
    for arm, samples in runs.items():
        print(row(arm, samples))
    cold = summary(runs[COLD])["median"]
    for arm in (ATTACHED_URL, ATTACHED_HOME):
        print(f"\n{arm} / cold (medians): {summary(runs[arm])['median'] / cold:.3f}")
    if len(arms) == 2:
        here, earlier = (summary(runs[f"{ATTACHED_HOME}, {arm}"])["median"] for arm in arms)
        print(f"\nfound in the home, this checkout / before (medians): {here / earlier:.2f}")


if __name__ == "__main__":
    main()
