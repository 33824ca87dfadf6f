/* The inner loops of get_scored_items and of get_items' column sorts, for CPython: score
 * columns, sort indexes by a column, build results; and the largest of a snapshot chunk's
 * word ids (max_index).
 *
 * queryd/graph/scoring.py holds the reference of each function in Python and falls back
 * to it whenever this module is missing or a function here returns None (an input it does
 * not take: a value that is not an exact float, a NaN score, a base outside [0, 1]).
 * Results are the Python ones bit for bit: the same IEEE operations in the same order
 * (the build compiles with -ffp-contract=off, so no multiply-add is fused), the same libm
 * pow(), ties ranked in incoming order. tests/projector/graph/test_native.py pins that.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

static PyObject *s_item, *s_score, *s_contradicted_by;
static PyObject *s_fields_set, *s_extra, *s_private;
static PyObject *empty_tuple;

#define DIGIT_BITS 11 /* radix_sort: six passes, and the counts fit in L1 */
#define BUCKETS (1 << DIGIT_BITS)

/* A column of doubles: a "d" buffer (an array('d')) read in place, or a sequence of exact
 * floats copied. */
typedef struct {
    const double *d;
    Py_ssize_t n;
    Py_buffer view;
    int has_view;
    double *owned;
} doubles;

/* 1: open; 0: a value is not an exact float (nothing to close); -1: an error is set. */
static int
doubles_open(doubles *c, PyObject *obj)
{
    memset(c, 0, sizeof *c);
    if (PyObject_CheckBuffer(obj)) {
        if (PyObject_GetBuffer(obj, &c->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            return -1;
        c->has_view = 1;
        if (c->view.itemsize != sizeof(double) || c->view.format == NULL
            || strcmp(c->view.format, "d") != 0) {
            PyBuffer_Release(&c->view);
            c->has_view = 0;
            PyErr_SetString(PyExc_TypeError, "a column buffer must be doubles (\"d\")");
            return -1;
        }
        c->d = c->view.buf;
        c->n = c->view.len / (Py_ssize_t)sizeof(double);
        return 1;
    }
    PyObject *fast = PySequence_Fast(obj, "a column must be a sequence");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    double *out = PyMem_Malloc(sizeof(double) * (size_t)(n + 1));
    if (out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    PyObject **v = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyFloat_CheckExact(v[i])) {
            PyMem_Free(out);
            Py_DECREF(fast);
            return 0;
        }
        out[i] = PyFloat_AS_DOUBLE(v[i]);
    }
    Py_DECREF(fast);
    c->owned = out;
    c->d = out;
    c->n = n;
    return 1;
}

static void
doubles_close(doubles *c)
{
    if (c->has_view)
        PyBuffer_Release(&c->view);
    PyMem_Free(c->owned);
    memset(c, 0, sizeof *c);
}

/* score_columns(auth, conv, imp, ts, wa, wc, wi, base, at, interval) -> list[float] | None
 *
 * (a * wa + c * wc + i * wi) for each row, times base ** ((at - t) / interval) when base
 * is not None: the exponential decay of rows all dated before ``at``. */
static PyObject *
score_columns(PyObject *self, PyObject *args)
{
    PyObject *cols[4];
    doubles col[4];
    double wa, wc, wi, at = 0.0, interval = 1.0, base = 0.0;
    PyObject *base_o, *at_o, *interval_o;
    PyObject *result = NULL;

    if (!PyArg_ParseTuple(args, "OOOOdddOOO:score_columns", &cols[0], &cols[1], &cols[2],
                          &cols[3], &wa, &wc, &wi, &base_o, &at_o, &interval_o))
        return NULL;
    int decay = base_o != Py_None;
    if (decay) {
        base = PyFloat_AsDouble(base_o);
        if (base == -1.0 && PyErr_Occurred())
            return NULL;
        /* Python converts an int in int - float and float / int exactly as these do. */
        at = PyFloat_AsDouble(at_o);
        if (at == -1.0 && PyErr_Occurred())
            return NULL;
        interval = PyFloat_AsDouble(interval_o);
        if (interval == -1.0 && PyErr_Occurred())
            return NULL;
        /* float ** float raises or special-cases outside this range: leave it to Python. */
        if (!(base >= 0.0 && base <= 1.0) || !(interval > 0.0))
            Py_RETURN_NONE;
    }
    int ncols = decay ? 4 : 3, opened = 0;
    Py_ssize_t n = -1;
    for (; opened < ncols; opened++) {
        int got = doubles_open(&col[opened], cols[opened]);
        if (got <= 0) {
            if (got == 0)
                result = Py_NewRef(Py_None);
            goto done;
        }
        if (n >= 0 && col[opened].n != n) {
            PyErr_SetString(PyExc_ValueError, "score_columns: columns differ in length");
            opened++;
            goto done;
        }
        n = col[opened].n;
    }
    result = PyList_New(n);
    if (result == NULL)
        goto done;
    const double *a = col[0].d, *c = col[1].d, *im = col[2].d, *t = decay ? col[3].d : NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        double s = a[i] * wa + c[i] * wc + im[i] * wi;
        if (decay) {
            if (!(t[i] < at)) { /* a row not in the past decays otherwise: Python's path */
                Py_CLEAR(result);
                result = Py_NewRef(Py_None);
                goto done;
            }
            s = s * pow(base, (at - t[i]) / interval);
        }
        PyObject *f = PyFloat_FromDouble(s);
        if (f == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, f);
    }
done:
    for (int k = 0; k < opened; k++)
        doubles_close(&col[k]);
    return result;
}

/* A key whose unsigned order is the ascending order of the doubles (no NaN; -0.0 and 0.0
 * equal, as Python compares them); its complement orders them descending. */
static inline uint64_t
ascending_key(double d)
{
    uint64_t bits;
    if (d == 0.0)
        d = 0.0;
    memcpy(&bits, &d, sizeof bits);
    return (bits & 0x8000000000000000ULL) ? ~bits : bits | 0x8000000000000000ULL;
}

/* Stable LSD radix sort of (keys, idx), DIGIT_BITS a pass, skipping the passes where every
 * key has the same digit. tmp_* are scratch of the same size; returns whichever idx
 * buffer holds the result. */
static int64_t *
radix_sort(Py_ssize_t n, uint64_t *keys, int64_t *idx, uint64_t *tmp_keys, int64_t *tmp_idx)
{
    for (int shift = 0; shift < 64; shift += DIGIT_BITS) {
        Py_ssize_t count[BUCKETS + 1] = {0};
        for (Py_ssize_t i = 0; i < n; i++)
            count[((keys[i] >> shift) & (BUCKETS - 1)) + 1]++;
        if (n == 0 || count[((keys[0] >> shift) & (BUCKETS - 1)) + 1] == n)
            continue; /* one bucket: this pass would not move anything */
        for (int b = 0; b < BUCKETS; b++)
            count[b + 1] += count[b];
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t at = count[(keys[i] >> shift) & (BUCKETS - 1)]++;
            tmp_keys[at] = keys[i];
            tmp_idx[at] = idx[i];
        }
        uint64_t *kt = keys; keys = tmp_keys; tmp_keys = kt;
        int64_t *it = idx; idx = tmp_idx; tmp_idx = it;
    }
    return idx;
}

/* Read ``indexes`` (an int64 "q" buffer or a sequence of ints) into a new int64 array,
 * with room after them for as many again (radix_sort's scratch). */
static int64_t *
read_indexes(PyObject *indexes, Py_ssize_t *n_out)
{
    int64_t *out = NULL;
    if (PyObject_CheckBuffer(indexes)) {
        Py_buffer view;
        if (PyObject_GetBuffer(indexes, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            return NULL;
        if (view.itemsize != sizeof(int64_t) || view.format == NULL
            || strcmp(view.format, "q") != 0) {
            PyErr_SetString(PyExc_TypeError, "an index buffer must be int64 (\"q\")");
        }
        else {
            *n_out = view.len / (Py_ssize_t)sizeof(int64_t);
            out = PyMem_Malloc(sizeof(int64_t) * (size_t)(2 * *n_out + 1));
            if (out == NULL)
                PyErr_NoMemory();
            else
                memcpy(out, view.buf, (size_t)view.len);
        }
        PyBuffer_Release(&view);
        return out;
    }
    PyObject *fast = PySequence_Fast(indexes, "indexes must be a sequence of ints");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    out = PyMem_Malloc(sizeof(int64_t) * (size_t)(2 * n + 1));
    if (out == NULL) {
        PyErr_NoMemory();
    }
    else {
        PyObject **v = PySequence_Fast_ITEMS(fast);
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t x = PyLong_AsSsize_t(v[i]);
            if (x == -1 && PyErr_Occurred()) {
                PyMem_Free(out);
                out = NULL;
                break;
            }
            out[i] = (int64_t)x;
        }
        *n_out = n;
    }
    Py_DECREF(fast);
    return out;
}

/* sort_indexes(values, indexes, descending, keep) -> bytes | None
 *
 * ``indexes`` (None: every index of ``values``) stably sorted by values[i], as
 * sorted(indexes, key=values.__getitem__, reverse=descending) orders them: ties keep their
 * incoming order. The first ``keep`` when keep is not None. The result is native int64s
 * (memoryview(...).cast("q") reads them; no int object each), and may be passed back as
 * ``indexes``, so a multi-key sort chains without leaving C. ``values``: an array('d') or
 * a sequence, indexed only where ``indexes`` point (a pvector is not copied). None: a
 * value is not an exact float or is NaN; Python's sort takes those. */
static PyObject *
sort_indexes(PyObject *self, PyObject *args)
{
    PyObject *values, *indexes, *keep_o, *fast = NULL, *result = NULL;
    int descending;
    Py_ssize_t n = 0;
    int64_t *idx = NULL;
    uint64_t *keys = NULL;
    if (!PyArg_ParseTuple(args, "OOpO:sort_indexes", &values, &indexes, &descending, &keep_o))
        return NULL;
    doubles packed = {0};
    int is_packed = PyObject_CheckBuffer(values);
    if (is_packed) {
        if (doubles_open(&packed, values) < 0)
            return NULL;
    }
    else if (indexes == Py_None || PyList_CheckExact(values) || PyTuple_CheckExact(values)) {
        fast = PySequence_Fast(values, "sort_indexes: values must be a sequence");
        if (fast == NULL)
            return NULL;
    }
    Py_ssize_t size = is_packed ? packed.n
                      : fast ? PySequence_Fast_GET_SIZE(fast) : PySequence_Size(values);
    if (size < 0)
        goto done;
    if (indexes == Py_None) {
        n = size;
        idx = PyMem_Malloc(sizeof(int64_t) * (size_t)(2 * n + 1));
        if (idx == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            idx[i] = i;
    }
    else if ((idx = read_indexes(indexes, &n)) == NULL)
        goto done;
    keys = PyMem_Malloc(sizeof(uint64_t) * (size_t)(2 * n + 1));
    if (keys == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t i = idx[j];
        if (i < 0 || i >= size) {
            PyErr_Format(PyExc_IndexError, "sort_indexes: index %lld out of range",
                         (long long)i);
            goto done;
        }
        double d;
        if (is_packed) {
            d = packed.d[i];
        }
        else {
            PyObject *v = fast ? Py_NewRef(PySequence_Fast_ITEMS(fast)[i])
                               : PySequence_GetItem(values, (Py_ssize_t)i);
            if (v == NULL)
                goto done;
            int is_float = PyFloat_CheckExact(v);
            d = is_float ? PyFloat_AS_DOUBLE(v) : 0.0;
            Py_DECREF(v);
            if (!is_float) {
                result = Py_NewRef(Py_None);
                goto done;
            }
        }
        if (isnan(d)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        uint64_t key = ascending_key(d);
        keys[j] = descending ? ~key : key;
    }
    Py_ssize_t keep = n;
    if (keep_o != Py_None) {
        keep = PyLong_AsSsize_t(keep_o);
        if (keep == -1 && PyErr_Occurred())
            goto done;
        keep = keep < 0 ? 0 : (keep > n ? n : keep);
    }
    int64_t *sorted = radix_sort(n, keys, idx, keys + n, idx + n);
    result = PyBytes_FromStringAndSize((const char *)sorted,
                                       keep * (Py_ssize_t)sizeof(int64_t));
done:
    PyMem_Free(keys);
    PyMem_Free(idx);
    Py_XDECREF(fast);
    doubles_close(&packed);
    return result;
}

/* The byte offset of a slot (``__slots__`` member holding an object) that ``cls`` has. */
static Py_ssize_t
slot_offset(PyTypeObject *cls, PyObject *name)
{
    PyObject *d = _PyType_Lookup(cls, name);
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)
        || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "scored_items: %s has no object slot %R", cls->tp_name,
                     name);
        return -1;
    }
    return ((PyMemberDescrObject *)d)->d_member->offset;
}

static inline void
set_slot(PyObject *obj, Py_ssize_t offset, PyObject *value)
{
    PyObject **p = (PyObject **)((char *)obj + offset);
    PyObject *old = *p;
    *p = Py_NewRef(value);
    Py_XDECREF(old);
}

/* One ScoredItem holding what ScoredItem.model_construct(item=..., score=...) gives it: the
 * three fields, the fields set, no extra, no private attributes. The fields go where any
 * instance attribute goes (CPython's per-class shared keys, no dict of their own until
 * __dict__ is asked for), about half the memory and time of a dict per object. */
static PyObject *
new_scored(PyTypeObject *cls, PyObject *item, PyObject *score, PyObject *fields_set,
           const Py_ssize_t off[3])
{
    PyObject *obj = PyBaseObject_Type.tp_new(cls, empty_tuple, NULL);
    if (obj == NULL)
        return NULL;
    /* The generic setattr, not the class's: pydantic's __setattr__ validates each value. */
    if (PyObject_GenericSetAttr(obj, s_item, item) < 0
        || PyObject_GenericSetAttr(obj, s_score, score) < 0
        || PyObject_GenericSetAttr(obj, s_contradicted_by, Py_None) < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    set_slot(obj, off[0], fields_set);
    set_slot(obj, off[1], Py_None);
    set_slot(obj, off[2], Py_None);
    return obj;
}

/* scored_items(cls, fields_set, items, scores, order) -> list
 *
 * [cls(item=items[i], score=scores[i]) for i in order], built without validation. The
 * objects are allocated in item order (memory then follows the items, which later walks
 * of the result touch) and placed in ``order``'s order. */
static PyObject *
scored_items(PyObject *self, PyObject *args)
{
    PyObject *cls_o, *fields_set, *items, *scores, *order;
    PyObject *fi = NULL, *fs = NULL, *result = NULL;
    Py_ssize_t *pos = NULL;
    int64_t *ord = NULL;
    Py_ssize_t k = 0;
    if (!PyArg_ParseTuple(args, "O!OOOO:scored_items", &PyType_Type, &cls_o, &fields_set,
                          &items, &scores, &order))
        return NULL;
    PyTypeObject *cls = (PyTypeObject *)cls_o;
    Py_ssize_t off[3];
    if ((off[0] = slot_offset(cls, s_fields_set)) < 0 || (off[1] = slot_offset(cls, s_extra)) < 0
        || (off[2] = slot_offset(cls, s_private)) < 0)
        return NULL;
    if (!(cls->tp_flags & Py_TPFLAGS_MANAGED_DICT) && cls->tp_dictoffset == 0) {
        PyErr_Format(PyExc_TypeError, "scored_items: %s has no __dict__", cls->tp_name);
        return NULL;
    }
    fi = PySequence_Fast(items, "scored_items: items must be a sequence");
    fs = fi ? PySequence_Fast(scores, "scored_items: scores must be a sequence") : NULL;
    if (fs == NULL)
        goto done;
    /* ``order``: sort_indexes's int64s (a memoryview cast to "q", sliced or not) or ints */
    if ((ord = read_indexes(order, &k)) == NULL)
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fi);
    if (PySequence_Fast_GET_SIZE(fs) != n) {
        PyErr_SetString(PyExc_ValueError, "scored_items: items and scores differ in length");
        goto done;
    }
    pos = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n > 0 ? n : 1));
    if (pos == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        pos[i] = -1;
    for (Py_ssize_t j = 0; j < k; j++) {
        int64_t i = ord[j];
        if (i < 0 || i >= n || pos[i] >= 0) {
            PyErr_Format(PyExc_ValueError, "scored_items: order holds %lld out of range "
                         "or twice", (long long)i);
            goto done;
        }
        pos[i] = j;
    }
    result = PyList_New(k);
    if (result == NULL)
        goto done;
    PyObject **iv = PySequence_Fast_ITEMS(fi), **sv = PySequence_Fast_ITEMS(fs);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (pos[i] < 0)
            continue;
        PyObject *obj = new_scored(cls, iv[i], sv[i], fields_set, off);
        if (obj == NULL) {
            Py_CLEAR(result); /* slots not yet filled are NULL: list_dealloc skips them */
            goto done;
        }
        PyList_SET_ITEM(result, pos[i], obj);
    }
done:
    PyMem_Free(ord);
    PyMem_Free(pos);
    Py_XDECREF(fi);
    Py_XDECREF(fs);
    return result;
}

/* The largest of `n` items of type T at `buf` into `top` (left at -1 when n is 0). */
#define MAX_OF(T, buf, n, top)                        \
    do {                                              \
        const T *v_ = (const T *)(buf);               \
        T m_ = 0;                                     \
        for (Py_ssize_t i_ = 0; i_ < (n); i_++)       \
            if (v_[i_] > m_)                          \
                m_ = v_[i_];                          \
        if (n)                                        \
            (top) = m_;                               \
    } while (0)

/* max_index(ids) -> int | None: the largest value of an array of unsigned 16- or 32-bit
 * integers (array("H"), array("I") of 4-byte items), read in place; -1 for an empty one.
 * None for any other buffer (the caller takes Python's max). The snapshot decoder checks
 * millions of word ids against its vocabulary with it: max() builds an int object each. */
static PyObject *
max_index(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    const char *format = view.format ? view.format : "B";
    long long top = -1;
    int known = 1;
    if (strcmp(format, "H") == 0 && view.itemsize == 2)
        MAX_OF(uint16_t, view.buf, view.len / 2, top);
    else if ((strcmp(format, "I") == 0 || strcmp(format, "L") == 0) && view.itemsize == 4)
        MAX_OF(uint32_t, view.buf, view.len / 4, top);
    else
        known = 0;
    PyBuffer_Release(&view);
    if (!known)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(top);
}

static PyMethodDef methods[] = {
    {"max_index", max_index, METH_O, "max_index(ids) -> int | None"},
    {"score_columns", score_columns, METH_VARARGS,
     "score_columns(auth, conv, imp, ts, wa, wc, wi, base, at, interval) -> list | None"},
    {"sort_indexes", sort_indexes, METH_VARARGS,
     "sort_indexes(values, indexes, descending, keep) -> bytes (int64) | None"},
    {"scored_items", scored_items, METH_VARARGS,
     "scored_items(cls, fields_set, items, scores, order) -> list"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "The inner loops of get_scored_items, get_items' sorts and the snapshot decoder's id check.", -1, methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    if (!(s_item = PyUnicode_InternFromString("item"))
        || !(s_score = PyUnicode_InternFromString("score"))
        || !(s_contradicted_by = PyUnicode_InternFromString("contradicted_by"))
        || !(s_fields_set = PyUnicode_InternFromString("__pydantic_fields_set__"))
        || !(s_extra = PyUnicode_InternFromString("__pydantic_extra__"))
        || !(s_private = PyUnicode_InternFromString("__pydantic_private__"))
        || !(empty_tuple = PyTuple_New(0)))
        return NULL;
    return PyModule_Create(&module);
}
