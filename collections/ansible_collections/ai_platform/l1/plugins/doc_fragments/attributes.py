# -*- coding: utf-8 -*-
# Copyright: ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """Shared attribute documentation for the collection's modules."""

    # The read-only *_info modules: they never change anything.
    INFO_MODULE = r'''
attributes:
  check_mode:
    support: full
    description: The module only reads; it runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
'''
