import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

# The shared CI machine has two cores; one intra-op thread keeps tiny matmuls fast and results stable.
torch.set_num_threads(1)
