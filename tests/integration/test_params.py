"""test_params.py - the OpenAI parameters end to end, against the real
`tessera serve` on 127.0.0.1: n and best_of, several prompts, echo with the
prompt's logprobs, logprobs (completions and chat), penalties, logit_bias,
stop_token_ids, min_tokens and ignore_eos, default max_tokens, unknown
fields, structured output (guided_choice / guided_regex / json_schema
outputs that match), and the refusals.

The model is the tiny synthetic one (random weights): its text means
nothing, so the checks are about structure and about equalities that hold
whatever the weights are (a greedy choice is the top-1 alternative, a
prompt token's logprob equals the generated logprob of the same context,
a +100 bias decides every draw).

Run by tests/params.sh (ctest) with TS_TESSERA and TS_TMPDIR set; by hand:
    TS_TESSERA=build/tessera TS_TMPDIR=/tmp/ts /usr/bin/python3 tests/integration/test_params.py -v
"""

import json
import math
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Env, Model, Server, Tenant, get_metrics, make_model, request, stream  # noqa: E402

ENV = Env("params_test")
S = None
COMP = "/v1/completions"
CHAT = "/v1/chat/completions"
EOS = 2                 # the synthetic SentencePiece vocabulary: <unk> <s> </s>
CTX_SMALL = 64
BLOCK = 16              # the config's default block_size
QUOTA_BLOCKS = 40       # tenant "quota": 640 tokens of KV, less than tiny's context (1024)
TPM = 500               # tenant "tpm": a token burst below tiny's context


def setUpModule():
    global S
    tiny = make_model(ENV)
    small = make_model(ENV, "small.gguf", ctx=CTX_SMALL)
    S = Server(ENV, "params", [Model("tiny", tiny, threads=2), Model("small", small, threads=1),
                             Model("pool", tiny, threads=1, kv_cache_bytes="128KiB", swap_bytes="32KiB")],
               [Tenant(ENV, "gold-a", "gold"), Tenant(ENV, "quota", "gold", max_kv_blocks=QUOTA_BLOCKS),
                Tenant(ENV, "tpm", "gold", tokens_per_minute=TPM), Tenant(ENV, "q2", "gold", max_queued=2)]).start()


def tearDownModule():
    rc = S.stop(timeout=20)
    if rc != 0:
        raise AssertionError("server exited with %r; stderr:\n%s" % (rc, S.stderr()[-3000:]))


def post(body, path=COMP, tenant="gold-a"):
    return request(S.port, "POST", path, body, key=S.key(tenant), timeout=60)


def ok(body, path=COMP, tenant="gold-a"):
    r = post(body, path, tenant)
    if r.status != 200:
        raise AssertionError("%s -> %d %s" % (json.dumps(body)[:300], r.status, r.body[:500]))
    return r.json()


def err(test, body, param, path=COMP, part=None):
    r = post(body, path)
    test.assertEqual(r.status, 400, r)
    e = r.json()["error"]
    test.assertEqual(e["param"], param, e)
    if part:
        test.assertIn(part, e["message"], e)
    return e


def base(**kw):
    return dict({"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 6}, **kw)


class Choices(unittest.TestCase):
    def test_n_gives_n_choices(self):
        j = ok(base(n=3, temperature=1.0, seed=7))
        self.assertEqual([c["index"] for c in j["choices"]], [0, 1, 2])
        self.assertEqual(j["usage"]["completion_tokens"], 18)
        texts = [c["text"] for c in j["choices"]]
        self.assertGreater(len(set(texts)), 1, texts)   # stream j of the seed per choice
        # Seeded: the same request gives the same choices, and choice 0 is
        # the single request with that seed (stream 0 is the plain seed).
        again = ok(base(n=3, temperature=1.0, seed=7))
        self.assertEqual([c["text"] for c in again["choices"]], texts)
        self.assertEqual(ok(base(temperature=1.0, seed=7))["choices"][0]["text"], texts[0])

    def test_best_of_picks_highest_cumulative_logprob(self):
        j = ok(base(n=4, temperature=1.0, seed=11, logprobs=0))
        sums = [sum(c["logprobs"]["token_logprobs"]) for c in j["choices"]]
        best = ok(base(n=1, best_of=4, temperature=1.0, seed=11, logprobs=0))
        self.assertEqual(len(best["choices"]), 1)
        self.assertEqual(best["choices"][0]["text"], j["choices"][sums.index(max(sums))]["text"])
        two = ok(base(n=2, best_of=4, temperature=1.0, seed=11))
        self.assertEqual([c["index"] for c in two["choices"]], [0, 1])
        order = sorted(range(4), key=lambda i: -sums[i])
        self.assertEqual([c["text"] for c in two["choices"]], [j["choices"][i]["text"] for i in order[:2]])
        self.assertIsNone(two["choices"][0]["logprobs"])   # not asked for

    def test_several_prompts_prompt_major(self):
        prompts = ["The quick brown fox", "Once upon a time"]
        j = ok(base(prompt=prompts, n=2, temperature=0))
        self.assertEqual([c["index"] for c in j["choices"]], [0, 1, 2, 3])
        for p, text in enumerate(prompts):
            single = ok(base(prompt=text, temperature=0))
            for k in range(2):
                self.assertEqual(j["choices"][p * 2 + k]["text"], single["choices"][0]["text"])
        self.assertEqual(j["usage"]["prompt_tokens"],
                         sum(ok(base(prompt=t, max_tokens=1))["usage"]["prompt_tokens"] for t in prompts))
        # Token-id lists too.
        ids = [[1, 300, 301], [1, 400]]
        j = ok(base(prompt=ids, temperature=0, max_tokens=3))
        self.assertEqual(len(j["choices"]), 2)
        self.assertEqual(j["usage"]["prompt_tokens"], 5)

    def test_streaming_n_interleaves_indexes(self):
        r, events = stream(S.port, COMP, base(n=2, temperature=1.0, seed=5, stream=True,
                                              stream_options={"include_usage": True}),
                           S.key("gold-a"), timeout=60)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(events[-1], "[DONE]")
        texts, finish = {0: "", 1: ""}, {}
        usage = None
        for ev in events[:-1]:
            j = json.loads(ev)
            if j.get("usage"):
                usage = j["usage"]
                self.assertEqual(j["choices"], [])
                continue
            for c in j["choices"]:
                texts[c["index"]] += c["text"]
                if c["finish_reason"]:
                    finish[c["index"]] = c["finish_reason"]
        self.assertEqual(set(finish), {0, 1})
        whole = ok(base(n=2, temperature=1.0, seed=5))
        self.assertEqual([texts[0], texts[1]], [c["text"] for c in whole["choices"]])
        self.assertEqual(usage["completion_tokens"], whole["usage"]["completion_tokens"])

    def test_chat_n(self):
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "n": 2,
                "temperature": 1.0, "seed": 3}
        j = ok(body, CHAT)
        self.assertEqual([c["index"] for c in j["choices"]], [0, 1])
        for c in j["choices"]:
            self.assertEqual(c["message"]["role"], "assistant")

    def test_choice_refusals(self):
        err(self, base(n=2, best_of=1), "best_of")
        err(self, base(best_of=3, stream=True), "best_of")
        err(self, base(n=0), "n")
        err(self, base(n=200), "n")
        err(self, base(prompt=["a"] * 100, n=3), "n")
        err(self, base(suffix="x"), "suffix")


class Logprobs(unittest.TestCase):
    def test_completion_logprobs_shape_and_sums(self):
        j = ok(base(logprobs=5, temperature=0, max_tokens=5))
        lp = j["choices"][0]["logprobs"]
        self.assertEqual(set(lp), {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
        n = j["usage"]["completion_tokens"]
        self.assertEqual(len(lp["tokens"]), n)
        self.assertEqual(len(lp["token_logprobs"]), n)
        self.assertEqual(lp["text_offset"][0], 0)
        for i in range(n):
            top = lp["top_logprobs"][i]
            self.assertGreaterEqual(len(top), 1)
            self.assertLessEqual(len(top), 5)
            vals = list(top.values())
            self.assertEqual(vals, sorted(vals, reverse=True))
            self.assertLessEqual(sum(math.exp(v) for v in vals), 1.0 + 1e-4)
            # Greedy: the chosen token is the most likely one.
            self.assertAlmostEqual(lp["token_logprobs"][i], vals[0], places=4)
            self.assertLessEqual(lp["token_logprobs"][i], 0.0)
        self.assertEqual("".join(lp["tokens"]).lstrip(), j["choices"][0]["text"].lstrip())

    def test_echo_prompt_logprobs_match_generation(self):
        r = request(S.port, "POST", "/tokenize", {"model": "tiny", "prompt": "The quick brown fox"},
                    key=S.key("gold-a"))
        ids = r.json()["tokens"]
        self.assertGreaterEqual(len(ids), 3)
        j = ok(base(prompt=ids, echo=True, logprobs=3, max_tokens=1, temperature=0))
        c = j["choices"][0]
        lp = c["logprobs"]
        self.assertEqual(len(lp["tokens"]), len(ids) + 1)
        self.assertIsNone(lp["token_logprobs"][0])
        self.assertIsNone(lp["top_logprobs"][0])
        # The prompt's token k has the logprob a request of the first k
        # tokens gives, as its top alternatives show.
        for k in range(1, len(ids)):
            g = ok(base(prompt=ids[:k], logprobs=3, max_tokens=1, temperature=0))
            top = g["choices"][0]["logprobs"]["top_logprobs"][0]
            for tok_text, v in top.items():
                self.assertAlmostEqual(lp["top_logprobs"][k][tok_text], v, places=3)
        # The generated token is the same as without echo.
        plain = ok(base(prompt=ids, logprobs=3, max_tokens=1, temperature=0))
        self.assertAlmostEqual(lp["token_logprobs"][-1], plain["choices"][0]["logprobs"]["token_logprobs"][0],
                               places=4)
        self.assertTrue(c["text"].endswith(plain["choices"][0]["text"]))
        # text_offset runs over the token texts.
        offs = lp["text_offset"]
        for i in range(1, len(offs)):
            self.assertEqual(offs[i] - offs[i - 1], len(lp["tokens"][i - 1].encode("utf-8")))

    def test_echo_text(self):
        j = ok(base(prompt="Hello there", echo=True, max_tokens=2, temperature=0))
        plain = ok(base(prompt="Hello there", max_tokens=2, temperature=0))
        self.assertEqual(j["choices"][0]["text"], "Hello there" + plain["choices"][0]["text"])

    def test_chat_logprobs(self):
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                "temperature": 0, "logprobs": True, "top_logprobs": 2}
        j = ok(body, CHAT)
        content = j["choices"][0]["logprobs"]["content"]
        self.assertEqual(len(content), j["usage"]["completion_tokens"])
        for t in content:
            self.assertEqual(set(t), {"token", "logprob", "bytes", "top_logprobs"})
            self.assertEqual(bytes(t["bytes"]).decode("utf-8", "replace"), t["token"])
            self.assertEqual(len(t["top_logprobs"]), 2)
            self.assertAlmostEqual(t["top_logprobs"][0]["logprob"], t["logprob"], places=4)
        body.pop("top_logprobs")
        j = ok(body, CHAT)
        self.assertEqual(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"], [])
        body["logprobs"] = False
        self.assertIsNone(ok(body, CHAT)["choices"][0]["logprobs"])
        err(self, dict(body, top_logprobs=2), "top_logprobs", CHAT)
        err(self, dict(body, logprobs=True, top_logprobs=21), "top_logprobs", CHAT)

    def test_streamed_echo_with_logprobs(self):
        body = base(prompt="Hello there", echo=True, logprobs=1, temperature=0, max_tokens=3)
        r, events = stream(S.port, COMP, dict(body, stream=True), S.key("gold-a"), timeout=60)
        self.assertEqual(r.status, 200, r)
        first = json.loads(events[0])["choices"][0]
        self.assertEqual(first["text"], "Hello there")
        lp = first["logprobs"]
        self.assertIsNone(lp["token_logprobs"][0])
        self.assertTrue(all(v is not None for v in lp["token_logprobs"][1:]), lp)
        whole = ok(body)["choices"][0]
        text = "".join(c["text"] for ev in events[:-1] for c in json.loads(ev)["choices"])
        self.assertEqual(text, whole["text"])
        n_prompt = len(lp["tokens"])
        self.assertEqual(lp["token_logprobs"][1:], whole["logprobs"]["token_logprobs"][1:n_prompt])
        # n = 3: every choice's echo carries the same prompt logprobs (the
        # first sequence's), and each choice's text matches the whole answer's.
        body = dict(body, n=3, temperature=1.0, seed=9)
        r, events = stream(S.port, COMP, dict(body, stream=True), S.key("gold-a"), timeout=60)
        self.assertEqual(r.status, 200, r)
        echoes, texts = {}, {0: "", 1: "", 2: ""}
        for ev in events[:-1]:
            for c in json.loads(ev)["choices"]:
                if c["index"] not in echoes:
                    echoes[c["index"]] = c["logprobs"]["token_logprobs"]
                texts[c["index"]] += c["text"]
        self.assertEqual(sorted(echoes), [0, 1, 2])
        self.assertEqual(echoes[1], echoes[0])
        self.assertEqual(echoes[2], echoes[0])
        for x, y in zip(echoes[0][1:], lp["token_logprobs"][1:]):     # another batch: float noise
            self.assertAlmostEqual(x, y, delta=1e-3)
        whole = ok(body)
        self.assertEqual([texts[i] for i in range(3)], [c["text"] for c in whole["choices"]])

    def test_streamed_logprobs_cover_every_token(self):
        r, events = stream(S.port, COMP, base(logprobs=1, temperature=0, max_tokens=6, stream=True),
                           S.key("gold-a"), timeout=60)
        self.assertEqual(r.status, 200, r)
        n = 0
        for ev in events[:-1]:
            for c in json.loads(ev)["choices"]:
                if c["logprobs"]:
                    n += len(c["logprobs"]["tokens"])
        self.assertEqual(n, 6)


class Sampling(unittest.TestCase):
    def test_logit_bias_decides(self):
        j = ok(base(logit_bias={"300": 100}, max_tokens=4, temperature=1.0, logprobs=1))
        toks = j["choices"][0]["logprobs"]["tokens"]
        self.assertEqual(len(set(toks)), 1, toks)
        t = request(S.port, "POST", "/detokenize", {"model": "tiny", "tokens": [300]}, key=S.key("gold-a")).json()
        self.assertEqual(toks[0].strip(), t["prompt"].strip())
        err(self, base(logit_bias={"300": 101}), "logit_bias.300")
        err(self, base(logit_bias={"x": 1}), "logit_bias.x")
        err(self, base(logit_bias={"99999": 1}), "logit_bias")

    def test_stop_token_ids(self):
        j = ok(base(logit_bias={"300": 100}, stop_token_ids=[300], max_tokens=5))
        c = j["choices"][0]
        self.assertEqual(c["finish_reason"], "stop")
        self.assertEqual(c["text"], "")
        self.assertEqual(j["usage"]["completion_tokens"], 1)
        err(self, base(stop_token_ids=[99999]), "stop_token_ids")

    def test_stop_strings_wait_for_min_tokens(self):
        # As vLLM: a stop string counts from the min_tokens-th token on.
        full = ok(base(temperature=0, max_tokens=10, ignore_eos=True))["choices"][0]["text"]
        self.assertGreaterEqual(len(full), 2, full)
        stop = full[:2]
        cut = ok(base(temperature=0, max_tokens=10, ignore_eos=True, stop=[stop]))["choices"][0]
        self.assertEqual(cut["text"], "")
        late = ok(base(temperature=0, max_tokens=10, ignore_eos=True, stop=[stop], min_tokens=6))["choices"][0]
        self.assertTrue(late["text"].startswith(stop), late)
        self.assertTrue(full.startswith(late["text"]), (full, late))

    def test_min_tokens_and_ignore_eos(self):
        eos = {str(EOS): 100}
        j = ok(base(logit_bias=eos, max_tokens=8))
        self.assertEqual(j["choices"][0]["finish_reason"], "stop")
        self.assertEqual(j["usage"]["completion_tokens"], 1)
        j = ok(base(logit_bias=eos, max_tokens=8, min_tokens=4))
        self.assertEqual(j["choices"][0]["finish_reason"], "stop")
        self.assertEqual(j["usage"]["completion_tokens"], 5)
        j = ok(base(logit_bias=eos, max_tokens=8, ignore_eos=True))
        self.assertEqual(j["choices"][0]["finish_reason"], "length")
        self.assertEqual(j["usage"]["completion_tokens"], 8)
        err(self, base(min_tokens=9, max_tokens=8), "min_tokens")

    def test_penalties_exact_through_logprobs(self):
        # Logprobs are the log-softmax of the processed row, so the gap
        # between two tokens' logprobs is the gap between their processed
        # logits: a penalty shows exactly there, whatever the weights.
        ids = request(S.port, "POST", "/tokenize", {"model": "tiny", "prompt": "The quick brown fox"},
                      key=S.key("gold-a")).json()["tokens"]
        req = dict(base(prompt=ids, max_tokens=2, temperature=0, logprobs=20, echo=True))
        a = ok(req)["choices"][0]["logprobs"]
        n = len(ids)
        prompt_texts = set(a["tokens"][:n])
        # frequency_penalty: at the second position, the first generated
        # token moves by exactly -f against every other. A prompt where
        # that token is among the top 20 there shows it; a negative f
        # keeps it there.
        f = -1.25
        for k in range(3, 200):
            fr = dict(base(prompt=[1, k, k + 1], max_tokens=2, temperature=0, logprobs=20))
            fa = ok(fr)["choices"][0]["logprobs"]
            g = fa["tokens"][0]
            # Byte tokens of a split character all read U+FFFD: not one key.
            if "\ufffd" not in g and g in fa["top_logprobs"][1]:
                break
        else:
            self.fail("no prompt keeps its first token among the next top 20")
        fb = ok(dict(fr, frequency_penalty=f))["choices"][0]["logprobs"]
        self.assertEqual(fb["tokens"][0], g)                # nothing to penalise at the first
        da, db = fa["top_logprobs"][1], fb["top_logprobs"][1]
        others = [t for t in da if t in db and t != g]
        self.assertTrue(g in db and others, (da, db))
        for y in others:
            self.assertAlmostEqual(db[g] - db[y], da[g] - da[y] - f, places=3)
        # presence_penalty likewise, once per token.
        fc = ok(dict(fr, presence_penalty=-0.75))["choices"][0]["logprobs"]["top_logprobs"][1]
        self.assertIn(g, fc)
        for y in [t for t in da if t in fc and t != g]:
            self.assertAlmostEqual(fc[g] - fc[y], da[g] - da[y] + 0.75, places=3)
        # repetition_penalty: tokens outside the prompt keep their gaps.
        c = ok(dict(req, repetition_penalty=1.7, max_tokens=1))["choices"][0]["logprobs"]
        da, dc = a["top_logprobs"][n], c["top_logprobs"][n]
        free = [t for t in da if t in dc and t not in prompt_texts and "\ufffd" not in t]
        self.assertGreaterEqual(len(free), 2)
        for y in free[1:]:
            self.assertAlmostEqual(dc[free[0]] - dc[y], da[free[0]] - da[y], places=3)
        # The prompt's own logprobs are the model's, untouched by penalties.
        for k in range(1, n):
            self.assertAlmostEqual(c["token_logprobs"][k], a["token_logprobs"][k], places=4)

    def test_penalties_accepted_and_checked(self):
        for f, v in (("presence_penalty", 1.5), ("frequency_penalty", 2.0), ("repetition_penalty", 1.3),
                     ("min_p", 0.1), ("top_k", 5)):
            ok(base(**{f: v, "max_tokens": 12}))
        for f, v in (("presence_penalty", 2.5), ("frequency_penalty", -3), ("repetition_penalty", 0),
                     ("min_p", 1.5)):
            err(self, base(**{f: v}), f)


class Fields(unittest.TestCase):
    def test_unknown_fields_are_refused_by_name(self):
        e = err(self, base(frobnicate=1), "frobnicate")
        self.assertEqual(e["code"], "unknown_parameter")
        err(self, {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "echo": True}, "echo", CHAT)

    def test_allow_listed_fields(self):
        ok(base(user="u1", metadata={"a": "b"}, store=False, service_tier="auto"))
        ok({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
            "parallel_tool_calls": True, "user": "u"}, CHAT)

    def test_structured_output(self):
        # guided_choice: exactly one of the strings.
        for seed in range(3):
            j = ok(base(guided_choice=["yes", "no", "maybe so"], max_tokens=20, temperature=1.0, seed=seed))
            c = j["choices"][0]
            self.assertIn(c["text"], ["yes", "no", "maybe so"])
            self.assertEqual(c["finish_reason"], "stop")
        # guided_regex: the whole output matches.
        j = ok(base(guided_regex="[a-c]{3}-[0-9]{2}", max_tokens=30, temperature=1.0, seed=4))
        self.assertRegex(j["choices"][0]["text"], r"^[a-c]{3}-[0-9]{2}$")
        # json_schema through response_format (chat) and guided_json: parses and fits.
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"},
                                                  "tag": {"enum": ["red", "green"]}},
                  "required": ["ok", "n", "tag"], "additionalProperties": False}
        body = {"model": "tiny", "messages": [{"role": "user", "content": "json please"}], "max_tokens": 800,
                "temperature": 0.7, "seed": 1, "n": 2,
                "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}}
        j = ok(body, CHAT)
        for c in j["choices"]:
            self.assertEqual(c["finish_reason"], "stop", c)
            v = json.loads(c["message"]["content"])
            self.assertEqual(set(v), {"ok", "n", "tag"})
            self.assertIsInstance(v["ok"], bool)
            self.assertIsInstance(v["n"], int)
            self.assertIn(v["tag"], ["red", "green"])
        j = ok(base(guided_json=schema, max_tokens=800, temperature=0))
        self.assertEqual(set(json.loads(j["choices"][0]["text"])), {"ok", "n", "tag"})
        # A schema outside the subset is a 400 naming the field.
        e = err(self, base(guided_json={"type": "string", "format": "email"}), "guided_json")
        self.assertIn("format", e["message"])
        err(self, base(guided_regex="(a"), "guided_regex")
        ok(base(response_format={"type": "text"}))

    def test_guided_end_tokens(self):
        # Under a grammar a stop_token_id ends the output like EOS wherever
        # the output is complete: "[a-c]+" is complete after one token and
        # could go on; forced by a +100 bias, the stop id ends it there
        # (the last logprob token is its piece, not "</s>"), and it is not
        # part of the text. Without it registered the grammar masked the
        # stop id, and the output ran on.
        stop_id = 300
        j = ok(base(guided_regex="[a-c]+", max_tokens=20, temperature=0, logprobs=0,
                    stop_token_ids=[stop_id], logit_bias={str(stop_id): 100}))
        c = j["choices"][0]
        self.assertRegex(c["text"], r"^[a-c]+$")
        self.assertEqual(c["finish_reason"], "stop")
        toks = c["logprobs"]["tokens"]
        self.assertEqual(len(toks), 2, toks)
        self.assertNotEqual(toks[-1], "</s>", toks)
        # n > 1 shares one compiled grammar: every choice still follows it.
        j = ok(base(guided_choice=["yes", "no", "maybe so"], n=4, max_tokens=20, temperature=1.0, seed=3))
        for c in j["choices"]:
            self.assertIn(c["text"], ["yes", "no", "maybe so"])

    def test_echo_logprobs_answer_is_bounded(self):
        # 2 prompts x 128 sequences x 500 tokens x 21 entries: past the
        # bound on prompt logprob entries, refused before any work.
        ids = [1] + [300] * 499
        e = err(self, base(prompt=[ids, ids], n=128, echo=True, logprobs=20, max_tokens=1), "echo", part="at most")
        self.assertIn("prompt logprob entries", e["message"])
        # Echo with prompt logprobs of a few choices: the same prompt
        # logprobs in every choice (only the first sequence computes them).
        j = ok(base(n=3, echo=True, logprobs=2, max_tokens=2, temperature=1.0, seed=2))
        n_prompt = j["usage"]["prompt_tokens"]
        heads = [c["logprobs"]["token_logprobs"][:n_prompt] for c in j["choices"]]
        self.assertIsNone(heads[0][0])
        self.assertTrue(all(x is not None for x in heads[0][1:]), heads[0])
        self.assertEqual(heads[1], heads[0])
        self.assertEqual(heads[2], heads[0])
        tops = [c["logprobs"]["top_logprobs"][:n_prompt] for c in j["choices"]]
        self.assertEqual(tops[1], tops[0])

    def test_default_max_tokens(self):
        j = ok({"model": "tiny", "prompt": "a", "ignore_eos": True})
        self.assertEqual(j["usage"]["completion_tokens"], 16)
        j = ok({"model": "small", "messages": [{"role": "user", "content": "a"}], "ignore_eos": True}, CHAT)
        self.assertEqual(j["usage"]["prompt_tokens"] + j["usage"]["completion_tokens"], CTX_SMALL)

    def test_default_max_tokens_fits_the_kv_quota(self):
        # A chat without max_tokens gets the rest of the context capped by
        # the tenant's KV quota (640 tokens of tiny's 1024): not a refusal.
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "a"}], "ignore_eos": True}
        j = ok(chat, CHAT, tenant="quota")
        used = j["usage"]["prompt_tokens"] + j["usage"]["completion_tokens"]
        self.assertEqual(used, QUOTA_BLOCKS * BLOCK, j["usage"])
        # An explicit max_tokens past the quota is still refused.
        r = post(dict(chat, max_tokens=900), CHAT, tenant="quota")
        self.assertEqual(r.status, 429, r)
        self.assertIn("KV quota", r.json()["error"]["message"])

    def test_default_max_tokens_fits_the_kv_pool(self):
        # "pool" holds fewer tokens than tiny's context (1024): a chat
        # without max_tokens gets what the pool can hold, not a 400.
        chat = {"model": "pool", "messages": [{"role": "user", "content": "a"}], "ignore_eos": True}
        j = ok(chat, CHAT)
        used = j["usage"]["prompt_tokens"] + j["usage"]["completion_tokens"]
        self.assertLess(used, 1024, j["usage"])
        self.assertEqual(used % BLOCK, 0, j["usage"])     # the whole pool, in blocks
        r = post(dict(chat, max_tokens=1000), CHAT)
        self.assertEqual(r.status, 400, r)

    def test_default_max_tokens_within_the_token_burst(self):
        # tiny's context (1024) is more than the tenant's token burst: the
        # default reserves at most the burst, not a refusal that no wait
        # cures (429 too_large); the real use is charged at the end, so the
        # next request waits (429 rate_tokens, with Retry-After).
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "a"}], "ignore_eos": True}
        j = ok(chat, CHAT, tenant="tpm")
        self.assertGreater(j["usage"]["completion_tokens"], TPM)
        r = post(chat, CHAT, tenant="tpm")
        self.assertEqual(r.status, 429, r)
        self.assertEqual(r.json()["error"]["code"], "rate_tokens", r)
        self.assertIn("retry-after", {k.lower() for k in r.headers}, r.headers)

    def test_failed_sequence_answers_at_once(self):
        # Prompt 1 (100 tokens + 600) can never fit the tenant's 640-token
        # quota and is refused at admission; prompt 0 alone would run 600
        # tokens. The refusal is the answer at once and prompt 0 is
        # cancelled, not generated to the end and thrown away.
        def generated():
            samples = get_metrics(S.port, S.admin_key)
            return sum(v for n, l, v in samples
                       if n == "tessera_completion_tokens_total" and l.get("tenant") == "quota")
        before = generated()
        body = {"model": "tiny", "prompt": [[1, 300], [1] + [300] * 99], "max_tokens": 600, "ignore_eos": True}
        r = post(body, tenant="quota")
        self.assertEqual(r.status, 429, r)
        self.assertIn("KV quota", r.json()["error"]["message"])
        time.sleep(0.5)
        self.assertLess(generated() - before, 400)
        # Streaming: the error event ends the stream and the rest is cancelled.
        before = generated()
        r, events = stream(S.port, COMP, dict(body, stream=True), S.key("quota"), timeout=60)
        self.assertEqual(r.status, 429, r)
        time.sleep(0.5)
        self.assertLess(generated() - before, 400)

    def test_more_sequences_than_the_queue_takes(self):
        r = post(base(n=3), tenant="q2")
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["error"]["param"], "n")
        r = post(base(n=1, best_of=3), tenant="q2")
        self.assertEqual(r.json()["error"]["param"], "best_of", r)
        ok(base(n=2), tenant="q2")

    def test_max_completion_tokens_on_completions(self):
        j = ok({"model": "tiny", "prompt": "a", "max_completion_tokens": 2, "ignore_eos": True})
        self.assertEqual(j["usage"]["completion_tokens"], 2)


if __name__ == "__main__":
    unittest.main()
