/* A run of stored blocks checked and sent without the interpreter (s3kv/wire/blocksend.py).
 *
 * send() takes blocks the store lent as views of memory it maps, each with the CRC-32 it was
 * stored with and the bytes that go before it on the wire (a chunk's size line and the
 * block's record, for a native batch get) and after it (the chunk's CRLF). For each block in
 * turn it works out the CRC, and only if it matches sends head, block and tail in one
 * sendmsg: the bytes the CRC brought into the CPU's cache are the ones the kernel then copies.
 * It never waits: it stops after the last block, before a block whose CRC does not match
 * (nothing of that block is sent: the caller sends a miss instead), at a send error, or when
 * the socket takes no more (then it says how many bytes of the block under way went out, and
 * the caller queues the rest and waits for the socket on its event loop). The GIL is released
 * meanwhile.
 *
 * The CRC is zlib-ng's zng_crc32 (its address comes in as ``crc_fn``, as for _landrecv.c).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

typedef uint32_t (*crc_fn_t)(uint32_t crc, const uint8_t *buf, uint32_t len);

enum { DONE = 0, BAD = 1, FULL = 2, FAILED = 3 };

#define CRC_STEP 0x40000000

static uint32_t crc_of(crc_fn_t crc, const uint8_t *p, Py_ssize_t n)
{
    uint32_t c = 0;
    while (n > 0) {
        Py_ssize_t k = n > CRC_STEP ? CRC_STEP : n;
        c = crc(c, p, (uint32_t)k);
        p += k;
        n -= k;
    }
    return c;
}

/* head, block and tail through the socket while it takes them; *sent: bytes of the three
 * that went out */
static int send_one(int fd, Py_buffer *head, Py_buffer *block, Py_buffer *tail,
                    Py_ssize_t *sent, int *err)
{
    struct iovec all[3] = {{head->buf, (size_t)head->len}, {block->buf, (size_t)block->len},
                           {tail->buf, (size_t)tail->len}};
    Py_ssize_t total = head->len + block->len + tail->len;
    *sent = 0;
    while (*sent < total) {
        struct iovec iov[3];
        int n = 0;
        Py_ssize_t skip = *sent;
        for (int k = 0; k < 3; k++) {
            if (skip >= (Py_ssize_t)all[k].iov_len) {
                skip -= (Py_ssize_t)all[k].iov_len;
                continue;
            }
            iov[n].iov_base = (char *)all[k].iov_base + skip;
            iov[n].iov_len = all[k].iov_len - (size_t)skip;
            skip = 0;
            n++;
        }
        struct msghdr msg = {0};
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)n;
        ssize_t r = sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r > 0) {
            *sent += r;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return FULL;
        *err = r < 0 ? errno : EPIPE;
        return FAILED;
    }
    return DONE;
}

static PyObject *send_blocks(PyObject *self, PyObject *args)
{
    int fd;
    PyObject *heads_obj, *views_obj, *crcs_obj;
    unsigned long long crc_addr;
    Py_buffer tail;
    (void)self;
    if (!PyArg_ParseTuple(args, "iOOOy*K", &fd, &heads_obj, &views_obj, &crcs_obj, &tail,
                          &crc_addr))
        return NULL;
    PyObject *heads_seq = NULL, *views_seq = NULL, *crcs_seq = NULL, *result = NULL;
    Py_buffer *heads = NULL, *views = NULL;
    uint32_t *crcs = NULL;
    Py_ssize_t n = 0, got_heads = 0, got_views = 0;
    if (crc_addr == 0) {
        PyErr_SetString(PyExc_ValueError, "send: no crc_fn");
        goto out;
    }
    heads_seq = PySequence_Fast(heads_obj, "heads must be a sequence of buffers");
    views_seq = PySequence_Fast(views_obj, "views must be a sequence of buffers");
    crcs_seq = PySequence_Fast(crcs_obj, "crcs must be a sequence of ints");
    if (heads_seq == NULL || views_seq == NULL || crcs_seq == NULL) goto out;
    n = PySequence_Fast_GET_SIZE(views_seq);
    if (PySequence_Fast_GET_SIZE(heads_seq) != n || PySequence_Fast_GET_SIZE(crcs_seq) != n) {
        PyErr_SetString(PyExc_ValueError, "send: as many heads and crcs as views, please");
        goto out;
    }
    heads = PyMem_Calloc((size_t)n + 1, sizeof(Py_buffer));
    views = PyMem_Calloc((size_t)n + 1, sizeof(Py_buffer));
    crcs = PyMem_Calloc((size_t)n + 1, sizeof(uint32_t));
    if (heads == NULL || views == NULL || crcs == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(heads_seq, i), &heads[i],
                               PyBUF_C_CONTIGUOUS) < 0)
            goto out;
        got_heads++;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(views_seq, i), &views[i],
                               PyBUF_C_CONTIGUOUS) < 0)
            goto out;
        got_views++;
        unsigned long c = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(crcs_seq, i));
        if (c == (unsigned long)-1 && PyErr_Occurred()) goto out;
        if (c > 0xFFFFFFFFUL) {
            PyErr_SetString(PyExc_ValueError, "send: a CRC-32 above 32 bits");
            goto out;
        }
        crcs[i] = (uint32_t)c;
    }

    crc_fn_t crc = (crc_fn_t)(uintptr_t)crc_addr;
    Py_ssize_t done = 0, partial = 0;
    int status = DONE, err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; done < n; done++) {
        if (crc_of(crc, views[done].buf, views[done].len) != crcs[done]) {
            status = BAD;
            break;
        }
        status = send_one(fd, &heads[done], &views[done], &tail, &partial, &err);
        if (status != DONE) break;
        partial = 0;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nnii", done, partial, status, err);
out:
    for (Py_ssize_t i = 0; i < got_heads; i++) PyBuffer_Release(&heads[i]);
    for (Py_ssize_t i = 0; i < got_views; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(heads);
    PyMem_Free(views);
    PyMem_Free(crcs);
    Py_XDECREF(heads_seq);
    Py_XDECREF(views_seq);
    Py_XDECREF(crcs_seq);
    PyBuffer_Release(&tail);
    return result;
}

static PyMethodDef methods[] = {
    {"send", send_blocks, METH_VARARGS,
     "send(fd, heads, views, crcs, tail, crc_fn) -> "
     "(blocks_sent, bytes_of_next_sent, status, errno): see s3kv/wire/blocksend.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_blocksend", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__blocksend(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "DONE", DONE) < 0 ||
        PyModule_AddIntConstant(m, "BAD", BAD) < 0 ||
        PyModule_AddIntConstant(m, "FULL", FULL) < 0 ||
        PyModule_AddIntConstant(m, "FAILED", FAILED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
