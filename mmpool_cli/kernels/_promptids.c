/* Each request's prompt ids, its items' runs in place: the compiled twin of engines/sglang/prompt_ids.py's
 * place (its loop over a prompt's segments), which stays the reference; the tests
 * (tests/engines/sglang/test_prompt_ids.py, tests/kernels/test_promptids.py) keep the two equal.
 *
 * assemble(segments, groups, tokens, padded, make, wrap) -> (placed, redo), for each request r:
 *   segments[r]  its prompt's segments (a list: a text run as an array('q') of ids, an item as its kind,
 *                a str), or None where it has none
 *   groups[r]    its items, a list of (index, item): item.kind, item.key (None: unkeyed)
 *   tokens       each item's tokens, by index (tokens[index])
 *   padded       the items' runs made so far, by (item.key, or index where it is None; tokens[index]):
 *                a run is looked up there, else make(item, index) makes it (an array('q')) and it is kept
 *   wrap         the ids before an item's pad run in its run
 * placed[r] is (ids, offsets) where every item is placed in turn, in the prompt's order, at its kind: ids
 * an array('q'), offsets [(index, [(start, end)])] of each item's pad run (end inclusive); None where it
 * has no segments, or its items are not the prompt's (a kind differs, or the counts do), and where it
 * holds what only the reference handles alike (a segment neither str nor array('q'), an entry not a
 * 2-tuple, a token count not an int64): redo lists those requests, for the reference to place.
 * (Made first and placed after, request by request, the segments of all run faster than interleaved:
 * each loop keeps its own data in the caches.)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static PyObject *array_type, *zero, *s_kind, *s_key; /* zero: array('q', [0]) */

/* the request's ids so far: the first len of an array('q') of cap ids, sliced off as its ids (one copy) */
typedef struct {
    PyObject *arr;
    Py_buffer view;
    int64_t *ids;
    Py_ssize_t len, cap;
} Scratch;

static void drop(Scratch *s) {
    if (!s->arr) return;
    PyBuffer_Release(&s->view);
    Py_CLEAR(s->arr);
}

/* room for n more ids */
static int reserve(Scratch *s, Py_ssize_t n) {
    if (n <= s->cap - s->len) return 0;
    if (n > PY_SSIZE_T_MAX / 16 - s->len) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t cap = s->cap ? s->cap : 1024;
    while (cap - s->len < n) cap *= 2; /* below twice len + n: its bytes fit */
    PyObject *arr = PySequence_Repeat(zero, cap);
    if (!arr) return -1;
    Py_buffer view;
    if (PyObject_GetBuffer(arr, &view, PyBUF_WRITABLE) < 0) {
        Py_DECREF(arr);
        return -1;
    }
    if (s->len) memcpy(view.buf, s->ids, (size_t)s->len * 8);
    drop(s);
    s->arr = arr;
    s->view = view;
    s->ids = view.buf;
    s->cap = cap;
    return 0;
}

/* appends obj's ids where it is an array('q'): 0, 1 where it is not one, -1 on an error */
static int extend(Scratch *s, PyObject *obj) {
    if (!PyObject_TypeCheck(obj, (PyTypeObject *)array_type)) return 1;
    Py_buffer b;
    if (PyObject_GetBuffer(obj, &b, PyBUF_FORMAT) < 0) return -1;
    int ok = b.itemsize == 8 && b.format && strcmp(b.format, "q") == 0;
    int rc = ok ? 0 : 1;
    if (ok && b.len) {
        Py_ssize_t n = b.len / 8;
        rc = reserve(s, n);
        if (!rc) {
            memcpy(s->ids + s->len, b.buf, (size_t)b.len);
            s->len += n;
        }
    }
    PyBuffer_Release(&b);
    return rc;
}

/* the ids made so far as an array('q') of their own */
static PyObject *as_array(const Scratch *s) {
    return s->arr ? PySequence_GetSlice(s->arr, 0, s->len) : PySequence_Repeat(zero, 0);
}

/* (index, [(start, end)]) */
static PyObject *offset(PyObject *index, int64_t start, int64_t end) {
    PyObject *a = PyLong_FromLongLong(start), *b = PyLong_FromLongLong(end);
    PyObject *run = a && b ? PyTuple_Pack(2, a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    PyObject *runs = run ? PyList_New(1) : NULL;
    if (!runs) {
        Py_XDECREF(run);
        return NULL;
    }
    PyList_SET_ITEM(runs, 0, run);
    PyObject *entry = PyTuple_Pack(2, index, runs);
    Py_DECREF(runs);
    return entry;
}

/* tokens[index]: a list's entry read directly where it is one */
static PyObject *count_of(PyObject *tokens, PyObject *index) {
    if (PyList_CheckExact(tokens) && PyLong_CheckExact(index)) {
        Py_ssize_t i = PyLong_AsSsize_t(index);
        if (i >= 0 && i < PyList_GET_SIZE(tokens)) return Py_NewRef(PyList_GET_ITEM(tokens, i));
        if (i == -1 && PyErr_Occurred()) PyErr_Clear(); /* past Py_ssize_t: the list's own error below */
    }
    return PyObject_GetItem(tokens, index);
}

/* places one item, the group's next (index, item) pair, whose kind the prompt names: 0 placed, 1 only the
 * reference handles it alike, -1 on an error. Its run comes from padded (made by make where missing). */
static int place_item(Scratch *s, PyObject *pair, PyObject *tokens, PyObject *padded, PyObject *make, int64_t wrap,
                      PyObject *offs) {
    PyObject *index = PyTuple_GET_ITEM(pair, 0), *item = PyTuple_GET_ITEM(pair, 1);
    PyObject *key = PyObject_GetAttr(item, s_key);
    if (!key) return -1;
    PyObject *count = count_of(tokens, index);
    if (!count) {
        Py_DECREF(key);
        return -1;
    }
    PyObject *padkey = PyTuple_Pack(2, key == Py_None ? index : key, count);
    Py_DECREF(key);
    if (!padkey) {
        Py_DECREF(count);
        return -1;
    }
    int rc = -1;
    PyObject *run = PyDict_GetItemWithError(padded, padkey);
    if (run) Py_INCREF(run);
    else if (!PyErr_Occurred()) {
        run = PyObject_CallFunctionObjArgs(make, item, index, NULL);
        if (run && PyDict_SetItem(padded, padkey, run) < 0) Py_CLEAR(run);
    }
    if (!run) goto done;
    rc = 1;
    int overflow = 0;
    long long n = PyLong_CheckExact(count) ? PyLong_AsLongLongAndOverflow(count, &overflow) : LLONG_MIN;
    int64_t start, end;
    if (n == LLONG_MIN || overflow || __builtin_add_overflow((int64_t)s->len, wrap, &start) ||
        __builtin_add_overflow(start, (int64_t)n - 1, &end))
        goto done; /* not an int64 count: the reference's arithmetic */
    rc = extend(s, run);
    if (rc) goto done;
    rc = -1;
    PyObject *entry = offset(index, start, end);
    if (!entry) goto done;
    if (PyList_Append(offs, entry) == 0) rc = 0;
    Py_DECREF(entry);
done:
    Py_XDECREF(run);
    Py_DECREF(padkey);
    Py_DECREF(count);
    return rc;
}

/* one request: (ids, offsets), None where its items are not placed, Ellipsis for the reference; NULL on an
 * error */
static PyObject *place(Scratch *s, PyObject *segs, PyObject *group, PyObject *tokens, PyObject *padded, PyObject *make,
                       int64_t wrap) {
    if (segs == Py_None) Py_RETURN_NONE;
    if (!(PyList_CheckExact(segs) || PyTuple_CheckExact(segs)) || !PyList_CheckExact(group))
        return Py_NewRef(Py_Ellipsis);
    s->len = 0;
    PyObject *offs = PyList_New(0);
    if (!offs) return NULL;
    Py_ssize_t placed = 0;
    int rc = 0;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(segs) && !rc; k++) {
        PyObject *seg = PySequence_Fast_GET_ITEM(segs, k);
        if (!PyUnicode_Check(seg)) {
            rc = extend(s, seg); /* a text run */
            continue;
        }
        if (placed > PyList_GET_SIZE(group)) {
            rc = 1; /* the group shrank under make */
            break;
        }
        if (placed == PyList_GET_SIZE(group)) {
            placed = -1; /* more items in the prompt than the request's */
            break;
        }
        PyObject *pair = PyList_GET_ITEM(group, placed);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            rc = 1;
            break;
        }
        /* held: a kind's comparison and make run Python code */
        Py_INCREF(seg);
        Py_INCREF(pair);
        PyObject *kind = PyObject_GetAttr(PyTuple_GET_ITEM(pair, 1), s_kind);
        int differs = kind ? PyObject_RichCompareBool(kind, seg, Py_NE) : -1;
        Py_XDECREF(kind);
        if (differs) {
            rc = differs < 0 ? -1 : 0;
            placed = -1; /* the prompt's item is of another kind */
        } else {
            placed++;
            rc = place_item(s, pair, tokens, padded, make, wrap, offs);
        }
        Py_DECREF(pair);
        Py_DECREF(seg);
        if (placed < 0) break;
    }
    if (rc || placed != PyList_GET_SIZE(group)) {
        Py_DECREF(offs);
        if (rc < 0) return NULL;
        if (rc > 0) return Py_NewRef(Py_Ellipsis);
        Py_RETURN_NONE;
    }
    PyObject *ids = as_array(s);
    if (!ids) {
        Py_DECREF(offs);
        return NULL;
    }
    PyObject *out = PyTuple_Pack(2, ids, offs);
    Py_DECREF(ids);
    Py_DECREF(offs);
    return out;
}

static PyObject *assemble(PyObject *self, PyObject *args) {
    PyObject *segments, *groups, *tokens, *padded, *make;
    long long wrap;
    if (!PyArg_ParseTuple(args, "O!O!OO!OL:assemble", &PyList_Type, &segments, &PyList_Type, &groups, &tokens,
                          &PyDict_Type, &padded, &make, &wrap))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(segments);
    if (PyList_GET_SIZE(groups) != n) {
        PyErr_SetString(PyExc_ValueError, "assemble: one group per request's segments");
        return NULL;
    }
    if (wrap < 0) {
        PyErr_SetString(PyExc_ValueError, "assemble: the wrap's length is negative");
        return NULL;
    }
    Scratch s = {0};
    PyObject *out = PyList_New(n), *redo = PyList_New(0);
    if (!out || !redo) goto fail;
    for (Py_ssize_t r = 0; r < n; r++) {
        /* the lists may change under make: each entry is held while it is used */
        if (r >= PyList_GET_SIZE(segments) || r >= PyList_GET_SIZE(groups)) {
            PyErr_SetString(PyExc_RuntimeError, "assemble: the requests changed while they were placed");
            goto fail;
        }
        PyObject *segs = Py_NewRef(PyList_GET_ITEM(segments, r)), *group = Py_NewRef(PyList_GET_ITEM(groups, r));
        PyObject *got = place(&s, segs, group, tokens, padded, make, (int64_t)wrap);
        Py_DECREF(segs);
        Py_DECREF(group);
        if (got == Py_Ellipsis) {
            Py_DECREF(got);
            PyObject *at = PyLong_FromSsize_t(r);
            got = at && PyList_Append(redo, at) == 0 ? Py_NewRef(Py_None) : NULL;
            Py_XDECREF(at);
        }
        if (!got) goto fail;
        PyList_SET_ITEM(out, r, got);
    }
    drop(&s);
    PyObject *both = PyTuple_Pack(2, out, redo);
    Py_DECREF(out);
    Py_DECREF(redo);
    return both;
fail:
    drop(&s);
    Py_XDECREF(out);
    Py_XDECREF(redo);
    return NULL;
}

static PyMethodDef methods[] = {
    {"assemble", assemble, METH_VARARGS, "Each request's padded prompt ids and its items' offsets."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_promptids",
                                    "Each request's prompt token ids as SGLang pads them, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__promptids(void) {
    PyObject *arrays = PyImport_ImportModule("array");
    if (!arrays) return NULL;
    array_type = PyObject_GetAttrString(arrays, "array");
    Py_DECREF(arrays);
    s_kind = PyUnicode_InternFromString("kind");
    s_key = PyUnicode_InternFromString("key");
    zero = array_type ? PyObject_CallFunction(array_type, "s[i]", "q", 0) : NULL;
    if (!array_type || !zero || !s_kind || !s_key) return NULL;
    return PyModule_Create(&module);
}
