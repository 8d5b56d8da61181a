"""A model planner over any OpenAI-compatible endpoint: structured output for plans and for the join.

It speaks the Responses API (strict structured output) or Chat Completions (one JSON object, the schema in the
prompt: what local servers offer), ``planner.model_api``; everything else is shared. Every output is an
untrusted proposal: the schema makes it parseable, the runtime decides what runs. No tenant, subject,
credential, budget or authorization detail is ever sent; ``store`` is false. Transient HTTP failures (429,
5xx, timeouts) are retried by the SDK with backoff; an output that breaks the schema gets one repair request;
a refusal is reported as such; a call whose usage the endpoint did not report is charged an upper bound and
said to be unreported.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator
from pydantic import BaseModel, ValidationError

from dag.budget import RequestBound
from dag.states import StopReason
from planner.answer import Answer
from planner.base import (
    Final,
    JoinDecision,
    NeedsHuman,
    Observation,
    PlannerContractViolation,
    PlannerRefused,
    PlanningContext,
    Question,
    Replan,
    Usage,
)
from planner.context import joiner_input, planner_input
from planner.model_api import (
    ChatCompletionsApi,
    Completion,
    ModelApi,
    ResponsesApi,
    StructuredApi,
    Tokens,
    estimated_tokens,
    response_tokens,
    responses_request,
)
from planner.stream import PlanNodeStream
from planner.strict_schema import from_model_plan, join_schema, plan_schema

if TYPE_CHECKING:  # imported when a planner is built: ~0.4 s, which every raydag process paid for nothing
    from openai import AsyncOpenAI

PLAN_FORMAT = "raydag_plan"
JOIN_FORMAT = "raydag_join"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OpenAISettings:
    """How to reach the model. The key stays here; it is never part of a prompt or a record."""

    api_key: str = field(repr=False)
    model: str = "gpt-4.1-mini"
    base_url: str | None = None
    streaming: bool = False
    input_usd_per_mtok: float = 0.40
    output_usd_per_mtok: float = 1.60
    max_retries: int = 3
    timeout_s: float = 60.0
    answer_model: str | None = None
    """``package.module:Model`` (a pydantic model) the final answer must fit; ``None``: ``planner.answer.Answer``."""
    api: ModelApi = ModelApi.RESPONSES
    """The API the endpoint speaks; Chat Completions cannot stream plans (``settings_problem``)."""
    max_output_tokens: int | None = 4_096
    """The most tokens one answer may take (``max_output_tokens``, or ``max_tokens`` in Chat Completions)."""
    max_plan_nodes: int = 64
    """``maxItems`` of a plan's nodes (and of each node's ``after``) in the schema the model is given."""

    def problem(self) -> str | None:
        """Why these settings cannot make a planner, or ``None``."""
        if self.streaming and self.api is ModelApi.CHAT:
            return "streamed plans need the Responses API: RAYDAG_MODEL_STREAMING=true with RAYDAG_MODEL_API=chat"
        return None


class OpenAIPlanner:
    name = "openai"

    def __init__(
        self,
        settings: OpenAISettings,
        *,
        client: AsyncOpenAI | None = None,
        result_model: type[BaseModel] = Answer,
    ) -> None:
        if (problem := settings.problem()) is not None:
            raise ValueError(problem)
        self._settings = settings
        self.streaming = settings.streaming
        self.default_model = settings.model
        if client is None:
            from openai import AsyncOpenAI

            client = AsyncOpenAI(
                api_key=settings.api_key,
                base_url=settings.base_url,
                max_retries=settings.max_retries,
                timeout=settings.timeout_s,
            )
        self._client = client
        self._api: StructuredApi = (
            ChatCompletionsApi(client, settings.max_output_tokens)
            if settings.api is ModelApi.CHAT
            else ResponsesApi(client, settings.max_output_tokens)
        )
        self.result_model = result_model

    async def propose(self, context: PlanningContext) -> Mapping[str, Any] | Question:
        """A plan, or a question for a person (the strict schema's ``question``, with no nodes)."""
        schema = self._plan_schema(context)
        plan = await self._structured(context, planner_input(context, may_ask=True), PLAN_FORMAT, schema)
        question = plan.get("question")
        if question is not None:
            if plan.get("nodes"):
                raise PlannerContractViolation("the model answered with a plan and a question at once")
            return Question(str(question))
        converted: Mapping[str, Any] = from_model_plan(plan)
        return converted

    async def propose_stream(self, context: PlanningContext) -> AsyncIterator[Mapping[str, Any] | Question]:
        """Plan nodes as the model writes them (the same strict schema, read incrementally), or, once the output
        is whole, the question the model asked instead of planning."""
        scanner = PlanNodeStream()
        refusal: list[str] = []
        planned = False
        messages, schema = planner_input(context, may_ask=True), self._plan_schema(context)
        stream = await self._client.responses.create(
            **responses_request(
                messages, PLAN_FORMAT, schema, self._model(context), self._settings.max_output_tokens
            ),
            stream=True,
        )
        async for event in stream:
            match event.type:
                case "response.output_text.delta":
                    for node in scanner.feed(event.delta):
                        planned = True
                        yield from_model_plan({"nodes": [node]})["nodes"][0]
                case "response.refusal.delta":
                    refusal.append(event.delta)
                case "response.completed":
                    tokens = response_tokens(event.response.usage)
                    self._charge(
                        context,
                        tokens or estimated_tokens(messages, schema, scanner.text),
                        reported=bool(tokens),
                    )
                case "response.failed" | "error":
                    raise RuntimeError(f"the model stream failed ({event.type})")
                case _:
                    pass
        if refusal:
            raise PlannerRefused("".join(refusal)[:2000])
        if not scanner.closed:
            raise PlannerContractViolation("the plan stream ended before the plan was complete")
        question = scanner.document().get("question")
        if question is not None:
            if planned:
                raise PlannerContractViolation("the model answered with a plan and a question at once")
            yield Question(str(question))

    async def decide(self, context: PlanningContext, observations: Sequence[Observation]) -> JoinDecision:
        schema = join_schema(self.result_model.model_json_schema())
        answer = await self._structured(context, joiner_input(context, observations), JOIN_FORMAT, schema)
        reason = str(answer["reason"])
        match answer["decision"]:
            case "final":
                if answer["result"] is None:
                    raise PlannerContractViolation("a final decision without a result")
                try:
                    result = self.result_model.model_validate(answer["result"]).model_dump(mode="json")
                except ValidationError as exc:
                    raise PlannerContractViolation(
                        f"the final result breaks its model: {exc.error_count()} errors"
                    ) from None
                return Final(result=result, citations=[str(item) for item in answer["citations"]])
            case "replan":
                return Replan(reason=reason)
            case _:
                return NeedsHuman(StopReason.INSUFFICIENT_EVIDENCE, f"the model asked for a human: {reason}")

    def proposal_bound(self, context: PlanningContext) -> RequestBound:
        """The most ``propose(context)``'s request may take, before it is sent: the tokens of what it sends, at
        one per UTF-8 byte (``estimated_tokens``: no tokenizer makes more, so an upper bound), the answer's
        ``max_output_tokens`` (none when that is unset: the answer is then unbounded), and their cost. A repair
        request, asked only after a broken answer, is not counted: it is a call of its own."""
        sent = estimated_tokens(planner_input(context, may_ask=True), self._plan_schema(context), "")
        tokens = Tokens(sent.input, self._settings.max_output_tokens or 0)
        return RequestBound(self._model(context), tokens.input, tokens.output, self._cost(tokens))

    # ---------------------------------------------------------------- one request, one repair

    def _model(self, context: PlanningContext) -> str:
        """The run's model where it named one (admitted by its tenant's policy), else the deployment's."""
        return context.model or self._settings.model

    def _plan_schema(self, context: PlanningContext) -> dict[str, Any]:
        return plan_schema(
            context.tools, may_ask=True, max_nodes=self._settings.max_plan_nodes, agents=context.agents
        )

    async def _structured(
        self, context: PlanningContext, messages: list[dict[str, str]], name: str, schema: dict[str, Any]
    ) -> dict[str, Any]:
        validator = Draft202012Validator(schema)
        problem = ""
        for attempt in range(2):
            if attempt:
                messages = [
                    *messages,
                    {
                        "role": "user",
                        "content": f"Your previous answer did not match the required schema ({problem}). "
                        "Answer again, matching the schema exactly.",
                    },
                ]
            completion = await self._complete(messages, name, schema, context)
            self._charge(
                context,
                completion.tokens or estimated_tokens(messages, schema, completion.text),
                reported=completion.tokens is not None,
            )
            if completion.refusal is not None:
                raise PlannerRefused(completion.refusal[:2000])
            try:
                answer = json.loads(completion.text)
            except json.JSONDecodeError as exc:
                problem = f"not JSON: {exc.msg}"
                continue
            error = next(iter(validator.iter_errors(answer)), None)
            if error is None:
                result: dict[str, Any] = answer
                return result
            problem = f"at {'/'.join(str(part) for part in error.absolute_path) or 'the root'}: {error.message[:200]}"
        raise PlannerContractViolation(
            f"the model's {name} output broke its schema after a repair: {problem}"
        )

    async def _complete(
        self, messages: list[dict[str, str]], name: str, schema: dict[str, Any], context: PlanningContext
    ) -> Completion:
        from openai import NotFoundError

        try:
            return await self._api.complete(messages, name, schema, self._model(context))
        except NotFoundError:
            if (
                self._settings.api is ModelApi.RESPONSES
            ):  # said, not guessed around: the operator chooses the API
                log.warning(
                    "the model endpoint answered 404 to the Responses API; if it speaks Chat Completions only "
                    "(llama.cpp, llama-cpp-python), set RAYDAG_MODEL_API=chat"
                )
            raise

    def _charge(self, context: PlanningContext, tokens: Tokens, *, reported: bool) -> None:
        """Record one call: as the endpoint reported it, or, unreported, at the upper bound it was charged."""
        context.usage.append(
            Usage(self._model(context), tokens.input, tokens.output, self._cost(tokens), reported=reported)
        )

    def _cost(self, tokens: Tokens) -> float:
        """What ``tokens`` cost at the deployment's model price (``RAYDAG_MODEL_*_USD_PER_MTOK``)."""
        settings = self._settings
        cost = (
            tokens.input * settings.input_usd_per_mtok + tokens.output * settings.output_usd_per_mtok
        ) / 1e6
        return round(cost, 8)
