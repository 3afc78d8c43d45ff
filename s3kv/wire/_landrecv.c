/* A landing body's receive loop without the interpreter (s3kv/wire/landrecv.py).
 *
 * receive() reads a socket into a list of writable windows (a native batch put's blocks'
 * places in their segment) from a given offset on, and works out each block's CRC-32 right
 * after the read that brought its bytes, while they are still in the CPU's cache: the loop
 * runs with the GIL released, so the event loop goes on meanwhile and nothing of the receive
 * costs the interpreter. It stops at the windows' end, at the peer's end of stream, at an
 * error, when ``stop[0]`` turns non-zero (its caller gave up), or once ``budget_ms`` passed
 * (the caller then goes on receiving the rest on its event loop as before).
 *
 * The CRC is zlib-ng's zng_crc32 (the function the Python package zlib_ng exports; its
 * address comes in as ``crc_fn``), the same CRC-32 as zlib.crc32.
 *
 * Every size is checked against the buffers before the GIL is released: a malformed call is a
 * ValueError, never an out-of-bounds access.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

typedef uint32_t (*crc_fn_t)(uint32_t crc, const uint8_t *buf, uint32_t len);

enum { DONE = 0, ENDED = 1, STOPPED = 2, SLOW = 3, FAILED = 4 };

#define POLL_SLICE_MS 20  /* how often a wait for bytes looks at the stop flag */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct {
    Py_buffer *spans;
    Py_ssize_t nspans;
    const Py_ssize_t *lengths;  /* the blocks' lengths, in order; they add up to the spans' */
    Py_ssize_t nblocks;
    uint32_t *crcs;
    crc_fn_t crc;
    Py_ssize_t block;      /* the block the CRC is in */
    Py_ssize_t block_left; /* its bytes not summed yet */
    Py_ssize_t span;       /* the span the CRC is in */
    Py_ssize_t span_off;   /* and where */
} Summer;

/* sum the next n bytes of the spans into their blocks' CRCs */
static void sum_bytes(Summer *s, Py_ssize_t n)
{
    while (n > 0) {
        while (s->block_left == 0) {  /* the next block that has bytes */
            s->block++;
            s->block_left = s->lengths[s->block];
        }
        while (s->span_off == s->spans[s->span].len) {
            s->span++;
            s->span_off = 0;
        }
        Py_ssize_t k = n;
        if (k > s->block_left) k = s->block_left;
        Py_ssize_t in_span = s->spans[s->span].len - s->span_off;
        if (k > in_span) k = in_span;
        if (k > (Py_ssize_t)0x40000000) k = 0x40000000;
        const uint8_t *p = (const uint8_t *)s->spans[s->span].buf + s->span_off;
        s->crcs[s->block] = s->crc(s->crcs[s->block], p, (uint32_t)k);
        s->block_left -= k;
        s->span_off += k;
        n -= k;
    }
}

static PyObject *receive(PyObject *self, PyObject *args)
{
    int fd;
    PyObject *spans_obj, *lengths_obj;
    Py_ssize_t filled, max_read;
    unsigned long long crc_addr;
    Py_buffer stop;
    long budget_ms;
    (void)self;
    if (!PyArg_ParseTuple(args, "iOnOKnw*l", &fd, &spans_obj, &filled, &lengths_obj,
                          &crc_addr, &max_read, &stop, &budget_ms))
        return NULL;
    PyObject *spans_seq = NULL, *lengths_seq = NULL, *result = NULL;
    Py_buffer *spans = NULL;
    Py_ssize_t *lengths = NULL, got = 0, nspans = 0, nblocks = 0, total = 0, sum = 0;
    uint32_t *crcs = NULL;
    if (stop.len < 1 || crc_addr == 0 || max_read <= 0 || filled < 0 || budget_ms < 0) {
        PyErr_SetString(PyExc_ValueError, "receive: a bad stop flag, crc_fn, max_read, "
                        "filled or budget_ms");
        goto out;
    }
    spans_seq = PySequence_Fast(spans_obj, "spans must be a sequence of writable buffers");
    lengths_seq = PySequence_Fast(lengths_obj, "lengths must be a sequence of ints");
    if (spans_seq == NULL || lengths_seq == NULL) goto out;
    nspans = PySequence_Fast_GET_SIZE(spans_seq);
    nblocks = PySequence_Fast_GET_SIZE(lengths_seq);
    spans = PyMem_Calloc((size_t)nspans + 1, sizeof(Py_buffer));
    lengths = PyMem_Calloc((size_t)nblocks + 1, sizeof(Py_ssize_t));
    crcs = PyMem_Calloc((size_t)nblocks + 1, sizeof(uint32_t));
    if (spans == NULL || lengths == NULL || crcs == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < nspans; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(spans_seq, i), &spans[got],
                               PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
            goto out;
        total += spans[got++].len;
    }
    for (Py_ssize_t i = 0; i < nblocks; i++) {
        lengths[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(lengths_seq, i));
        if (lengths[i] == -1 && PyErr_Occurred()) goto out;
        if (lengths[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "receive: a negative block length");
            goto out;
        }
        sum += lengths[i];
    }
    if (sum != total || filled > total) {
        PyErr_Format(PyExc_ValueError, "receive: blocks of %zd bytes, spans of %zd, %zd "
                     "filled", sum, total, filled);
        goto out;
    }

    Summer s = {spans, nspans, lengths, nblocks, crcs, (crc_fn_t)(uintptr_t)crc_addr,
                -1, 0, 0, 0};
    volatile const char *stopped = (volatile const char *)stop.buf;
    Py_ssize_t pos = filled;   /* bytes of the spans in */
    Py_ssize_t span = 0, off = pos;  /* where the next read goes */
    int status = DONE, err = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t deadline = now_ms() + budget_ms;
    while (span < nspans && off >= spans[span].len) {
        off -= spans[span].len;
        span++;
    }
    if (filled > 0) sum_bytes(&s, filled);  /* the bytes in before the call */
    while (pos < total) {
        if (*stopped) {
            status = STOPPED;
            break;
        }
        Py_ssize_t want = spans[span].len - off;
        if (want > max_read) want = max_read;
        ssize_t n = recv(fd, (char *)spans[span].buf + off, (size_t)want, MSG_DONTWAIT);
        if (n > 0) {
            sum_bytes(&s, n);
            pos += n;
            off += n;
            while (span < nspans && off == spans[span].len) {
                span++;
                off = 0;
            }
            continue;
        }
        if (n == 0) {
            status = ENDED;
            break;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            status = FAILED;
            err = errno;
            break;
        }
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            status = SLOW;
            break;
        }
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, left < POLL_SLICE_MS ? (int)left : POLL_SLICE_MS);
        if (r < 0 && errno != EINTR) {
            status = FAILED;
            err = errno;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *sums = PyList_New(status == DONE ? nblocks : 0);
    if (sums == NULL) goto out;
    for (Py_ssize_t i = 0; status == DONE && i < nblocks; i++) {
        PyObject *v = PyLong_FromUnsignedLong(crcs[i]);
        if (v == NULL) {
            Py_DECREF(sums);
            goto out;
        }
        PyList_SET_ITEM(sums, i, v);
    }
    result = Py_BuildValue("niiN", pos - filled, status, err, sums);
out:
    for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&spans[i]);
    PyMem_Free(spans);
    PyMem_Free(lengths);
    PyMem_Free(crcs);
    Py_XDECREF(spans_seq);
    Py_XDECREF(lengths_seq);
    PyBuffer_Release(&stop);
    return result;
}

static PyMethodDef methods[] = {
    {"receive", receive, METH_VARARGS,
     "receive(fd, spans, filled, lengths, crc_fn, max_read, stop, budget_ms) -> "
     "(received, status, errno, crcs): see s3kv/wire/landrecv.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_landrecv", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__landrecv(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "DONE", DONE) < 0 ||
        PyModule_AddIntConstant(m, "ENDED", ENDED) < 0 ||
        PyModule_AddIntConstant(m, "STOPPED", STOPPED) < 0 ||
        PyModule_AddIntConstant(m, "SLOW", SLOW) < 0 ||
        PyModule_AddIntConstant(m, "FAILED", FAILED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
