/* test_jinja.c - unit tests of the Jinja2 subset interpreter
 * (src/serve/jinja.c).
 *
 * Each language feature is rendered on a tiny template and compared byte
 * for byte with what Jinja2 (as transformers configures it: trim_blocks,
 * lstrip_blocks) prints; the expected strings follow Python/Jinja2
 * semantics. Then the error paths: malformed templates give "line:col:"
 * messages naming the construct, runaway templates hit the limits, and
 * provenance spans mark exactly the template's bytes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "serve/jinja.h"

static const char *const trusted[] = {"bos_token", "<s>", "eos_token", "</s>", NULL};

/* Render tpl with data (a JSON object text or NULL); the result, or
 * "ERR <code>: <message>", in a static buffer. */
static const char *render_lim(const char *tpl, const char *data, const jj_limits *lim) {
    static char buf[1 << 16];
    char err[512] = "";
    jj_tpl *t = NULL;
    int rc = jj_parse(tpl, strlen(tpl), &t, err, sizeof err);
    if (rc) {
        snprintf(buf, sizeof buf, "ERR %d: %s", rc, err);
        return buf;
    }
    cJSON *j = data ? cJSON_Parse(data) : NULL;
    if (data) assert_non_null(j);
    jj_input in = {.data = j, .trusted = trusted, .now = 1721952000 /* 2024-07-26 */,
                   .lim = lim, .add_generation_prompt = 1};
    char *out = NULL;
    size_t len = 0;
    rc = jj_render(t, &in, &out, &len, NULL, NULL, err, sizeof err);
    if (rc) {
        assert_null(out);
        snprintf(buf, sizeof buf, "ERR %d: %s", rc, err);
    } else {
        assert_non_null(out);
        assert_int_equal(strlen(out), len);
        snprintf(buf, sizeof buf, "%s", out);
    }
    free(out);
    cJSON_Delete(j);
    jj_free(t);
    return buf;
}

static const char *render(const char *tpl, const char *data) { return render_lim(tpl, data, NULL); }

#define EXPECT(tpl, data, want) assert_string_equal(render(tpl, data), want)

/* An error whose message contains every fragment given. */
static void expect_err(const char *tpl, const char *data, const char *frag1, const char *frag2) {
    const char *r = render(tpl, data);
    if (strncmp(r, "ERR -2: ", 8) != 0 || !strstr(r, frag1) || (frag2 && !strstr(r, frag2)))
        fail_msg("template %s: got \"%s\", want an error with \"%s\"", tpl, r, frag1);
}

/* ---- text, output, whitespace -------------------------------------------- */

static void test_text_and_output(void **st) {
    (void)st;
    EXPECT("", NULL, "");
    EXPECT("plain", NULL, "plain");
    EXPECT("a{{ 'b' }}c", NULL, "abc");
    EXPECT("{{ bos_token }}x{{ eos_token }}", NULL, "<s>x</s>");
    EXPECT("{# comment #}x", NULL, "x");
    EXPECT("{{ 1 }} {{ 1.5 }} {{ true }} {{ none }} {{ undefined_thing }}|", NULL,
           "1 1.5 True None |");
    EXPECT("{{ [1, 'a', none] }} {{ {'k': 'v'} }}", NULL, "[1, 'a', None] {'k': 'v'}");
    EXPECT("{{ 'it\\'s' }}|{{ \"q\\\"\" }}|{{ 'a\\nb\\t\\u00e9\\x41' }}", NULL,
           "it's|q\"|a\nb\t\xc3\xa9" "A");
    EXPECT("{{ 'a' 'b' }}", NULL, "ab");
    EXPECT("{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 2.0 }} {{ 1e-5 }}", NULL,
           "0.30000000000000004 1e+20 2.0 1e-05");
    /* One trailing newline of the template is dropped (keep_trailing_newline). */
    EXPECT("x\n", NULL, "x");
    EXPECT("x\n\n", NULL, "x\n");
}

static void test_whitespace_control(void **st) {
    (void)st;
    EXPECT("a  {{- 'b' -}}  \n c", NULL, "abc");
    EXPECT("a  {%- if true -%}  b  {%- endif -%}  c", NULL, "abc");
    EXPECT("a \n{#- c -#}\n b", NULL, "ab");
    /* trim_blocks: the newline after a block tag goes, not after }}. */
    EXPECT("{% if true %}\nx\n{% endif %}\ny", NULL, "x\ny");
    EXPECT("{{ 'a' }}\nb", NULL, "a\nb");
    /* lstrip_blocks: indentation before a block tag goes, not before {{. */
    EXPECT("<\n    {% if true %}\n    x\n    {% endif %}\n>", NULL, "<\n    x\n>");
    EXPECT("  {{ 'a' }}", NULL, "  a");
    /* ...but only when the tag starts its line. */
    EXPECT("a  {% if true %}b{% endif %}", NULL, "a  b");
    /* {%+ keeps the indentation. */
    EXPECT("  {%+ if true %}b{% endif %}", NULL, "  b");
    EXPECT("  {# c #}\nx", NULL, "x");
}

/* ---- statements ------------------------------------------------------------ */

static void test_if(void **st) {
    (void)st;
    const char *t = "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}";
    EXPECT(t, "{\"x\":1}", "one");
    EXPECT(t, "{\"x\":2}", "two");
    EXPECT(t, "{\"x\":3}", "many");
    EXPECT("{% if x %}y{% endif %}", NULL, "");
    EXPECT("{% if '' or [] or {} or 0 or none %}y{% else %}n{% endif %}", NULL, "n");
}

static void test_for_loop(void **st) {
    (void)st;
    EXPECT("{% for i in [10, 20, 30] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}"
           "{{ loop.last }}{{ loop.length }}{{ loop.revindex }}|{% endfor %}", NULL,
           "10TrueFalse33|21FalseFalse32|32FalseTrue31|");
    EXPECT("{% for i in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}", NULL,
           "-2,1-3,2-,");
    EXPECT("{% for i in [] %}x{% else %}empty{% endfor %}", NULL, "empty");
    EXPECT("{% for i in [1, 2, 3, 4] if i is even %}{{ i }}/{{ loop.length }} {% endfor %}", NULL,
           "2/2 4/2 ");
    EXPECT("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", NULL, "a=1;b=2;");
    EXPECT("{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}", NULL, "ab");
    EXPECT("{% for c in 'h\xc3\xa9!' %}[{{ c }}]{% endfor %}", NULL, "[h][\xc3\xa9][!]");
    EXPECT("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}"
           "{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", NULL, "02");
    EXPECT("{% for i in range(1, 10, 3) %}{{ i }}{% endfor %}", NULL, "147");
    EXPECT("{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{% endfor %}"
           "{{ loop.index }} {% endfor %}", NULL, "121 122 ");
    EXPECT("{% for x in undefined_list %}x{% else %}none{% endfor %}", NULL, "none");
    EXPECT("{% for m in messages %}{{ m.role }}:{{ m['content'] }} {% endfor %}",
           "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
           "\"content\":\"yo\"}]}", "user:hi assistant:yo ");
}

static void test_set_and_namespace(void **st) {
    (void)st;
    EXPECT("{% set x = 'a' ~ 1 %}{{ x }}", NULL, "a1");
    EXPECT("{% set a, b = 1, 2 %}{{ a }}{{ b }}", NULL, "12");
    /* A set inside a loop does not leak out of it; a namespace does. */
    EXPECT("{% set x = 0 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}", NULL, "0");
    /* Read before its set, an iteration sees the outer value, not the last
     * iteration's (Jinja2's per-iteration scope). */
    EXPECT("{% set x = 0 %}{% for i in [1, 2, 3] %}{{ x }}{% set x = i %}{{ x }} {% endfor %}", NULL,
           "01 02 03 ");
    EXPECT("{% set ns = namespace(x=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.x = ns.x + i %}"
           "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.x }} {{ ns.s }}", NULL, "6 123");
    EXPECT("{% set block %}a{{ 1 + 1 }}b{% endset %}[{{ block }}]", NULL, "[a2b]");
    EXPECT("{% set l = [] %}{% do l.append(1) %}{% do l.append(2) %}{{ l }}", NULL, "[1, 2]");
    expect_err("{% set x = 1 %}{% set x.y = 2 %}", NULL, "is not a namespace", NULL);
}

static void test_macros(void **st) {
    (void)st;
    EXPECT("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
           "{{ greet('Ann') }} {{ greet('Bo', punct='?') }} {{ greet(name='Cy') }}", NULL,
           "Hi Ann! Hi Bo? Hi Cy!");
    EXPECT("{% macro f(x) %}{% if x > 0 %}{{ x }}{{ f(x - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
           NULL, "321");
    expect_err("{% macro f(x) %}{% endmacro %}{{ f(1, 2) }}", NULL, "takes 1 arguments", NULL);
    expect_err("{% macro f(x) %}{% endmacro %}{{ f(y=1) }}", NULL, "no parameter 'y'", NULL);
    /* generation blocks render their body. */
    EXPECT("{% generation %}g{% endgeneration %}", NULL, "g");
}

/* ---- expressions --------------------------------------------------------- */

static void test_operators(void **st) {
    (void)st;
    EXPECT("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }}"
           " {{ 2 ** 10 }} {{ 7.5 // 2 }}", NULL, "7 9 3 -4 2 3.5 1024 3.0");
    EXPECT("{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'x' ~ 1 ~ none }}", NULL,
           "ab ababab [1, 2] x1None");
    EXPECT("{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' >= 'a' }}", NULL,
           "True True True False True");
    EXPECT("{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}",
           NULL, "True True True True");
    EXPECT("{{ 1 and 'x' }} {{ 0 or 'y' }} {{ not 0 }} {{ not 1 and 1 }}", NULL, "x y True False");
    EXPECT("{{ 'yes' if 1 > 0 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'a' if 0 }}]", NULL,
           "yes no []");
    EXPECT("{{ -3 }} {{ - 2.5 }} {{ +4 }}", NULL, "-3 -2.5 4");
    EXPECT("{{ [1, 2] == [1, 2] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}", NULL, "True True");
    expect_err("{{ 1 / 0 }}", NULL, "division by zero", NULL);
    expect_err("{{ 'a' + 1 }}", NULL, "unsupported operand types for +: 'str' and 'int'", NULL);
    expect_err("{{ 9223372036854775807 + 1 }}", NULL, "integer overflow", NULL);
    expect_err("{{ 'a' < 1 }}", NULL, "not supported", NULL);
}

static void test_subscripts_and_slices(void **st) {
    (void)st;
    const char *d = "{\"l\":[1,2,3,4,5],\"s\":\"h\xc3\xa9llo\",\"d\":{\"a\":{\"b\":7}}}";
    EXPECT("{{ l[0] }} {{ l[-1] }} {{ l[1:3] }} {{ l[:2] }} {{ l[3:] }} {{ l[::-1] }} {{ l[::2] }}"
           " {{ l[-2:] }} {{ l[10] }}|", d, "1 5 [2, 3] [1, 2] [4, 5] [5, 4, 3, 2, 1] [1, 3, 5] [4, 5] |");
    EXPECT("{{ s[1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s|length }}", d,
           "\xc3\xa9 \xc3\xa9l oll\xc3\xa9h 5");
    EXPECT("{{ d.a.b }} {{ d['a']['b'] }} {{ d.a.c is defined }} {{ d.x is defined }}", d,
           "7 7 False False");
    EXPECT("{{ l.0 }} {{ l[::9223372036854775807] }} {{ l[-1::-9223372036854775807] }}", d,
           "1 [1] [5]");
    expect_err("{{ nothing.attr }}", NULL, "'nothing' is undefined", NULL);
    expect_err("{{ l['x'] }}", d, "indices must be integers", NULL);
    expect_err("{{ l[::0] }}", d, "slice step cannot be zero", NULL);
}

static void test_filters(void **st) {
    (void)st;
    EXPECT("[{{ '  a b \\n'|trim }}] {{ 'Hi'|upper }} {{ 'Hi'|lower }} {{ 'hello world'|title }}"
           " {{ 'hELLO'|capitalize }}", NULL, "[a b] HI hi Hello World Hello");
    EXPECT("{{ [1, 2, 3]|length }} {{ 'abc'|count }} {{ {'a': 1}|length }} {{ [3, 4]|first }}"
           " {{ [3, 4]|last }}", NULL, "3 3 1 3 4");
    EXPECT("{{ x|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ x|d('e') }}",
           NULL, "d  d e");
    EXPECT("{{ [1, 'a']|join(', ') }} {{ ['x', 'y']|join }} {{ 'a-b'|replace('-', '+') }}", NULL,
           "1, a xy a+b");
    EXPECT("{{ 'aaa'|replace('a', 'b', 2) }} {{ 42|string ~ '!' }} {{ '7'|int + 1 }} {{ 'x'|int }}"
           " {{ '2.5'|float }} {{ -3|abs }}", NULL, "bba 42! 8 0 2.5 3");
    EXPECT("{{ {'a': 1, 'b': [1, 2]}|tojson }} {{ 'q\"\\n\xc3\xa9'|tojson }} {{ none|tojson }}",
           NULL, "{\"a\": 1, \"b\": [1, 2]} \"q\\\"\\n\xc3\xa9\" null");
    EXPECT("{{ {'a': [1, {}], 'b': []}|tojson(indent=2) }}", NULL,
           "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
    EXPECT("{{ '\xc3\xa9'|tojson(ensure_ascii=true) }}", NULL, "\"\\u00e9\"");
    EXPECT("{{ {'a': 1, 'b': 2}|items|list }} {{ [1, 2]|reverse|list }} {{ 'ab'|list }}", NULL,
           "[['a', 1], ['b', 2]] [2, 1] ['a', 'b']");
    const char *m = "{\"m\":[{\"role\":\"user\",\"n\":1},{\"role\":\"tool\",\"n\":2},"
                    "{\"role\":\"user\",\"n\":3,\"x\":true}]}";
    EXPECT("{{ m|selectattr('role', 'equalto', 'user')|map(attribute='n')|list }}", m, "[1, 3]");
    EXPECT("{{ m|rejectattr('role', 'equalto', 'user')|map(attribute='n')|join }}", m, "2");
    EXPECT("{{ m|selectattr('x', 'undefined')|map(attribute='n')|list }}", m, "[1, 2]");
    EXPECT("{{ m|selectattr('x')|map(attribute='n')|list }}", m, "[3]");
    EXPECT("{{ [1, 2, 3, 4]|select('odd')|list }} {{ ['a', 'B']|map('upper')|list }}", NULL,
           "[1, 3] ['A', 'B']");
    EXPECT("{{ 'x'|safe }}", NULL, "x");
}

static void test_tests(void **st) {
    (void)st;
    EXPECT("{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 'a' is string }}"
           " {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }}",
           NULL, "False True True True True True True False");
    EXPECT("{{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }}"
           " {{ false is false }} {{ true is true }} {{ 0 is false }}", NULL,
           "True True True True True True False");
    EXPECT("{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 2 is equalto 2 }}"
           " {{ 2 is eq(3) }} {{ 'a' is in ['a'] }} {{ 'ab' is lower }} {{ 'AB' is upper }}", NULL,
           "True True True True False True True True");
    EXPECT("{{ x is not defined }} {{ 1 is not string }} {{ not x is defined }}", NULL,
           "True True True");
    EXPECT("{{ 2 is gt 1 }} {{ 2 is < 1 }} {{ none is sameas none }}", NULL, "True False True");
}

static void test_methods(void **st) {
    (void)st;
    EXPECT("[{{ '  a  '.strip() }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}]"
           "[{{ 'xxaxx'.strip('x') }}][{{ '\\n\\na\\n'.lstrip('\\n') }}]", NULL,
           "[a][a  ][  a][a][a\n]");
    EXPECT("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }}", NULL,
           "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c']");
    EXPECT("{{ 'x</think>y'.split('</think>')[-1] }} {{ 'abc'.startswith('ab') }}"
           " {{ 'abc'.endswith(('x', 'c')) }} {{ 'abc'.startswith('b') }}", NULL,
           "y True True False");
    EXPECT("{{ 'aB'.upper() }} {{ 'aB'.lower() }} {{ 'a b'.title() }} {{ 'ab'.capitalize() }}"
           " {{ 'a-a'.replace('a', 'b') }} {{ 'abc'.find('c') }} {{ 'aXa'.count('a') }}", NULL,
           "AB ab A B Ab b-b 2 2");
    EXPECT("{{ ', '.join(['a', 'b']) }} {{ 'a\\nb'.splitlines() }}", NULL, "a, b ['a', 'b']");
    EXPECT("{{ ' a  b  c '.split(none, 1) }} {{ 'abc'.replace('', '-') }} {{ 'aaa'.replace('', '-', 2) }}",
           NULL, "['a', 'b  c '] -a-b-c- -a-aa");
    EXPECT("{% set d = {'a': 1, 'b': 2} %}{{ d.items()|list }} {{ d.keys()|list }}"
           " {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }}", NULL,
           "[['a', 1], ['b', 2]] ['a', 'b'] [1, 2] 1 None 0");
    expect_err("{{ 'a'.get('x') }}", NULL, "'str' object has no method 'get'", NULL);
}

static void test_functions(void **st) {
    (void)st;
    EXPECT("{{ strftime_now('%d %b %Y') }} {{ strftime_now is defined }}", NULL,
           "26 Jul 2024 True");
    EXPECT("{{ range(3)|list }} {{ range(3, 0, -1)|list }}", NULL, "[0, 1, 2] [3, 2, 1]");
    EXPECT("{{ dict(a=1)['a'] }} {{ namespace(a=2).a }}", NULL, "1 2");
    const char *r = render("{% if true %}{{ raise_exception('Roles must alternate!') }}{% endif %}", NULL);
    assert_string_equal(r, "ERR -2: 1:17: template error: Roles must alternate!");
}

/* ---- errors ----------------------------------------------------------------- */

static void test_parse_errors(void **st) {
    (void)st;
    expect_err("{% if x %}a", NULL, "1:4: unclosed 'if'", "'endif'");
    expect_err("{% for x in y %}a{% endif %}", NULL, "1:21: unexpected 'endif'", NULL);
    expect_err("a\n  {{ x ", NULL, "2:3: unclosed '{{'", NULL);
    expect_err("{% if x", NULL, "unclosed '{%'", NULL);
    expect_err("{# never closed", NULL, "unclosed comment", NULL);
    expect_err("{{ 'abc }}", NULL, "unclosed string literal", NULL);
    expect_err("{{ x|nosuchfilter }}", NULL, "1:5: unknown filter 'nosuchfilter'", NULL);
    expect_err("{{ x is nosuchtest }}", NULL, "unknown test 'nosuchtest'", NULL);
    expect_err("{{ x.nosuchmethod() }}", NULL, "unknown method 'nosuchmethod'", NULL);
    expect_err("{{ nosuchfn(1) }}", NULL, "unknown function 'nosuchfn'", NULL);
    expect_err("{% include 'x' %}", NULL, "unsupported tag 'include'", NULL);
    expect_err("{% frobnicate %}", NULL, "unknown tag 'frobnicate'", NULL);
    expect_err("{% endif %}", NULL, "unexpected 'endif'", NULL);
    expect_err("{% break %}", NULL, "'break' outside a for loop", NULL);
    expect_err("{{ }}", NULL, "expected an expression", NULL);
    expect_err("{{ 1 + }}", NULL, "expected an expression", NULL);
    expect_err("{{ (1 }}", NULL, "1:7: unexpected '}': '(' opened at 1:4 is not closed", NULL);
    expect_err("{{ [1", NULL, "1:4: unclosed '['", NULL);
    expect_err("{{ (1] }}", NULL, "1:6: unexpected ']': '(' opened at 1:4", NULL);
    expect_err("{{ x) }}", NULL, "1:5: unexpected ')'", NULL);
    expect_err("{{ f(1 2) }}", NULL, "expected ','", NULL);
    expect_err("{{ a $ b }}", NULL, "unexpected character '$'", NULL);
    expect_err("{% for x in y recursive %}{% endfor %}", NULL, "recursive", NULL);
    expect_err("{{ 99999999999999999999 }}", NULL, "integer literal too large", NULL);
    expect_err("{{ '\\u12' }}", NULL, "bad \\u escape", NULL);
    /* A NUL byte or binary garbage is an error, not a crash. */
    char bin[] = "{{ \x01\xff }}";
    expect_err(bin, NULL, "unexpected byte", NULL);
}

static void test_deep_nesting(void **st) {
    (void)st;
    size_t n = 5000;
    char *t = malloc(n * 2 + 16);
    strcpy(t, "{{ ");
    for (size_t i = 0; i < n; i++) strcat(t, "(");
    strcat(t, "1");
    for (size_t i = 0; i < n; i++) strcat(t, ")");
    strcat(t, " }}");
    expect_err(t, NULL, "nested deeper than", NULL);
    free(t);
    char *u = malloc(n * 12 + 16);
    u[0] = '\0';
    for (size_t i = 0; i < 2000; i++) strcat(u, "{% if 1 %}");
    expect_err(u, NULL, "nested deeper than", NULL);
    free(u);
    char *w = malloc(n * 6 + 16);
    strcpy(w, "{{ ");
    for (size_t i = 0; i < n; i++) strcat(w, "not ");
    strcat(w, "1 }}");
    expect_err(w, NULL, "nested deeper than", NULL);
    free(w);
}

static void test_limits(void **st) {
    (void)st;
    jj_limits lim = {.max_output = 1000, .max_steps = 100000, .max_memory = 4u << 20,
                     .max_depth = 10};
    const char *r = render_lim("{% for i in range(100) %}{% for j in range(100) %}"
                               "{% for k in range(100) %}{% endfor %}{% endfor %}{% endfor %}",
                               NULL, &lim);
    assert_non_null(strstr(r, "step limit"));
    r = render_lim("{% for i in range(10000) %}xx{% endfor %}", NULL, &lim);
    assert_non_null(strstr(r, "exceeds its limit (1000 bytes)"));
    r = render_lim("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, &lim);
    assert_non_null(strstr(r, "nested deeper than 10"));
    r = render_lim("{% set ns = namespace(s='xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx') %}"
                   "{% for i in range(60000) %}{% set ns.s = ns.s + ns.s[:900] %}{% endfor %}", NULL,
                   &lim);
    assert_non_null(strstr(r, "memory limit"));
    r = render_lim("{{ 'x' * 100000000000 }}", NULL, &lim);
    assert_non_null(strstr(r, "repetition too large"));
    r = render_lim("{{ range(100000000000)|length }}", NULL, &lim);
    assert_non_null(strstr(r, "step limit"));
    /* The defaults stop an endless-looking loop too. */
    r = render("{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", NULL);
    assert_non_null(strstr(r, "step limit"));
}

/* ---- provenance ----------------------------------------------------------- */

static void check_spans(const char *tpl, const jj_msg *m, int n, const char *want,
                        const char *want_mask) {
    char err[256];
    jj_tpl *t;
    assert_int_equal(jj_parse(tpl, strlen(tpl), &t, err, sizeof err), 0);
    jj_input in = {.msgs = m, .n_msgs = n, .trusted = trusted, .add_generation_prompt = 1};
    char *out;
    size_t len, ns;
    jj_span *sp;
    assert_int_equal(jj_render(t, &in, &out, &len, &sp, &ns, err, sizeof err), 0);
    assert_string_equal(out, want);
    /* want_mask: 'T' template, 'd' data, per byte. */
    char *mask = malloc(len + 1);
    memset(mask, 'd', len);
    mask[len] = '\0';
    size_t end = 0;
    for (size_t i = 0; i < ns; i++) {
        assert_true(sp[i].len > 0);
        assert_true(i == 0 || sp[i].off > end);   /* ordered, merged */
        memset(mask + sp[i].off, 'T', sp[i].len);
        end = sp[i].off + sp[i].len;
    }
    assert_true(end <= len);
    assert_string_equal(mask, want_mask);
    free(mask);
    free(sp);
    free(out);
    jj_free(t);
}

static void test_provenance(void **st) {
    (void)st;
    jj_msg m[2] = {{"user", " <|im_end|>x ", 13}, {"robot", "y", 1}};
    /* Literals and bos are template; content is data; a known role is template,
     * an unknown one data. */
    check_spans("{{ bos_token }}{% for x in messages %}<{{ x.role }}>{{ x.content|trim }}"
                "{% endfor %}", m, 2, "<s><user><|im_end|>x<robot>y",
                "TTTTTTTTTdddddddddddTdddddTd");
    /* Concatenation and slicing keep each byte's origin. */
    check_spans("{% set s = '[' + messages[0].content + ']' %}{{ s[1:4] }}{{ s|upper }}", m, 1,
                " <|[ <|IM_END|>X ]", "dddTdddddddddddddT");
    /* replace: the new text's bytes are template, the kept bytes data. */
    check_spans("{{ messages[0].content|replace('x', 'XY') }}", m, 1, " <|im_end|>XY ",
                "dddddddddddTTd");
    /* split and join keep origins; the separator is template. */
    check_spans("{{ messages[0].content.split('|')|join('#') }}", m, 1, " <#im_end#>x ",
                "ddTddddddTddd");
    /* Numbers are template text; tojson of data is all data. */
    check_spans("{{ messages|length }}{{ messages[0].content|tojson }}{{ ['a']|tojson }}", m, 1,
                "1\" <|im_end|>x \"[\"a\"]", "TdddddddddddddddTTTTT");
    /* Data-free output: one span; all-data output: no spans. */
    check_spans("abc", m, 1, "abc", "TTT");
    check_spans("{{ messages[0].content }}", m, 1, " <|im_end|>x ", "ddddddddddddd");
}

static void test_embedded_nul_and_bad_input(void **st) {
    (void)st;
    char err[256];
    jj_tpl *t;
    assert_int_equal(jj_parse("[{{ messages[0].content }}]", 27, &t, err, sizeof err), 0);
    jj_msg m[1] = {{"user", "a\0b", 3}};
    jj_input in = {.msgs = m, .n_msgs = 1};
    char *out;
    size_t len;
    assert_int_equal(jj_render(t, &in, &out, &len, NULL, NULL, err, sizeof err), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(out, "[a\0b]", 5);
    free(out);
    jj_msg bad[1] = {{"user", NULL, 3}};
    in.msgs = bad;
    assert_int_equal(jj_render(t, &in, &out, &len, NULL, NULL, err, sizeof err), TS_ERR_INVAL);
    assert_null(out);
    jj_free(t);
    assert_int_equal(jj_parse(NULL, 3, &t, err, sizeof err), TS_ERR_INVAL);
    assert_null(t);
    /* The template's length governs, not a NUL. */
    assert_int_equal(jj_parse("ab{{", 2, &t, err, sizeof err), 0);
    in = (jj_input){0};
    assert_int_equal(jj_render(t, &in, &out, &len, NULL, NULL, err, sizeof err), 0);
    assert_string_equal(out, "ab");
    free(out);
    jj_free(t);
}

/* Random bytes and random mutations of a real template: never a crash,
 * always 0 or an error with a message. */
static void test_garbage_never_crashes(void **st) {
    (void)st;
    const char *base = "{%- for m in messages %}{% if m.role == 'user' %}{{ '<u>' + m.content|trim }}"
                       "{% elif loop.last %}{{ m.content[1:] ~ (ns.x if ns is defined else 3) }}"
                       "{% endif %}{% endfor %}{{ x|tojson(indent=2) }}{# c #}";
    const char alphabet[] = "{}%#-+()[]|.,:'\"~*/ \nabcifnorst0123=<>!";
    uint64_t s = 88172645463325252ull;
    char buf[512];
    jj_msg m[2] = {{"user", " hi ", 4}, {"assistant", "yo", 2}};
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = strlen(base);
        memcpy(buf, base, n + 1);
        int muts = 1 + iter % 8;
        for (int k = 0; k < muts; k++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            size_t at = (size_t)(s % n);
            buf[at] = alphabet[(s >> 20) % (sizeof alphabet - 1)];
        }
        char err[256] = "";
        jj_tpl *t = NULL;
        int rc = jj_parse(buf, n, &t, err, sizeof err);
        if (rc) {
            assert_int_equal(rc, TS_ERR_INVAL);
            assert_true(err[0] != '\0');
            continue;
        }
        jj_limits lim = {.max_steps = 100000, .max_output = 1 << 16};
        jj_input in = {.msgs = m, .n_msgs = 2, .lim = &lim};
        char *out = NULL;
        size_t len;
        rc = jj_render(t, &in, &out, &len, NULL, NULL, err, sizeof err);
        if (rc) {
            assert_null(out);
            assert_true(err[0] != '\0');
        }
        free(out);
        jj_free(t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_and_output),
        cmocka_unit_test(test_whitespace_control),
        cmocka_unit_test(test_if),
        cmocka_unit_test(test_for_loop),
        cmocka_unit_test(test_set_and_namespace),
        cmocka_unit_test(test_macros),
        cmocka_unit_test(test_operators),
        cmocka_unit_test(test_subscripts_and_slices),
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_tests),
        cmocka_unit_test(test_methods),
        cmocka_unit_test(test_functions),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_provenance),
        cmocka_unit_test(test_embedded_nul_and_bad_input),
        cmocka_unit_test(test_garbage_never_crashes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
