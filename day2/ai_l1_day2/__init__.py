"""Day-2 operations of the ai_platform L1 layer on ansible-runner.

`ai_l1_day2.runner.run_operation()` runs one of `OPERATIONS` (a playbook under
playbooks/day2/) as its own ansible-runner job; `ai-l1-day2` is the command line.
"""

from ai_l1_day2.runner import OPERATIONS, RunResult, run_operation

__all__ = ["OPERATIONS", "RunResult", "run_operation"]
__version__ = "0.1.0"
