/* The compiled twin of caches/curve.py's _intervals and _steps: the exact hit curve of a byte-counted LRU
 * (entries larger than the cache not admitted, an optional bound on entries) from one pass.
 *
 * curve(keys, sizes, weights, work, groups, max_entries[, in_order]) -> ((size, hits, work), ...): int64
 * buffers in (groups empty: every lookup its own group; in_order: a group's keys are used in lookup
 * order, not hits first), the step function out. Keys are dense ids in [0, n). The Python code
 * (caches/curve.py) is the reference; tests/caches/test_curve.py keeps the two equal.
 */
#define PY_SSIZE_T_CLEAN
#define _DEFAULT_SOURCE /* madvise */
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#define INF ((int64_t)1 << 62)
#define B 64 /* times a block: a lookup scans the rest of its previous use's block, the trees see only blocks */

/* The live keys by the time of their last lookup, in two levels, so that what a lookup touches at
 * random is one block of times and trees small enough to stay in the processor's caches:
 * - per time: the key's size, class (sizes in [2^(j-1), 2^j) are class j; -1: no key) and id;
 * - per block of B times: a Fenwick tree of every class's bytes and count (the classes of a node side
 *   by side, so that one walk answers all classes), and per class a segment tree of its smallest size. */
typedef struct {
    int k;              /* classes that occur */
    int nf;             /* fields a class in a node: bytes and count (2), or bytes alone (1, see fw_add) */
    int slot[64];       /* class -> its place in a node, -1 where it never occurs */
    int64_t cap, nb;    /* times (nb blocks of B, nb a power of two) */
    int64_t *size;      /* per time */
    int8_t *cls;        /* per time */
    int32_t *key;       /* per time */
    int64_t *fw;        /* (nb + 1) nodes x k classes x nf fields */
    int64_t *mn[64];    /* per class: 2 nb nodes, leaf nb + b the smallest size of block b */
    int64_t total[64], count[64];
} Times;

static int bits(int64_t x) { return x ? 64 - __builtin_clzll((unsigned long long)x) : 0; }

static void times_free(Times *T) {
    free(T->size); free(T->cls); free(T->key); free(T->fw);
    for (int j = 0; j < 64; j++) { free(T->mn[j]); T->mn[j] = NULL; }
    T->size = NULL; T->cls = NULL; T->key = NULL; T->fw = NULL;
}

/* Without a bound on entries a class's count in the window matters only as zero or not, which its
 * bytes tell (every size of class j >= 1 is at least 1): the tree then holds bytes alone (half the
 * memory to walk), and for class 0 (empty entries, no bytes) its count in the bytes' place. */
static void fw_add(Times *T, int64_t b, int j, int64_t size, int64_t sign) {
    int64_t stride = T->nf * (int64_t)T->k, off = T->nf * (int64_t)T->slot[j], v = sign * (j || T->nf == 2 ? size : 1);
    if (T->nf == 2)
        for (int64_t i = b + 1; i <= T->nb; i += i & -i) { T->fw[i * stride + off] += v; T->fw[i * stride + off + 1] += sign; }
    else
        for (int64_t i = b + 1; i <= T->nb; i += i & -i) T->fw[i * stride + off] += v;
}

/* the smallest size of class j in block b, from its times */
static int64_t block_least(const Times *T, int64_t b, int j) {
    int64_t m = INF;
    for (int64_t p = b * B; p < (b + 1) * B; p++) {
        int64_t z = T->cls[p] == j ? T->size[p] : INF;
        m = z < m ? z : m;
    }
    return m;
}

static void mn_fix(int64_t *mn, int64_t i) { /* up from leaf i, while the smallest changes */
    for (i /= 2; i; i /= 2) {
        int64_t m = mn[2 * i] < mn[2 * i + 1] ? mn[2 * i] : mn[2 * i + 1];
        if (mn[i] == m) break;
        mn[i] = m;
    }
}

static void times_put(Times *T, int64_t p, int32_t key, int64_t size) {
    int j = bits(size);
    T->size[p] = size; T->cls[p] = (int8_t)j; T->key[p] = key;
    T->total[j] += size; T->count[j]++;
    fw_add(T, p / B, j, size, 1);
    int64_t leaf = T->nb + p / B, *mn = T->mn[j];
    if (size < mn[leaf]) { mn[leaf] = size; mn_fix(mn, leaf); }
}

static void times_drop(Times *T, int64_t p) {
    int j = T->cls[p];
    int64_t size = T->size[p];
    T->cls[p] = -1;
    T->total[j] -= size; T->count[j]--;
    fw_add(T, p / B, j, size, -1);
    int64_t leaf = T->nb + p / B, *mn = T->mn[j];
    if (mn[leaf] == size) { mn[leaf] = block_least(T, p / B, j); mn_fix(mn, leaf); }
}

/* every class's bytes and count in blocks 0..b (prefix sums), in ``acc`` (2 per slot) */
static void times_prefix(const Times *T, int64_t b, int64_t *acc) {
    int64_t stride = T->nf * (int64_t)T->k;
    for (int64_t q = 0; q < stride; q++) acc[q] = 0;
    for (int64_t i = b + 1; i; i -= i & -i) {
        const int64_t *row = T->fw + i * stride;
        for (int64_t q = 0; q < stride; q++) acc[q] += row[q];
    }
}

/* the smallest of blocks lo .. hi - 1 in ``mn`` and its block (-1 where there is none) */
static int64_t blocks_least(const int64_t *mn, int64_t nb, int64_t lo, int64_t hi, int64_t *block) {
    int64_t best = INF, node = 0;
    for (int64_t a = lo + nb, b = hi + nb; a < b; a /= 2, b /= 2) {
        if (a & 1) { if (mn[a] < best) { best = mn[a]; node = a; } a++; }
        if (b & 1) { b--; if (mn[b] < best) { best = mn[b]; node = b; } }
    }
    if (best == INF) { *block = -1; return INF; }
    while (node < nb) node = mn[2 * node] == best ? 2 * node : 2 * node + 1;
    *block = node - nb;
    return best;
}

static void two_keep(int64_t z, int64_t *m1, int64_t *m2) {
    if (z < *m1) { *m2 = *m1; *m1 = z; } else if (z < *m2) *m2 = z;
}

/* the two smallest sizes of class j in blocks lo .. hi - 1, folded into m1 <= m2 */
static void blocks_two_least(const Times *T, int j, int64_t lo, int64_t hi, int64_t *m1, int64_t *m2) {
    int64_t b, other;
    if (blocks_least(T->mn[j], T->nb, lo, hi, &b) == INF) return;
    for (int64_t p = b * B; p < (b + 1) * B; p++) if (T->cls[p] == j) two_keep(T->size[p], m1, m2);
    two_keep(blocks_least(T->mn[j], T->nb, lo, b, &other), m1, m2);
    two_keep(blocks_least(T->mn[j], T->nb, b + 1, hi, &other), m1, m2);
}

/* (re)build the block trees from the times */
static int times_index(Times *T) {
    int64_t stride = T->nf * (int64_t)T->k;
    free(T->fw);
    T->fw = calloc((size_t)(T->nb + 1) * (size_t)stride, sizeof(int64_t));
    if (!T->fw) return -1;
    for (int j = 0; j < 64; j++) {
        if (T->slot[j] < 0) continue;
        free(T->mn[j]);
        T->mn[j] = malloc((size_t)(2 * T->nb) * sizeof(int64_t));
        if (!T->mn[j]) return -1;
        for (int64_t i = 0; i < 2 * T->nb; i++) T->mn[j][i] = INF;
    }
    for (int64_t p = 0; p < T->cap; p++) {
        int j = T->cls[p];
        if (j < 0) continue;
        int64_t *row = T->fw + (p / B + 1) * stride + T->nf * T->slot[j], *leaf = T->mn[j] + T->nb + p / B;
        row[0] += j || T->nf == 2 ? T->size[p] : 1;
        if (T->nf == 2) row[1]++;
        if (T->size[p] < *leaf) *leaf = T->size[p];
    }
    for (int64_t i = 1; i <= T->nb; i++) { /* Fenwick tree from the blocks' sums, in linear time */
        int64_t up = i + (i & -i);
        if (up <= T->nb) for (int64_t q = 0; q < stride; q++) T->fw[up * stride + q] += T->fw[i * stride + q];
    }
    for (int j = 0; j < 64; j++)
        if (T->mn[j]) for (int64_t i = T->nb - 1; i; i--) T->mn[j][i] = T->mn[j][2 * i] < T->mn[j][2 * i + 1] ? T->mn[j][2 * i] : T->mn[j][2 * i + 1];
    return 0;
}

static int times_grow(Times *T, int64_t nb) {
    int64_t cap = nb * B;
    int64_t *s = realloc(T->size, (size_t)cap * sizeof(int64_t));
    if (!s) return -1;
    T->size = s;
    int8_t *c = realloc(T->cls, (size_t)cap);
    if (!c) return -1;
    T->cls = c;
    int32_t *k = realloc(T->key, (size_t)cap * sizeof(int32_t));
    if (!k) return -1;
    T->key = k;
    for (int64_t p = T->cap; p < cap; p++) T->cls[p] = -1;
    T->cap = cap; T->nb = nb;
    return 0;
}

typedef struct { int64_t where, size; } Key; /* a key's time of last lookup (-1: none yet) and size */
typedef struct { int64_t *at; int32_t *ref; int64_t len, cap; } Events; /* ref: lookup+1, negated at an end */

/* large buffers in huge pages where the system offers them on request: hundreds of MB of events are
 * otherwise as many page faults as 4 KiB pages */
static void huge(void *p, size_t len) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, z = ((uintptr_t)p + len) & ~(uintptr_t)4095;
    if (len >= ((size_t)4 << 20) && z > a) madvise((void *)a, z - a, MADV_HUGEPAGE);
#else
    (void)p; (void)len;
#endif
}

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
        huge(e->at, (size_t)cap * sizeof(int64_t));
        huge(e->ref, (size_t)cap * sizeof(int32_t));
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

/* LSD radix sort of the events by size, as few passes as the largest needs, of at most 15 bits each
 * (fewer passes over hundreds of MB outweigh the wider scatter: 0.5 s against 0.6 s for 13M events) */
static int ev_sort(Events *e) {
    int64_t n = e->len, top = 0;
    for (int64_t i = 0; i < n; i++) if (e->at[i] > top) top = e->at[i];
    int width = bits(top), passes = (width + 14) / 15, digit = passes ? (width + passes - 1) / passes : 0;
    uint64_t mask = ((uint64_t)1 << digit) - 1;
    int64_t *a2 = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    int32_t *r2 = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    size_t *cnt = malloc((size_t)(passes ? passes : 1) * ((size_t)1 << 15) * sizeof(size_t));
    if (!a2 || !r2 || !cnt) { free(a2); free(r2); free(cnt); return -1; }
    huge(a2, (size_t)n * sizeof(int64_t));
    huge(r2, (size_t)n * sizeof(int32_t));
    memset(cnt, 0, (size_t)passes * (mask + 1) * sizeof(size_t));
    for (int64_t i = 0; i < n; i++) /* every pass's counts in one read */
        for (int pass = 0; pass < passes; pass++) cnt[(size_t)pass * (mask + 1) + ((uint64_t)e->at[i] >> (pass * digit) & mask)]++;
    for (int pass = 0; pass < passes; pass++) { /* counts to where each digit's run begins */
        size_t *c = cnt + (size_t)pass * (mask + 1), sum = 0;
        for (uint64_t d = 0; d <= mask; d++) { size_t k = c[d]; c[d] = sum; sum += k; }
    }
    for (int pass = 0, shift = 0; pass < passes; pass++, shift += digit) {
        size_t *c = cnt + (size_t)pass * (mask + 1);
        for (int64_t i = 0; i < n; i++) {
            size_t p = c[(uint64_t)e->at[i] >> shift & mask]++;
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

/* out of times: renumber the live keys in time order (times only move down), and grow to twice them */
static int renumber(Times *T, Key *ks, int64_t *t, int64_t nlive) {
    int64_t m = 0;
    for (int64_t p = 0; p < T->cap; p++) {
        if (T->cls[p] < 0) continue;
        T->size[m] = T->size[p]; T->cls[m] = T->cls[p]; T->key[m] = T->key[p];
        ks[T->key[m]].where = m;
        m++;
    }
    for (int64_t p = m; p < T->cap; p++) T->cls[p] = -1;
    int64_t nb = T->nb;
    while (nb * B < 2 * nlive) nb *= 2;
    if (nb != T->nb && times_grow(T, nb)) return -1;
    *t = m;
    return times_index(T);
}

/* the steps as Python's ((size, hits, work), ...). The inner tuples hold only integers, so they are
 * left out of the cycle collector (as CPython does for such tuples itself): millions of steps would
 * otherwise cost a collection of the young objects every few hundred. */
static PyObject *steps_tuple(const int64_t *oa, const int64_t *oh, const int64_t *ow, int64_t m) {
    PyObject *out = PyTuple_New((Py_ssize_t)m);
    if (!out) return NULL;
    for (int64_t i = 0; i < m; i++) {
        PyObject *step = PyTuple_New(3);
        if (!step) { Py_DECREF(out); return NULL; }
        PyObject_GC_UnTrack(step);
        PyTuple_SET_ITEM(out, (Py_ssize_t)i, step);
        PyObject *a = PyLong_FromLongLong(oa[i]), *h = PyLong_FromLongLong(oh[i]), *w = PyLong_FromLongLong(ow[i]);
        if (a) PyTuple_SET_ITEM(step, 0, a);
        if (h) PyTuple_SET_ITEM(step, 1, h);
        if (w) PyTuple_SET_ITEM(step, 2, w);
        if (!a || !h || !w) { Py_DECREF(out); return NULL; } /* the tuples' empty places are allowed */
    }
    return out;
}

static PyObject *curve(PyObject *self, PyObject *args) {
    Py_buffer kb, sb, wb, ub, gb;
    long long max_entries;
    int in_order = 0; /* a group's keys used in lookup order, not hits first */
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*L|p", &kb, &sb, &wb, &ub, &gb, &max_entries, &in_order)) return NULL;
    PyObject *result = NULL;
    int64_t n = kb.len / 8;
    const int64_t *keys = kb.buf, *sizes = sb.buf, *w = wb.buf, *u = ub.buf, *groups = gb.len ? gb.buf : NULL;
    int64_t limit = max_entries > 0 ? max_entries : INF;
    Key *ks = NULL;
    Pending *pend = NULL;
    int64_t npend = 0;
    Times T;
    memset(&T, 0, sizeof T);
    int64_t acc[128];
    Events ev = {0};
    if (sb.len != kb.len || wb.len != kb.len || ub.len != kb.len || (gb.len && gb.len != kb.len) || kb.len % 8 ||
        n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "keys, sizes, weights and work: one int64 each per lookup");
        goto done;
    }
    int64_t nkeys = 1; /* keys are checked here once: the pass indexes ks with them unchecked */
    for (int64_t i = 0; i < n; i++) {
        if (keys[i] < 0 || keys[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "a key outside 0..n-1, or a size outside 0..2**62");
            goto done;
        }
        if (keys[i] >= nkeys) nkeys = keys[i] + 1;
    }
    ks = malloc((size_t)nkeys * sizeof(Key));
    pend = malloc((size_t)(n ? n : 1) * sizeof(Pending));
    if (!ks || !pend) { PyErr_NoMemory(); goto done; }
    for (int64_t k = 0; k < nkeys; k++) { ks[k].where = -1; ks[k].size = -1; }
    for (int j = 0; j < 64; j++) T.slot[j] = -1;
    for (int64_t i = 0; i < n; i++) {
        if (sizes[i] < 0 || sizes[i] >= INF) {
            PyErr_SetString(PyExc_ValueError, "a key outside 0..n-1, or a size outside 0..2**62");
            goto done;
        }
        int j = bits(sizes[i]);
        if (T.slot[j] < 0) T.slot[j] = 0, T.k++;
    }
    for (int j = 0, q = 0; j < 64; j++) if (T.slot[j] >= 0) T.slot[j] = q++;
    if (T.k == 0) T.k = 1;
    T.nf = limit < INF ? 2 : 1;
    /* few blocks at first (renumbering, linear, doubles them as the live keys need) */
    if (times_grow(&T, 4) || times_index(&T)) { PyErr_NoMemory(); goto done; }
    int64_t t = 0, nlive = 0;
    int hiclass = 0, loclass = 0; /* the classes seen so far lie in loclass .. hiclass */
    while (loclass < 63 && T.slot[loclass] < 0) loclass++;
    for (int64_t i = 0; i <= n; i++) {
        if (npend && (i == n || !groups || groups[i] != groups[i - 1])) {
            /* the group's keys are used now: those that hit at smaller sizes first (or in lookup order) */
            if (npend > 1 && !in_order) qsort(pend, (size_t)npend, sizeof(Pending), pending_order);
            for (int64_t p = 0; p < npend; p++) {
                if (t == T.cap && renumber(&T, ks, &t, nlive)) { PyErr_NoMemory(); goto done; }
                int64_t key = pend[p].key, prev = ks[key].where;
                if (prev >= 0) times_drop(&T, prev);
                else nlive++;
                int cx = bits(ks[key].size);
                if (cx > hiclass) hiclass = cx;
                times_put(&T, t, (int32_t)key, ks[key].size);
                ks[key].where = t++;
            }
            npend = 0;
        }
        if (i == n) break;
        if (i + 32 < n) __builtin_prefetch(&ks[keys[i + 32]]);
        if (i + 16 < n && ks[keys[i + 16]].where >= 0) {
            int64_t q = ks[keys[i + 16]].where; /* the block a later lookup will read (harmless if it moves) */
            if (q < T.cap) { __builtin_prefetch(&T.size[q]); __builtin_prefetch(&T.cls[q]); }
        }
        int64_t key = keys[i];
        if (ks[key].size < 0) ks[key].size = sizes[i];
        int64_t s = ks[key].size, prev = ks[key].where;
        int cx = bits(s);
        Emit em = {&ev, -1, -1, (int32_t)(i + 1), INF};
        if (prev >= 0) {
            /* the keys used since: the rest of prev's block read directly, the later blocks from the trees */
            int64_t as_[65], ak_[65], *as = as_ + 1, *ak = ak_ + 1; /* as[-1], ak[-1]: the empty times' */
            int top = -1;
            as[-1] = ak[-1] = 0;
            for (int j = loclass; j <= hiclass; j++) as[j] = ak[j] = 0;
            int64_t bp = prev / B, end = (bp + 1) * B < t ? (bp + 1) * B : t;
            int scanned = end == t;
            if (scanned || end - prev - 1 <= prev - bp * B + 1) {
                for (int64_t p = prev + 1; p < end; p++) { /* no branch: an empty time counts in as[-1] */
                    int j = T.cls[p];
                    as[j] += T.size[p]; ak[j]++;
                }
                if (!scanned) times_prefix(&T, bp, acc);
            } else { /* the shorter side of prev's block: its start to prev, taken from what follows it */
                for (int64_t p = bp * B; p <= prev; p++) {
                    int j = T.cls[p];
                    as[j] -= T.size[p]; ak[j]--;
                }
                times_prefix(&T, bp - 1, acc);
            }
            if (!scanned)
                for (int j = loclass; j <= hiclass; j++) {
                    if (T.slot[j] < 0) continue;
                    if (T.nf == 2) {
                        as[j] += T.total[j] - acc[2 * T.slot[j]];
                        ak[j] += T.count[j] - acc[2 * T.slot[j] + 1];
                    } else if (j) {
                        as[j] += T.total[j] - acc[T.slot[j]];
                        ak[j] = as[j] > 0; /* zero or not is all that counts without a bound */
                    } else ak[0] += T.count[0] - acc[T.slot[0]];
                }
            for (int j = hiclass; j >= loclass; j--) if (ak[j]) { top = j; break; }
            int64_t base = s, used = 1;
            for (int j = loclass; j < (cx < top + 1 ? cx : top + 1); j++) { base += as[j]; used += ak[j]; }
            for (int j = cx; j <= top; j++) {
                int64_t lo = ((int64_t)1 << j) >> 1, hi = (int64_t)1 << j;
                if (s > lo) lo = s;
                int r = 0;
                if (j == 0) {
                    if (used + ak[j] <= limit) r = emit_add(&em, lo, hi);
                } else if (ak[j] == 0) {
                    if (used <= limit) r = emit_add(&em, lo > base ? lo : base, hi);
                } else if (base < hi) {
                    int64_t m1 = INF, m2 = INF;
                    for (int64_t p = prev + 1; p < end; p++) if (T.cls[p] == j) two_keep(T.size[p], &m1, &m2);
                    if (!scanned) blocks_two_least(&T, j, bp + 1, T.nb, &m1, &m2);
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
            if (j + 16 < ev.len) { /* the lookups' weights are read in size order: at random */
                int32_t ahead = ev.ref[j + 16];
                int64_t q = (ahead > 0 ? ahead : -ahead) - 1;
                __builtin_prefetch(&w[q]); __builtin_prefetch(&u[q]);
            }
            int32_t r = ev.ref[j];
            int64_t idx = (r > 0 ? r : -r) - 1, sign = r > 0 ? 1 : -1;
            hits += sign * w[idx];
            work += sign * w[idx] * u[idx];
        }
        if (oa[m - 1] == at) { oh[m - 1] = hits; ow[m - 1] = work; }
        else if (hits != oh[m - 1] || work != ow[m - 1]) { oa[m] = at; oh[m] = hits; ow[m] = work; m++; }
    }
    while (m > 1 && oh[m - 1] == oh[m - 2] && ow[m - 1] == ow[m - 2]) m--;
    result = steps_tuple(oa, oh, ow, m);
    free(oa); free(oh); free(ow);
done:
    free(ks); free(pend); free(ev.at); free(ev.ref);
    times_free(&T);
    PyBuffer_Release(&kb); PyBuffer_Release(&sb); PyBuffer_Release(&wb); PyBuffer_Release(&ub); PyBuffer_Release(&gb);
    return result;
}

static PyMethodDef methods[] = {
    {"curve", curve, METH_VARARGS, "curve(keys, sizes, weights, work, groups, max_entries[, in_order]) -> ((size, hits, work), ...)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stackdist", "The exact LRU hit curve, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__stackdist(void) { return PyModule_Create(&module); }
