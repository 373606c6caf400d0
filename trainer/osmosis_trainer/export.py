"""Merge a trained LoRA checkpoint into its base model: ``osmosis model export --merge``.

Run as ``python -m osmosis_trainer.export --base MODEL --adapter DIR --out DIR``. The result is
a plain transformers model folder (weights as safetensors, config, tokenizer) that
``AutoModelForCausalLM.from_pretrained`` loads without peft, and vLLM serves as is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["main", "merge_adapter"]


def merge_adapter(base: str, adapter: Path, out: Path, *, dtype: str = "auto") -> Path:
    """Load ``base`` (``embedded``, a folder), apply the PEFT ``adapter``, fold the LoRA
    weights into the base weights and save the plain model and tokenizer into ``out``."""
    from peft import PeftModel

    from osmosis_trainer.models import load_model

    loaded = load_model(base, device="cpu", dtype="float32" if dtype == "auto" else dtype)
    model = PeftModel.from_pretrained(loaded.model, str(adapter)).merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    loaded.tokenizer.save_pretrained(str(out))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m osmosis_trainer.export", description=__doc__)
    p.add_argument("--base", required=True, help="Base model: embedded, a folder or a Hub id.")
    p.add_argument("--adapter", required=True, type=Path, help="The PEFT adapter folder.")
    p.add_argument("--out", required=True, type=Path, help="Where to write the merged model.")
    p.add_argument("--dtype", default="auto", help="auto (float32), float16 or bfloat16.")
    args = p.parse_args(argv)
    if not (args.adapter / "adapter_config.json").is_file():
        print(f"error: {args.adapter} is not a PEFT adapter folder", file=sys.stderr)
        return 1
    try:
        merge_adapter(args.base, args.adapter, args.out, dtype=args.dtype)
    except (OSError, ValueError) as exc:
        print(f"error: merging {args.adapter} into {args.base}: {exc}", file=sys.stderr)
        return 1
    print(f"merged model written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
