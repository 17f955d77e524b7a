"""Progress bars: tqdm on a terminal, silent otherwise or when asked to be quiet."""
from __future__ import annotations

import sys


def progress_bar(iterable=None, *, total=None, desc=None, unit="it", disable=False):
    from tqdm.auto import tqdm
    disable = disable or not sys.stdout.isatty()
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=disable, leave=False, dynamic_ncols=True)
