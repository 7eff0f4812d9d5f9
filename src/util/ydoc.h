/*
 * ydoc.h - the one reader of tessera's YAML documents: the server's
 * configuration, bench scenarios and the planner's input.
 *
 * ydoc loads a whole file or string with libyaml's document API, refuses a
 * stream with no document or with more than one (a second one would be
 * ignored silently), and then answers typed questions about its nodes:
 * this text, this integer in a range, these keys of a mapping. Callers walk
 * their schema, not the tree, so an alias cycle such as `&a [*a]` can never
 * make them recurse. ydoc knows no field names: which fields exist, their
 * ranges, defaults and cross-field checks stay with the caller.
 *
 * Every failure writes one line into the caller's message buffer,
 *     file:line:column: field.path: what is wrong
 * such as
 *     demo.yaml:85:11: tenants[1].tier: unknown tier 'platinum' (gold, silver, bronze)
 * and returns the negative code the caller chose at load time
 * (TS_ERR_CONFIG, TS_ERR_SCENARIO, ...), or TS_ERR_NOMEM or TS_ERR_IO. A
 * missing buffer (NULL or 0 bytes) drops the message and nothing else.
 * Line and column are 1-based, as compilers print them (libyaml's marks are
 * 0-based); the column counts characters, so a tab or a multi-byte UTF-8
 * character is one. The place is where the offending node starts: a value
 * for a bad value, a key for an unknown or repeated key, libyaml's problem
 * mark for a syntax error, 1:1 for an empty stream. Two messages have less:
 * bad bytes (libyaml's reader reports a byte offset, not a mark) say
 * file:line:, and a message with no node (ydoc_fail with NULL) says file:.
 *
 * One null rule, YAML 1.2's core schema: a plain scalar that is empty, ~,
 * null, Null or NULL is null, and a mapping field whose value is null
 * counts as absent. A quoted "" is a value, but an empty one, which no
 * getter accepts ("missing value").
 *
 * Getters take the document, the node, the field path for messages and an
 * out pointer; a NULL node (an absent field) returns 0 and leaves *out as it
 * was, so a default stored beforehand stands. Ownership: a ydoc owns its node
 * tree, and every node and borrowed string dies with ydoc_free; the message
 * buffer is the caller's and must outlive the ydoc. ydoc never exits and
 * never reads anything but the one file it is given.
 */
#ifndef TS_YDOC_H
#define TS_YDOC_H

#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#define YDOC_FILE_MAX (64 << 20) /* bytes of a file at most */
#define YDOC_PATH_MAX 256   /* bytes of a field path such as tenants[3].key_sha256[1], with the NUL */

/* Flags of ydoc_get_number. */
enum {
    YDOC_LO_OPEN = 1u << 0,     /* the range is (lo, hi], not [lo, hi] */
    YDOC_SI = 1u << 1,          /* a K, M, B (or G), T multiplier may follow */
};

typedef struct ydoc_opts {
    int code;                   /* TS_ERR_* returned for bad content */
    const char *empty_msg;      /* message for a stream without a document, at 1:1 */
} ydoc_opts;

typedef struct ydoc ydoc;

/* ---- loading --------------------------------------------------------------- */

/* Load the one document of the file at path into *out (free with
 * ydoc_free). err, errlen: OUT, may be NULL/0; the ydoc keeps them for the
 * getters' messages. Returns 0, o->code (bad YAML, no document, a second
 * document), TS_ERR_IO (cannot open), TS_ERR_NOMEM or TS_ERR_INVAL (NULL
 * argument); on failure *out is NULL. */
int ydoc_load_file(const char *path, const ydoc_opts *o, ydoc **out, char *err, size_t errlen);

/* The same from len bytes in memory; name is the file name in messages. */
int ydoc_load_string(const char *text, size_t len, const char *name, const ydoc_opts *o, ydoc **out,
                     char *err, size_t errlen);

/* Release d and its tree; safe on NULL. */
void ydoc_free(ydoc *d);

/* The root node, never NULL nor null for a loaded ydoc. */
const yaml_node_t *ydoc_root(const ydoc *d);

/* The file name as given to the load call. */
const char *ydoc_name(const ydoc *d);

/* ---- messages and paths ---------------------------------------------------- */

/* Write "file:line:column: path: message" and return the ydoc's code. n
 * gives the place, where it starts (NULL: none, just "file: "); an empty or
 * NULL path is left out. */
__attribute__((format(printf, 4, 5)))
int ydoc_fail(const ydoc *d, const yaml_node_t *n, const char *path, const char *fmt, ...);

/* Write "file: out of memory" and return TS_ERR_NOMEM. */
int ydoc_nomem(const ydoc *d);

/* "path.key" (just "key" at the root) and "path[i]" into buf, which they
 * return, so a call can stand where the path is needed; buf must not be
 * path. A path too long for the buffer ends in "..." rather than silently
 * cut. */
const char *ydoc_path_field(char buf[YDOC_PATH_MAX], const char *path, const char *key);
const char *ydoc_path_index(char buf[YDOC_PATH_MAX], const char *path, size_t i);

/* ---- structure ------------------------------------------------------------- */

/* 1 if n is YAML's null (see above), else 0; NULL counts as null. */
int ydoc_is_null(const yaml_node_t *n);

/* Check that map is a mapping whose keys are all among keys[0..nkeys) and
 * appear once each: unknown and repeated keys are errors, so a typo never
 * passes silently. vals[i] is the value of keys[i], or NULL if absent or
 * null. */
int ydoc_map_fields(const ydoc *d, const yaml_node_t *map, const char *path, const char *const *keys,
                    size_t nkeys, const yaml_node_t **vals);

/* Check that n is a sequence and give its length (0 for an absent one). */
int ydoc_get_seq(const ydoc *d, const yaml_node_t *n, const char *path, size_t *len);

/* 1 if n is a sequence. */
int ydoc_is_seq(const yaml_node_t *n);

/* Item i of the sequence seq (i below its length). */
const yaml_node_t *ydoc_seq_at(const ydoc *d, const yaml_node_t *seq, size_t i);

/* ---- scalars --------------------------------------------------------------- */

/* The text of a scalar; *out is borrowed from d. Refuses lists, mappings,
 * null and empty values and text with a NUL byte. */
int ydoc_get_str(const ydoc *d, const yaml_node_t *n, const char *path, const char **out);

/* The text copied into out[0..cap), refused if longer than cap - 1 bytes. */
int ydoc_get_text(const ydoc *d, const yaml_node_t *n, const char *path, char *out, size_t cap);

/* The characters tessera's names may hold besides ASCII letters and
 * digits: tenant, tier, pool and group names (metric-label safe), and model
 * names (which may look like org/model:tag). */
#define YDOC_NAME_EXTRA "._-"
#define YDOC_MODEL_NAME_EXTRA "._:/-"

/* 1 if s is a name of 1..cap-1 ASCII letters, digits and the characters in
 * extra (for names read from other documents than YAML ones). */
int ydoc_name_ok(const char *s, const char *extra, size_t cap);

/* A name of 1..cap-1 ASCII letters, digits and the characters in extra. */
int ydoc_get_name(const ydoc *d, const yaml_node_t *n, const char *path, const char *extra, char *out,
                  size_t cap);

/* A decimal integer with an optional sign in [lo, hi]. */
int ydoc_get_int(const ydoc *d, const yaml_node_t *n, const char *path, int64_t lo, int64_t hi, int64_t *out);
int ydoc_get_i32(const ydoc *d, const yaml_node_t *n, const char *path, int32_t lo, int32_t hi, int32_t *out);
int ydoc_get_u32(const ydoc *d, const yaml_node_t *n, const char *path, uint32_t lo, uint32_t hi,
                 uint32_t *out);
/* Unsigned, but the range is cut to INT64_MAX: sizes, which need all 64
 * bits, have ydoc_get_size. */
int ydoc_get_u64(const ydoc *d, const yaml_node_t *n, const char *path, uint64_t lo, uint64_t hi,
                 uint64_t *out);

/* A finite number (strtod's syntax) in [lo, hi]; flags YDOC_LO_OPEN and
 * YDOC_SI as above. */
int ydoc_get_number(const ydoc *d, const yaml_node_t *n, const char *path, double lo, double hi,
                    unsigned flags, double *out);

/* A duration in seconds within [lo_s, hi_s]: see ydoc_duration_parse. */
int ydoc_get_duration(const ydoc *d, const yaml_node_t *n, const char *path, double lo_s, double hi_s,
                      double *out_s);

/* A duration such as "30s", "500ms", "2m" (or "2min"), "1h" or "12.5"
 * (seconds), an optional space before the unit, into seconds. Returns 0,
 * or TS_ERR_INVAL if s is not one or is negative. */
int ydoc_duration_parse(const char *s, double *out_s);

/* A byte count in [lo, hi]: an integer, then optionally spaces and a unit:
 * B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024),
 * any case. */
int ydoc_get_size(const ydoc *d, const yaml_node_t *n, const char *path, uint64_t lo, uint64_t hi,
                  uint64_t *out);

/* true, True, TRUE (1) or false, False, FALSE (0). */
int ydoc_get_bool(const ydoc *d, const yaml_node_t *n, const char *path, int *out);

/* The index of the text among names[0..count); otherwise the message
 * "unknown <what> 'text' (name, name, ...)" lists the allowed names. */
int ydoc_get_enum(const ydoc *d, const yaml_node_t *n, const char *path, const char *what,
                  const char *const *names, size_t count, int *out);

#endif
