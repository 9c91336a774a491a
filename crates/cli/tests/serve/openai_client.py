"""Drives a running `ferrolm serve` with the official `openai` package.

Usage: openai_client.py BASE_URL MODEL MODE [ARGS]
  MODE api:  chat and completions, streaming and not, stop, logprobs, usage, and errors.
  MODE load CLIENTS REQUESTS MAX_TOKENS [--count-mismatches]: concurrent greedy clients; every
       answer must equal the single-request answer (or, with the flag, mismatches are only
       counted). Prints one JSON line of figures (latency p50/p99, tokens/s).
Exits non-zero with a message on the first failed check.
"""

import json
import sys
import threading
import time

import openai

BASE, MODEL, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=BASE, api_key="test-key", max_retries=0, timeout=300)
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
PROMPT = "The capital of France is"


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")


def api():
    # Chat, not streamed.
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0)
    c = r.choices[0]
    check(r.object == "chat.completion" and c.message.role == "assistant", f"chat shape: {r}")
    check(len(c.message.content) > 0 and c.finish_reason in ("stop", "length"), f"chat: {r}")
    check(r.usage.completion_tokens <= 12 and r.usage.prompt_tokens > 5, f"usage: {r.usage}")
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "total")
    chat_text = c.message.content

    # Chat, streamed: the chunks add up to the same greedy text, usage at the end.
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    check(text == chat_text, f"streamed chat {text!r} != {chat_text!r}")
    check(all(ch.object == "chat.completion.chunk" for ch in chunks), "chunk objects")
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    check(finals == [c.finish_reason], f"one finish_reason: {finals}")
    check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens,
          f"usage chunk: {chunks[-1]}")

    # Completions, both ways.
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0)
    check(r.object == "text_completion" and len(r.choices[0].text) > 0, f"completion: {r}")
    comp_text = r.choices[0].text
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0, stream=True))
    check(streamed == comp_text, f"streamed completion {streamed!r} != {comp_text!r}")

    # stop: the text ends before the first occurrence, finish_reason "stop".
    word = comp_text.strip().split()[1] if len(comp_text.split()) > 1 else comp_text.strip()[:2]
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0, stop=[word])
    cut = comp_text[:comp_text.find(word)]
    check(r.choices[0].text == cut and r.choices[0].finish_reason == "stop",
          f"stop {word!r}: {r.choices[0].text!r}, want {cut!r}")
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0, stop=word, stream=True))
    check(streamed == cut, f"streamed stop: {streamed!r} != {cut!r}")

    # logprobs: the greedy token is the most likely one.
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, temperature=0,
                                       logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    check(len(lp) == r.usage.completion_tokens and all(len(t.top_logprobs) == 3 for t in lp), "logprobs")
    check(all(t.logprob <= 0 and abs(t.logprob - t.top_logprobs[0].logprob) < 1e-6 for t in lp),
          "greedy tokens are the top-1")

    # Sampling parameters are accepted; a seed makes a draw reproducible.
    kw = dict(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=1.0, top_p=0.9,
              seed=42, presence_penalty=0.5, frequency_penalty=0.5, extra_body={"min_p": 0.05, "top_k": 20})
    a, b = (client.completions.create(**kw).choices[0].text for _ in range(2))
    check(a == b, f"same seed, different text: {a!r} {b!r}")

    check([m.id for m in client.models.list().data] == [MODEL], "models list")

    # Errors arrive as the client's typed exceptions.
    def raises(exc, **kw):
        try:
            client.chat.completions.create(**kw)
        except exc as e:
            return e
        sys.exit(f"FAILED: expected {exc.__name__} for {kw}")
    raises(openai.NotFoundError, model="no-such-model", messages=MESSAGES)
    e = raises(openai.BadRequestError, model=MODEL, messages=MESSAGES, n=2)
    check("n" in str(e), f"n=2 error names n: {e}")
    raises(openai.BadRequestError, model=MODEL, messages=[])
    raises(openai.BadRequestError, model=MODEL, messages=[{"role": "user", "content": "hi " * 5000}])
    print("api ok")


def load(clients, requests, max_tokens, strict):
    def ask(i):
        # Two prompts, alternating, so batches mix sequences of different lengths.
        prompt = [PROMPT, "Once upon a time, there was a"][i % 2]
        t0 = time.monotonic()
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0)
        return prompt, r, time.monotonic() - t0

    want = {p: ask(i)[1].choices[0].text for i, p in enumerate([PROMPT, "Once upon a time, there was a"])}
    results, errors = [], []

    def worker(c):
        try:
            for j in range(requests):
                results.append(ask(c + j))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    check(not errors, f"{len(errors)} failed requests, first: {errors[:1]}")
    check(len(results) == clients * requests, "every request answered")
    mismatches = 0
    for prompt, r, _ in results:
        c = r.choices[0]
        check(c.finish_reason in ("stop", "length") and r.usage.completion_tokens <= max_tokens, f"{r}")
        mismatches += c.text != want[prompt]
        check(not strict or c.text == want[prompt], f"under load {c.text!r} != alone {want[prompt]!r}")
    lat = sorted(x[2] for x in results)
    tokens = sum(r.usage.completion_tokens for _, r, _ in results)
    print(json.dumps({
        "requests": len(results), "wall_s": round(wall, 2),
        "p50_s": round(lat[len(lat) // 2], 3), "p99_s": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 3),
        "gen_tokens": tokens, "tok_per_s": round(tokens / wall, 1), "greedy_mismatches": mismatches,
    }))


if MODE == "api":
    api()
elif MODE == "load":
    load(int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), "--count-mismatches" not in sys.argv)
else:
    sys.exit(f"unknown mode {MODE}")
