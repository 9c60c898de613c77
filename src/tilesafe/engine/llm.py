"""`LLM`: load a Qwen3 checkpoint and generate, with vLLM's offline API.

    llm = LLM("Qwen/Qwen3-0.6B", device="cuda", dtype="bfloat16", max_model_len=4096)
    outs = llm.generate(["Hello", {"prompt_token_ids": [...]}], SamplingParams(max_tokens=64))

A call runs its prompts in waves of at most `max_num_seqs`: the wave's prompts are
prefilled together (packed one after another, each into its cache slot), then the wave
decodes together, one token per sequence per step, until every sequence has stopped. Every
prompt and parameter is checked before any device work, and a refused call leaves the LLM as
it was.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import re
import traceback
from pathlib import Path

import torch

import tilesafe as ts

from . import hub
from .checkpoint import load_weights, weight_bytes, weights_from_tensors
from .config import Qwen3Config
from .decode_step import DecodeSteps
from .errors import request_error
from .kv_cache import KVCache, cache_bytes
from .model import Activations, Qwen3Model
from .parallel import Shards, TensorParallel, check_splits, tp_error
from .prefill_graphs import MAX_GRAPH_TOKENS, PrefillGraphs, buffer_bytes
from .prompts import Prompt, normalize_prompts
from .sampler import Sampler
from .sampling_params import SamplingParams
from .sequence import Sequence

log = logging.getLogger("tilesafe.engine")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# prefill_graphs=None: prefill through bucket graphs wherever decode graphs run (H200, 2048
# tokens: 4B 74.8 -> 30.3 ms, 0.6B 33.1 -> 7.3 ms; benchmarks/probes/prefill_probe.py).
PREFILL_GRAPHS = True


class LLM:
    def __init__(self, model: str, device: str | None = None, dtype: str | torch.dtype | None = None,
                 max_model_len: int | None = None, max_num_seqs: int = 8, use_graph: bool | None = None,
                 progress: bool = True, tensor_parallel_size: int = 1, tp_timeout: float = 600.0,
                 prefill_graphs: bool | None = None):
        self.model_dir = model_dir = hub.model_dir(model)
        cfg = Qwen3Config.from_dir(model_dir)
        self._start(cfg, device, dtype, max_model_len, max_num_seqs, use_graph, _text_side(model_dir),
                    lambda shards: load_weights(model_dir, cfg, self.dtype, self.device, progress, shards),
                    _Parallel(tensor_parallel_size, tp_timeout, {"model": str(model_dir)}), prefill_graphs)

    @classmethod
    def from_random(cls, size: str, seed: int = 0, device: str | None = None, dtype: str | torch.dtype | None = None,
                    max_model_len: int | None = None, max_num_seqs: int = 8, use_graph: bool | None = None,
                    progress: bool = True, tensor_parallel_size: int = 1, tp_timeout: float = 600.0,
                    prefill_graphs: bool | None = None) -> "LLM":
        """A Qwen3 of a real shape (`0.6b` ... `32b`, or `tiny`) with random weights made
        directly on the device (no checkpoint on disk: a 32B one would not fit), Qwen3's
        tokenizer when its files are installed, and Qwen3's generation defaults."""
        from .generation_config import GenerationConfig
        from .random_checkpoint import GENERATION_CONFIG, qwen3_config, random_weights
        raw = qwen3_config(size)
        cfg = Qwen3Config.from_dict(raw, f"the {size} Qwen3 config")
        llm = cls.__new__(cls)
        llm.model_dir = None
        llm._start(cfg, device, dtype, max_model_len, max_num_seqs, use_graph,
                   (_qwen3_tokenizer(), GenerationConfig.from_dict(GENERATION_CONFIG)),
                   lambda shards: weights_from_tensors(random_weights(raw, seed, llm.dtype, llm.device), cfg,
                                                       llm.dtype, llm.device, progress, shards),
                   _Parallel(tensor_parallel_size, tp_timeout, {"random": size, "seed": seed}), prefill_graphs)
        return llm

    @classmethod
    def _serve_rank(cls, spec: dict, group) -> int:
        """A spawned rank > 0 (tp_group starts a process for each): build it, serve rank 0;
        the process's exit status."""
        return cls._rank(spec, group)._follow()

    @classmethod
    def _rank(cls, spec: dict, group) -> "LLM":
        """Rank group.rank (> 0) of a tensor-parallel LLM, as rank 0 described it in `spec`:
        the same settings, this rank's shards, no tokenizer or sampler."""
        from .generation_config import GenerationConfig
        llm = cls.__new__(cls)
        with ts.backend(spec["backend"]):
            if "random" in spec:
                from .random_checkpoint import qwen3_config, random_weights
                raw = qwen3_config(spec["random"])
                cfg = Qwen3Config.from_dict(raw, f"the {spec['random']} Qwen3 config")
                llm.model_dir = None

                def weights(shards):
                    return weights_from_tensors(random_weights(raw, spec["seed"], llm.dtype, llm.device), cfg,
                                                llm.dtype, llm.device, False, shards)
            else:
                llm.model_dir = Path(spec["model"])
                cfg = Qwen3Config.from_dir(llm.model_dir)

                def weights(shards):
                    return load_weights(llm.model_dir, cfg, llm.dtype, llm.device, False, shards)
            llm._start(cfg, spec["device"], spec["dtype"], spec["max_model_len"], spec["max_num_seqs"],
                       spec["use_graph"], (None, GenerationConfig()), weights, _Parallel(group.world, 0, spec, group))
        return llm

    def _start(self, cfg, device, dtype, max_model_len, max_num_seqs, use_graph, text_side, weights,
               parallel=None, prefill_graphs=None) -> None:
        """Check the settings and the memory, then allocate: weights, cache, sampler, steps
        (with tensor parallelism, this rank's share of them, once the other ranks started)."""
        from . import tp_group
        self.config = cfg
        self._tp = None
        world, env = (1, None) if parallel is None else (parallel.group.world, None) if parallel.group else \
            tp_group.world_of(parallel.size)
        if world > 1:
            check_splits(cfg, world)          # before any process starts
        self.device = _device(device)
        self.dtype = _dtype(dtype, cfg, self.device)
        default_len = min(cfg.max_position_embeddings, 4096)       # only for None: 0 is refused, not defaulted
        self.max_model_len = _positive("max_model_len", default_len if max_model_len is None else max_model_len)
        if self.max_model_len > cfg.max_position_embeddings:
            raise request_error(f"LLM: max_model_len {self.max_model_len} exceeds the model's "
                                f"max_position_embeddings {cfg.max_position_embeddings}",
                                help=f"pass max_model_len <= {cfg.max_position_embeddings} (or leave it unset)")
        self.max_num_seqs = _positive("max_num_seqs", max_num_seqs)
        if prefill_graphs is not None and not isinstance(prefill_graphs, bool):
            raise request_error(f"LLM: prefill_graphs must be True, False or None, got {prefill_graphs!r}",
                                help="leave it unset (None): prefill graphs wherever decode graphs run")
        self.backend = _backend(self.device)
        if use_graph is not None and not isinstance(use_graph, bool):
            raise request_error(f"LLM: use_graph must be True, False or None, got {use_graph!r}",
                                help="leave it unset (None): decode steps are CUDA graphs wherever they can be")
        # use_graph=True where no graph can be captured made the LLM, then failed every generate
        backend = self.backend or ts.current_backend()
        if use_graph and not (self.device.startswith("cuda") and backend == "triton"):
            raise request_error(f"LLM: use_graph=True needs a CUDA GPU and the triton backend, got device "
                                f"{self.device!r} on the {backend} backend",
                                help="leave use_graph unset (None): decode steps are CUDA graphs wherever they can be")
        shards = None
        if world > 1:
            self._tp = parallel.group or tp_group.start(world, env, self.device, parallel.worker_spec(self, use_graph),
                                                        parallel.timeout, LLM._serve_rank)
            self.device = self._tp.device
            self._tp.set_rows(self.max_num_seqs)
            shards = Shards.of(cfg, self._tp.rank, world)
        local = cfg if shards is None else shards.local_config(cfg)
        self.tokenizer, self.generation_config = text_side
        self.eos_ids = frozenset(self.generation_config.eos_token_ids) | (
            {self.tokenizer.eos_token_id} if self.tokenizer and self.tokenizer.eos_token_id is not None else set())
        with self.on_device():
            graph = self.device.startswith("cuda") and ts.current_backend() == "triton"
        capture = graph and use_graph is not False
        # prompts of each token bucket through one graph (prefill_graphs.py): not with tensor parallelism
        use_prefill_graphs = (PREFILL_GRAPHS and capture if prefill_graphs is None else prefill_graphs) \
            and self._tp is None
        prefill_tokens = min(self.max_model_len - 1, MAX_GRAPH_TOKENS)
        try:
            self._check_memory(local, prefill_tokens if use_prefill_graphs else 0)
            with self.on_device():
                w = weights(shards)
                cache = KVCache.allocate(local, self.max_num_seqs, self.max_model_len, self.dtype, self.device)
                first = self._tp is None or self._tp.rank == 0
                self.sampler = Sampler(self.max_num_seqs, self.device) if first else None
        except BaseException as e:
            if self._tp is not None:          # the other ranks learn it at the start-up exchange
                self._tp.exchange(f"{type(e).__name__}: {e}")
                self._tp.close(kill=True)
            raise
        if self.device.startswith("cuda"):
            _release_when_dropped(self)
        tp = None if shards is None else TensorParallel(shards)
        self.model = Qwen3Model(local, w, cache, self.sampler, tp)
        self.decode_steps = DecodeSteps(self.model, self.dtype, self.device, graph if use_graph is None else use_graph)
        self.prefill_graphs = None
        if use_prefill_graphs:
            self.prefill_graphs = PrefillGraphs(self.model, self.dtype, self.device, prefill_tokens, capture)
        if self._tp is not None:
            self._started(parallel)

    def _started(self, parallel) -> None:
        """Every rank has its weights (or says why not): refuse on any failure; a torchrun
        rank > 0 then serves rank 0 and ends the process when rank 0 closes."""
        statuses = self._tp.exchange(None)
        failed = [(r, s) for r, s in enumerate(statuses) if s is not None]
        if failed:
            self._tp.close(kill=True)
            raise tp_error("tensor parallelism: " + "; ".join(f"rank {r} failed to start: {s}" for r, s in failed),
                           help="fix the cause (the same settings load on one GPU?) and make a new LLM")
        if self._tp.rank == 0:
            import weakref
            weakref.finalize(self, self._tp.close)       # the workers exit with the LLM (or at exit)
        elif self._tp.torchrun:
            raise SystemExit(self._follow())

    def _follow(self) -> int:
        """A rank > 0: run rank 0's commands until "exit"; the process's exit status."""
        group = self._tp
        try:
            with self.on_device(), torch.inference_mode():
                while True:
                    command = group.recv()
                    kind = command[0]
                    if kind == "prefill":
                        self._prefill_ids(command[1])
                    elif kind == "decode":
                        self.decode_steps.run(*command[1:])
                    elif kind == "weight_bytes":
                        group.exchange(self._weight_bytes())
                    elif kind == "exit":
                        break
        except BaseException:
            traceback.print_exc()
            group.close(kill=True)
            return 1
        group.close()                    # this rank's groups (the default one too, unless torchrun's script made it)
        return 0

    def close(self) -> None:
        """End a tensor-parallel LLM's other ranks and its process group (nothing otherwise)."""
        if self._tp is not None:
            self._tp.close()

    def weight_bytes_per_rank(self) -> list[int]:
        """The bytes of weights each rank holds (one entry without tensor parallelism)."""
        if self._tp is None:
            return [self._weight_bytes()]
        self._tp.send("weight_bytes")
        return self._tp.exchange(self._weight_bytes())

    def _weight_bytes(self) -> int:
        import dataclasses
        w = self.model.w
        every = [w.embed, w.norm, w.lm_head] + [getattr(layer, f.name) for layer in w.layers
                                                for f in dataclasses.fields(layer)]
        tensors = {id(t): t for t in every}                 # a tied LM head is the embedding: once
        return sum(t.numel() * t.element_size() for t in tensors.values())

    # -- public API ------------------------------------------------------------------------

    def get_tokenizer(self):
        return self.tokenizer

    def warm_up(self, tune: bool = False) -> None:
        """Run every prefill token bucket once now, compiling its kernels and (on a GPU)
        capturing its graph, so that no later prompt compiles anything in its prefill (a
        server calls it at start-up). Nothing is written to the KV cache. `tune` times the
        config model's best few configs of each GEMM and attention shape first (on a GPU;
        `tk.first_use_tuning`, cached per GPU on disk). Without prefill graphs
        (`prefill_graphs=False`, tensor parallelism) it does nothing."""
        if self.prefill_graphs is not None:
            with self.on_device(), torch.inference_mode():
                self.prefill_graphs.warm_up(tune=tune)

    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None) -> list:
        """One RequestOutput per prompt, in order. Prompts: a str, {"prompt": str},
        {"prompt_token_ids": [...]}, or a list of them."""
        seqs = self._sequences(prompts, sampling_params)
        for _ in self._run(seqs):
            pass
        return [s.output(str(s.index)) for s in seqs]

    def stream(self, prompt, sampling_params: SamplingParams | None = None):
        """Yield the text of one prompt as it is generated: objects with `.text` (the new
        text), `.token_ids` (the new tokens) and `.finished`; joined, the texts are the
        final output's text."""
        if isinstance(prompt, list) and _is_ids(prompt):
            prompt = {"prompt_token_ids": prompt}
        if not isinstance(prompt, (str, dict)):
            raise request_error("LLM.stream: takes one prompt (a str, {'prompt': str} or {'prompt_token_ids': [...]})",
                                help="call generate() for several prompts")
        seqs = self._sequences(prompt, sampling_params)
        seq = seqs[0]
        sent = 0
        for _ in self._run(seqs):
            yield _Delta(seq.new_text(), seq.tokens[sent:], seq.finished, seq.finish_reason)
            sent = len(seq.tokens)

    def chat(self, messages, sampling_params: SamplingParams | None = None, enable_thinking: bool | None = None):
        """Generate the assistant's reply to a conversation (or a list of conversations),
        rendered with the model's chat template and add_generation_prompt=True."""
        if self.tokenizer is None:
            raise request_error("LLM.chat: the model folder has no tokenizer.json",
                                help="pass prompt token ids to generate() instead")
        many = bool(messages) and isinstance(messages[0], list)
        convs = messages if many else [messages]
        prompts = [{"prompt_token_ids": self.tokenizer.apply_chat_template(c, enable_thinking=enable_thinking)}
                   for c in convs]
        return self.generate(prompts, sampling_params)

    def score(self, prompt_ids: list[int], continuation_ids: list[int], through: str = "prefill"):
        """Teacher-forced: the model's prediction at each token of `continuation_ids` after
        `prompt_ids` (row i from prompt + continuation[:i]), a `scoring.Score`. `through=
        "prefill"`: one prefill pass; `.logits` (T, V) float32 on the host, `.logprobs` of the
        continuation's tokens, `.greedy` / `.greedy_logprobs` each row's argmax. `"decode"`:
        the prompt's prefill, then one decode step per token, as `generate` runs them (the
        captured graph on a GPU); only `.greedy` and `.greedy_logprobs`. Uses cache slot 0."""
        from . import scoring
        prompt, continuation = scoring.check(self, prompt_ids, continuation_ids, through)
        with self.on_device(), torch.inference_mode():
            if through == "prefill":
                return scoring.through_prefill(self, prompt, continuation)
            # the LLM's own steps, handed over: what generate runs, not public calls of the LLM
            return scoring.through_decode(self, prompt, continuation, self._prefill_ids, self._decode)

    # -- one call ------------------------------------------------------------------------------

    def _sequences(self, prompts, sampling_params) -> list[Sequence]:
        """Every request checked and tokenized, before any device work."""
        items: list[Prompt] = normalize_prompts(prompts, self.tokenizer, self.config.vocab_size, self.max_model_len)
        # one per prompt as a list or a tuple (vLLM takes any sequence): a tuple was 'got tuple'
        params = list(sampling_params) if isinstance(sampling_params, (list, tuple)) else [sampling_params] * len(items)
        if len(params) != len(items):
            raise request_error(f"generate: {len(items)} prompts but {len(params)} sampling params",
                                help="pass one SamplingParams, or one per prompt")
        for i, p in enumerate(params):        # a dict or a str here was an AttributeError from resolved()
            if p is not None and not isinstance(p, SamplingParams):
                raise request_error(f"generate: sampling params {i} must be a SamplingParams (or None), got "
                                    f"{type(p).__name__}", help="pass SamplingParams(temperature=..., ...)")
        defaults = self.generation_config.sampling_defaults()
        seqs = []
        for i, (item, p) in enumerate(zip(items, params)):
            p = (p or SamplingParams()).resolved(defaults)
            if p.stop and self.tokenizer is None:
                raise request_error("generate: stop strings need the model's tokenizer (tokenizer.json)",
                                    help="pass stop_token_ids instead, or use a model folder with tokenizer.json")
            seqs.append(Sequence(i, item.text, item.ids, p, self.max_model_len, self.eos_ids,
                                 self._detokenizer(item, p), seed=self.sampler.seed_for(p)))
        return seqs

    def _run(self, seqs: list[Sequence]):
        """Generate every sequence, yielding after each token of each wave."""
        with self.on_device(), torch.inference_mode():
            for w in range(0, len(seqs), self.max_num_seqs):
                yield from self._wave(seqs[w:w + self.max_num_seqs])

    def _wave(self, wave: list[Sequence]):
        self.sampler.set_rows([s.params for s in wave], [s.seed for s in wave])
        self.sampler.set_steps([0] * len(wave))
        self._prefill(wave)
        yield
        sampled = list(range(len(wave)))            # the wave's sequence of each sampler row
        while not all(s.finished for s in wave):
            # Only running sequences take a row (a finished one costs nothing; each batch size
            # is its own graph); row i reads and writes the cache slot of its sequence.
            running = [i for i, s in enumerate(wave) if not s.finished]
            rows = [wave[i] for i in running]
            if running != sampled[:len(running)]:   # the batch shrank: sampler rows follow it
                self.sampler.set_rows([s.params for s in rows], [s.seed for s in rows])
                sampled = running
            if not self.sampler.all_greedy(len(rows)):    # greedy rows draw no random number
                self.sampler.set_steps([len(s.tokens) for s in rows])      # the Philox step of each row
            tokens, logprobs = self._decode([s.tokens[-1] for s in rows], [s.position for s in rows], running)
            for s, t, lp in zip(rows, tokens, logprobs):
                s.append(t, lp)
            yield

    def _prefill(self, wave: list[Sequence]) -> None:
        """The wave's prompts packed into one ragged prefill; each gets its first token."""
        tokens, logprobs = self._prefill_ids([s.prompt_ids for s in wave])
        for s, t, lp in zip(wave, tokens, logprobs):
            s.append(t, lp)

    def _prefill_ids(self, prompts: list[list[int]]) -> tuple[list[int], list[float]]:
        """Prefill these prompts into cache slots 0..; (first tokens, their log-probabilities).
        Tensor-parallel rank 0 first sends the call to the other ranks, which run it too."""
        if self._tp is not None and self._tp.rank == 0:
            self._tp.send("prefill", prompts)
        graphs = self.prefill_graphs
        if graphs is not None and all(graphs.fits(len(p)) for p in prompts):   # each prompt one replay
            firsts = [graphs.run(p, slot=i, row=i) for i, p in enumerate(prompts)]
            return [t for t, _ in firsts], [lp for _, lp in firsts]
        lengths = [len(p) for p in prompts]
        starts = [0, *itertools.accumulate(lengths)]
        a = Activations.allocate(self.model.cfg, starts[-1], len(prompts), self.dtype, self.device)
        shift = self.model.vocab_start                  # a tensor-parallel rank's first vocabulary row
        a.ids.copy_(torch.tensor([t - shift for p in prompts for t in p], dtype=torch.int32))
        a.positions.copy_(torch.cat([torch.arange(n, dtype=torch.int32) for n in lengths]))
        a.last.copy_(torch.tensor(starts[1:], dtype=torch.int32) - 1)
        self._guarded(self.model.prefill, a, starts)
        return a.tokens.tolist(), a.chosen.tolist()

    def _decode(self, ids: list[int], positions: list[int], slots: list[int]):
        """One decode step (`DecodeSteps.run`), sent to the other tensor-parallel ranks first."""
        if self._tp is not None:
            self._tp.send_step(ids, positions, slots)
        return self._guarded(self.decode_steps.run, ids, positions, slots)

    def _guarded(self, step, *args):
        """Run a model call; with tensor parallelism a failed collective (a rank gone) is a
        TensorParallelError naming the rank, and the LLM is closed."""
        if self._tp is None:
            return step(*args)
        try:
            return step(*args)
        except ts.distributed.DistributedError as e:
            raise self._tp.failure(e) from None

    # -- set-up --------------------------------------------------------------------------

    def _detokenizer(self, item: Prompt, p: SamplingParams):
        if self.tokenizer is None:
            return None
        from .detokenize import IncrementalDetokenizer
        return IncrementalDetokenizer(self.tokenizer, item.ids, skip_special_tokens=p.skip_special_tokens)

    def on_device(self):
        """The context this LLM's tilesafe calls run in: on the CPU a CPU backend (the reference
        one, when the current backend is Triton's), else the current backend. The serving
        engine runs its steps in it; so may code that launches tilesafe kernels on the LLM's
        tensors beside it."""
        return ts.backend(self.backend) if self.backend else contextlib.nullcontext()

    def _check_memory(self, cfg: Qwen3Config, prefill_tokens: int = 0) -> None:
        """Refuse, before allocating, weights + cache (of this rank's share `cfg`) + the prefill
        graphs' shared buffers (prompts up to `prefill_tokens`; 0: no prefill graphs) that do
        not fit the GPU's free memory."""
        if not self.device.startswith("cuda"):
            return
        need = memory_needed(cfg, self.dtype, self.max_num_seqs, self.max_model_len, prefill_tokens)
        free, _ = torch.cuda.mem_get_info(torch.device(self.device))
        total = sum(need.values())
        if total > free:
            gib = 2 ** 30
            parts = [f"the weights ({need['weights'] / gib:.2f} GiB)", f"KV cache ({need['cache'] / gib:.2f} GiB)"]
            if prefill_tokens:
                parts.append(f"prefill buffers ({need['prefill'] / gib:.2f} GiB, prompts up to {prefill_tokens} "
                             "tokens)")
            raise request_error(f"LLM: {', '.join(parts[:-1])} and {parts[-1]} need {total / gib:.2f} GiB, but "
                                f"{self.device} has {free / gib:.2f} GiB free",
                                help="lower max_model_len or max_num_seqs, or use a smaller model"
                                     + (" (prefill_graphs=False drops the prefill buffers)" if prefill_tokens else ""))


def memory_needed(cfg: Qwen3Config, dtype: torch.dtype, max_num_seqs: int, max_model_len: int,
                  prefill_tokens: int = 0) -> dict[str, int]:
    """Device bytes an LLM holds from its start: weights, KV cache, and the prefill graphs'
    shared buffers once a prompt of `prefill_tokens` ran (0: no prefill graphs)."""
    size = torch.empty((), dtype=dtype).element_size()
    return {"weights": weight_bytes(cfg, size), "cache": cache_bytes(cfg, max_num_seqs, max_model_len, size),
            "prefill": buffer_bytes(cfg, prefill_tokens, dtype) if prefill_tokens else 0}


class _Parallel:
    """How an LLM is split: the size asked for, the collectives' timeout, what a worker needs
    to build the same model (`spec`), and, on a worker, its group."""

    def __init__(self, size: int, timeout: float, spec: dict, group=None):
        self.size, self.timeout, self.spec, self.group = size, timeout, spec, group

    def worker_spec(self, llm: "LLM", use_graph: bool | None) -> dict:
        """Everything rank 0 resolved, so every rank builds the same model."""
        dtype = next(name for name, d in DTYPES.items() if d == llm.dtype)
        return {**self.spec, "device": llm.device, "dtype": dtype, "max_model_len": llm.max_model_len,
                "max_num_seqs": llm.max_num_seqs, "use_graph": use_graph,
                "backend": llm.backend or ts.current_backend()}


class _Delta:
    __slots__ = ("text", "token_ids", "finished", "finish_reason")

    def __init__(self, text, token_ids, finished, finish_reason):
        self.text, self.token_ids, self.finished, self.finish_reason = text, token_ids, finished, finish_reason


def _is_ids(x) -> bool:
    return bool(x) and all(isinstance(i, int) for i in x)


def _release_when_dropped(llm: LLM) -> None:
    """When `llm` (on a GPU) is dropped, wait for the device and let go of the memory its last
    launches and replays still hold (`runtime.future.synchronize_and_release`): without it the
    weights and cache stayed allocated until some 32 later launches (round 0's 32B benchmark
    built its second engine beside the first one's 68 GB). Not inside another graph's capture,
    where nothing may wait: the runtime's own sweeps release it later."""
    import weakref
    index = torch.device(llm.device).index
    index = torch.cuda.current_device() if index is None else index
    llm._release = weakref.finalize(llm, _release_device, index)
    llm._release.atexit = False


def _release_device(index: int) -> None:
    from ..runtime.future import synchronize_and_release
    from ..settings import graph_var
    # Not while this thread captures a graph (ts.graph or a plain torch one): waiting there breaks it.
    if graph_var.get() is None and not torch.cuda.is_current_stream_capturing():
        synchronize_and_release(index)


def _dtype(dtype, cfg: Qwen3Config, device: str) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if dtype is None:
        dtype = "float32" if device == "cpu" else "auto"
    if dtype == "auto":
        dtype = cfg.dtype if cfg.dtype in DTYPES else "bfloat16"
    if dtype not in DTYPES:
        raise request_error(f"LLM: dtype must be one of {', '.join(DTYPES)} or 'auto', got {dtype!r}",
                            help="e.g. dtype='bfloat16'; 'auto' takes the checkpoint's")
    return DTYPES[dtype]


def _backend(device: str) -> str | None:
    """The CPU runs every kernel on a CPU backend (the reference one unless the caller chose
    Triton's interpreter); a GPU keeps the current (Triton) backend."""
    if device == "cpu" and ts.current_backend() == "triton":
        return "reference"
    return None


def _device(device) -> str:
    """"cpu", "cuda" or "cuda:N" of a GPU this machine has (a torch.device as its name); unset:
    the GPU when there is one. Anything else was torch's error from deep inside the load
    ("cuda" without a GPU an AssertionError, "cpu:0" a safetensors error called a corrupt file)."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    name = str(device) if isinstance(device, torch.device) else device
    if not isinstance(name, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", name):
        raise request_error(f"LLM: device must be 'cpu' or 'cuda[:N]', got {device!r}",
                            help="e.g. device='cuda:0'; leave it unset for the GPU when there is one, else the CPU")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if name != "cpu" and int(name.partition(":")[2] or 0) >= gpus:
        raise request_error(f"LLM: device {name!r}, but this machine has {gpus} CUDA device{'s' * (gpus != 1)}",
                            help="pass device='cpu'" + (f", or cuda:0 .. cuda:{gpus - 1}" if gpus else ""))
    return name


def _positive(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise request_error(f"LLM: {name} must be a positive int, got {value!r}",
                            help=f"pass {name}=<int >= 1>, or leave it unset for the default")
    return value


def _text_side(model_dir: Path):
    """The tokenizer (None without tokenizer.json: prompts are then token ids) and the
    generation defaults."""
    from .generation_config import GenerationConfig
    tokenizer = None
    if (model_dir / "tokenizer.json").is_file():
        from .tokenizer import Tokenizer
        tokenizer = Tokenizer.from_dir(model_dir)
    defaults = GenerationConfig.from_dir(model_dir)
    ignored = defaults.ignored_defaults()
    if ignored:       # a request cannot set them (SamplingParams refuses them): only the file can
        log.warning("%s sets %s, which the sampler does not implement: not applied (sampling uses temperature, "
                    "top_k and top_p)", model_dir / "generation_config.json",
                    ", ".join(f"{k}={v!r}" for k, v in ignored.items()))
    return tokenizer, defaults


def _qwen3_tokenizer():
    """Qwen3's tokenizer from the installed data package, or None when it is not installed."""
    from .qwen3_files import tokenizer_dir
    from .tokenizer import Tokenizer
    try:
        return Tokenizer.from_dir(tokenizer_dir())
    except ts.TileSafeError:
        return None
