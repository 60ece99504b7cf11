"""The mitogen_linear strategy (mitogen, pinned in requirements.txt), found through ansible.cfg's
strategy_plugins so that no site-packages path is written anywhere: select it with
ANSIBLE_STRATEGY=mitogen_linear. Mitogen runs modules in a persistent interpreter per host instead
of a new Python per task, which is most of a converged run's cost (issue 17; README "Fleet scale").
"""

from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule  # noqa: F401
