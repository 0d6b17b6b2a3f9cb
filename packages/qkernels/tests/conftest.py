"""Triton kernels run on the CPU in Triton's interpreter: switch it on before anything imports them."""

import os

os.environ["TRITON_INTERPRET"] = "1"
