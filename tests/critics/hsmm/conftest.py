import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # for the hsmm_brute helper
