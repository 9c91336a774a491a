"""Drives `ferrolm serve`'s scheduler with the official `openai` package: prefix reuse, prompts
prefilled between decode steps, and deterministic answers under load.

Usage: batching_client.py BASE_URL MODEL MODE [ARGS]
  MODE prefix BASE_URL_OFF N RULES [text]: N chat requests sharing a system prompt of RULES sentences
       against a server with prefix reuse (BASE_URL) and one without (BASE_URL_OFF): the first
       alone, a follow-up turn of its conversation, then the rest 4 at a time; completions
       and a streamed request too. Every answer (text and log-probabilities) must equal the
       one without reuse (with `text`, the text only: a GPU's prefill arithmetic depends on
       its chunks' row counts); every request after the first must report cached_tokens > 0 (none
       without reuse). Prints one JSON line of figures (prompt tokens, cached, /metrics).
  MODE shared N RULES: the figures alone: N chat requests sharing a system prompt of RULES
       sentences, the first alone and the rest 4 at a time; prompt tokens, cached tokens and
       the prefill work the server's /metrics counted, with the wall time.
  MODE interleave LONG_WORDS: while one request streams, a prompt of about LONG_WORDS words
       arrives; the streaming one must receive tokens between the long one's arrival and its
       first token, and both answers must equal their answers alone. Then a prompt past the
       context gets a 400 and the server still answers.
  MODE determinism N: N different greedy prompts, each alone, then all at once: the same text
       and the same log-probabilities, bit for bit.
Exits non-zero with a message on the first failed check.
"""

import json
import sys
import threading
import time
import urllib.request

import openai

BASE, MODEL, MODE = sys.argv[1], sys.argv[2], sys.argv[3]


def client_for(base):
    return openai.OpenAI(base_url=base, api_key="test-key", max_retries=0, timeout=600)


client = client_for(BASE)


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")


def metrics(base):
    text = urllib.request.urlopen(base.removesuffix("/v1") + "/metrics").read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("ferrolm_prompt_tokens"):
            name, value = line.split()
            out[name] = int(float(value))
    return out


def lps(logprobs):
    """Log-probabilities as plain tuples, compared exactly (the JSON floats round-trip f32)."""
    return [(t.token, t.logprob, [(x.token, x.logprob) for x in t.top_logprobs]) for t in logprobs]


def cached(usage):
    d = usage.prompt_tokens_details
    return d.cached_tokens if d else None


def in_threads(work, args):
    """work(a) for every a of args, each in a thread of its own; returns when all are done."""
    threads = [threading.Thread(target=work, args=(a,)) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def chat(c, messages, max_tokens=8):
    r = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens,
                                  temperature=0, logprobs=True, top_logprobs=3)
    ch = r.choices[0]
    return {"text": ch.message.content, "lps": lps(ch.logprobs.content),
            "prompt": r.usage.prompt_tokens, "cached": cached(r.usage)}


def system_prompt(rules):
    colors = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black"]
    days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    lines = [f"Rule {i}: the {colors[i % 8]} cake number {i} costs {i + 3} dollars and is baked "
             f"every {days[i % 7]}." for i in range(rules)]
    return "You answer questions about a bakery's price list.\n" + "\n".join(lines)


def prefix(base_off, n, rules, text_only):
    off = client_for(base_off)
    system = system_prompt(rules)
    ask = [[{"role": "system", "content": system},
            {"role": "user", "content": f"Which cake costs {i + 4} dollars?"}] for i in range(n)]
    want = [chat(off, m) for m in ask]
    check(all(w["cached"] == 0 for w in want), f"cached tokens without reuse: {want}")

    got = [None] * n
    got[0] = chat(client, ask[0])
    # The conversation grows in its slot: its whole first prompt is reused.
    follow = ask[0] + [{"role": "assistant", "content": got[0]["text"]},
                       {"role": "user", "content": "And which one is baked on Friday?"}]
    again = chat(client, follow)
    check(again["cached"] >= got[0]["prompt"], f"follow-up reused {again['cached']} of {got[0]}")
    plain = chat(off, follow)
    check(again["text"] == plain["text"], f"follow-up {again['text']!r} != {plain['text']!r}")
    check(text_only or again["lps"] == plain["lps"], "follow-up log-probabilities differ")

    def worker(k):
        for i in range(1 + k, n, 4):
            got[i] = chat(client, ask[i])
    in_threads(worker, range(4))
    for i, (g, w) in enumerate(zip(got, want)):
        check(g is not None, f"request {i} failed")
        check(g["text"] == w["text"], f"request {i}: {g['text']!r} with reuse, {w['text']!r} without")
        check(text_only or g["lps"] == w["lps"], f"request {i}: log-probabilities differ with reuse")
        check(g["prompt"] == w["prompt"], f"request {i}: prompt_tokens {g['prompt']} != {w['prompt']}")
        check(i == 0 or 0 < g["cached"] < g["prompt"], f"request {i}: cached_tokens {g['cached']}")

    # Streamed, with usage: the same text and cached tokens reported in the last chunk.
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=ask[1], max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check(text == want[1]["text"], f"streamed {text!r} != {want[1]['text']!r}")
    check(cached(chunks[-1].usage) and cached(chunks[-1].usage) > 0, f"streamed usage {chunks[-1]}")

    # Completions: the same system text as a plain prompt.
    def complete(c, q):
        r = c.completions.create(model=MODEL, prompt=system + f"\nQ: {q}\nA:", max_tokens=8,
                                 temperature=0)
        return r.choices[0].text, cached(r.usage)
    complete(client, "Which cake is blue?")
    text, n_cached = complete(client, "Which cake is red?")
    check(n_cached and n_cached > 0, f"completions cached_tokens {n_cached}")
    check(text == complete(off, "Which cake is red?")[0], "completion differs with reuse")

    print(json.dumps({
        "requests": n, "prompt_tokens": sum(g["prompt"] for g in got),
        "cached_tokens": sum(g["cached"] for g in got),
        "metrics_reuse": metrics(BASE), "metrics_off": metrics(base_off),
    }))


def shared(n, rules):
    system = system_prompt(rules)
    ask = [[{"role": "system", "content": system},
            {"role": "user", "content": f"Which cake costs {i + 4} dollars?"}] for i in range(n)]
    t0 = time.monotonic()
    got = [chat(client, ask[0])] + [None] * (n - 1)

    def worker(k):
        for i in range(1 + k, n, 4):
            got[i] = chat(client, ask[i])
    in_threads(worker, range(4))
    check(all(got), "every request answered")
    print(json.dumps({
        "requests": n, "wall_s": round(time.monotonic() - t0, 1),
        "first_prompt_tokens": got[0]["prompt"],
        "prompt_tokens": sum(g["prompt"] for g in got), "cached_tokens": sum(g["cached"] for g in got),
        "metrics": metrics(BASE),
    }))


def stream_times(prompt, max_tokens, out, started=None):
    """Streams a completion, appending (time, text) per chunk to out."""
    for ch in client.completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens,
                                        temperature=0, stream=True):
        out.append((time.monotonic(), ch.choices[0].text if ch.choices else ""))
        if started is not None and len(out) == 3:
            started.set()


def interleave(long_words):
    # Counting: a greedy continuation that runs to max_tokens.
    story = "1, 2, 3, 4, 5, 6, 7, 8,"
    long = " ".join(f"word{i % 97}" for i in range(long_words)) + "\nSummary:"
    solo = []
    stream_times(story, 120, solo)
    solo_story = "".join(t for _, t in solo)
    solo_long = client.completions.create(model=MODEL, prompt=long, max_tokens=8,
                                          temperature=0).choices[0].text

    story_chunks, long_chunks, started = [], [], threading.Event()
    a = threading.Thread(target=stream_times, args=(story, 120, story_chunks, started))
    a.start()
    check(started.wait(300), "the streaming request never started")
    sent = time.monotonic()
    stream_times(long, 8, long_chunks)
    a.join()
    first_long = long_chunks[0][0]
    during = sum(1 for t, _ in story_chunks if sent < t < first_long)
    after = sum(1 for t, _ in story_chunks if t > first_long)
    check(during >= 2, f"the streaming request got {during} tokens during the long prefill")
    check("".join(t for _, t in story_chunks) == solo_story, "streamed story differs from alone")
    check("".join(t for _, t in long_chunks) == solo_long, "long prompt's answer differs from alone")

    # A prompt past the context: a 400 naming the limit, and the server keeps serving.
    try:
        client.completions.create(model=MODEL, prompt="hello " * 5000, max_tokens=4)
        sys.exit("FAILED: a prompt past the context was accepted")
    except openai.BadRequestError as e:
        check(e.body and e.body.get("code") == "context_length_exceeded", f"{e.body}")
    check(client.completions.create(model=MODEL, prompt="Hi", max_tokens=2).choices, "after a 400")
    print(json.dumps({"tokens_during_long_prefill": during, "after": after}))


def determinism(n):
    prompts = [f"Story {i}: " + " ".join(["the quick brown fox jumps over the lazy dog"] * (3 + 6 * i))
               for i in range(n)]

    def ask(p):
        r = client.completions.create(model=MODEL, prompt=p, max_tokens=16, temperature=0, logprobs=3)
        c = r.choices[0]
        return c.text, c.logprobs.token_logprobs, [sorted(d.items()) for d in c.logprobs.top_logprobs]
    alone = [ask(p) for p in prompts]
    together = [None] * n

    def worker(i):
        together[i] = ask(prompts[i])
    in_threads(worker, range(n))
    for i, (a, b) in enumerate(zip(alone, together)):
        check(b is not None, f"request {i} failed")
        check(a == b, f"request {i}: alone {a[0]!r}, under load {b[0]!r} (or their logprobs differ)")
    print(json.dumps({"requests": n, "identical": True}))


if MODE == "prefix":
    prefix(sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7:] == ["text"])
elif MODE == "shared":
    shared(int(sys.argv[4]), int(sys.argv[5]))
elif MODE == "interleave":
    interleave(int(sys.argv[4]))
elif MODE == "determinism":
    determinism(int(sys.argv[4]))
else:
    sys.exit(f"unknown mode {MODE}")
