/* test_bench_scrape.c - unit tests of src/bench/scrape.c: the parsers of
 * /admin/tenants and /admin/models read the server's answers field by field
 * (null prices and costs as unknown, unknown fields ignored), every
 * malformed or incomplete answer fails with the route, the entry and the
 * field in the message and returns nothing, a tenant's totals over models
 * keep an unknown cost unknown, and scr_fetch against a one-shot loopback
 * server sends the admin key and tells a 200, a 401 and a 500 apart.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/loadgen.h"
#include "bench/scrape.h"
#include "err.h"
#include "testutil.h"

/* Two rows as route_admin writes them: a priced model and an unpriced one,
 * the second as a server before first_tokens and ttft_seconds_sum wrote it. */
static const char TENANTS[] =
    "{\"object\":\"list\",\"data\":["
    "{\"model\":\"m\",\"tenant\":\"acme\",\"tier\":\"gold\",\"weight\":1,\"queued\":0,\"running\":0,"
    "\"swapped\":0,\"kv_blocks\":0,\"service\":120,\"prompt_tokens\":100,\"output_tokens\":20,"
    "\"engine_seconds\":1.500000,\"submitted\":5,\"completed\":4,\"cancelled\":1,\"failed\":0,"
    "\"preempt_swap\":0,\"preempt_recompute\":0,\"first_tokens\":4,\"ttft_seconds_sum\":0.125000,"
    "\"price_per_hour\":3.6,\"cost\":0.0015,\"cost_per_request\":0.000375,\"cost_per_1k_tokens\":0.0125},"
    "{\"model\":\"u\",\"tenant\":\"acme\",\"tier\":\"gold\",\"weight\":1,\"queued\":0,\"running\":0,"
    "\"swapped\":0,\"kv_blocks\":0,\"service\":0,\"prompt_tokens\":7,\"output_tokens\":3,"
    "\"engine_seconds\":0.250000,\"submitted\":1,\"completed\":1,\"cancelled\":0,\"failed\":0,"
    "\"preempt_swap\":0,\"preempt_recompute\":0,\"price_per_hour\":null,\"cost\":null,"
    "\"cost_per_request\":null,\"cost_per_1k_tokens\":null,\"some_future_field\":[1,2]}]}";

static const char MODELS[] =
    "{\"object\":\"list\",\"data\":[{\"model\":\"m\",\"kind\":\"chat\",\"policy\":\"fcfs\",\"context_length\":1024,"
    "\"n_blocks\":2048,\"block_size\":16,\"block_bytes\":16384,\"swap_blocks\":512,\"max_seqs\":32,"
    "\"budget_min\":32,\"budget_max\":256,\"kv_high\":0.85,\"kv_low\":0.7,\"kv_used\":3,\"steps\":77,"
    "\"cost_model\":{\"a_us\":1500,\"b_us_per_prefill_token\":20.5,\"c_us_per_decode_seq\":300,"
    "\"d_us_per_attended_position\":0.01,\"err_us\":42.5,\"steps\":70,\"copy_bytes_per_us\":1000,"
    "\"err_autocorr\":0.75,\"seed\":{\"a_us\":2000,\"b_us_per_prefill_token\":50,\"c_us_per_decode_seq\":500,"
    "\"d_us_per_attended_position\":0.02}},"
    "\"price_per_hour\":2.5,\"step_ratio\":{\"steps\":70,\"levels\":[0.1,0.5,0.99],\"quantiles\":[0.8,1,2.5]},"
    "\"step_fit\":{\"a_us\":1200,\"b_us_per_prefill_token\":30,\"c_us_per_decode_seq\":310,"
    "\"d_us_per_attended_position\":0.5,\"err_us\":40,\"err_autocorr\":0.5,\"steps\":69,"
    "\"quantiles\":[0.9,1,1.5],\"acf\":{\"lags\":[1,4,16],\"values\":[0.5,-0.25,1]},"
    "\"shape\":{\"rows_max\":[1,2,4,8,16,32,64,128,256,512],"
    "\"decode\":{\"factor\":[1,1.04,1.01,1,1,1,1,1,1,1,1],\"steps\":[0,9000,800,0,0,0,0,0,0,0,0]},"
    "\"prefill\":{\"factor\":[1,1.2,1.15,1.1,0.9,1.3,0.98,1,1,1,2],\"steps\":[0,10,200,300,90,90,50,5,0,0,3]}}}},"
    "{\"model\":\"e\",\"kind\":\"embedding\",\"policy\":\"fair\",\"context_length\":512,"
    "\"n_blocks\":64,\"block_size\":16,\"block_bytes\":0,\"swap_blocks\":0,\"max_seqs\":8,"
    "\"budget_min\":64,\"budget_max\":512,\"kv_high\":0.85,\"kv_low\":0.7,\"kv_used\":0,\"steps\":0,"
    "\"cost_model\":{\"a_us\":0,\"b_us_per_prefill_token\":0,\"c_us_per_decode_seq\":0,"
    "\"d_us_per_attended_position\":0,\"err_us\":0,\"steps\":0,\"copy_bytes_per_us\":1000},"
    "\"price_per_hour\":null}]}";

static void test_tenants_good(void **st) {
    (void)st;
    scr_tenant *t;
    size_t n;
    char err[256];
    assert_int_equal(scr_parse_tenants(TENANTS, strlen(TENANTS), &t, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(t[0].name, "acme");
    assert_string_equal(t[0].model, "m");
    assert_true(t[0].engine_seconds == 1.5);
    assert_true(t[0].cost == 0.0015);
    assert_true(t[0].price_per_hour == 3.6);
    assert_int_equal(t[0].submitted, 5);
    assert_int_equal(t[0].completed, 4);
    assert_int_equal(t[0].prompt_tokens, 100);
    assert_int_equal(t[0].output_tokens, 20);
    assert_int_equal(t[0].first_tokens, 4);
    assert_true(t[0].ttft_sum_s == 0.125);
    assert_int_equal(t[1].first_tokens, 0); /* not said: unknown */
    assert_true(t[1].ttft_sum_s == -1);
    /* null: unknown, report.h's negative */
    assert_string_equal(t[1].model, "u");
    assert_true(t[1].cost == -1);
    assert_true(t[1].price_per_hour == -1);
    assert_true(t[1].engine_seconds == 0.25);
    free(t);
    /* The text need not be NUL-terminated: only len bytes are read. */
    char *copy = malloc(sizeof TENANTS - 1);
    memcpy(copy, TENANTS, sizeof TENANTS - 1);
    assert_int_equal(scr_parse_tenants(copy, sizeof TENANTS - 1, &t, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    free(t);
    free(copy);
    /* An empty list is no rows. */
    const char *empty = "{\"object\":\"list\",\"data\":[]}";
    assert_int_equal(scr_parse_tenants(empty, strlen(empty), &t, &n, err, sizeof err), 0);
    assert_int_equal(n, 0);
    assert_null(t);
}

static void test_models_good(void **st) {
    (void)st;
    scr_model *m;
    size_t n;
    char err[256];
    assert_int_equal(scr_parse_models(MODELS, strlen(MODELS), &m, &n, err, sizeof err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(m[0].name, "m");
    assert_int_equal(m[0].embedding, 0);
    assert_int_equal(m[0].policy, SCHED_POLICY_FCFS);
    assert_int_equal(m[0].context_length, 1024);
    assert_int_equal(m[0].n_blocks, 2048);
    assert_int_equal(m[0].block_size, 16);
    assert_true(m[0].block_bytes == 16384);
    assert_int_equal(m[0].swap_blocks, 512);
    assert_int_equal(m[0].max_seqs, 32);
    assert_int_equal(m[0].budget_min, 32);
    assert_int_equal(m[0].budget_max, 256);
    assert_true(m[0].kv_high == 0.85 && m[0].kv_low == 0.7);
    assert_int_equal(m[0].steps, 77);
    assert_true(m[0].theta[0] == 1500 && m[0].theta[1] == 20.5 && m[0].theta[2] == 300 && m[0].theta[3] == 0.01);
    assert_true(m[0].err_us == 42.5);
    assert_true(m[0].err_autocorr == 0.75);
    assert_true(m[1].err_autocorr == 0); /* absent: an older server */
    assert_int_equal(m[0].n_ratio, 3);
    assert_int_equal(m[0].ratio_steps, 70);
    assert_true(m[0].ratio_level[2] == 0.99 && m[0].ratio_q[0] == 0.8 && m[0].ratio_q[2] == 2.5);
    assert_int_equal(m[1].n_ratio, 0);   /* absent too */
    assert_true(m[0].sf_theta[0] == 1200 && m[0].sf_theta[1] == 30 && m[0].sf_theta[2] == 310 &&
                m[0].sf_theta[3] == 0.5);
    assert_true(m[0].sf_err_us == 40 && m[0].sf_err_autocorr == 0.5);
    assert_int_equal(m[0].sf_steps, 69);
    assert_true(m[0].sf_q[0] == 0.9 && m[0].sf_q[2] == 1.5);
    assert_int_equal(m[0].sf_n_acf, 3);
    assert_true(m[0].sf_acf_lag[0] == 1 && m[0].sf_acf_lag[2] == 16);
    assert_true(m[0].sf_acf[0] == 0.5 && m[0].sf_acf[1] == -0.25 && m[0].sf_acf[2] == 1);
    assert_int_equal(m[1].sf_steps, 0);  /* absent too */
    assert_int_equal(m[1].sf_n_acf, 0);
    assert_int_equal(m[0].sf_has_shape, 1);
    assert_true(m[0].sf_shape.n[0][1] == 9000 && m[0].sf_shape.n[1][10] == 3 && m[0].sf_shape.n[0][3] == 0);
    assert_true(fabs(cost_shape_factor(&m[0].sf_shape, 0, 2) - 1.04) < 1e-12);   /* 2 rows, decode */
    assert_true(fabs(cost_shape_factor(&m[0].sf_shape, 20, 3) - 1.3) < 1e-12);   /* 23 rows, a chunk */
    assert_true(cost_shape_factor(&m[0].sf_shape, 700, 0) == 1.0);               /* 3 steps: too few */
    assert_int_equal(m[1].sf_has_shape, 0); /* absent too */
    assert_true(m[0].has_seed && m[0].seed[0] == 2000 && m[0].seed[1] == 50 && m[0].seed[2] == 500 &&
                m[0].seed[3] == 0.02);
    assert_int_equal(m[1].has_seed, 0);  /* absent too */
    assert_int_equal(m[0].fit_steps, 70);
    assert_true(m[0].copy_bytes_per_us == 1000);
    assert_true(m[0].price_per_hour == 2.5);
    assert_int_equal(m[1].embedding, 1);
    assert_int_equal(m[1].policy, SCHED_POLICY_FAIR);
    assert_true(m[1].price_per_hour == -1);
    free(m);
}

typedef struct bad_case {
    int models;             /* 0: /admin/tenants, 1: /admin/models */
    const char *find, *put; /* replace the first find in the good answer by put; find NULL: put is the text */
    const char *want;       /* the message */
} bad_case;

static const bad_case BAD[] = {
    {0, NULL, "", "/admin/tenants: not JSON (near byte 0)"},
    {0, NULL, "{\"data\":[}", "/admin/tenants: not JSON (near byte 9)"},
    {0, NULL, "[1,2]", "/admin/tenants: expected an object with a \"data\" list"},
    {0, NULL, "{\"data\":{}}", "/admin/tenants: expected an object with a \"data\" list"},
    {0, NULL, "{\"data\":[{\"tenant\":\"a\"},3]}", "/admin/tenants: data[0].model: missing"},
    {0, NULL, "{\"data\":[3]}", "/admin/tenants: data[0]: expected an object"},
    {0, "\"engine_seconds\":1.500000,", "", "/admin/tenants: data[0].engine_seconds: missing"},
    {0, "\"engine_seconds\":0.250000", "\"engine_seconds\":-0.25", "/admin/tenants: data[1].engine_seconds: expected a number >= 0"},
    {0, "\"engine_seconds\":1.500000", "\"engine_seconds\":null", "/admin/tenants: data[0].engine_seconds: expected a number >= 0"},
    {0, "\"cost\":0.0015", "\"cost\":\"0.0015\"", "/admin/tenants: data[0].cost: expected a number >= 0 or null"},
    {0, "\"cost\":null", "\"cost\":-1", "/admin/tenants: data[1].cost: expected a number >= 0 or null"},
    {0, "\"price_per_hour\":3.6,", "", "/admin/tenants: data[0].price_per_hour: missing"},
    {0, "\"completed\":4", "\"completed\":4.5", "/admin/tenants: data[0].completed: expected a whole number in 0..2^53"},
    {0, "\"output_tokens\":3,", "", "/admin/tenants: data[1].output_tokens: missing"},
    {0, "\"first_tokens\":4,", "", "/admin/tenants: data[0].first_tokens: missing"},
    {0, "\"ttft_seconds_sum\":0.125000,", "", "/admin/tenants: data[0].ttft_seconds_sum: missing"},
    {0, "\"ttft_seconds_sum\":0.125000", "\"ttft_seconds_sum\":-2", "/admin/tenants: data[0].ttft_seconds_sum: expected a number >= 0"},
    {0, "\"first_tokens\":4", "\"first_tokens\":true", "/admin/tenants: data[0].first_tokens: expected a number >= 0"},
    {0, "\"tenant\":\"acme\"", "\"tenant\":\"\"",
     "/admin/tenants: data[0].tenant: expected a name of 1..47 bytes without control characters"},
    {0, "\"tenant\":\"acme\"", "\"tenant\":\"a-very-long-tenant-name-that-goes-past-the-limit-of-47\"",
     "/admin/tenants: data[0].tenant: expected a name of 1..47 bytes without control characters"},
    {0, "\"model\":\"u\"", "\"model\":7",
     "/admin/tenants: data[1].model: expected a name of 1..47 bytes without control characters"},
    {0, "\"tenant\":\"acme\"", "\"tenant\":\"ac\\nme\"",
     "/admin/tenants: data[0].tenant: expected a name of 1..47 bytes without control characters"},
    {1, "\"cost_model\":{\"a_us\":1500,\"b_us_per_prefill_token\":20.5,\"c_us_per_decode_seq\":300,"
        "\"d_us_per_attended_position\":0.01,\"err_us\":42.5,\"steps\":70,\"copy_bytes_per_us\":1000,"
        "\"err_autocorr\":0.75,",
     "\"x\":{", "/admin/models: data[0].cost_model: missing"},
    {1, "\"err_autocorr\":0.75", "\"err_autocorr\":1.5",
     "/admin/models: data[0].cost_model.err_autocorr: expected a number from -1 to 1"},
    {1, "\"cost_model\":{\"a_us\":0,", "\"cost_model\":[],\"x\":{\"a_us\":0,", "/admin/models: data[1].cost_model: expected an object"},
    {1, "\"b_us_per_prefill_token\":20.5", "\"b_us_per_prefill_token\":-20.5",
     "/admin/models: data[0].cost_model.b_us_per_prefill_token: expected a number >= 0"},
    {1, "\"d_us_per_attended_position\":0.01,", "", "/admin/models: data[0].cost_model.d_us_per_attended_position: missing"},
    {1, "\"seed\":{", "\"seed\":[],\"x\":{", "/admin/models: data[0].cost_model.seed: expected an object"},
    {1, "\"c_us_per_decode_seq\":500,", "\"c_us_per_decode_seq\":-5,",
     "/admin/models: data[0].cost_model.seed.c_us_per_decode_seq: expected a number >= 0"},
    {1, "\"d_us_per_attended_position\":0.02}", "\"x\":0.02}",
     "/admin/models: data[0].cost_model.seed.d_us_per_attended_position: missing"},
    {1, "\"err_us\":42.5,\"steps\":70,", "\"err_us\":42.5,", "/admin/models: data[0].cost_model.steps: missing"},
    {1, "\"policy\":\"fcfs\"", "\"policy\":\"lottery\"", "/admin/models: data[0].policy: expected \"fair\" or \"fcfs\""},
    {1, "\"kind\":\"embedding\"", "\"kind\":1", "/admin/models: data[1].kind: expected \"chat\" or \"embedding\""},
    {1, "\"block_size\":16", "\"block_size\":0", "/admin/models: data[0].block_size: expected a whole number in 1..2147483647"},
    {1, "\"n_blocks\":2048", "\"n_blocks\":1e10", "/admin/models: data[0].n_blocks: expected a whole number in 1..2147483647"},
    {1, "\"swap_blocks\":512", "\"swap_blocks\":1.5", "/admin/models: data[0].swap_blocks: expected a whole number in 0..2147483647"},
    {1, "\"budget_min\":32", "\"budget_min\":300", "/admin/models: data[0].budget_min: expected at most budget_max"},
    {1, "\"kv_low\":0.7", "\"kv_low\":0.9", "/admin/models: data[0].kv_low: expected kv_low <= kv_high <= 1"},
    {1, "\"price_per_hour\":2.5", "\"price_per_hour\":\"2.5\"", "/admin/models: data[0].price_per_hour: expected a number >= 0 or null"},
    {1, "\"steps\":77,", "", "/admin/models: data[0].steps: missing"},
    {1, "\"step_ratio\":{", "\"step_ratio\":[],\"x\":{", "/admin/models: data[0].step_ratio: expected an object"},
    {1, "{\"steps\":70,\"levels\"", "{\"levels\"", "/admin/models: data[0].step_ratio.steps: missing"},
    {1, "[0.1,0.5,0.99]", "[0.5,0.1,0.99]", "/admin/models: data[0].step_ratio.levels: expected ascending numbers in (0, 1)"},
    {1, "[0.1,0.5,0.99]", "[0.1,0.5,1]", "/admin/models: data[0].step_ratio.levels: expected ascending numbers in (0, 1)"},
    {1, "[0.1,0.5,0.99]", "[]", "/admin/models: data[0].step_ratio.levels: expected a list of 1..32 numbers"},
    {1, "[0.8,1,2.5]", "[0.8,1]", "/admin/models: data[0].step_ratio.quantiles: expected a list of 3 numbers, as many as levels"},
    {1, "[0.8,1,2.5]", "[0.8,0.7,2.5]", "/admin/models: data[0].step_ratio.quantiles: expected non-decreasing numbers > 0"},
    {1, "[0.8,1,2.5]", "[0,1,2.5]", "/admin/models: data[0].step_ratio.quantiles: expected non-decreasing numbers > 0"},
    {1, "\"step_fit\":{", "\"step_fit\":3,\"x\":{", "/admin/models: data[0].step_fit: expected an object"},
    {1, "\"step_ratio\":{\"steps\":70,\"levels\":[0.1,0.5,0.99],\"quantiles\":[0.8,1,2.5]},", "",
     "/admin/models: data[0].step_fit: expected step_ratio beside it (its quantiles are at those levels)"},
    {1, "\"a_us\":1200", "\"a_us\":-1", "/admin/models: data[0].step_fit.a_us: expected a number >= 0"},
    {1, "[0.9,1,1.5]", "[0.9,1]", "/admin/models: data[0].step_fit.quantiles: expected a list of 3 numbers, as many as levels"},
    {1, "\"err_autocorr\":0.5", "\"err_autocorr\":2", "/admin/models: data[0].step_fit.err_autocorr: expected a number from -1 to 1"},
    {1, "\"err_autocorr\":0.5", "\"err_autocorr\":-2", "/admin/models: data[0].step_fit.err_autocorr: expected a number from -1 to 1"},
    {1, "\"err_us\":40,", "", "/admin/models: data[0].step_fit.err_us: missing"},
    {1, "\"acf\":{", "\"acf\":[],\"x\":{", "/admin/models: data[0].step_fit.acf: expected an object"},
    {1, "[1,4,16]", "[1,16,4]", "/admin/models: data[0].step_fit.acf.lags: expected ascending whole numbers in 1..1e6"},
    {1, "[1,4,16]", "[0,4,16]", "/admin/models: data[0].step_fit.acf.lags: expected ascending whole numbers in 1..1e6"},
    {1, "[1,4,16]", "[1,4.5,16]", "/admin/models: data[0].step_fit.acf.lags: expected ascending whole numbers in 1..1e6"},
    {1, "[1,4,16]", "[1,4,16,64,256,1024,4096,16384,65536,262144,1048576,2e6,3e6,4e6,5e6,6e6,7e6]",
     "/admin/models: data[0].step_fit.acf.lags: expected a list of 1..16 numbers"},
    {1, "[0.5,-0.25,1]", "[0.5,-0.25]",
     "/admin/models: data[0].step_fit.acf.values: expected a list of 3 numbers, as many as lags"},
    {1, "[0.5,-0.25,1]", "[0.5,-1.25,1]", "/admin/models: data[0].step_fit.acf.values: expected numbers from -1 to 1"},
    {1, "[0.5,-0.25,1]", "[0.5,\"x\",1]", "/admin/models: data[0].step_fit.acf.values: expected numbers from -1 to 1"},
    {1, "\"lags\":[1,4,16],", "", "/admin/models: data[0].step_fit.acf.lags: missing"},
    {1, "\"shape\":{", "\"shape\":[],\"x\":{", "/admin/models: data[0].step_fit.shape: expected an object"},
    {1, "[1,2,4,8,16,32,64,128,256,512]", "[1,2,4,8,16,32,64,128,256]",
     "/admin/models: data[0].step_fit.shape.rows_max: expected 1, 2, 4, 8, 16, 32, 64, 128, 256, 512: this build's buckets"},
    {1, "[1,2,4,8,16,32,64,128,256,512]", "[1,2,4,8,16,32,64,128,256,500]",
     "/admin/models: data[0].step_fit.shape.rows_max: expected 1, 2, 4, 8, 16, 32, 64, 128, 256, 512: this build's buckets"},
    {1, "[1,2,4,8,16,32,64,128,256,512]", "[1,2,4,8,16,32,64,128,256,512,1024]",
     "/admin/models: data[0].step_fit.shape.rows_max: expected a list of 1..10 numbers"},
    {1, "\"decode\":{", "\"x\":{", "/admin/models: data[0].step_fit.shape.decode: expected an object (factor, steps)"},
    {1, "[1,1.04,1.01,1,1,1,1,1,1,1,1]", "[1,1.04,1.01,1,1,1,1,1,1,1]",
     "/admin/models: data[0].step_fit.shape.decode.factor: expected a list of 11 numbers, as many as rows_max has, plus one"},
    {1, "[1,1.2,1.15,", "[1,2.72,1.15,",
     "/admin/models: data[0].step_fit.shape.prefill.factor: expected numbers from 0.36787 to 2.71829 (e^-1 to e^1)"},
    {1, "[1,1.2,1.15,", "[1,0.3678,1.15,",
     "/admin/models: data[0].step_fit.shape.prefill.factor: expected numbers from 0.36787 to 2.71829 (e^-1 to e^1)"},
    {1, "[0,10,200,", "[0,-10,200,",
     "/admin/models: data[0].step_fit.shape.prefill.steps: expected whole numbers in 0..2^53"},
    {1, "[0,9000,800,0,0,0,0,0,0,0,0]", "[0,9000,800,0,0,0,0,0,0,0]",
     "/admin/models: data[0].step_fit.shape.decode.steps: expected a list of 11 numbers, as many as rows_max has, plus one"},
};

/* The good answer with one replacement. */
static char *edit(const char *good, const char *find, const char *put) {
    if (!find) return strdup(put);
    const char *at = strstr(good, find);
    assert_non_null(at);
    size_t a = (size_t)(at - good), f = strlen(find), p = strlen(put), n = strlen(good);
    char *s = malloc(n - f + p + 1);
    memcpy(s, good, a);
    memcpy(s + a, put, p);
    memcpy(s + a + p, at + f, n - a - f + 1);
    return s;
}

static void test_bad_answers(void **st) {
    (void)st;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        const bad_case *b = &BAD[i];
        char *text = edit(b->models ? MODELS : TENANTS, b->find, b->put), err[256] = "";
        void *rows = (void *)1;
        size_t n = 99;
        int rc = b->models ? scr_parse_models(text, strlen(text), (scr_model **)&rows, &n, err, sizeof err)
                           : scr_parse_tenants(text, strlen(text), (scr_tenant **)&rows, &n, err, sizeof err);
        if (rc != TS_ERR_INVAL || strcmp(err, b->want))
            fail_msg("case %zu: rc %d, message\n  %s\nwanted\n  %s", i, rc, err, b->want);
        assert_null(rows);
        assert_int_equal(n, 0);
        free(text);
    }
    /* No text or no output: refused, not a crash. */
    char err[128];
    scr_tenant *t;
    size_t n;
    assert_int_equal(scr_parse_tenants(NULL, 0, &t, &n, err, sizeof err), TS_ERR_INVAL);
    assert_int_equal(scr_parse_tenants("{}", 2, NULL, &n, NULL, 0), TS_ERR_INVAL);
}

/* A tenant's totals: sums, and an unknown cost stays unknown where the
 * unpriced model did work for the tenant. */
static void test_totals(void **st) {
    (void)st;
    scr_tenant rows[4] = {
        {.name = "a", .model = "m", .engine_seconds = 2, .cost = 0.5, .price_per_hour = 900, .submitted = 3,
         .completed = 2, .prompt_tokens = 10, .output_tokens = 5, .first_tokens = 2, .ttft_sum_s = 0.5},
        {.name = "a", .model = "u", .engine_seconds = 1, .cost = -1, .price_per_hour = -1, .submitted = 1,
         .completed = 1, .prompt_tokens = 4, .output_tokens = 2, .first_tokens = 1, .ttft_sum_s = 0.25},
        {.name = "b", .model = "m", .engine_seconds = 4, .cost = 1, .price_per_hour = 900, .completed = 4,
         .first_tokens = 4, .ttft_sum_s = 1},
        {.name = "b", .model = "u", .engine_seconds = 0, .cost = -1, .price_per_hour = -1, .ttft_sum_s = -1},
    };
    scr_tenant t;
    assert_int_equal(scr_tenant_total(rows, 4, "a", NULL, &t), 2);
    assert_string_equal(t.name, "a");
    assert_true(t.engine_seconds == 3);
    assert_int_equal(t.submitted, 4);
    assert_int_equal(t.completed, 3);
    assert_int_equal(t.prompt_tokens, 14);
    assert_int_equal(t.output_tokens, 7);
    assert_true(t.cost == -1);              /* a's second is on the unpriced model */
    assert_true(t.price_per_hour == -1);    /* two prices */
    assert_int_equal(t.first_tokens, 3);
    assert_true(t.ttft_sum_s == 0.75);
    assert_int_equal(scr_tenant_total(rows, 4, "a", "m", &t), 1);
    assert_true(t.cost == 0.5 && t.price_per_hour == 900 && t.engine_seconds == 2);
    assert_int_equal(scr_tenant_total(rows, 4, "b", NULL, &t), 2);
    assert_true(t.cost == 1);               /* b never ran on the unpriced model */
    assert_true(t.price_per_hour == -1);
    assert_true(t.ttft_sum_s == -1);        /* a row that did not say */
    assert_int_equal(scr_tenant_total(rows, 4, "b", "m", &t), 1);
    assert_true(t.ttft_sum_s == 1 && t.first_tokens == 4);
    assert_int_equal(scr_tenant_total(rows, 4, "c", NULL, &t), 0);
    assert_true(t.cost == -1 && t.engine_seconds == 0 && t.completed == 0 && t.ttft_sum_s == -1);
}

/* ---- scr_fetch against a one-shot loopback server ------------------------------ */

typedef struct oneshot {
    int fd;
    int port;
    const char *answer;
    char request[2048];
} oneshot;

static void *serve_once(void *arg) {
    oneshot *o = arg;
    int c = accept(o->fd, NULL, NULL);
    if (c < 0) return NULL;
    size_t got = 0;
    /* Read the head (a GET has no body). */
    while (got + 1 < sizeof o->request && !strstr(o->request, "\r\n\r\n")) {
        ssize_t k = read(c, o->request + got, sizeof o->request - 1 - got);
        if (k <= 0) break;
        got += (size_t)k;
        o->request[got] = 0;
    }
    size_t n = strlen(o->answer), off = 0;
    while (off < n) {
        ssize_t k = write(c, o->answer + off, n - off);
        if (k <= 0) break;
        off += (size_t)k;
    }
    close(c);
    return NULL;
}

static void oneshot_start(oneshot *o, const char *answer, pthread_t *th) {
    memset(o->request, 0, sizeof o->request);
    o->answer = answer;
    o->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(o->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(o->fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(o->fd, 1), 0);
    socklen_t l = sizeof a;
    assert_int_equal(getsockname(o->fd, (struct sockaddr *)&a, &l), 0);
    o->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(th, NULL, serve_once, o), 0);
}

static void oneshot_stop(oneshot *o, pthread_t th) {
    pthread_join(th, NULL);
    close(o->fd);
}

static char *http(const char *status, const char *body) {
    char *s = malloc(strlen(body) + 256);
    sprintf(s, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
            status, strlen(body), body);
    return s;
}

static void test_fetch(void **st) {
    (void)st;
    oneshot o;
    pthread_t th;
    char url[64], err[512];
    scr_model *m;
    size_t n;
    /* 200: the admin key went out as a Bearer token to /admin/models. */
    char *ok = http("200 OK", MODELS);
    oneshot_start(&o, ok, &th);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", o.port);
    int rc = scr_get_models(url, "tsk-admin", 10, &m, &n, err, sizeof err);
    oneshot_stop(&o, th);
    if (rc) fail_msg("%s", err);
    assert_int_equal(n, 2);
    assert_true(m[0].price_per_hour == 2.5);
    free(m);
    assert_non_null(strstr(o.request, "GET /admin/models HTTP/1.1\r\n"));
    assert_non_null(strstr(o.request, "\r\nAuthorization: Bearer tsk-admin\r\n"));
    free(ok);
    /* 401: TS_ERR_AUTH, with the server's message. */
    char *no = http("401 Unauthorized", "{\"error\":{\"message\":\"this route needs the admin key\"}}");
    oneshot_start(&o, no, &th);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", o.port);
    scr_tenant *t = (scr_tenant *)1;
    rc = scr_get_tenants(url, "wrong", 10, &t, &n, err, sizeof err);
    oneshot_stop(&o, th);
    assert_int_equal(rc, TS_ERR_AUTH);
    assert_null(t);
    char want[256];
    snprintf(want, sizeof want,
             "http://127.0.0.1:%d/admin/tenants: the server refused the admin key (401): this route needs the admin key",
             o.port);
    assert_string_equal(err, want);
    free(no);
    /* 500 without a JSON body: TS_ERR_IO with the status. */
    char *boom = http("500 Internal Server Error", "oops");
    oneshot_start(&o, boom, &th);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", o.port);
    char *body = (char *)1;
    size_t len = 9;
    rc = scr_fetch(url, "/admin/models", NULL, 10, &body, &len, err, sizeof err);
    oneshot_stop(&o, th);
    assert_int_equal(rc, TS_ERR_IO);
    assert_null(body);
    assert_int_equal(len, 0);
    snprintf(want, sizeof want, "http://127.0.0.1:%d/admin/models: HTTP 500", o.port);
    assert_string_equal(err, want);
    assert_null(strstr(o.request, "Authorization"));   /* no key, no header */
    free(boom);
    /* A 200 whose body is not the expected JSON fails in the parser. */
    char *junk = http("200 OK", "<html>");
    oneshot_start(&o, junk, &th);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", o.port);
    rc = scr_get_models(url, "k", 10, &m, &n, err, sizeof err);
    oneshot_stop(&o, th);
    assert_int_equal(rc, TS_ERR_INVAL);
    assert_string_equal(err, "/admin/models: not JSON (near byte 0)");
    free(junk);
    /* Bad URLs and paths never reach the network. */
    assert_int_equal(scr_fetch("http://127.0.0.1:8080/v1", "/admin/models", "k", 10, &body, &len, err, sizeof err),
                     TS_ERR_INVAL);
    assert_non_null(strstr(err, "without a path"));
    assert_int_equal(scr_fetch("http://127.0.0.1:8080", "admin/models", "k", 10, &body, &len, err, sizeof err),
                     TS_ERR_INVAL);
    assert_int_equal(scr_fetch("http://127.0.0.1:8080", "/admin/models", "k", 0, &body, &len, err, sizeof err),
                     TS_ERR_INVAL);
}

/* Nothing but whitespace may follow the answer's JSON: "{...} junk" is not
 * an /admin answer (a proxy's page glued on, a truncated rewrite), and a
 * parser that read past it would report figures from half a document. */
static void test_trailing_data(void **st) {
    (void)st;
    static const struct {
        const char *text;
        size_t len;
        const char *want;
    } bad[] = {
        {"{\"data\":[]} junk", 16, "/admin/tenants: more after the JSON (at byte 12)"},
        {"{\"data\":[]}{\"data\":[]}", 22, "/admin/tenants: more after the JSON (at byte 11)"},
        {"{\"data\":[]}\n\0x", 14, "/admin/tenants: more after the JSON (at byte 12)"},
    };
    char err[256];
    scr_tenant *t = (scr_tenant *)1;
    size_t n = 9;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        int rc = scr_parse_tenants(bad[i].text, bad[i].len, &t, &n, err, sizeof err);
        if (rc != TS_ERR_INVAL || strcmp(err, bad[i].want)) fail_msg("case %zu: rc %d, %s", i, rc, err);
        assert_null(t);
        assert_int_equal(n, 0);
    }
    /* Whitespace after it is fine, and so is text that ends at len. */
    assert_int_equal(scr_parse_tenants("{\"data\":[]} \r\n\t", 15, &t, &n, err, sizeof err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(scr_parse_tenants("{\"data\":[]}junk", 11, &t, &n, err, sizeof err), 0);
    char *text = malloc(strlen(TENANTS) + 8);
    sprintf(text, "%s x", TENANTS);
    assert_int_equal(scr_parse_tenants(text, strlen(text), &t, &n, err, sizeof err), TS_ERR_INVAL);
    assert_non_null(strstr(err, "more after the JSON"));
    free(text);
}

/* lg_error_message, the one reader of OpenAI-shaped errors (loadgen's SSE
 * error events, scrape's error answers). */
static void test_error_message(void **st) {
    (void)st;
    cJSON *j = cJSON_Parse("{\"error\":{\"message\":\"bad key\",\"type\":\"auth\"}}");
    assert_string_equal(lg_error_message(j), "bad key");
    cJSON_Delete(j);
    j = cJSON_Parse("{\"error\":{\"message\":7}}");
    assert_string_equal(lg_error_message(j), "");
    cJSON_Delete(j);
    j = cJSON_Parse("{\"error\":\"flat\"}");
    assert_string_equal(lg_error_message(j), "");
    cJSON_Delete(j);
    j = cJSON_Parse("{\"choices\":[]}");
    assert_null(lg_error_message(j));
    cJSON_Delete(j);
    assert_null(lg_error_message(NULL));
}

/* scr_fetch never follows a redirect (lg_curl_safe): the 302 is the answer. */
static void test_no_redirect(void **st) {
    (void)st;
    oneshot o;
    pthread_t th;
    char url[64], err[512], want[256];
    static const char moved[] = "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/admin/models\r\n"
                                "Content-Length: 0\r\nConnection: close\r\n\r\n";
    oneshot_start(&o, moved, &th);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", o.port);
    char *body = (char *)1;
    size_t len = 9;
    int rc = scr_fetch(url, "/admin/models", "k", 10, &body, &len, err, sizeof err);
    oneshot_stop(&o, th);
    assert_int_equal(rc, TS_ERR_IO);
    assert_null(body);
    snprintf(want, sizeof want, "http://127.0.0.1:%d/admin/models: HTTP 302", o.port);
    assert_string_equal(err, want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tenants_good),
        cmocka_unit_test(test_models_good),
        cmocka_unit_test(test_bad_answers),
        cmocka_unit_test(test_totals),
        cmocka_unit_test(test_fetch),
        cmocka_unit_test(test_trailing_data),
        cmocka_unit_test(test_error_message),
        cmocka_unit_test(test_no_redirect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
