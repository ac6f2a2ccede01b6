/* The compiled twin of caches/curve.py's _intervals and _steps: the exact hit curve of a byte-counted LRU
 * (entries larger than the cache not admitted, an optional bound on entries) from one pass.
 *
 * curve(keys, sizes, weights, work, groups, max_entries[, in_order[, again]]) -> ((size, hits, work), ...):
 * int64 buffers in (groups empty: every lookup its own group; in_order: a group's keys are used in lookup
 * order at every size, not its hits first; again 0: a key looked up twice in a group is looked up again
 * only where its first lookup missed), the step function out. Keys are dense ids in [0, n). The Python
 * code (caches/curve.py) is the reference; tests/caches/test_curve.py and test_replay.py keep the two equal.
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
    int32_t *grp;       /* per time: the group that used it (kept for a dead time until renumbering) */
    int64_t *fw;        /* (nb + 1) nodes x k classes x nf fields */
    int64_t *mn[64];    /* per class: 2 nb nodes, leaf nb + b the smallest size of block b */
    int64_t total[64], count[64];
} Times;

static int bits(int64_t x) { return x ? 64 - __builtin_clzll((unsigned long long)x) : 0; }

static void times_free(Times *T) {
    free(T->size); free(T->cls); free(T->key); free(T->grp); free(T->fw);
    for (int j = 0; j < 64; j++) { free(T->mn[j]); T->mn[j] = NULL; }
    T->size = NULL; T->cls = NULL; T->key = NULL; T->grp = NULL; T->fw = NULL;
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
    int32_t *g = realloc(T->grp, (size_t)cap * sizeof(int32_t));
    if (!g) return -1;
    T->grp = g;
    for (int64_t p = T->cap; p < cap; p++) { T->cls[p] = -1; T->grp[p] = -1; }
    T->cap = cap; T->nb = nb;
    return 0;
}

typedef struct { int64_t where, size; } Key; /* a key's time of last lookup (-1: none yet) and size */
/* What groups need of a key, apart (every lookup reads Key; only grouped lookups read this): as its last
 * group left it, the sizes where its lookup there hit (niv intervals [lo, hi) in iv) and its places among
 * that group's hits and misses; while the group being looked up holds it, its slot there (pg: that
 * group's first lookup). */
typedef struct {
    int64_t hit_at, miss_at, pg, ps;
    int64_t *iv;
    int32_t niv, ivcap;
} Kx;
typedef struct { int64_t *v; int64_t len, cap; } Ivs; /* intervals, two int64 each */

static int ivs_add(Ivs *a, int64_t lo, int64_t hi) {
    if (a->len + 2 > a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 64;
        int64_t *v = realloc(a->v, (size_t)cap * sizeof(int64_t));
        if (!v) return -1;
        a->v = v; a->cap = cap;
    }
    a->v[a->len++] = lo; a->v[a->len++] = hi;
    return 0;
}
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

typedef struct { Events *e; int64_t lo, hi; int32_t ref; Ivs *got; } Emit; /* got: the intervals, kept */

static int emit_flush(Emit *m) {
    if (m->lo < 0) return 0;
    int r = m->got ? ivs_add(m->got, m->lo, m->hi) : 0;
    if (!r) r = ev_add(m->e, m->lo, m->ref);
    if (!r && m->hi < INF) r = ev_add(m->e, m->hi, -m->ref);
    m->lo = m->hi = -1;
    return r;
}

static int emit_add(Emit *m, int64_t lo, int64_t hi) {
    if (lo >= hi) return 0;
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

typedef struct { int64_t key, first, last, off, cnt; } Pending; /* a key's lookups in the group, its intervals */

/* out of times: renumber the live keys in time order (times only move down), and grow to twice them */
static int renumber(Times *T, Key *ks, int64_t *t, int64_t nlive) {
    int64_t m = 0;
    for (int64_t p = 0; p < T->cap; p++) {
        if (T->cls[p] < 0) continue;
        T->size[m] = T->size[p]; T->cls[m] = T->cls[p]; T->key[m] = T->key[p]; T->grp[m] = T->grp[p];
        ks[T->key[m]].where = m;
        m++;
    }
    for (int64_t p = m; p < T->cap; p++) { T->cls[p] = -1; T->grp[p] = -1; }
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

/* The two smallest sizes of class j among the keys used after a lookup's window (the times last + 1 ..
 * t - 1: the rest of a block read directly, the later blocks from the trees), found once a lookup and
 * class; and the keys of the previous group that follow the looked-up key at the sizes being walked. */
typedef struct {
    const Times *T;
    int64_t last, end, bp; /* the window's first block bp, read directly up to end */
    int scanned;           /* the window ends inside that block */
    int64_t m1[64], m2[64];
    uint64_t have;
    const int64_t *behind; /* sizes */
    int64_t nbehind;
} Least;

static void least_of(Least *L, int j, int64_t *m1, int64_t *m2) {
    if (!(L->have >> j & 1)) {
        int64_t a = INF, b = INF;
        for (int64_t p = L->last + 1; p < L->end; p++) if (L->T->cls[p] == j) two_keep(L->T->size[p], &a, &b);
        if (!L->scanned) blocks_two_least(L->T, j, L->bp + 1, L->T->nb, &a, &b);
        L->m1[j] = a; L->m2[j] = b;
        L->have |= (uint64_t)1 << j;
    }
    *m1 = L->m1[j]; *m2 = L->m2[j];
    for (int64_t q = 0; q < L->nbehind; q++) if (bits(L->behind[q]) == j) two_keep(L->behind[q], m1, m2);
}

/* The sizes in [a, b) where a key of s bytes hits, given the bytes (as) and count (ak) of each class
 * lo .. hi of the keys counted since its lookup: at a size C in class j's range [2^(j-1), 2^j) every
 * key of a smaller class counts, none of a larger one, and at most one of class j (two outweigh C). */
static int walk(Emit *em, int64_t s, const int64_t *as, const int64_t *ak, int lo, int hi, int64_t limit, Least *L,
                int64_t a, int64_t b) {
    int cx = bits(s), top = -1;
    for (int j = hi; j >= lo; j--) if (ak[j]) { top = j; break; }
    int64_t base = s, used = 1;
    for (int j = lo; j < (cx < top + 1 ? cx : top + 1); j++) { base += as[j]; used += ak[j]; }
#define CLIP(x, y) emit_add(em, (x) > a ? (x) : a, (y) < b ? (y) : b)
    for (int j = cx; j <= top; j++) {
        int64_t jlo = ((int64_t)1 << j) >> 1, jhi = (int64_t)1 << j;
        if (s > jlo) jlo = s;
        int r = 0;
        if (j == 0) {
            if (used + ak[j] <= limit) r = CLIP(jlo, jhi);
        } else if (ak[j] == 0) {
            if (used <= limit) r = CLIP(jlo > base ? jlo : base, jhi);
        } else if (base < jhi && jhi > a && jlo < b) {
            int64_t m1, m2;
            least_of(L, j, &m1, &m2);
            if (used <= limit) r = CLIP(jlo > base ? jlo : base, m1 < jhi ? m1 : jhi);
            if (!r && used + 1 <= limit) r = CLIP(m1 > base + m1 ? m1 : base + m1, m2 < jhi ? m2 : jhi);
        }
        if (r) return -1;
        base += as[j]; used += ak[j];
    }
    if (used <= limit) {
        int64_t from = top >= cx ? (int64_t)1 << top : 0;
        if (CLIP(base > from ? base : from, INF)) return -1;
    }
#undef CLIP
    return 0;
}

static int inside(int64_t c, const int64_t *iv, int32_t niv) {
    for (int32_t q = 0; q < niv; q++) if (iv[2 * q] <= c && c < iv[2 * q + 1]) return 1;
    return 0;
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static PyObject *curve(PyObject *self, PyObject *args) {
    Py_buffer kb, sb, wb, ub, gb;
    long long max_entries;
    int in_order = 0, again = 1; /* a group's keys used in lookup order; a repeat looked up again */
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*L|pp", &kb, &sb, &wb, &ub, &gb, &max_entries, &in_order, &again)) return NULL;
    PyObject *result = NULL;
    int64_t n = kb.len / 8;
    const int64_t *keys = kb.buf, *sizes = sb.buf, *w = wb.buf, *u = ub.buf, *groups = gb.len ? gb.buf : NULL;
    int64_t limit = max_entries > 0 ? max_entries : INF;
    Key *ks = NULL;
    Kx *kx = NULL;
    int64_t nkeys = 0;
    Pending *pend = NULL;
    int64_t npend = 0;
    Times T;
    memset(&T, 0, sizeof T);
    int64_t acc[128];
    Events ev = {0};
    Ivs got = {0}, pendiv = {0}; /* a lookup's intervals; the group's, until it is used */
    int64_t *others = NULL, *cuts = NULL, *behind = NULL, nbuf = 0; /* a previous group's keys, its pieces */
    if (sb.len != kb.len || wb.len != kb.len || ub.len != kb.len || (gb.len && gb.len != kb.len) || kb.len % 8 ||
        n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "keys, sizes, weights and work: one int64 each per lookup");
        goto done;
    }
    nkeys = 1; /* keys are checked here once: the pass indexes ks with them unchecked */
    for (int64_t i = 0; i < n; i++) {
        if (keys[i] < 0 || keys[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "a key outside 0..n-1, or a size outside 0..2**62");
            goto done;
        }
        if (keys[i] >= nkeys) nkeys = keys[i] + 1;
    }
    ks = malloc((size_t)nkeys * sizeof(Key));
    if (groups) kx = calloc((size_t)nkeys, sizeof(Kx));
    if (groups && !kx) { PyErr_NoMemory(); goto done; }
    pend = malloc((size_t)(n ? n : 1) * sizeof(Pending));
    if (!ks || !pend) { PyErr_NoMemory(); goto done; }
    for (int64_t k = 0; k < nkeys; k++) { ks[k].where = -1; ks[k].size = -1; if (kx) kx[k].pg = -1; }
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
    int64_t t = 0, nlive = 0, gs = 0; /* gs: the group's first lookup */
    int32_t group = 0;                /* the groups used so far */
    int hiclass = 0, loclass = 0; /* the classes seen so far lie in loclass .. hiclass */
    while (loclass < 63 && T.slot[loclass] < 0) loclass++;
    for (int64_t i = 0; i <= n; i++) {
        if (npend && (i == n || !groups || groups[i] != groups[i - 1])) {
            /* the group's keys are used now, in the order of their first lookup (where each lies in the
             * group's order at each size is kept with it: its intervals and places) */
            for (int64_t p = 0; p < npend; p++) {
                if (t == T.cap && renumber(&T, ks, &t, nlive)) { PyErr_NoMemory(); goto done; }
                int64_t key = pend[p].key, prev = ks[key].where;
                Key *K = &ks[key];
                if (prev >= 0) times_drop(&T, prev);
                else nlive++;
                int cx = bits(K->size);
                if (cx > hiclass) hiclass = cx;
                times_put(&T, t, (int32_t)key, K->size);
                T.grp[t] = group;
                K->where = t++;
                if (!kx) continue; /* every lookup its own group: no key of it is ever another's */
                Kx *X = &kx[key];
                if (pend[p].cnt > X->ivcap) {
                    int64_t *v = realloc(X->iv, (size_t)pend[p].cnt * 2 * sizeof(int64_t));
                    if (!v) { PyErr_NoMemory(); goto done; }
                    X->iv = v; X->ivcap = (int32_t)pend[p].cnt;
                }
                if (pend[p].cnt) memcpy(X->iv, pendiv.v + pend[p].off, (size_t)pend[p].cnt * 2 * sizeof(int64_t));
                X->niv = (int32_t)pend[p].cnt;
                X->hit_at = again ? pend[p].last : pend[p].first;
                X->miss_at = pend[p].first;
                if (in_order) { X->niv = 0; X->hit_at = X->miss_at = pend[p].last; } /* one order at every size */
            }
            npend = 0;
            pendiv.len = 0;
            group++;
            gs = i;
        }
        if (i == n) break;
        if (i + 32 < n) __builtin_prefetch(&ks[keys[i + 32]]);
        if (i + 16 < n && ks[keys[i + 16]].where >= 0) {
            int64_t q = ks[keys[i + 16]].where; /* the block a later lookup will read (harmless if it moves) */
            if (q < T.cap) { __builtin_prefetch(&T.size[q]); __builtin_prefetch(&T.cls[q]); }
        }
        int64_t key = keys[i];
        Key *K = &ks[key];
        Kx *X = kx ? &kx[key] : NULL;
        if (K->size < 0) K->size = sizes[i];
        if (X && X->pg == gs) { /* looked up again in its group: it sees what its first lookup saw */
            Pending *P = &pend[X->ps];
            P->last = i;
            for (int64_t q = 0; again && q < P->cnt; q++) { /* not again: looked up only where it missed */
                int64_t lo = pendiv.v[P->off + 2 * q], hi = pendiv.v[P->off + 2 * q + 1];
                if (ev_add(&ev, lo, (int32_t)(i + 1)) || (hi < INF && ev_add(&ev, hi, -(int32_t)(i + 1)))) {
                    PyErr_NoMemory(); goto done;
                }
            }
            continue;
        }
        int64_t s = K->size, prev = K->where;
        got.len = 0;
        Emit em = {&ev, -1, -1, (int32_t)(i + 1), kx ? &got : NULL}; /* intervals kept only for groups */
        if (prev >= 0) {
            /* the previous group's times around prev; its other keys still last used there */
            int32_t g = T.grp[prev];
            int64_t gend = prev + 1, gbeg = prev, nothers = 0;
            while (kx && gend < t && T.grp[gend] == g) gend++;
            while (kx && gbeg > 0 && T.grp[gbeg - 1] == g) gbeg--;
            if (gend - gbeg > nbuf) {
                int64_t m = 2 * (gend - gbeg), *o = realloc(others, (size_t)m * sizeof(int64_t)),
                        *c = o ? realloc(cuts, (size_t)m * sizeof(int64_t)) : NULL;
                if (o) others = o;
                if (c) cuts = c;
                int64_t *h = c ? realloc(behind, (size_t)(2 * m) * sizeof(int64_t)) : NULL;
                if (h) behind = h;
                if (!o || !c || !h) { PyErr_NoMemory(); goto done; }
                nbuf = m;
            }
            for (int64_t p = gbeg; p < gend; p++) if (p != prev && T.cls[p] >= 0) others[nothers++] = T.key[p];
            int64_t last = gend - 1;
            /* the keys used since: the rest of last's block read directly, the later blocks from the trees */
            int64_t as_[65], ak_[65], *as = as_ + 1, *ak = ak_ + 1; /* as[-1], ak[-1]: the empty times' */
            as[-1] = ak[-1] = 0;
            for (int j = loclass; j <= hiclass; j++) as[j] = ak[j] = 0;
            int64_t bp = last / B, end = (bp + 1) * B < t ? (bp + 1) * B : t;
            int scanned = end == t;
            if (scanned || end - last - 1 <= last - bp * B + 1) {
                for (int64_t p = last + 1; p < end; p++) { /* no branch: an empty time counts in as[-1] */
                    int j = T.cls[p];
                    as[j] += T.size[p]; ak[j]++;
                }
                if (!scanned) times_prefix(&T, bp, acc);
            } else { /* the shorter side of last's block: its start to last, taken from what follows it */
                for (int64_t p = bp * B; p <= last; p++) {
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
            Least L; /* its memo (m1, m2) is read only where ``have`` says it was written */
            L.T = &T; L.last = last; L.end = end; L.bp = bp; L.scanned = scanned;
            L.have = 0; L.behind = behind; L.nbehind = 0;
            if (!nothers) {
                if (walk(&em, s, as, ak, loclass, hiclass, limit, &L, 0, INF)) { PyErr_NoMemory(); goto done; }
            } else {
                /* the sizes in pieces where the previous group's order is one: at each, its keys that follow
                 * this one (its hits by their lookups, then its misses by their first) count as well */
                int64_t ncuts = 0;
                for (int64_t q = -1; q < nothers; q++) {
                    const Kx *O = q < 0 ? X : &kx[others[q]];
                    for (int32_t r = 0; r < 2 * O->niv; r++) {
                        int64_t c = O->iv[r];
                        if (c > s && c < INF) { /* below s it never hits: those ends change nothing */
                            if (ncuts == nbuf) { /* more ends than times: grow (rare) */
                                int64_t *c2 = realloc(cuts, (size_t)(2 * nbuf) * sizeof(int64_t));
                                if (!c2) { PyErr_NoMemory(); goto done; }
                                cuts = c2;
                                int64_t *o2 = realloc(others, (size_t)(2 * nbuf) * sizeof(int64_t));
                                if (!o2) { PyErr_NoMemory(); goto done; }
                                others = o2;
                                int64_t *h2 = realloc(behind, (size_t)(4 * nbuf) * sizeof(int64_t));
                                if (!h2) { PyErr_NoMemory(); goto done; }
                                behind = h2;
                                nbuf *= 2;
                            }
                            cuts[ncuts++] = c;
                        }
                    }
                }
                if (ncuts > 32) qsort(cuts, (size_t)ncuts, sizeof(int64_t), cmp64);
                else /* a few: in place, without qsort's calls */
                    for (int64_t r = 1; r < ncuts; r++) {
                        int64_t c = cuts[r], z = r;
                        for (; z > 0 && cuts[z - 1] > c; z--) cuts[z] = cuts[z - 1];
                        cuts[z] = c;
                    }
                /* the pieces from s up (below s it never hits); adjacent pieces that put the same keys after
                 * it (told apart by a mask where there are at most 64 of them) are walked as one */
                int64_t bs[2][65], bk[2][65], nbh[2] = {0, 0}, pa = -1, pb = -1;
                uint64_t pmask = 0;
                int cur = 0; /* bs[cur], bk[cur], behind + cur * nbuf: the piece being merged */
                /* from the size of everything counted, the group's keys with it, every size hits */
                int64_t upper = s, upcount = 1 + nothers;
                for (int j = loclass; j <= hiclass; j++) { upper += as[j]; upcount += ak[j]; }
                for (int64_t o = 0; o < nothers; o++) upper += ks[others[o]].size;
                for (int64_t q = -1; q <= ncuts; q++) {
                    int64_t a = q < 0 ? s : q < ncuts ? cuts[q] : INF, b = q + 1 < ncuts ? cuts[q + 1] : INF;
                    int nx = 1 - cur, rest = q < ncuts && a >= upper && upcount <= limit;
                    uint64_t mask = 0;
                    if (q < ncuts && !rest) {
                        if (a >= b) continue;
                        int hit = inside(a, X->iv, X->niv);
                        int64_t *hs = bs[nx], *hk = bk[nx], *hb = behind + nx * nbuf;
                        nbh[nx] = 0;
                        for (int j = loclass; j <= hiclass; j++) { hs[j] = as[j]; hk[j] = ak[j]; }
                        for (int64_t o = 0; o < nothers; o++) {
                            const Kx *O = &kx[others[o]];
                            int64_t z = ks[others[o]].size;
                            int oh = inside(a, O->iv, O->niv);
                            if ((hit && (!oh || O->hit_at > X->hit_at)) || (!hit && !oh && O->miss_at > X->miss_at)) {
                                int j = bits(z);
                                hs[j] += z; hk[j]++;
                                hb[nbh[nx]++] = z;
                                if (o < 64) mask |= (uint64_t)1 << o;
                            }
                        }
                        if (pa >= 0 && a == pb && nothers <= 64 && mask == pmask) { pb = b; continue; }
                    }
                    if (pa >= 0) {
                        L.behind = behind + cur * nbuf; L.nbehind = nbh[cur];
                        if (walk(&em, s, bs[cur], bk[cur], loclass, hiclass, limit, &L, pa, pb)) {
                            PyErr_NoMemory(); goto done;
                        }
                    }
                    if (rest) {
                        if (emit_add(&em, a, INF)) { PyErr_NoMemory(); goto done; }
                        break;
                    }
                    pa = a; pb = b; pmask = mask; cur = nx;
                }
            }
            if (emit_flush(&em)) { PyErr_NoMemory(); goto done; }
        }
        Pending *P = &pend[npend];
        P->key = key; P->first = i; P->last = i; P->off = pendiv.len; P->cnt = got.len / 2;
        for (int64_t q = 0; kx && q < got.len; q++) { /* kept for the group's keys' later lookups */
            if (pendiv.len == pendiv.cap) {
                int64_t cap = pendiv.cap ? 2 * pendiv.cap : 64, *v = realloc(pendiv.v, (size_t)cap * sizeof(int64_t));
                if (!v) { PyErr_NoMemory(); goto done; }
                pendiv.v = v; pendiv.cap = cap;
            }
            pendiv.v[pendiv.len++] = got.v[q];
        }
        if (X) { X->pg = gs; X->ps = npend; }
        npend++;
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
    if (kx) for (int64_t k = 0; k < nkeys; k++) free(kx[k].iv);
    free(ks); free(kx); free(pend); free(ev.at); free(ev.ref); free(got.v); free(pendiv.v); free(others); free(cuts); free(behind);
    times_free(&T);
    PyBuffer_Release(&kb); PyBuffer_Release(&sb); PyBuffer_Release(&wb); PyBuffer_Release(&ub); PyBuffer_Release(&gb);
    return result;
}

/* The compiled twin of caches/replay.py's _replay: an LRU counted in bytes replayed at each of ``points``,
 * batch by batch, in the order engines drive it (every lookup of a batch, then its distinct misses
 * stored in the order of their first lookup, each evicting from the least recently used end until it
 * fits; an entry larger than the cache is not admitted; ``max_entries`` > 0 bounds the entries; an
 * entry's bytes are its own plus the ``shared`` bytes of every miss stored from its batch). A repeat of
 * a key in a batch is looked up again (``again``: a hit is moved and counted again) or only where the
 * batch's first lookup of it missed (``again`` 0: it misses). The GIL is released while it replays, so
 * that threads replay different points side by side.
 *
 * replay(keys, sizes, weights, work, groups, shared, max_entries, again, points)
 *   -> ((hits, work, lookups made), ...) one a point; int64 buffers in (groups, shared empty: none). */
typedef struct {
    int64_t n, nkeys;
    const int64_t *keys, *sizes, *w, *u, *groups, *shared;
    int64_t cap;
    int again;
    int32_t *prev, *next, *stamp, *miss; /* the LRU list by key; a key's last batch; a batch's misses */
    int64_t *bytes;                       /* a cached key's entry bytes, -1 where it is not cached */
} Lru;

static void lru_at(Lru *L, int64_t size, int64_t out[3]) {
    int64_t nk = L->nkeys, used = 0, count = 0, hits = 0, work = 0, made = 0;
    int32_t head = -1, tail = -1;
    for (int64_t k = 0; k < nk; k++) { L->bytes[k] = -1; L->stamp[k] = -1; }
    for (int64_t i = 0, b = 0; i < L->n; b++) {
        int64_t j = i + 1;
        if (L->groups) while (j < L->n && L->groups[j] == L->groups[i]) j++;
        int64_t nmiss = 0, extra = 0;
        for (int64_t k = i; k < j; k++) {
            int64_t key = L->keys[k];
            int first = L->stamp[key] != (int32_t)b;
            L->stamp[key] = (int32_t)b;
            if (L->bytes[key] >= 0) {
                if (!first && !L->again) continue; /* its first lookup hit: not looked up again */
                made += L->w[k];
                hits += L->w[k];
                work += L->w[k] * L->u[k];
                if (tail != key) { /* to the recent end */
                    int32_t p = L->prev[key], q = L->next[key];
                    if (p >= 0) L->next[p] = q; else head = q;
                    L->prev[q] = p; /* q exists: key is not the tail */
                    L->prev[key] = tail; L->next[key] = -1;
                    L->next[tail] = (int32_t)key;
                    tail = (int32_t)key;
                }
            } else {
                made += L->w[k];
                if (first) {
                    L->miss[nmiss++] = (int32_t)k;
                    if (L->shared) extra = extra + L->shared[k] < INF ? extra + L->shared[k] : INF;
                }
            }
        }
        for (int64_t m = 0; m < nmiss; m++) {
            int64_t k = L->miss[m], key = L->keys[k], s = L->sizes[k] + extra < INF ? L->sizes[k] + extra : INF;
            if (s > size) continue;
            while (head >= 0 && (used + s > size || (L->cap && count >= L->cap))) {
                int32_t old = head;
                head = L->next[old];
                if (head >= 0) L->prev[head] = -1; else tail = -1;
                used -= L->bytes[old];
                L->bytes[old] = -1;
                count--;
            }
            L->bytes[key] = s;
            L->prev[key] = tail; L->next[key] = -1;
            if (tail >= 0) L->next[tail] = (int32_t)key; else head = (int32_t)key;
            tail = (int32_t)key;
            used += s;
            count++;
        }
        i = j;
    }
    out[0] = hits; out[1] = work; out[2] = made;
}

static PyObject *replay(PyObject *self, PyObject *args) {
    Py_buffer kb, sb, wb, ub, gb, hb, pb;
    long long max_entries;
    int again;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*Lpy*", &kb, &sb, &wb, &ub, &gb, &hb, &max_entries, &again, &pb)) return NULL;
    PyObject *result = NULL;
    Lru L;
    memset(&L, 0, sizeof L);
    int64_t n = kb.len / 8, npoints = pb.len / 8, *outs = NULL;
    const int64_t *points = pb.buf;
    if (sb.len != kb.len || wb.len != kb.len || ub.len != kb.len || (gb.len && gb.len != kb.len) ||
        (hb.len && hb.len != kb.len) || kb.len % 8 || pb.len % 8 || n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "keys, sizes, weights, work (groups, shared): one int64 each per lookup");
        goto done;
    }
    L.n = n; L.keys = kb.buf; L.sizes = sb.buf; L.w = wb.buf; L.u = ub.buf;
    L.groups = gb.len ? gb.buf : NULL; L.shared = hb.len ? hb.buf : NULL;
    L.cap = max_entries > 0 ? max_entries : 0; L.again = again;
    L.nkeys = 1;
    for (int64_t i = 0; i < n; i++) {
        if (L.keys[i] < 0 || L.keys[i] >= n || L.sizes[i] < 0 || L.sizes[i] >= INF || (L.shared && (L.shared[i] < 0 || L.shared[i] >= INF))) {
            PyErr_SetString(PyExc_ValueError, "a key outside 0..n-1, or a size outside 0..2**62");
            goto done;
        }
        if (L.keys[i] >= L.nkeys) L.nkeys = L.keys[i] + 1;
    }
    for (int64_t p = 0; p < npoints; p++)
        if (points[p] < 0 || points[p] >= INF) { PyErr_SetString(PyExc_ValueError, "a point outside 0..2**62"); goto done; }
    L.prev = malloc((size_t)L.nkeys * sizeof(int32_t));
    L.next = malloc((size_t)L.nkeys * sizeof(int32_t));
    L.stamp = malloc((size_t)L.nkeys * sizeof(int32_t));
    L.miss = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    L.bytes = malloc((size_t)L.nkeys * sizeof(int64_t));
    outs = malloc((size_t)(npoints ? npoints : 1) * 3 * sizeof(int64_t));
    if (!L.prev || !L.next || !L.stamp || !L.miss || !L.bytes || !outs) { PyErr_NoMemory(); goto done; }
    Py_BEGIN_ALLOW_THREADS
    for (int64_t p = 0; p < npoints; p++) lru_at(&L, points[p], outs + 3 * p);
    Py_END_ALLOW_THREADS
    result = PyTuple_New((Py_ssize_t)npoints);
    if (!result) goto done;
    for (int64_t p = 0; p < npoints; p++) {
        PyObject *t = Py_BuildValue("(LLL)", (long long)outs[3 * p], (long long)outs[3 * p + 1], (long long)outs[3 * p + 2]);
        if (!t) { Py_CLEAR(result); goto done; }
        PyTuple_SET_ITEM(result, (Py_ssize_t)p, t);
    }
done:
    free(L.prev); free(L.next); free(L.stamp); free(L.miss); free(L.bytes); free(outs);
    PyBuffer_Release(&kb); PyBuffer_Release(&sb); PyBuffer_Release(&wb); PyBuffer_Release(&ub);
    PyBuffer_Release(&gb); PyBuffer_Release(&hb); PyBuffer_Release(&pb);
    return result;
}

static PyMethodDef methods[] = {
    {"curve", curve, METH_VARARGS,
     "curve(keys, sizes, weights, work, groups, max_entries[, in_order[, again]]) -> ((size, hits, work), ...)"},
    {"replay", replay, METH_VARARGS,
     "replay(keys, sizes, weights, work, groups, shared, max_entries, again, points) -> ((hits, work, lookups), ...)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stackdist", "The exact LRU hit curve, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__stackdist(void) { return PyModule_Create(&module); }
