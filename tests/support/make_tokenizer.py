"""A tokenizer a test makes, for SGLang's benchmark to make prompts with (no hub, no model).

    <venv with tokenizers>/bin/python tests/support/make_tokenizer.py OUT_DIR [WORDS]

OUT_DIR gets tokenizer.json (the `tokenizers` library: a WordLevel model over `[UNK]` and the
words w1..wN, split on whitespace, decoded with spaces: encode(decode(ids)) == ids, so the
benchmark's retokenized counts equal its lengths) and tokenizer_config.json (a
PreTrainedTokenizerFast with a trivial chat template), which transformers' AutoTokenizer loads
from the directory, as SGLang's benchmark does (sglang/benchmark/utils.py, get_tokenizer).
"""

import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers


def build(out_dir, words=2000):
    os.makedirs(out_dir, exist_ok=True)
    vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, words + 1)}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer.add_special_tokens(["[UNK]"])
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
              "model_max_length": 1_000_000, "clean_up_tokenization_spaces": False,
              "chat_template": "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} "
                               "{% endfor %}{% if add_generation_prompt %}assistant {% endif %}"}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2)


if __name__ == "__main__":
    build(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2000)
