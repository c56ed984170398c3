"""A tiny, offline model and task for quick checks (the tests use it; the notebooks use
SmolLM2-135M; training never does).

Nothing here downloads anything: the tokenizer is byte-level (one token per byte, Qwen's alphabet,
plus Qwen's chat tokens) and built in memory, the model is a random Qwen2ForCausalLM a few thousand
parameters big.

A random model never earns a reward, so every advantage would be 0 and nothing would be learned or
selected. `tiny_model(favour="12 ")` biases the weights toward a few characters (and the
end-of-sequence token), so on `digit_problems()` ("Say 1" / "Say 2") a group of answers gets a mix
of right and wrong: a real, if toy, RLVR batch.
"""
import json
import os

import torch

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def byte_tokenizer():
    """A byte-level BPE tokenizer with no merges, Qwen's chat tokens and a chat template.
    Round-trips any text and reloads (save_pretrained / AutoTokenizer) as an ordinary transformers
    tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>",
                                  additional_special_tokens=["<|im_start|>"])
    tok.chat_template = CHAT_TEMPLATE
    return tok


def tiny_model(tokenizer=None, *, favour=None, hidden=32, layers=2, seed=0, strength=0.6,
               context=0.0, head_noise=0.0, dtype=torch.float32):
    """(model, tokenizer): a random Qwen2ForCausalLM over the byte vocabulary, in eval mode.

    favour: characters the model should mostly emit (plus end-of-sequence). How: every input
    embedding gets a large constant in dimension 0, which survives the layers to the final norm as a
    positive feature; the output head reads that feature with +strength for favoured tokens and
    -strength for the rest, so their logits differ by a margin whatever the context. The rest of the
    weights stay random (std 0.02), which makes the distribution nearly the same at every position:
    ε = 1 - p(token) stays large.

    context, head_noise: redraw the input embeddings' other dimensions with std `context` and the
    head's with std `head_noise` (both 0 = keep the small random init). Larger values make the
    next-token distribution depend on the text and be peaked (low entropy, ε near 0): the regime of
    Proposition 3.1 that large models are in. E.g. tiny_model(favour="12 ", strength=2.0,
    context=1.0, head_noise=2.0)."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM
    tok = tokenizer or byte_tokenizer()
    config = Qwen2Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=1024, tie_word_embeddings=not favour,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    if favour:
        with torch.no_grad():
            model.get_input_embeddings().weight[:, 0] = 4.0
            head = model.get_output_embeddings().weight
            head[:, 0] = -strength
            for token in tok(favour, add_special_tokens=False)["input_ids"]:
                head[token, 0] = strength
            head[tok.eos_token_id, 0] = 0.75 * strength
    if context or head_noise:
        gen = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():
            emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
            # dimension 0 carries the favour bias: keep it
            first = 1 if favour else 0
            if context:
                emb[:, first:] = torch.randn(emb[:, first:].shape, generator=gen) * context
            if head_noise and head is not emb:
                head[:, first:] = torch.randn(head[:, first:].shape, generator=gen) * head_noise
    model.generation_config = GenerationConfig(eos_token_id=[tok.eos_token_id, tok.pad_token_id],
                                               pad_token_id=tok.pad_token_id)
    return model.to(dtype).eval(), tok


def save_tiny_model(path, **kwargs):
    """tiny_model(**kwargs) written as an ordinary transformers folder (config, safetensors,
    tokenizer files), so `python train.py --model PATH` and `python -m gmts.tools.analyze --model
    PATH` load it like any checkpoint."""
    model, tok = tiny_model(**kwargs)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def digit_problems(n=16):
    """[{"question": "Say 1", "answer": "1"}, {"question": "Say 2", ...}, ...]: the toy task the
    favoured digits model gets sometimes right (the gsm8k reward reads the last number of the
    answer)."""
    return [{"question": f"Say {1 + i % 2}", "answer": str(1 + i % 2)} for i in range(n)]


def write_digit_data(path, n=16):
    """digit_problems(n) as a .jsonl file, loadable with data.load_problems(path) / train.py --data
    PATH."""
    with open(path, "w") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in digit_problems(n))
    return os.fspath(path)
