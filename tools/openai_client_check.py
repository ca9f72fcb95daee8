#!/usr/bin/env python3
"""The server as the official `openai` Python SDK sees it (run by tools/openai_check against
`serve` on the tiny default model; every check fails if the parameter were ignored).

    python tools/openai_client_check.py BASE_URL   (the server address with /v1)
"""
import json
import sys

import jsonschema
import openai
import pydantic
from openai import OpenAI

base = sys.argv[1]
client = OpenAI(base_url=base, api_key="none", max_retries=0, timeout=120)
checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise SystemExit(f"FAILED: {what}")
    checks += 1


def expect_error(kind, what, **kw):
    try:
        client.chat.completions.create(**kw)
    except kind as e:
        check(True, what)
        return e
    raise SystemExit(f"FAILED: {what}: no {kind.__name__}")


model = client.models.list().data[0].id
check(client.models.retrieve(model).id == model, "models.retrieve")
msgs = [{"role": "user", "content": "What is the capital of France?"}]

# Plain chat, greedy: deterministic, with usage.
r1 = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0)
r2 = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0)
text = r1.choices[0].message.content
check(text and text == r2.choices[0].message.content, "greedy chat is deterministic")
check(r1.usage.total_tokens == r1.usage.prompt_tokens + r1.usage.completion_tokens, "usage adds up")

# Streaming with include_usage: the same text, then a usage chunk with no choices.
stream = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0, stream=True,
                                        stream_options={"include_usage": True})
pieces, usage = [], None
for c in stream:
    if c.choices:
        pieces.append(c.choices[0].delta.content or "")
    else:
        usage = c.usage
check("".join(pieces) == text, "stream carries the same text")
check(usage is not None and usage.completion_tokens == r1.usage.completion_tokens, "include_usage chunk")

# developer == system.
dev = client.chat.completions.create(model=model, max_tokens=8, temperature=0,
                                     messages=[{"role": "developer", "content": "Be brief."}] + msgs)
sys_ = client.chat.completions.create(model=model, max_tokens=8, temperature=0,
                                      messages=[{"role": "system", "content": "Be brief."}] + msgs)
check(dev.choices[0].message.content == sys_.choices[0].message.content, "developer role is the system role")


# Structured output through the SDK's own parse(): a pydantic model, a strict JSON schema.
class Answer(pydantic.BaseModel):
    ok: bool
    n: int = pydantic.Field(ge=0, le=99)
    color: str = pydantic.Field(pattern="^(red|green|blue)$")


schema = Answer.model_json_schema()
for seed in range(3):
    parsed = client.chat.completions.parse(model=model, messages=[{"role": "user", "content": "Describe yourself."}],
                                           response_format=Answer, temperature=1, seed=seed, max_tokens=96)
    msg = parsed.choices[0].message
    check(isinstance(msg.parsed, Answer), f"parse() gives an Answer (seed {seed}): {msg.content!r}")
    jsonschema.validate(json.loads(msg.content), schema)
    check(parsed.choices[0].finish_reason == "stop", "a complete object ends the answer")
obj = client.chat.completions.create(model=model, messages=msgs, temperature=0.8, seed=5, max_tokens=96,
                                     response_format={"type": "json_object"})
if obj.choices[0].finish_reason == "stop":
    check(isinstance(json.loads(obj.choices[0].message.content), dict), "json_object gives an object")
e = expect_error(openai.BadRequestError, "a bad schema is a 400", model=model, messages=msgs,
                 response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 7}}})
check("response_format" in str(e), "the error names response_format")

# logprobs: one entry per token, the greedy token is the most likely one.
lp = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, temperature=0, logprobs=True,
                                    top_logprobs=3)
content = lp.choices[0].logprobs.content
check(len(content) == lp.usage.completion_tokens, "one logprob per token")
for t in content:
    check(t.logprob <= 0 and len(t.top_logprobs) == 3, "logprob and three alternatives")
    check(t.top_logprobs[0].token == t.token and abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6,
          "greedy picks the most likely token")
    check(all(a.logprob >= b.logprob for a, b in zip(t.top_logprobs, t.top_logprobs[1:])), "alternatives sorted")
check("".join(t.token for t in content) == lp.choices[0].message.content, "tokens spell the answer")

# logit_bias: +100 forces one token at every step.
forced_id = 47
f = client.chat.completions.create(model=model, messages=msgs, max_tokens=5, temperature=0,
                                   logit_bias={str(forced_id): 100}, logprobs=True)
toks = [t.token for t in f.choices[0].logprobs.content]
check(len(toks) == 5 and len(set(toks)) == 1, f"logit_bias forces a token: {toks}")
check(toks[0] not in [t.token for t in content[:1]], "the forced token is not the greedy one")

# Penalties change the greedy answer on a prompt whose answer repeats tokens.
hello = [{"role": "user", "content": "Hello"}]
plain = client.chat.completions.create(model=model, messages=hello, max_tokens=12, temperature=0)
pen = client.chat.completions.create(model=model, messages=hello, max_tokens=12, temperature=0, frequency_penalty=1.0)
check(plain.choices[0].message.content != pen.choices[0].message.content, "frequency_penalty has an effect")

# Text completions, with the legacy logprobs.
c = client.completions.create(model=model, prompt="Hello world", max_tokens=5, temperature=0, logprobs=2)
check("".join(c.choices[0].logprobs.tokens) == c.choices[0].text, "completion logprobs spell the text")
check(all(len(t) == 2 for t in c.choices[0].logprobs.top_logprobs), "two alternatives per token")

# What is wrong or not supported is an error, never a silent 200.
expect_error(openai.NotFoundError, "unknown model is a 404", model="gpt-4o", messages=msgs)
expect_error(openai.BadRequestError, "temperature 5 is a 400", model=model, messages=msgs, temperature=5)
e = expect_error(openai.BadRequestError, "legacy functions are refused", model=model, messages=msgs,
                 functions=[{"name": "f", "parameters": {"type": "object"}}])
check("functions" in str(e), "the error names functions")

# Tools: a required call comes back as tool_calls the SDK parses, with arguments that
# follow the tool's schema; the call and its result go back into the conversation.
weather = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                   "required": ["city"], "additionalProperties": False}}}
ask = [{"role": "user", "content": "Weather in Rome?"}]
for seed in range(3):
    r = client.chat.completions.create(model=model, messages=ask, tools=[weather], tool_choice="required",
                                       parallel_tool_calls=False, temperature=1, seed=seed, max_tokens=96)
    choice = r.choices[0]
    check(choice.finish_reason == "tool_calls", f"finish_reason tool_calls: {choice}")
    (tc,) = choice.message.tool_calls
    check(tc.type == "function" and tc.function.name == "get_weather", "the call names the tool")
    args = json.loads(tc.function.arguments)
    jsonschema.validate(args, weather["function"]["parameters"])
    follow = client.chat.completions.create(model=model, max_tokens=8, temperature=0, tools=[weather], messages=ask + [
        {"role": "assistant", "content": None, "tool_calls": [tc.model_dump()]},
        {"role": "tool", "tool_call_id": tc.id, "content": "sunny"}])
    check(follow.choices[0].message.content is not None, "a conversation with the call and its result")
# Streamed through the SDK's own accumulator.
with client.chat.completions.stream(model=model, messages=ask, tools=[weather], tool_choice="required",
                                    parallel_tool_calls=False, temperature=1, seed=7, max_tokens=96) as st:
    final = st.get_final_completion()
(tc,) = final.choices[0].message.tool_calls
jsonschema.validate(json.loads(tc.function.arguments), weather["function"]["parameters"])
check(final.choices[0].finish_reason == "tool_calls", "streamed tool call")

# The Responses API: the same greedy answer as chat, streamed events that add up to it,
# parse() under a schema, function calls and their outputs as input items.
brief = [{"role": "system", "content": "Be brief."}] + msgs
chat_ref = client.chat.completions.create(model=model, messages=brief, max_tokens=12, temperature=0)
r = client.responses.create(model=model, input=msgs[0]["content"], instructions="Be brief.", max_output_tokens=12,
                            temperature=0)
check(r.output_text == chat_ref.choices[0].message.content, "responses answers as chat does")
check(r.usage.output_tokens == chat_ref.usage.completion_tokens, "responses usage")
check(r.status == ("incomplete" if chat_ref.choices[0].finish_reason == "length" else "completed"), "responses status")
events, deltas, final = [], "", None
for e in client.responses.create(model=model, input=msgs[0]["content"], instructions="Be brief.",
                                 max_output_tokens=12, temperature=0, stream=True):
    events.append(e.type)
    if e.type == "response.output_text.delta":
        deltas += e.delta
    if e.type in ("response.completed", "response.incomplete"):
        final = e.response
check(events[:2] == ["response.created", "response.in_progress"] and final is not None, f"event order: {events}")
check(deltas == r.output_text == final.output_text, "streamed deltas add up")
for seed in range(2):
    p = client.responses.parse(model=model, input="Describe yourself.", text_format=Answer, temperature=1,
                               max_output_tokens=96, extra_body={"seed": seed})
    check(isinstance(p.output_parsed, Answer), f"responses.parse gives an Answer: {p.output_text!r}")
flat = [{"type": "function", "name": "get_weather", "parameters": weather["function"]["parameters"]}]
t = client.responses.create(model=model, input="Weather in Rome?", tools=flat, tool_choice="required",
                            parallel_tool_calls=False, temperature=1, max_output_tokens=96)
(fc,) = [o for o in t.output if o.type == "function_call"]
jsonschema.validate(json.loads(fc.arguments), weather["function"]["parameters"])
t2 = client.responses.create(model=model, tools=flat, max_output_tokens=8, temperature=0, input=[
    {"role": "user", "content": "Weather in Rome?"}, fc.model_dump(),
    {"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"}])
check(t2.output_text is not None, "a function call and its output as input items")
with client.responses.stream(model=model, input="Weather in Rome?", tools=flat, tool_choice="required",
                             parallel_tool_calls=False, temperature=1, max_output_tokens=96) as st:
    fr = st.get_final_response()
check([o.type for o in fr.output] == ["function_call"], "streamed function call")
# Reasoning: biased into a <think> block (ids 751/752 in the tiny model's vocabulary), the
# Responses stream carries it as a reasoning item with reasoning_text deltas, as chat's
# reasoning_content.
think = {"logit_bias": {"751": 12, "752": 9}, "frequency_penalty": 2}
cr = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=16, temperature=0, extra_body=think)
want_r = getattr(cr.choices[0].message, "reasoning_content", None) or (cr.choices[0].message.model_extra or {}).get(
    "reasoning_content")
check(bool(want_r), f"the biased chat answer reasons: {cr.choices[0].message}")
thought, rr = "", None
for e in client.responses.create(model=model, input="Hi", max_output_tokens=16, temperature=0, stream=True,
                                 extra_body=think):
    if e.type == "response.reasoning_text.delta":
        thought += e.delta
    if e.type in ("response.completed", "response.incomplete"):
        rr = e.response
check([o.type for o in rr.output] == ["reasoning", "message"], f"reasoning then message: {rr.output}")
check(thought == want_r == rr.output[0].content[0].text, "reasoning_text deltas add up to chat's reasoning_content")
check(rr.output_text == cr.choices[0].message.content, "the reply after the reasoning is chat's")
# previous_response_id: the stored conversation comes first, as chat's full history would.
r1 = client.responses.create(model=model, input="Hi", max_output_tokens=8, temperature=0)
r2 = client.responses.create(model=model, input="And then?", max_output_tokens=8, temperature=0,
                             previous_response_id=r1.id)
c2 = client.chat.completions.create(model=model, max_tokens=8, temperature=0, messages=[
    {"role": "user", "content": "Hi"}, {"role": "assistant", "content": r1.output_text},
    {"role": "user", "content": "And then?"}])
check(r2.output_text == c2.choices[0].message.content, "previous_response_id continues the conversation")
try:
    client.responses.create(model=model, input="Hi", previous_response_id="resp_unknown")
    raise SystemExit("FAILED: an unknown previous_response_id was accepted")
except openai.BadRequestError as e:
    check("previous_response_id" in str(e), "an unknown previous_response_id is refused by name")
# retrieve and delete a stored response.
got = client.responses.retrieve(r1.id)
check(got.id == r1.id and got.output_text == r1.output_text, "responses.retrieve gives the stored response")
client.responses.delete(r1.id)
try:
    client.responses.retrieve(r1.id)
    raise SystemExit("FAILED: a deleted response was still retrieved")
except openai.NotFoundError:
    check(True, "a deleted response is gone (404)")

print(f"openai {openai.__version__}: {checks} checks passed against {base}")
