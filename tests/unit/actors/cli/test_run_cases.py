"""``run_cases``: the batch's bounded concurrency and its per-case error handling, without a runtime."""

from __future__ import annotations

import io
import threading
import time

from rich.console import Console

from actors.cli.batch import ERROR, CaseResult, run_cases


def test_run_cases_keeps_at_most_concurrency_cases_in_flight_and_reports_a_raising_case_as_error() -> None:
    in_flight, most = 0, 0
    lock = threading.Lock()

    def run_one(case_id: str) -> CaseResult:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        time.sleep(0.05)
        with lock:
            in_flight -= 1
        if case_id == "C-5":
            raise RuntimeError("the supervisor died")
        return CaseResult(case_id=case_id, status="completed")

    cases = [f"C-{number}" for number in range(10)]
    output = io.StringIO()

    results = run_cases(cases, run_one, concurrency=3, console=Console(file=output, width=100))

    assert most == 3
    assert [result.case_id for result in results] == cases
    assert results[5].status == ERROR
    assert results[5].detail == "RuntimeError: the supervisor died"
    assert all(result.seconds >= 0.05 for result in results)
    assert "10/10" in output.getvalue()
