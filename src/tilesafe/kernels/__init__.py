"""tilesafe.kernels: a library of safe tile kernels with a plain functional API."""
from .elementwise import add, div, exp, gelu, mul, neg, relu, residual_add, silu, silu_mul, sub
from .reduce import log_softmax, max, mean, softmax, sum
from .norms import layer_norm, rms_norm
