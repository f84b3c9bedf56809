// numpy dtypes of the MX x4 packed types: float8_e4m3fn_x4, float8_e5m2_x4 (4 bytes) and
// float4_e2m1fn_x4 (2 bytes), registered as numpy *user dtypes* (PyArray_RegisterDataType).
//
// They are opaque bit containers. An element is four fp8/fp4 codes packed into one unsigned
// word, element 0 in the lowest bits; a scalar holds that word. numpy can copy, compare (==,
// !=, as bits), sort (as unsigned bits), test for nonzero and bit-cast them to and from the
// unsigned integer of the same width; there is deliberately no arithmetic and no float cast
// (nki.host_dtypes.static_cast unpacks and packs values).
//
// Built and loaded by nki/hostx4/__init__.py, which keys the build by this file's hash.

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <numpy/ufuncobject.h>

#if NPY_ABI_VERSION < 0x02000000
#define PyArray_DescrProto PyArray_Descr   // numpy 1.x registers the descriptor itself
#endif

#define N_FORMATS 3

typedef struct {
    const char *name;         // the scalar type's __name__ (and str() of its dtype)
    const char *qualname;     // tp_name: module-qualified
    int width;                // bytes per packed element
    int typenum;              // numpy's number for the registered dtype
    PyTypeObject *type;       // the scalar type
    PyArray_ArrFuncs funcs;
    PyArray_DescrProto proto;
} Format;

static Format formats[N_FORMATS] = {
    {"float8_e4m3fn_x4", "nki.hostx4.float8_e4m3fn_x4", 4, -1, NULL},
    {"float8_e5m2_x4", "nki.hostx4.float8_e5m2_x4", 4, -1, NULL},
    {"float4_e2m1fn_x4", "nki.hostx4.float4_e2m1fn_x4", 2, -1, NULL},
};

// The scalar: the packed word right after the object header (numpy's scalar_value() reads a
// user dtype's scalar there), as a 32- or 16-bit integer so either width sits at that address.
typedef struct {
    PyObject_HEAD
    union {
        npy_uint32 w32;
        npy_uint16 w16;
    } bits;
} X4Scalar;

static Format *format_of_type(PyTypeObject *type) {
    for (int i = 0; i < N_FORMATS; i++) {
        if (formats[i].type == type) return &formats[i];
    }
    return NULL;
}

static npy_uint32 scalar_bits(PyObject *obj, const Format *f) {
    X4Scalar *s = (X4Scalar *)obj;
    return f->width == 4 ? s->bits.w32 : s->bits.w16;
}

static PyObject *scalar_new(const Format *f, npy_uint32 bits) {
    PyObject *obj = f->type->tp_alloc(f->type, 0);
    if (obj == NULL) return NULL;
    X4Scalar *s = (X4Scalar *)obj;
    if (f->width == 4) s->bits.w32 = bits;
    else s->bits.w16 = (npy_uint16)bits;
    return obj;
}

// ---- the bits of a Python object: a scalar of the same format, or an int of the bits

static int bits_from_object(PyObject *obj, const Format *f, npy_uint32 *out) {
    if (Py_TYPE(obj) == f->type) {
        *out = scalar_bits(obj, f);
        return 0;
    }
    if (format_of_type(Py_TYPE(obj)) != NULL) {
        PyErr_Format(PyExc_TypeError, "a %s value cannot hold a %s value (different element "
                     "formats); convert with nki.host_dtypes.static_cast", f->name,
                     format_of_type(Py_TYPE(obj))->name);
        return -1;
    }
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s holds four packed values as the bits of one "
                     "unsigned %d-bit int; got %.100s (pack values with "
                     "nki.host_dtypes.static_cast)", f->name, 8 * f->width,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    unsigned long long limit = f->width == 4 ? 0xFFFFFFFFull : 0xFFFFull;
    if ((v == (unsigned long long)-1 && PyErr_Occurred()) || v > limit) {
        PyErr_Clear();
        PyErr_Format(PyExc_OverflowError, "%R does not fit the %d bits of %s", obj,
                     8 * f->width, f->name);
        return -1;
    }
    *out = (npy_uint32)v;
    return 0;
}

// ---- the scalar type's slots

static PyObject *x4_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    const Format *f = format_of_type(type);
    PyObject *arg = NULL;
    npy_uint32 bits = 0;
    if (f == NULL) {
        PyErr_SetString(PyExc_TypeError, "unknown x4 type");
        return NULL;
    }
    if ((kwds != NULL && PyDict_Size(kwds) != 0) ||
        !PyArg_UnpackTuple(args, f->name, 0, 1, &arg)) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%s() takes the packed bits as one int", f->name);
        return NULL;
    }
    if (arg != NULL && bits_from_object(arg, f, &bits) < 0) return NULL;
    return scalar_new(f, bits);
}

static void x4_dealloc(PyObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    type->tp_free(self);
    Py_DECREF(type);      // instances of a heap type own a reference to it
}

static PyObject *x4_repr(PyObject *self) {
    const Format *f = format_of_type(Py_TYPE(self));
    char text[16];
    snprintf(text, sizeof text, f->width == 4 ? "0x%08x" : "0x%04x",
             (unsigned)scalar_bits(self, f));
    return PyUnicode_FromString(text);
}

static Py_hash_t x4_hash(PyObject *self) {
    Py_hash_t h = (Py_hash_t)scalar_bits(self, format_of_type(Py_TYPE(self)));
    return h == -1 ? -2 : h;   // -1 means an error (possible where Py_hash_t is 32 bits)
}

static PyObject *x4_richcompare(PyObject *a, PyObject *b, int op) {
    // == and != between scalars of one format compare bits; anything else is not defined
    if (Py_TYPE(a) != Py_TYPE(b) || (op != Py_EQ && op != Py_NE)) Py_RETURN_NOTIMPLEMENTED;
    const Format *f = format_of_type(Py_TYPE(a));
    int equal = scalar_bits(a, f) == scalar_bits(b, f);
    return PyBool_FromLong(op == Py_EQ ? equal : !equal);
}

static PyObject *x4_int(PyObject *self) {
    return PyLong_FromUnsignedLong(scalar_bits(self, format_of_type(Py_TYPE(self))));
}

static PyObject *x4_float(PyObject *self) {
    PyErr_Format(PyExc_TypeError, "%s packs four values into one element; unpack them with "
                 "nki.host_dtypes.static_cast(x, numpy.float32)",
                 format_of_type(Py_TYPE(self))->name);
    return NULL;
}

static int x4_bool(PyObject *self) {
    return scalar_bits(self, format_of_type(Py_TYPE(self))) != 0;
}

static int x4_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    // own buffer slot: numpy's generic one assumes the layout of its builtin scalars
    const Format *f = format_of_type(Py_TYPE(self));
    return PyBuffer_FillInfo(view, self, &((X4Scalar *)self)->bits, f->width, 1, flags);
}

static PyType_Slot scalar_slots[] = {
    {Py_tp_new, x4_tp_new},
    {Py_tp_dealloc, x4_dealloc},
    {Py_tp_repr, x4_repr},
    {Py_tp_str, x4_repr},
    {Py_tp_hash, x4_hash},
    {Py_tp_richcompare, x4_richcompare},
    {Py_nb_int, x4_int},
    {Py_nb_float, x4_float},
    {Py_nb_bool, x4_bool},
    {Py_bf_getbuffer, x4_getbuffer},
    {Py_tp_doc, "A host element of an MX x4 type: four fp8/fp4 codes packed in one unsigned "
                "word, element 0 in the lowest bits. x4(bits) makes one from the int of its "
                "bits; int(x) reads them."},
    {0, NULL},
};

// ---- numpy's per-dtype functions (arrays may be unaligned or byte-swapped)

static npy_uint32 load_bits(const void *data, int width, int swap) {
    if (width == 4) {
        npy_uint32 v;
        memcpy(&v, data, 4);
        return swap ? (v >> 24) | ((v >> 8) & 0xFF00u) | ((v << 8) & 0xFF0000u) | (v << 24) : v;
    }
    npy_uint16 v;
    memcpy(&v, data, 2);
    return swap ? (npy_uint16)((v >> 8) | (v << 8)) : v;
}

static void store_bits(void *data, npy_uint32 bits, int width, int swap) {
    if (width == 4) {
        npy_uint32 v = load_bits(&bits, 4, swap);
        memcpy(data, &v, 4);
    } else {
        npy_uint16 v = (npy_uint16)bits;
        v = (npy_uint16)load_bits(&v, 2, swap);
        memcpy(data, &v, 2);
    }
}

static int is_swapped(void *arr) {
    return arr != NULL && !PyArray_ISNBO(PyArray_DESCR((PyArrayObject *)arr)->byteorder);
}

// getitem/setitem per format, the rest per width: generated below, so no function needs the
// array argument (numpy passes NULL or a stand-in in some paths) to know its format
static PyObject *getitem(const Format *f, void *data, void *arr) {
    return scalar_new(f, load_bits(data, f->width, is_swapped(arr)));
}

static int setitem(const Format *f, PyObject *item, void *data, void *arr) {
    npy_uint32 bits;
    if (bits_from_object(item, f, &bits) < 0) return -1;
    store_bits(data, bits, f->width, is_swapped(arr));
    return 0;
}

static void copyswapn(char *dst, npy_intp dstride, const char *src, npy_intp sstride,
                      npy_intp n, int swap, int width) {
    for (npy_intp i = 0; i < n; i++) {
        char *d = dst + i * dstride;
        if (src != NULL) memmove(d, src + i * sstride, width);
        if (swap) store_bits(d, load_bits(d, width, 1), width, 0);
    }
}

static void equal_loop(char **args, npy_intp const *dims, npy_intp const *steps, int width,
                       int want_equal) {
    for (npy_intp i = 0; i < dims[0]; i++) {
        int same = memcmp(args[0] + i * steps[0], args[1] + i * steps[1], width) == 0;
        *(npy_bool *)(args[2] + i * steps[2]) = (npy_bool)(same == want_equal);
    }
}

#define PER_FORMAT(I)                                                                      \
    static PyObject *getitem_##I(void *data, void *arr) {                                 \
        return getitem(&formats[I], data, arr);                                           \
    }                                                                                      \
    static int setitem_##I(PyObject *item, void *data, void *arr) {                       \
        return setitem(&formats[I], item, data, arr);                                     \
    }

#define PER_WIDTH(W)                                                                       \
    static void copyswapn_##W(void *dst, npy_intp dstride, void *src, npy_intp sstride,   \
                              npy_intp n, int swap, void *arr) {                           \
        copyswapn(dst, dstride, src, sstride, n, swap, W);                                 \
    }                                                                                      \
    static void copyswap_##W(void *dst, void *src, int swap, void *arr) {                 \
        copyswapn(dst, 0, src, 0, 1, swap, W);                                             \
    }                                                                                      \
    static npy_bool nonzero_##W(void *data, void *arr) {                                  \
        return load_bits(data, W, 0) != 0;                                                 \
    }                                                                                      \
    /* sorting orders elements as unsigned bits */                                         \
    static int compare_##W(const void *a, const void *b, void *arr) {                     \
        npy_uint32 x = load_bits(a, W, is_swapped(arr)), y = load_bits(b, W, is_swapped(arr)); \
        return x < y ? -1 : x > y;                                                         \
    }                                                                                      \
    /* legacy casts get aligned, contiguous, native-order buffers: a copy of the bits */   \
    static void bitcast_##W(void *from, void *to, npy_intp n, void *fa, void *ta) {      \
        memmove(to, from, (size_t)n * W);                                                  \
    }                                                                                      \
    static void equal_##W(char **args, npy_intp const *dims, npy_intp const *steps,       \
                          void *data) {                                                    \
        equal_loop(args, dims, steps, W, 1);                                               \
    }                                                                                      \
    static void not_equal_##W(char **args, npy_intp const *dims, npy_intp const *steps,   \
                              void *data) {                                                \
        equal_loop(args, dims, steps, W, 0);                                               \
    }

PER_FORMAT(0)
PER_FORMAT(1)
PER_FORMAT(2)
PER_WIDTH(4)
PER_WIDTH(2)

typedef struct {
    PyArray_GetItemFunc *getitem;
    PyArray_SetItemFunc *setitem;
} ItemFuncs;

static const ItemFuncs item_funcs[N_FORMATS] = {
    {getitem_0, setitem_0}, {getitem_1, setitem_1}, {getitem_2, setitem_2}};

// ---- registration

static void fill_arrfuncs(Format *f, int i) {
    PyArray_InitArrFuncs(&f->funcs);
    f->funcs.getitem = item_funcs[i].getitem;
    f->funcs.setitem = item_funcs[i].setitem;
    f->funcs.copyswapn = f->width == 4 ? copyswapn_4 : copyswapn_2;
    f->funcs.copyswap = f->width == 4 ? copyswap_4 : copyswap_2;
    f->funcs.nonzero = f->width == 4 ? nonzero_4 : nonzero_2;
    f->funcs.compare = f->width == 4 ? compare_4 : compare_2;
}

static int register_dtype(Format *f, int i, PyObject *bases) {
    PyType_Spec spec = {f->qualname, sizeof(X4Scalar), 0, Py_TPFLAGS_DEFAULT, scalar_slots};
    f->type = (PyTypeObject *)PyType_FromSpecWithBases(&spec, bases);
    if (f->type == NULL) return -1;
    fill_arrfuncs(f, i);
    PyArray_DescrProto proto = {PyObject_HEAD_INIT(&PyArrayDescr_Type)};
    proto.typeobj = f->type;
    proto.kind = 'V';          // opaque bits, as ml_dtypes' bfloat16 reports too
    proto.type = 'V';
    proto.byteorder = '=';
    proto.flags = NPY_USE_GETITEM | NPY_USE_SETITEM;
    proto.elsize = f->width;
    proto.alignment = f->width;
    proto.f = &f->funcs;
    proto.hash = -1;
    f->proto = proto;          // numpy 1.x keeps a pointer to it: it must live forever
    f->typenum = PyArray_RegisterDataType(&f->proto);
    return f->typenum < 0 ? -1 : 0;
}

static int register_casts(const Format *f) {
    // unsafe casts only (no PyArray_RegisterCanCast): ufuncs never reach integer loops
    int uint = f->width == 4 ? NPY_UINT32 : NPY_UINT16;
    PyArray_VectorUnaryFunc *cast = f->width == 4 ? bitcast_4 : bitcast_2;
    PyArray_Descr *self = PyArray_DescrFromType(f->typenum);
    PyArray_Descr *other = PyArray_DescrFromType(uint);
    int rc = (self == NULL || other == NULL ||
              PyArray_RegisterCastFunc(self, uint, cast) < 0 ||
              PyArray_RegisterCastFunc(other, f->typenum, cast) < 0) ? -1 : 0;
    Py_XDECREF(self);
    Py_XDECREF(other);
    return rc;
}

static int register_loop(PyObject *numpy, const char *name, PyUFuncGenericFunction loop,
                         int typenum) {
    int types[3] = {typenum, typenum, NPY_BOOL};
    PyObject *ufunc = PyObject_GetAttrString(numpy, name);
    if (ufunc == NULL) return -1;
    int rc = PyUFunc_RegisterLoopForType((PyUFuncObject *)ufunc, typenum, loop, types, NULL);
    Py_DECREF(ufunc);
    return rc;
}

static int publish(const Format *f, PyObject *module, PyObject *numpy) {
    // x4.dtype, numpy.dtype("float8_e4m3fn_x4") and the module's attribute
    PyArray_Descr *descr = PyArray_DescrFromType(f->typenum);
    PyObject *sctypes = PyObject_GetAttrString(numpy, "sctypeDict");
    int rc = (descr == NULL || sctypes == NULL ||
              PyObject_SetAttrString((PyObject *)f->type, "dtype", (PyObject *)descr) < 0 ||
              PyDict_SetItemString(sctypes, f->name, (PyObject *)f->type) < 0 ||
              PyModule_AddObjectRef(module, f->name, (PyObject *)f->type) < 0) ? -1 : 0;
    Py_XDECREF(descr);
    Py_XDECREF(sctypes);
    return rc;
}

static int register_all(PyObject *module) {
    PyObject *numpy = PyImport_ImportModule("numpy");
    PyObject *bases = PyTuple_Pack(1, (PyObject *)&PyGenericArrType_Type);
    int rc = numpy != NULL && bases != NULL ? 0 : -1;
    for (int i = 0; rc == 0 && i < N_FORMATS; i++) {
        Format *f = &formats[i];
        int wide = f->width == 4;
        rc = (register_dtype(f, i, bases) < 0 || register_casts(f) < 0 ||
              register_loop(numpy, "equal", wide ? equal_4 : equal_2, f->typenum) < 0 ||
              register_loop(numpy, "not_equal", wide ? not_equal_4 : not_equal_2,
                            f->typenum) < 0 ||
              publish(f, module, numpy) < 0) ? -1 : 0;
    }
    Py_XDECREF(numpy);
    Py_XDECREF(bases);
    return rc;
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_nki_x4dtype",
    "numpy user dtypes of the MX x4 packed types (see nki.hostx4).", -1, NULL,
};

PyMODINIT_FUNC PyInit__nki_x4dtype(void) {
    import_array();
    import_umath();
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    if (register_all(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
