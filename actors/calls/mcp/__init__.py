"""raydag's MCP client: how a node's call reaches a tool server and comes back as a classified outcome.

- ``connections``: ``McpConnections`` (the connections a caller keeps, per server and era) and ``call_tool``;
- ``outcomes``: what an answer or a failure means for the node (classification);
- ``session``: opening SDK sessions in either protocol era, listing tools;
- ``discovery``: listing a server's tools (``discover``) and comparing them with pins (``relist``);
- ``stateless_post``: the 2026-07-28 fast path, one hand-built POST per call;
- ``tasks``: a call that runs as an MCP task: started in a session of its own, then followed from any process;
- ``task_extension``: the 2026-07-28 form of Tasks (the ``io.modelcontextprotocol/tasks`` extension), its wire
  shapes and its exchanges, which ``tasks`` and ``stdio_tasks`` use for a server of that era;
- ``task_state``: what a followed task's state means in either form (``next_step``, and the loop acting on it);
- ``stdio``, ``stdio_transport`` and ``stdio_guardian``: a stdio server as a child process of the caller that
  uses it, read by raydag's own bounded transport;
- ``stdio_tasks``: a stdio server's tasks in either form, tied to the process that runs them, and the questions
  they hold open (2025-11-25);
- ``held_calls``: a plain call its server's question holds open in the process that made it, followed like a task;
- ``answers``: what one line a stdio server wrote is (a message, or a fault failing its request);
- ``watch``: what the transport saw of a call (refusals, lost connections, answers over their bound);
- ``redaction``: the secrets a server was sent, out of everything it sends back.

Other packages use ``McpConnections``, ``call_tool``, ``discover`` and ``relist``.
"""

from actors.calls.mcp.connections import McpConnections, call_tool

__all__ = ["McpConnections", "call_tool"]
