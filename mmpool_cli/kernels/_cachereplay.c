/* Compiled twins of three cache replays, for the sizes where one stack-distance pass is not exact:
 *
 * - lru(...): a byte-counted LRU driven a batch (request) at a time: the batch's entries found are
 *   pinned (moved to the recent end) before any is looked up; each lookup then hits or stores its
 *   entry if it fits (an entry larger than the cache is never stored and evicts nothing). Without
 *   payloads, a batch whose own stores evicted an entry it found is aborted; with a mirror, a second
 *   LRU follows the first and reports the entries it lacks, which the first then drops.
 * - ring(...): a ring buffer of objects freed oldest first, each batch holding what it touches.
 * - refcounted(...): a token-counted cache of shared entries referenced by a window of batches in
 *   flight, freed lazily oldest first, batches admitted in steps of a compute budget.
 *
 * And two one-pass helpers: batches(...), the input of the stack-distance curve of such batches
 * (caches/lru.py), and window_peak(...), the most distinct tokens in a window of batches.
 *
 * Keys are dense ids in [0, nkeys); a batch is keys[starts[b] .. starts[b + 1]). The Python replays
 * (engines/vllm/processor_replay.py, encoder_replay.py) are the reference; tests keep them equal.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------- common: the int64 buffers and their checks ---------- */

typedef struct {
    Py_buffer kb, sb, wb, bb;
    const int64_t *keys, *starts, *sizes, *work;
    int64_t n, nreq, nkeys;
} Input;

static void input_release(Input *in) {
    if (in->kb.obj) PyBuffer_Release(&in->kb);
    if (in->sb.obj) PyBuffer_Release(&in->sb);
    if (in->wb.obj) PyBuffer_Release(&in->wb);
    if (in->bb.obj) PyBuffer_Release(&in->bb);
}

/* keys, starts (nreq + 1), sizes per key, work per key (may be NULL) */
static int input_check(Input *in, int with_work) {
    in->keys = in->kb.buf; in->starts = in->bb.buf; in->sizes = in->sb.buf;
    in->work = with_work ? in->wb.buf : NULL;
    in->n = in->kb.len / 8; in->nreq = in->bb.len / 8 - 1; in->nkeys = in->sb.len / 8;
    if (in->kb.len % 8 || in->bb.len % 8 || in->sb.len % 8 || in->nreq < 0 ||
        (with_work && in->wb.len != in->sb.len) || in->n >= INT32_MAX || in->nkeys >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "keys, starts, sizes and work: int64 buffers of matching lengths");
        return -1;
    }
    if (in->starts[0] != 0 || in->starts[in->nreq] != in->n) {
        PyErr_SetString(PyExc_ValueError, "starts must run from 0 to the number of keys");
        return -1;
    }
    for (int64_t r = 0; r < in->nreq; r++)
        if (in->starts[r + 1] < in->starts[r]) {
            PyErr_SetString(PyExc_ValueError, "starts must not decrease");
            return -1;
        }
    for (int64_t i = 0; i < in->n; i++)
        if (in->keys[i] < 0 || in->keys[i] >= in->nkeys) {
            PyErr_SetString(PyExc_ValueError, "a key outside 0..nkeys-1");
            return -1;
        }
    for (int64_t k = 0; k < in->nkeys; k++)
        if (in->sizes[k] < 0) {
            PyErr_SetString(PyExc_ValueError, "a negative size");
            return -1;
        }
    return 0;
}

static PyObject *int_list(const int64_t *xs, int64_t n) {
    PyObject *out = PyList_New((Py_ssize_t)n);
    if (!out) return NULL;
    for (int64_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(xs[i]);
        if (!x) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, (Py_ssize_t)i, x);
    }
    return out;
}

/* ---------- the byte-counted LRU (cachetools' LRUCache as vLLM counts it) ---------- */

typedef struct {
    int32_t *prev, *next; /* node nkeys is the sentinel: next[nkeys] the least recently used */
    int8_t *in;
    int64_t used, cap, nkeys;
    const int64_t *size;
} Lru;

static int lru_init(Lru *c, int64_t nkeys, int64_t cap, const int64_t *size) {
    c->prev = malloc((size_t)(nkeys + 1) * sizeof(int32_t));
    c->next = malloc((size_t)(nkeys + 1) * sizeof(int32_t));
    c->in = calloc((size_t)(nkeys + 1), 1);
    if (!c->prev || !c->next || !c->in) return -1;
    c->prev[nkeys] = c->next[nkeys] = (int32_t)nkeys;
    c->used = 0; c->cap = cap; c->nkeys = nkeys; c->size = size;
    return 0;
}

static void lru_free(Lru *c) { free(c->prev); free(c->next); free(c->in); }

static void lru_unlink(Lru *c, int32_t k) {
    c->next[c->prev[k]] = c->next[k];
    c->prev[c->next[k]] = c->prev[k];
}

static void lru_append(Lru *c, int32_t k) { /* at the most recent end */
    int32_t s = (int32_t)c->nkeys;
    c->prev[k] = c->prev[s]; c->next[k] = s;
    c->next[c->prev[s]] = k; c->prev[s] = k;
}

static int lru_get(Lru *c, int32_t k) { /* get and touch: move to the recent end if present */
    if (!c->in[k]) return 0;
    lru_unlink(c, k); lru_append(c, k);
    return 1;
}

static void lru_pop(Lru *c, int32_t k) {
    if (!c->in[k]) return;
    lru_unlink(c, k); c->in[k] = 0; c->used -= c->size[k];
}

static void lru_put_if_fits(Lru *c, int32_t k) {
    int64_t s = c->size[k];
    if (s > c->cap) return; /* too large: nothing evicted */
    while (c->used + s > c->cap) lru_pop(c, c->next[c->nkeys]);
    lru_append(c, k); c->in[k] = 1; c->used += s;
}

/* lru(keys, starts, sizes, work, capacity, first, step, payloads, mirror)
 *   -> (hits, lookups, saved, [(batch, where, (missing keys...)), ...]); where 0: the first LRU aborted
 *   the batch, 1: the mirror lacked the keys. Only batches first, first + step, ... are replayed. */
static PyObject *lru(PyObject *self, PyObject *args) {
    Input in;
    memset(&in, 0, sizeof in);
    long long capacity, first, step;
    int payloads, mirror;
    if (!PyArg_ParseTuple(args, "y*y*y*y*LLLpp", &in.kb, &in.bb, &in.sb, &in.wb, &capacity, &first, &step, &payloads,
                          &mirror))
        return NULL;
    PyObject *result = NULL, *failed = NULL;
    Lru s, r;
    memset(&s, 0, sizeof s); memset(&r, 0, sizeof r);
    int8_t *was = NULL, *bare = NULL;
    int32_t *missing = NULL;
    if (input_check(&in, 1)) goto done;
    if (step < 1 || first < 0 || capacity < 0) { PyErr_SetString(PyExc_ValueError, "a bad first, step or capacity"); goto done; }
    int64_t most = 1;
    for (int64_t b = 0; b < in.nreq; b++) if (in.starts[b + 1] - in.starts[b] > most) most = in.starts[b + 1] - in.starts[b];
    was = malloc((size_t)most); bare = malloc((size_t)most); missing = malloc((size_t)most * sizeof(int32_t));
    failed = PyList_New(0);
    if (!was || !bare || !missing || !failed || lru_init(&s, in.nkeys, capacity, in.sizes) ||
        (mirror && lru_init(&r, in.nkeys, capacity, in.sizes))) { PyErr_NoMemory(); goto done; }
    int64_t hits = 0, lookups = 0, saved = 0;
    for (int64_t b = first; b < in.nreq; b += step) {
        const int64_t *ks = in.keys + in.starts[b];
        int64_t len = in.starts[b + 1] - in.starts[b], i;
        int aborted = 0;
        for (i = 0; i < len; i++) was[i] = s.in[ks[i]];
        for (i = 0; i < len; i++) lru_get(&s, (int32_t)ks[i]); /* the touches */
        for (i = 0; i < len; i++) {
            int32_t k = (int32_t)ks[i];
            lookups++;
            if (lru_get(&s, k)) { hits++; saved += in.work[k]; bare[i] = 1; continue; }
            if (was[i] && !payloads) { aborted = 1; break; }
            lru_put_if_fits(&s, k);
            bare[i] = 0;
        }
        if (aborted) {
            PyObject *row = Py_BuildValue("(Li())", (long long)b, 0);
            if (!row || PyList_Append(failed, row)) { Py_XDECREF(row); goto done; }
            Py_DECREF(row);
            continue;
        }
        if (!mirror) continue;
        int64_t nm = 0;
        for (i = 0; i < len; i++) lru_get(&r, (int32_t)ks[i]);
        for (i = 0; i < len; i++) {
            int32_t k = (int32_t)ks[i];
            if (!bare[i]) { lru_pop(&r, k); lru_put_if_fits(&r, k); }
            else if (!lru_get(&r, k)) missing[nm++] = k;
        }
        if (nm) {
            PyObject *keys = PyTuple_New((Py_ssize_t)nm);
            if (!keys) goto done;
            for (int64_t j = 0; j < nm; j++) {
                PyObject *x = PyLong_FromLong(missing[j]);
                if (!x) { Py_DECREF(keys); goto done; }
                PyTuple_SET_ITEM(keys, (Py_ssize_t)j, x);
                lru_pop(&s, missing[j]);
            }
            PyObject *row = Py_BuildValue("(LiN)", (long long)b, 1, keys);
            if (!row || PyList_Append(failed, row)) { Py_XDECREF(row); goto done; }
            Py_DECREF(row);
        }
    }
    result = Py_BuildValue("(LLLO)", (long long)hits, (long long)lookups, (long long)saved, failed);
done:
    Py_XDECREF(failed);
    free(was); free(bare); free(missing);
    lru_free(&s);
    if (mirror) lru_free(&r);
    input_release(&in);
    return result;
}

/* ---------- the ring (SingleWriterShmRingBuffer and SingleWriterShmObjectStorage) ---------- */

#define RING_CHUNK_HEADER 8

/* ring(keys, starts, sizes, work, capacity, max_object) -> (hits, lookups, saved)
 * The live objects are a queue in id order (their ids are consecutive, oldest first). */
static PyObject *ring(PyObject *self, PyObject *args) {
    Input in;
    memset(&in, 0, sizeof in);
    long long size, max_object;
    if (!PyArg_ParseTuple(args, "y*y*y*y*LL", &in.kb, &in.bb, &in.sb, &in.wb, &size, &max_object)) return NULL;
    PyObject *result = NULL;
    int64_t *obj = NULL, *addr = NULL, *chunk = NULL, *held = NULL;
    int32_t *okey = NULL;
    if (input_check(&in, 1)) goto done;
    if (size < 1) { PyErr_SetString(PyExc_ValueError, "a ring of no bytes"); goto done; }
    /* at most one live object a key (a key is stored only when absent), so nkeys slots suffice */
    int64_t q = in.nkeys + 1;
    obj = malloc((size_t)q * sizeof(int64_t));
    addr = malloc((size_t)q * sizeof(int64_t)); chunk = malloc((size_t)q * sizeof(int64_t));
    held = calloc((size_t)q, sizeof(int64_t)); okey = malloc((size_t)q * sizeof(int32_t));
    if (!obj || !addr || !chunk || !held || !okey) { PyErr_NoMemory(); goto done; }
    for (int64_t k = 0; k < q; k++) obj[k] = -1; /* key -> its object's id (ids grow; slot id % q) */
    int64_t start = 0, end = 0, id_start = 0, id_end = 0, hits = 0, lookups = 0, saved = 0;
    for (int64_t b = 0; b < in.nreq; b++) {
        const int64_t *ks = in.keys + in.starts[b];
        int64_t len = in.starts[b + 1] - in.starts[b], stamp = b + 1;
        for (int64_t i = 0; i < len; i++) if (obj[ks[i]] >= 0) held[obj[ks[i]] % q] = stamp; /* touched */
        for (int64_t i = 0; i < len; i++) {
            int64_t k = ks[i];
            lookups++;
            if (obj[k] >= 0) { hits++; saved += in.work[k]; held[obj[k] % q] = stamp; continue; }
            int64_t object_bytes = in.sizes[k];
            if (object_bytes > max_object) continue;
            int64_t c = object_bytes + RING_CHUNK_HEADER, ident = -1;
            for (int attempt = 0; attempt < 2 && ident < 0; attempt++) {
                if (attempt) { /* free_unused: the oldest objects not held, at most 2 max_object bytes */
                    int64_t freed = 0;
                    while (id_start < id_end && freed < 2 * max_object) {
                        int64_t slot = id_start % q;
                        if (held[slot] == stamp) break;
                        freed += chunk[slot];
                        obj[okey[slot]] = -1;
                        id_start++;
                        if (id_start < id_end) start += ((addr[id_start % q] - start) % size + size) % size;
                        else start = end = 0;
                    }
                    if (start >= size) { start -= size; end -= size; }
                }
                int64_t reset = end % size;
                reset = reset + c > size ? (end / size + 1) * size : end;
                if (reset + c - start > size) continue;
                end = reset;
                ident = id_end++;
                addr[ident % q] = end; chunk[ident % q] = c;
                end += c;
            }
            if (ident < 0) continue;
            obj[k] = ident; okey[ident % q] = (int32_t)k; held[ident % q] = stamp;
        }
    }
    result = Py_BuildValue("(LLL)", (long long)hits, (long long)lookups, (long long)saved);
done:
    free(obj); free(addr); free(chunk); free(held); free(okey);
    input_release(&in);
    return result;
}

/* ---------- the reference-counted token cache (EncoderCacheManager) ---------- */

typedef struct {
    int64_t size, free_slots, freeable_slots;
    const int64_t *tokens;
    int64_t nkeys;
    int8_t *cached, *evicted;
    int32_t *refs;            /* batches in flight referencing each entry */
    int32_t *fprev, *fnext;   /* the unreferenced entries, oldest first (sentinel nkeys) */
    int8_t *infree;
    int32_t *freed; int64_t nfreed; /* evicted in this step */
} Mgr;

static void fl_append(Mgr *m, int32_t k) {
    int32_t s = (int32_t)m->nkeys;
    m->fprev[k] = m->fprev[s]; m->fnext[k] = s; m->fnext[m->fprev[s]] = k; m->fprev[s] = k; m->infree[k] = 1;
}

static void fl_unlink(Mgr *m, int32_t k) {
    m->fnext[m->fprev[k]] = m->fnext[k]; m->fprev[m->fnext[k]] = m->fprev[k]; m->infree[k] = 0;
}

/* a batch in flight: which of its inputs it holds (0 none, 1 held) */
typedef struct { int64_t b; int8_t *held; } Flight;

static void mgr_free(Mgr *m, const Input *in, Flight *f, int32_t *last) {
    const int64_t *ks = in->keys + in->starts[f->b];
    int64_t len = in->starts[f->b + 1] - in->starts[f->b];
    /* free walks the inputs in increasing id; an entry is released with the batch's last input of it */
    for (int64_t i = 0; i < len; i++) if (f->held[i]) last[ks[i]] = (int32_t)i;
    for (int64_t i = 0; i < len; i++) {
        if (!f->held[i]) continue;
        int32_t k = (int32_t)ks[i];
        if (last[k] != i) continue;
        if (!m->cached[k] || m->refs[k] <= 0) continue;
        if (--m->refs[k] == 0) { fl_append(m, k); m->freeable_slots += m->tokens[k]; }
    }
    free(f->held); f->held = NULL;
}

/* refcounted(keys, starts, tokens, size, window)
 *   -> (hits, saved, recomputed, [waited batches], [refused batches], [occupancy after each batch]) */
static PyObject *refcounted(PyObject *self, PyObject *args) {
    Input in;
    memset(&in, 0, sizeof in);
    long long size, window;
    if (!PyArg_ParseTuple(args, "y*y*y*LL", &in.kb, &in.bb, &in.sb, &size, &window)) return NULL;
    PyObject *result = NULL;
    Mgr m;
    memset(&m, 0, sizeof m);
    Flight *fl = NULL;
    int64_t nfl = 0, flo = 0, cap = 0; /* the flights in a circular queue fl[flo .. flo + nfl) */
    int32_t *last = NULL, *seen = NULL, *alloc = NULL, *dup = NULL;
    int64_t *mine = NULL; /* per entry: the last batch that referenced it (a batch references only while admitted) */
    int64_t *waited = NULL, *refused = NULL, *occ = NULL, nwait = 0, nref = 0;
    if (input_check(&in, 0)) goto done;
    if (window < 1 || size < 0) { PyErr_SetString(PyExc_ValueError, "a bad window or size"); goto done; }
    int64_t K = in.nkeys, most = 1;
    for (int64_t b = 0; b < in.nreq; b++) if (in.starts[b + 1] - in.starts[b] > most) most = in.starts[b + 1] - in.starts[b];
    m.size = m.free_slots = m.freeable_slots = size; m.tokens = in.sizes; m.nkeys = K;
    m.cached = calloc((size_t)K + 1, 1); m.evicted = calloc((size_t)K + 1, 1); m.infree = calloc((size_t)K + 1, 1);
    m.refs = calloc((size_t)K + 1, sizeof(int32_t));
    m.fprev = malloc((size_t)(K + 1) * sizeof(int32_t)); m.fnext = malloc((size_t)(K + 1) * sizeof(int32_t));
    m.freed = malloc((size_t)(K + 1) * sizeof(int32_t));
    mine = malloc((size_t)(K + 1) * sizeof(int64_t));
    last = malloc((size_t)(K + 1) * sizeof(int32_t)); seen = malloc((size_t)(K + 1) * sizeof(int32_t));
    alloc = malloc((size_t)most * sizeof(int32_t)); dup = malloc((size_t)most * sizeof(int32_t));
    cap = (window < in.nreq ? window : in.nreq) + 1; /* at most one flight a batch, whatever the window */
    fl = calloc((size_t)cap, sizeof(Flight));
    waited = malloc((size_t)(in.nreq + 1) * sizeof(int64_t)); refused = malloc((size_t)(in.nreq + 1) * sizeof(int64_t));
    occ = malloc((size_t)(in.nreq + 1) * sizeof(int64_t));
    if (!m.cached || !m.evicted || !m.infree || !m.refs || !m.fprev || !m.fnext || !m.freed || !mine || !last || !seen || !alloc ||
        !dup || !fl || !waited || !refused || !occ) { PyErr_NoMemory(); goto done; }
    m.fprev[K] = m.fnext[K] = (int32_t)K;
    for (int64_t k = 0; k <= K; k++) { seen[k] = -1; mine[k] = -1; }
    int64_t hits = 0, saved = 0, recomputed = 0, stepno = 0;
    for (int64_t b = 0; b < in.nreq; b++) {
        const int64_t *ks = in.keys + in.starts[b];
        int64_t len = in.starts[b + 1] - in.starts[b];
        if (nfl >= window) { mgr_free(&m, &in, &fl[flo], last); flo = (flo + 1) % cap; nfl--; }
        Flight *me = &fl[(flo + nfl) % cap];
        me->b = b; me->held = calloc((size_t)(len ? len : 1), 1);
        if (!me->held) { PyErr_NoMemory(); goto done; }
        int64_t start = 0;
        for (;;) {
            int64_t compute = size, scheduled = 0, failed = -1, na = 0, nd = 0;
            stepno++;
            m.nfreed = 0;
            for (int64_t i = start; i < len; i++) {
                int32_t k = (int32_t)ks[i];
                if (seen[k] == stepno) { dup[nd++] = (int32_t)i; continue; }
                if (m.cached[k]) { /* check_and_update_cache */
                    if (m.refs[k] == 0) { fl_unlink(&m, k); m.freeable_slots -= m.tokens[k]; }
                    if (mine[k] != b) { m.refs[k]++; mine[k] = b; } /* the batch's first reference to it */
                    me->held[i] = 1;
                    hits++; saved += m.tokens[k];
                    continue;
                }
                int64_t n = m.tokens[k];
                int ok = n <= compute; /* can_allocate */
                if (ok) {
                    int64_t need = n + scheduled;
                    if (need > m.free_slots) {
                        if (need > m.freeable_slots) ok = 0;
                        else
                            while (need > m.free_slots) {
                                int32_t old = m.fnext[K];
                                fl_unlink(&m, old);
                                m.cached[old] = 0;
                                m.freed[m.nfreed++] = old;
                                m.free_slots += m.tokens[old];
                            }
                    }
                }
                if (!ok) { failed = i; break; }
                scheduled += n; compute -= n;
                seen[k] = (int32_t)stepno;
                alloc[na++] = (int32_t)i;
            }
            for (int64_t a = 0; a < na; a++) { /* allocate */
                int64_t i = alloc[a];
                int32_t k = (int32_t)ks[i];
                if (!m.cached[k]) { m.cached[k] = 1; m.refs[k] = 0; }
                if (mine[k] != b) { m.refs[k]++; mine[k] = b; }
                me->held[i] = 1;
                m.free_slots -= m.tokens[k]; m.freeable_slots -= m.tokens[k];
                if (m.evicted[k]) recomputed += m.tokens[k];
            }
            for (int64_t d = 0; d < nd; d++) { /* the step's repeats: shared with the entry just made */
                int64_t i = dup[d];
                int32_t k = (int32_t)ks[i];
                if (m.cached[k]) {
                    if (m.refs[k] == 0) { fl_unlink(&m, k); m.freeable_slots -= m.tokens[k]; }
                    if (mine[k] != b) { m.refs[k]++; mine[k] = b; }
                    me->held[i] = 1;
                }
                hits++; saved += m.tokens[k];
            }
            for (int64_t f = 0; f < m.nfreed; f++) if (!m.cached[m.freed[f]]) m.evicted[m.freed[f]] = 1;
            if (failed < 0) break;
            if (failed > start) { start = failed; continue; }
            if (nfl == 0) { refused[nref++] = b; break; }
            if (!nwait || waited[nwait - 1] != b) waited[nwait++] = b;
            mgr_free(&m, &in, &fl[flo], last); flo = (flo + 1) % cap; nfl--;
            me = &fl[(flo + nfl) % cap];
            /* the queue moved under us only at its head; ours is still at the tail slot it had */
        }
        nfl++;
        occ[b] = m.size - m.free_slots;
    }
    {
        PyObject *w = int_list(waited, nwait), *r = int_list(refused, nref), *o = int_list(occ, in.nreq);
        if (w && r && o) result = Py_BuildValue("(LLLNNN)", (long long)hits, (long long)saved, (long long)recomputed, w, r, o);
        else { Py_XDECREF(w); Py_XDECREF(r); Py_XDECREF(o); }
    }
done:
    if (fl) for (int64_t i = 0; i < cap; i++) free(fl[i].held);
    free(fl);
    free(m.cached); free(m.evicted); free(m.infree); free(m.refs); free(m.fprev); free(m.fnext); free(m.freed);
    free(mine); free(last); free(seen); free(alloc); free(dup); free(waited); free(refused); free(occ);
    input_release(&in);
    return result;
}


/* ---------- the one-pass curve's input for batches (cache_lru.batch_curve's twin) ---------- */

static PyObject *bytes_of(const void *p, int64_t n) { return PyBytes_FromStringAndSize(p, (Py_ssize_t)(n * 8)); }

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_pair(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

#define SPAN_INF ((int64_t)1 << 62)

/* batches(keys, starts, sizes, work, caches)
 *   -> ([(keys, sizes, work, groups) per cache], repeat sizes, repeat work, spans): int64 bytes. Per
 *   cache, each batch's distinct keys by their last lookup (renumbered densely per cache); the
 *   repeats of a key within a batch, sorted by (size, work); the sizes where a batch's distinct
 *   entries that fit outweigh the cache, merged into sorted disjoint (lo, hi) pairs. */
static PyObject *batches(PyObject *self, PyObject *args) {
    Input in;
    memset(&in, 0, sizeof in);
    long long caches;
    if (!PyArg_ParseTuple(args, "y*y*y*y*L", &in.kb, &in.bb, &in.sb, &in.wb, &caches)) return NULL;
    PyObject *result = NULL, *per = NULL;
    int64_t *mark = NULL, *local = NULL, *order = NULL, *ord = NULL, *lk = NULL, *ls = NULL, *lw = NULL, *lg = NULL;
    int64_t *rep = NULL, *spans = NULL, nrep = 0, nspan = 0;
    if (input_check(&in, 1)) goto done;
    if (caches < 1) { PyErr_SetString(PyExc_ValueError, "caches must be at least 1"); goto done; }
    int64_t K = in.nkeys, most = 1;
    for (int64_t b = 0; b < in.nreq; b++) if (in.starts[b + 1] - in.starts[b] > most) most = in.starts[b + 1] - in.starts[b];
    mark = malloc((size_t)(K + 1) * sizeof(int64_t)); local = malloc((size_t)(K + 1) * sizeof(int64_t));
    order = malloc((size_t)most * sizeof(int64_t)); ord = malloc((size_t)most * sizeof(int64_t));
    lk = malloc((size_t)(in.n + 1) * sizeof(int64_t)); ls = malloc((size_t)(in.n + 1) * sizeof(int64_t));
    lw = malloc((size_t)(in.n + 1) * sizeof(int64_t)); lg = malloc((size_t)(in.n + 1) * sizeof(int64_t));
    rep = malloc((size_t)(2 * in.n + 2) * sizeof(int64_t)); spans = malloc((size_t)(2 * in.n + 2) * sizeof(int64_t));
    per = PyList_New(0);
    if (!mark || !local || !order || !ord || !lk || !ls || !lw || !lg || !rep || !spans || !per) { PyErr_NoMemory(); goto done; }
    for (int64_t k = 0; k <= K; k++) mark[k] = -1;
    for (int64_t p = 0; p < caches; p++) {
        int64_t m = 0, nlocal = 0;
        for (int64_t k = 0; k <= K; k++) local[k] = -1;
        for (int64_t b = p; b < in.nreq; b += caches) {
            const int64_t *ks = in.keys + in.starts[b];
            int64_t len = in.starts[b + 1] - in.starts[b], nd = 0;
            for (int64_t i = len - 1; i >= 0; i--) /* distinct keys, from the last lookup back */
                if (mark[ks[i]] != 2 * b) { mark[ks[i]] = 2 * b; order[nd++] = ks[i]; }
            for (int64_t j = nd - 1; j >= 0; j--) {
                int64_t k = order[j];
                if (local[k] < 0) local[k] = nlocal++;
                lk[m] = local[k]; ls[m] = in.sizes[k]; lw[m] = in.work[k]; lg[m] = b; m++;
            }
            if (nd < len) /* the repeats: every lookup of a key after its first in the batch */
                for (int64_t i = 0; i < len; i++) {
                    if (mark[ks[i]] == 2 * b + 1) { rep[2 * nrep] = in.sizes[ks[i]]; rep[2 * nrep + 1] = in.work[ks[i]]; nrep++; }
                    else mark[ks[i]] = 2 * b + 1;
                }
            if (nd > 1) {
                for (int64_t j = 0; j < nd; j++) ord[j] = in.sizes[order[j]];
                qsort(ord, (size_t)nd, sizeof(int64_t), cmp_i64);
                int64_t total = 0;
                for (int64_t j = 0; j < nd; j++) {
                    total += ord[j];
                    int64_t hi = j + 1 < nd ? ord[j + 1] : SPAN_INF;
                    if (total < hi) hi = total;
                    if (ord[j] < hi) { spans[2 * nspan] = ord[j]; spans[2 * nspan + 1] = hi; nspan++; }
                }
            }
        }
        PyObject *row = Py_BuildValue("(NNNN)", bytes_of(lk, m), bytes_of(ls, m), bytes_of(lw, m), bytes_of(lg, m));
        if (!row || PyList_Append(per, row)) { Py_XDECREF(row); goto done; }
        Py_DECREF(row);
    }
    qsort(rep, (size_t)nrep, 2 * sizeof(int64_t), cmp_pair);
    qsort(spans, (size_t)nspan, 2 * sizeof(int64_t), cmp_pair);
    int64_t nm = 0;
    for (int64_t j = 0; j < nspan; j++) {
        int64_t lo = spans[2 * j], hi = spans[2 * j + 1];
        if (nm && lo <= spans[2 * nm - 1]) { if (hi > spans[2 * nm - 1]) spans[2 * nm - 1] = hi; }
        else { spans[2 * nm] = lo; spans[2 * nm + 1] = hi; nm++; }
    }
    {
        int64_t *rs = lk, *rw = ls; /* reuse: the repeats' sizes and work apart */
        for (int64_t j = 0; j < nrep; j++) { rs[j] = rep[2 * j]; rw[j] = rep[2 * j + 1]; }
        result = Py_BuildValue("(ONNN)", per, bytes_of(rs, nrep), bytes_of(rw, nrep), bytes_of(spans, 2 * nm));
    }
done:
    Py_XDECREF(per);
    free(mark); free(local); free(order); free(ord); free(lk); free(ls); free(lw); free(lg); free(rep); free(spans);
    input_release(&in);
    return result;
}

/* window_peak(keys, starts, tokens, window) -> the most tokens of distinct keys in ``window`` batches in a row */
static PyObject *window_peak(PyObject *self, PyObject *args) {
    Input in;
    memset(&in, 0, sizeof in);
    long long window;
    if (!PyArg_ParseTuple(args, "y*y*y*L", &in.kb, &in.bb, &in.sb, &window)) return NULL;
    PyObject *result = NULL;
    int64_t *count = NULL;
    if (input_check(&in, 0)) goto done;
    if (window < 1) { PyErr_SetString(PyExc_ValueError, "a window of at least 1"); goto done; }
    count = calloc((size_t)in.nkeys + 1, sizeof(int64_t));
    if (!count) { PyErr_NoMemory(); goto done; }
    int64_t total = 0, peak = 0;
    for (int64_t b = 0; b < in.nreq; b++) {
        for (int64_t i = in.starts[b]; i < in.starts[b + 1]; i++)
            if (count[in.keys[i]]++ == 0) total += in.sizes[in.keys[i]];
        if (total > peak) peak = total;
        if (b + 1 >= window)
            for (int64_t i = in.starts[b + 1 - window]; i < in.starts[b + 2 - window]; i++)
                if (--count[in.keys[i]] == 0) total -= in.sizes[in.keys[i]];
    }
    result = PyLong_FromLongLong(peak);
done:
    free(count);
    input_release(&in);
    return result;
}

static PyMethodDef methods[] = {
    {"lru", lru, METH_VARARGS, "lru(keys, starts, sizes, work, capacity, first, step, payloads, mirror)"},
    {"ring", ring, METH_VARARGS, "ring(keys, starts, sizes, work, capacity, max_object)"},
    {"refcounted", refcounted, METH_VARARGS, "refcounted(keys, starts, tokens, size, window)"},
    {"batches", batches, METH_VARARGS, "batches(keys, starts, sizes, work, caches)"},
    {"window_peak", window_peak, METH_VARARGS, "window_peak(keys, starts, tokens, window)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cachereplay", "Cache replays, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__cachereplay(void) { return PyModule_Create(&module); }
