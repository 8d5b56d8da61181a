"use strict";
// The run viewer's decisions: what the run waits on a person for, and a person deciding it from the page.
//
// The page has no authority of its own. Each decision is one POST to the API's own decision route, quoting the
// hash the page showed, with a key a person gave it: the key the page was opened with, or another one entered
// here (an approver's), kept in this tab's sessionStorage and sent only to this origin. The API decides; the
// page shows every answer it gives, a refusal included, and then reads the run again.
const RaydagDecisions = Object.freeze({
  mount(viewer) {
    const { el, time } = viewer;
    const $ = (id) => document.getElementById(id);
    const DECIDER_SLOT = "raydag-decider-key";
    const KIND_ORDER = ["review", "question", "tool_question", "approval", "resolution"];
    // What a person can do about each refusal, beside the API's own detail.
    const NEXT_STEP = {
      "scope-missing": "This key may not decide this: enter, under \u201cDecide with\u201d, the key of a person who may.",
      "operation-self-approval": "The run is yours: your tenant's policy wants another person to decide it.",
      "review-self-approval": "The run is yours: your tenant's policy wants another person to review its plan.",
      "operation-hash-mismatch": "The hash that reached the API is not the one of the arguments waiting: " +
        "decide again on what the page shows now.",
      "review-hash-mismatch": "The hash that reached the API is not the one of the plan waiting: " +
        "decide again on what the page shows now.",
      "operation-already-decided": "Someone decided it first: the Operations table says who.",
      "review-already-decided": "Someone reviewed it first: the Plan review table says who.",
      "question-already-answered": "Someone answered first: the Questions table says who.",
      "operation-expired": "Its deadline passed before the decision.",
      "review-expired": "Its deadline passed before the decision.",
      "question-expired": "Its deadline passed before the answer.",
      "operation-not-unknown": "Its outcome is known now: the Operations table says what it is.",
      "tool-answer-invalid": "The answer does not fit what the tool asked for: the detail says where.",
      "tool-question-decided": "Someone answered or declined it first.",
      "tool-question-expired": "Its deadline passed, or the run stopped, before the answer.",
      "tool-question-withdrawn": "The tool stopped waiting and went on without an answer.",
      unauthorized: "The API refused this key.",
    };

    const cards = new Map();  // an item's key (what it is and the hash it was shown with) → its card
    const log = [];
    let deciding = 0;
    let deciderKey = null;
    try { deciderKey = sessionStorage.getItem(DECIDER_SLOT); } catch (_) { /* memory only */ }

    // ---- the key a decision is made with ----
    function keyForDeciding() { return deciderKey || viewer.viewingKey(); }
    function showDecider() {
      $("decider-now").textContent = deciderKey
        ? "the key entered here (kept in this tab only)"
        : "the key this page was opened with";
      $("decider-reset").hidden = !deciderKey;
      document.body.dataset.decider = deciderKey ? "entered" : "viewing";
    }
    $("decider-form").onsubmit = (submitted) => {
      submitted.preventDefault();
      const entered = $("decider-key").value.trim();
      if (!entered) return;
      deciderKey = entered;
      try { sessionStorage.setItem(DECIDER_SLOT, entered); } catch (_) { /* memory only */ }
      $("decider-key").value = "";
      showDecider();
    };
    $("decider-reset").onclick = () => {
      deciderKey = null;
      try { sessionStorage.removeItem(DECIDER_SLOT); } catch (_) { /* nothing kept */ }
      showDecider();
    };
    showDecider();

    // ---- what waits ----
    function pendingItems(model) {
      const items = [];
      for (const review of model.reviews || []) {
        if (review.state === "awaiting") items.push({ kind: "review", key: `review:${review.round}:${review.plan_hash}`, review });
      }
      for (const question of model.questions || []) {
        if (question.state === "awaiting") items.push({ kind: "question", key: `question:${question.number}`, question });
      }
      for (const asked of model.toolQuestions || []) {
        if (asked.state === "awaiting") items.push({ kind: "tool_question", key: `tool_question:${asked.question_id}`, asked });
      }
      for (const operation of model.operations || []) {
        const kind = { awaiting_approval: "approval", unknown: "resolution" }[operation.state];
        if (kind) items.push({ kind, key: `${kind}:${operation.operation_id}:${operation.args_hash}`, operation });
      }
      return items.sort((a, b) => KIND_ORDER.indexOf(a.kind) - KIND_ORDER.indexOf(b.kind));
    }
    function expiresOf(item) {
      // An operation's expires_at is its approval's: an unknown outcome may be resolved whenever it is known.
      return item.kind === "resolution" ? null : (item.operation || item.review || item.question || item.asked).expires_at;
    }
    function remaining(iso) {
      if (!iso) return "no deadline";
      const left = time(iso) - Date.now();
      if (left <= 0) return "its deadline has passed";
      const minutes = Math.ceil(left / 60000);
      if (minutes < 2) return `${Math.ceil(left / 1000)} s left`;
      if (minutes < 120) return `${minutes} min left`;
      const hours = Math.floor(minutes / 60);
      return hours < 48 ? `${hours} h ${minutes % 60} min left` : `${Math.floor(hours / 24)} days ${hours % 24} h left`;
    }
    function deadline(item) {
      const iso = expiresOf(item);
      return el("span", { class: "deadline", title: iso || null },
        iso ? `decide by ${new Date(time(iso)).toLocaleString()} · ` : "", el("b", {}, remaining(iso)));
    }
    function json(value) { return JSON.stringify(value, null, 2); }
    function hashLine(label, hash) {
      return el("p", { class: "hash-line" }, el("span", { class: "muted" }, `${label} `),
        el("code", { class: "hash", "data-hash": hash }, hash));
    }
    function field(label, control) { return el("label", { class: "field" }, el("span", {}, label), control); }
    function noteBox(required) {
      return el("textarea", { name: "note", rows: 2, maxlength: 2000, required: required || null,
        placeholder: required ? "what you checked, and how (required)" : "a note for the record (optional)" });
    }

    // ---- each kind's card: what a person needs to decide, and the decision's route and body ----
    function runsPath() { return viewer.runPath.slice(0, viewer.runPath.lastIndexOf("/")); }
    function operationPath(operation, verb) {
      // A continuation lists the writes it took over from earlier runs: each is decided on its own run.
      return `${runsPath()}/${encodeURIComponent(operation.run_id)}/operations/` +
        `${encodeURIComponent(operation.operation_id)}/${verb}`;
    }
    function approvalCard(item) {
      const operation = item.operation;
      const note = noteBox(false);
      const decide = (verb) => ({
        path: operationPath(operation, verb), body: { args_hash: operation.args_hash, note: note.value.trim() || null },
        what: `${verb} the write ${operation.tool} (node ${operation.node_id})`, quoted: operation.args_hash,
        by: (answer) => (answer.history || []).slice(-1).map((step) => `${step.to}, by ${step.actor}`)[0],
      });
      return {
        title: [el("span", { class: "kind" }, "A write waits for approval"), el("code", {}, operation.tool),
          el("span", { class: `risk risk-${operation.risk}` }, operation.risk.replaceAll("_", " ")),
          el("span", { class: "muted" }, `node ${operation.node_id}`)],
        body: [
          el("p", { class: "description" }, operation.description),
          operation.args === null
            ? el("p", { class: "muted" }, "This tool records a digest of its arguments, never the arguments: the hash below " +
              "is what a yes is to.")
            : el("div", {}, el("p", { class: "label" }, "The arguments, as they will be sent ",
              el("span", { class: "muted" }, "(with the operation id as the tool's idempotency key, where it takes one)")),
            el("pre", { class: "args", "data-args-for": operation.operation_id }, json(operation.args))),
          hashLine("args_hash", operation.args_hash),
          operation.run_id !== viewer.runId
            ? el("p", { class: "muted" }, `Proposed by the earlier run ${operation.run_id}, which this one continues.`) : null,
        ],
        controls: [field("Note", note)],
        actions: [["approve", "Approve these arguments", "approve"], ["reject", "Reject", "reject"]],
        decide,
      };
    }
    function resolutionCard(item) {
      const operation = item.operation;
      const note = noteBox(true);
      const outcome = el("select", { name: "outcome" },
        el("option", { value: "succeeded" }, "it happened (succeeded)"),
        el("option", { value: "failed" }, "it did not happen (failed)"));
      return {
        title: [el("span", { class: "kind" }, "A write's outcome is unknown"), el("code", {}, operation.tool),
          el("span", { class: "muted" }, `node ${operation.node_id}`)],
        body: [
          el("p", { class: "description" }, "Nothing could tell whether this write took effect. Find out at the tool's " +
            "side, then record what you found: it is never sent again."),
          operation.args === null ? null : el("div", {}, el("p", { class: "label" }, "The arguments it was sent with"),
            el("pre", { class: "args", "data-args-for": operation.operation_id }, json(operation.args))),
          hashLine("args_hash", operation.args_hash),
        ],
        controls: [field("What you found", outcome), field("Note", note)],
        actions: [["resolve", "Record the outcome", "approve"]],
        decide: () => ({
          path: operationPath(operation, "resolve"),
          body: { args_hash: operation.args_hash, outcome: outcome.value, note: note.value.trim() },
          what: `resolve the write ${operation.tool} (node ${operation.node_id}) as ${outcome.value}`,
          quoted: operation.args_hash,
          by: (answer) => (answer.history || []).slice(-1).map((step) => `${step.to}, by ${step.actor}`)[0],
        }),
      };
    }
    function reviewCard(item) {
      const review = item.review;
      const note = noteBox(false);
      const wanted = new Set(review.nodes);
      const rows = (review.plan.nodes || []).map((node) => el("tr", { class: wanted.has(node.id) ? "needs-yes" : "covered" },
        el("td", {}, el("code", {}, node.id)), el("td", {}, el("code", {}, node.tool)),
        el("td", {}, el("code", { class: "args-inline" },
          JSON.stringify(node.for_each ? { for_each: node.for_each, args: node.args } : node.args))),
        el("td", {}, wanted.has(node.id) ? el("b", {}, "needs a yes") : el("span", { class: "muted" }, "approved earlier"))));
      return {
        title: [el("span", { class: "kind" }, `Round ${review.round}'s plan waits for review`),
          el("span", { class: "muted" }, `requested by ${review.requested_by}`)],
        body: [
          el("p", { class: "description" }, "Nothing of this plan runs before a yes. A yes covers exactly these calls."),
          el("div", { class: "scroll" }, el("table", { class: "plan" },
            el("thead", {}, el("tr", {}, ...["node", "tool", "arguments", ""].map((name) => el("th", {}, name)))),
            el("tbody", {}, ...rows))),
          hashLine("plan_hash", review.plan_hash),
        ],
        controls: [field("Note", note)],
        actions: [["approve", "Approve the plan", "approve"], ["reject", "Reject the plan", "reject"]],
        decide: (verb) => ({
          path: `${viewer.runPath}/reviews/${review.round}/${verb}`,
          body: { plan_hash: review.plan_hash, note: note.value.trim() || null },
          what: `${verb} round ${review.round}'s plan`, quoted: review.plan_hash,
          by: (answer) => `${answer.state}, by ${answer.decided_by}`,
        }),
      };
    }
    function questionCard(item) {
      const question = item.question;
      const answer = el("textarea", { name: "answer", rows: 3, maxlength: 4000, required: true,
        placeholder: "your answer (the planner is shown it with your name, never as authority)" });
      return {
        title: [el("span", { class: "kind" }, `The planner asks (question ${question.number})`),
          el("span", { class: "muted" }, `for ${question.asked_for}`)],
        body: [el("blockquote", { class: "question" }, question.question)],
        controls: [field("Answer", answer)],
        actions: [["answer", "Answer", "approve"]],
        decide: () => ({
          path: `${viewer.runPath}/questions/${question.number}/answer`, body: { answer: answer.value.trim() },
          what: `answer question ${question.number}`, quoted: null,
          by: (answered) => `${answered.state}, by ${answered.answered_by}`,
        }),
      };
    }
    // A tool's question: a form built from the schema the tool asked for (a flat object of strings, numbers,
    // booleans and lists of choices, as MCP allows), its values typed as the schema says. The server's words are
    // shown as text, as its words.
    function formControl(name, schema, required) {
      const choices = schema.enum ? schema.enum.map((value, i) => [value, (schema.enumNames || [])[i] || value])
        : (schema.oneOf || schema.anyOf || []).filter((choice) => "const" in choice)
          .map((choice) => [choice.const, choice.title || choice.const]);
      const named = { name, "data-field": name, required: required || null };
      if (schema.type === "boolean") {
        const box = el("input", { ...named, type: "checkbox", required: null });
        box.checked = schema.default === true;
        return { control: box, value: () => box.checked };
      }
      if (schema.type === "array") {
        const items = schema.items || {};
        const options = (items.enum || (items.anyOf || items.oneOf || []).map((choice) => choice.const))
          .map((value) => el("option", { value }, String(value)));
        const list = el("select", { ...named, multiple: true }, ...options);
        return { control: list, value: () => [...list.selectedOptions].map((option) => option.value) };
      }
      if (choices.length) {
        const select = el("select", named, el("option", { value: "" }, required ? "(choose)" : "(no answer)"),
          ...choices.map(([value, label]) => el("option", { value: String(value) }, String(label))));
        return { control: select, value: () => (select.value === "" ? undefined : select.value) };
      }
      const numeric = schema.type === "number" || schema.type === "integer";
      const input = el("input", { ...named, type: numeric ? "number" : "text",
        step: schema.type === "integer" ? "1" : numeric ? "any" : null,
        min: schema.minimum ?? null, max: schema.maximum ?? null,
        minlength: schema.minLength ?? null, maxlength: schema.maxLength ?? null });
      if (schema.default !== undefined) input.value = String(schema.default);
      return { control: input, value: () => {
        if (input.value === "") return undefined;
        return numeric ? Number(input.value) : input.value;
      } };
    }
    function toolQuestionCard(item) {
      const asked = item.asked;
      const schema = asked.requested_schema || {};
      const required = new Set(schema.required || []);
      const fields = Object.entries(schema.properties || {}).map(([name, property]) => {
        const built = formControl(name, property, required.has(name));
        const label = `${property.title || name}${required.has(name) ? "" : " (optional)"}`;
        return { name, ...built, row: el("div", { class: "form-field" }, field(label, built.control),
          property.description ? el("p", { class: "muted" }, property.description) : null) };
      });
      const content = () => Object.fromEntries(fields.map((one) => [one.name, one.value()])
        .filter(([, value]) => value !== undefined));
      return {
        title: [el("span", { class: "kind" }, `A tool asks (${asked.tool})`),
          el("span", { class: "muted" }, `node ${asked.node_id}, server ${asked.server}`)],
        body: [el("p", { class: "label" }, "The tool's server says:"),
          el("blockquote", { class: "question tool-says" }, asked.message),
          el("p", { class: "muted" }, "Your answer is sent to the tool as its input; it is never authority.")],
        controls: fields.map((one) => one.row),
        actions: [["answer", "Send the answer", "approve"], ["decline", "Decline", "reject"]],
        decide: (verb) => ({
          path: `${viewer.runPath}/tool-questions/${encodeURIComponent(asked.question_id)}/${verb}`,
          body: verb === "answer" ? { content: content() } : {},
          validate: verb === "answer",  // declining asks for nothing the form holds
          what: `${verb} ${asked.tool}'s question (node ${asked.node_id})`, quoted: null,
          by: (answered) => `${answered.state}, by ${answered.decided_by}`,
        }),
      };
    }
    const CARDS = {
      approval: approvalCard, resolution: resolutionCard, review: reviewCard, question: questionCard,
      tool_question: toolQuestionCard,
    };

    function buildCard(item) {
      const spec = CARDS[item.kind](item);
      const refusal = el("div", { class: "refusal", role: "alert", hidden: true });
      const buttons = spec.actions.map(([verb, label, look]) => {
        const button = el("button", { type: "button", class: look, "data-verb": verb }, label);
        button.onclick = () => submit(card, spec.decide(verb));
        return button;
      });
      const form = el("form", { class: "decide-row", novalidate: true }, ...spec.controls, el("span", { class: "buttons" }, ...buttons));
      form.onsubmit = (submitted) => submitted.preventDefault();
      const when = el("span", { class: "when" }, deadline(item));
      const element = el("article", { class: `decision decision-${item.kind}`, "data-pending": item.key,
        "data-kind": item.kind }, el("div", { class: "decision-head" }, ...spec.title, when), ...spec.body, form, refusal);
      const card = { element, form, buttons, refusal, when, item };
      return card;
    }

    // ---- deciding ----
    async function post(path, body, key) {
      try {
        const response = await fetch(path, {
          method: "POST", body: JSON.stringify(body), cache: "no-store", credentials: "omit", redirect: "error",
          headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
        });
        let answer = null;
        try { answer = await response.json(); } catch (_) { /* not JSON */ }
        return { status: response.status, ok: response.ok, answer, retryAfter: response.headers.get("Retry-After") };
      } catch (error) {
        return { status: 0, ok: false, answer: { detail: `no answer from the API (${error.message})` } };
      }
    }
    function slugOf(answer) {
      return answer && typeof answer.type === "string" ? answer.type.slice(answer.type.lastIndexOf("/") + 1) : "";
    }
    function refusalView(entry) {
      const parts = [el("b", {}, `Refused: ${entry.status || "no answer"} ${entry.slug}`), ` \u2014 ${entry.detail}`];
      for (const error of entry.errors) parts.push(el("div", { class: "mono" }, `${error.location}: ${error.message}`));
      if (NEXT_STEP[entry.slug]) parts.push(el("div", {}, NEXT_STEP[entry.slug]));
      if (entry.retryAfter) parts.push(el("div", {}, `The API asks to try again in ${entry.retryAfter} s.`));
      return parts;
    }
    async function submit(card, decision) {
      const { form, buttons, refusal } = card;
      if (decision.validate !== false && !form.reportValidity()) return;
      const key = keyForDeciding();
      if (!key) return;
      deciding += 1;
      document.body.dataset.deciding = "true";
      for (const button of buttons) button.disabled = true;
      refusal.hidden = true;
      const answered = await post(decision.path, decision.body, key);
      const entry = {
        at: new Date(), what: decision.what, quoted: decision.quoted, status: answered.status, ok: answered.ok,
        slug: answered.ok ? "" : slugOf(answered.answer) || "refused",
        detail: answered.ok ? decision.by(answered.answer) : (answered.answer && answered.answer.detail) || "no detail",
        errors: (!answered.ok && answered.answer && Array.isArray(answered.answer.errors)) ? answered.answer.errors : [],
        retryAfter: answered.ok ? null : answered.retryAfter,
      };
      log.push(entry);
      if (!entry.ok) {
        refusal.replaceChildren(...refusalView(entry));
        refusal.hidden = false;
      }
      renderLog();
      document.body.dataset.decisions = String(log.length);
      document.body.dataset.lastDecision = `${entry.status}${entry.slug ? ` ${entry.slug}` : ""}`;
      for (const button of buttons) button.disabled = false;
      try {
        await viewer.reread();  // what waits now: a refused item stays (with its refusal), a decided one goes
      } finally {
        deciding -= 1;
        if (deciding === 0) document.body.dataset.deciding = "false";
      }
    }
    function renderLog() {
      const entries = log.slice().reverse().map((entry) => el("li", {
        class: entry.ok ? "done" : "refused", "data-decision-result": `${entry.status}${entry.slug ? ` ${entry.slug}` : ""}`,
      },
      el("span", { class: "at" }, entry.at.toLocaleTimeString()),
      el("span", {}, entry.what, entry.quoted ? el("code", { class: "muted", title: entry.quoted }, ` quoting ${entry.quoted.slice(0, 12)}\u2026`) : null),
      entry.ok ? el("span", {}, el("b", {}, `${entry.status} `), entry.detail) : el("span", {}, ...refusalView(entry))));
      $("decision-log").replaceChildren(...entries);
      $("decision-log-box").hidden = log.length === 0;
    }

    // ---- what its child runs wait for: decided on their own pages ----
    // A parent parked on a sub-agent waits for what the sub-agent waits for: the run's waiting_for names those
    // decisions too, each with its run, and the page links to that run's page, where a person decides it.
    function childWaits(model) {
      const run = model.run;
      return ((run && run.waiting_for) || []).filter((item) => item.run_id !== run.run_id);
    }
    function childWaitLine(item) {
      const what = {
        operation: () => `operation ${item.operation_id} (${item.tool}, ${item.state})`,
        review: () => `plan review of round ${item.round}`,
        question: () => `question ${item.number}`,
        tool_question: () => `tool question ${item.question_id} (${item.tool})`,
      }[item.kind];
      return el("li", { "data-child-waits": item.run_id, "data-kind": item.kind },
        "run ", el("a", { href: `../${encodeURIComponent(item.run_id)}/view` }, item.run_id),
        `, an agent run below this one, waits for ${what ? what() : item.kind} · decided on its page`);
    }

    // ---- the viewer calls these ----
    function render(model) {
      const waitsBelow = childWaits(model);
      $("pending-children").replaceChildren(...waitsBelow.map(childWaitLine));
      $("pending-children").hidden = waitsBelow.length === 0;
      const items = pendingItems(model);
      const shown = items.map((item) => {
        let card = cards.get(item.key);
        if (!card) {
          card = buildCard(item);
          cards.set(item.key, card);
        }
        return card.element;
      });
      const live = new Set(items.map((item) => item.key));
      for (const key of [...cards.keys()]) if (!live.has(key)) cards.delete(key);
      $("pending").replaceChildren(...shown);  // moving a kept card keeps what a person typed in it
      $("pending-none").hidden = items.length + waitsBelow.length > 0;
      $("decider-form").hidden = items.length === 0;
      $("pending-section").classList.toggle("waiting", items.length + waitsBelow.length > 0);
      $("pending-section").hidden = items.length + waitsBelow.length === 0 && log.length === 0;
      document.body.dataset.pending = String(items.length);
      document.body.dataset.childPending = String(waitsBelow.length);
      tick();
    }
    function tick() {
      for (const card of cards.values()) card.when.replaceChildren(deadline(card.item));
    }
    return { render, tick };
  },
});
