"""How long the ``raydag`` command takes before it does anything: the commands a person types all day that only
speak HTTP (``raydag runs``, ``inbox``, ``approvals``…) pay the command's start and nothing else.

Each sample is a new process, as at a terminal: ``raydag --help``, ``raydag inbox --help``, and ``raydag runs``
against a loopback port nothing listens on (it starts, asks, and says it cannot reach the API). With
``BENCH_CLI_BEFORE=REV`` (a commit), the same commands of that commit's checkout (a git worktree in a temporary
folder, on this checkout's interpreter and packages) alternate with this one's, sample by sample, so both
arms see the same machine; the table gives each arm's median and their ratio.
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


def _unreachable_url() -> str:
    """A loopback URL nothing answers: a port bound and released just now."""
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


def _elapsed_ms(checkout: Path, args: list[str]) -> float:
    """One run of the command from ``checkout`` (its code first on the path), in ms of wall time."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    code = "import sys; from actors.cli.main import main; sys.argv[0] = 'raydag'; main()"
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code, *args], cwd=checkout, env=env, capture_output=True, check=False
    )
    return (time.perf_counter() - started) * 1000


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
        commands = _commands(_unreachable_url())
        found: dict[tuple[str, str], list[float]] = {}
        for _ in range(SAMPLES):
            for command, args in commands.items():
                for arm, checkout in arms.items():
                    found.setdefault((command, arm), []).append(_elapsed_ms(checkout, args))
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


if __name__ == "__main__":
    main()
