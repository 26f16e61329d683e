"""A small local model directory for the rehearsal: a byte-level BPE tokenizer trained here in about a second,
a chat template and a config.json. The mocker and the frontend read it instead of Kimi K3's files, which never
come from a hub here; token counts in a rehearsal are this tokenizer's, not Kimi K3's.

Runs in the rehearsal venv (it needs the `tokenizers` library): python rehearse_fixture.py DIR MAX_MODEL_LEN
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

# dynamo.mocker emits random token ids in [1000, 2000) (lib/llm/src/mocker/engine.rs, generate_random_token):
# the vocabulary must hold them as ordinary, printable tokens or every completion decodes to empty text.
VOCAB_SIZE = 4096
SPECIAL = ["<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"]
SYLLABLES = [
    "ka",
    "mi",
    "k3",
    "ro",
    "ut",
    "er",
    "ser",
    "ve",
    "tok",
    "en",
    "cache",
    "pre",
    "fill",
    "de",
    "code",
    "agent",
    "tool",
    "call",
    "json",
    "error",
    "line",
    "def",
    "return",
    "self",
    "data",
    "path",
    "node",
    "gpu",
    "rack",
    "block",
    "the",
    "and",
    "file",
    "test",
    "run",
    "build",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for part in m['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}"
    "{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def corpus(seed: int = 3) -> list[str]:
    rng = random.Random(seed)  # deterministic: the same fixture on every machine
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(30000)]
    words += ["You are the planning agent of a build system.", "def main():", "return 0", "Traceback", '{"ok": 1}']
    return [" ".join(words[i : i + 50]) for i in range(0, len(words), 50)]


def build(out: Path, max_model_len: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(), trainer)
    if tok.get_vocab_size() < 2000:
        raise SystemExit(f"fixture tokenizer has {tok.get_vocab_size()} tokens; the mocker needs >= 2000")
    tok.save(str(out / "tokenizer.json"))
    eos, bos = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    files = {
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<|endoftext|>",
            "eos_token": "<|im_end|>",
            "unk_token": "<unk>",
            "model_max_length": max_model_len,
            "chat_template": CHAT_TEMPLATE,
        },
        "config.json": {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": tok.get_vocab_size(),
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "intermediate_size": 128,
            "max_position_embeddings": max_model_len,
            "bos_token_id": bos,
            "eos_token_id": eos,
            "torch_dtype": "bfloat16",
        },
        "generation_config.json": {"bos_token_id": bos, "eos_token_id": eos},
        "README.md": "Rehearsal fixture built by kimi_k3/rehearsal/fixture.py: not Kimi K3's tokenizer.\n",
    }
    for name, content in files.items():
        (out / name).write_text(content if isinstance(content, str) else json.dumps(content, indent=1, sort_keys=True))


if __name__ == "__main__":
    build(Path(sys.argv[1]), int(sys.argv[2]))
