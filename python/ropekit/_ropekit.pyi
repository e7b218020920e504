"""
ropekit: rotary position embeddings that match Hugging Face, with accurate angles (C++ core)
"""
from __future__ import annotations
import collections.abc
import numpy
import numpy.typing
import os
import typing
__all__: list[str] = ['CosSinTable', 'Error', 'KvCache', 'Model', 'ModelPositions', 'PagedKvCache', 'Rope', 'RopeSet', 'RotateCall', 'Tokenizer', 'attention', 'cp_indices', 'cp_positions', 'cu_seqlens_from_eod', 'default_threads', 'eval', 'eval_methods', 'linear_attention', 'llama4_vision_position_ids', 'model_families', 'model_positions', 'model_positions_gguf', 'model_positions_preset', 'mrope_decode_positions', 'mrope_position_ids', 'needs_rerotation', 'packed_positions', 'passkey', 'pixtral_position_ids', 'presets', 'rejected_slot_ranges', 'rotate_and_cache', 'scaling_variants', 'set_default_threads', 'set_simd_target', 'simd_target', 'simd_targets', 'tree_mask', 'tree_positions', 'verify_positions', 'vision_position_ids', 'vision_rope', 'vision_window_index', 'window_order']
class CosSinTable:
    """
    An engine's cos/sin cache imported by Rope.import_cos_sin_cache, for Rope.apply(..., table=)
    """
    @property
    def num_positions(self) -> int:
        ...
class Error(ValueError):
    pass
class KvCache:
    """
    One sequence's KV cache of rotated keys (ropekit/kv_cache.hpp): slots in append order, each with its position; K-shift as a pure rotation, re-rotation on a plan change. Threads may share it: a change runs alone, reads (attention among them) together.
    """
    def __init__(self, rope: Rope, capacity: typing.SupportsInt | typing.SupportsIndex, kv_heads: typing.SupportsInt | typing.SupportsIndex, *, dtype: str = 'float32', v_head_dim: typing.SupportsInt | typing.SupportsIndex = 0, angles: str = 'accurate') -> None:
        """
        A cache of `capacity` slots of kv_heads keys (rope.head_dim) and values (v_head_dim, 0: head_dim), stored as dtype 'float32', 'bfloat16' or 'float16'
        """
    def __len__(self) -> int:
        ...
    def append(self, rope: Rope, k: typing.Any, v: typing.Any, positions: typing.Any = None, *, layout: str = 'thd', angles: str = 'accurate', table: CosSinTable | None = None) -> None:
        """
        Rotates k at positions (None: following the last slot's) and appends it with v, one rounding to storage
        """
    def attention(self, rope: Rope, q: typing.Any, positions: typing.Any, *, layout: str = 'thd', causal: bool = True, window: typing.SupportsInt | typing.SupportsIndex = 0, softmax_scale: typing.SupportsFloat | typing.SupportsIndex | None = None, angles: str = 'accurate', table: CosSinTable | None = None) -> typing.Any:
        """
        Softmax attention of q (rotated on load at positions) over the cached keys and values; causal by position, window > 0 a sliding window; returns the output as q's kind of array
        """
    def clear(self) -> None:
        """
        Removes every slot
        """
    def erase(self, first: typing.SupportsInt | typing.SupportsIndex, last: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Removes slots [first, last); later slots move down keeping their positions (llama.cpp's seq_rm)
        """
    def keys(self) -> numpy.typing.NDArray[numpy.float32]:
        """
        The stored (rotated) keys as float32 [size, kv_heads, head_dim], a copy
        """
    def positions(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        Each slot's position, int64
        """
    def rerotate(self, rope: Rope, *, angles: str = 'accurate') -> bool:
        """
        Re-rotates the cached keys from their plan to rope's (dynamic NTK, LongRoPE); False, changing nothing, when the plans agree
        """
    def shift(self, first: typing.SupportsInt | typing.SupportsIndex, last: typing.SupportsInt | typing.SupportsIndex, delta: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        K-shift: slots [first, last) move by delta positions, their keys turned by R(delta); a refused shift (a position below 0 or at 2^47) changes nothing
        """
    def values(self) -> numpy.typing.NDArray[numpy.float32]:
        """
        The stored values as float32 [size, kv_heads, v_head_dim], a copy
        """
    @property
    def capacity(self) -> int:
        ...
    @property
    def size(self) -> int:
        ...
class Model:
    """
    The lab's Llama runner (ropekit/model.hpp): a llama2.c checkpoint, a GGUF file or a Hugging Face safetensors directory, run on the CPU with any RoPE
    """
    def __init__(self, path: os.PathLike | str | bytes, *, mmap: bool = True) -> None:
        """
        Loads a model file or directory (the format read from its contents); mmap=False reads a GGUF file into memory instead of mapping it, so that the file may change while the model lives
        """
    def generate(self, prompt: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], steps: typing.SupportsInt | typing.SupportsIndex, *, temperature: typing.SupportsFloat | typing.SupportsIndex = 0.0, topp: typing.SupportsFloat | typing.SupportsIndex = 0.8999999761581421, seed: typing.SupportsInt | typing.SupportsIndex = 1, rope: Rope | None = None, threads: typing.SupportsInt | typing.SupportsIndex = 0) -> list[int]:
        """
        The prompt's tokens followed by up to `steps` generated ones: greedy at temperature 0, else top-p sampling from seed
        """
    def logits(self, tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], positions: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] | None = None, *, rope: Rope | None = None, window: typing.SupportsInt | typing.SupportsIndex = 0, threads: typing.SupportsInt | typing.SupportsIndex = 0) -> numpy.typing.NDArray[numpy.float32]:
        """
        float32 logits [len(tokens), vocab_size] of one forward pass at positions (None: 0 … n-1), with rope (None: the model's) and window > 0 a sliding window
        """
    def rope_with_scaling(self, rope_scaling: dict, *, trained_length: typing.SupportsInt | typing.SupportsIndex | None = None) -> Rope:
        """
        The model's RoPE under a context-extension method: rope_scaling in config.json syntax, trained_length the original context (default: the model's)
        """
    @property
    def config(self) -> dict:
        ...
    @property
    def rope(self) -> Rope:
        ...
class ModelPositions:
    """
    A model's positional encoding, layer by layer, read from its config.json, a preset or a GGUF file (ropekit/model_positions.hpp); layer(type) / at_layer(i) give its Ropes.
    """
    @staticmethod
    def from_config(config: typing.Any, *, pairing: str | None = None) -> ModelPositions:
        """
        A model's positions from its config.json (a path or a dict), resolved as transformers does
        """
    @staticmethod
    def from_gguf(path: typing.Any, *, pairing: str | None = None) -> ModelPositions:
        """
        A GGUF file's positions from its llama.cpp metadata (only the header is read)
        """
    @staticmethod
    def from_preset(name: str) -> ModelPositions:
        """
        A built-in preset's positions (ropekit.presets())
        """
    def __repr__(self) -> str:
        ...
    def at_layer(self, index: typing.SupportsInt | typing.SupportsIndex) -> Rope:
        """
        The Rope of layer `index`
        """
    def layer(self, layer_type: str | None = None) -> Rope:
        """
        The Rope of a layer type (None: the only RoPE layer type)
        """
    def ropes(self) -> dict:
        """
        {layer type: Rope} for every RoPE layer type, in first-use order
        """
    def to_dict(self) -> dict:
        """
        What ropekit.model_positions returns: every group's facts as a dict
        """
    @property
    def family(self) -> str:
        ...
    @property
    def layer_types(self) -> list[str]:
        ...
    @property
    def model_type(self) -> str:
        ...
    @property
    def num_layers(self) -> int:
        ...
    @property
    def rope_layer_types(self) -> list[str]:
        ...
    @property
    def source(self) -> str:
        ...
    @property
    def warnings(self) -> list[str]:
        ...
class PagedKvCache:
    """
    A paged KV cache of rotated keys for many sequences (ropekit/paged_kv_cache.hpp): pages in FlashInfer's layout, llama.cpp's sequence operations, fp8/bf16/fp16 storage. Threads may share it: a change runs alone, reads (attention among them) together.
    """
    def __init__(self, rope: Rope, num_pages: typing.SupportsInt | typing.SupportsIndex, page_size: typing.SupportsInt | typing.SupportsIndex, kv_heads: typing.SupportsInt | typing.SupportsIndex, max_sequences: typing.SupportsInt | typing.SupportsIndex, *, dtype: str = 'float32', layout: str = 'nhd', k_scale: typing.SupportsFloat | typing.SupportsIndex = 1.0, v_scale: typing.SupportsFloat | typing.SupportsIndex = 1.0, v_head_dim: typing.SupportsInt | typing.SupportsIndex = 0, angles: str = 'accurate') -> None:
        """
        num_pages pages of page_size tokens for up to max_sequences sequences; dtype 'float32', 'bfloat16', 'float16' or 'fp8_e4m3' (k_scale, v_scale: the fp8 scales), page layout 'nhd' or 'hnd'
        """
    def append(self, rope: Rope, seq_ids: typing.Any, k: typing.Any, v: typing.Any, positions: typing.Any = None, *, angles: str = 'accurate', table: CosSinTable | None = None) -> None:
        """
        Rotates each token's k at its position (None: following its sequence's last) and appends it with v to the sequence seq_ids names, taking pages from the free list
        """
    def attention(self, rope: Rope, q: typing.Any, positions: typing.Any, seq_ids: typing.Any, *, causal: bool = True, window: typing.SupportsInt | typing.SupportsIndex = 0, softmax_scale: typing.SupportsFloat | typing.SupportsIndex | None = None, angles: str = 'accurate', table: CosSinTable | None = None) -> typing.Any:
        """
        Softmax attention of each query token (rotated on load at its position) over its sequence's cached keys and values; causal by position, window > 0 a sliding window
        """
    def erase(self, seq: typing.SupportsInt | typing.SupportsIndex, p0: typing.SupportsInt | typing.SupportsIndex = -1, p1: typing.SupportsInt | typing.SupportsIndex = -1) -> None:
        """
        Removes seq's entries at positions [p0, p1) (p0 < 0: from 0, p1 < 0: to the end); later entries keep their positions; pages no longer needed are freed
        """
    def length(self, seq: typing.SupportsInt | typing.SupportsIndex) -> int:
        """
        How many entries seq holds
        """
    def page_table(self, seqs: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> tuple[numpy.typing.NDArray[numpy.int32], numpy.typing.NDArray[numpy.int32], numpy.typing.NDArray[numpy.int32]]:
        """
        FlashInfer's page table of the sequences seqs: (indices, indptr, last_page_len), int32 arrays, for an engine's own attention kernel
        """
    def pages(self, seq: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.int32]:
        """
        The pages seq occupies, in order, int32
        """
    def positions(self, seq: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.int64]:
        """
        seq's entries' positions in entry order, int64
        """
    def rerotate(self, seq: typing.SupportsInt | typing.SupportsIndex, rope: Rope, *, angles: str = 'accurate') -> bool:
        """
        Re-rotates seq's keys from its plan to rope's; False (adopting the plan) when they agree, the keys are stored unrotated or the sequence is empty
        """
    def seq_add(self, seq: typing.SupportsInt | typing.SupportsIndex, p0: typing.SupportsInt | typing.SupportsIndex, p1: typing.SupportsInt | typing.SupportsIndex, delta: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Deprecated name of shift (llama.cpp's)
        """
    def seq_clear(self, seq: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Removes every entry of seq, and its plan
        """
    def seq_cp(self, src: typing.SupportsInt | typing.SupportsIndex, dst: typing.SupportsInt | typing.SupportsIndex, p0: typing.SupportsInt | typing.SupportsIndex = -1, p1: typing.SupportsInt | typing.SupportsIndex = -1) -> None:
        """
        Copies src's entries at positions [p0, p1) to the end of dst (dst adopts src's plan when empty)
        """
    def seq_rm(self, seq: typing.SupportsInt | typing.SupportsIndex, p0: typing.SupportsInt | typing.SupportsIndex = -1, p1: typing.SupportsInt | typing.SupportsIndex = -1) -> None:
        """
        Deprecated name of erase (llama.cpp's)
        """
    def shift(self, seq: typing.SupportsInt | typing.SupportsIndex, p0: typing.SupportsInt | typing.SupportsIndex, p1: typing.SupportsInt | typing.SupportsIndex, delta: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        K-shift: seq's entries at positions [p0, p1) move by delta, their keys turned by R(delta); a refused shift changes nothing
        """
    @property
    def free_pages(self) -> int:
        ...
class Rope:
    """
    One RoPE plan (ropekit/rope.hpp): the spec a model's config gives, its inverse frequencies and magnitudes for a current length, and the kernels that rotate query/key arrays and tensors with it. Immutable but for the deprecated set_current_length; shared freely between threads.
    """
    @staticmethod
    def from_config(config: typing.Any, *, layer_type: str | None = None, layer: typing.SupportsInt | typing.SupportsIndex | None = None, pairing: str | None = None) -> typing.Any:
        """
        The model's RoPE from its config.json (a path or a dict), resolved as transformers does; layer_type= or layer= picks one where the layers have several RoPE plans (without it such a model gives a dict {layer_type: Rope}, deprecated)
        """
    @staticmethod
    def from_gguf(path: typing.Any, *, layer_type: str | None = None, layer: typing.SupportsInt | typing.SupportsIndex | None = None, pairing: str | None = None) -> typing.Any:
        """
        The RoPE of a GGUF file's llama.cpp metadata (only the header is read), as from_config gives it
        """
    @staticmethod
    def from_preset(name: str, *, layer_type: str | None = None, layer: typing.SupportsInt | typing.SupportsIndex | None = None) -> typing.Any:
        """
        The RoPE of a built-in preset (ropekit.presets()), as from_config gives it
        """
    def __init__(self, head_dim: typing.SupportsInt | typing.SupportsIndex, *, rotary_dim: typing.SupportsInt | typing.SupportsIndex | None = None, base: typing.SupportsFloat | typing.SupportsIndex = 10000.0, pairing: str = 'half', rope_scaling: typing.Any = None, max_position_embeddings: typing.SupportsInt | typing.SupportsIndex | None = None, mrope_section: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] | None = None, mrope_interleaved: bool = False, current_length: typing.SupportsInt | typing.SupportsIndex | None = None) -> None:
        """
        A Rope from keywords: rope_scaling in config.json syntax (read by the config reader), pairing 'half' (HF rotate_half) or 'interleaved' (GPT-J); rotary_dim defaults to head_dim
        """
    def __repr__(self) -> str:
        ...
    def apply(self, q: typing.Any, k: typing.Any = None, positions: typing.Any = None, *, layout: str = 'bshd', inplace: bool = True, direction: str = 'forward', angles: str = 'accurate', dtype: str = '', threads: typing.SupportsInt | typing.SupportsIndex = 0, table: CosSinTable | None = None) -> typing.Any:
        """
        Rotates q (and k) at positions (None: 0 … seq-1): NumPy arrays, torch CPU or CUDA tensors in layout 'bshd', 'bhsd' or 'thd'; in place by default, direction 'forward', 'inverse' or 'backward'; angles 'accurate' (correctly rounded) or 'hf' (HF's float32 angles). Returns (q, k), or the one given — the same objects when in place. Float32 arithmetic, one rounding to storage (docs/numerics.md)
        """
    def bands(self, context: typing.SupportsInt | typing.SupportsIndex | None = None) -> dict:
        """
        Each pair's frequency band for a context length: wavelength, rotations over the context and whether the scaling keeps, blends or interpolates it (ropekit/analysis.hpp)
        """
    def check_cos_sin_cache(self, cache: typing.Any, *, tolerance: typing.SupportsFloat | typing.SupportsIndex = 1e-06) -> dict:
        """
        How far an engine's cos/sin cache is from the accurate angles: a dict of max_error, worst_position, worst_pair, worst_is_sin, first_position_over (the first row past tolerance, -1 if none), accurate_bound
        """
    def cos_sin(self, positions: typing.Any, *, layout: str = 'hf', angles: str = 'accurate') -> tuple:
        """
        float32 (cos, sin) of shape positions.shape + (width,): layout 'hf' is HF's duplicated rotary_dim-wide row, 'half' flash-attn's rotary_dim/2 values; the magnitude included as HF includes it; M-RoPE positions [3, ...] give each pair its stream's value
        """
    def cos_sin_cache(self, num_positions: typing.SupportsInt | typing.SupportsIndex, *, angles: str = 'accurate') -> numpy.typing.NDArray[numpy.float32]:
        """
        Deprecated name of export_cos_sin_cache (until 2026-11-29): warns, then exports
        """
    def decay_bound(self, max_distance: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.float64]:
        """
        RoFormer's long-term decay bound (1/(d/2))·Σ|S_j| for relative distances 0 … max_distance, as float64 (ropekit/analysis.hpp)
        """
    def export_cos_sin_cache(self, num_positions: typing.SupportsInt | typing.SupportsIndex, *, angles: str = 'accurate') -> numpy.typing.NDArray[numpy.float32]:
        """
        ropekit's coefficients in vLLM's cos_sin_cache layout: float32 [num_positions, rotary_dim], m·cos half then m·sin half (FlashInfer takes the same)
        """
    def import_cos_sin_cache(self, cache: typing.Any) -> CosSinTable:
        """
        An engine's float32 [n, rotary_dim] cos/sin cache copied once into a CosSinTable, which apply(..., table=) and the caches' append/attention then rotate with, value for value
        """
    def prepare(self, q: typing.Any, k: typing.Any = None, positions: typing.Any = None, *, layout: str = 'bshd', inplace: bool = True, direction: str = 'forward', angles: str = 'accurate', dtype: str = '', threads: typing.SupportsInt | typing.SupportsIndex = 0, table: CosSinTable | None = None) -> RotateCall:
        """
        apply()'s call validated and resolved once (ropekit/call.hpp's RotateCall): run() rotates (and returns what apply returns), set_positions(positions) moves it to new positions of the same tokens
        """
    def set_current_length(self, length: typing.SupportsInt | typing.SupportsIndex) -> bool:
        """
        Deprecated: re-plans this Rope in place for a current length (dynamic NTK, LongRoPE) and returns whether the plan changed; take RopeSet(rope).at(length) instead
        """
    def verify(self) -> list:
        """
        `ropekit verify`'s self-checks of this RoPE against each function's contract (angles vs a float64 oracle, inverse∘forward, K-shift, fused attention, ...): dicts of name, what, figure, bound, passed, skipped, detail
        """
    @property
    def cos_sin_scale(self) -> float:
        ...
    @property
    def current_length(self) -> int | None:
        ...
    @property
    def depends_on_length(self) -> bool:
        ...
    @property
    def head_dim(self) -> int:
        ...
    @property
    def inv_freq(self) -> numpy.typing.NDArray[numpy.float32]:
        ...
    @property
    def inv_freq64(self) -> numpy.typing.NDArray[numpy.float64]:
        ...
    @property
    def layer(self) -> typing.Any:
        ...
    @property
    def num_pairs(self) -> int:
        ...
    @property
    def pairing(self) -> str:
        ...
    @property
    def rope_type(self) -> str:
        ...
    @property
    def rotary_dim(self) -> int:
        ...
    @property
    def softmax_scale_mult(self) -> float:
        ...
    @property
    def spec(self) -> dict:
        ...
    @property
    def uses_long_factors(self) -> bool:
        ...
class RopeSet:
    """
    Immutable Ropes for sequences at different current lengths (dynamic NTK, LongRoPE), built once per distinct plan and shared: RopeSet(rope).at(length) is the Rope a sequence of that length uses (ropekit/rope_set.hpp).
    """
    def __init__(self, rope: Rope, *, length_bucket: typing.SupportsInt | typing.SupportsIndex = 1, max_ropes: typing.SupportsInt | typing.SupportsIndex = 64) -> None:
        """
        The set of rope's plans: current lengths rounded up to length_bucket, at most max_ropes kept
        """
    def __len__(self) -> int:
        ...
    def __repr__(self) -> str:
        ...
    def at(self, length: typing.SupportsInt | typing.SupportsIndex) -> Rope:
        """
        The Rope planned for a sequence of current length `length` (the same object for every length with the same plan while the set keeps it).
        """
    def planned_length(self, length: typing.SupportsInt | typing.SupportsIndex) -> int:
        """
        The length a current length is planned at: rounded up to length_bucket, capped below 2^47
        """
    @property
    def initial(self) -> Rope:
        """
        The Rope without a current length (HF's seq_len=None).
        """
class RotateCall:
    """
    Rope.prepare's call: run() per step, set_positions() between steps (ropekit/call.hpp). Threads sharing one call run its methods one at a time.
    """
    def run(self) -> typing.Any:
        """
        Rotates the prepared q (and k) and returns what Rope.apply returns; no argument is checked again
        """
    def set_positions(self, positions: typing.Any) -> None:
        """
        Moves the call to new positions of the same tokens, checked as prepare checks them (the call unchanged on an error)
        """
class Tokenizer:
    """
    The runner's tokenizer (ropekit/tokenizer.hpp): llama2.c's tokenizer.bin or a GGUF file's vocabulary
    """
    def __init__(self, path: os.PathLike | str | bytes) -> None:
        """
        Reads a tokenizer file (tokenizer.bin or a .gguf)
        """
    def decode(self, tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], *, prev: typing.SupportsInt | typing.SupportsIndex = 1) -> typing.Any:
        """
        The text of tokens, each decoded after the one before (prev: the token before the first)
        """
    def encode(self, text: str, *, bos: bool = True, eos: bool = False) -> list[int]:
        """
        The token ids of text, with BOS first and EOS last when asked
        """
    def encode_stories(self, text: str) -> list[int]:
        """
        `ropekit tokenize --stories`: each story (split at <|endoftext|>) from a BOS
        """
    @property
    def bos_id(self) -> int:
        ...
    @property
    def eos_id(self) -> int:
        ...
    @property
    def vocab_size(self) -> int:
        ...
def _cuda_built() -> bool:
    ...
def _cuda_check(device: typing.SupportsInt | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Waits for `stream` and raises ropekit.Error naming the first token whose position a CUDA rotation on `device` could not rotate since the last check.
    """
def _lab_check_regimes_act(methods: collections.abc.Sequence[tuple[str, str]], trained_length: typing.SupportsInt | typing.SupportsIndex, max_n: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
def _lab_method(name: str, fragment: str, scale: typing.SupportsFloat | typing.SupportsIndex, trained_length: typing.SupportsInt | typing.SupportsIndex) -> dict:
    ...
def _lab_parse_methods(methods: str) -> list:
    ...
def _lab_protocol(trained_length: typing.SupportsInt | typing.SupportsIndex, window_size: typing.SupportsInt | typing.SupportsIndex | None, lengths: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], buckets: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> dict:
    ...
def _lab_windows(tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], window_size: typing.SupportsInt | typing.SupportsIndex, windows: typing.SupportsInt | typing.SupportsIndex | None, bos_id: typing.SupportsInt | typing.SupportsIndex) -> list[int]:
    ...
def _passkey_keys(seed: typing.SupportsInt | typing.SupportsIndex, count: typing.SupportsInt | typing.SupportsIndex) -> list[str]:
    ...
def _passkey_lengths(trained_length: typing.SupportsInt | typing.SupportsIndex) -> list[int]:
    ...
def _passkey_prompt(encode: collections.abc.Callable, length: typing.SupportsInt | typing.SupportsIndex, depth: typing.SupportsFloat | typing.SupportsIndex, key: str, bos: typing.SupportsInt | typing.SupportsIndex) -> tuple[list[int], list[int]]:
    ...
def _regime_table(regimes: dict, i: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], j: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> tuple[numpy.typing.NDArray[numpy.int8], numpy.typing.NDArray[numpy.int64], numpy.typing.NDArray[numpy.int64]]:
    ...
def _rotate_and_cache_cuda(rope: typing.SupportsInt | typing.SupportsIndex, key_cache: typing.Any, value_cache: typing.Any, key: typing.Any, value: typing.Any, slot_mapping: typing.Any, query: typing.Any, positions: typing.Any, cache_layout: str, k_scale: typing.SupportsFloat | typing.SupportsIndex, v_scale: typing.SupportsFloat | typing.SupportsIndex, angles: str, device: typing.SupportsInt | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
def _rotate_cuda(rope: typing.SupportsInt | typing.SupportsIndex, q: typing.Any, k: typing.Any, q_out: typing.Any, k_out: typing.Any, positions: typing.Any, layout: str, direction: str, angles: str, device: typing.SupportsInt | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex) -> None:
    ...
def _rotate_cuda_table(rope: typing.SupportsInt | typing.SupportsIndex, table: CosSinTable, q: typing.Any, k: typing.Any, positions: typing.Any, layout: str, device: typing.SupportsInt | typing.SupportsIndex, stream: typing.SupportsInt | typing.SupportsIndex, q_out: typing.Any = None, k_out: typing.Any = None, direction: str = 'forward') -> None:
    ...
def _rotate_torch(rope: typing.SupportsInt | typing.SupportsIndex, q: typing.Any, k: typing.Any, q_out: typing.Any, k_out: typing.Any, positions: typing.Any, layout: str, direction: str, angles: str, device: typing.SupportsInt | typing.SupportsIndex = -1, stream: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
    ...
def _time_apply(rope: Rope, q: typing.Any, k: typing.Any, positions: typing.Any, layout: str, iterations: typing.SupportsInt | typing.SupportsIndex, threads: typing.SupportsInt | typing.SupportsIndex = 0) -> float:
    ...
def _torch_abi() -> int:
    """
    The address of the rk_torch_abi table (python/src/torch_abi.h) the operator library binds to.
    """
def _torch_check_rotation(q: typing.Any, k: typing.Any, positions: typing.Any, rope: typing.SupportsInt | typing.SupportsIndex, layout: str, direction: str, angles: str, inplace: bool) -> None:
    """
    The checks of ropekit::rotate / rotate_ on tensors without memory (the operators' fakes): the real call's checks by the same functions, up to a prepared call that never runs.
    """
def _torch_handle(rope: Rope) -> int:
    """
    The handle ropekit's PyTorch operators take for `rope` (the same Rope, the same handle).
    """
def _torch_registered() -> int:
    """
    How many Ropes the handle registry holds entries for (freed ones swept).
    """
def _torch_rope(handle: typing.SupportsInt | typing.SupportsIndex) -> Rope:
    """
    The Rope a handle names (ropekit.Error when it names none).
    """
def attention(q: typing.Any, k: typing.Any, v: typing.Any, rope: Rope | None = None, q_positions: typing.Any = None, k_positions: typing.Any = None, *, layout: str = 'bshd', causal: bool = True, window: typing.SupportsInt | typing.SupportsIndex = 0, softmax_scale: typing.SupportsFloat | typing.SupportsIndex | None = None, alibi_slopes: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex] | None = None, angles: str = 'accurate', table: CosSinTable | None = None) -> typing.Any:
    """
    Softmax attention (ropekit/attention.hpp) with RoPE fused into the Q/K loads (rope None: no rotation): GQA/MQA, causal by position, window > 0 a sliding window, ALiBi slopes; float32 arithmetic, bit-identical to Rope.apply followed by attention on the rotated copies
    """
def cp_indices(seq_len: typing.SupportsInt | typing.SupportsIndex = 0, *, cp_size: typing.SupportsInt | typing.SupportsIndex, cp_rank: typing.SupportsInt | typing.SupportsIndex, sharding: str = 'zigzag', stripe: typing.SupportsInt | typing.SupportsIndex = 1, cu_seqlens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] | None = None) -> numpy.typing.NDArray[numpy.int64]:
    """
    The global token indices a context-parallel rank holds (per document when cu_seqlens is given).
    """
def cp_positions(seq_len: typing.SupportsInt | typing.SupportsIndex = 0, *, cp_size: typing.SupportsInt | typing.SupportsIndex, cp_rank: typing.SupportsInt | typing.SupportsIndex, sharding: str = 'zigzag', stripe: typing.SupportsInt | typing.SupportsIndex = 1, start: typing.SupportsInt | typing.SupportsIndex = 0, cu_seqlens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] | None = None, start_offsets: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] | None = None) -> numpy.typing.NDArray[numpy.int64]:
    """
    The positions of the tokens a context-parallel rank holds.
    """
def cu_seqlens_from_eod(tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], eod: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.int64]:
    """
    Document boundaries at end-of-document tokens (Megatron's reset_position_ids).
    """
def default_threads() -> int:
    """
    How many threads a call with threads=0 uses
    """
def eval(model: Model, tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], *, methods: str = 'orig,pi,yarn,swa', lengths: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] = [512, 2048], buckets: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] | None = None, window_size: typing.SupportsInt | typing.SupportsIndex = 2048, windows: typing.SupportsInt | typing.SupportsIndex | None = None, trained_length: typing.SupportsInt | typing.SupportsIndex | None = None, threads: typing.SupportsInt | typing.SupportsIndex = 0, attention_stats: bool = False) -> dict:
    """
    `ropekit eval`: perplexity by position bucket of each method at each evaluation length over windows of tokens (docs/lab.md), as a dict of NumPy arrays
    """
def eval_methods() -> list:
    """
    The lab's built-in method names (orig, pi, ntk, yarn, ...), for eval and passkey's methods=
    """
def linear_attention(rope: Rope, q: typing.Any, k: typing.Any, v: typing.Any, q_positions: typing.Any = None, k_positions: typing.Any = None, *, layout: str = 'bshd', causal: bool = True, form: str = 'recurrent', angles: str = 'accurate') -> typing.Any:
    """
    RoFormer's linear attention with RoPE (ropekit/linear_attention.hpp), in the 'recurrent' or 'parallel' form
    """
def llama4_vision_position_ids(patches_per_side: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.int64]:
    """
    Llama 4's vision grid as [2, side² + 1] (column + 1, row + 1) streams, the class token last at (0, 0).
    """
def model_families() -> list:
    """
    The model table (docs/config.md): every model_type read with its family's rules, as dicts of model_type, family, pairing, source (the modeling file read) and remote_code
    """
def model_positions(config: typing.Any, *, pairing: str | None = None) -> dict:
    """
    A model's per-layer positional plan (docs/config.md) from its config.json (a path or a dict), as a dict
    """
def model_positions_gguf(path: typing.Any) -> dict:
    """
    model_positions of a GGUF file's llama.cpp metadata
    """
def model_positions_preset(name: str) -> dict:
    """
    model_positions of a built-in preset
    """
def mrope_decode_positions(delta: typing.SupportsInt | typing.SupportsIndex, cached: typing.SupportsInt | typing.SupportsIndex, count: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.int64]:
    """
    Decoding after a multimodal prompt: int64 [3, count] positions of count new tokens after `cached`, each cache position + delta (HF's arange(past, past + n) + rope_deltas)
    """
def mrope_position_ids(family: str, mm_token_type_ids: typing.Annotated[numpy.typing.ArrayLike, numpy.int32], *, attention_mask: typing.Annotated[numpy.typing.ArrayLike, numpy.int32] | None = None, image_grid_thw: typing.Annotated[numpy.typing.ArrayLike, numpy.int64] | None = None, video_grid_thw: typing.Annotated[numpy.typing.ArrayLike, numpy.int64] | None = None, second_per_grid_ts: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex] | None = None, spatial_merge_size: typing.SupportsInt | typing.SupportsIndex = 2, tokens_per_second: typing.SupportsInt | typing.SupportsIndex = 2, rule: str = 'token_types') -> tuple[numpy.typing.NDArray[numpy.int64], numpy.typing.NDArray[numpy.int64]]:
    """
    Hugging Face's get_rope_index: (position_ids [3, batch, seq], rope_deltas [batch]).
    """
def needs_rerotation(cached: Rope, next: Rope) -> bool:
    """
    True when keys rotated under `cached`'s plan must be re-rotated to be valid under `next`'s: the angles (inv_freq) or the cos/sin magnitude differ (ropekit/plan.hpp; Hugging Face does not re-rotate).
    """
def packed_positions(cu_seqlens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], start_offsets: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] | None = None) -> numpy.typing.NDArray[numpy.int64]:
    """
    Positions of a packed batch: each document restarts at 0 (or at its start offset).
    """
def passkey(model: Model, tokenizer: Tokenizer, *, methods: str = 'orig,pi,ntk,yarn,yarn_notemp,dyn_ntk,llama3', lengths: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] = [], depths: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex] = [], keys: typing.SupportsInt | typing.SupportsIndex = 5, seed: typing.SupportsInt | typing.SupportsIndex = 0, trained_length: typing.SupportsInt | typing.SupportsIndex | None = None, threads: typing.SupportsInt | typing.SupportsIndex = 0) -> dict:
    """
    `ropekit passkey`: retrieval of a random key hidden at each depth of a prompt of each length, per method (docs/lab.md): a dict of cells (method, length, scale, depth, keys, retrieved), trained_length, seconds
    """
def pixtral_position_ids(image_patches: collections.abc.Sequence[tuple[typing.SupportsInt | typing.SupportsIndex, typing.SupportsInt | typing.SupportsIndex]], max_patches_per_side: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.int64]:
    """
    Pixtral's position_ids_in_meshgrid as [2, n] (row, column) streams; image_patches: (h, w) per image.
    """
def presets() -> list:
    """
    The built-in presets (docs/config.md) as dicts of name and model
    """
def rejected_slot_ranges(parents: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], accepted: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], base_slot: typing.SupportsInt | typing.SupportsIndex) -> list[tuple[int, int]]:
    """
    The [first, last) cache slot ranges to erase after verification, last first.
    """
def rotate_and_cache(rope: Rope, key_cache: typing.Any, value_cache: typing.Any, key: typing.Any, value: typing.Any, slot_mapping: typing.Any, *, query: typing.Any = None, positions: typing.Any = None, cache_layout: str = 'nhd', k_scale: typing.SupportsFloat | typing.SupportsIndex = 1.0, v_scale: typing.SupportsFloat | typing.SupportsIndex = 1.0, angles: str = 'accurate', rotate_key: bool = True, cache_dtype: str = '', threads: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
    """
    The fused rotate-and-append of ropekit/append.hpp (vLLM's rotary_embedding + reshape_and_cache in one pass): query [tokens, heads, head_dim] rotated in place; key [tokens, kv_heads, head_dim] rotated (in place too unless rotate_key=False) and written with value to the slots of slot_mapping (−1: skipped) in key_cache / value_cache ([pages, page_size, kv_heads, dim] for cache_layout "nhd", [pages, kv_heads, page_size, dim] for "hnd"; float32, bfloat16, float16 or fp8 e4m3 with k_scale / v_scale). The bits of rotate, then convert, then copy.
    """
def scaling_variants() -> list:
    """
    Every scaling variant's description: rope_type, formula, and each field's config key, source (rope, model, file) and presence (required, default, optional)
    """
def set_default_threads(threads: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Sets how many threads a call with threads=0 uses (>= 1)
    """
def set_simd_target(name: str) -> None:
    """
    Restricts calls prepared from now on to one of simd_targets() (every target gives the same bits); '' restores the best
    """
def simd_target() -> str:
    """
    The SIMD target the kernels run on (the CPU's best unless set_simd_target)
    """
def simd_targets() -> list[str]:
    """
    Every SIMD target this CPU runs and the build compiled, best first
    """
def tree_mask(parents: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> numpy.typing.NDArray[numpy.bool]:
    """
    [n, n] booleans: node i sees node j (j is i or an ancestor).
    """
def tree_positions(parents: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], root_position: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.int64]:
    """
    Draft-tree positions: root_position + depth (parents[i] in [-1, i)).
    """
def verify_positions(cached: typing.SupportsInt | typing.SupportsIndex, count: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.int64]:
    """
    A speculative verify window: positions cached … cached + count - 1 (the last accepted token and the drafts)
    """
def vision_position_ids(grid_thw: typing.Annotated[numpy.typing.ArrayLike, numpy.int64], spatial_merge_size: typing.SupportsInt | typing.SupportsIndex, *, include_temporal: bool = False) -> numpy.typing.NDArray[numpy.int64]:
    """
    transformers.vision_utils.get_vision_position_ids as [2, n] (h, w) streams ([3, n] t, h, w with include_temporal): patches block-major over the merge blocks.
    """
def vision_rope(config: typing.Any) -> dict:
    """
    A vision encoder's rotary from a multimodal config (dict or path): {'family', 'rope' (an axial Rope), 'spatial_merge_size', 'patch_size', 'window_size', 'patches_per_side', ...}.
    """
def vision_window_index(grid_thw: typing.Annotated[numpy.typing.ArrayLike, numpy.int64], spatial_merge_size: typing.SupportsInt | typing.SupportsIndex, window_size: typing.SupportsInt | typing.SupportsIndex, patch_size: typing.SupportsInt | typing.SupportsIndex) -> tuple[numpy.typing.NDArray[numpy.int64], numpy.typing.NDArray[numpy.int64]]:
    """
    Qwen2.5-VL's get_vision_window_index: (window_index, cu_window_seqlens).
    """
def window_order(positions: typing.Annotated[numpy.typing.ArrayLike, numpy.int64], window_index: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], unit: typing.SupportsInt | typing.SupportsIndex) -> numpy.typing.NDArray[numpy.int64]:
    """
    [axes, n] positions reordered in groups of `unit` tokens by window_index (HF's reshape(...)[window_index]).
    """
_PASSKEY_DEPTHS: list = [0.0, 0.25, 0.5, 0.75, 1.0]
_PASSKEY_TEXT: dict = {'intro': 'There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you about the important information there.', 'filler': ' The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.', 'needle': ' The pass key is {key}. Remember it. {key} is the pass key.', 'question': ' What is the pass key? The pass key is'}
_TORCH_ABI_VERSION: int = 3
__version__: str = '0.1.0'
