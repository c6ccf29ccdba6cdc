"""Write a tiny Qwen2-style checkpoint directory (no weights): config.json, generation_config.json
and a word-level tokenizer (tokenizer.json in the `tokenizers` format, tokenizer_config.json).
Standard library only: run with the host's python3 before the ml-env exists."""

import json
import os
import sys

WORDS = ("the capital of france is paris hello world write a long story about lighthouse "
         "keeper who finds map").split()
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def main(directory):
    os.makedirs(directory, exist_ok=True)
    vocab = {word: i for i, word in enumerate(SPECIAL + WORDS)}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": vocab[w], "content": w, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True} for w in SPECIAL],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<|endoftext|>"},
    }
    files = {
        "tokenizer.json": tokenizer,
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>", "model_max_length": 2048,
            "clean_up_tokenization_spaces": False},
        "config.json": {
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "vocab_size": 64, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "hidden_act": "silu", "tie_word_embeddings": True, "torch_dtype": "bfloat16",
            "bos_token_id": 0, "eos_token_id": 2, "use_sliding_window": False,
            "max_window_layers": 2, "attention_dropout": 0.0, "initializer_range": 0.02},
        "generation_config.json": {"bos_token_id": 0, "eos_token_id": 2},
    }
    for name, content in files.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as out:
            json.dump(content, out, indent=1)
            out.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
