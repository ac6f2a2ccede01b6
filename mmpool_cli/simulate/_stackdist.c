/* The compiled twin of cache_curve._intervals and _steps: the exact hit curve of a byte-counted LRU
 * (entries larger than the cache not admitted, an optional bound on entries) from one pass.
 *
 * curve(keys, sizes, weights, work, groups, max_entries) -> (sizes, hits, work): int64 buffers in (groups
 * empty: every lookup its own group), the
 * step function's three int64 columns out. Keys are dense ids in [0, n). The Python code
 * (cache_curve.py) is the reference; tests/simulate/test_cache_curve.py keeps the two equal.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define INF ((int64_t)1 << 62)
#define SHORT 48 /* a key used again within this many times is scanned, not looked up in the trees */

/* One size class (sizes in [2^(j-1), 2^j)) by the time of each key's last lookup: its total bytes
 * and count, and a segment tree of the smallest size. The bytes and counts by time of every class
 * are in one Fenwick tree (Shared), the classes of a node side by side, so that one walk answers
 * all classes. */
typedef struct {
    int64_t n, total, count;
    int64_t *mn;
} Class;

typedef struct {
    int k;          /* classes that occur */
    int slot[64];   /* class -> its place in a node, -1 where it never occurs */
    int64_t n;      /* times */
    int64_t *fw;    /* (n + 1) nodes x k classes x (bytes, count) */
} Shared;

static int class_init(Class *c, int64_t n) {
    c->n = n; c->total = 0; c->count = 0;
    c->mn = malloc((size_t)(2 * n) * sizeof(int64_t));
    if (!c->mn) return -1;
    for (int64_t i = 0; i < 2 * n; i++) c->mn[i] = INF;
    return 0;
}

static void class_free(Class *c) { free(c->mn); c->mn = NULL; }

static int shared_init(Shared *sh, int64_t n) {
    free(sh->fw);
    sh->n = n;
    sh->fw = calloc((size_t)(n + 1) * (size_t)sh->k * 2, sizeof(int64_t));
    return sh->fw ? 0 : -1;
}

static void class_put(Class *c, Shared *sh, int j, int64_t pos, int64_t size, int sign) {
    c->total += sign * size;
    c->count += sign;
    int64_t stride = 2 * (int64_t)sh->k, off = 2 * (int64_t)sh->slot[j];
    for (int64_t i = pos + 1; i <= sh->n; i += i & -i) { sh->fw[i * stride + off] += sign * size; sh->fw[i * stride + off + 1] += sign; }
    int64_t i = pos + c->n;
    c->mn[i] = sign > 0 ? size : INF;
    for (i /= 2; i; i /= 2) { /* stop where the smallest does not change */
        int64_t m = c->mn[2 * i] < c->mn[2 * i + 1] ? c->mn[2 * i] : c->mn[2 * i + 1];
        if (c->mn[i] == m) break;
        c->mn[i] = m;
    }
}

/* every class's bytes and count before and at ``pos`` (prefix sums), in ``acc`` (2 per slot) */
static void shared_prefix(const Shared *sh, int64_t pos, int64_t *acc) {
    int64_t stride = 2 * (int64_t)sh->k;
    for (int64_t q = 0; q < stride; q++) acc[q] = 0;
    for (int64_t i = pos + 1; i; i -= i & -i) {
        const int64_t *row = sh->fw + i * stride;
        for (int64_t q = 0; q < stride; q++) acc[q] += row[q];
    }
}

static int64_t class_least(const Class *c, int64_t lo, int64_t hi, int64_t *pos) {
    int64_t best = INF, node = 0;
    for (int64_t a = lo + c->n, b = hi + c->n; a < b; a /= 2, b /= 2) {
        if (a & 1) { if (c->mn[a] < best) { best = c->mn[a]; node = a; } a++; }
        if (b & 1) { b--; if (c->mn[b] < best) { best = c->mn[b]; node = b; } }
    }
    if (best == INF) { *pos = -1; return INF; }
    while (node < c->n) node = c->mn[2 * node] == best ? 2 * node : 2 * node + 1;
    *pos = node - c->n;
    return best;
}

static void class_two_least(const Class *c, int64_t lo, int64_t hi, int64_t *m1, int64_t *m2) {
    int64_t pos, p2;
    *m1 = class_least(c, lo, hi, &pos);
    if (pos < 0) { *m2 = INF; return; }
    int64_t a = class_least(c, lo, pos, &p2), b = class_least(c, pos + 1, hi, &p2);
    *m2 = a < b ? a : b;
}

static int bits(int64_t x) { int b = 0; while (x) { b++; x >>= 1; } return b; }

typedef struct { int64_t *at; int32_t *ref; int64_t len, cap; } Events; /* ref: lookup+1, negated at an end */

static int ev_add(Events *e, int64_t at, int32_t ref) {
    if (e->len == e->cap) {
        int64_t cap = e->cap ? 2 * e->cap : 1024;
        int64_t *a = realloc(e->at, (size_t)cap * sizeof(int64_t));
        if (!a) return -1;
        e->at = a;
        int32_t *r = realloc(e->ref, (size_t)cap * sizeof(int32_t));
        if (!r) return -1;
        e->ref = r;
        e->cap = cap;
    }
    e->at[e->len] = at;
    e->ref[e->len++] = ref;
    return 0;
}

typedef struct { Events *e; int64_t lo, hi; int32_t ref; int64_t first; } Emit;

static int emit_flush(Emit *m) {
    if (m->lo < 0) return 0;
    int r = ev_add(m->e, m->lo, m->ref);
    if (!r && m->hi < INF) r = ev_add(m->e, m->hi, -m->ref);
    m->lo = m->hi = -1;
    return r;
}

static int emit_add(Emit *m, int64_t lo, int64_t hi) {
    if (lo >= hi) return 0;
    if (lo < m->first) m->first = lo;
    if (lo == m->hi) { m->hi = hi; return 0; }
    if (emit_flush(m)) return -1;
    m->lo = lo; m->hi = hi;
    return 0;
}

/* LSD radix sort of the events by size, 16 bits a pass, only as many passes as the largest needs */
static int ev_sort(Events *e) {
    int64_t n = e->len, top = 0;
    for (int64_t i = 0; i < n; i++) if (e->at[i] > top) top = e->at[i];
    int64_t *a2 = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    int32_t *r2 = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    size_t *cnt = malloc(65537 * sizeof(size_t));
    if (!a2 || !r2 || !cnt) { free(a2); free(r2); free(cnt); return -1; }
    for (int shift = 0; shift < 64 && (top >> shift); shift += 16) {
        memset(cnt, 0, 65537 * sizeof(size_t));
        for (int64_t i = 0; i < n; i++) cnt[((uint64_t)e->at[i] >> shift & 0xffff) + 1]++;
        for (int d = 0; d < 65536; d++) cnt[d + 1] += cnt[d];
        for (int64_t i = 0; i < n; i++) {
            size_t p = cnt[(uint64_t)e->at[i] >> shift & 0xffff]++;
            a2[p] = e->at[i];
            r2[p] = e->ref[i];
        }
        int64_t *ta = e->at; e->at = a2; a2 = ta;
        int32_t *tr = e->ref; e->ref = r2; r2 = tr;
    }
    free(a2); free(r2); free(cnt);
    return 0;
}

typedef struct { int64_t first, index, key; } Pending;

static int pending_order(const void *a, const void *b) {
    const Pending *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* out of times: renumber the live keys in time order, and grow where they crowd the times */
static int renumber(Class *cls, Shared *sh, int64_t *where, const int64_t *size_of, int64_t n, int64_t **owner,
                    int64_t **at, int64_t *cap, int64_t *t, int64_t nlive) {
    free(*owner);
    *owner = malloc((size_t)*cap * sizeof(int64_t));
    if (!*owner) return -1;
    for (int64_t p = 0; p < *cap; p++) (*owner)[p] = -1;
    for (int64_t k = 0; k < n; k++) if (where[k] >= 0) (*owner)[where[k]] = k;
    int64_t want = 4 * nlive > *cap ? 4 * nlive : *cap;
    for (int j = 0; j < 64; j++) if (cls[j].mn) class_free(&cls[j]);
    if (shared_init(sh, want)) return -1;
    free(*at);
    *at = malloc((size_t)want * sizeof(int64_t));
    if (!*at) return -1;
    for (int64_t p = 0; p < want; p++) (*at)[p] = -1;
    int64_t m = 0;
    for (int64_t p = 0; p < *cap; p++) {
        int64_t k = (*owner)[p];
        if (k < 0) continue;
        int j = bits(size_of[k]);
        if (!cls[j].mn && class_init(&cls[j], want)) return -1;
        where[k] = m;
        (*at)[m] = k;
        class_put(&cls[j], sh, j, m++, size_of[k], 1);
    }
    *cap = want;
    *t = m;
    return 0;
}

static PyObject *curve(PyObject *self, PyObject *args) {
    Py_buffer kb, sb, wb, ub, gb;
    long long max_entries;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*L", &kb, &sb, &wb, &ub, &gb, &max_entries)) return NULL;
    PyObject *result = NULL;
    int64_t n = kb.len / 8;
    const int64_t *keys = kb.buf, *sizes = sb.buf, *w = wb.buf, *u = ub.buf, *groups = gb.len ? gb.buf : NULL;
    int64_t limit = max_entries > 0 ? max_entries : INF;
    int64_t *where = NULL, *size_of = NULL, *owner = NULL;
    Pending *pend = NULL;
    int64_t *at = NULL;
    int64_t npend = 0;
    Class cls[64];
    memset(cls, 0, sizeof cls);
    Shared sh;
    memset(&sh, 0, sizeof sh);
    int64_t acc[128];
    Events ev = {0};
    if (sb.len != kb.len || wb.len != kb.len || ub.len != kb.len || (gb.len && gb.len != kb.len) || kb.len % 8 ||
        n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "keys, sizes, weights and work: one int64 each per lookup");
        goto done;
    }
    where = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    size_of = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    pend = malloc((size_t)(n ? n : 1) * sizeof(Pending));
    int64_t cap = 2 * (n < 65536 ? n : 65536);
    if (cap < 64) cap = 64;
    if (!where || !size_of || !pend) { PyErr_NoMemory(); goto done; }
    for (int64_t i = 0; i < n; i++) { where[i] = -1; size_of[i] = -1; }
    for (int j = 0; j < 64; j++) sh.slot[j] = -1;
    for (int64_t i = 0; i < n; i++) {
        if (sizes[i] < 0 || sizes[i] >= INF) {
            PyErr_SetString(PyExc_ValueError, "a key outside 0..n-1, or a size outside 0..2**62");
            goto done;
        }
        int j = bits(sizes[i]);
        if (sh.slot[j] < 0) sh.slot[j] = 0, sh.k++;
    }
    for (int j = 0, q = 0; j < 64; j++) if (sh.slot[j] >= 0) sh.slot[j] = q++;
    if (sh.k == 0) sh.k = 1;
    if (shared_init(&sh, cap)) { PyErr_NoMemory(); goto done; }
    at = malloc((size_t)cap * sizeof(int64_t));
    if (!at) { PyErr_NoMemory(); goto done; }
    for (int64_t p = 0; p < cap; p++) at[p] = -1;
    int64_t t = 0, nlive = 0;
    int hiclass = 0;
    for (int64_t i = 0; i <= n; i++) {
        if (npend && (i == n || !groups || groups[i] != groups[i - 1])) {
            /* the group's keys are used now: those that hit at smaller sizes first */
            qsort(pend, (size_t)npend, sizeof(Pending), pending_order);
            for (int64_t p = 0; p < npend; p++) {
                if (t == cap && renumber(cls, &sh, where, size_of, n, &owner, &at, &cap, &t, nlive)) { PyErr_NoMemory(); goto done; }
                int64_t key = pend[p].key, s = size_of[key], prev = where[key];
                int cx = bits(s);
                if (prev >= 0) { class_put(&cls[cx], &sh, cx, prev, s, -1); at[prev] = -1; nlive--; }
                if (!cls[cx].mn && class_init(&cls[cx], cap)) { PyErr_NoMemory(); goto done; }
                if (cx > hiclass) hiclass = cx;
                class_put(&cls[cx], &sh, cx, t, s, 1);
                at[t] = key;
                where[key] = t++;
                nlive++;
            }
            npend = 0;
        }
        if (i == n) break;
        int64_t key = keys[i];
        if (key < 0 || key >= n || sizes[i] < 0 || sizes[i] >= INF) {
            PyErr_SetString(PyExc_ValueError, "a key outside 0..n-1, or a size outside 0..2**62");
            goto done;
        }
        if (size_of[key] < 0) size_of[key] = sizes[i];
        int64_t s = size_of[key], prev = where[key];
        int cx = bits(s);
        Emit em = {&ev, -1, -1, (int32_t)(i + 1), INF};
        if (prev >= 0) {
            int64_t as[64], ak[64];
            int top = -1;
            int64_t sm1[64], sm2[64];
            int scanned = t - prev <= SHORT;
            if (scanned) { /* a recent key: the few times since are read directly */
                for (int j = 0; j <= hiclass; j++) { as[j] = ak[j] = 0; sm1[j] = sm2[j] = INF; }
                for (int64_t p = prev + 1; p < t; p++) {
                    int64_t k = at[p];
                    if (k < 0) continue;
                    int64_t z = size_of[k];
                    int j = bits(z);
                    as[j] += z; ak[j]++;
                    if (z < sm1[j]) { sm2[j] = sm1[j]; sm1[j] = z; } else if (z < sm2[j]) sm2[j] = z;
                }
                for (int j = 0; j <= hiclass; j++) if (ak[j]) top = j;
            } else {
                shared_prefix(&sh, prev, acc);
                for (int j = 0; j <= hiclass; j++) {
                    as[j] = ak[j] = 0;
                    if (cls[j].mn && cls[j].count) {
                        as[j] = cls[j].total - acc[2 * sh.slot[j]];
                        ak[j] = cls[j].count - acc[2 * sh.slot[j] + 1];
                    }
                    if (ak[j]) top = j;
                }
            }
            int64_t base = s, used = 1;
            for (int j = 0; j < (cx < top + 1 ? cx : top + 1); j++) { base += as[j]; used += ak[j]; }
            for (int j = cx; j <= top; j++) {
                int64_t lo = ((int64_t)1 << j) >> 1, hi = (int64_t)1 << j;
                if (s > lo) lo = s;
                int r = 0;
                if (j == 0) {
                    if (used + ak[j] <= limit) r = emit_add(&em, lo, hi);
                } else if (ak[j] == 0) {
                    if (used <= limit) r = emit_add(&em, lo > base ? lo : base, hi);
                } else if (base < hi) {
                    int64_t m1, m2;
                    if (scanned) { m1 = sm1[j]; m2 = sm2[j]; }
                    else class_two_least(&cls[j], prev + 1, t, &m1, &m2);
                    if (used <= limit) r = emit_add(&em, lo > base ? lo : base, m1 < hi ? m1 : hi);
                    if (!r && used + 1 <= limit)
                        r = emit_add(&em, m1 > base + m1 ? m1 : base + m1, m2 < hi ? m2 : hi);
                }
                if (r) { PyErr_NoMemory(); goto done; }
                base += as[j]; used += ak[j];
            }
            if (used <= limit) {
                int64_t from = top >= cx ? (int64_t)1 << top : 0;
                if (emit_add(&em, base > from ? base : from, INF)) { PyErr_NoMemory(); goto done; }
            }
            if (emit_flush(&em)) { PyErr_NoMemory(); goto done; }
        }
        pend[npend].first = em.first;
        pend[npend].index = i;
        pend[npend++].key = key;
    }
    if (ev_sort(&ev)) { PyErr_NoMemory(); goto done; }
    /* the step function: (size, hits, work) at each size where it changes */
    int64_t m = 0, *oa = malloc((size_t)(ev.len + 1) * sizeof(int64_t)),
            *oh = malloc((size_t)(ev.len + 1) * sizeof(int64_t)), *ow = malloc((size_t)(ev.len + 1) * sizeof(int64_t));
    if (!oa || !oh || !ow) { free(oa); free(oh); free(ow); PyErr_NoMemory(); goto done; }
    oa[0] = 0; oh[0] = 0; ow[0] = 0; m = 1;
    int64_t hits = 0, work = 0;
    for (int64_t j = 0; j < ev.len;) {
        int64_t at = ev.at[j];
        for (; j < ev.len && ev.at[j] == at; j++) {
            int32_t r = ev.ref[j];
            int64_t idx = (r > 0 ? r : -r) - 1, sign = r > 0 ? 1 : -1;
            hits += sign * w[idx];
            work += sign * w[idx] * u[idx];
        }
        if (oa[m - 1] == at) { oh[m - 1] = hits; ow[m - 1] = work; }
        else if (hits != oh[m - 1] || work != ow[m - 1]) { oa[m] = at; oh[m] = hits; ow[m] = work; m++; }
    }
    while (m > 1 && oh[m - 1] == oh[m - 2] && ow[m - 1] == ow[m - 2]) m--;
    result = Py_BuildValue("(y#y#y#)", (char *)oa, (Py_ssize_t)(m * 8), (char *)oh, (Py_ssize_t)(m * 8),
                           (char *)ow, (Py_ssize_t)(m * 8));
    free(oa); free(oh); free(ow);
done:
    free(where); free(size_of); free(owner); free(pend); free(at); free(ev.at); free(ev.ref);
    for (int j = 0; j < 64; j++) if (cls[j].mn) class_free(&cls[j]);
    free(sh.fw);
    PyBuffer_Release(&kb); PyBuffer_Release(&sb); PyBuffer_Release(&wb); PyBuffer_Release(&ub); PyBuffer_Release(&gb);
    return result;
}

static PyMethodDef methods[] = {
    {"curve", curve, METH_VARARGS, "curve(keys, sizes, weights, work, groups, max_entries) -> (sizes, hits, work)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stackdist", "The exact LRU hit curve, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__stackdist(void) { return PyModule_Create(&module); }
