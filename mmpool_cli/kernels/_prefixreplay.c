/* The compiled twin of the radix prefix replay (caches/radix.py's RadixReplay: SGLang's RadixCache as
 * its scheduler drives it). The Python replay is the reference; tests/caches/test_prefix_native.py
 * keeps the two equal request by request. Each function below is the Python method of the same name,
 * step for step: the same nodes, splits, clock ticks, locks, eviction order and counts.
 *
 * prepare(requests, order) -> Prepared: the input of any number of replays, read once
 *   requests: a sequence of objects with .tokens and .output (sequences of ints within int64);
 *   order: the events, a list of (time, phase, index, what) tuples (caches/prefix.py's _events).
 * replay(prepared, capacity, page) -> (served, evicted, over, peak)
 *   capacity: the token pool's slots, or -1 for one that never fills (then peak is the most taken).
 * radix(requests, order, capacity, page): replay(prepare(requests, order), capacity, page).
 *
 * A node's key is a slice of the requests' tokens (a prompt held as an int64 buffer is read in place,
 * the Prepared holding it; the others are copied, with the output tokens inserted, into one buffer);
 * a node's children are found in one hash table keyed by (parent, first page).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)0)
#endif

typedef struct {
    const int64_t *key;
    int64_t klen;
    int64_t time;
    uint32_t hash; /* of (parent, first page), its low half: where its entry in the children's table is */
    int32_t lock;  /* at most one a request (prepare bounds their count) and the root's own */
    int32_t parent;
    int32_t nchild;
    uint8_t leaf; /* in the set of evictable leaves */
} Node;

typedef struct {
    int64_t time;
    int32_t node;
    uint32_t slot; /* its node's hash when pushed: where its entry in the children's table is (a hint) */
} Entry;

typedef struct {
    uint32_t hash; /* the low half of the hash of (parent, first page): its home, and a first check */
    int32_t child; /* -1: empty */
} Slot;

/* The evictable leaves by (time, node), least first, in two parts that pop as one heap: most entries are
 * pushed at the current tick, in order, and wait in a queue (the ring); the few pushed behind the
 * ring's last (a parent left childless, with its older time) go to a heap. A pop takes the lesser head.
 * An entry is stale once its node's time moved or it stopped being an evictable leaf. */
typedef struct {
    Node *nodes;
    int32_t nnodes, capnodes;
    int32_t *free; /* indices of evicted nodes, for reuse */
    int32_t nfree, capfree;
    Slot *table;
    uint64_t tmask;
    int64_t tcount;
    Entry *heap;
    int64_t nheap, capheap;
    Entry *ring;
    int64_t rhead, rn, rcap; /* rcap: 0 or a power of two */
    int64_t nleaves;
    int64_t page;
    int64_t cap; /* -1: never fills */
    int64_t clock, used, peak, over;
    int evicted;
    int32_t root;
} Tree;

static int64_t tick(Tree *t) { return ++t->clock; }

static uint64_t page_hash(int32_t parent, const int64_t *p, int64_t page) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uint32_t)parent;
    for (int64_t i = 0; i < page; i++) {
        h ^= (uint64_t)p[i];
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 29;
    return h;
}

static int32_t new_node(Tree *t, int64_t time) {
    int32_t i;
    if (t->nfree > 0) {
        i = t->free[--t->nfree];
    } else {
        if (t->nnodes == t->capnodes) {
            if (t->capnodes >= INT32_MAX / 2) { PyErr_NoMemory(); return -1; }
            int32_t c = t->capnodes ? 2 * t->capnodes : 1024;
            Node *n = realloc(t->nodes, (size_t)c * sizeof(Node));
            if (!n) { PyErr_NoMemory(); return -1; }
            t->nodes = n;
            t->capnodes = c;
        }
        i = t->nnodes++;
    }
    Node *n = &t->nodes[i];
    n->key = NULL;
    n->klen = 0;
    n->time = time;
    n->hash = 0;
    n->lock = 0;
    n->parent = -1;
    n->nchild = 0;
    n->leaf = 0;
    return i;
}

static int free_node(Tree *t, int32_t i) {
    if (t->nfree == t->capfree) {
        int32_t c = t->capfree ? 2 * t->capfree : 1024;
        int32_t *f = realloc(t->free, (size_t)c * sizeof(int32_t));
        if (!f) { PyErr_NoMemory(); return -1; }
        t->free = f;
        t->capfree = c;
    }
    t->free[t->nfree++] = i;
    return 0;
}

/* ---------- the children: (parent, first page) -> child ---------- */

static int64_t slot_of(Tree *t, int32_t parent, const int64_t *p, uint32_t h) {
    uint64_t i = (uint64_t)h & t->tmask;
    for (;;) {
        Slot *s = &t->table[i];
        if (s->child < 0) return -(int64_t)i - 1;
        if (s->hash == h) {
            Node *c = &t->nodes[s->child];
            if (c->parent == parent &&
                (t->page == 1 ? c->key[0] == p[0] : memcmp(c->key, p, (size_t)t->page * sizeof(int64_t)) == 0))
                return (int64_t)i;
        }
        i = (i + 1) & t->tmask;
    }
}

static int32_t child_of(Tree *t, int32_t parent, const int64_t *p) {
    int64_t s = slot_of(t, parent, p, (uint32_t)page_hash(parent, p, t->page));
    return s < 0 ? -1 : t->table[s].child;
}

static int grow_table(Tree *t) {
    uint64_t n = (t->tmask + 1) * 2;
    if (n > ((uint64_t)1 << 31)) { PyErr_NoMemory(); return -1; } /* a slot keeps 32 bits of its hash */
    Slot *old = t->table;
    uint64_t oldn = t->tmask + 1;
    Slot *tb = malloc((size_t)n * sizeof(Slot));
    if (!tb) { PyErr_NoMemory(); return -1; }
    for (uint64_t i = 0; i < n; i++) tb[i].child = -1;
    t->table = tb;
    t->tmask = n - 1;
    for (uint64_t i = 0; i < oldn; i++) {
        if (old[i].child < 0) continue;
        uint64_t j = (uint64_t)old[i].hash & t->tmask;
        while (tb[j].child >= 0) j = (j + 1) & t->tmask;
        tb[j] = old[i];
    }
    free(old);
    return 0;
}

/* set the child of (parent, its key's first page) to c (a new entry, or one replaced) */
static int put_child(Tree *t, int32_t parent, int32_t c) {
    const int64_t *p = t->nodes[c].key;
    uint32_t h = (uint32_t)page_hash(parent, p, t->page);
    t->nodes[c].hash = h;
    int64_t s = slot_of(t, parent, p, h);
    if (s >= 0) {
        t->table[s].child = c;
        return 0;
    }
    if ((uint64_t)(t->tcount + 1) * 2 > t->tmask + 1) {
        if (grow_table(t) < 0) return -1;
        s = slot_of(t, parent, p, h);
    }
    uint64_t i = (uint64_t)(-s - 1);
    t->table[i].hash = h;
    t->table[i].child = c;
    t->tcount++;
    t->nodes[parent].nchild++;
    return 0;
}

/* take c out of its parent's children: its entry found by its index from its hash's slot on, so that
 * neither its key nor another node is read */
static void del_child(Tree *t, int32_t c) {
    uint64_t i = (uint64_t)t->nodes[c].hash & t->tmask;
    for (;;) {
        int32_t x = t->table[i].child;
        if (x == c) break;
        if (x < 0) return;
        i = (i + 1) & t->tmask;
    }
    t->table[i].child = -1;
    t->tcount--;
    t->nodes[t->nodes[c].parent].nchild--;
    /* backward-shift deletion: move up the entries that probed past the hole */
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & t->tmask;
        if (t->table[j].child < 0) return;
        uint64_t home = (uint64_t)t->table[j].hash & t->tmask;
        if (((j - home) & t->tmask) >= ((j - i) & t->tmask)) {
            t->table[i] = t->table[j];
            t->table[j].child = -1;
            i = j;
        }
    }
}

/* ---------- the eviction order: (time, node), least first ---------- */

static int entry_less(const Entry *a, const Entry *b) {
    return a->time < b->time || (a->time == b->time && a->node < b->node);
}

static void sift_down(Entry *h, int64_t n, int64_t i) {
    Entry x = h[i];
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && entry_less(&h[c + 1], &h[c])) c++;
        if (!entry_less(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

static int heap_push(Tree *t, Entry x) {
    if (t->nheap == t->capheap) {
        int64_t c = t->capheap ? 2 * t->capheap : 1024;
        Entry *h = realloc(t->heap, (size_t)c * sizeof(Entry));
        if (!h) { PyErr_NoMemory(); return -1; }
        t->heap = h;
        t->capheap = c;
    }
    int64_t i = t->nheap++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!entry_less(&x, &t->heap[p])) break;
        t->heap[i] = t->heap[p];
        i = p;
    }
    t->heap[i] = x;
    return 0;
}

static int ring_push(Tree *t, Entry x) {
    if (t->rn == t->rcap) { /* a ring twice the size, its entries from its start */
        int64_t c = t->rcap ? 2 * t->rcap : 1024;
        Entry *r = malloc((size_t)c * sizeof(Entry));
        if (!r) { PyErr_NoMemory(); return -1; }
        for (int64_t i = 0; i < t->rn; i++) r[i] = t->ring[(t->rhead + i) & (t->rcap - 1)];
        free(t->ring);
        t->ring = r;
        t->rcap = c;
        t->rhead = 0;
    }
    t->ring[(t->rhead + t->rn) & (t->rcap - 1)] = x;
    t->rn++;
    return 0;
}

static int push(Tree *t, int64_t time, int32_t node) {
    Entry x = {time, node, t->nodes[node].hash};
    if (t->rn == 0 || !entry_less(&x, &t->ring[(t->rhead + t->rn - 1) & (t->rcap - 1)])) return ring_push(t, x);
    return heap_push(t, x);
}

/* the least entry of both (there is one) */
static Entry pop(Tree *t) {
    if (t->rn > 0 && (t->nheap == 0 || !entry_less(&t->heap[0], &t->ring[t->rhead]))) {
        Entry e = t->ring[t->rhead];
        t->rhead = (t->rhead + 1) & (t->rcap - 1);
        t->rn--;
        /* the node of an entry a few pops ahead and its children's slot, on their way while this one is
         * evicted */
        if (t->rn > 8) {
            const Entry *a = &t->ring[(t->rhead + 8) & (t->rcap - 1)];
            PREFETCH(&t->nodes[a->node]);
            PREFETCH(&t->table[a->slot & t->tmask]);
        }
        return e;
    }
    Entry top = t->heap[0];
    t->nheap--;
    if (t->nheap > 0) {
        t->heap[0] = t->heap[t->nheap];
        sift_down(t->heap, t->nheap, 0);
    }
    return top;
}

/* whether e is its node's live entry, kept (marked) the first time it is seen: a leaf's older entries
 * at its time are duplicates */
static int keep(Tree *t, Entry e) {
    Node *x = &t->nodes[e.node];
    if (x->leaf == 1 && x->time == e.time) {
        x->leaf = 2;
        return 1;
    }
    return 0;
}

/* drop the stale entries: the ring stays in order, the heap is made again */
static void compact(Tree *t) {
    int64_t k = 0, mask = t->rcap - 1;
    for (int64_t i = 0; i < t->rn; i++) {
        Entry e = t->ring[(t->rhead + i) & mask];
        if (keep(t, e)) t->ring[(t->rhead + k++) & mask] = e;
    }
    t->rn = k;
    k = 0;
    for (int64_t i = 0; i < t->nheap; i++)
        if (keep(t, t->heap[i])) t->heap[k++] = t->heap[i];
    t->nheap = k;
    for (int64_t i = 0; i < t->rn; i++) t->nodes[t->ring[(t->rhead + i) & mask].node].leaf = 1;
    for (int64_t i = 0; i < k; i++) t->nodes[t->heap[i].node].leaf = 1;
    for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(t->heap, k, i);
}

/* ---------- the tree ---------- */

static int leaf_status(Tree *t, int32_t i) {
    Node *n = &t->nodes[i];
    if (n->lock > 0 || n->nchild > 0) {
        if (n->leaf) { n->leaf = 0; t->nleaves--; }
    } else if (!n->leaf) {
        n->leaf = 1;
        t->nleaves++;
        return push(t, n->time, i);
    }
    return 0;
}

static int touch(Tree *t, int32_t i, int64_t time) {
    t->nodes[i].time = time;
    if (t->nodes[i].leaf) return push(t, time, i);
    return 0;
}

static int64_t common(const int64_t *a, const int64_t *b, int64_t n) {
    int64_t i = 0;
    /* a block at a time while the blocks agree (prompts share long runs), then the first difference */
    while (i + 8 <= n && memcmp(a + i, b + i, 8 * sizeof(int64_t)) == 0) i += 8;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static int32_t split(Tree *t, int32_t child, int64_t m) {
    int32_t nw = new_node(t, tick(t));
    if (nw < 0) return -1;
    Node *c = &t->nodes[child], *n = &t->nodes[nw];
    int32_t parent = c->parent;
    n->parent = parent;
    n->lock = c->lock;
    n->key = c->key;
    n->klen = m;
    /* the parent's entry for this first page now leads to the new node */
    if (put_child(t, parent, nw) < 0) return -1; /* replaces the entry: the parent's count stays */
    c = &t->nodes[child];
    c->key += m;
    c->klen -= m;
    c->parent = nw;
    if (put_child(t, nw, child) < 0) return -1;
    return nw;
}

/* (pos, node) of the match of seq[:n] */
static int match(Tree *t, const int64_t *seq, int64_t n, int64_t *pos_out, int32_t *node_out) {
    int64_t page = t->page;
    n -= n % page;
    if (n <= 0) {
        *pos_out = 0;
        *node_out = t->root;
        return 0;
    }
    int64_t tm = tick(t);
    int32_t node = t->root;
    t->nodes[node].time = tm;
    int64_t pos = 0;
    while (pos < n) {
        int32_t child = child_of(t, node, seq + pos);
        if (child < 0) break;
        if (touch(t, child, tm) < 0) return -1;
        int64_t klen = t->nodes[child].klen;
        int64_t lim = klen < n - pos ? klen : n - pos;
        int64_t m = common(t->nodes[child].key, seq + pos, lim);
        m -= m % page;
        if (m < klen) {
            node = split(t, child, m);
            if (node < 0) return -1;
            pos += m;
            break;
        }
        pos += klen;
        node = child;
    }
    *pos_out = pos;
    *node_out = node;
    return 0;
}

static int extend(Tree *t, int32_t node, int64_t pos, const int64_t *seq, int64_t n, int64_t tm, int64_t *prefix_out,
                  int32_t *node_out) {
    int64_t page = t->page;
    while (pos < n) {
        int32_t child = child_of(t, node, seq + pos);
        if (child < 0) break;
        node = child;
        if (touch(t, node, tm) < 0) return -1;
        int64_t klen = t->nodes[node].klen;
        int64_t lim = klen < n - pos ? klen : n - pos;
        int64_t m = common(t->nodes[node].key, seq + pos, lim);
        m -= m % page;
        pos += m;
        if (m < klen) {
            node = split(t, node, m);
            if (node < 0) return -1;
        }
    }
    *prefix_out = pos;
    if (pos < n) {
        int32_t leaf = new_node(t, tick(t));
        if (leaf < 0) return -1;
        Node *l = &t->nodes[leaf];
        l->parent = node;
        l->key = seq + pos;
        l->klen = n - pos;
        if (put_child(t, node, leaf) < 0) return -1;
        if (leaf_status(t, node) < 0 || leaf_status(t, leaf) < 0) return -1;
        node = leaf;
    }
    *node_out = node;
    return 0;
}

static int rematch(Tree *t, int32_t end, int64_t n) {
    if (n <= 0) return 0;
    int64_t tm = tick(t);
    if (touch(t, end, tm) < 0) return -1;
    int32_t x = t->nodes[end].parent;
    while (x >= 0) {
        t->nodes[x].time = tm;
        x = t->nodes[x].parent;
    }
    t->nodes[t->root].time = tm;
    return 0;
}

static int relock(Tree *t, int32_t lower, int32_t upper, int32_t delta) {
    int32_t first = lower;
    while (lower != upper) {
        t->nodes[lower].lock += delta;
        lower = t->nodes[lower].parent;
        if (lower < 0) {
            PyErr_SetString(PyExc_RuntimeError, "radix replay: a lock's path left the tree");
            return -1;
        }
    }
    if (first != upper) return leaf_status(t, first);
    return 0;
}

static int evict(Tree *t, int64_t num) {
    int64_t done = 0;
    while (done < num && (t->rn > 0 || t->nheap > 0)) {
        Entry e = pop(t);
        Node *x = &t->nodes[e.node];
        if (x->time != e.time || !x->leaf) continue;
        done += x->klen;
        int32_t parent = x->parent;
        del_child(t, e.node);
        x->leaf = 0;
        t->nleaves--;
        x->parent = -1;
        if (free_node(t, e.node) < 0) return -1;
        if (leaf_status(t, parent) < 0) return -1;
    }
    if (done) t->evicted = 1;
    t->used -= done;
    if (t->rn + t->nheap > 4 * t->nleaves + 4096) compact(t);
    return 0;
}

static int make_room(Tree *t, int64_t demand) {
    if (t->cap < 0) {
        if (t->used + demand > t->peak) t->peak = t->used + demand;
        return 0;
    }
    int64_t shortfall = demand - (t->cap - t->used);
    if (shortfall > 0) return evict(t, shortfall);
    return 0;
}

static void take(Tree *t, int64_t n) {
    t->used += n;
    if (t->used > t->peak) t->peak = t->used;
    if (t->cap >= 0 && t->used > t->cap) t->over++;
}

/* ---------- the input, read once: every request's prompt and output, the events ---------- */

/* an event as the replay reads it, in order: a pass over them reads memory in order */
typedef struct {
    const int64_t *seq; /* the request's prompt, then the output tokens inserted */
    int64_t plen;       /* the prompt's length */
    int64_t decode;     /* the output tokens inserted: len(output) - 1, at least 0 */
    int64_t iw;         /* the request's index * 2 + (what != 0) */
} Event;

typedef struct {
    PyObject_HEAD
    Py_ssize_t nreq, nev;
    const int64_t **seqs; /* each request's prompt, then its output tokens inserted (olen - 1 of them) */
    int64_t *plen, *olen;
    int64_t *buf;      /* the tokens copied */
    Py_buffer *views;  /* the prompts read in place (obj NULL: none) */
    Event *events;
} Prepared;

static void prepared_dealloc(Prepared *p) {
    if (p->views)
        for (Py_ssize_t i = 0; i < p->nreq; i++)
            if (p->views[i].obj) PyBuffer_Release(&p->views[i]);
    free(p->views);
    free(p->seqs);
    free(p->plen);
    free(p->olen);
    free(p->buf);
    free(p->events);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyTypeObject PreparedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mmpool_cli.kernels._prefixreplay.Prepared",
    .tp_doc = PyDoc_STR("The requests and order of prepare(requests, order), read once for any number of replays;\n"
                        "the prompts read in place are held (their buffers stay exported) while it lives."),
    .tp_basicsize = sizeof(Prepared),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)prepared_dealloc,
};

static PyObject *s_tokens, *s_output; /* the attributes' names, interned once at import */

static int64_t seq_len(PyObject *seq) { return (int64_t)PySequence_Size(seq); }

/* seq[:count] into dst; -1 on error (not a sequence, an int outside int64) */
static int copy_ints(PyObject *seq, int64_t count, int64_t *dst) {
    if (count == 0) return 0;
    if (PyObject_CheckBuffer(seq)) {
        Py_buffer b;
        if (PyObject_GetBuffer(seq, &b, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) == 0) {
            int ok = b.itemsize == 8 && b.format != NULL && (strcmp(b.format, "q") == 0 || strcmp(b.format, "l") == 0) &&
                     b.len / 8 >= count;
            if (ok) memcpy(dst, b.buf, (size_t)count * 8);
            PyBuffer_Release(&b);
            if (ok) return 0;
        } else {
            PyErr_Clear();
        }
    }
    PyObject *fast = PySequence_Fast(seq, "a request's tokens must be a sequence of ints");
    if (!fast) return -1;
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (int64_t i = 0; i < count; i++) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(items[i], &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            Py_DECREF(fast);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "a token outside int64");
            return -1;
        }
        dst[i] = (int64_t)v;
    }
    Py_DECREF(fast);
    return 0;
}

static Prepared *do_prepare(PyObject *requests, PyObject *order) {
    PyObject *reqs = PySequence_Fast(requests, "requests must be a sequence");
    if (!reqs) return NULL;
    Prepared *p = PyObject_New(Prepared, &PreparedType);
    if (!p) { Py_DECREF(reqs); return NULL; }
    Py_ssize_t nreq = PySequence_Fast_GET_SIZE(reqs);
    PyObject **ritems = PySequence_Fast_ITEMS(reqs);
    p->nreq = nreq;
    p->nev = 0;
    p->plen = p->olen = p->buf = NULL;
    p->seqs = NULL;
    p->events = NULL;
    p->views = NULL;
    int64_t *start = NULL;
    if (nreq > INT32_MAX - 2) { /* a node's lock counts the requests running */
        PyErr_SetString(PyExc_ValueError, "the radix replay takes fewer than 2**31 - 2 requests");
        goto fail;
    }
    start = malloc(((size_t)nreq + 1) * sizeof(int64_t));
    p->plen = malloc(((size_t)nreq + 1) * sizeof(int64_t));
    p->olen = malloc(((size_t)nreq + 1) * sizeof(int64_t));
    p->seqs = calloc((size_t)nreq + 1, sizeof(int64_t *));
    p->views = calloc((size_t)nreq + 1, sizeof(Py_buffer)); /* obj NULL: none held */
    if (!start || !p->plen || !p->olen || !p->seqs || !p->views) {
        PyErr_NoMemory();
        goto fail;
    }
    /* the lengths first; the prompts held as int64 buffers are read in place (held while p lives), the
     * others copied, with the outputs' tokens that are inserted, into one buffer */
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < nreq; i++) {
        PyObject *tok = PyObject_GetAttr(ritems[i], s_tokens);
        if (!tok) goto fail;
        PyObject *out = PyObject_GetAttr(ritems[i], s_output);
        if (!out) { Py_DECREF(tok); goto fail; }
        int64_t pl = seq_len(tok), o = seq_len(out);
        Py_DECREF(out);
        if (pl < 0 || o < 0) { Py_DECREF(tok); goto fail; }
        p->plen[i] = pl;
        p->olen[i] = o;
        if (o <= 1 && PyObject_CheckBuffer(tok)) {
            Py_buffer *v = &p->views[i];
            if (PyObject_GetBuffer(tok, v, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) == 0) {
                if (v->itemsize == 8 && v->format != NULL && (strcmp(v->format, "q") == 0 || strcmp(v->format, "l") == 0) &&
                    v->len / 8 == pl) {
                    p->seqs[i] = v->buf;
                } else {
                    PyBuffer_Release(v);
                    v->obj = NULL;
                }
            } else {
                PyErr_Clear();
                v->obj = NULL;
            }
        }
        Py_DECREF(tok);
        if (p->seqs[i] == NULL) {
            start[i] = total;
            total += pl + (o > 1 ? o - 1 : 0);
        }
    }
    p->buf = malloc((size_t)(total > 0 ? total : 1) * sizeof(int64_t));
    if (!p->buf) { PyErr_NoMemory(); goto fail; }
    for (Py_ssize_t i = 0; i < nreq; i++) {
        if (p->seqs[i] != NULL) continue;
        p->seqs[i] = p->buf + start[i];
        PyObject *tok = PyObject_GetAttr(ritems[i], s_tokens);
        if (!tok) goto fail;
        int rc = copy_ints(tok, p->plen[i], p->buf + start[i]);
        Py_DECREF(tok);
        if (rc < 0) goto fail;
        if (p->olen[i] > 1) {
            PyObject *out = PyObject_GetAttr(ritems[i], s_output);
            if (!out) goto fail;
            rc = copy_ints(out, p->olen[i] - 1, p->buf + start[i] + p->plen[i]);
            Py_DECREF(out);
            if (rc < 0) goto fail;
        }
    }
    /* the events */
    Py_ssize_t nev = PyList_GET_SIZE(order);
    p->events = malloc(((size_t)nev + 1) * sizeof(Event));
    if (!p->events) { PyErr_NoMemory(); goto fail; }
    for (Py_ssize_t e = 0; e < nev; e++) {
        PyObject *ev = PyList_GET_ITEM(order, e);
        if (!PyTuple_Check(ev) || PyTuple_GET_SIZE(ev) != 4) {
            PyErr_SetString(PyExc_ValueError, "an event is a (time, phase, index, what) tuple");
            goto fail;
        }
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(ev, 2));
        long what = PyLong_AsLong(PyTuple_GET_ITEM(ev, 3));
        if (PyErr_Occurred()) goto fail;
        if (i < 0 || i >= nreq) {
            PyErr_SetString(PyExc_IndexError, "an event's request index is out of range");
            goto fail;
        }
        Event *x = &p->events[e];
        x->seq = p->seqs[i];
        x->plen = p->plen[i];
        x->decode = p->olen[i] > 1 ? p->olen[i] - 1 : 0;
        x->iw = (int64_t)i * 2 + (what != 0);
    }
    p->nev = nev;
    free(start);
    Py_DECREF(reqs);
    return p;
fail:
    free(start);
    Py_DECREF(reqs);
    Py_DECREF(p);
    return NULL;
}

static PyObject *prepare(PyObject *self, PyObject *args) {
    PyObject *requests, *order;
    if (!PyArg_ParseTuple(args, "OO!", &requests, &PyList_Type, &order)) return NULL;
    return (PyObject *)do_prepare(requests, order);
}

/* ---------- the replay ---------- */

static PyObject *run(Prepared *p, long long capacity, long long page) {
    if (page < 1) {
        PyErr_SetString(PyExc_ValueError, "page must be at least 1");
        return NULL;
    }
    Py_ssize_t nreq = p->nreq;
    const Event *events = p->events;
    int64_t *served = calloc((size_t)nreq + 1, sizeof(int64_t));
    int64_t *state_len = calloc((size_t)nreq + 1, sizeof(int64_t));
    int32_t *state_node = malloc(((size_t)nreq + 1) * sizeof(int32_t));
    Tree t;
    memset(&t, 0, sizeof t);
    PyObject *result = NULL;
    if (!served || !state_len || !state_node) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nreq; i++) state_node[i] = -1;
    t.page = page;
    t.cap = capacity < 0 ? -1 : capacity - capacity % page;
    t.table = malloc(1024 * sizeof(Slot));
    if (!t.table) { PyErr_NoMemory(); goto done; }
    for (int i = 0; i < 1024; i++) t.table[i].child = -1;
    t.tmask = 1023;
    t.root = new_node(&t, tick(&t));
    if (t.root < 0) goto done;
    t.nodes[t.root].lock = 1;

    Py_ssize_t nev = p->nev;
    for (Py_ssize_t e = 0; e < nev; e++) {
        /* the prompt of an event four on, on its way while these run (its first read would wait) */
        if (e + 4 < nev) PREFETCH(events[e + 4].seq);
        const Event *ev = &events[e];
        Py_ssize_t i = (Py_ssize_t)(ev->iw >> 1);
        int what = (int)(ev->iw & 1);
        const int64_t *seq = ev->seq;
        int64_t pl = ev->plen;
        if (what == 0) {
            int64_t prefix;
            int32_t last, end;
            if (match(&t, seq, pl - 1, &prefix, &last) < 0) goto done;
            served[i] = prefix;
            if (relock(&t, last, t.root, 1) < 0) goto done;
            int64_t pages = (pl + page - 1) / page - prefix / page;
            if (make_room(&t, (pl - prefix) + (page > 1 ? page : 0)) < 0) goto done;
            take(&t, pages * page);
            int64_t n = pl - pl % page;
            int64_t tm = tick(&t);
            t.nodes[t.root].time = tm;
            int64_t ins = 0;
            end = t.root;
            if (n > 0 && extend(&t, last, prefix, seq, n, tm, &ins, &end) < 0) goto done;
            if (ins > prefix) t.used -= ins - prefix;
            if (rematch(&t, end, n) < 0) goto done;
            if (relock(&t, end, last, 1) < 0) goto done;
            state_node[i] = end;
            state_len[i] = n;
        } else {
            int32_t node = state_node[i];
            if (node < 0) {
                PyErr_SetString(PyExc_ValueError, "a release before its admission");
                goto done;
            }
            state_node[i] = -1;
            int64_t owned = state_len[i];
            int64_t decode = ev->decode;
            if (decode) {
                if (page == 1) {
                    if (make_room(&t, decode) < 0) goto done;
                    take(&t, decode);
                } else {
                    for (int64_t step = 0; step < decode; step++) {
                        if (make_room(&t, page) < 0) goto done;
                        if ((pl + step) % page == 0) take(&t, page);
                    }
                }
            }
            int64_t total_len = pl + decode;
            int64_t n = total_len - total_len % page;
            int64_t tm = tick(&t);
            t.nodes[t.root].time = tm;
            int64_t ins = 0;
            int32_t end = t.root;
            if (n > 0 && extend(&t, node, owned, seq, n, tm, &ins, &end) < 0) goto done;
            int64_t pn = pl - pl % page;
            if (0 < pn && pn < n) tick(&t);
            if (ins > owned) t.used -= ins - owned;
            if (rematch(&t, end, n) < 0) goto done;
            int64_t held = (total_len + page - 1) / page;
            t.used -= held * page - n;
            if (relock(&t, end, node, 0) < 0) goto done;
            if (relock(&t, node, t.root, -1) < 0) goto done;
        }
    }
    {
        PyObject *list = PyList_New(nreq);
        if (!list) goto done;
        for (Py_ssize_t i = 0; i < nreq; i++) {
            PyObject *x = PyLong_FromLongLong(served[i]);
            if (!x) { Py_DECREF(list); goto done; }
            PyList_SET_ITEM(list, i, x);
        }
        result = Py_BuildValue("(NOLL)", list, t.evicted ? Py_True : Py_False, (long long)t.over, (long long)t.peak);
    }
done:
    free(served);
    free(state_len);
    free(state_node);
    free(t.nodes);
    free(t.free);
    free(t.table);
    free(t.heap);
    free(t.ring);
    return result;
}

static PyObject *replay(PyObject *self, PyObject *args) {
    PyObject *prepared;
    long long capacity, page;
    if (!PyArg_ParseTuple(args, "O!LL", &PreparedType, &prepared, &capacity, &page)) return NULL;
    return run((Prepared *)prepared, capacity, page);
}

static PyObject *radix(PyObject *self, PyObject *args) {
    PyObject *requests, *order;
    long long capacity, page;
    if (!PyArg_ParseTuple(args, "OO!LL", &requests, &PyList_Type, &order, &capacity, &page)) return NULL;
    if (page < 1) {
        PyErr_SetString(PyExc_ValueError, "page must be at least 1");
        return NULL;
    }
    Prepared *p = do_prepare(requests, order);
    if (!p) return NULL;
    PyObject *got = run(p, capacity, page);
    Py_DECREF(p);
    return got;
}

/* ---------- the estimate's tokens (inputs/traffic/tokens.py) ----------
 * The pieces _PIECES.findall gives, with the classes re gives a str pattern (\s Py_UNICODE_ISSPACE, \d
 * Py_UNICODE_ISDECIMAL, \w Py_UNICODE_ISALNUM or '_'), in the pattern's order of alternatives:
 *   <\|[^|<>\s]{1,40}\|>  |  \s?[^\W\d_]+  |  \s?\d{1,3}  |  \s?[^\w\s]+  |  \s+
 * each looked up in ids (piece -> id); None where one is not there (the Python code then runs). */

static int is_space(Py_UCS4 c) { return Py_UNICODE_ISSPACE(c); }
static int is_digit(Py_UCS4 c) { return Py_UNICODE_ISDECIMAL(c); }
static int is_word(Py_UCS4 c) { return Py_UNICODE_ISALNUM(c) || c == '_'; }
static int is_letter(Py_UCS4 c) { return is_word(c) && !is_digit(c) && c != '_'; }
static int is_punct(Py_UCS4 c) { return !is_word(c) && !is_space(c); }

/* the end of the match at pos, or -1 where none of the alternatives matches there */
static Py_ssize_t piece_end(int kind, const void *data, Py_ssize_t n, Py_ssize_t pos) {
    Py_UCS4 c = PyUnicode_READ(kind, data, pos);
    if (c == '<' && pos + 1 < n && PyUnicode_READ(kind, data, pos + 1) == '|') {
        Py_ssize_t i = pos + 2;
        while (i < n && i - (pos + 2) <= 40) {
            Py_UCS4 x = PyUnicode_READ(kind, data, i);
            if (x == '|' || x == '<' || x == '>' || is_space(x)) break;
            i++;
        }
        Py_ssize_t run = i - (pos + 2);
        if (run >= 1 && run <= 40 && i + 1 < n && PyUnicode_READ(kind, data, i) == '|' &&
            PyUnicode_READ(kind, data, i + 1) == '>')
            return i + 2;
    }
    Py_ssize_t at = pos; /* where the class starts: after the optional space */
    Py_UCS4 first = c;
    if (is_space(c) && pos + 1 < n) {
        Py_UCS4 next = PyUnicode_READ(kind, data, pos + 1);
        if (is_letter(next) || is_digit(next) || is_punct(next)) {
            at = pos + 1;
            first = next;
        }
    }
    Py_ssize_t i = at;
    if (is_letter(first)) {
        while (i < n && is_letter(PyUnicode_READ(kind, data, i))) i++;
        return i;
    }
    if (is_digit(first)) {
        while (i < n && i - at < 3 && is_digit(PyUnicode_READ(kind, data, i))) i++;
        return i;
    }
    if (is_punct(first)) {
        while (i < n && is_punct(PyUnicode_READ(kind, data, i))) i++;
        return i;
    }
    if (is_space(c)) {
        i = pos;
        while (i < n && is_space(PyUnicode_READ(kind, data, i))) i++;
        return i;
    }
    return -1;
}

static PyObject *estimate(PyObject *self, PyObject *args) {
    PyObject *text, *ids;
    if (!PyArg_ParseTuple(args, "UO!", &text, &PyDict_Type, &ids)) return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    int64_t *out = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t)); /* at most a piece a character */
    if (!out) return PyErr_NoMemory();
    Py_ssize_t k = 0, pos = 0;
    while (pos < n) {
        Py_ssize_t end = piece_end(kind, data, n, pos);
        if (end < 0) {
            pos++;
            continue;
        }
        PyObject *piece = PyUnicode_Substring(text, pos, end);
        if (!piece) { free(out); return NULL; }
        PyObject *id = PyDict_GetItemWithError(ids, piece);
        Py_DECREF(piece);
        if (!id) {
            free(out);
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NONE;
        }
        long long v = PyLong_AsLongLong(id);
        if (v == -1 && PyErr_Occurred()) { free(out); return NULL; }
        out[k++] = (int64_t)v;
        pos = end;
    }
    PyObject *got = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)(k * (Py_ssize_t)sizeof(int64_t)));
    free(out);
    return got;
}

static PyMethodDef methods[] = {
    {"radix", radix, METH_VARARGS, "radix(requests, order, capacity, page) -> (served, evicted, over, peak)"},
    {"prepare", prepare, METH_VARARGS, "prepare(requests, order) -> Prepared: the input of replay, read once"},
    {"replay", replay, METH_VARARGS, "replay(prepared, capacity, page) -> (served, evicted, over, peak)"},
    {"estimate", estimate, METH_VARARGS, "estimate(text, ids) -> the ids of its pieces as int64 bytes, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_prefixreplay", "The compiled radix prefix replay.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__prefixreplay(void) {
    if (PyType_Ready(&PreparedType) < 0) return NULL;
    if (!s_tokens && !(s_tokens = PyUnicode_InternFromString("tokens"))) return NULL;
    if (!s_output && !(s_output = PyUnicode_InternFromString("output"))) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Prepared", (PyObject *)&PreparedType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
