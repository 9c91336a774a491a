"""What every golden maker here shares: recipes, the ferrolm generator, llama.cpp's quantizer,
and the case loop that records llama.cpp's logits.

A model is a *recipe* (a small JSON file committed beside its golden, see
crates/model/src/recipe.rs for the format and the generator): `Recipe` builds one,
`ferrolm_synth` turns it into the F32 GGUF with the ferrolm binary, `quantize` makes llama.cpp's
quantized copy (`llama_model_quantize`), and `make_golden` runs llama.cpp on it and writes the
golden (`*.json.gz`), which names the recipe and the type and holds the sha256 of the model
file llama.cpp ran, so that the tests (which regenerate the file with ferrolm's own synth and
quantizer) fail loudly if theirs is not byte for byte the same.

Goldens are made as ../shared/golden/make_goldens.py makes the tiny ones: llama-cpp-python
0.3.36 on the CPU, 2 threads, n_ctx = n_batch = n_ubatch = 1024, one batched pass over each
prompt with every position's logits, then greedy steps one token at a time. JSON shape:
`cases[i]` = {prompt, prompt_logits, greedy, greedy_logits}; prompt_logits[j] are the logits
after prompt[0..=j], greedy_logits[s] the logits that chose greedy[s].

Run with /work/venv-llama/bin/python (llama-cpp-python; nothing else is needed).
"""
import ctypes
import gzip
import hashlib
import json
import os
import random
import subprocess
import tempfile

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_FERROLM = os.path.join(REPO, "target", "debug", "ferrolm")

# llama_ftype values of llama.cpp's quantizer (llama.h), by ferrolm's file type names.
FTYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9,
          "q2_k": 10, "q3_k_m": 12, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18, "bf16": 32,
          "mxfp4_moe": 38}
# ggml_type of a KV cache.
CACHE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8}
NOTE = ("prompt_logits[i] are the logits after prompt[0..=i] in one batch; "
        "greedy_logits[s] are the logits that chose greedy[s]")


# ---- recipes ----

class Recipe:
    """A recipe under construction: `kv` adds metadata, `normal`/`values` add tensors, in
    file order. Dims are ggml's: dims[0] is the row length."""

    def __init__(self, seed, about=""):
        self.seed, self.about = seed, about
        self.metadata, self.tensors = [], []

    def kv(self, key, ty, value):
        self.metadata.append([key, ty, value])

    def normal(self, name, dims, mean, std, ty=None):
        self._tensor(name, dims, {"normal": {"mean": float(mean), "std": float(std)}}, ty)

    def values(self, name, dims, values):
        self._tensor(name, dims, {"values": [float(x) for x in values]}, None)

    def _tensor(self, name, dims, init, ty):
        t = {"name": name, "shape": [int(d) for d in dims], "init": init}
        if ty is not None:
            t["type"] = ty
        self.tensors.append(t)

    def n_params(self):
        return sum(int(np.prod(t["shape"])) for t in self.tensors)

    def save(self, path):
        """One metadata entry or tensor a line, so that a diff reads as what changed."""
        rows = lambda xs: ",\n".join("    " + json.dumps(x) for x in xs)  # noqa: E731
        with open(path, "w") as f:
            f.write(f'{{\n  "about": {json.dumps(self.about)},\n  "seed": {self.seed},\n'
                    f'  "metadata": [\n{rows(self.metadata)}\n  ],\n'
                    f'  "tensors": [\n{rows(self.tensors)}\n  ]\n}}\n')


def ferrolm_synth(ferrolm, recipe_path, ftype, out):
    """`ferrolm synth --recipe` (ferrolm's generator; for `f32`, the file as declared)."""
    subprocess.run([ferrolm, "synth", "--recipe", recipe_path, "--type", ftype, "-o", out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---- llama.cpp ----

def llama():
    """llama_cpp, with its load logs silenced (they would bury the scripts' output)."""
    import llama_cpp
    if not hasattr(llama, "quiet"):
        llama.quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(llama.quiet, None)
        llama_cpp.llama_backend_init()
    return llama_cpp


def quantize(src, dst, ftype):
    """llama.cpp's own quantizer; `ftype` is a key of FTYPES."""
    L = llama()
    p = L.llama_model_quantize_default_params()
    p.ftype = FTYPES[ftype]
    p.nthread = 2
    rc = L.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(p))
    assert rc == 0, f"quantize {src} -> {ftype}: {rc}"


class Config:
    """llama.cpp's context settings for a golden and the `reference` line that says so."""

    def __init__(self, flash_attn, cache_type, reference):
        self.flash_attn, self.cache_type, self.reference = flash_attn, cache_type, reference


PRECISE = Config(0, "f32", "precise: flash attention off, F32 KV cache")
DEFAULTS = Config(None, None, "defaults: flash attention auto, F16 KV cache")


def kv_cache(cache_type):
    """Flash attention on (llama.cpp needs it for a quantized V cache), K and V cache types."""
    return Config(1, cache_type, f"flash attention on, KV cache type_k = type_v = {cache_type}")


def load(path, cfg, n_ctx=1024):
    L = llama()
    model = L.llama_model_load_from_file(str(path).encode(), L.llama_model_default_params())
    assert model, f"llama.cpp could not load {path}"
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = n_ctx
    cp.n_threads = cp.n_threads_batch = 2
    if cfg.flash_attn is not None:
        cp.flash_attn_type = cfg.flash_attn
    if cfg.cache_type is not None:
        cp.type_k = cp.type_v = CACHE_TYPES[cfg.cache_type]
    ctx = L.llama_init_from_model(model, cp)
    assert ctx, "context failed"
    return model, ctx


def decode(ctx, toks, pos0, all_logits, nv):
    L = llama()
    b = L.llama_batch_init(len(toks), 0, 1)
    for i, t in enumerate(toks):
        b.token[i] = t
        b.pos[i] = pos0 + i
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = 0
        b.logits[i] = 1 if (all_logits or i == len(toks) - 1) else 0
    b.n_tokens = len(toks)
    assert L.llama_decode(ctx, b) == 0, "decode failed"
    idx = range(len(toks)) if all_logits else [len(toks) - 1]
    out = [np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(nv,)).copy() for i in idx]
    L.llama_batch_free(b)
    return out


def random_prompts(seed, lengths, n_vocab):
    rng = random.Random(seed)
    return [[rng.randrange(n_vocab) for _ in range(n)] for n in lengths]


def run_cases(path, cfg, prompts, greedy, digits):
    """(n_vocab, cases) of llama.cpp on the model at `path`: each prompt in one batch, then
    `greedy` argmax steps; logits to `digits` significant digits. `prompts` is a list of id
    lists, or a function of n_vocab that returns one."""
    L = llama()
    model, ctx = load(path, cfg)
    nv = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    fmt = f"%.{digits}g"
    r = lambda a: [float(fmt % x) for x in a]  # noqa: E731
    cases = []
    for prompt in (prompts(nv) if callable(prompts) else prompts):
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        pl = decode(ctx, prompt, 0, True, nv)
        toks, steps, last = [], [], pl[-1]
        for s in range(greedy):
            t = int(np.argmax(last))
            toks.append(t)
            steps.append(last)
            last = decode(ctx, [t], len(prompt) + s, False, nv)[0]
        cases.append(dict(prompt=prompt, prompt_logits=[r(x) for x in pl], greedy=toks,
                          greedy_logits=[r(x) for x in steps]))
    L.llama_free(ctx)
    L.llama_model_free(model)
    return nv, cases


def write_golden(out, fields, n_vocab, cfg, cases):
    """`out` (.json.gz): `fields` (model, recipe, ...) then the reference and the cases."""
    doc = dict(fields, n_vocab=n_vocab,
               reference=f"llama.cpp CPU (llama-cpp-python 0.3.36), {cfg.reference}",
               note=NOTE, cases=cases)
    # mtime 0: the same golden gives the same bytes.
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        f.write(json.dumps(doc, separators=(",", ":")).encode())


def make_golden(ferrolm, recipe_path, ftype, out_dir, stem, cfg, prompts, greedy, digits=5):
    """The golden `out_dir/stem.json.gz` of the recipe's model as `ftype`: ferrolm's F32 file,
    quantized by llama.cpp unless `ftype` is f32, run by llama.cpp. Returns the golden's path."""
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, "f32.gguf")
        ferrolm_synth(ferrolm, recipe_path, "f32", f32)
        model = f32
        if ftype != "f32":
            model = os.path.join(tmp, f"{stem}.gguf")
            quantize(f32, model, ftype)
        nv, cases = run_cases(model, cfg, prompts, greedy, digits)
        made_by = ("ferrolm synth --recipe (as declared)" if ftype == "f32"
                   else "llama.cpp's llama_model_quantize of ferrolm synth --recipe's F32 file")
        fields = dict(model=f"{stem}.gguf", recipe=os.path.basename(recipe_path), type=ftype,
                      llama_ftype=FTYPES[ftype], model_sha256=sha256(model),
                      model_bytes=os.path.getsize(model), made_by=made_by)
        out = os.path.join(out_dir, f"{stem}.json.gz")
        write_golden(out, fields, nv, cfg, cases)
    return out


def make_arch_goldens(argv, recipes, prompt_lengths, greedy, digits=6):
    """The command line of the architecture golden makers (`[--ferrolm BIN] OUT_DIR`): each
    `(recipe_name, recipe, cases)` saved as `OUT_DIR/recipe_name.recipe.json`, then a golden per
    case `(ftype, stem, cfg, seed)`, its prompts random ids of `prompt_lengths` drawn from
    `seed`. Prints each golden's path."""
    ferrolm = DEFAULT_FERROLM
    if argv[:1] == ["--ferrolm"]:
        ferrolm, argv = argv[1], argv[2:]
    out_dir = argv[0]
    os.makedirs(out_dir, exist_ok=True)
    for name, recipe, cases in recipes:
        path = os.path.join(out_dir, f"{name}.recipe.json")
        recipe.save(path)
        for ftype, stem, cfg, seed in cases:
            out = make_golden(ferrolm, path, ftype, out_dir, stem, cfg,
                              lambda nv, seed=seed: random_prompts(seed, prompt_lengths, nv),
                              greedy, digits=digits)
            print(out, flush=True)
