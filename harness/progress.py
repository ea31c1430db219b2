"""Progress bars draw frames only on a terminal.

tqdm redraws its line with carriage returns; in a log file or CI that is hundreds of
frames. Every bar in the harness is built with ``disable=not frames(wanted)``: a bar is drawn
only when asked for AND stderr (where tqdm writes) is a TTY. Without a terminal a run prints
one line per stage instead (the callers' ``[narrowband] ...`` lines: roles ready, pretraining
done, each bench step).
"""
from __future__ import annotations

import sys


def frames(wanted: bool = True) -> bool:
    """Whether to draw a progress bar: asked for and stderr is a terminal."""
    try:
        return bool(wanted) and sys.stderr.isatty()
    except (AttributeError, ValueError):        # a closed or replaced stderr
        return False
