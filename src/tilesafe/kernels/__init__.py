"""tilesafe.kernels: a library of safe tile kernels with a plain functional API."""
from .elementwise import add, div, exp, gelu, mul, neg, relu, residual_add, silu, silu_mul, sub
from .reduce import log_softmax, max, mean, softmax, sum
from .norms import layer_norm, rms_norm
from .matmul import bmm, matmul
from .linear_fusions import linear, rms_norm_linear, silu_mul_linear
from .linear_argmax import linear_argmax
from .attention import DecodeWorkspace, decode_attention, decode_workspace, flash_attention
from .rope import ArgmaxWorkspace, argmax, argmax_workspace, embedding, rope
from .norm_rope import norm_rope
from .norm_rope_kv import norm_rope_kv_write
from .sampling import sample
from .kv_append import kv_append
from .paged_kv import paged_decode_attention, paged_decode_workspace, paged_kv_write, report_dropped, scatter_check
from .paged_prefill import paged_prefill_attention
from .first_use import first_use_tuning
from .torch_ops import register_torch_ops

register_torch_ops()   # torch.ops.tilesafe.* on import, as torchvision registers its ops
