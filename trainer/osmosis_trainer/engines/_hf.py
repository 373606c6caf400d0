"""HFEngine: transformers generation in process, batching concurrent requests.

Requests are queued to one worker thread. The worker takes every request waiting (up to
``max_batch_size``, after a short ``batch_wait_ms`` window), renders and left-pads the prompts,
and runs one KV-cached decoding loop for the batch. Requests arriving while it decodes join
the running batch between two steps (continuous batching), and each request is answered as
soon as its row finishes. Each row keeps the ids it sampled and their processed logprobs (see
``_sampling``). Adapter loads go through the same queue: a load waits for the running batch to
drain and nothing queued after it joins that batch, so no request is ever served by a
half-loaded adapter, and every request after a load sees the new one.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import copy
import logging
import queue
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from osmosis_ai.serving import (
    ContextLengthError,
    EngineError,
    GenerationRequest,
    GenerationResult,
)
from osmosis_trainer.engines._chat_template import ChatRenderer
from osmosis_trainer.engines._hf_adapter import (
    AdapterLoadFailed,
    AdapterState,
    apply_adapter,
    read_adapter,
)
from osmosis_trainer.engines._hf_batch import PromptHead, Row, generate_batch
from osmosis_trainer.engines._hf_merge import MergedLoRA, unmergeable_reason
from osmosis_trainer.engines._hf_turns import TurnCache
from osmosis_trainer.engines._response import ResponseParser
from osmosis_trainer.models import LoadedModel, load_model, training_dtype

if TYPE_CHECKING:
    import torch

    from osmosis_trainer._protocols import CausalLM, ChatTokenizer
    from osmosis_trainer.engines._hf_adapter import Served

__all__ = ["HFEngine"]

logger = logging.getLogger("osmosis")

M = TypeVar("M", bound="torch.nn.Module")


@dataclass
class _Job:
    req: GenerationRequest
    future: concurrent.futures.Future[GenerationResult]
    queued_at: float = field(default_factory=time.perf_counter)


@dataclass
class _Load:
    state: AdapterState
    version: int
    future: concurrent.futures.Future[None]


@dataclass
class _Release:
    """Queued by ``release_idle_memory``: unmerge between two batches."""

    future: concurrent.futures.Future[None]


class _Stop:
    """Queued by ``close``: the worker exits after the running batch."""


_STOP = _Stop()


class _Exiting(Exception):
    """Raised in the worker between two decoding steps once the interpreter is exiting."""


_EXIT_JOIN_S = 30.0
"""How long exit waits for a worker to leave torch (a batch that cannot stop early)."""

_RUNNING: weakref.WeakSet[HFEngine] = weakref.WeakSet()
"""Engines whose worker thread runs: stopped at interpreter exit if never closed."""


@atexit.register
def _stop_workers_at_exit() -> None:
    # A daemon thread still inside torch when Python tears down aborts the whole process
    # ("terminate called without an active exception", exit 134): a script that ends, or
    # fails, while an unclosed engine generates. atexit runs before that teardown.
    for engine in list(_RUNNING):
        engine._stop_at_exit()


def _exit_error() -> EngineError:
    return EngineError("the process is exiting", status_code=503, code="engine_closed")


def _resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class HFEngine:
    """Generate with a transformers causal LM (CPU or GPU), batching concurrent requests.

    Args:
        loaded_or_model_path: a :class:`~osmosis_trainer.models.LoadedModel`, ``"embedded"``
            or a local model folder.
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``, ...
        max_batch_size: most requests decoded together.
        max_new_tokens: default completion budget when a request sets no ``max_tokens``.
        batch_wait_ms: how long the worker waits for more requests before starting a batch.
        copy_model: when given a ``LoadedModel``, generate with a private copy, so a trainer
            wrapping or updating the same model object never changes what is served between
            adapter versions. Pass ``False`` to share it (saves memory; you own the consequences).
        share_weights: with ``copy_model``, copy the modules but share the weight tensors that
            already sit on ``device`` (a trainer's frozen LoRA base): the copy costs no weight
            memory, and a merged adapter gets buffers of its own (``_hf_merge`` never writes
            into the originals). The owner must never change those tensors in place.
        dtype: model dtype when loading from a path (``"auto"``: what ``[training] dtype =
            "auto"`` picks on ``device``: bf16 on CUDA and on CPUs with native bf16, else fp32).
        merge_adapters: serve plain LoRA adapters merged into the weights (decoding at the
            base model's speed; see ``_hf_merge``). Other adapters, and all with ``False``, are
            served through peft's unmerged layers.
        share_prompt_head: prefill the prompt head that requests share (an agent's system
            prompt and tools) once per adapter version and reuse its keys/values (see
            ``_hf_batch.PromptHead``; BENCHMARKS.md, ``prompt_head``, has the gain).
        keep_turns: keep the keys/values of each rollout sample's last call, so that its next
            call (the conversation plus a tool result or a follow-up) prefills only what is new
            (see ``_hf_turns``; BENCHMARKS.md, ``turn_cache``, has the gain). At most
            ``2 * max_batch_size`` conversations are kept; the gateway drops a rollout's when
            it collects the rollout, an adapter load drops them all.
    """

    provides_token_ids = True

    def __init__(
        self,
        loaded_or_model_path: LoadedModel | str | Path,
        *,
        device: str = "auto",
        max_batch_size: int = 32,
        max_new_tokens: int = 512,
        batch_wait_ms: float = 10.0,
        copy_model: bool = True,
        dtype: str = "auto",
        seed: int | None = None,
        share_weights: bool = False,
        merge_adapters: bool = True,
        share_prompt_head: bool = True,
        keep_turns: bool = True,
    ) -> None:
        import torch

        self.device = _resolve_device(device)
        given = isinstance(loaded_or_model_path, LoadedModel)
        if isinstance(loaded_or_model_path, LoadedModel):
            loaded = loaded_or_model_path
            model = (
                _module_copy(loaded.model, self.device, share_weights)
                if copy_model
                else loaded.model
            )
        else:
            # "auto": the precision training picks on this device, so a checkpoint is served
            # as its rollouts were sampled (bf16 where the CPU multiplies it natively).
            loaded = load_model(
                str(loaded_or_model_path), device=self.device,
                dtype=training_dtype(dtype, self.device),
            )
            model = loaded.model
        # transformers' own to / eval wrappers are untyped; the Module view types the same calls.
        module: torch.nn.Module = model
        if given:
            module.to(self.device)
        module.eval()
        self.name = "hf"
        self.model_name = loaded.name
        self.tokenizer: ChatTokenizer = loaded.tokenizer
        self.renderer = ChatRenderer(self.tokenizer)
        self.response_parser = ResponseParser(self.tokenizer)
        self.max_batch_size = max_batch_size
        self.max_new_tokens = max_new_tokens
        self.batch_wait_s = batch_wait_ms / 1000.0
        self._model: Served = model
        self._adapter: AdapterState | None = None
        # Merging writes new weights into the modules: never into a model shared with its owner.
        self.merge_adapters = merge_adapters and (copy_model or not given)
        self._merged = MergedLoRA()
        self._remerge = False
        """The merged copy was released (:meth:`release_idle_memory`): rebuild it before the
        next batch."""
        self._head = PromptHead() if share_prompt_head else None
        self._turns = TurnCache(2 * max_batch_size) if keep_turns else None
        self._version = 0
        self._generator = torch.Generator(self.device)
        self._generator.manual_seed(seed if seed is not None else torch.seed() % (2**63))
        self._eos_ids = _eos_ids(model, self.tokenizer)
        self._context = int(getattr(model.config, "max_position_embeddings", 0) or 0) or None
        self._queue: queue.Queue[_Job | _Load | _Release | _Stop] = queue.Queue()
        self._pending: _Load | _Release | _Stop | None = None
        """An item taken from the queue that must wait for the running batch."""
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._exiting = False
        self.stats: dict[str, float] = {"batches": 0, "requests": 0, "tokens": 0}

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def model(self) -> Served:
        """The model currently served: the base model (with a merged adapter's weights) or a
        ``PeftModel`` when the adapter is served unmerged."""
        return self._model

    # -- public API ------------------------------------------------------------------------

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        future: concurrent.futures.Future[GenerationResult] = concurrent.futures.Future()
        self._submit(_Job(req, future))
        return await asyncio.wrap_future(future)

    async def load_adapter(self, path: str, version: int) -> None:
        """Serve the PEFT adapter in folder ``path`` as ``version``, between two batches.

        The first load wraps the engine's own model with peft; later loads with the same
        adapter config copy the new weights into the existing adapter in place.
        """
        state = await asyncio.to_thread(read_adapter, path)
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._submit(_Load(state, version, future))
        await asyncio.wrap_future(future)

    async def release_idle_memory(self) -> None:
        """Free the merged copy of the adapted layers (all-linear LoRA on SmolLM2-135M: ~425
        MB in fp32) until the next batch or adapter load, which merge again; the trainer calls
        it before an update that no rollout overlaps (BENCHMARKS.md, ``trainer_real``).
        Between two batches, like a load; a no-op when no adapter is merged."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._submit(_Release(future))
        await asyncio.wrap_future(future)

    def forget_rollout(self, rollout_id: str) -> None:
        """Drop what the engine kept of ``rollout_id``'s conversations (it has ended)."""
        if self._turns is not None:
            self._turns.forget(rollout_id)

    async def close(self) -> None:
        worker = self._refuse_new_work()
        if worker is not None:
            await asyncio.to_thread(worker.join)
        _RUNNING.discard(self)

    def _refuse_new_work(self) -> threading.Thread | None:
        """Close the queue to new requests; the worker, if any, ends after what is queued."""
        with self._lock:
            self._closed = True
            worker = self._worker
        if worker is not None:
            self._queue.put(_STOP)
        return worker

    def _stop_at_exit(self) -> None:
        """End the worker now: the running batch stops at its next step and every request
        still queued fails (nobody is left to read them)."""
        self._exiting = True
        worker = self._refuse_new_work()
        if worker is not None:
            worker.join(_EXIT_JOIN_S)

    # -- worker ----------------------------------------------------------------------------

    def _submit(self, item: _Job | _Load | _Release) -> None:
        with self._lock:
            if self._closed:
                raise EngineError("the HF engine is closed", status_code=503, code="engine_closed")
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._run, name="osmosis-hf-engine", daemon=True
                )
                self._worker.start()
                _RUNNING.add(self)
        self._queue.put(item)

    def _run(self) -> None:
        import torch

        while True:
            item = self._pending if self._pending is not None else self._queue.get()
            self._pending = None
            if isinstance(item, _Stop):
                return
            if self._exiting:
                if not item.future.done():
                    item.future.set_exception(_exit_error())
                continue
            if isinstance(item, _Load):
                self._do_load(item)
                continue
            if isinstance(item, _Release):
                self._do_release(item)
                continue
            batch = [item]
            deadline = time.monotonic() + self.batch_wait_s
            while len(batch) < self.max_batch_size:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if not isinstance(nxt, _Job):
                    self._pending = nxt  # a load, release or shutdown: after this batch
                    break
                batch.append(nxt)
            with torch.inference_mode():
                self._do_batch(batch)

    def _do_load(self, item: _Load) -> None:
        if not item.future.set_running_or_notify_cancel():
            return
        # Their keys/values belong to the weights served until now.
        if self._head is not None:
            self._head.clear()
        if self._turns is not None:
            self._turns.clear()
        try:
            self._serve(item.state)
        except Exception as exc:
            item.future.set_exception(
                EngineError(f"could not load adapter {item.state.path}: {exc}", status_code=503)
            )
            return
        self._adapter = item.state
        self._version = item.version
        self._remerge = False
        item.future.set_result(None)

    def _do_release(self, item: _Release) -> None:
        if not item.future.set_running_or_notify_cancel():
            return
        if self._merged.active:
            # The re-merge computes the same weights from the same originals and adapter, so
            # the prompt-head and turn caches stay valid.
            self._merged.restore(self._model)
            self._remerge = True
        item.future.set_result(None)

    def _serve(self, state: AdapterState) -> None:
        """Serve ``state``, merged into the weights when possible; on error, the previous
        adapter stays served."""
        from peft import PeftModel

        if not isinstance(self._model, PeftModel) and self.merge_adapters:
            why = unmergeable_reason(self._model, state)
            if why is None:
                self._merged.apply(self._model, state)
                return
            logger.info("serving adapter %s unmerged (peft layers): %s", state.path, why)
        was_merged = self._merged.active
        self._merged.restore(self._model)
        try:
            self._model = apply_adapter(self._model, self._adapter, state)
        except AdapterLoadFailed as exc:
            self._model = exc.model  # the previous peft adapter (or the bare base), restored
            if was_merged and self._adapter is not None:
                self._merged.apply(self._model, self._adapter)
            raise

    def _admit(self, active: int) -> list[Row[_Job]]:
        """Requests that arrived while a batch decodes, to join it (continuous batching).

        Stops at an adapter load or shutdown in the queue: what comes after a load must be
        served by the new adapter, so the running batch drains first.
        """
        if self._exiting:
            raise _Exiting
        rows: list[Row[_Job]] = []
        while self._pending is None and active + len(rows) < self.max_batch_size:
            try:
                nxt = self._queue.get_nowait()
            except queue.Empty:
                break
            if not isinstance(nxt, _Job):
                self._pending = nxt
                break
            row = self._start(nxt)
            if row is not None:
                rows.append(row)
        return rows

    def _start(self, job: _Job) -> Row[_Job] | None:
        """The job's decoding state, or None when it was cancelled or its prompt is invalid."""
        if not job.future.set_running_or_notify_cancel():
            return None  # the caller went away
        try:
            return self._make_row(job)
        except Exception as exc:
            job.future.set_exception(exc)
            return None

    def _finish(self, row: Row[_Job]) -> None:
        """Resolve a finished row's request at once (the rest of the batch keeps decoding)."""
        if row.payload.future.done():
            return
        try:
            result = row.result(
                self.tokenizer, self._served_name(), self._version, self.response_parser
            )
        except Exception as exc:  # keep the worker alive; fail only this request
            row.payload.future.set_exception(
                EngineError(f"could not decode the generation: {exc!r}", status_code=502)
            )
            return
        self.stats["requests"] += 1
        self.stats["tokens"] += len(row.out_ids)
        row.payload.future.set_result(result)

    def _do_batch(self, batch: list[_Job]) -> None:
        import torch

        rows = [row for job in batch if (row := self._start(job)) is not None]
        if not rows:
            return
        started: list[Row[_Job]] = list(rows)
        self.stats["batches"] += 1

        def admit(active: int) -> list[Row[_Job]]:
            joined = self._admit(active)
            started.extend(joined)
            return joined

        try:
            if self._remerge and self._adapter is not None:
                # Outside inference mode, as at a load: a later load writes into these weights.
                with torch.inference_mode(False):
                    self._merged.apply(self._model, self._adapter)
                self._remerge = False
            generate_batch(
                self._model,
                rows,
                pad_id=self._pad_id(),
                eos_ids=self._eos_ids,
                shared_generator=self._generator,
                tokenizer=self.tokenizer,
                admit=admit,
                on_done=self._finish,
                head=self._head,
                turns=self._turns,
            )
        except Exception as exc:
            if isinstance(exc, _Exiting):
                err = _exit_error()
            else:
                logger.exception("HF engine batch of %d failed", len(started))
                err = EngineError(f"generation failed: {exc!r}", status_code=503)
            for row in started:
                if not row.payload.future.done():
                    row.payload.future.set_exception(err)
            return

    @property
    def context_window(self) -> int | None:
        """The model's context window in tokens (``max_position_embeddings``; ``None`` when the
        config does not say). The policy gateway caps a request's ``max_tokens`` at it."""
        return self._context

    def _make_row(self, job: _Job) -> Row[_Job]:
        req = job.req
        tools = None if req.tool_choice == "none" else req.tools
        prompt = self.renderer.encode(req.messages, tools)
        budget = req.max_tokens or self.max_new_tokens
        if self._context is not None:
            room = self._context - len(prompt)
            if room < 1:
                raise ContextLengthError(
                    f"the prompt has {len(prompt)} tokens; {self.model_name} has a context "
                    f"window of {self._context}. Shorten the conversation."
                )
            budget = min(budget, room)
        return Row(
            payload=job,
            prompt_ids=prompt,
            max_new=budget,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
            stop=list(req.stop or []),
            parse_tools=bool(tools),
            device=self.device,
            key=(req.rollout_id, req.sample_id) if req.rollout_id and req.sample_id else None,
        )

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self._eos_ids[0])

    def _served_name(self) -> str:
        return (
            self.model_name if self._version == 0 else f"{self.model_name}+policy-v{self._version}"
        )


def _module_copy(model: M, device: str, share_weights: bool) -> M:
    """A deep copy of ``model``; with ``share_weights`` its parameters already on ``device``
    stay the owner's tensors (``.to(device)`` then leaves them where they are)."""
    import torch

    if not share_weights:
        return copy.deepcopy(model)
    target = torch.device(device)
    memo: dict[int, object] = {
        id(p): p
        for p in model.parameters()
        if p.device.type == target.type and (target.index is None or p.device == target)
    }
    return copy.deepcopy(model, memo)


def _eos_ids(model: CausalLM, tokenizer: ChatTokenizer) -> list[int]:
    ids: list[int] = []
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(eos, int):
            ids.append(eos)
        elif isinstance(eos, list | tuple):
            ids.extend(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    if not ids:
        raise EngineError("the model defines no EOS token", status_code=503)
    return sorted(set(ids))
