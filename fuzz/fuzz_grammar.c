/*
 * fuzz_grammar.c - constrained decoding (engine/grammar.c): a JSON Schema,
 * a regex or a list of choices from the input, compiled, then decoded under.
 *
 * The first byte picks the compiler (0 schema, 1 regex, 2 choices, 3 any
 * object) and the vocabulary (FZ_TOK_SPM or FZ_TOK_BPE); the next two
 * bytes are the seed of the walk; the rest is the schema, regex, or
 * choices separated by NUL bytes. Checks grammar.h's promises: a refusal
 * is TS_ERR_INVAL (or TS_ERR_NOMEM) with a message and no grammar; under a
 * grammar, the mask's count equals the tokens it leaves, every token it
 * leaves is one gr_state_allowed agrees with and gr_state_accept takes,
 * control tokens other than EOS are never left, EOS only where
 * gr_state_can_end, and a finished state leaves nothing.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "err.h"
#include "grammar.h"
#include "tok.h"

#define FZ_STEPS 48             /* tokens decoded per input */

static const gr_vocab *vocab(int which) {
    static gr_vocab *v[FZ_N_TOKS];
    if (!v[which] && gr_vocab_new(fz_tok(which), &v[which])) fz_fail(__FILE__, __LINE__, "gr_vocab_new");
    return v[which];
}

static int compile(int kind, const gr_vocab *v, const char *p, size_t n, gr_grammar **g, char *err, size_t errlen) {
    if (kind == 0) return gr_compile_json_schema(p, n, v, g, err, errlen);
    if (kind == 1) return gr_compile_regex(p, n, v, g, err, errlen);
    if (kind == 3) return gr_compile_json_object(v, g, err, errlen);
    const char *ch[16];
    size_t lens[16], k = 0, at = 0;
    while (k < 16 && at <= n) {
        const char *z = memchr(p + at, 0, n - at);
        size_t l = z ? (size_t)(z - (p + at)) : n - at;
        ch[k] = p + at;
        lens[k++] = l;
        at += l + 1;
    }
    return gr_compile_choice(ch, lens, k, v, g, err, errlen);
}

static void decode_under(const tok *t, const gr_grammar *g, uint64_t seed) {
    int nv = tok_n_vocab(t);
    float *lg = malloc((size_t)nv * sizeof *lg);
    int32_t *ids = malloc((size_t)nv * sizeof *ids);
    FZ_CHECK(lg && ids);
    gr_state *s = NULL;
    FZ_CHECK(gr_state_new(g, &s) == 0);
    for (int step = 0; step < FZ_STEPS && !gr_state_done(s); step++) {
        for (int i = 0; i < nv; i++) lg[i] = 0;
        int na = gr_state_mask(s, lg), m = 0;
        FZ_CHECK(na >= 0);
        for (int i = 0; i < nv; i++)
            if (!isinf(lg[i])) {
                ids[m++] = i;
                FZ_CHECK(i == tok_eos(t) ? gr_state_can_end(s) : !tok_is_control(t, i));
            }
        FZ_CHECK(m == na);
        if (m == 0) break;
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int32_t id = ids[(seed >> 33) % (uint64_t)m];
        FZ_CHECK(gr_state_allowed(s, id));
        FZ_CHECK(gr_state_accept(s, id) == 0);
    }
    if (gr_state_done(s)) {
        for (int i = 0; i < nv; i++) lg[i] = 0;
        FZ_CHECK(gr_state_mask(s, lg) <= 1);    /* EOS at most */
    }
    gr_state_free(s);
    free(lg);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    int kind = data[0] & 3, which = (data[0] >> 2) & 1 ? FZ_TOK_BPE : FZ_TOK_SPM;
    uint64_t seed = (uint64_t)data[1] << 8 | data[2];
    const char *p = (const char *)data + 3;
    size_t n = size - 3;
    gr_grammar *g = (gr_grammar *)&seed;
    char err[256] = "";
    int rc = compile(kind, vocab(which), p, n, &g, err, sizeof err);
    if (rc) {
        FZ_CHECK(rc == TS_ERR_INVAL || rc == TS_ERR_NOMEM);
        FZ_CHECK(g == NULL && err[0]);
        return 0;
    }
    FZ_CHECK(g != NULL);
    decode_under(fz_tok(which), g, seed);
    gr_free(g);
    return 0;
}
