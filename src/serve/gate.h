/*
 * gate.h - the door policy for client connections: the read deadline of
 * every request, the cap on anonymous connections, and which connection
 * gives way when that cap is reached.
 *
 * Why. A client that opens thousands of connections and drips a header
 * byte every few seconds (slowloris) never trips an idle timeout, and each
 * connection it holds is one a tenant cannot have. Three rules stop it:
 *
 *   1. Read deadline. A request must arrive whole, headers and body, within
 *      read_timeout_us of its start: the accept for a connection's first
 *      request, the end of the previous answer for every later one. So the
 *      time a kept-alive connection sits idle counts towards its next
 *      request, and no connection waits for a request longer than the
 *      timeout, however it trickles bytes.
 *   2. Anonymous cap. A connection is anonymous until one of its requests
 *      presents a valid key (gate_auth), and then stays authenticated for
 *      its life. At most max_anon anonymous connections exist; the server
 *      sets max_anon below the daemon's own connection limit, and the
 *      difference (the reserve) is room that anonymous connections can
 *      never hold, so a tenant's new connection is always accepted.
 *   3. Oldest gives way. Every new connection starts anonymous (nothing is
 *      known before its headers arrive), so when one arrives with the
 *      anonymous set full, the anonymous connection that has been waiting
 *      longest for its request is closed to make room: it has had the most
 *      time to send one. If no anonymous connection is waiting for a
 *      request (all are being answered), the new one is refused instead.
 *      An attacker flooding connections thus only pushes out its own,
 *      while a tenant's request, sent at once after connecting, gets in.
 *
 * What it owns: nothing. The caller allocates one gate_conn per connection
 * (in the connection's start notification), keeps it until the connection
 * is closed, and closes the sockets this module names. It is pure policy:
 * no clock (now_us comes in), no sockets, no locks, no allocation. The
 * caller serializes every call (the server holds one mutex), and now_us
 * must never go backwards from one call to the next: the lists are kept in
 * deadline order by appending, which needs deadlines that only grow.
 *
 * Cost: every call is O(1) except gate_expired, which is O(1) per
 * connection it returns.
 */
#ifndef TS_GATE_H
#define TS_GATE_H

#include <stdint.h>

typedef enum gate_state {
    GATE_READING = 0,       /* waiting for a whole request: has a deadline */
    GATE_BUSY,              /* its request arrived; being answered */
    GATE_CLOSING,           /* named for closing; gone at gate_close */
} gate_state;

typedef enum gate_why {
    GATE_OPEN = 0,          /* not closed by the gate */
    GATE_DEADLINE,          /* its request did not arrive in time */
    GATE_EVICTED,           /* gave way to a newer anonymous connection */
    GATE_REFUSED,           /* new, with no older anonymous one to give way */
} gate_why;

typedef struct gate_link {
    struct gate_conn *prev, *next;
} gate_link;

typedef struct gate_conn {
    int fd;                 /* the caller's socket, handed back to close */
    gate_state state;
    gate_why closed_by;     /* why the gate named it, GATE_OPEN if it did not */
    int authed;             /* a request on it presented a valid key */
    int64_t deadline_us;    /* while GATE_READING: the whole request by then */
    gate_link reading;      /* every reading connection, by deadline */
    gate_link anon;         /* the anonymous reading ones, by deadline */
} gate_conn;

typedef struct gate_list {
    gate_conn *head, *tail;
} gate_list;

typedef struct gate {
    int64_t read_timeout_us;    /* us; rule 1 */
    uint32_t max_anon;          /* rule 2; >= 1 */
    uint32_t n_conns;           /* open connections, closing ones included */
    uint32_t n_anon;            /* anonymous ones, closing ones excluded */
    gate_list reading;          /* earliest deadline first */
    gate_list anon;             /* earliest deadline first */
} gate;

/* An empty gate. read_timeout_us > 0; max_anon >= 1 (0 reads as 1). */
void gate_init(gate *g, int64_t read_timeout_us, uint32_t max_anon);

/* A new connection on socket fd at now_us, anonymous and reading. Returns
 * the connection the caller must close for it (rule 3: an older anonymous
 * one, or c itself when none can give way), already marked closing; NULL
 * when there is room. */
gate_conn *gate_open(gate *g, gate_conn *c, int fd, int64_t now_us);

/* A valid key was presented on c: it leaves the anonymous set for good. */
void gate_auth(gate *g, gate_conn *c);

/* c's request arrived whole: no deadline while it is answered. */
void gate_busy(gate *g, gate_conn *c);

/* c's answer is done at now_us: its next request is due within the read
 * timeout (rule 1). No effect on a closing connection. */
void gate_idle(gate *g, gate_conn *c, int64_t now_us);

/* The connection past its deadline with the earliest one, marked closing
 * (closed_by GATE_DEADLINE) for the caller to close; NULL when none is due
 * at now_us. Call until NULL. */
gate_conn *gate_expired(gate *g, int64_t now_us);

/* c is closed (whoever closed it): forget it. The caller may free c. */
void gate_close(gate *g, gate_conn *c);

/* Anonymous connections not closing. */
uint32_t gate_anon(const gate *g);

#endif
