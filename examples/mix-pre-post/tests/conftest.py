"""Run from a checkout without installing the plugin: put its src/ on the path (an installed copy wins)."""

import sys
from pathlib import Path

try:
    import reslab_mix_pre_post  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
