/* gate.c - connection read deadlines and the anonymous cap; see gate.h.
 *
 * Two intrusive lists hold the connections waiting for a request: all of
 * them (for deadlines) and the anonymous subset (for rule 3). Both only
 * ever get appended with deadline now_us + timeout, and now_us never goes
 * backwards, so each list is in deadline order without sorting, and the
 * anonymous list, a subsequence of the same appends, is too: its head is
 * the anonymous connection that has waited longest.
 */
#include "gate.h"

#include <stddef.h>

static gate_link *link_of(gate_conn *c, int anon) { return anon ? &c->anon : &c->reading; }

static int on_list(const gate_list *l, gate_conn *c, int anon) {
    return link_of(c, anon)->prev || l->head == c;
}

static void list_append(gate_list *l, gate_conn *c, int anon) {
    gate_link *k = link_of(c, anon);
    k->prev = l->tail;
    k->next = NULL;
    if (l->tail) link_of(l->tail, anon)->next = c;
    else l->head = c;
    l->tail = c;
}

static void list_remove(gate_list *l, gate_conn *c, int anon) {
    if (!on_list(l, c, anon)) return;
    gate_link *k = link_of(c, anon);
    if (k->prev) link_of(k->prev, anon)->next = k->next;
    else l->head = k->next;
    if (k->next) link_of(k->next, anon)->prev = k->prev;
    else l->tail = k->prev;
    k->prev = k->next = NULL;
}

/* Off both lists: no deadline, not a candidate to give way. */
static void unlist(gate *g, gate_conn *c) {
    list_remove(&g->reading, c, 0);
    list_remove(&g->anon, c, 1);
}

/* Waiting for a request due at now_us + timeout. */
static void start_reading(gate *g, gate_conn *c, int64_t now_us) {
    unlist(g, c);
    c->state = GATE_READING;
    c->deadline_us = now_us + g->read_timeout_us;
    list_append(&g->reading, c, 0);
    if (!c->authed) list_append(&g->anon, c, 1);
}

static gate_conn *mark_closing(gate *g, gate_conn *c, gate_why why) {
    unlist(g, c);
    if (!c->authed) g->n_anon--;
    c->state = GATE_CLOSING;
    c->closed_by = why;
    return c;
}

void gate_init(gate *g, int64_t read_timeout_us, uint32_t max_anon) {
    *g = (gate){.read_timeout_us = read_timeout_us, .max_anon = max_anon ? max_anon : 1};
}

gate_conn *gate_open(gate *g, gate_conn *c, int fd, int64_t now_us) {
    *c = (gate_conn){.fd = fd};
    g->n_conns++;
    g->n_anon++;
    start_reading(g, c, now_us);
    if (g->n_anon <= g->max_anon) return NULL;
    /* The head is the longest-waiting anonymous reader; c is at the tail,
     * so the head is c only when no other anonymous one is reading. */
    gate_conn *v = g->anon.head;
    return mark_closing(g, v, v == c ? GATE_REFUSED : GATE_EVICTED);
}

void gate_auth(gate *g, gate_conn *c) {
    if (c->authed || c->state == GATE_CLOSING) {
        c->authed = 1;
        return;
    }
    c->authed = 1;
    g->n_anon--;
    list_remove(&g->anon, c, 1);
}

void gate_busy(gate *g, gate_conn *c) {
    if (c->state != GATE_READING) return;
    unlist(g, c);
    c->state = GATE_BUSY;
}

void gate_idle(gate *g, gate_conn *c, int64_t now_us) {
    if (c->state == GATE_CLOSING) return;
    start_reading(g, c, now_us);
}

gate_conn *gate_expired(gate *g, int64_t now_us) {
    gate_conn *c = g->reading.head;
    if (!c || c->deadline_us > now_us) return NULL;
    return mark_closing(g, c, GATE_DEADLINE);
}

void gate_close(gate *g, gate_conn *c) {
    if (c->state != GATE_CLOSING) mark_closing(g, c, GATE_OPEN);
    g->n_conns--;
}

uint32_t gate_anon(const gate *g) { return g->n_anon; }
