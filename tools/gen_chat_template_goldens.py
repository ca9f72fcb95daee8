#!/usr/bin/env python3
"""Qwen3's, DeepSeek-R1's, Llama 3.1's, Mistral's, GLM-4.6's and Gemma 4's chat templates, rendered by
`transformers` (apply_chat_template, or its jinja environment).

The templates are Qwen3-0.6B's and DeepSeek-R1's (its Distill-Qwen-32B release, the R1
template with tool calls and tool outputs; it leaves tool definitions to the caller), read
from llama.cpp's copies in the pinned llama-cpp-python sdist (fetched by pip and checked by sha256, as tools/gen_kquant_goldens.py does; nothing of
it is committed but the rendered text). The conversations cover tools in the system turn,
assistant tool calls (arguments as a string and as an object), consecutive tool results,
a multi-step tool loop whose assistant turns keep their reasoning, and the thinking switch;
for DeepSeek-R1: tool calls (arguments as objects, which its template's `tojson` expects),
runs of tool outputs, the answer after them, dropped reasoning and the thinking switch.

Writes fucina-models/tests/goldens/chat_template_tools.json; fucina-models/tests/chat_tools.rs
renders the same conversations through fucina's ChatFormat and requires the same text.
"""
import json
import os
import tarfile

from transformers import PreTrainedTokenizerFast
from transformers.utils.chat_template_utils import _compile_jinja_template

from gen_kquant_goldens import SDIST, cache, ggml_sources
from tiny_tokenizer import train_tokenizer

here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "..", "fucina-models", "tests", "goldens", "chat_template_tools.json")
TEMPLATE = f"{SDIST}/vendor/llama.cpp/models/templates/Qwen-Qwen3-0.6B.jinja"
LLAMA_TEMPLATE = f"{SDIST}/vendor/llama.cpp/models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja"
MISTRAL_TEMPLATE = f"{SDIST}/vendor/llama.cpp/models/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja"
DEEPSEEK_TEMPLATE = f"{SDIST}/vendor/llama.cpp/models/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
GLM_TEMPLATE = f"{SDIST}/vendor/llama.cpp/models/templates/GLM-4.6.jinja"
GEMMA4_TEMPLATE = f"{SDIST}/vendor/llama.cpp/models/templates/google-gemma-4-31B-it.jinja"

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


# DeepSeek-R1: (messages, think). Its template keeps the last system message and never
# resets its first-call and first-output flags, so each conversation has one tool-calling
# turn and one run of outputs (fucina renders later ones the sane way: docs/LLM.md).
DEEPSEEK_CASES = [
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], True),
    ([{"role": "user", "content": "Weather in Rome and the time?"},
      {"role": "assistant", "content": None, "tool_calls": [call("get_weather", {"city": "Rome", "days": 1}, "a"),
                                                            call("now", {}, "b")]},
      {"role": "tool", "tool_call_id": "a", "content": "{\"temp\": 21}"},
      {"role": "tool", "tool_call_id": "b", "content": "12:00"}], False),
    ([{"role": "system", "content": "You help."},
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!"},
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": None, "tool_calls": [call("get_weather", {"city": "Oslo", "note": "é ✓"}, "c")]},
      {"role": "tool", "tool_call_id": "c", "content": "snow"},
      {"role": "assistant", "content": "It snows in Oslo."},
      {"role": "user", "content": "Thanks!"}], True),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!"},
      {"role": "user", "content": "Bye"}], False),
]

# Llama 3.1, without tools: the system turn with its date lines, trimmed turns, a single tool
# call (arguments as an object, which its `tojson` expects) and its `ipython` result.
LLAMA_CASES = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "  Be brief.\n"}, {"role": "user", "content": " Hi "},
     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Weather?"}],
    [{"role": "user", "content": "Weather in Rome?"},
     {"role": "assistant", "content": None, "tool_calls": [call("get_weather", {"city": "Rome"}, "a")]},
     {"role": "tool", "tool_call_id": "a", "content": "sunny"}],
]

# Mistral (Nemo's template), without tools: the system prompt goes before the last user turn.
MISTRAL_CASES = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Weather?"}],
]


# GLM-4.5/4.6 (GLM-4.6's template; GLM-4.5's differs only in the arguments check), without
# the tools list: system and user turns, the thinking switch (`/nothink`, also when a user
# already wrote it), reasoning kept only after the last user turn, tool calls with string and
# JSON argument values, runs of tool results. A tool-call turn's content is "" (the template
# would print a None content as the word "None").
GLM_CASES = [
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], True),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], False),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!"},
      {"role": "user", "content": "Bye/nothink"}], False),
    ([{"role": "user", "content": "Weather in Rome and the time?"},
      {"role": "assistant", "content": "<think>\nTwo tools.\n</think>\n",
       "tool_calls": [call("get_weather", {"city": "Rome", "days": 1}, "a"), call("now", {}, "b")]},
      {"role": "tool", "tool_call_id": "a", "content": "{\"temp\": 21}"},
      {"role": "tool", "tool_call_id": "b", "content": "12:00"}], True),
    ([{"role": "system", "content": "You help."},
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": "<think>\nNeed the tool.\n</think>\n\n  Let me check. ",
       "tool_calls": [call("get_weather", {"city": "Oslo", "note": "é ✓", "days": [1, 2]}, "c")]},
      {"role": "tool", "tool_call_id": "c", "content": "snow"},
      {"role": "assistant", "content": "It snows in Oslo."},
      {"role": "user", "content": "Thanks!"}], False),
]

# Gemma 4 (its 31B-it template), without tools: the system turn (with `<|think|>` when
# thinking is on, also without a system message), untrimmed text, thought channels in an
# earlier answer (dropped), two assistant messages in a row (one turn), a later system message.
GEMMA4_CASES = [
    ([{"role": "user", "content": "Hi"}], False),
    ([{"role": "user", "content": "Hi"}], True),
    ([{"role": "system", "content": "  Be brief.\n"}, {"role": "user", "content": " Hi \n"}], False),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "<|channel>thought\nhmm<channel|>Hello! "},
      {"role": "user", "content": "Bye"}], True),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "One."},
      {"role": "assistant", "content": "Two."}, {"role": "system", "content": "Later rule."},
      {"role": "user", "content": "Go"}], False),
]


def template(name=TEMPLATE):
    ggml_sources()  # fetches and checks the sdist
    tar = os.path.join(cache, f"{SDIST}.tar.gz")
    with tarfile.open(tar) as t:
        return t.extractfile(name).read().decode()


def main():
    tpl = template()
    tok = PreTrainedTokenizerFast(tokenizer_object=train_tokenizer())
    cases = []
    for messages, tools, think in CASES:
        text = tok.apply_chat_template(messages, tools=tools or None, chat_template=tpl, tokenize=False,
                                       add_generation_prompt=True, enable_thinking=think)
        cases.append({"messages": messages, "tools": tools, "think": think, "text": text})
    ds_tpl = template(DEEPSEEK_TEMPLATE)
    # transformers' own jinja environment, given the messages as the OpenAI API has them:
    # apply_chat_template drops `content: None` keys, which this template reads (`is not
    # none`) on every assistant message, so it cannot render a tool call through it.
    compiled = _compile_jinja_template(ds_tpl)
    ds_cases = []
    for messages, think in DEEPSEEK_CASES:
        text = compiled.render(messages=messages, bos_token="<｜begin▁of▁sentence｜>", add_generation_prompt=True,
                               enable_thinking=think)
        ds_cases.append({"messages": messages, "think": think, "text": text})
    llama = _compile_jinja_template(template(LLAMA_TEMPLATE))
    llama_cases = [{"messages": m, "text": llama.render(messages=m, bos_token="<|begin_of_text|>",
                                                        add_generation_prompt=True)} for m in LLAMA_CASES]
    mistral = _compile_jinja_template(template(MISTRAL_TEMPLATE))
    mistral_cases = [{"messages": m, "text": mistral.render(messages=m, bos_token="<s>", eos_token="</s>",
                                                            add_generation_prompt=True)} for m in MISTRAL_CASES]
    glm = _compile_jinja_template(template(GLM_TEMPLATE))
    glm_cases = [{"messages": m, "think": think,
                  "text": glm.render(messages=m, add_generation_prompt=True, enable_thinking=think)}
                 for m, think in GLM_CASES]
    gemma = _compile_jinja_template(template(GEMMA4_TEMPLATE))
    gemma_cases = [{"messages": m, "think": think,
                    "text": gemma.render(messages=m, bos_token="<bos>", add_generation_prompt=True,
                                         enable_thinking=think)}
                   for m, think in GEMMA4_CASES]
    with open(out, "w") as f:
        json.dump({"generator": "tools/gen_chat_template_goldens.py", "template": TEMPLATE, "cases": cases,
                   "deepseek_template": DEEPSEEK_TEMPLATE, "deepseek_cases": ds_cases,
                   "llama_template": LLAMA_TEMPLATE, "llama_cases": llama_cases,
                   "mistral_template": MISTRAL_TEMPLATE, "mistral_cases": mistral_cases,
                   "glm_template": GLM_TEMPLATE, "glm_cases": glm_cases,
                   "gemma4_template": GEMMA4_TEMPLATE, "gemma4_cases": gemma_cases}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {out}: {len(cases)} + {len(ds_cases)} + {len(llama_cases)} + {len(mistral_cases)} + "
          f"{len(glm_cases)} + {len(gemma_cases)} conversations")


if __name__ == "__main__":
    main()
