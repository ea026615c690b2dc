"""Conv and ConvTranspose: the Conv kernel (conv2d.py lower_conv) and its blocks, the generic nest, the padding NaN pass."""
from __future__ import annotations

from . import conv2d, transpose, winograd_input  # noqa: F401  (their @register calls)
