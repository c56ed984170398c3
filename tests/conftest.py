import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


def tiny_qwen2(vocab_size=64, hidden=16, layers=2, dtype=torch.float32, seed=0):
    """A tiny random Qwen2ForCausalLM built from a config (no download)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=256, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(dtype)
    model.eval()  # no dropout: gradients must be deterministic
    return model


@pytest.fixture
def tiny_model_factory():
    return tiny_qwen2


CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_byte_tokenizer():
    """A byte-level BPE tokenizer with no merges (one token per byte, like Qwen's alphabet) and Qwen's chat tokens,
    built in memory: no download. It round-trips any text, and AutoTokenizer reloads it as a Qwen2Tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=["<|im_start|>"])
    tok.chat_template = CHAT_TEMPLATE
    return tok


def write_tiny_model(path, seed=0, hidden=32, layers=2, favour=None):
    """Save a tiny random Qwen2 + the byte-level tokenizer as an ordinary transformers folder.

    favour: a string whose characters (plus the end-of-sequence token) the model should mostly emit. A random model
    otherwise never earns a reward, every advantage is 0 and no gradient flows. The bias is built into the weights:
    every input embedding gets a large constant in dimension 0, which survives to the final norm as a positive
    feature, and the head reads it with +1 for favoured tokens and -1 for the rest."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM
    tok = build_byte_tokenizer()
    config = Qwen2Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=1024, tie_word_embeddings=True,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    if favour:
        config.tie_word_embeddings = False
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    if favour:
        with torch.no_grad():
            model.get_input_embeddings().weight[:, 0] = 4.0
            head = model.get_output_embeddings().weight
            head[:, 0] = -0.6
            for token in tok(favour, add_special_tokens=False)["input_ids"]:
                head[token, 0] = 0.6
            head[tok.eos_token_id, 0] = 0.45
    model.generation_config = GenerationConfig(eos_token_id=[tok.eos_token_id, tok.pad_token_id],
                                               pad_token_id=tok.pad_token_id)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture(scope="session")
def digit_model_dir(tmp_path_factory):
    """A tiny model that mostly answers "1", "2" or stops: on `digit_data` its groups get mixed rewards."""
    return write_tiny_model(tmp_path_factory.mktemp("digit-qwen2"), favour="12 ")


@pytest.fixture(scope="session")
def digit_data(tmp_path_factory):
    import json
    path = tmp_path_factory.mktemp("data") / "digits.jsonl"
    path.write_text("".join(json.dumps({"question": f"Say {1 + i % 2}", "answer": str(1 + i % 2)}) + "\n"
                            for i in range(16)))
    return str(path)
