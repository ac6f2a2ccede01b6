/* mmpool's compiled simulator: the cuda_ipc replay and the trace reader, in C.
 *
 * Both are exact twins of the pure-Python code they speed up, which stays the reference and the
 * fallback (pools/replay.py with pools/cuda_ipc.py, traces/reader.py); tests replay the
 * same traces through both and compare every figure and every offset.
 *
 * replay(): one worker pool per tokenizer worker, allocating as SGLang's stream-ordered pool
 * does (best fit, the earliest of equal sizes in SGLang's list order, the rest appended, a slot
 * cap, the recycler's ticks). The free ranges are kept sorted by (size, start) for best fit, in
 * blocks so that no insertion moves more than a block, and in two maps, by start and by end, for
 * the neighbours a released lease joins.
 *
 * TraceReader: reads JSON-lines traces a chunk at a time. It takes the lines that are plain
 * (keys t, op, id, bytes, worker, item with plain values) and valid after what came before, and
 * stops at the first line that is not: the Python reader then reads that line with its careful
 * parser, which explains what is wrong, and hands a valid event back through push(). It reads a
 * columnar trace's batches from their Arrow buffers alike (feed_arrow). Made with a layout, it
 * appends no columns: each event goes straight to a replay (the same state machine replay() runs
 * over columns), and only the ids in flight are kept (as numbers, where a columnar trace stores its
 * ids as integers).
 *
 * Sums of bytes and of bytes x nanoseconds can pass 2**63, so they are kept in 128 bits.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

typedef unsigned __int128 u128;

#define MISS_SPACE (-1)
#define MISS_SLOTS (-2)
#define MAX_POOL_BYTES ((int64_t)1 << 44)

#ifdef MMPOOL_FAILPOINTS
/* A build for tests only (-DMMPOOL_FAILPOINTS): the allocation that _failpoint(n) names (n from then)
 * fails as if memory ran out, and the blocks held are counted, so that a test can make every
 * allocation fail in turn and check that each failure leaves nothing behind. */
static Py_ssize_t fp_countdown = -1, fp_live = 0, fp_full = 0; /* fp_full: full blocks of lists freed */
static const char *fp_where = NULL;

static int fp_fail(const char *where) {
    if (fp_countdown < 0 || fp_countdown--) return 0;
    fp_where = where;
    return 1;
}
static void *fp_malloc(size_t n, const char *where) {
    void *p = fp_fail(where) ? NULL : (PyMem_Malloc)(n);
    fp_live += p != NULL;
    return p;
}
static void *fp_calloc(size_t k, size_t n, const char *where) {
    void *p = fp_fail(where) ? NULL : (PyMem_Calloc)(k, n);
    fp_live += p != NULL;
    return p;
}
static void *fp_realloc(void *p, size_t n, const char *where) {
    void *q = fp_fail(where) ? NULL : (PyMem_Realloc)(p, n);
    fp_live += q && !p;
    return q;
}
static void fp_free(void *p) {
    fp_live -= p != NULL;
    (PyMem_Free)(p);
}
#define PyMem_Malloc(n) fp_malloc((n), __func__)
#define PyMem_Calloc(k, n) fp_calloc((k), (n), __func__)
#define PyMem_Realloc(p, n) fp_realloc((p), (n), __func__)
#define PyMem_Free(p) fp_free(p)
#endif

static PyObject *u128_to_py(u128 v) {
    PyObject *hi = PyLong_FromUnsignedLongLong((unsigned long long)(v >> 64));
    PyObject *lo = PyLong_FromUnsignedLongLong((unsigned long long)v);
    PyObject *sixty_four = PyLong_FromLong(64);
    PyObject *out = NULL, *shifted = NULL;
    if (hi && lo && sixty_four && (shifted = PyNumber_Lshift(hi, sixty_four)))
        out = PyNumber_Or(shifted, lo);
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(sixty_four);
    Py_XDECREF(shifted);
    return out;
}

static void *grow_to(void *p, Py_ssize_t *cap, Py_ssize_t need, size_t item) {
    Py_ssize_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    void *q = PyMem_Realloc(p, (size_t)n * item);
    if (!q) {
        PyErr_NoMemory();
        return NULL;
    }
    *cap = n;
    return q;
}

/* p with room for need items: no call while it has it, as an array grows a step at a time */
static inline void *grow(void *p, Py_ssize_t *cap, Py_ssize_t need, size_t item) {
    return need <= *cap ? p : grow_to(p, cap, need, item);
}

/* A sorted list of triples (a, b, c), ordered by (a, b), kept in blocks of at most 2 * BLOCK so that
 * an insertion or a deletion moves at most a block's worth, however long the list grows. */
#define BLOCK 32

typedef struct {
    int64_t a, b, c;
} Item;

typedef struct {
    int n;
    Item items[2 * BLOCK];
} Block;

typedef struct {
    Block **blocks;
    Item *lasts; /* each block's last item, side by side: the search over blocks reads no block */
    Py_ssize_t nblocks, cap, lastcap;
} List;

typedef struct {
    Py_ssize_t b; /* nblocks: past the end */
    int i;
} Cursor;

/* (x->a, x->b) < (a, b), all of them >= 0: one comparison of 128-bit numbers */
static inline int before(const Item *x, int64_t a, int64_t b) {
    return (((u128)x->a << 64) | (uint64_t)x->b) < (((u128)a << 64) | (uint64_t)b);
}

/* the number of items of items[0..n) before (a, b); branch-free, so the search costs no mispredictions */
static inline Py_ssize_t count_before(const Item *items, Py_ssize_t n, int64_t a, int64_t b) {
    if (!n) return 0;
    const Item *base = items;
    while (n > 1) {
        Py_ssize_t half = n / 2;
        base = before(&base[half], a, b) ? &base[half] : base;
        n -= half;
    }
    return (base - items) + before(base, a, b);
}

/* the first item >= (a, b) */
static inline Cursor list_lower(const List *l, int64_t a, int64_t b) {
    Cursor c = {count_before(l->lasts, l->nblocks, a, b), 0}; /* the first block whose last item is >= (a, b) */
    if (c.b < l->nblocks) c.i = (int)count_before(l->blocks[c.b]->items, l->blocks[c.b]->n, a, b);
    return c;
}

/* count_before(items, n, a, 0): the number of items whose a is below a, one 64-bit comparison a step */
static inline Py_ssize_t count_below(const Item *items, Py_ssize_t n, int64_t a) {
    if (!n) return 0;
    const Item *base = items;
    while (n > 1) {
        Py_ssize_t half = n / 2;
        base = base[half].a < a ? &base[half] : base;
        n -= half;
    }
    return (base - items) + (base->a < a);
}

/* list_lower(l, a, 0): the first item whose a is at least a */
static inline Cursor list_lower_a(const List *l, int64_t a) {
    Cursor c = {count_below(l->lasts, l->nblocks, a), 0};
    if (c.b < l->nblocks) c.i = (int)count_below(l->blocks[c.b]->items, l->blocks[c.b]->n, a);
    return c;
}

static inline int at_end(const List *l, Cursor c) { return c.b >= l->nblocks; }
static inline Item *item(const List *l, Cursor c) { return &l->blocks[c.b]->items[c.i]; }

static Cursor list_next(const List *l, Cursor c) {
    if (++c.i >= l->blocks[c.b]->n) {
        c.b++;
        c.i = 0;
    }
    return c;
}

/* the item before c, or NULL */
static Item *list_before(const List *l, Cursor c) {
    if (c.i > 0) return &l->blocks[c.b]->items[c.i - 1];
    if (c.b == 0) return NULL;
    const Block *k = l->blocks[c.b - 1];
    return (Item *)&k->items[k->n - 1];
}

static Item *list_last(const List *l) {
    if (!l->nblocks) return NULL;
    Block *k = l->blocks[l->nblocks - 1];
    return &k->items[k->n - 1];
}

/* after a change to the items of block b: its last item, as the search over blocks sees it */
static inline void list_touch(List *l, Py_ssize_t b) {
    if (b < l->nblocks) l->lasts[b] = l->blocks[b]->items[l->blocks[b]->n - 1];
}

static int list_room(List *l, Py_ssize_t nblocks) {
    Block **bs = grow(l->blocks, &l->cap, nblocks, sizeof(Block *));
    if (!bs) return -1;
    l->blocks = bs;
    Item *lasts = grow(l->lasts, &l->lastcap, nblocks, sizeof(Item));
    if (!lasts) return -1;
    l->lasts = lasts;
    return 0;
}

/* Insert (a, b, c): 0, or -1 out of memory with the list as it was. */
static int list_insert(List *l, int64_t a, int64_t b, int64_t c) {
    if (!l->nblocks) { /* the first item: a block of its own, with no last items to search yet */
        if (list_room(l, 1) < 0) return -1;
        Block *first = PyMem_Malloc(sizeof(Block));
        if (!first) {
            PyErr_NoMemory();
            return -1;
        }
        first->n = 1;
        first->items[0] = (Item){a, b, c};
        l->blocks[0] = first;
        l->nblocks = 1;
        list_touch(l, 0);
        return 0;
    }
    Cursor at = list_lower(l, a, b);
    if (at_end(l, at)) { /* past every item: at the end of the last block */
        at.b = l->nblocks - 1;
        at.i = l->blocks[at.b]->n;
    }
    Block *k = l->blocks[at.b], *upper = NULL;
    if (k->n == 2 * BLOCK - 1) { /* it fills up and splits: the room for that first, so a failure changes nothing */
        if (list_room(l, l->nblocks + 1) < 0) return -1;
        if (!(upper = PyMem_Malloc(sizeof(Block)))) {
            PyErr_NoMemory();
            return -1;
        }
    }
    memmove(&k->items[at.i + 1], &k->items[at.i], (size_t)(k->n - at.i) * sizeof(Item));
    k->items[at.i] = (Item){a, b, c};
    if (!upper) {
        if (at.i == k->n++) list_touch(l, at.b);
        return 0;
    }
    /* full: its upper half becomes a block of its own */
    Block **bs = l->blocks;
    memcpy(upper->items, &k->items[BLOCK], BLOCK * sizeof(Item));
    upper->n = BLOCK;
    k->n = BLOCK;
    memmove(&bs[at.b + 2], &bs[at.b + 1], (size_t)(l->nblocks - at.b - 1) * sizeof(Block *));
    memmove(&l->lasts[at.b + 2], &l->lasts[at.b + 1], (size_t)(l->nblocks - at.b - 1) * sizeof(Item));
    bs[at.b + 1] = upper;
    l->nblocks++;
    list_touch(l, at.b);
    list_touch(l, at.b + 1);
    return 0;
}

static void list_delete(List *l, Cursor c) {
    Block *k = l->blocks[c.b];
    memmove(&k->items[c.i], &k->items[c.i + 1], (size_t)(k->n - c.i - 1) * sizeof(Item));
    if (--k->n) {
        if (c.i == k->n) list_touch(l, c.b);
        return;
    }
    PyMem_Free(k);
    memmove(&l->blocks[c.b], &l->blocks[c.b + 1], (size_t)(l->nblocks - c.b - 1) * sizeof(Block *));
    memmove(&l->lasts[c.b], &l->lasts[c.b + 1], (size_t)(l->nblocks - c.b - 1) * sizeof(Item));
    l->nblocks--;
}

/* Put (a, b, c) in the place of the item at `at`: where its place is in the same block, one move of
 * the items between (a free range that shrinks or grows moves a few places), else as a deletion and
 * an insertion. */
static int list_replace(List *l, Cursor at, int64_t a, int64_t b, int64_t c) {
    Block *k = l->blocks[at.b];
    Item *items = k->items;
    int n = k->n;
    if (before(&items[at.i], a, b)) { /* it sorts later: among the items after it */
        if (at.b + 1 < l->nblocks && before(&l->blocks[at.b + 1]->items[0], a, b)) goto apart;
        int q = at.i + 1 + (int)count_before(items + at.i + 1, n - at.i - 1, a, b);
        memmove(&items[at.i], &items[at.i + 1], (size_t)(q - at.i - 1) * sizeof(Item));
        items[q - 1] = (Item){a, b, c};
    } else { /* earlier: among the items before it */
        if (at.b > 0 && !before(&l->lasts[at.b - 1], a, b)) goto apart;
        int p = (int)count_before(items, at.i, a, b);
        memmove(&items[p + 1], &items[p], (size_t)(at.i - p) * sizeof(Item));
        items[p] = (Item){a, b, c};
    }
    list_touch(l, at.b);
    return 0;
apart:
    list_delete(l, at);
    return list_insert(l, a, b, c);
}

static void list_free(List *l) {
#ifdef MMPOOL_FAILPOINTS
    for (Py_ssize_t b = 0; b < l->nblocks; b++) fp_full += l->blocks[b]->n >= 2 * BLOCK;
#endif
    for (Py_ssize_t b = 0; b < l->nblocks; b++) PyMem_Free(l->blocks[b]);
    PyMem_Free(l->blocks);
    PyMem_Free(l->lasts);
}

/* A map of offsets (>= 0) to offsets: open addressing, Fibonacci hashing, and deletion by shifting
 * back, so no tombstones build up. A pool holds at most its slot cap of leases, so maps stay small,
 * and are kept at most a quarter full: a search or a deletion then seldom looks past one slot. */
typedef struct {
    int64_t *keys, *values; /* key -1: an empty slot */
    Py_ssize_t cap, n;
    int shift;
} Map;

static inline Py_ssize_t map_home(const Map *m, int64_t key) {
    return (Py_ssize_t)(((uint64_t)key * 0x9E3779B97F4A7C15ULL) >> m->shift);
}

static int map_init(Map *m, int bits) {
    m->cap = (Py_ssize_t)1 << bits;
    m->shift = 64 - bits;
    m->n = 0;
    m->keys = PyMem_Malloc((size_t)m->cap * sizeof(int64_t));
    m->values = PyMem_Malloc((size_t)m->cap * sizeof(int64_t));
    if (!m->keys || !m->values) { /* nothing held: a map that could not grow keeps its old arrays */
        PyMem_Free(m->keys);
        PyMem_Free(m->values);
        m->keys = m->values = NULL;
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < m->cap; i++) m->keys[i] = -1;
    return 0;
}

static void map_free(Map *m) {
    PyMem_Free(m->keys);
    PyMem_Free(m->values);
}

/* the slot of key, or the empty slot where it would go */
static inline Py_ssize_t map_slot(const Map *m, int64_t key) {
    Py_ssize_t mask = m->cap - 1, i = map_home(m, key);
    while (m->keys[i] != key && m->keys[i] >= 0) i = (i + 1) & mask;
    return i;
}

/* the value of key, or -1 */
static inline int64_t map_get(const Map *m, int64_t key) {
    Py_ssize_t i = map_slot(m, key);
    return m->keys[i] == key ? m->values[i] : -1;
}

static int map_grow(Map *m) {
    Map bigger;
    if (map_init(&bigger, 64 - m->shift + 1) < 0) return -1;
    for (Py_ssize_t i = 0; i < m->cap; i++)
        if (m->keys[i] >= 0) {
            Py_ssize_t j = map_slot(&bigger, m->keys[i]);
            bigger.keys[j] = m->keys[i];
            bigger.values[j] = m->values[i];
            bigger.n++;
        }
    map_free(m);
    *m = bigger;
    return 0;
}

static inline int map_put(Map *m, int64_t key, int64_t value) {
    if (4 * (m->n + 1) > m->cap && map_grow(m) < 0) return -1;
    Py_ssize_t i = map_slot(m, key);
    if (m->keys[i] < 0) m->n++;
    m->keys[i] = key;
    m->values[i] = value;
    return 0;
}

/* remove key and return its value, or -1 if it is absent */
static inline int64_t map_pop(Map *m, int64_t key) {
    Py_ssize_t mask = m->cap - 1, i = map_slot(m, key), j = i;
    if (m->keys[i] != key) return -1;
    int64_t value = m->values[i];
    for (;;) {
        j = (j + 1) & mask;
        if (m->keys[j] < 0) break;
        Py_ssize_t home = map_home(m, m->keys[j]);
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j)) continue;
        m->keys[i] = m->keys[j];
        m->values[i] = m->values[j];
        i = j;
    }
    m->keys[i] = -1;
    m->n--;
    return value;
}

/* ------------------------------------------------------------------ the pool */

/* keys: the free ranges as (size, start, appended) for best fit, where appended is the append
 * counter of a range appended to SGLang's list since the last merge (>= merge_base), else -1;
 * by_start (start -> size) and by_end (end -> start): the same ranges, for the neighbours a released
 * lease joins. */
typedef struct {
    int64_t memory_size, data_start, round, trunc, max_leases;
    int64_t leases, leased_bytes, slack, enough;
    int64_t counter, merge_base;
    u128 area;
    List keys;
    Map by_start, by_end;
    int64_t *acked; /* lease keys acknowledged since the last tick */
    Py_ssize_t nacked, capacked;
    int unbounded;
} Pool;

typedef struct {
    int64_t *start, *nbytes, *t;
    int32_t *worker;
    int8_t *status; /* 0 none, 1 leased, 2 missed */
} Leases;

static void limit(Pool *p, int64_t slack) {
    if (slack < p->slack) p->slack = slack;
}

static void key_delete(Pool *p, int64_t size, int64_t start) { list_delete(&p->keys, list_lower(&p->keys, size, start)); }

/* the start of the range that ends at the pool's end, or -1 */
static int64_t last_start(const Pool *p) {
    return map_get(&p->by_end, p->memory_size);
}

static int64_t largest_free(const Pool *p) {
    const Item *k = list_last(&p->keys);
    return k ? k->a : 0;
}

static int pool_init(Pool *p, int64_t memory_size, int64_t data_start, int64_t alignment, int64_t max_leases,
                     int unbounded) {
    memset(p, 0, sizeof(*p));
    p->memory_size = unbounded ? MAX_POOL_BYTES - 1 : memory_size;
    p->data_start = data_start;
    p->round = alignment - 1;
    p->trunc = -alignment;
    p->max_leases = max_leases;
    p->slack = MAX_POOL_BYTES;
    p->enough = data_start + 1;
    p->unbounded = unbounded;
    if (map_init(&p->by_start, 6) < 0 || map_init(&p->by_end, 6) < 0) return -1;
    if (map_put(&p->by_start, data_start, p->memory_size - data_start) < 0) return -1;
    if (map_put(&p->by_end, p->memory_size, data_start) < 0) return -1;
    return list_insert(&p->keys, p->memory_size - data_start, data_start, -1);
}

static void pool_free(Pool *p) {
    list_free(&p->keys);
    map_free(&p->by_start);
    map_free(&p->by_end);
    PyMem_Free(p->acked);
}

/* Among the equal-size keys from c, the one earliest in SGLang's list: a key present at the last
 * merge (they are in start order) before any appended since, and those in append order. */
static Cursor earliest(const Pool *p, Cursor c, int64_t size) {
    Cursor best = c;
    for (; !at_end(&p->keys, c) && item(&p->keys, c)->a == size; c = list_next(&p->keys, c)) {
        int64_t appended = item(&p->keys, c)->c;
        if (appended < p->merge_base) return c;
        if (appended < item(&p->keys, best)->c) best = c;
    }
    return best;
}

/* Lease nbytes: the offset, or MISS_SPACE / MISS_SLOTS; -3 when out of memory. */
static int64_t pool_alloc(Pool *p, int64_t nbytes) {
    int64_t size = (nbytes + p->round) & p->trunc;
    List *keys = &p->keys;
    Cursor c = list_lower_a(keys, size); /* the first of the smallest free ranges that fit */
    if (p->unbounded && !at_end(keys, c)) {
        int64_t last = last_start(p);
        const Item *k = item(keys, c);
        int64_t end = k->b == last ? last + size : last + k->a + 1;
        if (end > p->enough) p->enough = end;
    }
    if (at_end(keys, c)) {
        int64_t last = last_start(p);
        if (last >= 0) limit(p, size - (p->memory_size - last));
        return MISS_SPACE;
    }
    if (p->leases >= p->max_leases) return MISS_SLOTS;
    int64_t found = item(keys, c)->a;
    Cursor after = list_next(keys, c);
    if (!at_end(keys, after) && item(keys, after)->a == found) {
        c = earliest(p, c, found);
        after = list_next(keys, c);
    }
    int64_t start = item(keys, c)->b;
    int64_t end = start + found;
    if (end == p->memory_size) {
        /* the last range holds the lease: any other range that fits would win over a larger last
         * range once the last is larger than it (equal size: no growth at all) */
        const Item *prev = list_before(keys, c);
        const Item *next = at_end(keys, after) ? NULL : item(keys, after);
        if ((prev && prev->a == found) || (next && next->a == found))
            limit(p, 0);
        else if (next)
            limit(p, next->a - found);
        if (found == size) limit(p, p->round + 1); /* taken whole: a larger pool keeps a remnant */
    } else {
        int64_t last = last_start(p);
        if (last >= 0 && p->memory_size - last < size) limit(p, size - (p->memory_size - last));
    }
    map_pop(&p->by_start, start);
    int64_t rest = start + size;
    if (rest < end) { /* the remnant takes the range's place in the list */
        if (map_put(&p->by_start, rest, end - rest) < 0 || map_put(&p->by_end, end, rest) < 0) return -3;
        if (list_replace(keys, c, end - rest, rest, p->counter++) < 0) return -3;
    } else {
        list_delete(keys, c);
        map_pop(&p->by_end, end);
    }
    p->leases++;
    p->leased_bytes += size;
    return start;
}

static inline int pool_ack(Pool *p, int64_t lease) {
    int64_t *a = grow(p->acked, &p->capacked, p->nacked + 1, sizeof(int64_t));
    if (!a) return -1;
    p->acked = a;
    a[p->nacked++] = lease;
    return 0;
}

/* One recycler tick at now: give back every acknowledged lease, joining it with its free neighbours. */
static int pool_tick(Pool *p, int64_t now, const Leases *L) {
    if (!p->leases) return 0;
    p->merge_base = p->counter; /* the merge's sort: no range ranks as appended any more */
    int64_t released = 0;
    for (Py_ssize_t a = 0; a < p->nacked; a++) {
        int64_t k = p->acked[a];
        int64_t start = L->start[k];
        int64_t size = (L->nbytes[k] + p->round) & p->trunc;
        released += size;
        p->area += (u128)size * (u128)(now - L->t[k]);
        int64_t end = start + size, lease = start;
        int64_t left = map_pop(&p->by_end, start); /* the free range that ends where the lease starts */
        if (left >= 0) start = left;
        int64_t right = map_pop(&p->by_start, end); /* the size of the one that starts where it ends */
        if (right >= 0) end += right;
        /* the joined range's ends: a neighbour's outer end keeps its entry, with the new value */
        if (map_put(&p->by_start, start, end - start) < 0 || map_put(&p->by_end, end, start) < 0) return -1;
        /* the joined range takes the place of a neighbour it joined in the list (it sorts later) */
        int status;
        if (left >= 0) {
            if (right >= 0) key_delete(p, right, lease + size);
            status = list_replace(&p->keys, list_lower(&p->keys, lease - left, left), end - start, start, -1);
        } else if (right >= 0) {
            status = list_replace(&p->keys, list_lower(&p->keys, right, lease + size), end - start, start, -1);
        } else {
            status = list_insert(&p->keys, end - start, start, -1);
        }
        if (status < 0) return -1;
    }
    p->leases -= p->nacked;
    p->leased_bytes -= released;
    p->nacked = 0;
    return 0;
}

/* ------------------------------------------------------------------ the replay */

typedef struct {
    int64_t items, slot_misses, peak_bytes, peak_leases, fragmented, fb_items;
    u128 bytes, fb_bytes, miss_free, miss_largest;
} Stats;

static void peak(const Pool *p, Stats *s) {
    if (p->leased_bytes > s->peak_bytes) s->peak_bytes = p->leased_bytes;
    if (p->leases > s->peak_leases) s->peak_leases = p->leases;
}

static int get_column(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t n, const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->itemsize != itemsize || view->len != n * itemsize) {
        PyErr_Format(PyExc_ValueError, "column %s: %zd items of %zd bytes expected", name, n, itemsize);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

static int64_t ceil_to(int64_t t, int64_t interval) {
    int64_t q = t / interval + (t % interval > 0);
    return q * interval;
}

/* A replay in progress: the pools, their counters and the leases, fed one event at a time. Over
 * columns every key is an alloc's index; a replay fed as a trace is read (recycle) hands out the
 * keys itself and takes each back once its lease is given back, so its memory is that of the
 * leases in flight, not of the trace. */
typedef struct {
    int64_t workers, interval, max_leases, stop_items, usable, round, trunc;
    u128 stop_bytes;
    int stop_on_bytes, record, recycle, stopped;
    Pool *pools;
    Stats *stats;
    int64_t *due;
    Py_ssize_t npools;
    Leases L;
    Py_ssize_t nkeys, keycap; /* keys made so far; room in L */
    int64_t *spare;           /* recycle: keys given back, to hand out again */
    Py_ssize_t nspare, sparecap;
    int64_t count, t, total_items;
    u128 total_bytes;
    PyObject *offsets, *owners;
} Replay;

static void replay_release(Replay *R) {
    for (Py_ssize_t w = 0; w < R->npools; w++) pool_free(&R->pools[w]);
    PyMem_Free(R->pools);
    PyMem_Free(R->stats);
    PyMem_Free(R->due);
    PyMem_Free(R->L.start);
    PyMem_Free(R->L.nbytes);
    PyMem_Free(R->L.t);
    PyMem_Free(R->L.worker);
    PyMem_Free(R->L.status);
    PyMem_Free(R->spare);
    Py_XDECREF(R->offsets);
    Py_XDECREF(R->owners);
    memset(R, 0, sizeof(*R));
}

/* room in the leases for keys below need, the new ones zeroed */
static int replay_keys(Replay *R, Py_ssize_t need) {
    if (need <= R->keycap) return 0;
    Py_ssize_t cap = R->keycap ? R->keycap : 64;
    while (cap < need) cap *= 2;
    Leases *L = &R->L;
    int64_t *a = PyMem_Realloc(L->start, (size_t)cap * 8);
    if (a) L->start = a;
    int64_t *b = a ? PyMem_Realloc(L->nbytes, (size_t)cap * 8) : NULL;
    if (b) L->nbytes = b;
    int64_t *c = b ? PyMem_Realloc(L->t, (size_t)cap * 8) : NULL;
    if (c) L->t = c;
    int32_t *d = c ? PyMem_Realloc(L->worker, (size_t)cap * 4) : NULL;
    if (d) L->worker = d;
    int8_t *e = d ? PyMem_Realloc(L->status, (size_t)cap) : NULL;
    if (!e) {
        PyErr_NoMemory();
        return -1;
    }
    L->status = e;
    memset(e + R->keycap, 0, (size_t)(cap - R->keycap));
    R->keycap = cap;
    return 0;
}

static int replay_init(Replay *R, long long workers, long long memory_size, long long data_start, long long interval,
                       long long alignment, long long max_leases, int record, long long stop_items, u128 stop_bytes,
                       int stop_on_bytes, int unbounded, int recycle) {
    memset(R, 0, sizeof(*R));
    if (workers <= 0 || interval <= 0 || alignment <= 0 || (alignment & (alignment - 1)) || max_leases <= 0 ||
        !(0 <= data_start && data_start < memory_size && memory_size <= MAX_POOL_BYTES)) {
        PyErr_SetString(PyExc_ValueError, "replay: invalid pool layout");
        return -1;
    }
    R->workers = workers;
    R->interval = interval;
    R->max_leases = max_leases;
    R->stop_items = stop_items;
    R->stop_bytes = stop_bytes;
    R->stop_on_bytes = stop_on_bytes;
    R->record = record;
    R->recycle = recycle;
    R->usable = memory_size - data_start;
    R->round = alignment - 1;
    R->trunc = -alignment;
    R->pools = PyMem_Calloc((size_t)workers, sizeof(Pool));
    R->stats = PyMem_Calloc((size_t)workers, sizeof(Stats));
    R->due = PyMem_Calloc((size_t)workers, 8);
    if (!R->pools || !R->stats || !R->due) {
        PyErr_NoMemory();
        return -1;
    }
    while (R->npools < workers) { /* counted before its init, so that a pool half made is freed too */
        R->due[R->npools] = -1;
        if (pool_init(&R->pools[R->npools++], memory_size, data_start, alignment, max_leases, unbounded) < 0) return -1;
    }
    if (record && (!(R->offsets = PyList_New(0)) || !(R->owners = PyList_New(0)))) return -1;
    return 0;
}

/* a key for the next alloc of a recycling replay: one given back, or a new one */
static int64_t replay_new_key(Replay *R) {
    if (R->nspare) return R->spare[--R->nspare];
    if (replay_keys(R, R->nkeys + 1) < 0) return -1;
    return R->nkeys++;
}

static inline int replay_spare(Replay *R, int64_t key) {
    int64_t *s = grow(R->spare, &R->sparecap, R->nspare + 1, sizeof(int64_t));
    if (!s) return -1;
    R->spare = s;
    s[R->nspare++] = key;
    return 0;
}

/* the recycler's tick of pool w at at; a recycling replay takes the keys it gave back */
static int replay_tick(Replay *R, Py_ssize_t w, int64_t at) {
    Pool *p = &R->pools[w];
    peak(p, &R->stats[w]);
    if (R->recycle)
        for (Py_ssize_t a = 0; p->leases && a < p->nacked; a++)
            if (replay_spare(R, p->acked[a]) < 0) return -1;
    if (pool_tick(p, at, &R->L) < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* One event: 0, 1 once the fallback passes the stop (the replay ends there), or -1 with an exception. */
static inline __attribute__((always_inline)) int replay_event(Replay *R, int64_t t, int8_t op, int64_t key,
                                                             int64_t nbytes, long w) {
    Leases *L = &R->L;
    R->t = t;
    R->count++;
    if (op) { /* free: the last consumer's acknowledgement */
        int8_t st = L->status[key];
        if (!st) {
            PyObject *k = PyLong_FromLongLong(key);
            if (k) {
                PyErr_SetObject(PyExc_KeyError, k);
                Py_DECREF(k);
            }
            return -1;
        }
        L->status[key] = 0;
        if (st == 2) return R->recycle ? replay_spare(R, key) : 0; /* it missed: nothing to give back */
        int32_t lw = L->worker[key];
        int64_t tick_at = R->due[lw];
        if (0 <= tick_at && tick_at < t) {
            if (replay_tick(R, lw, tick_at) < 0) return -1;
            tick_at = -1;
        }
        if (pool_ack(&R->pools[lw], key) < 0) return -1;
        if (tick_at < 0) R->due[lw] = ceil_to(t, R->interval);
        return 0;
    }
    if (w < 0 || w >= R->workers) {
        PyErr_Format(PyExc_ValueError, "replay: worker %ld of %lld", w, (long long)R->workers);
        return -1;
    }
    if (nbytes <= 0 || nbytes > MAX_POOL_BYTES) {
        PyErr_SetString(PyExc_ValueError, "replay: an alloc's bytes are from 1 to 2**44");
        return -1;
    }
    Pool *p = &R->pools[w];
    Stats *s = &R->stats[w];
    int64_t tick_at = R->due[w];
    if (0 <= tick_at && tick_at < t) {
        if (replay_tick(R, w, tick_at) < 0) return -1;
        R->due[w] = tick_at = -1;
    }
    s->items++;
    s->bytes += (u128)nbytes;
    int64_t start = pool_alloc(p, nbytes);
    if (start == -3) return -1;
    if (R->record) {
        PyObject *o = start >= 0 ? PyLong_FromLongLong(start) : Py_NewRef(Py_None);
        PyObject *ow = PyLong_FromLong(w);
        int bad = !o || !ow || PyList_Append(R->offsets, o) < 0 || PyList_Append(R->owners, ow) < 0;
        Py_XDECREF(o);
        Py_XDECREF(ow);
        if (bad) return -1;
    }
    if (start < 0) {
        L->status[key] = 2;
        s->fb_items++;
        s->fb_bytes += (u128)nbytes;
        if (start == MISS_SLOTS) {
            s->slot_misses++;
        } else {
            int64_t free_bytes = R->usable - p->leased_bytes;
            s->miss_free += (u128)free_bytes;
            s->miss_largest += (u128)largest_free(p);
            if (free_bytes >= ((nbytes + R->round) & R->trunc)) s->fragmented++;
        }
        R->total_items++;
        R->total_bytes += (u128)nbytes;
        if ((R->stop_items >= 0 && R->total_items > R->stop_items) ||
            (R->stop_on_bytes && R->total_bytes > R->stop_bytes)) {
            R->stopped = 1;
            return 1;
        }
        return 0;
    }
    L->status[key] = 1;
    L->worker[key] = (int32_t)w;
    L->start[key] = start;
    L->nbytes[key] = nbytes;
    L->t[key] = t;
    if (tick_at < 0) R->due[w] = ceil_to(t, R->interval);
    return 0;
}

/* The last ticks, the occupancy of what is still in flight, and the answer replay() returns. */
static PyObject *replay_answer(Replay *R) {
    int64_t t = R->t, round = R->round, trunc = R->trunc;
    Leases *L = &R->L;
    u128 *area = PyMem_Calloc((size_t)R->workers, sizeof(u128));
    if (!area) return PyErr_NoMemory();
    for (Py_ssize_t w = 0; w < R->workers; w++) {
        Pool *p = &R->pools[w];
        if (0 <= R->due[w] && R->due[w] <= t) {
            peak(p, &R->stats[w]);
            if (pool_tick(p, R->due[w], L) < 0) {
                PyMem_Free(area);
                return PyErr_Occurred() ? NULL : PyErr_NoMemory();
            }
        }
        peak(p, &R->stats[w]);
        area[w] = p->area;
        for (Py_ssize_t a = 0; a < p->nacked; a++) {
            int64_t k = p->acked[a];
            area[w] += (u128)((L->nbytes[k] + round) & trunc) * (u128)(t - L->t[k]);
        }
    }
    for (Py_ssize_t k = 0; k < R->nkeys; k++)
        if (L->status[k] == 1) area[L->worker[k]] += (u128)((L->nbytes[k] + round) & trunc) * (u128)(t - L->t[k]);
    PyObject *per = PyList_New(R->workers);
    int64_t slack = MAX_POOL_BYTES, enough = 0;
    for (Py_ssize_t w = 0; per && w < R->workers; w++) {
        Stats *s = &R->stats[w];
        PyObject *row = Py_BuildValue("(nLNLNLLLNNNL)", w, (long long)s->items, u128_to_py(s->bytes),
                                      (long long)s->fb_items, u128_to_py(s->fb_bytes), (long long)s->slot_misses,
                                      (long long)s->peak_bytes, (long long)s->peak_leases, u128_to_py(area[w]),
                                      u128_to_py(s->miss_free), u128_to_py(s->miss_largest),
                                      (long long)s->fragmented);
        if (!row) {
            Py_CLEAR(per);
            break;
        }
        PyList_SET_ITEM(per, w, row);
        if (R->pools[w].slack < slack) slack = R->pools[w].slack;
        if (R->pools[w].enough > enough) enough = R->pools[w].enough;
    }
    PyMem_Free(area);
    if (!per) return NULL;
    return Py_BuildValue("(LLiLLNOO)", (long long)R->count, (long long)t, R->stopped, (long long)slack,
                         (long long)enough, per, R->record ? R->offsets : Py_None, R->record ? R->owners : Py_None);
}

PyDoc_STRVAR(replay_doc,
             "replay(t, op, key, nbytes, worker, workers, memory_size, data_start, recycle_ns, alignment,\n"
             "       max_leases, record, stop_items, stop_bytes_hi, stop_bytes_lo, unbounded)\n"
             "Replay event columns over cuda_ipc pools; see simulate.replay.simulate for the rules.");

static PyObject *replay(PyObject *self, PyObject *args) {
    PyObject *ot, *oop, *okey, *onb, *ow;
    long long workers, memory_size, data_start, interval, alignment, max_leases, stop_items;
    unsigned long long stop_hi, stop_lo;
    int record, unbounded;
    if (!PyArg_ParseTuple(args, "OOOOOLLLLLLpLKKp", &ot, &oop, &okey, &onb, &ow, &workers, &memory_size, &data_start,
                          &interval, &alignment, &max_leases, &record, &stop_items, &stop_hi, &stop_lo, &unbounded))
        return NULL;
    u128 stop_bytes = ((u128)stop_hi << 64) | stop_lo;
    int stop_on_bytes = stop_hi != ~0ULL || stop_lo != ~0ULL;
    Py_buffer vt = {0}, vop = {0}, vkey = {0}, vnb = {0}, vw = {0};
    PyObject *result = NULL;
    Replay R;
    if (replay_init(&R, workers, memory_size, data_start, interval, alignment, max_leases, record, stop_items,
                    stop_bytes, stop_on_bytes, unbounded, 0) < 0)
        goto done;
    Py_ssize_t n = PyObject_Length(ot);
    if (n < 0) goto done;
    if (get_column(ot, &vt, 8, n, "t") < 0 || get_column(oop, &vop, 1, n, "op") < 0 ||
        get_column(okey, &vkey, 8, n, "key") < 0 || get_column(onb, &vnb, 8, n, "nbytes") < 0 ||
        get_column(ow, &vw, sizeof(long), n, "worker") < 0)
        goto done;
    const int64_t *T = vt.buf, *K = vkey.buf, *NB = vnb.buf;
    const int8_t *OP = vop.buf;
    const long *W = vw.buf;
    int64_t nkeys = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (K[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "replay: keys are lease numbers from 0");
            goto done;
        }
        if (K[i] >= nkeys) nkeys = K[i] + 1;
    }
    if (replay_keys(&R, nkeys + 1) < 0) goto done;
    R.nkeys = nkeys;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Ctrl-C and other signals, every 2**20 events: a long replay stops within milliseconds */
        if (!(i & ((1 << 20) - 1)) && i && PyErr_CheckSignals() < 0) goto done;
        int code = replay_event(&R, T[i], OP[i], K[i], NB[i], W[i]);
        if (code < 0) goto done;
        if (code) break;
    }
    result = replay_answer(&R);
done:
    replay_release(&R);
    if (vt.obj) PyBuffer_Release(&vt);
    if (vop.obj) PyBuffer_Release(&vop);
    if (vkey.obj) PyBuffer_Release(&vkey);
    if (vnb.obj) PyBuffer_Release(&vnb);
    if (vw.obj) PyBuffer_Release(&vw);
    return result;
}

/* ------------------------------------------------------------------ the trace reader */

#define MAX_ID_CHARS 256
#define MAX_ITEM_CHARS 256
#define MAX_T_SECONDS 1000000000LL
#define NS_PER_S 1000000000LL

/* E_GONE: a free of an id not in flight, from a reader that replays as it reads and so keeps no ids
 * once freed: the caller looks back for an alloc of it (then E_FREED, else E_UNKNOWN). E_DIFFERS: a
 * free (a columnar trace's row) that gives bytes or a worker other than its alloc's. */
/* The codes, exported as REFUSALS (traces/order.py's twins; test_native compares them). E_FIELD:
 * a row of a columnar trace with a field a JSON line could not have (trace_parquet._row_error says which). */
enum { OK = 0, E_BACKWARDS = 1, E_IN_FLIGHT = 2, E_FREED = 3, E_UNKNOWN = 4, E_TOO_MANY = 5, E_FIELD = 6, E_GONE = 7, E_DIFFERS = 8 };

/* Whether a free that gives nbytes and worker (0 and -1: none) gives other than its alloc's. */
static inline int gives_other(int64_t nbytes, long worker, int64_t alloc_nbytes, int64_t alloc_worker) {
    return (nbytes && nbytes != alloc_nbytes) || (worker >= 0 && worker != alloc_worker);
}

typedef struct {
    uint64_t hash;
    int64_t off;   /* of the id's bytes in the arena; -1: an empty slot */
    int64_t value;  /* the alloc's key */
    int64_t nbytes; /* the alloc's bytes and worker, which a free that gives them must match */
    int32_t len, worker;
} IdSlot; /* an id in flight: the table holds only those, so it stays small and in cache */

typedef struct {
    uint64_t hash, gen;
    int64_t off, value, worker;
    int32_t len;
} GroupSlot;

typedef struct {
    int64_t id;
    int64_t value; /* the alloc's key; -1: an empty slot */
    int64_t nbytes, worker;
} NumSlot;

typedef struct {
    PyObject_HEAD
    int64_t workers, max_events, count, prev_t, at, serial;
    int requests, keep_ids, utf8; /* utf8: ids that are not ASCII come from feed_columns */
    int64_t *t, *key, *nbytes, *group;
    long *worker;
    int8_t *op;
    Py_ssize_t n, cap;
    IdSlot *ids;
    Py_ssize_t idcap, idcount;
    char *arena; /* every alloc's id, in order */
    Py_ssize_t arenalen, arenacap;
    int64_t *alloc_off; /* per alloc key: its id's offset in the arena (the length: up to the next) */
    Py_ssize_t alloc_cap;
    GroupSlot *groups;
    Py_ssize_t gcap, gcount;
    uint64_t gen;
    PyObject *names; /* the allocs' ids, in order, when keep_ids */
    PyObject *out[6]; /* the arrays the columns go to (t, op, key, nbytes, worker, group or None) */
    Replay *replay;   /* a reader that replays its events as it reads them, keeping no columns */
    Py_ssize_t live;  /* with replay: bytes of the ids in flight (the arena holds no others for long) */
    NumSlot *nums;    /* with replay, a columnar trace's integer ids in flight: no text to hash or keep */
    Py_ssize_t numcap, numcount;
    int numshift;
    uint64_t seed;
    int numeric; /* whether the ids read so far came as integers */
} Reader;

static uint64_t hash_bytes(const char *s, Py_ssize_t len) {
#if PY_VERSION_HEX >= 0x030E0000
    return (uint64_t)Py_HashBuffer(s, len);
#else
    return (uint64_t)_Py_HashBytes(s, len); /* SipHash, keyed per process: no crafted collisions */
#endif
}

static void reader_dealloc(Reader *r) {
    PyMem_Free(r->t);
    PyMem_Free(r->key);
    PyMem_Free(r->nbytes);
    PyMem_Free(r->group);
    PyMem_Free(r->worker);
    PyMem_Free(r->op);
    PyMem_Free(r->ids);
    PyMem_Free(r->arena);
    PyMem_Free(r->alloc_off);
    PyMem_Free(r->groups);
    PyMem_Free(r->nums);
    Py_XDECREF(r->names);
    for (int c = 0; c < 6; c++) Py_XDECREF(r->out[c]);
    if (r->replay) replay_release(r->replay);
    PyMem_Free(r->replay);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static int reader_init(Reader *r, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"workers", "max_events", "requests", "keep_ids", "columns", "layout", NULL};
    long long workers, max_events;
    int requests, keep_ids;
    PyObject *columns, *layout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "LLppO!|O", kw, &workers, &max_events, &requests, &keep_ids,
                                     &PyTuple_Type, &columns, &layout))
        return -1;
    if (r->ids) {
        PyErr_SetString(PyExc_RuntimeError, "TraceReader: already initialised");
        return -1;
    }
    if (layout != Py_None) { /* replay as it reads: (memory_size, data_start, recycle_ns, alignment, max_leases) */
        long long memory_size, data_start, interval, alignment, max_leases;
        if (!PyArg_ParseTuple(layout, "LLLLL", &memory_size, &data_start, &interval, &alignment, &max_leases))
            return -1;
        if (requests || keep_ids || PyTuple_GET_SIZE(columns)) {
            PyErr_SetString(PyExc_ValueError, "TraceReader: a replaying reader keeps no columns, ids or requests");
            return -1;
        }
        if (!(r->replay = PyMem_Calloc(1, sizeof(Replay)))) {
            PyErr_NoMemory();
            return -1;
        }
        u128 none = ~(u128)0;
        if (replay_init(r->replay, workers, memory_size, data_start, interval, alignment, max_leases, 0, -1, none, 0,
                        0, 1) < 0)
            return -1;
    } else if (PyTuple_GET_SIZE(columns) != 6) {
        PyErr_SetString(PyExc_ValueError, "TraceReader: columns are (t, op, key, nbytes, worker, group)");
        return -1;
    }
    for (int c = 0; c < 6; c++) r->out[c] = Py_NewRef(r->replay ? Py_None : PyTuple_GET_ITEM(columns, c));
    r->workers = workers;
    r->max_events = max_events;
    r->requests = requests;
    r->keep_ids = keep_ids;
    r->prev_t = 0;
    r->at = -1;
    r->idcap = 1024;
    r->ids = PyMem_Malloc((size_t)r->idcap * sizeof(IdSlot));
    r->gcap = 64;
    r->groups = PyMem_Calloc((size_t)r->gcap, sizeof(GroupSlot));
    r->gen = 1;
    if (!r->ids || !r->groups) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < r->idcap; i++) r->ids[i].off = -1;
    r->seed = hash_bytes("mmpool ids", 10);
    if (keep_ids && !(r->names = PyList_New(0))) return -1;
    return 0;
}

static IdSlot *id_find(Reader *r, const char *s, Py_ssize_t len, uint64_t h) {
    Py_ssize_t mask = r->idcap - 1;
    for (Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)mask);; i = (i + 1) & mask) {
        IdSlot *slot = &r->ids[i];
        if (slot->off < 0) return slot;
        if (slot->hash == h && slot->len == len && !memcmp(r->arena + slot->off, s, (size_t)len)) return slot;
    }
}

static int id_grow(Reader *r) {
    Py_ssize_t cap = r->idcap * 2;
    IdSlot *old = r->ids, *fresh = PyMem_Malloc((size_t)cap * sizeof(IdSlot));
    if (!fresh) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < cap; i++) fresh[i].off = -1;
    for (Py_ssize_t i = 0; i < r->idcap; i++) {
        if (old[i].off < 0) continue;
        Py_ssize_t j = (Py_ssize_t)(old[i].hash & (uint64_t)(cap - 1));
        while (fresh[j].off >= 0) j = (j + 1) & (cap - 1);
        fresh[j] = old[i];
    }
    PyMem_Free(old);
    r->ids = fresh;
    r->idcap = cap;
    return 0;
}

/* Take a freed id out of the table, shifting back the ids its slot kept from their home slots. */
static void id_delete(Reader *r, IdSlot *slot) {
    Py_ssize_t mask = r->idcap - 1, i = slot - r->ids, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (r->ids[j].off < 0) break;
        Py_ssize_t home = (Py_ssize_t)(r->ids[j].hash & (uint64_t)mask);
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j)) continue;
        r->ids[i] = r->ids[j];
        i = j;
    }
    r->ids[i].off = -1;
    r->idcount--;
}

/* A free of an id not in flight: was it allocated (and freed) before? Only on the way to an error. */
static int id_was_allocated(const Reader *r, const char *s, Py_ssize_t len) {
    for (int64_t k = 0; k < r->serial; k++) {
        int64_t off = r->alloc_off[k], end = k + 1 < r->serial ? r->alloc_off[k + 1] : r->arenalen;
        if (end - off == len && !memcmp(r->arena + off, s, (size_t)len)) return 1;
    }
    return 0;
}

/* The group of an alloc: the first alloc at this t of the same worker whose id has the same request. */
static int64_t group_of(Reader *r, int64_t off, Py_ssize_t idlen, int64_t worker, int64_t serial) {
    const char *s = r->arena + off;
    Py_ssize_t len = idlen;
    for (Py_ssize_t i = idlen - 1; i >= 0; i--)
        if (s[i] == '/') {
            len = i;
            break;
        }
    uint64_t h = hash_bytes(s, len) ^ ((uint64_t)worker * 0x9E3779B97F4A7C15ULL);
    if (2 * (r->gcount + 1) > r->gcap) { /* grow, keeping this t's entries */
        Py_ssize_t cap = r->gcap * 2;
        GroupSlot *old = r->groups, *fresh = PyMem_Calloc((size_t)cap, sizeof(GroupSlot));
        if (!fresh) {
            PyErr_NoMemory();
            return -2;
        }
        for (Py_ssize_t i = 0; i < r->gcap; i++) {
            if (old[i].gen != r->gen) continue;
            Py_ssize_t j = (Py_ssize_t)(old[i].hash & (uint64_t)(cap - 1));
            while (fresh[j].gen == r->gen) j = (j + 1) & (cap - 1);
            fresh[j] = old[i];
        }
        PyMem_Free(old);
        r->groups = fresh;
        r->gcap = cap;
    }
    Py_ssize_t mask = r->gcap - 1;
    for (Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)mask);; i = (i + 1) & mask) {
        GroupSlot *g = &r->groups[i];
        if (g->gen != r->gen) {
            g->gen = r->gen;
            g->hash = h;
            g->off = off;
            g->len = (int32_t)len;
            g->worker = worker;
            g->value = serial;
            r->gcount++;
            return serial;
        }
        if (g->hash == h && g->worker == worker && g->len == len && !memcmp(r->arena + g->off, s, (size_t)len))
            return g->value;
    }
}

static int append_event(Reader *r, int64_t t, int8_t op, int64_t key, int64_t nbytes, long worker, int64_t group) {
    if (r->n == r->cap) {
        Py_ssize_t cap = r->cap ? r->cap * 2 : 4096;
        int64_t *a = PyMem_Realloc(r->t, (size_t)cap * 8);
        if (a) r->t = a;
        int64_t *b = a ? PyMem_Realloc(r->key, (size_t)cap * 8) : NULL;
        if (b) r->key = b;
        int64_t *c = b ? PyMem_Realloc(r->nbytes, (size_t)cap * 8) : NULL;
        if (c) r->nbytes = c;
        int64_t *d = c ? PyMem_Realloc(r->group, (size_t)cap * 8) : NULL;
        if (d) r->group = d;
        long *e = d ? PyMem_Realloc(r->worker, (size_t)cap * sizeof(long)) : NULL;
        if (e) r->worker = e;
        int8_t *f = e ? PyMem_Realloc(r->op, (size_t)cap) : NULL;
        if (!f) {
            PyErr_NoMemory();
            return -1;
        }
        r->op = f;
        r->cap = cap;
    }
    Py_ssize_t i = r->n++;
    r->t[i] = t;
    r->op[i] = op;
    r->key[i] = key;
    r->nbytes[i] = nbytes;
    r->worker[i] = worker;
    r->group[i] = group;
    return 0;
}

/* Room for len more bytes in the arena of a replaying reader, which needs only the ids in flight: they
 * move to a fresh arena of twice their size (at least), so the arena stays within a few times theirs. */
static int arena_compact(Reader *r, Py_ssize_t len) {
    Py_ssize_t cap = 4096;
    while (cap < 2 * (r->live + len)) cap *= 2;
    char *fresh = PyMem_Malloc((size_t)cap);
    if (!fresh) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < r->idcap; i++) {
        IdSlot *slot = &r->ids[i];
        if (slot->off < 0) continue;
        memcpy(fresh + at, r->arena + slot->off, (size_t)slot->len);
        slot->off = at;
        at += slot->len;
    }
    PyMem_Free(r->arena);
    r->arena = fresh;
    r->arenacap = cap;
    r->arenalen = at;
    return 0;
}

/* Check one event against what came before and add it: OK, an error code (nothing changed), or -1
 * with a Python exception. name: the id as a str, or NULL to make one from the (ASCII) bytes. A
 * free's nbytes and worker: those its row gives, to match its alloc's; 0 and -1 where it gives none. */
static int apply(Reader *r, int64_t t, int is_free, const char *id, Py_ssize_t idlen, int64_t nbytes, long worker,
                 PyObject *name) {
    if (r->count >= r->max_events) return E_TOO_MANY;
    if (t < r->prev_t) return E_BACKWARDS;
    uint64_t h = hash_bytes(id, idlen);
    IdSlot *slot = id_find(r, id, idlen, h);
    int found = slot->off >= 0;
    if (is_free) {
        if (!found) return r->replay ? E_GONE : id_was_allocated(r, id, idlen) ? E_FREED : E_UNKNOWN;
        if (gives_other(nbytes, worker, slot->nbytes, slot->worker)) return E_DIFFERS;
        if (r->replay) {
            if (replay_event(r->replay, t, 1, slot->value, 0, 0) < 0) return -1;
            r->live -= slot->len;
        } else if (append_event(r, t, 1, slot->value, 0, 0, -1) < 0) {
            return -1;
        }
        id_delete(r, slot);
    } else if (r->replay) {
        if (found) return E_IN_FLIGHT;
        if (2 * (r->idcount + 1) > r->idcap) {
            if (id_grow(r) < 0) return -1;
            slot = id_find(r, id, idlen, h);
        }
        if (r->arenalen + idlen > r->arenacap && arena_compact(r, idlen) < 0) return -1;
        int64_t key = replay_new_key(r->replay);
        if (key < 0) return -1;
        memcpy(r->arena + r->arenalen, id, (size_t)idlen);
        slot->off = r->arenalen;
        slot->hash = h;
        slot->len = (int32_t)idlen;
        slot->value = key;
        slot->nbytes = nbytes;
        slot->worker = (int32_t)worker;
        r->arenalen += idlen;
        r->live += idlen;
        r->idcount++;
        r->serial++;
        if (replay_event(r->replay, t, 0, key, nbytes, worker) < 0) return -1;
    } else {
        if (found) return E_IN_FLIGHT;
        if (2 * (r->idcount + 1) > r->idcap) {
            if (id_grow(r) < 0) return -1;
            slot = id_find(r, id, idlen, h);
        }
        int64_t *offs = grow(r->alloc_off, &r->alloc_cap, r->serial + 1, sizeof(int64_t));
        if (!offs) return -1;
        r->alloc_off = offs;
        char *arena = grow(r->arena, &r->arenacap, r->arenalen + idlen, 1);
        if (!arena) return -1;
        r->arena = arena;
        memcpy(arena + r->arenalen, id, (size_t)idlen);
        offs[r->serial] = r->arenalen;
        slot->off = r->arenalen;
        slot->hash = h;
        slot->len = (int32_t)idlen;
        slot->nbytes = nbytes;
        slot->worker = (int32_t)worker;
        r->arenalen += idlen;
        r->idcount++;
        int64_t group = -1;
        if (r->requests) {
            if (t != r->at) {
                r->gen++;
                r->gcount = 0;
                r->at = t;
            }
            group = group_of(r, slot->off, idlen, worker, r->serial);
            if (group == -2) return -1;
        }
        if (r->keep_ids) {
            PyObject *s = name     ? Py_NewRef(name)
                          : r->utf8 ? PyUnicode_DecodeUTF8(id, idlen, NULL)
                                    : PyUnicode_DecodeASCII(id, idlen, NULL);
            int bad = !s || PyList_Append(r->names, s) < 0;
            Py_XDECREF(s);
            if (bad) return -1;
        }
        if (append_event(r, t, 0, r->serial, nbytes, worker, group) < 0) return -1;
        slot->value = r->serial++;
    }
    r->prev_t = t;
    r->count++;
    return OK;
}

/* An integer id's slot: its bits mixed with a key drawn per process, as str hashes are, so that no
 * trace can be made whose ids all collide; Fibonacci hashing (the product's top bits). */
static inline Py_ssize_t num_home(const Reader *r, int64_t id) {
    return (Py_ssize_t)((((uint64_t)id ^ r->seed) * 0x9E3779B97F4A7C15ULL) >> r->numshift);
}

static NumSlot *num_find(const Reader *r, int64_t id) {
    Py_ssize_t mask = r->numcap - 1;
    for (Py_ssize_t i = num_home(r, id);; i = (i + 1) & mask) {
        NumSlot *slot = &r->nums[i];
        if (slot->value < 0 || slot->id == id) return slot;
    }
}

static int num_grow(Reader *r) {
    Py_ssize_t cap = r->numcap ? 2 * r->numcap : 1024;
    NumSlot *old = r->nums, *fresh = PyMem_Malloc((size_t)cap * sizeof(NumSlot));
    if (!fresh) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < cap; i++) fresh[i].value = -1;
    Py_ssize_t oldcap = r->numcap;
    r->nums = fresh;
    r->numcap = cap;
    for (r->numshift = 64; (Py_ssize_t)1 << (64 - r->numshift) < cap;) r->numshift--;
    for (Py_ssize_t i = 0; i < oldcap; i++)
        if (old[i].value >= 0) *num_find(r, old[i].id) = old[i];
    PyMem_Free(old);
    return 0;
}

static void num_delete(Reader *r, NumSlot *slot) {
    Py_ssize_t mask = r->numcap - 1, i = slot - r->nums, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (r->nums[j].value < 0) break;
        Py_ssize_t home = num_home(r, r->nums[j].id);
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j)) continue;
        r->nums[i] = r->nums[j];
        i = j;
    }
    r->nums[i].value = -1;
    r->numcount--;
}

/* A replaying reader's event of an integer id, in time order and within the limit: paired and
 * replayed (OK), or why not (nothing changed), or -1 with an exception; the caller counts it. */
static inline __attribute__((always_inline)) int pair_num(Reader *r, int64_t t, int is_free, int64_t id,
                                                         int64_t nbytes, long worker) {
    NumSlot *slot = num_find(r, id);
    if (is_free) {
        if (slot->value < 0) return E_GONE;
        if (gives_other(nbytes, worker, slot->nbytes, slot->worker)) return E_DIFFERS;
        if (replay_event(r->replay, t, 1, slot->value, 0, 0) < 0) return -1;
        num_delete(r, slot);
    } else {
        if (slot->value >= 0) return E_IN_FLIGHT;
        if (2 * (r->numcount + 1) > r->numcap) {
            if (num_grow(r) < 0) return -1;
            slot = num_find(r, id);
        }
        int64_t key = replay_new_key(r->replay);
        if (key < 0) return -1;
        slot->id = id;
        slot->value = key;
        slot->nbytes = nbytes;
        slot->worker = worker;
        r->numcount++;
        r->serial++;
        if (replay_event(r->replay, t, 0, key, nbytes, worker) < 0) return -1;
    }
    return OK;
}

/* apply() for an id stored as an integer (a columnar trace's): its text is its decimal digits. A
 * replaying reader keeps the number itself; any other reader keeps the text, as for any id. */
static inline __attribute__((always_inline)) int apply_num(Reader *r, int64_t t, int is_free, int64_t id,
                                                          int64_t nbytes, long worker) {
    if (!r->replay) {
        char text[24], *p = text + sizeof text;
        uint64_t v = id < 0 ? 0 - (uint64_t)id : (uint64_t)id;
        do *--p = (char)('0' + v % 10);
        while (v /= 10);
        if (id < 0) *--p = '-';
        return apply(r, t, is_free, p, text + sizeof text - p, nbytes, worker, NULL);
    }
    if (r->count >= r->max_events) return E_TOO_MANY;
    if (t < r->prev_t) return E_BACKWARDS;
    int code = pair_num(r, t, is_free, id, nbytes, worker);
    if (code) return code;
    r->prev_t = t;
    r->count++;
    return OK;
}

static inline int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r'; }

enum { K_T = 1, K_OP = 2, K_ID = 4, K_BYTES = 8, K_WORKER = 16, K_ITEM = 32 };

/* a plain string: printable ASCII without escapes; returns its end (after the quote) or NULL */
static const char *plain_string(const char *p, const char *end, const char **s, Py_ssize_t *len, Py_ssize_t most) {
    if (p >= end || *p != '"') return NULL;
    const char *q = ++p;
    while (q < end && *q != '"') {
        unsigned char c = (unsigned char)*q;
        if (c < 0x20 || c > 0x7e || c == '\\') return NULL;
        q++;
    }
    if (q >= end || q - p > most) return NULL;
    *s = p;
    *len = q - p;
    return q + 1;
}

/* a whole number without sign or leading zeros, at most 'top'; returns its end or NULL */
static const char *plain_int(const char *p, const char *end, int64_t top, int64_t *out) {
    if (p >= end || *p < '0' || *p > '9') return NULL;
    if (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9') return NULL;
    int64_t v = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        v = v * 10 + (*p - '0');
        if (v > top) return NULL;
        p++;
    }
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return NULL;
    *out = v;
    return p;
}

/* seconds as digits[.digits], to the nanosecond; returns its end or NULL */
static const char *plain_seconds(const char *p, const char *end, int64_t *ns) {
    if (p >= end || *p < '0' || *p > '9') return NULL;
    if (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9') return NULL;
    int64_t whole = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        whole = whole * 10 + (*p - '0');
        if (whole > MAX_T_SECONDS) return NULL;
        p++;
    }
    static const int64_t scale[10] = {1000000000, 100000000, 10000000, 1000000, 100000, 10000, 1000, 100, 10, 1};
    int64_t frac = 0;
    if (p < end && *p == '.') {
        p++;
        int digits = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (++digits > 9) return NULL;
            frac = frac * 10 + (*p - '0');
            p++;
        }
        if (!digits) return NULL;
        frac *= scale[digits];
    }
    if (p < end && (*p == 'e' || *p == 'E' || *p == '.')) return NULL;
    int64_t t = whole * NS_PER_S + frac;
    if (t > MAX_T_SECONDS * NS_PER_S) return NULL;
    *ns = t;
    return p;
}

/* One plain line: 1 with its fields, 0 if the careful parser must look at it. */
static int plain_line(const char *p, const char *end, int64_t workers, int64_t *t, int *is_free, const char **id,
                      Py_ssize_t *idlen, int64_t *nbytes, long *worker) {
    int seen = 0;
    int64_t w = 0;
    const char *s;
    Py_ssize_t len;
    while (p < end && is_ws(*p)) p++;
    if (p >= end || *p++ != '{') return 0;
    for (;;) {
        while (p < end && is_ws(*p)) p++;
        if (!(p = plain_string(p, end, &s, &len, 8))) return 0;
        int k = 0;
        if (len == 1 && s[0] == 't')
            k = K_T;
        else if (len == 2 && !memcmp(s, "op", 2))
            k = K_OP;
        else if (len == 2 && !memcmp(s, "id", 2))
            k = K_ID;
        else if (len == 5 && !memcmp(s, "bytes", 5))
            k = K_BYTES;
        else if (len == 6 && !memcmp(s, "worker", 6))
            k = K_WORKER;
        else if (len == 4 && !memcmp(s, "item", 4))
            k = K_ITEM;
        if (!k || (seen & k)) return 0;
        seen |= k;
        while (p < end && is_ws(*p)) p++;
        if (p >= end || *p++ != ':') return 0;
        while (p < end && is_ws(*p)) p++;
        switch (k) {
        case K_T:
            p = plain_seconds(p, end, t);
            break;
        case K_OP:
            p = plain_string(p, end, &s, &len, 5);
            if (p && len == 5 && !memcmp(s, "alloc", 5))
                *is_free = 0;
            else if (p && len == 4 && !memcmp(s, "free", 4))
                *is_free = 1;
            else
                return 0;
            break;
        case K_ID:
            p = plain_string(p, end, id, idlen, MAX_ID_CHARS);
            if (p && !*idlen) return 0;
            break;
        case K_BYTES:
            p = plain_int(p, end, MAX_POOL_BYTES, nbytes);
            if (p && !*nbytes) return 0;
            break;
        case K_WORKER:
            p = plain_int(p, end, workers - 1, &w);
            break;
        case K_ITEM:
            p = plain_string(p, end, &s, &len, MAX_ITEM_CHARS);
            break;
        }
        if (!p) return 0;
        while (p < end && is_ws(*p)) p++;
        if (p >= end) return 0;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p++ != '}') return 0;
        break;
    }
    while (p < end && is_ws(*p)) p++;
    if (p != end || !(seen & K_T) || !(seen & K_OP) || !(seen & K_ID)) return 0;
    if (*is_free) {
        if (seen != (K_T | K_OP | K_ID)) return 0;
        *nbytes = 0;
        *worker = 0;
    } else {
        if (!(seen & K_BYTES)) return 0;
        *worker = (long)w;
    }
    return 1;
}

/* Move the events read since the last flush into the caller's arrays: the reader's own columns stay
 * a chunk long, so a trace's columns are written once, where they are kept. */
static int flush(Reader *r) {
    void *data[6] = {r->t, r->op, r->key, r->nbytes, r->worker, r->group};
    Py_ssize_t width[6] = {8, 1, 8, 8, (Py_ssize_t)sizeof(long), 8};
    for (int c = 0; c < 6 && r->n; c++) {
        if (r->out[c] == Py_None) continue;
        PyObject *v = PyMemoryView_FromMemory(data[c], r->n * width[c], PyBUF_READ);
        PyObject *done = v ? PyObject_CallMethod(r->out[c], "frombytes", "O", v) : NULL;
        Py_XDECREF(v);
        if (!done) return -1;
        Py_DECREF(done);
    }
    r->n = 0;
    return 0;
}

/* The lines mmpool trace writes (and most writers do), matched piece by piece: 1 with the fields, or
 * 0 to read the line as any plain line. Every line it takes, plain_line takes alike. */
#define TAKE(text) (end - p >= (Py_ssize_t)sizeof(text) - 1 && !memcmp(p, text, sizeof(text) - 1) && (p += sizeof(text) - 1))

static int canonical_line(const char *p, const char *end, int64_t workers, int64_t *t, int *is_free, const char **id,
                          Py_ssize_t *idlen, int64_t *nbytes, long *worker) {
    const char *s;
    Py_ssize_t len;
    int64_t w = 0;
    if (!TAKE("{\"t\": ") || !(p = plain_seconds(p, end, t))) return 0;
    if (TAKE(", \"op\": \"free\", \"id\": ")) {
        if (!(p = plain_string(p, end, id, idlen, MAX_ID_CHARS)) || !*idlen) return 0;
        *is_free = 1;
        *nbytes = 0;
        *worker = 0;
        return end - p == 1 && *p == '}';
    }
    if (!TAKE(", \"op\": \"alloc\", \"id\": ")) return 0;
    if (!(p = plain_string(p, end, id, idlen, MAX_ID_CHARS)) || !*idlen) return 0;
    if (!TAKE(", \"bytes\": ") || !(p = plain_int(p, end, MAX_POOL_BYTES, nbytes)) || !*nbytes) return 0;
    if (TAKE(", \"worker\": ") && !(p = plain_int(p, end, workers - 1, &w))) return 0;
    if (TAKE(", \"item\": ") && !(p = plain_string(p, end, &s, &len, MAX_ITEM_CHARS))) return 0;
    *is_free = 0;
    *worker = (long)w;
    return end - p == 1 && *p == '}';
}

PyDoc_STRVAR(feed_doc,
             "feed(data, pos, lineno, max_line[, end]) -> (pos, lineno, stopped)\n"
             "Read the plain, valid lines of data[pos:end]. stopped: the line at pos needs the careful parser.");

static PyObject *reader_feed(Reader *r, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, max_line, stop = -1;
    long long lineno;
    if (!PyArg_ParseTuple(args, "y*nLn|n", &view, &pos, &lineno, &max_line, &stop)) return NULL;
    const char *buf = view.buf, *end = buf + (0 <= stop && stop < view.len ? stop : view.len);
    const char *p = buf + (pos < 0 ? 0 : pos > view.len ? view.len : pos);
    int stopped = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break; /* an unfinished line: the next chunk completes it */
        int64_t t = 0, nbytes = 0;
        int is_free = 0;
        const char *id = NULL;
        Py_ssize_t idlen = 0;
        long worker = 0;
        if (nl - p > max_line || !(canonical_line(p, nl, r->workers, &t, &is_free, &id, &idlen, &nbytes, &worker) ||
                                   plain_line(p, nl, r->workers, &t, &is_free, &id, &idlen, &nbytes, &worker))) {
            stopped = 1;
            break;
        }
        int code = apply(r, t, is_free, id, idlen, nbytes, is_free ? -1 : worker, NULL);
        if (code < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        if (code) {
            stopped = 1;
            break;
        }
        p = nl + 1;
        lineno++;
    }
    Py_ssize_t at = p - buf;
    PyBuffer_Release(&view);
    if (flush(r) < 0) return NULL;
    return Py_BuildValue("(nLO)", at, lineno, stopped ? Py_True : Py_False);
}

PyDoc_STRVAR(push_doc,
             "push(t, is_free, id, nbytes, worker) -> (code, previous_t)\n"
             "Add one event the careful parser read: code 0, or why it is refused (nothing is added).");

static PyObject *reader_push(Reader *r, PyObject *args) {
    long long t, nbytes;
    int is_free;
    PyObject *name;
    long worker;
    if (!PyArg_ParseTuple(args, "LpULl", &t, &is_free, &name, &nbytes, &worker)) return NULL;
    Py_ssize_t len;
    const char *id = PyUnicode_AsUTF8AndSize(name, &len);
    if (!id) return NULL;
    int64_t previous = r->prev_t;
    int code = apply(r, t, is_free, id, len, is_free ? 0 : nbytes, is_free ? -1 : worker, name);
    if (code < 0 || flush(r) < 0) return NULL;
    return Py_BuildValue("(iL)", code, (long long)previous);
}

PyDoc_STRVAR(feed_columns_doc,
             "feed_columns(t, is_free, id_offsets, id_data, nbytes, worker) -> (rows, code, previous_t)\n"
             "Add the events of columns whose every field is valid (a columnar trace's): rows added, and 0 or\n"
             "why the next row is refused. t, nbytes, worker: int64; is_free: int8; id_offsets: int64, one more.\n"
             "A free's nbytes and worker: those its row gives, to match its alloc's; 0 and -1 where it gives none.");

static PyObject *reader_feed_columns(Reader *r, PyObject *args) {
    PyObject *objs[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5])) return NULL;
    Py_buffer v[6];
    for (int c = 0; c < 6; c++) v[c].obj = NULL;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(objs[0], &v[0], PyBUF_C_CONTIGUOUS) < 0) goto done;
    Py_ssize_t n = v[0].len / 8;
    if (get_column(objs[1], &v[1], 1, n, "is_free") < 0 || get_column(objs[2], &v[2], 8, n + 1, "id_offsets") < 0 ||
        PyObject_GetBuffer(objs[3], &v[3], PyBUF_C_CONTIGUOUS) < 0 || get_column(objs[4], &v[4], 8, n, "nbytes") < 0 ||
        get_column(objs[5], &v[5], 8, n, "worker") < 0)
        goto done;
    const int64_t *t = v[0].buf, *offs = v[2].buf, *nb = v[4].buf, *wk = v[5].buf;
    const int8_t *fr = v[1].buf;
    const char *data = v[3].buf;
    Py_ssize_t i = 0;
    int code = OK;
    int64_t previous = r->prev_t;
    r->utf8 = 1;
    for (; i < n; i++) {
        if (offs[i] < 0 || offs[i + 1] < offs[i] || offs[i + 1] > v[3].len) {
            PyErr_SetString(PyExc_ValueError, "feed_columns: id_offsets outside id_data");
            goto done;
        }
        previous = r->prev_t;
        code = apply(r, t[i], fr[i] != 0, data + offs[i], (Py_ssize_t)(offs[i + 1] - offs[i]), nb[i], (long)wk[i], NULL);
        if (code < 0) goto done;
        if (code) break;
    }
    if (flush(r) < 0) goto done;
    result = Py_BuildValue("(niL)", i, code, (long long)previous);
done:
    r->utf8 = 0;
    for (int c = 0; c < 6; c++)
        if (v[c].obj) PyBuffer_Release(&v[c]);
    return result;
}

/* ---- a columnar trace's batch straight from its Arrow buffers: every field checked, then paired */

/* Whether a columnar trace's row has the fields a JSON line could have (its item checked apart): op alloc
 * (0) or free (1); t (-1: null) from 0 to MAX_T_SECONDS; an id; bytes from 1 to MAX_POOL_BYTES, a free's
 * also absent; a worker below workers, or absent (an alloc's: worker 0). The one check of both loops of
 * feed_arrow; unsigned, so a negative number is out of range too, with no arithmetic that can overflow. */
static inline int row_ok(int o, int64_t t, int has_id, int has_bytes, int64_t nbytes, int has_worker, int64_t worker,
                         uint64_t workers) {
    return (unsigned)o <= 1 && (uint64_t)t <= (uint64_t)(MAX_T_SECONDS * NS_PER_S) && has_id &&
           (has_bytes ? (uint64_t)nbytes - 1 < (uint64_t)MAX_POOL_BYTES : o == 1) &&
           (!has_worker || (uint64_t)worker < workers);
}

typedef struct {
    Py_buffer valid, values, data; /* obj NULL: absent (no validity bitmap: no nulls; no values: all null) */
    Py_ssize_t offset;             /* of the batch's first row in the buffers (an Arrow slice) */
    int width;                     /* of a value (ints) or of an offset (strings): 4 or 8 */
} ArrowCol;

static void col_release(ArrowCol *c) {
    if (c->valid.obj) PyBuffer_Release(&c->valid);
    if (c->values.obj) PyBuffer_Release(&c->values);
    if (c->data.obj) PyBuffer_Release(&c->data);
}

/* A column as (validity or None, offset, values or None, width, data or None), checked to cover n rows. */
static int col_get(PyObject *spec, ArrowCol *c, Py_ssize_t n, int strings, const char *name) {
    PyObject *valid, *values, *data;
    if (spec == Py_None) return 0;
    if (!PyArg_ParseTuple(spec, "OnOiO", &valid, &c->offset, &values, &c->width, &data)) return -1;
    if ((valid != Py_None && PyObject_GetBuffer(valid, &c->valid, PyBUF_SIMPLE) < 0) ||
        (values != Py_None && PyObject_GetBuffer(values, &c->values, PyBUF_SIMPLE) < 0) ||
        (data != Py_None && PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE) < 0))
        return -1;
    Py_ssize_t rows = c->offset + n + (strings ? 1 : 0);
    int ok = c->offset >= 0 && (c->width == 4 || c->width == 8) && c->values.obj &&
             c->values.len >= rows * c->width && (!c->valid.obj || c->valid.len >= (c->offset + n + 7) / 8) &&
             (!strings || c->data.obj || values == Py_None);
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "feed_arrow: column %s does not cover %zd rows", name, n);
        return -1;
    }
    return 0;
}

/* A column's buffers as the loop over a batch's rows reads them: a copy of its own, which nothing
 * the loop calls can reach, so that they stay in registers. */
typedef struct {
    const uint8_t *valid; /* NULL: no nulls */
    const char *values;   /* at the batch's first row; NULL: every row null */
    const char *data;
    Py_ssize_t bit, datalen; /* bit: the batch's first row's in valid */
    int width;
} View;

static View col_view(const ArrowCol *c) {
    View v = {c->valid.obj ? c->valid.buf : NULL, c->values.obj ? (const char *)c->values.buf + c->offset * c->width : NULL,
              c->data.obj ? c->data.buf : NULL, c->offset, c->data.obj ? c->data.len : 0, c->width};
    return v;
}

static inline int col_null(const View *c, Py_ssize_t i) {
    if (!c->values) return 1;
    if (!c->valid) return 0;
    Py_ssize_t j = c->bit + i;
    return !((c->valid[j >> 3] >> (j & 7)) & 1);
}

static inline int64_t col_int(const View *c, Py_ssize_t i) {
    return c->width == 8 ? ((const int64_t *)c->values)[i] : ((const int32_t *)c->values)[i];
}

/* A string's bytes (NULL if its offsets fall outside the data) */
static inline const char *col_str(const View *c, Py_ssize_t i, Py_ssize_t *len) {
    int64_t a = col_int(c, i), b = col_int(c, i + 1);
    if (a < 0 || b < a || b > c->datalen) return NULL;
    *len = (Py_ssize_t)(b - a);
    return c->data + a;
}

/* characters of valid UTF-8 (what pyarrow's utf8_length counts), up to most + 1 */
static Py_ssize_t utf8_chars(const char *s, Py_ssize_t len, Py_ssize_t most) {
    if (len <= most) return len; /* never more characters than bytes */
    Py_ssize_t chars = 0;
    for (Py_ssize_t i = 0; i < len && chars <= most; i++) chars += ((uint8_t)s[i] & 0xC0) != 0x80;
    return chars;
}

static inline int bit_set(const uint8_t *valid, Py_ssize_t j) { return !valid || ((valid[j >> 3] >> (j & 7)) & 1); }

/* The rows of a batch in the layout mmpool trace writes for integer ids (t_ns and id: int64, op:
 * int32 dictionary indices, none of them null; bytes: int64, worker: int32, each null or not; no
 * item), with the checks of feed_arrow's loop, without its questions per field about each column's
 * layout (nullable: whether bytes or worker has null flags; replay: whether the reader replays as it
 * reads). A free's bytes and worker: null (0, -1), or checked here and matched with its alloc's. */
static inline __attribute__((always_inline)) int feed_written_as(Reader *r, const View *v, const uint8_t *words,
                                                                Py_ssize_t nwords, Py_ssize_t n, Py_ssize_t *at,
                                                                const int nullable, const int replay) {
    const int64_t *T = (const int64_t *)v[0].values, *ID = (const int64_t *)v[2].values;
    const int64_t *NB = (const int64_t *)v[3].values;
    const int32_t *OP = (const int32_t *)v[1].values, *WK = (const int32_t *)v[4].values;
    const uint64_t workers = (uint64_t)r->workers;
    Py_ssize_t i = *at, first = i;
    /* a replaying reader's time and count kept here for the batch: the rows it may add before the limit */
    int64_t prev = r->prev_t, last = i + (r->max_events - r->count < n - i ? r->max_events - r->count : n - i);
    int code = OK;
    for (; i < n; i++) {
        uint8_t o = (uint32_t)OP[i] < (uint64_t)nwords ? words[OP[i]] : 2;
        int64_t t = T[i], nbytes = NB[i], worker = WK[i];
        int has_bytes = !nullable || bit_set(v[3].valid, v[3].bit + i);
        int has_worker = !nullable || bit_set(v[4].valid, v[4].bit + i);
        if (!has_bytes) nbytes = 0;
        if (!has_worker) worker = o ? -1 : 0;
        if (!row_ok(o, t, 1, has_bytes, nbytes, has_worker, worker, workers)) {
            code = E_FIELD;
            break;
        }
        if (!replay) {
            code = apply_num(r, t, o, ID[i], nbytes, (long)worker);
        } else {
            code = i >= last ? E_TOO_MANY : t < prev ? E_BACKWARDS : pair_num(r, t, o, ID[i], nbytes, (long)worker);
            prev = t;
        }
        if (code) break;
    }
    if (replay) {
        r->count += i - first;
        if (i > first) r->prev_t = T[i - 1];
    }
    *at = i;
    return code;
}

static int feed_written(Reader *r, const View *v, const uint8_t *words, Py_ssize_t nwords, Py_ssize_t n,
                        Py_ssize_t *at) {
    /* one loop made for each layout and reader, with no question about either per row */
    if (v[3].valid || v[4].valid)
        return r->replay ? feed_written_as(r, v, words, nwords, n, at, 1, 1)
                         : feed_written_as(r, v, words, nwords, n, at, 1, 0);
    return r->replay ? feed_written_as(r, v, words, nwords, n, at, 0, 1) : feed_written_as(r, v, words, nwords, n, at, 0, 0);
}

PyDoc_STRVAR(feed_arrow_doc,
             "feed_arrow(n, t, op, id, nbytes, worker, item) -> (rows, code, previous_t)\n"
             "Check and add n rows of a columnar trace from its Arrow buffers, without a copy: rows added, and 0,\n"
             "why the next row is refused after what came before, or 6: one of its fields is wrong. Each column\n"
             "(validity or None, offset, values or None, width, data or None), None when absent (all null); op:\n"
             "its dictionary's indices, data the code of each word (0 alloc, 1 free, other: wrong); an id column\n"
             "of integers has data None.");

static PyObject *reader_feed_arrow(Reader *r, PyObject *args) {
    Py_ssize_t n;
    PyObject *specs[6];
    if (!PyArg_ParseTuple(args, "nOOOOOO", &n, &specs[0], &specs[1], &specs[2], &specs[3], &specs[4], &specs[5]))
        return NULL;
    ArrowCol col[6];
    memset(col, 0, sizeof col);
    PyObject *result = NULL;
    static const char *names[6] = {"t_ns", "op", "id", "bytes", "worker", "item"};
    /* op: its dictionary's indices, with data the code of each word of the dictionary */
    if (n < 0 || col_get(specs[1], &col[1], n, 0, names[1]) < 0) goto done;
    if (!col[1].values.obj || !col[1].data.obj) {
        PyErr_SetString(PyExc_ValueError, "feed_arrow: op's indices and words are required");
        goto done;
    }
    /* an id column of integers comes without string data: its ids are their decimal text */
    int numeric = PyTuple_Check(specs[2]) && PyTuple_GET_SIZE(specs[2]) == 5 && PyTuple_GET_ITEM(specs[2], 4) == Py_None;
    for (int c = 0; c < 6; c++)
        if (c != 1 && col_get(specs[c], &col[c], n, c == 5 || (c == 2 && !numeric), names[c]) < 0) goto done;
    if (!col[0].values.obj || !col[2].values.obj) {
        PyErr_SetString(PyExc_ValueError, "feed_arrow: t_ns and id are required");
        goto done;
    }
    if (r->count && r->numeric != numeric) {
        PyErr_SetString(PyExc_ValueError, "feed_arrow: a trace's ids are all text or all integers");
        goto done;
    }
    r->numeric = numeric;
    if (numeric && r->replay && !r->nums && num_grow(r) < 0) goto done; /* the table apply_num pairs ids in */
    View v[6];
    for (int c = 0; c < 6; c++) v[c] = col_view(&col[c]);
    const uint8_t *words = col[1].data.buf;
    Py_ssize_t nwords = col[1].data.len;
    Py_ssize_t i = 0;
    int code = OK;
    r->utf8 = 1;
    if (numeric && v[0].values && !v[0].valid && v[0].width == 8 && v[1].values && !v[1].valid &&
        v[1].width == 4 && !v[2].valid && v[2].width == 8 && v[3].values && v[3].width == 8 && v[4].values &&
        v[4].width == 4 && !v[5].values) {
        code = feed_written(r, v, words, nwords, n, &i);
        if (code < 0) goto done;
        n = i; /* the loop below has nothing left to read */
    }
    for (; i < n; i++) {
        int8_t o = 2; /* neither alloc nor free */
        if (!col_null(&v[1], i)) {
            int64_t w = col_int(&v[1], i);
            if (0 <= w && w < nwords) o = (int8_t)words[w];
        }
        Py_ssize_t idlen = 0, itemlen = 0;
        const char *id = NULL;
        int64_t idnum = 0;
        int has_id = !col_null(&v[2], i);
        if (has_id && numeric) {
            idnum = col_int(&v[2], i);
        } else if (has_id) {
            id = col_str(&v[2], i, &idlen);
            has_id = id && idlen && utf8_chars(id, idlen, MAX_ID_CHARS) <= MAX_ID_CHARS;
        }
        int64_t t = col_null(&v[0], i) ? -1 : col_int(&v[0], i);
        int has_bytes = !col_null(&v[3], i), has_worker = !col_null(&v[4], i);
        /* a free's bytes and worker: null, or (checked, then matched) its alloc's; its item: null */
        int64_t nbytes = has_bytes ? col_int(&v[3], i) : 0, worker = has_worker ? col_int(&v[4], i) : o == 1 ? -1 : 0;
        int ok = row_ok(o, t, has_id, has_bytes, nbytes, has_worker, worker, (uint64_t)r->workers);
        if (ok && o == 1) {
            ok = col_null(&v[5], i);
        } else if (ok) {
            const char *item = col_null(&v[5], i) ? "" : col_str(&v[5], i, &itemlen);
            ok = item && utf8_chars(item, itemlen, MAX_ITEM_CHARS) <= MAX_ITEM_CHARS;
        }
        if (!ok) {
            code = E_FIELD;
            break;
        }
        code = numeric ? apply_num(r, t, o, idnum, nbytes, (long)worker) : apply(r, t, o, id, idlen, nbytes, (long)worker, NULL);
        if (code < 0) goto done;
        if (code) break;
    }
    if (flush(r) < 0) goto done;
    /* a refused row changes nothing: the time before it is the last one taken */
    result = Py_BuildValue("(niL)", i, code, (long long)r->prev_t);
done:
    r->utf8 = 0;
    for (int c = 0; c < 6; c++) col_release(&col[c]);
    return result;
}

PyDoc_STRVAR(answer_doc, "answer() -> what replay() returns, for the events a replaying reader (layout) has read");

static PyObject *reader_answer(Reader *r, PyObject *Py_UNUSED(ignored)) {
    if (!r->replay) {
        PyErr_SetString(PyExc_ValueError, "TraceReader: answer() is for a reader made with a layout");
        return NULL;
    }
    return replay_answer(r->replay);
}

PyDoc_STRVAR(ids_doc, "ids() -> the allocs' ids in order, or None without keep_ids");

static PyObject *reader_ids(Reader *r, PyObject *Py_UNUSED(ignored)) { return Py_NewRef(r->names ? r->names : Py_None); }

static PyObject *reader_len(Reader *r, void *Py_UNUSED(closure)) { return PyLong_FromLongLong(r->count); }

static PyMethodDef reader_methods[] = {
    {"feed", (PyCFunction)reader_feed, METH_VARARGS, feed_doc},
    {"push", (PyCFunction)reader_push, METH_VARARGS, push_doc},
    {"feed_columns", (PyCFunction)reader_feed_columns, METH_VARARGS, feed_columns_doc},
    {"feed_arrow", (PyCFunction)reader_feed_arrow, METH_VARARGS, feed_arrow_doc},
    {"ids", (PyCFunction)reader_ids, METH_NOARGS, ids_doc},
    {"answer", (PyCFunction)reader_answer, METH_NOARGS, answer_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef reader_members[] = {
    {"workers", T_LONGLONG, offsetof(Reader, workers), READONLY, "the trace's pools"},
    {"max_events", T_LONGLONG, offsetof(Reader, max_events), READONLY, "events read at most"},
    {"requests", T_INT, offsetof(Reader, requests), READONLY, "whether allocs are grouped by request"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef reader_getset[] = {
    {"events", (getter)reader_len, NULL, "events read so far", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mmpool_cli.kernels._fastsim.TraceReader",
    .tp_doc = PyDoc_STR("TraceReader(workers, max_events, requests, keep_ids, columns): a trace's events, checked,\n"
                        "appended to the arrays columns = (t, op, key, nbytes, worker, group or None)"),
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)reader_init,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_methods = reader_methods,
    .tp_getset = reader_getset,
    .tp_members = reader_members,
};

#ifdef MMPOOL_FAILPOINTS
static PyObject *failpoint(PyObject *self, PyObject *arg) {
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    fp_countdown = n;
    if (n >= 0) fp_where = NULL;
    Py_RETURN_NONE;
}

static PyObject *failpoint_state(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *state = Py_BuildValue("(nsn)", fp_live, fp_where, fp_full);
    fp_full = 0;
    return state;
}
#endif

static PyMethodDef methods[] = {
    {"replay", replay, METH_VARARGS, replay_doc},
#ifdef MMPOOL_FAILPOINTS
    {"_failpoint", failpoint, METH_O, "_failpoint(n): the n-th allocation from now fails (-1: none)"},
    {"_failpoint_state", failpoint_state, METH_NOARGS, "(blocks held, the function whose allocation failed or None, full blocks freed since)"},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastsim", "mmpool's compiled simulator.", -1, methods};

PyMODINIT_FUNC PyInit__fastsim(void) {
    if (PyType_Ready(&ReaderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyObject *refusals = Py_BuildValue("{sisisisisisisisi}", "BACKWARDS", E_BACKWARDS, "IN_FLIGHT", E_IN_FLIGHT,
                                       "FREED", E_FREED, "UNKNOWN", E_UNKNOWN, "TOO_MANY", E_TOO_MANY, "FIELD",
                                       E_FIELD, "GONE", E_GONE, "DIFFERS", E_DIFFERS);
    int bad = PyModule_AddObjectRef(m, "TraceReader", (PyObject *)&ReaderType) < 0 ||
              PyModule_AddObjectRef(m, "REFUSALS", refusals) < 0;
    Py_XDECREF(refusals);
    if (bad) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
