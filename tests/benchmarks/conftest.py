"""The benchmark smoke tests import the scripts under benchmarks/ by path (benchmarks/ is no package)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # bench_scripts.py sits beside the tests
