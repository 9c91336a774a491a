"""Structured output through the official `openai` client against a running `ferrolm serve`.

Usage: structured_client.py BASE_URL MODEL
Every one of 20 JSON schemas, streamed and not, must give a response that parses and
validates (the `jsonschema` package); json_object mode gives an object; a GBNF grammar holds;
an invalid schema and an invalid grammar are 400s naming the field; a schema that cannot be
finished within max_tokens ends with finish_reason "length". Requests run on a few threads
(the server batches them). Exits non-zero with a message on the first failed check.
"""

import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai

BASE, MODEL = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=BASE, api_key="test-key", max_retries=0, timeout=600)
MAX_TOKENS = 160


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")


def s(maxlen=12, **kw):
    return {"type": "string", "maxLength": maxlen, **kw}


SCHEMAS = [
    ("person", {"type": "object", "properties": {"name": s(), "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                "required": ["name", "age"], "additionalProperties": False}),
    ("flag", {"type": "object", "properties": {"enabled": {"type": "boolean"}}, "required": ["enabled"],
              "additionalProperties": False}),
    ("color", {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
               "required": ["color"], "additionalProperties": False}),
    ("tags", {"type": "object", "properties": {"tags": {"type": "array", "items": s(8), "minItems": 1, "maxItems": 3}},
              "required": ["tags"], "additionalProperties": False}),
    ("nested", {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 999},
                                                  "email": s(20)},
                 "required": ["id", "email"], "additionalProperties": False}},
        "required": ["user"], "additionalProperties": False}),
    ("score", {"type": "object", "properties": {"score": {"type": "number", "minimum": 0, "maximum": 10}},
               "required": ["score"], "additionalProperties": False}),
    ("zip", {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
             "required": ["zip"], "additionalProperties": False}),
    ("nullable", {"type": "object", "properties": {"nickname": {"type": ["string", "null"], "maxLength": 10}},
                  "required": ["nickname"], "additionalProperties": False}),
    ("matrix", {"type": "object", "properties": {"rows": {"type": "array", "minItems": 2, "maxItems": 2, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": 0, "maximum": 9}}}},
        "required": ["rows"], "additionalProperties": False}),
    ("code", {"type": "object", "properties": {"code": {"type": "string", "minLength": 3, "maxLength": 6}},
              "required": ["code"], "additionalProperties": False}),
    ("point", {"type": "object", "properties": {"x": {"type": "integer", "minimum": -50, "maximum": 50},
                                                "y": {"type": "integer", "minimum": -50, "maximum": 50}},
               "required": ["x", "y"], "additionalProperties": False}),
    ("book", {"type": "object", "properties": {"title": s(16), "year": {"type": "integer", "minimum": 1800, "maximum": 2030},
                                               "genre": {"enum": ["fiction", "science", "history"]}},
              "required": ["title", "year", "genre"], "additionalProperties": False}),
    ("answer", {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
                "required": ["answer", "confidence"], "additionalProperties": False}),
    ("items", {"type": "object", "properties": {"items": {"type": "array", "maxItems": 2, "items": {
        "type": "object", "properties": {"sku": s(6), "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["sku", "qty"], "additionalProperties": False}}}, "required": ["items"], "additionalProperties": False}),
    ("optional", {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 5}, "b": s(5)},
                  "required": ["a"], "additionalProperties": False}),
    ("const", {"type": "object", "properties": {"version": {"const": 2}, "ok": {"type": "boolean"}},
               "required": ["version", "ok"], "additionalProperties": False}),
    ("list", {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 2, "maxItems": 4}),
    ("weather", {"type": "object", "properties": {"city": s(12), "temp_c": {"type": "number", "minimum": -40, "maximum": 50},
                                                  "sunny": {"type": "boolean"}},
                 "required": ["city", "temp_c", "sunny"], "additionalProperties": False}),
    ("anyof", {"type": "object", "properties": {"id": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 99}, s(4)]}},
               "required": ["id"], "additionalProperties": False}),
    ("deep", {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object", "properties": {
        "c": {"type": "boolean"}}, "required": ["c"], "additionalProperties": False}}, "required": ["b"],
        "additionalProperties": False}}, "required": ["a"], "additionalProperties": False}),
]


def chat(name, schema, stream):
    kw = dict(model=MODEL, max_tokens=MAX_TOKENS, temperature=0, messages=[
        {"role": "user", "content": f"Give an example {name} as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}})
    if not stream:
        c = client.chat.completions.create(**kw).choices[0]
        return c.message.content, c.finish_reason
    text, finish = "", None
    for ch in client.chat.completions.create(stream=True, **kw):
        if ch.choices:
            text += ch.choices[0].delta.content or ""
            finish = ch.choices[0].finish_reason or finish
    return text, finish


def one(job):
    name, schema, stream = job
    text, finish = chat(name, schema, stream)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return f"{name} (stream={stream}): not JSON ({e}), finish {finish}: {text!r}"
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as e:
        return f"{name} (stream={stream}): {e.message}: {text!r}"
    if finish != "stop":
        return f"{name} (stream={stream}): finish_reason {finish}"
    return None


def schemas():
    jobs = [(n, sch, st) for n, sch in SCHEMAS for st in (False, True)]
    with ThreadPoolExecutor(4) as pool:
        errors = [e for e in pool.map(one, jobs) if e]
    check(not errors, "\n".join(errors))
    print(f"schemas ok: {len(jobs)} responses valid")


def json_object_and_completions():
    r = client.chat.completions.create(model=MODEL, max_tokens=MAX_TOKENS, temperature=0, messages=[
        {"role": "user", "content": 'Repeat this JSON object exactly: {"animal": "cat", "legs": 4}'}],
        response_format={"type": "json_object"})
    text = r.choices[0].message.content
    check(r.choices[0].finish_reason == "stop" and isinstance(json.loads(text), dict), f"json_object: {text!r}")
    schema = SCHEMAS[0][1]
    r = client.completions.create(model=MODEL, prompt="A person as JSON:", max_tokens=MAX_TOKENS, temperature=0,
                                  extra_body={"response_format": {"type": "json_schema",
                                                                  "json_schema": {"name": "p", "schema": schema}}})
    jsonschema.validate(json.loads(r.choices[0].text), schema)
    print("json_object ok")


def grammar():
    gbnf = 'root ::= ("yes" | "no") ", because " [a-z ]{1,20} "."'
    for stream in (False, True):
        kw = dict(model=MODEL, max_tokens=40, temperature=0, extra_body={"grammar": gbnf},
                  messages=[{"role": "user", "content": "Is the sky blue?"}])
        if stream:
            text = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
                stream=True, **kw) if ch.choices)
        else:
            text = client.chat.completions.create(**kw).choices[0].message.content
        check(re.fullmatch(r"(yes|no), because [a-z ]{1,20}\.", text), f"gbnf (stream={stream}): {text!r}")
    print("grammar ok")


def bad_input():
    cases = [
        ("response_format", {"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integr"}}}, "strict": True}}}),
        ("grammar", {"grammar": 'root ::= "a" undefined-rule'}),
    ]
    for field, extra in cases:
        try:
            client.chat.completions.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}],
                                           extra_body=extra)
            check(False, f"{extra} was accepted")
        except openai.BadRequestError as e:
            check(e.param == field and "invalid" in str(e), f"400 names {field}: {e.body}")
    print("bad input ok")


def length():
    # 30 to 40 items of a long enum: far more than 12 tokens can hold.
    schema = {"type": "array", "minItems": 30, "maxItems": 40, "items": {"enum": ["alpha", "beta"]}}
    for stream in (False, True):
        kw = dict(model=MODEL, max_tokens=12, temperature=0, messages=[{"role": "user", "content": "List."}],
                  response_format={"type": "json_schema", "json_schema": {"name": "l", "schema": schema}})
        if stream:
            finish = [ch.choices[0].finish_reason for ch in client.chat.completions.create(stream=True, **kw)
                      if ch.choices and ch.choices[0].finish_reason]
            check(finish == ["length"], f"streamed finish {finish}")
        else:
            r = client.chat.completions.create(**kw)
            check(r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 12, f"length: {r}")
    print("length ok")


bad_input()
length()
grammar()
json_object_and_completions()
schemas()
