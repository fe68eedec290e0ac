import sys
from pathlib import Path

# the pass tests share graph builders and numeric helpers that live beside them
sys.path.insert(0, str(Path(__file__).parent))
