/* The lookups a cache behind a prefix cache makes, at one prefix capacity: the compiled twin of
 * engines/sglang/cache_lookups.py's Behind (covers, spared, at), which stays the reference; the tests
 * (tests/kernels/test_behind.py) keep the two equal.
 *
 * Items come in batches (a request's items of one modality), each item at a place in its request.
 * A request's replay served a prefix of its prompt; its first k items lie wholly inside it (their runs
 * end before it) and are never looked up. The rest of each batch is looked up: one lookup per distinct
 * key (an item the batch holds again adds a repeat to its first lookup), or, for a combined batch, one
 * lookup of every item's tokens together. Keys come out dense, in the order of their first lookup.
 *
 * lookups(bgroup, bcombined, bstart, iplace, ikey, ikeyed, itokens, rgroup, rstart, rends, gstart,
 *         distinct, served, row)
 *   batches b:  bgroup[b] its request, bcombined[b] its combined key or -1, its items bstart[b]..bstart[b+1]
 *   items i:    iplace[i] its place in its request, ikey[i] its key (ids from 0), ikeyed[i] 0 where it has
 *               no content key (never a repeat), itokens[i] its tokens
 *   replayed requests r: rgroup[r] the request, the last offsets of its items' runs rends[rstart[r]..rstart[r+1]]
 *   requests g: distinct[gstart[g] + k] the distinct keys among its first k items
 *   served: each replayed request's prefix served (a list of ints, or int64 buffer); row: bytes per token
 * -> (keys, sizes, work, groups, dups) as int64 bytes, the lookups spared, their work, their repeats,
 *    whether each key has one size
 *
 * flat(lists, field) lays lists of ints (or of tuples: their entry field) end to end, to make the columns
 * once from the Python batches.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { BGROUP, BCOMBINED, BSTART, IPLACE, IKEY, IKEYED, ITOKENS, RGROUP, RSTART, RENDS, GSTART, DISTINCT, NBUF };

static int fail(const char *what) {
    PyErr_SetString(PyExc_ValueError, what);
    return -1;
}

/* starts of n parts into m entries: n + 1 offsets from 0, rising, to m */
static int check_starts(const int64_t *s, int64_t n, int64_t m) {
    if (s[0] != 0 || s[n] != m) return -1;
    for (int64_t j = 0; j < n; j++)
        if (s[j + 1] < s[j]) return -1;
    return 0;
}

/* the count of xs[lo..hi) below v (xs rising): bisect_left */
static int64_t below(const int64_t *xs, int64_t lo, int64_t hi, int64_t v) {
    int64_t a = lo, b = hi;
    while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if (xs[mid] < v) a = mid + 1;
        else b = mid;
    }
    return a - lo;
}

/* served: an int64 buffer, else a sequence of ints; copied into out (n entries) */
static int read_served(PyObject *obj, int64_t *out, int64_t n) {
    if (PyObject_CheckBuffer(obj)) {
        Py_buffer b;
        if (PyObject_GetBuffer(obj, &b, PyBUF_FORMAT) < 0) return -1;
        int ok = b.itemsize == 8 && b.format && (strcmp(b.format, "q") == 0 || strcmp(b.format, "l") == 0) &&
                 b.len == n * 8;
        if (ok) memcpy(out, b.buf, (size_t)n * 8);
        PyBuffer_Release(&b);
        return ok ? 0 : fail("served: one int64 per replayed request");
    }
    PyObject *seq = PySequence_Fast(obj, "served: a sequence of ints");
    if (!seq) return -1;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        Py_DECREF(seq);
        return fail("served: one entry per replayed request");
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (int64_t r = 0; r < n; r++) {
        long long v = PyLong_AsLongLong(items[r]);
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        out[r] = v;
    }
    Py_DECREF(seq);
    return 0;
}

typedef struct {
    int64_t *keys, *sizes, *work, *groups, *dups;
    int64_t n, ndense, row, total_work;
    int64_t *dense, *ksize; /* a key id's dense key (-1: none yet); a dense key's bytes */
    int one_size, overflow;
} Out;

/* one lookup of key id kid, of tokens' bytes, in the batch (bytes from 2**62 on: refused, as _stackdist does) */
static void emit(Out *o, int64_t kid, int64_t tokens, int64_t batch) {
    int64_t size;
    if (__builtin_mul_overflow(tokens, o->row, &size) || size >= ((int64_t)1 << 62)) o->overflow = 1;
    if (o->dense[kid] < 0) o->dense[kid] = o->ndense, o->ksize[o->ndense++] = size;
    else if (o->ksize[o->dense[kid]] != size) o->one_size = 0;
    int64_t n = o->n++;
    o->keys[n] = o->dense[kid], o->sizes[n] = size, o->work[n] = tokens, o->groups[n] = batch, o->dups[n] = 0;
    if (__builtin_add_overflow(o->total_work, tokens, &o->total_work)) o->overflow = 1;
}

static PyObject *lookups(PyObject *self, PyObject *args) {
    Py_buffer buf[NBUF];
    memset(buf, 0, sizeof buf);
    PyObject *served_obj;
    long long row;
    PyObject *result = NULL;
    int64_t *k = NULL, *served = NULL, *seen = NULL, *pos = NULL;
    Out o = {0};
    PyObject *cols[5] = {NULL, NULL, NULL, NULL, NULL}; /* keys, sizes, work, groups, dups: filled in place */
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*y*y*OL", &buf[0], &buf[1], &buf[2], &buf[3], &buf[4], &buf[5],
                          &buf[6], &buf[7], &buf[8], &buf[9], &buf[10], &buf[11], &served_obj, &row))
        goto release;
    const int64_t *v[NBUF];
    int64_t len[NBUF];
    for (int j = 0; j < NBUF; j++) {
        if (buf[j].len % 8) { fail("every column: int64 entries"); goto release; }
        v[j] = buf[j].buf;
        len[j] = buf[j].len / 8;
    }
    int64_t nb = len[BGROUP], ni = len[IPLACE], nr = len[RGROUP], ng = len[GSTART] - 1;
    if (len[BCOMBINED] != nb || len[BSTART] != nb + 1 || len[IKEY] != ni || len[IKEYED] != ni ||
        len[ITOKENS] != ni || len[RSTART] != nr + 1 || ng < 0 || row < 0 ||
        check_starts(v[BSTART], nb, ni) || check_starts(v[RSTART], nr, len[RENDS]) ||
        check_starts(v[GSTART], ng, len[DISTINCT])) {
        fail("the batches, items, replayed requests and requests: columns of one length, starts rising to their end");
        goto release;
    }
    int64_t nkeys = 1;
    for (int64_t b = 0; b < nb; b++) {
        int64_t c = v[BCOMBINED][b];
        if (v[BGROUP][b] < 0 || v[BGROUP][b] >= ng || c < -1) { fail("a batch's request or key out of range"); goto release; }
        if (c >= nkeys) nkeys = c + 1;
    }
    for (int64_t i = 0; i < ni; i++) {
        if (v[IKEY][i] < 0 || v[ITOKENS][i] < 0) {
            fail("an item's key or tokens out of range");
            goto release;
        }
        if (v[IKEY][i] >= nkeys) nkeys = v[IKEY][i] + 1;
    }
    for (int64_t r = 0; r < nr; r++)
        if (v[RGROUP][r] < 0 || v[RGROUP][r] >= ng || v[RSTART][r] == v[RSTART][r + 1]) {
            fail("a replayed request out of range, or without items");
            goto release;
        }

    k = calloc((size_t)(ng ? ng : 1), sizeof(int64_t));
    served = malloc((size_t)(nr ? nr : 1) * sizeof(int64_t));
    if (!k || !served) { PyErr_NoMemory(); goto release; }
    if (read_served(served_obj, served, nr) < 0) goto release;

    int64_t spared = 0, total_dups = 0;
    /* covers: each request's items wholly inside its served prefix (the last replay of it wins) */
    for (int64_t r = 0; r < nr; r++) {
        int64_t lo = v[RSTART][r], hi = v[RSTART][r + 1];
        if (served[r] > v[RENDS][lo]) k[v[RGROUP][r]] = below(v[RENDS], lo, hi, served[r]);
    }
    for (int64_t g = 0; g < ng; g++) {
        if (!k[g]) continue;
        if (v[GSTART][g] + k[g] >= v[GSTART][g + 1]) { fail("a request covers more items than it holds"); goto release; }
        if (__builtin_add_overflow(spared, v[DISTINCT][v[GSTART][g] + k[g]], &spared)) {
            fail("the lookups spared out of range");
            goto release;
        }
    }

    int64_t cap = ni + nb; /* at most one lookup per item, or one per combined batch: cut to those made */
    for (int j = 0; j < 5; j++)
        if (!(cols[j] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap * 8))) goto release;
    o.keys = (int64_t *)PyBytes_AS_STRING(cols[0]), o.sizes = (int64_t *)PyBytes_AS_STRING(cols[1]);
    o.work = (int64_t *)PyBytes_AS_STRING(cols[2]), o.groups = (int64_t *)PyBytes_AS_STRING(cols[3]);
    o.dups = (int64_t *)PyBytes_AS_STRING(cols[4]);
    int made;
    Py_BEGIN_ALLOW_THREADS
    o.dense = malloc((size_t)nkeys * sizeof(int64_t)), o.ksize = malloc((size_t)nkeys * sizeof(int64_t));
    seen = malloc((size_t)nkeys * sizeof(int64_t)), pos = malloc((size_t)nkeys * sizeof(int64_t));
    o.row = row, o.one_size = 1;
    made = o.dense && o.ksize && seen && pos;
    if (made) {
        for (int64_t j = 0; j < nkeys; j++) o.dense[j] = -1, seen[j] = 0;
        int64_t batch = 0;
        for (int64_t b = 0; b < nb; b++) {
            int64_t lo = v[BSTART][b], hi = v[BSTART][b + 1];
            int64_t c = k[v[BGROUP][b]];
            if (c) {
                c = below(v[IPLACE], lo, hi, c); /* the batch's items among those covered */
                if (c == hi - lo) continue;
            }
            batch++;
            if (v[BCOMBINED][b] >= 0) { /* every item of the batch, once one is not covered */
                int64_t tokens = 0;
                for (int64_t i = lo; i < hi; i++)
                    if (__builtin_add_overflow(tokens, v[ITOKENS][i], &tokens)) o.overflow = 1;
                emit(&o, v[BCOMBINED][b], tokens, batch);
                continue;
            }
            for (int64_t i = lo + c; i < hi; i++) {
                int64_t kid = v[IKEY][i];
                if (v[IKEYED][i]) {
                    if (seen[kid] == batch) { /* looked up again only where the first lookup missed */
                        o.dups[pos[kid]]++;
                        total_dups++;
                        continue;
                    }
                    seen[kid] = batch, pos[kid] = o.n;
                }
                emit(&o, kid, v[ITOKENS][i], batch);
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (!made) { PyErr_NoMemory(); goto release; }
    if (o.overflow) { fail("an item's bytes out of range (2**62 or more)"); goto release; }
    for (int j = 0; j < 5; j++)
        if (_PyBytes_Resize(&cols[j], (Py_ssize_t)o.n * 8) < 0) goto release;
    result = Py_BuildValue("(OOOOOLLLO)", cols[0], cols[1], cols[2], cols[3], cols[4], (long long)spared,
                           (long long)o.total_work, (long long)total_dups, o.one_size ? Py_True : Py_False);
release:
    free(k); free(served); free(seen); free(pos); free(o.dense); free(o.ksize);
    for (int j = 0; j < 5; j++) Py_XDECREF(cols[j]);
    for (int j = 0; j < NBUF; j++)
        if (buf[j].obj) PyBuffer_Release(&buf[j]);
    return result;
}

/* flat(lists, field): the lists of a list laid end to end, as int64 bytes: (starts, values); each value
 * an int, or with field >= 0 that entry of a tuple */
static PyObject *flat(PyObject *self, PyObject *args) {
    PyObject *lists, *starts = NULL, *values = NULL;
    Py_ssize_t field;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &lists, &field)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(lists), total = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *xs = PyList_GET_ITEM(lists, j);
        if (!PyList_Check(xs)) {
            PyErr_SetString(PyExc_TypeError, "flat: a list of lists");
            return NULL;
        }
        total += PyList_GET_SIZE(xs);
    }
    if (!(starts = PyBytes_FromStringAndSize(NULL, (n + 1) * 8)) ||
        !(values = PyBytes_FromStringAndSize(NULL, total * 8)))
        goto fail;
    int64_t *s = (int64_t *)PyBytes_AS_STRING(starts), *v = (int64_t *)PyBytes_AS_STRING(values);
    Py_ssize_t at = 0;
    s[0] = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *xs = PyList_GET_ITEM(lists, j);
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(xs); i++) {
            PyObject *x = PyList_GET_ITEM(xs, i);
            if (field >= 0) {
                if (!PyTuple_Check(x) || PyTuple_GET_SIZE(x) <= field) {
                    PyErr_SetString(PyExc_TypeError, "flat: tuples of that many entries");
                    goto fail;
                }
                x = PyTuple_GET_ITEM(x, field);
            }
            if (!PyLong_CheckExact(x) && !PyBool_Check(x)) {
                PyErr_SetString(PyExc_TypeError, "flat: ints");
                goto fail;
            }
            long long value = PyLong_AsLongLong(x);
            if (value == -1 && PyErr_Occurred()) goto fail;
            v[at++] = value;
        }
        s[j + 1] = at;
    }
    PyObject *out = PyTuple_Pack(2, starts, values);
    Py_DECREF(starts);
    Py_DECREF(values);
    return out;
fail:
    Py_XDECREF(starts);
    Py_XDECREF(values);
    return NULL;
}

static PyMethodDef methods[] = {
    {"lookups", lookups, METH_VARARGS,
     "lookups(bgroup, bcombined, bstart, iplace, ikey, ikeyed, itokens, rgroup, rstart, rends, gstart, distinct, "
     "served, row) -> (keys, sizes, work, groups, dups, spared, work_total, dups_total, one_size)"},
    {"flat", flat, METH_VARARGS, "flat(lists, field) -> (starts, values): int64 bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_behind",
                                    "The lookups of a cache behind a prefix cache, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__behind(void) { return PyModule_Create(&module); }
