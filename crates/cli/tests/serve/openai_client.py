"""Drives a running `ferrolm serve` with the official `openai` package.

Usage: openai_client.py BASE_URL MODEL MODE [ARGS]
  MODE api:  chat and completions, streaming and not, stop, logprobs, usage, and errors.
  MODE tools: tool calls: forced (named and required), streamed and not, arguments validated
       against the tool's schema (jsonschema); a tool result sent back; tool_choice none;
       bad tools refused with the field named.
  MODE load CLIENTS REQUESTS MAX_TOKENS [--count-mismatches]: concurrent greedy clients; every
       answer must equal the single-request answer (or, with the flag, mismatches are only
       counted). Prints one JSON line of figures (latency p50/p99, tokens/s).
  MODE stream_load CLIENTS MAX_TOKENS PROMPT_WORDS: CLIENTS streamed completions sent at once
       (from up to 8 processes), each a prompt of about PROMPT_WORDS words and `ignore_eos`, so every one must stream
       exactly MAX_TOKENS tokens. Prints one JSON line: time to first token (p50/p99), the
       aggregate rate over the whole run, and the rate while all of them were decoding (from the
       last first token to the first finished stream: what llama-batched-bench's S_TG measures).
Exits non-zero with a message on the first failed check.
"""

import json
import multiprocessing
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


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 30},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
        "b": {"type": "integer", "minimum": -1000, "maximum": 1000}},
        "required": ["a", "b"], "additionalProperties": False}}}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, ADD)}
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]


def valid_call(call, names):
    """A tool_calls entry: OpenAI's shape, a known name, arguments that validate."""
    import jsonschema
    check(call.type == "function" and call.id.startswith("call_") and len(call.id) > 8, f"call: {call}")
    check(call.function.name in names, f"name {call.function.name} not in {names}")
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, SCHEMAS[call.function.name])
    return args


def streamed_calls(**kw):
    """Streams a chat request; the calls assembled from the deltas, content, finish_reason."""
    calls, content, finish, firsts = {}, "", None, []
    for ch in client.chat.completions.create(stream=True, **kw):
        if not ch.choices:
            continue
        d, c = ch.choices[0].delta, ch.choices[0]
        content += d.content or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                # The first delta of a call: index, id, type and name; arguments may start.
                check(tc.id and tc.type == "function" and tc.function.name, f"first delta {tc}")
                firsts.append(tc)
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            else:
                check(tc.id is None and (tc.function.name is None), f"later delta repeats the head: {tc}")
            calls[tc.index]["arguments"] += tc.function.arguments or ""
        finish = c.finish_reason or finish
    return [calls[i] for i in sorted(calls)], content, finish


def tools():
    # tool_choice "none": plain content, streamed the same.
    kw = dict(model=MODEL, messages=ASK, tools=[WEATHER, ADD], tool_choice="none",
              max_tokens=16, temperature=0)
    plain = client.chat.completions.create(**kw).choices[0]
    check(plain.message.tool_calls is None and plain.message.content, f"none: {plain}")
    calls, content, _ = streamed_calls(**kw)
    check(calls == [] and content == plain.message.content, f"none streamed: {content!r}")

    # Bad tools: a 400 that names the field.
    def refused(param, **kw):
        try:
            client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, **kw)
        except openai.BadRequestError as e:
            check(e.body and e.body.get("param") == param and param in e.body.get("message", ""),
                  f"{param}: {e.body}")
            return
        sys.exit(f"FAILED: expected a 400 naming {param} for {kw}")
    refused("tools[1].function.name", tools=[WEATHER, {"type": "function", "function": {"parameters": {}}}])
    refused("tools[0].function.parameters",
            tools=[{"type": "function", "function": {"name": "f", "parameters": [1, 2]}}])
    refused("tool_choice", tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}})
    refused("tool_choice", tools=[WEATHER], tool_choice="required", response_format={"type": "json_object"})
    forced = [({"type": "function", "function": {"name": "get_weather"}}, ["get_weather"], True),
              ("required", ["get_weather", "add"], False)]
    for choice, names, parallel in forced:
        kw = dict(model=MODEL, messages=ASK, tools=[WEATHER, ADD], tool_choice=choice,
                  parallel_tool_calls=parallel, max_tokens=120, temperature=0)
        r = client.chat.completions.create(**kw)
        c = r.choices[0]
        check(c.finish_reason == "tool_calls", f"{choice}: finish_reason {c.finish_reason}: {r}")
        check(c.message.content in (None, ""), f"{choice}: content beside a forced call: {c.message}")
        check(len(c.message.tool_calls) == 1, f"{choice}: one call: {c.message.tool_calls}")
        args = valid_call(c.message.tool_calls[0], names)

        # Streamed: the same greedy call, assembled from its deltas; no markup as content.
        calls, content, finish = streamed_calls(**kw)
        check(finish == "tool_calls" and content == "", f"{choice} streamed: {finish!r} {content!r}")
        check(len(calls) == 1 and calls[0]["name"] == c.message.tool_calls[0].function.name,
              f"{choice} streamed calls: {calls}")
        check(json.loads(calls[0]["arguments"]) == args, f"streamed {calls[0]} != {args}")
        check(calls[0]["arguments"] == c.message.tool_calls[0].function.arguments, "same text")
        check(calls[0]["id"].startswith("call_"), "streamed id")

    # The call goes back with its result; the model answers in text.
    r = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER],
                                       tool_choice="required", max_tokens=120, temperature=0)
    call = r.choices[0].message
    history = ASK + [call.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.tool_calls[0].id,
                      "content": json.dumps({"temperature_c": 18, "sky": "clear"})}]
    for choice in ("none", "auto"):
        r = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER],
                                           tool_choice=choice, max_tokens=40, temperature=0)
        m = r.choices[0].message
        check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"), f"round trip: {r}")
        if choice == "none":
            check(m.tool_calls is None and m.content, f"tool_choice none gives text: {m}")
        for tc in m.tool_calls or []:
            valid_call(tc, ["get_weather"])

    print("tools ok")


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


def _stream_group(ids, max_tokens, prompt_words, start, results):
    """One process's share of stream_load: a thread per request, released together."""
    words = "the quick brown fox jumps over the lazy dog and runs far away".split()
    own = openai.OpenAI(base_url=BASE, api_key="test-key", max_retries=0, timeout=300)
    go = threading.Barrier(len(ids) + 1)
    runs, errors = {}, []

    def one(i):
        # Each prompt its own (a number first), so that no prefix is shared between them.
        prompt = f"{i}: " + " ".join(words[(i + k) % len(words)] for k in range(prompt_words))
        try:
            go.wait()
            t0 = time.monotonic()
            stamps, used, finish = [], None, None
            for ch in own.completions.create(
                    model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
                    stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
                if ch.choices:
                    stamps.append(time.monotonic())
                    finish = ch.choices[0].finish_reason or finish
                if ch.usage is not None:
                    used = ch.usage.completion_tokens
            runs[i] = (t0, stamps, used, finish)
        except Exception as e:  # noqa: BLE001 - reported by the parent
            errors.append(repr(e))

    # One streamed request first, alone: the client builds its response types on first use,
    # which raced between this process's threads (a PydanticUserError now and then).
    # It generates one token (ignore_eos): the load's JSON line reports these as warmup_tokens.
    for _ in own.completions.create(model=MODEL, prompt="warm", max_tokens=1, temperature=0,
                                    stream=True, stream_options={"include_usage": True},
                                    extra_body={"ignore_eos": True}):
        pass
    threads = [threading.Thread(target=one, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    start.wait()
    go.wait()
    for t in threads:
        t.join()
    results.put((list(runs.values()), errors))


def stream_load(clients, max_tokens, prompt_words):
    # Requests come from several processes: one Python process's threads share one
    # interpreter lock, and parsing 64 streams' chunks there staggers the requests' starts
    # and the reading of their tokens by more than the server's steps take.
    procs = min(clients, 8)
    ctx = multiprocessing.get_context("fork")
    start, results = ctx.Barrier(procs + 1), ctx.Queue()
    workers = [ctx.Process(target=_stream_group,
                           args=(list(range(p, clients, procs)), max_tokens, prompt_words, start,
                                 results))
               for p in range(procs)]
    for w in workers:
        w.start()
    start.wait()
    t0 = time.monotonic()
    runs, errors = [], []
    for _ in workers:
        r, e = results.get()
        runs.extend(r)
        errors.extend(e)
    wall = time.monotonic() - t0
    for w in workers:
        w.join()
    check(not errors, f"{len(errors)} failed requests, first: {errors[:1]}")
    check(len(runs) == clients, f"{len(runs)} of {clients} requests answered")
    for _, _, used, finish in runs:
        check(used == max_tokens, f"ignore_eos: {used} tokens, not {max_tokens}")
        check(finish == "length", f"finish_reason {finish}")
    ttft = sorted(r[1][0] - r[0] for r in runs)
    first_all = max(r[1][0] for r in runs)   # every stream has its first token
    end_first = min(r[1][-1] for r in runs)  # the first stream is done
    tokens = clients * max_tokens
    # Tokens are streamed as text: a chunk may carry several when a token does not end a
    # character, so the window counts usage's tokens in proportion to the chunks in it.
    in_window = sum(sum(first_all < s <= end_first for s in r[1]) * max_tokens / len(r[1])
                    for r in runs)
    print(json.dumps({
        "clients": clients, "max_tokens": max_tokens, "warmup_tokens": procs,
        "wall_s": round(wall, 3),
        "ttft_p50_s": round(ttft[len(ttft) // 2], 3),
        "ttft_p99_s": round(ttft[min(len(ttft) - 1, int(len(ttft) * 0.99))], 3),
        "aggregate_tok_per_s": round(tokens / wall, 1),
        "decode_window_s": round(end_first - first_all, 3),
        "decode_tok_per_s": round(in_window / (end_first - first_all), 1) if end_first > first_all else None,
    }))


if MODE == "api":
    api()
elif MODE == "tools":
    tools()
elif MODE == "load":
    load(int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), "--count-mismatches" not in sys.argv)
elif MODE == "stream_load":
    stream_load(int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
else:
    sys.exit(f"unknown mode {MODE}")
