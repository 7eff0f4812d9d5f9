"""test_embed_serve.py - a chat model and an embedding model in one server.

Two tenants, each on its own model: "writer" generates with a tiny llama,
"indexer" embeds with a tiny BERT (tests/ref/bert_gguf.py). Checks, against
the real `tessera serve` on 127.0.0.1:
  - /v1/models says which model is which, with context lengths and where
    each chat template came from;
  - /v1/embeddings: every input shape OpenAI allows, the vectors equal the
    float64 NumPy reference (tests/ref/bert_ref.py) within 1e-4 with
    cosine > 0.9999, unit norm, the same vector alone or inside a batch,
    base64 equal to float, usage counted in tokens;
  - both models serve at the same time, under the same fair scheduler, and
    the embedding requests are counted per tenant in /metrics;
  - /tokenize and /detokenize (prompt, token ids, messages, special
    tokens on and off);
  - every bad request gets a clear 4xx and nothing else changes.
"""

import base64
import json
import os
import struct
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
from harness import (Env, Model, Server, Tenant, get_metrics, make_model, metric_value, request,  # noqa: E402
                     wait_until)

import numpy as np  # noqa: E402
import bert_gguf  # noqa: E402
from bert_ref import BertRef  # noqa: E402

ENV = None
SRV = None
REF = None
CTX = 64
# A ChatML-style template with a refusal, given inline in the config (the
# tiny model's GGUF has none): rendered by tessera's Jinja interpreter.
TEMPLATE = ("{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tool turns, please') }}"
            "{% endif %}{{ '<|im_start|>' + m.role + '\\n' + (m.content | trim) + '<|im_end|>\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def setUpModule():
    global ENV, SRV, REF
    ENV = Env("embed_serve")
    chat = make_model(ENV, "chat.gguf")
    emb = os.path.join(ENV.work, "bert.gguf")
    if bert_gguf.main(["bert_gguf.py", emb, "--pooling", "mean", "--ctx", str(CTX), "--seed", "7"]) not in (0, None):
        raise RuntimeError("bert_gguf.py failed")
    REF = BertRef(emb)
    tenants = [Tenant(ENV, "writer", "gold"), Tenant(ENV, "indexer", "silver"),
               Tenant(ENV, "small", "bronze", max_queued=2, requests_per_minute=3)]
    SRV = Server(ENV, "embed_serve", [Model("chat", chat, chat_template=json.dumps(TEMPLATE)),
                                      Model("embed", emb, max_seqs=8, budget_max=256)], tenants)
    SRV.start()


def tearDownModule():
    if SRV:
        rc = SRV.stop()
        if rc != 0:
            raise RuntimeError("server exited with %r: %s" % (rc, SRV.stderr()[-2000:]))


def post(path, body, tenant="indexer", key=None):
    return request(SRV.port, "POST", path, body, key=key if key is not None else SRV.key(tenant), timeout=60)


def vectors(r):
    assert r.status == 200, r
    j = r.json()
    assert j["object"] == "list" and j["model"] == "embed", j
    assert [d["index"] for d in j["data"]] == list(range(len(j["data"]))), j
    return [np.asarray(d["embedding"], dtype=np.float64) for d in j["data"]], j


def tokenize(text, model="embed", special=True):
    r = post("/tokenize", {"model": model, "prompt": text, "add_special_tokens": special})
    assert r.status == 200, r
    return r.json()["tokens"]


class Models(unittest.TestCase):
    def test_kinds(self):
        r = request(SRV.port, "GET", "/v1/models", key=SRV.key("writer"))
        self.assertEqual(r.status, 200, r)
        by = {m["id"]: m for m in r.json()["data"]}
        self.assertEqual(by["chat"]["kind"], "chat")
        self.assertEqual(by["embed"]["kind"], "embedding")
        self.assertEqual(by["embed"]["max_model_len"], CTX)
        self.assertIsNone(by["embed"]["chat_template"])
        self.assertEqual(by["chat"]["chat_template"], "config")
        wait_until(lambda: any("chat template: chat_template of the config" in ln for ln in SRV.lines), 10,
                   what="the start-up log to name the template's source")


class Embeddings(unittest.TestCase):
    def test_ids_match_reference(self):
        seqs = [[101, 104, 105, 102], [101] + list(range(110, 150)) + [102], [101, 102], list(range(104, 104 + CTX))]
        got, j = vectors(post("/v1/embeddings", {"model": "embed", "input": seqs}))
        self.assertEqual(j["usage"]["prompt_tokens"], sum(len(s) for s in seqs))
        self.assertEqual(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"])
        for ids, v in zip(seqs, got):
            ref = REF.embed(ids)
            self.assertEqual(v.shape, ref.shape)
            self.assertLess(float(np.abs(v - ref).max()), 1e-4)
            self.assertGreater(float(v @ ref / (np.linalg.norm(v) * np.linalg.norm(ref))), 0.9999)
            self.assertAlmostEqual(float(np.linalg.norm(v)), 1.0, places=5)

    def test_batch_invariance_and_shapes(self):
        texts = ["the water is hot", "one word", "people go down the side"]
        alone = [vectors(post("/v1/embeddings", {"model": "embed", "input": t}))[0][0] for t in texts]
        batch, j = vectors(post("/v1/embeddings", {"model": "embed", "input": texts}))
        # ops_matmul sums in a different order past a few rows (enc.h), so
        # a vector moves by rounding only (f32: ~1e-7) with its batch.
        for a, b in zip(alone, batch):
            self.assertLess(float(np.abs(a - b).max()), 1e-6)
        # The text path tokenizes as /tokenize does, and usage counts it.
        ids = [tokenize(t) for t in texts]
        self.assertEqual(j["usage"]["prompt_tokens"], sum(len(i) for i in ids))
        by_ids, _ = vectors(post("/v1/embeddings", {"model": "embed", "input": ids[0]}))
        self.assertTrue(np.array_equal(by_ids[0], alone[0]))
        for t, v in zip(ids, alone):
            self.assertLess(float(np.abs(v - REF.embed(t)).max()), 1e-4)

    def test_base64(self):
        f, _ = vectors(post("/v1/embeddings", {"model": "embed", "input": "the long day", "encoding_format": "float"}))
        r = post("/v1/embeddings", {"model": "embed", "input": "the long day", "encoding_format": "base64"})
        self.assertEqual(r.status, 200, r)
        raw = base64.b64decode(r.json()["data"][0]["embedding"])
        b = np.asarray(struct.unpack("<%df" % (len(raw) // 4), raw), dtype=np.float64)
        self.assertTrue(np.array_equal(b, f[0].astype(np.float32).astype(np.float64)))

    def test_inputs_within_the_tenants_queue(self):
        """Each input is a queued request of the tenant's: more inputs than
        its queue takes are refused up front, not half computed."""
        r = post("/v1/embeddings", {"model": "embed", "input": ["a", "b", "c"]}, tenant="small")
        self.assertEqual(r.status, 400, r)
        self.assertIn("at most 2", r.json()["error"]["message"])

    def test_dimensions(self):
        r = post("/v1/embeddings", {"model": "embed", "input": "word", "dimensions": REF.dim})
        self.assertEqual(r.status, 200, r)
        r = post("/v1/embeddings", {"model": "embed", "input": "word", "dimensions": REF.dim // 2})
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["error"]["param"], "dimensions")

    def test_bad_requests(self):
        cases = [
            ({"model": "embed"}, "input"),
            ({"model": "embed", "input": ""}, "input"),
            ({"model": "embed", "input": []}, "input"),
            ({"model": "embed", "input": [1, "x"]}, None),
            ({"model": "embed", "input": ["ok", 3]}, "input[1]"),
            ({"model": "embed", "input": [[101, -1]]}, "input[0][1]"),
            ({"model": "embed", "input": "x", "encoding_format": "int8"}, "encoding_format"),
            ({"model": "embed", "input": [[10 ** 6]]}, "input"),
            ({"model": "embed", "input": list(range(104, 104 + CTX + 1))}, "input"),
            ({"model": "chat", "input": "x"}, "model"),
        ]
        for body, param in cases:
            r = post("/v1/embeddings", body)
            self.assertEqual(r.status, 400, (body, r))
            if param:
                self.assertEqual(r.json()["error"]["param"], param, (body, r))
        r = post("/v1/embeddings", {"model": "nope", "input": "x"})
        self.assertEqual(r.status, 404, r)
        r = post("/v1/embeddings", {"model": "embed", "input": "x"}, key="sk-wrong")
        self.assertEqual(r.status, 401, r)
        r = post("/v1/embeddings", b'{"model": "embed", "input": "x"', key=SRV.key("indexer"))
        self.assertEqual(r.status, 400, r)
        r = post("/v1/completions", {"model": "embed", "prompt": "x", "max_tokens": 2}, tenant="writer")
        self.assertEqual(r.status, 400, r)
        # Still serving.
        vectors(post("/v1/embeddings", {"model": "embed", "input": "still here"}))

    def test_side_by_side(self):
        """The writer generates while the indexer embeds: both finish, and
        each tenant's requests are counted under its own name."""
        before = get_metrics(SRV.port, SRV.admin_key)
        errors = []

        def writer():
            for i in range(4):
                r = post("/v1/completions", {"model": "chat", "prompt": "tell me %d" % i, "max_tokens": 8,
                                             "temperature": 0}, tenant="writer")
                if r.status != 200:
                    errors.append(r)

        def indexer():
            for i in range(6):
                r = post("/v1/embeddings", {"model": "embed", "input": ["the day %d" % i, "water and people"]})
                if r.status != 200:
                    errors.append(r)
        ts = [threading.Thread(target=writer), threading.Thread(target=indexer)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        self.assertEqual(errors, [])
        after = get_metrics(SRV.port, SRV.admin_key)

        def done(samples, tenant):
            return metric_value(samples, "tessera_requests_total", tenant=tenant, outcome="completed") or 0
        self.assertEqual(done(after, "indexer") - done(before, "indexer"), 6)
        # The encoder's file is read in place, like the chat model's.
        size = os.path.getsize(os.path.join(ENV.work, "bert.gguf"))
        res = metric_value(after, "tessera_model_weights_resident_bytes", model="embed")
        self.assertTrue(res and 0 < res <= size + (1 << 20), res)
        self.assertEqual(done(after, "writer") - done(before, "writer"), 4)


class ChatTemplate(unittest.TestCase):
    def detok(self, ids):
        r = post("/detokenize", {"model": "chat", "tokens": ids}, tenant="writer")
        self.assertEqual(r.status, 200, r)
        return r.json()["prompt"]

    def test_rendered(self):
        msgs = [{"role": "system", "content": " be brief "}, {"role": "user", "content": "hello"}]
        r = post("/tokenize", {"model": "chat", "messages": msgs}, tenant="writer")
        self.assertEqual(r.status, 200, r)
        want = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
        self.assertEqual(self.detok(r.json()["tokens"]), want)
        r = post("/tokenize", {"model": "chat", "messages": msgs, "add_generation_prompt": False}, tenant="writer")
        self.assertEqual(self.detok(r.json()["tokens"]), want[:-len("<|im_start|>assistant\n")])
        r = post("/v1/chat/completions", {"model": "chat", "messages": msgs, "max_tokens": 2}, tenant="writer")
        self.assertEqual(r.status, 200, r)

    def test_template_refusal(self):
        msgs = [{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}]
        r = post("/v1/chat/completions", {"model": "chat", "messages": msgs, "max_tokens": 2}, tenant="writer")
        self.assertEqual(r.status, 400, r)
        self.assertIn("no tool turns, please", r.json()["error"]["message"])

    def test_bad_template_stops_start(self):
        """A template the interpreter cannot run is an error at load that
        names the construct and the way out."""
        env = Env("embed_serve_badtpl")
        srv = Server(env, "badtpl", [Model("chat", make_model(env, "c.gguf"),
                                           chat_template=json.dumps("{% include 'other.jinja' %}"))],
                     [Tenant(env, "t", "gold")])
        with self.assertRaises(RuntimeError) as cm:
            srv.start(timeout=20)
        msg = str(cm.exception)
        self.assertIn("include", msg)
        self.assertIn("chat_template", msg)


class Tokenize(unittest.TestCase):
    def test_round_trip(self):
        for model in ("chat", "embed"):
            ids = tokenize("the water is hot", model)
            r = post("/detokenize", {"model": model, "tokens": ids})
            self.assertEqual(r.status, 200, r)
            self.assertEqual(r.json()["prompt"].strip(), "the water is hot")

    def test_special_tokens(self):
        on, off = tokenize("hello there", "chat", True), tokenize("hello there", "chat", False)
        self.assertEqual(on[1:], off)
        r = post("/tokenize", {"model": "chat", "prompt": "hi"})
        self.assertEqual(r.json()["count"], len(r.json()["tokens"]))
        self.assertEqual(r.json()["max_model_len"], 1024)

    def test_wordpiece_special(self):
        """[CLS] ... [SEP] around the text whether or not the text may name
        special tokens (one encoding call, not BOS and text apart)."""
        plain = post("/tokenize", {"model": "embed", "prompt": "the water"}).json()["tokens"]
        special = post("/tokenize", {"model": "embed", "prompt": "the water", "parse_special_tokens": True})
        self.assertEqual(special.json()["tokens"], plain)
        self.assertEqual((plain[0], plain[-1]), (101, 102))

    def test_rate_limited(self):
        """/tokenize runs on an HTTP thread: it counts against the tenant's
        request rate like any other request (3 a minute here; the only other
        request of this tenant was refused before its limits were taken)."""
        got = [post("/tokenize", {"model": "chat", "prompt": "x"}, tenant="small").status for _ in range(4)]
        self.assertEqual(got, [200, 200, 200, 429])

    def test_special_text(self):
        """Special tokens written in a prompt are text unless the request
        asks (parse_special_tokens), for /tokenize and completions alike."""
        body = {"model": "chat", "prompt": "a</s>", "add_special_tokens": False}
        plain = post("/tokenize", body, tenant="writer").json()["tokens"]
        special = post("/tokenize", dict(body, parse_special_tokens=True), tenant="writer").json()["tokens"]
        self.assertNotIn(2, plain)                # </s> is id 2 in mkmodel's vocabulary
        self.assertEqual(special[-1], 2)
        self.assertLess(len(special), len(plain))
        r = post("/v1/completions", {"model": "chat", "prompt": "a</s>", "max_tokens": 1,
                                     "parse_special_tokens": True}, tenant="writer")
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["usage"]["prompt_tokens"], len(special) + 1)   # and BOS

    def test_messages(self):
        msgs = [{"role": "user", "content": "hello"}]
        r = post("/tokenize", {"model": "chat", "messages": msgs}, tenant="writer")
        self.assertEqual(r.status, 200, r)
        self.assertGreater(r.json()["count"], len(tokenize("hello", "chat", False)))

    def test_errors(self):
        self.assertEqual(post("/tokenize", {"prompt": "x"}).status, 400)   # two models: name one
        self.assertEqual(post("/tokenize", {"model": "nope", "prompt": "x"}).status, 404)
        self.assertEqual(post("/tokenize", {"model": "chat"}).status, 400)
        self.assertEqual(post("/tokenize", {"model": "chat", "prompt": "x", "messages": []}).status, 400)
        self.assertEqual(post("/detokenize", {"model": "chat", "tokens": [10 ** 8]}).status, 400)
        self.assertEqual(post("/detokenize", {"model": "chat", "tokens": "x"}).status, 400)
        self.assertEqual(post("/tokenize", {"model": "chat", "prompt": "x"}, key="").status, 401)
        self.assertEqual(request(SRV.port, "GET", "/tokenize", key=SRV.key("writer")).status, 405)


if __name__ == "__main__":
    unittest.main()
