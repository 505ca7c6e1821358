"""Client helpers for agent-surface servers.

- `agent_surface.table`: the decision table (what a client does with each error), read from the
  JSON that `cargo xtask gen-matrix` generates from the Rust source of truth;
- `agent_surface.loop`: the recovery loop over any MCP client (`Recoverer`, `Transport`, `Host`);
- `agent_surface.pydantic_ai`: `RecoveringToolset`, the loop as a Pydantic AI toolset over
  `MCPToolset` (needs `pydantic-ai-slim[mcp]`).

See docs/recovery.md in the repository.
"""

from .loop import ConfirmationPrompt, Host, Listing, Outcome, Recoverer, Recovery, Transport
from .table import ACTIONS, BOUNDS, DECISIONS, GUARD, Bounds, Decision, decide

__all__ = [
    "ACTIONS",
    "BOUNDS",
    "DECISIONS",
    "GUARD",
    "Bounds",
    "ConfirmationPrompt",
    "Decision",
    "Host",
    "Listing",
    "Outcome",
    "Recoverer",
    "Recovery",
    "Transport",
    "decide",
]
