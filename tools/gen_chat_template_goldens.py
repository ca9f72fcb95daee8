#!/usr/bin/env python3
"""Qwen3's chat template with tools, rendered by `transformers` (apply_chat_template).

The template is Qwen3-0.6B's, read from llama.cpp's copy in the pinned llama-cpp-python
sdist (fetched by pip and checked by sha256, as tools/gen_kquant_goldens.py does; nothing of
it is committed but the rendered text). The conversations cover tools in the system turn,
assistant tool calls (arguments as a string and as an object), consecutive tool results,
a multi-step tool loop whose assistant turns keep their reasoning, and the thinking switch.

Writes fucina-models/tests/goldens/chat_template_tools.json; fucina-models/tests/chat_tools.rs
renders the same conversations through fucina's ChatFormat and requires the same text.
"""
import json
import os
import tarfile

from transformers import PreTrainedTokenizerFast

from gen_kquant_goldens import SDIST, cache, ggml_sources
from tiny_tokenizer import train_tokenizer

here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "..", "fucina-models", "tests", "goldens", "chat_template_tools.json")
TEMPLATE = f"{SDIST}/vendor/llama.cpp/models/templates/Qwen-Qwen3-0.6B.jinja"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city, in °C.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
CLOCK = {"type": "function", "function": {"name": "now", "description": "The time.",
                                          "parameters": {"type": "object", "properties": {}}}}


def call(name, arguments, cid):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


CASES = [
    ([{"role": "user", "content": "Weather in Rome?"}], [WEATHER], True),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Rome?"}],
     [WEATHER, CLOCK], False),
    ([{"role": "user", "content": "Weather in Rome and the time?"},
      {"role": "assistant", "content": "", "tool_calls": [call("get_weather", '{"city": "Rome"}', "a"),
                                                          call("now", "{}", "b")]},
      {"role": "tool", "tool_call_id": "a", "content": "{\"temp\": 21}"},
      {"role": "tool", "tool_call_id": "b", "content": "12:00"}],
     [WEATHER, CLOCK], True),
    ([{"role": "system", "content": "You help."},
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": "<think>\nNeed the tool.\n</think>\n\nLet me check.",
       "tool_calls": [call("get_weather", {"city": "Oslo", "days": 2}, "c")]},
      {"role": "tool", "tool_call_id": "c", "content": "snow"},
      {"role": "assistant", "content": "It snows in Oslo."},
      {"role": "user", "content": "Thanks!"}],
     [WEATHER], False),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!"},
      {"role": "user", "content": "Bye"}], [], True),
]


def template():
    ggml_sources()  # fetches and checks the sdist
    tar = os.path.join(cache, f"{SDIST}.tar.gz")
    with tarfile.open(tar) as t:
        return t.extractfile(TEMPLATE).read().decode()


def main():
    tpl = template()
    tok = PreTrainedTokenizerFast(tokenizer_object=train_tokenizer())
    cases = []
    for messages, tools, think in CASES:
        text = tok.apply_chat_template(messages, tools=tools or None, chat_template=tpl, tokenize=False,
                                       add_generation_prompt=True, enable_thinking=think)
        cases.append({"messages": messages, "tools": tools, "think": think, "text": text})
    with open(out, "w") as f:
        json.dump({"generator": "tools/gen_chat_template_goldens.py", "template": TEMPLATE, "cases": cases}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {out}: {len(cases)} conversations")


if __name__ == "__main__":
    main()
