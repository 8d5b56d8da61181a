"""``raydag batch``: many cases through one supervisor at once, with progress, a summary and a JSON report."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from actors.launch.shutdown import Interrupted, interrupted
from actors.run.submission import Submission
from dag.errors import RaydagError
from dag.run_resource import IDENTIFIER_PATTERN
from dag.states import RunStatus

NOT_FOUND = "not_found"
"""A case the tenant does not have: no run was created."""
REJECTED = "rejected"
"""A submission refused for another reason (planner, budgets, database); ``stop_reason`` says which."""
ERROR = "error"
"""Running the case raised (the supervisor died, the database went away); ``detail`` has the error."""
INTERRUPTED = "interrupted"
"""The batch was stopped (SIGINT, SIGTERM) before the case ended; its run, if it had one, is handed over
unfinished and resumes under another supervisor."""

_CASE_ID = re.compile(IDENTIFIER_PATTERN)


class BatchInterrupted(Interrupted):
    """A signal stopped the batch; ``results`` has every case, those that had not ended as ``interrupted``."""

    def __init__(self, signum: int, results: list[CaseResult]) -> None:
        super().__init__(signum)
        self.results = results


class BatchFileInvalid(RaydagError):
    """A batch file that is not a list of case ids; ``where`` names the line or list element at fault."""

    def __init__(self, path: Path, where: str | None, reason: str) -> None:
        super().__init__(f"{path}: {where}: {reason}" if where else f"{path}: {reason}")
        self.path = path
        self.where = where
        self.reason = reason


def read_cases(path: Path) -> list[str]:
    """The case ids of a batch file: one per line (blank lines and ``#`` comments skipped), or a JSON list.

    Raises ``BatchFileInvalid`` for anything else, for an invalid case id and for a case listed twice.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BatchFileInvalid(path, None, f"not UTF-8 text (byte {exc.start})") from None
    entries = _json_entries(path, text) if text.lstrip().startswith("[") else _line_entries(text)
    first_seen: dict[str, str] = {}
    for where, value in entries:
        if not isinstance(value, str):
            raise BatchFileInvalid(
                path, where, f"expected a case id string, got {_shorten(json.dumps(value))}"
            )
        if not _CASE_ID.fullmatch(value):
            raise BatchFileInvalid(
                path,
                where,
                f"{_shorten(repr(value))} is not a case id "
                "(up to 64 letters, digits and _.:- starting with a letter or digit, e.g. C-102)",
            )
        if value in first_seen:
            raise BatchFileInvalid(path, where, f"{value} is listed twice (first at {first_seen[value]})")
        first_seen[value] = where
    if not first_seen:
        raise BatchFileInvalid(path, None, "no case ids in it (one per line, or a JSON list of strings)")
    return list(first_seen)


def _line_entries(text: str) -> Iterator[tuple[str, object]]:
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            yield f"line {number}", stripped


def _json_entries(path: Path, text: str) -> Iterator[tuple[str, object]]:
    try:
        items = json.loads(text)  # it starts with "[": it parses as a list or not at all
    except json.JSONDecodeError as exc:
        raise BatchFileInvalid(
            path, f"line {exc.lineno}, column {exc.colno}", f"invalid JSON: {exc.msg}"
        ) from None
    for index, item in enumerate(items, start=1):
        yield f"element {index} of the list", item


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class CaseResult:
    """How one case of a batch ended: a run's terminal status, or why no run was created."""

    case_id: str
    status: str
    """A terminal ``RunStatus`` value, or ``not_found`` / ``rejected`` / ``error``."""
    run_id: str | None = None
    stop_reason: str | None = None
    outcome: str | None = None
    detail: str | None = None
    created_at: str | None = None
    finished_at: str | None = None
    seconds: float = 0.0
    """From submission to the report being read, as this client saw it."""

    @classmethod
    def of_run(cls, case_id: str, run: Mapping[str, Any]) -> CaseResult:
        """From a run as ``actors.api.views.run_view`` shows it."""
        result = run["result"]
        return cls(
            case_id=case_id,
            status=run["status"],
            run_id=run["run_id"],
            stop_reason=run["stop_reason"],
            outcome=result.get("outcome") if isinstance(result, dict) else None,
            detail=run["detail"],
            created_at=run["created_at"],
            finished_at=run["finished_at"],
        )

    @classmethod
    def refused(cls, case_id: str, submission: Submission, message: str) -> CaseResult:
        """A submission that created no run."""
        if submission is Submission.RESOURCE_NOT_FOUND:
            return cls(case_id=case_id, status=NOT_FOUND, detail=message)
        return cls(case_id=case_id, status=REJECTED, stop_reason=submission.value, detail=message)

    @classmethod
    def refused_by_api(cls, case_id: str, status: int, problem: Mapping[str, Any]) -> CaseResult:
        """A case the HTTP API created no run for (``raydag batch --url``): 404 is ``not_found`` as the
        supervisor's refusal of an unknown resource is; another refusal is ``rejected`` with its problem type."""
        detail = str(problem.get("detail") or problem.get("title") or status)
        if status == 404:
            return cls(case_id=case_id, status=NOT_FOUND, detail=detail)
        kind = str(problem.get("type") or "").rsplit("/", 1)[-1] or str(status)
        return cls(case_id=case_id, status=REJECTED, stop_reason=kind, detail=detail)

    @classmethod
    def interrupted(cls, case_id: str, run_id: str | None = None) -> CaseResult:
        """A case the batch was stopped before it ended."""
        return cls(case_id=case_id, status=INTERRUPTED, run_id=run_id, detail="stopped before the run ended")

    def summary(self) -> str:
        """The outcome, or why there is none: what the summary table shows."""
        if self.status == RunStatus.COMPLETED and self.outcome:
            return self.outcome
        return " · ".join(part for part in (self.stop_reason, self.outcome, self.detail) if part) or "—"


def run_cases(
    cases: Sequence[str],
    run_one: Callable[[str], CaseResult],
    *,
    concurrency: int,
    console: Console,
) -> list[CaseResult]:
    """Call ``run_one`` for every case, at most ``concurrency`` at a time, behind one progress bar.

    ``run_one`` blocks until its case has ended (the supervisor multiplexes the runs; each thread here only
    waits). A case whose ``run_one`` raises is an ``error`` result, not the end of the batch. Results come
    back in the order of ``cases``. A stop signal raises ``BatchInterrupted`` with the results so far.
    """
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="raydag-batch")
    pending: dict[Future[CaseResult], str] = {}
    done: dict[str, CaseResult] = {}
    try:
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task("cases", total=len(cases))
            pending.update({pool.submit(_timed, run_one, case_id): case_id for case_id in cases})
            for future in as_completed(pending):
                done[pending[future]] = future.result()
                progress.advance(bar)
    except KeyboardInterrupt as signalled:
        stop = interrupted(signalled)
        # The cases in flight give up at their next look at the supervisor (``actors.launch.shutdown.stopping``);
        # the caller's runtime then hands their runs over. Wait for them, so nothing runs on during that.
        pool.shutdown(wait=True, cancel_futures=True)
        for future, case_id in pending.items():
            if case_id not in done and future.done() and not future.cancelled() and not future.exception():
                done[case_id] = future.result()
        results = [done.get(case_id) or CaseResult.interrupted(case_id) for case_id in cases]
        raise BatchInterrupted(stop.signum, results) from None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return [done[case_id] for case_id in cases]


def _timed(run_one: Callable[[str], CaseResult], case_id: str) -> CaseResult:
    started = time.perf_counter()
    try:
        result = run_one(case_id)
    except Exception as exc:  # one case's failure is reported with it, the batch goes on
        result = CaseResult(case_id=case_id, status=ERROR, detail=f"{type(exc).__name__}: {exc}")
    return replace(result, seconds=round(time.perf_counter() - started, 3))


_COLOURS = {RunStatus.COMPLETED.value: "green", RunStatus.NEEDS_HUMAN.value: "yellow"}


def summary_table(results: Sequence[CaseResult]) -> Table:
    """One row per case: status, outcome or stop reason, seconds."""
    table = Table(title=f"batch of {len(results)} cases", title_justify="left")
    table.add_column("case", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("outcome / stop reason")
    table.add_column("seconds", justify="right", no_wrap=True)
    for result in results:
        colour = _COLOURS.get(result.status, "red")
        table.add_row(
            result.case_id,
            f"[{colour}]{result.status}[/{colour}]",
            escape(result.summary()),
            f"{result.seconds:.2f}",
        )
    return table


def report(
    results: Sequence[CaseResult],
    *,
    source: Path,
    tenant: str,
    planner: str | None,
    concurrency: int,
    seconds: float,
) -> dict[str, Any]:
    """The JSON report: every case, in the order of the file, and the totals."""
    return {
        "source": str(source),
        "tenant": tenant,
        "planner": planner,
        "concurrency": concurrency,
        "written_at": datetime.now(UTC).isoformat(),
        "cases": [asdict(result) for result in results],
        "totals": {
            "cases": len(results),
            "by_status": dict(Counter(result.status for result in results)),
            "seconds": round(seconds, 3),
        },
    }


def write_report(path: Path, content: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(content, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
