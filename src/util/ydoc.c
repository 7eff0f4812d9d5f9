/* ydoc.c - the YAML document reader; see ydoc.h.
 *
 * Loading reads the first document, then asks libyaml for a second one:
 * that is how a stray `---` is refused, and it reports a syntax error
 * anywhere in the file before any field error. Messages are assembled in
 * one place (report), so every document's messages share one format.
 */
#include "ydoc.h"

#include <errno.h>
#include <sys/stat.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "err.h"
#include "file.h"

#define MSG_MAX 768         /* bytes of a message before the file and path go in front */
#define LIST_MAX 512        /* bytes of a list of names in a message */

struct ydoc {
    yaml_document_t doc;
    int have_doc;           /* doc holds a document to delete */
    char *name;             /* owned copy of the file name, for messages */
    int code;               /* TS_ERR_* for bad content */
    char *err;              /* the caller's message buffer, may be NULL */
    size_t errlen;
};

/* Where the bytes come from: an open file or a string. */
typedef struct src {
    FILE *f;
    const char *text;
    size_t len;
} src;

/* ---- messages -------------------------------------------------------------- */

/* Write "file:line:column: path: message", both 1-based; line 0 leaves
 * the place out, column 0 the column (a reader error has no column).
 * Control characters in the path and the message are escaped, so the
 * message stays one line. */
__attribute__((format(printf, 5, 0)))
static int vreport(const ydoc *d, size_t line, size_t col, const char *path, const char *fmt,
                   va_list ap) {
    if (!d->err || d->errlen == 0) return d->code;
    char raw[MSG_MAX], msg[MSG_MAX], epath[YDOC_PATH_MAX], where[48] = "";
    vsnprintf(raw, sizeof raw, fmt, ap);
    err_escape_ctl(msg, sizeof msg, raw);
    if (line && col)
        snprintf(where, sizeof where, ":%zu:%zu", line, col);
    else if (line)
        snprintf(where, sizeof where, ":%zu", line);
    if (path && *path)
        snprintf(d->err, d->errlen, "%s%s: %s: %s", d->name, where, err_escape_ctl(epath, sizeof epath, path), msg);
    else
        snprintf(d->err, d->errlen, "%s%s: %s", d->name, where, msg);
    return d->code;
}

__attribute__((format(printf, 5, 6)))
static int report(const ydoc *d, size_t line, size_t col, const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vreport(d, line, col, path, fmt, ap);
    va_end(ap);
    return rc;
}

int ydoc_fail(const ydoc *d, const yaml_node_t *n, const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = n ? vreport(d, n->start_mark.line + 1, n->start_mark.column + 1, path, fmt, ap)
               : vreport(d, 0, 0, path, fmt, ap);
    va_end(ap);
    return rc;
}

int ydoc_nomem(const ydoc *d) {
    return err_set(d->err, d->errlen, TS_ERR_NOMEM, "%s: out of memory", d->name);
}

/* "a, b, c" into buf, cut to fit. */
static void join_names(char *buf, size_t cap, const char *const *names, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && o < cap; i++) {
        int k = snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", names[i]);
        if (k < 0) break;
        o += (size_t)k;
    }
}

/* ---- paths ----------------------------------------------------------------- */

static const char *mark_cut(char *buf, int n) {
    if (n < 0) buf[0] = 0;
    else if (n >= YDOC_PATH_MAX) memcpy(buf + YDOC_PATH_MAX - 4, "...", 4);
    return buf;
}

const char *ydoc_path_field(char buf[YDOC_PATH_MAX], const char *path, const char *key) {
    return mark_cut(buf, path && *path ? snprintf(buf, YDOC_PATH_MAX, "%s.%s", path, key)
                                       : snprintf(buf, YDOC_PATH_MAX, "%s", key));
}

const char *ydoc_path_index(char buf[YDOC_PATH_MAX], const char *path, size_t i) {
    return mark_cut(buf, snprintf(buf, YDOC_PATH_MAX, "%s[%zu]", path ? path : "", i));
}

/* ---- loading --------------------------------------------------------------- */

/* The 1-based line of a byte offset: libyaml's reader (bad encoding)
 * reports an offset, not a mark. */
static size_t offset_line(const src *s, size_t off) {
    size_t line = 1;
    if (!s->f) {
        for (size_t i = 0; i < off && i < s->len; i++) line += s->text[i] == '\n';
    } else if (fseek(s->f, 0, SEEK_SET) == 0) {
        for (int ch; off > 0 && (ch = fgetc(s->f)) != EOF; off--) line += ch == '\n';
    }
    return line;
}

/* A libyaml reader, scanner, parser or composer error. */
static int fail_yaml(const ydoc *d, const yaml_parser_t *p, const src *s) {
    if (p->error == YAML_MEMORY_ERROR) return ydoc_nomem(d);
    const char *problem = p->problem ? p->problem : "unknown error";
    if (p->error == YAML_READER_ERROR)
        return report(d, offset_line(s, p->problem_offset), 0, "", "YAML error at byte %zu: %s",
                      p->problem_offset, problem);
    size_t line = p->problem_mark.line + 1, col = p->problem_mark.column + 1;
    if (p->context)
        return report(d, line, col, "", "YAML syntax error: %s (%s)", problem, p->context);
    return report(d, line, col, "", "YAML syntax error: %s", problem);
}

/* The first document, which must exist and not be null. */
static int load_first(ydoc *d, yaml_parser_t *p, const src *s, const char *empty_msg) {
    if (!yaml_parser_load(p, &d->doc)) return fail_yaml(d, p, s);   /* libyaml freed doc */
    d->have_doc = 1;
    const yaml_node_t *root = yaml_document_get_root_node(&d->doc);
    if (!root || ydoc_is_null(root))
        return report(d, 1, 1, "", "%s", empty_msg ? empty_msg : "empty document");
    return 0;
}

/* A second document would be ignored silently: refuse it. */
static int refuse_second(const ydoc *d, yaml_parser_t *p, const src *s) {
    yaml_document_t extra;
    if (!yaml_parser_load(p, &extra)) return fail_yaml(d, p, s);
    const yaml_node_t *root = yaml_document_get_root_node(&extra);
    int rc = root ? ydoc_fail(d, root, "", "more than one YAML document (--- separates documents)") : 0;
    yaml_document_delete(&extra);
    return rc;
}

static int load(const char *name, const ydoc_opts *o, const src *s, ydoc **out, char *err,
                size_t errlen) {
    ydoc *d = calloc(1, sizeof *d);
    if (!d || !(d->name = strdup(name))) {
        free(d);
        return err_set(err, errlen, TS_ERR_NOMEM, "%s: out of memory", name);
    }
    d->code = o->code;
    d->err = err;
    d->errlen = errlen;
    yaml_parser_t p;
    int rc;
    if (!yaml_parser_initialize(&p)) {
        rc = ydoc_nomem(d);
        goto err;
    }
    if (s->f) yaml_parser_set_input_file(&p, s->f);
    else yaml_parser_set_input_string(&p, (const unsigned char *)s->text, s->len);
    rc = load_first(d, &p, s, o->empty_msg);
    if (rc == 0) rc = refuse_second(d, &p, s);
    yaml_parser_delete(&p);
    if (rc) goto err;
    *out = d;
    return 0;
err:
    ydoc_free(d);
    return rc;
}

int ydoc_load_file(const char *path, const ydoc_opts *o, ydoc **out, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!out) return TS_ERR_INVAL;
    *out = NULL;
    if (!path || !o) return err_set(err, errlen, TS_ERR_INVAL, "ydoc_load_file: no path or options");
    int fd;
    struct stat st;
    int rc = file_open_regular(path, &fd, &st, err, errlen);
    if (rc) return rc;
    /* A configuration is kilobytes; refuse a file of another kind (a model
     * given as --config, say) before libyaml builds a tree of it. */
    if (st.st_size > YDOC_FILE_MAX) {
        close(fd);
        return err_set(err, errlen, o->code, "%s: larger than %d MiB, not a configuration", path,
                       YDOC_FILE_MAX >> 20);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return err_set(err, errlen, TS_ERR_NOMEM, "%s: %s", path, strerror(errno));
    }
    src s = {f, NULL, 0};
    rc = load(path, o, &s, out, err, errlen);
    fclose(f);
    return rc;
}

int ydoc_load_string(const char *text, size_t len, const char *name, const ydoc_opts *o, ydoc **out,
                     char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!out) return TS_ERR_INVAL;
    *out = NULL;
    if (!text || !o) return err_set(err, errlen, TS_ERR_INVAL, "ydoc_load_string: no text or options");
    src s = {NULL, text, len};
    return load(name ? name : "<input>", o, &s, out, err, errlen);
}

void ydoc_free(ydoc *d) {
    if (!d) return;
    if (d->have_doc) yaml_document_delete(&d->doc);
    free(d->name);
    free(d);
}

const yaml_node_t *ydoc_root(const ydoc *d) {
    return yaml_document_get_root_node((yaml_document_t *)&d->doc);
}

const char *ydoc_name(const ydoc *d) { return d->name; }

/* ---- structure ------------------------------------------------------------- */

static const yaml_node_t *node_at(const ydoc *d, int i) {
    return yaml_document_get_node((yaml_document_t *)&d->doc, i);
}

int ydoc_is_null(const yaml_node_t *n) {
    if (!n) return 1;
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *s = (const char *)n->data.scalar.value;
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

/* The key node of an earlier pair named name, or NULL. Every earlier key is
 * a distinct known one, so this looks at no more than nkeys pairs. */
static const yaml_node_t *earlier_key(const ydoc *d, const yaml_node_pair_t *pairs, size_t i,
                                      const char *name) {
    for (size_t j = 0; j < i; j++) {
        const yaml_node_t *k = node_at(d, pairs[j].key);
        if (!strcmp((const char *)k->data.scalar.value, name)) return k;
    }
    return NULL;
}

int ydoc_map_fields(const ydoc *d, const yaml_node_t *map, const char *path, const char *const *keys,
                    size_t nkeys, const yaml_node_t **vals) {
    for (size_t i = 0; i < nkeys; i++) vals[i] = NULL;
    if (!map) return 0;
    if (map->type != YAML_MAPPING_NODE)
        return ydoc_fail(d, map, path, "expected a mapping (key: value lines)");
    const yaml_node_pair_t *pairs = map->data.mapping.pairs.start;
    size_t np = (size_t)(map->data.mapping.pairs.top - pairs);
    for (size_t i = 0; i < np; i++) {
        const yaml_node_t *k = node_at(d, pairs[i].key);
        if (k->type != YAML_SCALAR_NODE) return ydoc_fail(d, k, path, "keys must be plain names");
        const char *name = (const char *)k->data.scalar.value;
        char fp[YDOC_PATH_MAX];
        ydoc_path_field(fp, path, name);
        size_t j = 0;
        while (j < nkeys && strcmp(keys[j], name) != 0) j++;
        if (j == nkeys) {
            char list[LIST_MAX];
            join_names(list, sizeof list, keys, nkeys);
            return ydoc_fail(d, k, fp, "unknown key (expected one of: %s)", list);
        }
        const yaml_node_t *first = earlier_key(d, pairs, i, name);
        if (first)
            return ydoc_fail(d, k, fp, "repeated key (first at line %zu)", first->start_mark.line + 1);
        const yaml_node_t *v = node_at(d, pairs[i].value);
        vals[j] = ydoc_is_null(v) ? NULL : v;
    }
    return 0;
}

int ydoc_get_seq(const ydoc *d, const yaml_node_t *n, const char *path, size_t *len) {
    *len = 0;
    if (!n) return 0;
    if (n->type != YAML_SEQUENCE_NODE)
        return ydoc_fail(d, n, path, "expected a list (lines starting with '- ')");
    *len = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    return 0;
}

int ydoc_is_seq(const yaml_node_t *n) { return n && n->type == YAML_SEQUENCE_NODE; }

const yaml_node_t *ydoc_seq_at(const ydoc *d, const yaml_node_t *seq, size_t i) {
    return node_at(d, seq->data.sequence.items.start[i]);
}

/* ---- text ------------------------------------------------------------------ */

int ydoc_get_str(const ydoc *d, const yaml_node_t *n, const char *path, const char **out) {
    if (!n) return 0;
    if (n->type != YAML_SCALAR_NODE)
        return ydoc_fail(d, n, path, "expected a single value, not a %s",
                         n->type == YAML_SEQUENCE_NODE ? "list" : "mapping");
    const char *s = (const char *)n->data.scalar.value;
    if (!*s || ydoc_is_null(n)) return ydoc_fail(d, n, path, "missing value");
    if (strlen(s) != n->data.scalar.length) return ydoc_fail(d, n, path, "value contains a NUL byte");
    *out = s;
    return 0;
}

int ydoc_get_text(const ydoc *d, const yaml_node_t *n, const char *path, char *out, size_t cap) {
    const char *s = NULL;
    int rc = ydoc_get_str(d, n, path, &s);
    if (rc || !s) return rc;
    size_t len = strlen(s);
    if (len >= cap) return ydoc_fail(d, n, path, "longer than %zu bytes", cap - 1);
    memcpy(out, s, len + 1);
    return 0;
}

int ydoc_name_ok(const char *s, const char *extra, size_t cap) {
    size_t len = strlen(s);
    int ok = len > 0 && len < cap;
    for (size_t i = 0; ok && i < len; i++) {
        char ch = s[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             (ch && strchr(extra, ch) != NULL);
    }
    return ok;
}

int ydoc_get_name(const ydoc *d, const yaml_node_t *n, const char *path, const char *extra, char *out,
                  size_t cap) {
    const char *s = NULL;
    int rc = ydoc_get_str(d, n, path, &s);
    if (rc || !s) return rc;
    size_t len = strlen(s);
    if (!ydoc_name_ok(s, extra, cap))
        return ydoc_fail(d, n, path, "bad name '%.60s' (1 to %zu characters: letters, digits and %s)", s,
                         cap - 1, extra);
    memcpy(out, s, len + 1);
    return 0;
}

int ydoc_get_enum(const ydoc *d, const yaml_node_t *n, const char *path, const char *what,
                  const char *const *names, size_t count, int *out) {
    const char *s = NULL;
    int rc = ydoc_get_str(d, n, path, &s);
    if (rc || !s) return rc;
    for (size_t i = 0; i < count; i++)
        if (!strcmp(names[i], s)) {
            *out = (int)i;
            return 0;
        }
    char list[LIST_MAX];
    join_names(list, sizeof list, names, count);
    return ydoc_fail(d, n, path, "unknown %s '%.60s' (%s)", what, s, list);
}

int ydoc_get_bool(const ydoc *d, const yaml_node_t *n, const char *path, int *out) {
    static const char *const names[] = {"false", "False", "FALSE", "true", "True", "TRUE"};
    const char *s = NULL;
    int rc = ydoc_get_str(d, n, path, &s);
    if (rc || !s) return rc;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(names[i], s)) {
            *out = i >= 3;
            return 0;
        }
    return ydoc_fail(d, n, path, "expected true or false, got '%.40s'", s);
}

/* ---- numbers --------------------------------------------------------------- */

/* Decimal digits into *v; the number of characters used (0: none, or too
 * many for 64 bits). */
static size_t parse_digits(const char *s, uint64_t *v) {
    uint64_t x = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned dg = (unsigned)(s[i] - '0');
        if (x > (UINT64_MAX - dg) / 10) return 0;
        x = x * 10 + dg;
    }
    *v = x;
    return i;
}

/* YAML 1.2's decimal int, [-+]?[0-9]+, within int64_t. */
static int parse_int64(const char *s, int64_t *v) {
    int neg = *s == '-';
    if (*s == '-' || *s == '+') s++;
    uint64_t x;
    size_t k = parse_digits(s, &x);
    if (k == 0 || s[k] != 0 || x > (uint64_t)INT64_MAX + neg) return -1;
    *v = neg && x ? -(int64_t)(x - 1) - 1 : (int64_t)x;   /* x - 1 fits even for INT64_MIN */
    return 0;
}

int ydoc_get_int(const ydoc *d, const yaml_node_t *n, const char *path, int64_t lo, int64_t hi, int64_t *out) {
    const char *s = NULL;
    int rc = ydoc_get_str(d, n, path, &s);
    if (rc || !s) return rc;
    int64_t v;
    if (parse_int64(s, &v) || v < lo || v > hi)
        return ydoc_fail(d, n, path, "expected an integer in %" PRId64 "..%" PRId64 ", got '%.40s'", lo, hi, s);
    *out = v;
    return 0;
}

int ydoc_get_i32(const ydoc *d, const yaml_node_t *n, const char *path, int32_t lo, int32_t hi, int32_t *out) {
    int64_t v = 0;
    int rc = ydoc_get_int(d, n, path, lo, hi, &v);
    if (rc == 0 && n) *out = (int32_t)v;
    return rc;
}

int ydoc_get_u32(const ydoc *d, const yaml_node_t *n, const char *path, uint32_t lo, uint32_t hi,
                 uint32_t *out) {
    int64_t v = 0;
    int rc = ydoc_get_int(d, n, path, lo, hi, &v);
    if (rc == 0 && n) *out = (uint32_t)v;
    return rc;
}

int ydoc_get_u64(const ydoc *d, const yaml_node_t *n, const char *path, uint64_t lo, uint64_t hi,
                 uint64_t *out) {
    int64_t v = 0;
    if (hi > INT64_MAX) hi = INT64_MAX;
    int rc = ydoc_get_int(d, n, path, lo > INT64_MAX ? INT64_MAX : (int64_t)lo, (int64_t)hi, &v);
    if (rc == 0 && n) *out = (uint64_t)v;
    return rc;
}

/* strtod's number, then with si one of K, M, B (or G), T; finite. */
static int parse_number(const char *s, int si, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno) return -1;
    if (*end && si && !end[1]) {
        switch (*end) {
        case 'k': case 'K': v *= 1e3; break;
        case 'm': case 'M': v *= 1e6; break;
        case 'b': case 'B': case 'g': case 'G': v *= 1e9; break;
        case 't': case 'T': v *= 1e12; break;
        default: return -1;
        }
        end++;
    }
    if (*end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int ydoc_get_number(const ydoc *d, const yaml_node_t *n, const char *path, double lo, double hi,
                    unsigned flags, double *out) {
    const char *s = NULL;
    int rc = ydoc_get_str(d, n, path, &s);
    if (rc || !s) return rc;
    int open = (flags & YDOC_LO_OPEN) != 0, si = (flags & YDOC_SI) != 0;
    double v;
    if (parse_number(s, si, &v) || v > hi || (open ? v <= lo : v < lo))
        return ydoc_fail(d, n, path, "expected a number in %s%g, %g]%s, got '%.40s'", open ? "(" : "[", lo,
                         hi, si ? " (suffixes K, M, B, T allowed)" : "", s);
    *out = v;
    return 0;
}

int ydoc_duration_parse(const char *s, double *out_s) {
    if (!s || !*s) return TS_ERR_INVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0) return TS_ERR_INVAL;
    while (*end == ' ') end++;
    double mult;
    if (!*end || !strcmp(end, "s")) mult = 1;
    else if (!strcmp(end, "ms")) mult = 1e-3;
    else if (!strcmp(end, "m") || !strcmp(end, "min")) mult = 60;
    else if (!strcmp(end, "h")) mult = 3600;
    else return TS_ERR_INVAL;
    if (!isfinite(v * mult)) return TS_ERR_INVAL;
    *out_s = v * mult;
    return 0;
}

int ydoc_get_duration(const ydoc *d, const yaml_node_t *n, const char *path, double lo_s, double hi_s,
                      double *out_s) {
    const char *s = NULL;
    int rc = ydoc_get_str(d, n, path, &s);
    if (rc || !s) return rc;
    double v;
    if (ydoc_duration_parse(s, &v) || v < lo_s || v > hi_s)
        return ydoc_fail(d, n, path, "expected a duration from %gs to %gs such as 30s, 500ms or 2m, got '%.40s'",
                         lo_s, hi_s, s);
    *out_s = v;
    return 0;
}

/* Digits, optional spaces, an optional unit; 0 and *v, or -1. */
static int parse_size(const char *s, uint64_t *v) {
    static const struct { const char *unit; uint64_t mult; } units[] = {
        {"b", 1},
        {"kb", 1000ull}, {"mb", 1000ull * 1000}, {"gb", 1000ull * 1000 * 1000},
        {"tb", 1000ull * 1000 * 1000 * 1000},
        {"kib", 1ull << 10}, {"mib", 1ull << 20}, {"gib", 1ull << 30}, {"tib", 1ull << 40},
    };
    uint64_t x, mult = 0;
    size_t k = parse_digits(s, &x);
    if (k == 0) return -1;
    const char *u = s + k;
    while (*u == ' ') u++;
    if (!*u) mult = 1;
    for (size_t i = 0; *u && i < sizeof units / sizeof units[0]; i++)
        if (!strcasecmp(u, units[i].unit)) mult = units[i].mult;
    if (mult == 0 || x > UINT64_MAX / mult) return -1;
    *v = x * mult;
    return 0;
}

int ydoc_get_size(const ydoc *d, const yaml_node_t *n, const char *path, uint64_t lo, uint64_t hi,
                  uint64_t *out) {
    const char *s = NULL;
    int rc = ydoc_get_str(d, n, path, &s);
    if (rc || !s) return rc;
    uint64_t v;
    if (parse_size(s, &v) == 0 && v >= lo && v <= hi) {
        *out = v;
        return 0;
    }
    char range[64];
    if (hi == UINT64_MAX)
        snprintf(range, sizeof range, "of at least %" PRIu64, lo);
    else
        snprintf(range, sizeof range, "from %" PRIu64 " to %" PRIu64, lo, hi);
    return ydoc_fail(d, n, path,
                     "expected a size in bytes %s, like 1048576 or 256MiB "
                     "(units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got '%.40s'", range, s);
}
