"""Stage 4, the static memory planner (docs/DESIGN.md 1.7): `plan_memory`, `verify_plan`, `op_lower_bound`;
planner.py drives the execution orders (orders.py) and placement strategies (strategies.py)."""
from .planner import MemoryPlan, PlanError, PlanOptions, is_alias_view, op_lower_bound, plan_memory, verify_plan

__all__ = ["MemoryPlan", "PlanError", "PlanOptions", "is_alias_view", "op_lower_bound", "plan_memory", "verify_plan"]
