"""A tokenizer a test or the demo makes, for SGLang's benchmark to make prompts with (no hub, no
model). Standard library only: it runs with a host's python3 before the ml-env exists.

    python3 tests/support/make_tokenizer.py OUT_DIR [WORDS]

OUT_DIR gets tokenizer.json (the `tokenizers` library's format: a WordLevel model over `[UNK]`
and the words w1..wN, split on whitespace, decoded with spaces: encode(decode(ids)) == ids, so
the benchmark's retokenized counts equal its lengths; what `tokenizers` itself saves for that
model, tests/integration/test_bench_real_sglang.py compares) and tokenizer_config.json (a
PreTrainedTokenizerFast with a trivial chat template), which transformers' AutoTokenizer loads
from the directory, as SGLang's benchmark does (sglang/benchmark/utils.py, get_tokenizer).
"""

import json
import os
import sys


def tokenizer_json(words=2000):
    """tokenizer.json of the WordLevel tokenizer over [UNK], w1..w<words>."""
    vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, words + 1)}}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    }


def build(out_dir, words=2000):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as handle:
        json.dump(tokenizer_json(words), handle)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
              "model_max_length": 1_000_000, "clean_up_tokenization_spaces": False,
              "chat_template": "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} "
                               "{% endfor %}{% if add_generation_prompt %}assistant {% endif %}"}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2)


if __name__ == "__main__":
    build(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2000)
