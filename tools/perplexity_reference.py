#!/usr/bin/env python3
"""llama.cpp's perplexity over the test text, through llama-cpp-python: the golden that
crates/cli/tests/perplexity.rs holds `ferrolm perplexity` to.

usage: perplexity_reference.py SMOLLM2.gguf GOLDEN_DIR OUT.json

It computes what llama-perplexity's `perplexity()` computes (tools/perplexity/perplexity.cpp),
one window per decode (as `llama-perplexity -b N` with N = the window does): the text
tokenized once with special tokens added (BOS when the model adds it) and special-token text
left as text; non-overlapping windows of n_ctx tokens, each from an empty cache with its first
token replaced by BOS when the model adds BOS; the logits at positions n_ctx/2 .. n_ctx-2
scored against the next token with llama.cpp's log-softmax (maximum and exponentials in f32,
their sum in f64); the running perplexity after each window and the final one with its error.
llama.cpp's defaults otherwise: F16 KV cache, flash attention auto, 2 threads.

The cases (the test runs the same ones):
- smollm2: the default model on the text, n_ctx 256, every window (13);
- smollm2-bos: the same file with tokenizer.ggml.add_bos_token set to true (the byte patched
  in a copy, as the test does), so that BOS leads the text and replaces each window's first
  token; n_ctx 256, 8 windows;
- tiny-*: the golden tiny models (no vocabulary) on the text's UTF-8 bytes as token ids,
  n_ctx 256, every window.
"""
import json, os, shutil, sys, tempfile
import numpy as np
import llama_cpp as L

TEXT = os.path.join(os.path.dirname(__file__), "../crates/cli/tests/perplexity/text.txt")
TINY = ["tiny-llama-f32", "tiny-qwen3-q8_0", "tiny-olmoe-q4_k_m", "tiny-qwen3moe-q8_0"]


def load(path, n_ctx):
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(path.encode(), mp)
    assert model, "load failed"
    cp = L.llama_context_default_params()
    cp.n_ctx = n_ctx; cp.n_batch = n_ctx; cp.n_ubatch = n_ctx
    cp.n_threads = 2; cp.n_threads_batch = 2
    ctx = L.llama_init_from_model(model, cp)
    assert ctx, "ctx failed"
    return model, ctx


def tokenize(vocab, text):
    raw = text.encode()
    buf = (L.llama_token * (len(raw) + 16))()
    n = L.llama_tokenize(vocab, raw, len(raw), buf, len(buf), True, False)
    assert n >= 0
    return list(buf[:n])


def nll(row, tok):
    """llama.cpp's log_softmax: max and exp in f32, the sum in f64."""
    m = row.max()
    s = np.exp(row - m).astype(np.float64).sum()
    return float(np.log(s) - np.float64(row[tok] - m))


def perplexity(path, n_ctx, n_chunks, ids=None):
    model, ctx = load(path, n_ctx)
    vocab = L.llama_model_get_vocab(model)
    nv = L.llama_vocab_n_tokens(vocab)
    add_bos = L.llama_vocab_get_add_bos(vocab)
    assert not L.llama_vocab_get_add_eos(vocab)
    tokens = ids if ids is not None else tokenize(vocab, open(TEXT, encoding="utf-8").read())
    assert len(tokens) >= 2 * n_ctx
    n_max = len(tokens) // n_ctx
    n_chunk = n_max if n_chunks is None else min(n_chunks, n_max)
    first = n_ctx // 2
    s = s2 = 0.0
    count = 0
    running = []
    for i in range(n_chunk):
        window = tokens[i * n_ctx:(i + 1) * n_ctx]
        if add_bos:
            window[0] = L.llama_vocab_bos(vocab)
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        b = L.llama_batch_init(n_ctx, 0, 1)
        for k, t in enumerate(window):
            b.token[k] = t; b.pos[k] = k; b.n_seq_id[k] = 1; b.seq_id[k][0] = 0
            b.logits[k] = 1 if k >= first else 0
        b.n_tokens = n_ctx
        assert L.llama_decode(ctx, b) == 0
        for j in range(first, n_ctx - 1):
            row = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, j), shape=(nv,)).copy()
            v = nll(row, window[j + 1])
            s += v; s2 += v * v; count += 1
        L.llama_batch_free(b)
        running.append(float(np.exp(s / count)))
    mean = s / count
    ppl = float(np.exp(mean))
    var = s2 / count - mean * mean
    err = float(np.sqrt(var / (count - 1)) * ppl)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return dict(add_bos=bool(add_bos), n_tokens=len(tokens), n_ctx=n_ctx, n_chunks=n_chunk,
                running=running, ppl=ppl, error=err)


def patch_add_bos(src, dst):
    """A copy of `src` whose tokenizer.ggml.add_bos_token is true: the byte after the key
    and its type (bool, 7) flipped in place."""
    shutil.copyfile(src, dst)
    key = b"tokenizer.ggml.add_bos_token"
    with open(dst, "r+b") as f:
        head = f.read(1 << 24)
        at = head.index(key) + len(key)
        assert int.from_bytes(head[at:at + 4], "little") == 7, "add_bos_token is not a bool"
        f.seek(at + 4)
        f.write(b"\x01")


def main():
    smollm2, golden_dir, out = sys.argv[1:4]
    cases = {}
    cases["smollm2"] = perplexity(smollm2, 256, None)
    with tempfile.TemporaryDirectory() as d:
        patched = os.path.join(d, "smollm2-bos.gguf")
        patch_add_bos(smollm2, patched)
        cases["smollm2-bos"] = perplexity(patched, 256, 8)
    assert cases["smollm2-bos"]["add_bos"] and not cases["smollm2"]["add_bos"]
    ids = list(open(TEXT, "rb").read())
    for stem in TINY:
        cases[stem] = perplexity(os.path.join(golden_dir, stem + ".gguf"), 256, None, ids=ids)
    for name, c in cases.items():
        print(f"{name}: PPL = {c['ppl']:.4f} +/- {c['error']:.5f} over {c['n_chunks']} windows of {c['n_ctx']}",
              file=sys.stderr)
    json.dump(dict(reference="llama.cpp CPU (llama-cpp-python 0.3.36): llama-perplexity's method, "
                             "one window per decode, F16 KV cache, flash attention auto, 2 threads",
                   text="crates/cli/tests/perplexity/text.txt", cases=cases),
              open(out, "w"), indent=1)


if __name__ == "__main__":
    main()
