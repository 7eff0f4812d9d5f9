/* test_gate.c - unit tests of the connection gate (src/serve/gate.c): read
 * deadlines from accept and from the end of an answer, the anonymous cap,
 * which connection gives way (the longest-waiting anonymous reader, else
 * the newcomer), authentication taking a connection out of the anonymous
 * set, and the counts staying exact through every close. The gate is pure,
 * so time is a parameter and every expectation is exact. A property check
 * drives random events and compares the counts with a recount of the
 * connections' own states.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "gate.h"
#include "rng.h"

#define SEC 1000000LL   /* us */

static void test_deadline_from_accept(void **st) {
    (void)st;
    gate g;
    gate_conn a, b;
    gate_init(&g, 2 * SEC, 10);
    assert_null(gate_open(&g, &a, 3, 100 * SEC));
    assert_null(gate_open(&g, &b, 4, 101 * SEC));
    assert_int_equal(g.n_conns, 2);
    assert_int_equal(gate_anon(&g), 2);
    /* Nothing is due before its deadline, however the bytes trickle. */
    assert_null(gate_expired(&g, 102 * SEC - 1));
    gate_conn *x = gate_expired(&g, 102 * SEC);
    assert_ptr_equal(x, &a);
    assert_int_equal(x->fd, 3);
    assert_int_equal(x->state, GATE_CLOSING);
    assert_int_equal(x->closed_by, GATE_DEADLINE);
    assert_null(gate_expired(&g, 102 * SEC));       /* named once */
    assert_int_equal(gate_anon(&g), 1);             /* closing ones are not counted */
    assert_int_equal(g.n_conns, 2);                 /* until the close arrives */
    gate_close(&g, &a);
    assert_int_equal(g.n_conns, 1);
    assert_ptr_equal(gate_expired(&g, 200 * SEC), &b);
    gate_close(&g, &b);
    assert_int_equal(g.n_conns, 0);
    assert_int_equal(gate_anon(&g), 0);
}

/* A busy connection has no deadline; its next request is due a timeout
 * after the answer, so idle keep-alive time counts towards it. */
static void test_busy_then_idle(void **st) {
    (void)st;
    gate g;
    gate_conn a;
    gate_init(&g, 2 * SEC, 10);
    gate_open(&g, &a, 5, 0);
    gate_busy(&g, &a);
    assert_null(gate_expired(&g, 100 * SEC));       /* a long answer is not cut */
    gate_idle(&g, &a, 100 * SEC);
    assert_int_equal(a.state, GATE_READING);
    assert_null(gate_expired(&g, 102 * SEC - 1));
    assert_ptr_equal(gate_expired(&g, 102 * SEC), &a);
    /* A connection already closing stays closing. */
    gate_idle(&g, &a, 103 * SEC);
    gate_busy(&g, &a);
    assert_int_equal(a.state, GATE_CLOSING);
    gate_close(&g, &a);
    assert_int_equal(g.n_conns, 0);
}

/* At the cap, a newcomer pushes out the anonymous reader that has waited
 * longest, not an authenticated or busy one; with none to push out, the
 * newcomer itself is refused. */
static void test_cap_evicts_oldest_anonymous(void **st) {
    (void)st;
    gate g;
    gate_conn c[6];
    gate_init(&g, 10 * SEC, 3);
    assert_null(gate_open(&g, &c[0], 10, 1 * SEC));
    assert_null(gate_open(&g, &c[1], 11, 2 * SEC));
    assert_null(gate_open(&g, &c[2], 12, 3 * SEC));
    /* c[0] authenticates: it leaves the anonymous set for good. */
    gate_auth(&g, &c[0]);
    assert_int_equal(gate_anon(&g), 2);
    assert_null(gate_open(&g, &c[3], 13, 4 * SEC));
    assert_int_equal(gate_anon(&g), 3);
    /* Full: c[1] is the oldest anonymous reader. */
    gate_conn *v = gate_open(&g, &c[4], 14, 5 * SEC);
    assert_ptr_equal(v, &c[1]);
    assert_int_equal(v->closed_by, GATE_EVICTED);
    assert_int_equal(gate_anon(&g), 3);
    /* c[2] and c[3] are busy, c[4] is the only anonymous reader left. */
    gate_busy(&g, &c[2]);
    gate_busy(&g, &c[3]);
    v = gate_open(&g, &c[5], 15, 6 * SEC);
    assert_ptr_equal(v, &c[4]);
    /* Now c[5] reads alone among busy anonymous ones: the next newcomer
     * pushes out c[5]; one after that finds no reader but itself. */
    gate_conn d, e;
    assert_ptr_equal(gate_open(&g, &d, 16, 7 * SEC), &c[5]);
    gate_busy(&g, &d);
    v = gate_open(&g, &e, 17, 8 * SEC);
    assert_ptr_equal(v, &e);
    assert_int_equal(v->closed_by, GATE_REFUSED);
    assert_int_equal(gate_anon(&g), 3);
    /* The authenticated one was never touched, and its deadline holds. */
    assert_int_equal(c[0].state, GATE_READING);
    assert_ptr_equal(gate_expired(&g, 11 * SEC), &c[0]);
    gate_conn *all[] = {&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &d, &e};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gate_close(&g, all[i]);
    assert_int_equal(g.n_conns, 0);
    assert_int_equal(gate_anon(&g), 0);
}

/* Authentication while closing, twice, or after the close decision changes
 * no count. */
static void test_auth_edges(void **st) {
    (void)st;
    gate g;
    gate_conn a, b;
    gate_init(&g, SEC, 0);      /* 0 reads as 1 */
    assert_int_equal(g.max_anon, 1);
    gate_open(&g, &a, 1, 0);
    gate_auth(&g, &a);
    gate_auth(&g, &a);
    assert_int_equal(gate_anon(&g), 0);
    assert_null(gate_open(&g, &b, 2, 0));
    assert_ptr_equal(gate_expired(&g, SEC), &a);
    assert_ptr_equal(gate_expired(&g, SEC), &b);
    gate_auth(&g, &b);          /* its key arrived as it was being closed */
    assert_int_equal(gate_anon(&g), 0);
    gate_close(&g, &a);
    gate_close(&g, &b);
    assert_int_equal(g.n_conns, 0);
    assert_int_equal(gate_anon(&g), 0);
}

/* Random opens, authentications, busy/idle turns, deadlines and closes:
 * after every event the counts match a recount, no more than max_anon
 * anonymous connections are open, the reading list is in deadline order,
 * and every connection the gate named was reading (or the newcomer). */
#define P_CONNS 64

static void recount(const gate *g, gate_conn *c, const int *open) {
    uint32_t n = 0, anon = 0;
    for (int i = 0; i < P_CONNS; i++) {
        if (!open[i]) continue;
        n++;
        anon += c[i].state != GATE_CLOSING && !c[i].authed;
    }
    assert_int_equal(g->n_conns, n);
    assert_int_equal(gate_anon(g), anon);
    assert_true(anon <= g->max_anon);
    int64_t last = INT64_MIN;
    for (gate_conn *x = g->reading.head; x; x = x->reading.next) {
        assert_int_equal(x->state, GATE_READING);
        assert_true(x->deadline_us >= last);
        last = x->deadline_us;
    }
}

static void test_property(void **st) {
    (void)st;
    rng r;
    rng_seed(&r, 42);
    gate g;
    gate_conn c[P_CONNS];
    int open[P_CONNS] = {0};
    gate_init(&g, 3 * SEC, 8);
    int64_t now = 0;
    for (int step = 0; step < 200000; step++) {
        now += (int64_t)(rng_next(&r) % (SEC / 4));
        int i = (int)(rng_next(&r) % P_CONNS);
        switch (rng_next(&r) % 6) {
        case 0:
            if (!open[i]) {
                open[i] = 1;
                gate_conn *v = gate_open(&g, &c[i], i, now);
                if (v) assert_true(v->state == GATE_CLOSING && (v == &c[i] || v->closed_by == GATE_EVICTED));
            }
            break;
        case 1: if (open[i]) gate_auth(&g, &c[i]); break;
        case 2: if (open[i]) gate_busy(&g, &c[i]); break;
        case 3: if (open[i]) gate_idle(&g, &c[i], now); break;
        case 4:
            for (gate_conn *x; (x = gate_expired(&g, now));) assert_true(x->deadline_us <= now);
            break;
        default:
            if (open[i]) {
                gate_close(&g, &c[i]);
                open[i] = 0;
            }
        }
        recount(&g, c, open);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deadline_from_accept),
        cmocka_unit_test(test_busy_then_idle),
        cmocka_unit_test(test_cap_evicts_oldest_anonymous),
        cmocka_unit_test(test_auth_edges),
        cmocka_unit_test(test_property),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
